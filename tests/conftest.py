"""Fixtures shared by the training tests."""

from __future__ import annotations

import os

# precision=auto (the default) is decided by a rule, never timed (goldfish.hardware.CpuFeatures.bf16_rule): bf16 with
# usable AMX, or on a CPU with AVX512-BF16 whose class goldfish.hardware.CPU_CLASSES lists as bf16 (AMD Zen 4, the
# project's 2-core machines); fp32 otherwise. The rule also reads oneDNN's ISA cap: capped below avx512_core_bf16, auto
# is fp32. The suite sets that cap so auto resolves to fp32 on every CI machine whatever its CPU class (one set of
# numbers), and oneDNN itself then uses no bf16/AMX instructions; inherited by every subprocess (CLI, torchrun). A
# developer's own cap (e.g. ONEDNN_MAX_CPU_ISA=AVX2 to test the slow path) is kept. tests/test_precision.py injects the
# CPU features to test every resolution of the rule.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
# torch.compile's kernel cache is keyed by the CPU it detects, not by ATEN_CPU_CAPABILITY: under an emulated cap
# (ATEN_CPU_CAPABILITY=avx2 on an AVX-512 machine) kernels cached by an uncapped run are reused and crash (SIGSEGV,
# seen with torch 2.13), so a capped run compiles into a cache of its own
if os.environ.get("ATEN_CPU_CAPABILITY") and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    import getpass  # noqa: E402
    import tempfile  # noqa: E402

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
        tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}_{os.environ['ATEN_CPU_CAPABILITY'].lower()}")

import pytest  # noqa: E402
import torch  # noqa: E402

import train_helpers
from train_helpers import make_prepared


def pytest_runtest_setup(item):
    """Note whether the test about to run (fixtures included) is marked ``dist``: only those may start processes
    (``train_helpers.require_dist_marker``), so ``make test-fast`` (``-m "not slow and not dist"``) stays fast."""
    train_helpers.DIST_MARKED[0] = item.get_closest_marker("dist") is not None


@pytest.fixture
def one_thread():
    """Run a test with one torch thread (bit-identical numerics with the one-thread subprocesses it compares to)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A tiny prepared folder: 16 rows x 32 tokens, vocabulary 64 (see ``train_helpers.make_prepared``)."""
    return make_prepared(tmp_path_factory.mktemp("prepared") / "tiny", rows=16, seq_len=32, vocab=64)
