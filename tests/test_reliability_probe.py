"""The reliability probe's quick subset (``tests/probe/reliability_probe.py --fast``), run as a user runs it.

The probe forks a child per case from one process that imported the toolkit; it runs in a subprocess of its own here
(a pytest process has started torch's thread pools, which a fork must not inherit). The whole probe is run by hand or
in CI with ``.venv/bin/python tests/probe/reliability_probe.py`` (docs/reliability.md).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from train_helpers import REPO, cli_env


@pytest.mark.slow  # about a minute on a loaded 2-core machine; its cases are the fault suite's, run as a user would
def test_the_quick_subset_of_the_reliability_probe_passes():
    probe = subprocess.run(
        [sys.executable, str(REPO / "tests" / "probe" / "reliability_probe.py"), "--fast"],
        env=cli_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    table = probe.stdout + probe.stderr
    assert probe.returncode == 0, table
    summary = [line for line in probe.stdout.splitlines() if line.endswith("cases pass")]
    assert summary and summary[0].split()[0] == summary[0].split()[2] and int(summary[0].split()[0]) >= 30, table


def test_the_probe_holds_at_least_100_cases_across_the_families():
    listing = subprocess.run(
        [sys.executable, str(REPO / "tests" / "probe" / "reliability_probe.py"), "--list"],
        env=cli_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = [line.split() for line in listing.stdout.splitlines() if line.strip() and not line.endswith("cases")]
    families = {row[0] for row in rows}
    assert len(rows) >= 100 and families >= {"1", "2", "3", "4", "6", "7", "8", "9", "10", "11"}, listing.stdout
