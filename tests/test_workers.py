"""The suite's workers share the CPUs (tests/workers.py, set by tests/conftest.py before torch loads)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from workers import worker_threads

XDIST = {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2"}


@pytest.mark.parametrize("cpus, workers, threads", [(2, 2, 1), (8, 2, 4), (16, 3, 5), (1, 2, 1), (4, 1, 4)])
def test_a_worker_takes_its_share_of_the_cpus(cpus, workers, threads):
    assert worker_threads({**XDIST, "PYTEST_XDIST_WORKER_COUNT": str(workers)}, cpus) == threads


def test_outside_xdist_or_with_the_developers_own_setting_nothing_is_set():
    assert worker_threads({}, 2) is None  # one process (make test TEST_WORKERS=0): the toolkit's own default
    assert worker_threads({**XDIST, "OMP_NUM_THREADS": "2"}, 2) is None


@pytest.mark.integration
def test_under_xdist_this_worker_and_its_commands_run_its_share():
    """In `make test` (2 workers): this process's torch and a command it starts use the share conftest set."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("not under pytest-xdist (make test runs 2 workers)")
    share = os.environ["OMP_NUM_THREADS"]
    if worker_threads({**os.environ, "OMP_NUM_THREADS": ""}, len(os.sched_getaffinity(0))) != int(share):
        pytest.skip(f"OMP_NUM_THREADS={share} is the developer's own")
    assert torch.get_num_threads() == int(share)
    child = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == share
