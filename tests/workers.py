"""How the suite shares the CPUs among pytest-xdist workers (read by tests/conftest.py before torch loads)."""

from __future__ import annotations

from collections.abc import Mapping


def worker_threads(environ: Mapping[str, str], cpus: int) -> int | None:
    """The OMP_NUM_THREADS an xdist worker takes: its share of the ``cpus`` it may run on (at least one), or None
    outside xdist and when OMP_NUM_THREADS is set already (the developer's choice is kept)."""
    if not environ.get("PYTEST_XDIST_WORKER") or environ.get("OMP_NUM_THREADS"):
        return None
    workers = environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
    return max(1, cpus // max(1, int(workers) if workers.isdigit() else 1))
