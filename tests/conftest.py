"""Fixtures shared by the training tests."""

from __future__ import annotations

import os
from pathlib import Path

from workers import worker_threads

# precision=auto (the default) is decided by a rule, never timed (goldfish.hardware.CpuFeatures.bf16_rule): bf16 with
# usable AMX, or on a CPU with AVX512-BF16 whose class goldfish.hardware.CPU_CLASSES lists as bf16 (AMD Zen 4, the
# project's 2-core machines); fp32 otherwise. The rule also reads oneDNN's ISA cap: capped below avx512_core_bf16, auto
# is fp32. The suite sets that cap so auto resolves to fp32 on every CI machine whatever its CPU class (one set of
# numbers), and oneDNN itself then uses no bf16/AMX instructions; inherited by every subprocess (CLI, torchrun). A
# developer's own cap (e.g. ONEDNN_MAX_CPU_ISA=AVX2 to test the slow path) is kept. tests/test_precision.py injects the
# CPU features to test every resolution of the rule.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
# Under pytest-xdist (`make test`: 2 workers on 2 cores) the workers share the CPUs, one thread each here, set before
# torch loads (tests/workers.py): otherwise each worker's in-process training takes every core
# (goldfish.hardware.default_threads) and 2 workers run 4 threads on 2 cores (2026-12-04: a 2-worker run of the suite
# took 1,384 s of CPU so, a run with one thread per process 1,095 s). Inherited by the commands a test starts; a test
# of the defaults removes it (test_eval_distributed); a developer's own OMP_NUM_THREADS is kept.
_threads = worker_threads(os.environ, len(os.sched_getaffinity(0)))
if _threads is not None:
    os.environ["OMP_NUM_THREADS"] = str(_threads)
# torch.compile's kernel cache is keyed by the CPU it detects, not by ATEN_CPU_CAPABILITY: under an emulated cap
# (ATEN_CPU_CAPABILITY=avx2 on an AVX-512 machine) kernels cached by an uncapped run are reused and crash (SIGSEGV,
# seen with torch 2.13), so a capped run compiles into a cache of its own
if os.environ.get("ATEN_CPU_CAPABILITY") and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    import getpass  # noqa: E402
    import tempfile  # noqa: E402

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
        tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}_{os.environ['ATEN_CPU_CAPABILITY'].lower()}"
    )

import pytest  # noqa: E402
import torch  # noqa: E402

import train_helpers  # noqa: E402
from tiers import INTEGRATION  # noqa: E402
from train_helpers import make_prepared  # noqa: E402


# The tiers (Makefile): `make test-unit` is `-m "not slow and not dist and not integration"`. A test is marked
# `integration` when it runs a real pipeline -- trains a model, prepares a real corpus, loads a real model or runs a
# command in a subprocess: by its own @pytest.mark.integration, by tests/tiers.py's list, by using a fixture below
# (which does), or by sharing a module-scoped fixture of its own module with a listed test.
INTEGRATION_FIXTURES = frozenset({"micro_sweep", "data"})

# Under pytest-xdist (`make test`: `-n 2 --dist loadgroup`) each worker is a process of its own with its own module-
# and session-scoped fixtures, so a fixture that trains or prepares something would be paid once per worker its users
# land on. XDIST_GROUPS keeps such modules whole on one worker, in collection order (the scheduler below: xdist's own
# xdist_group suffix does not reach pytest 9.2's node ids): every module with a wider-scoped fixture of its own (but
# CHEAP_MODULE_FIXTURES: a tiny prepared folder), the users of ``micro_sweep`` (a whole experiment, session-scoped) in
# one group, and tests/test_readme_commands.py (its commands share one scratch folder and run in order). A module
# that needs a group and has none is refused at collection (``check_xdist_group``), so the list cannot fall behind.
SESSION_GROUPED = frozenset({"micro_sweep"})
CHEAP_MODULE_FIXTURES = frozenset({("test_faults.py", "data")})
XDIST_GROUPS = {
    f"tests/{name}.py": "micro_sweep"
    for name in ("test_experiment_attacks", "test_experiment_e2e", "test_experiment_utility")
} | {
    f"tests/{name}.py": name
    for name in (
        "test_readme_commands",
        "test_axonn_engine",
        "test_axonn_train",
        "test_canaries",
        "test_data_jsontext",
        "test_data_main_stream",
        "test_data_prepare",
        "test_data_sources",
        "test_data_store",
        "test_data_stream",
        "test_data_tokenizers",
        "test_docs_numbers",
        "test_eval_adversary",
        "test_eval_cli",
        "test_eval_conventions",
        "test_eval_distributed",
        "test_eval_dtype",
        "test_eval_extraction",
        "test_eval_loading",
        "test_experiment_golden",
        "test_experiment_start",
        "test_exposure_sweep",
        "test_exposures",
        "test_faults",
        "test_faults_bounded",
        "test_faults_fooled",
        "test_faults_foreign",
        "test_faults_oneline",
        "test_faults_series",
        "test_golden",
        "test_hf_trainer",
        "test_masks_canonical",
        "test_modelcard",
        "test_parallel_cli",
        "test_parallel_layouts",
        "test_series",
        "test_size_sweep",
        "test_tracking",
    )
}


def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup with the groups of XDIST_GROUPS (a test of another module is scheduled on its own); the
    groups go first, largest first (xdist's loadscope order)."""
    from xdist.scheduler import LoadScopeScheduling

    class Grouped(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return XDIST_GROUPS.get(nodeid.split("::")[0], nodeid)

    return Grouped(config, log) if config.getvalue("dist") == "loadgroup" else None


def check_xdist_group(item) -> None:
    """Refuse a test whose shared fixtures need a group XDIST_GROUPS does not give it (see above)."""
    module = item.nodeid.split("::")[0]
    if not SESSION_GROUPED.isdisjoint(item.fixturenames):
        want = "+".join(sorted(SESSION_GROUPED.intersection(item.fixturenames)))
    elif any((module.rsplit("/", 1)[-1], f) not in CHEAP_MODULE_FIXTURES for f in _module_fixtures(item)):
        want = None  # its own module's group, whatever its name
    else:
        return
    have = XDIST_GROUPS.get(module)
    if have is None or (want is not None and have != want):
        raise pytest.UsageError(
            f"{item.nodeid} shares a costly fixture: tests/conftest.py's XDIST_GROUPS must put "
            f"{module} in group {want or module!r} (one worker runs the fixture once)"
        )


def _module_fixtures(item) -> set[str]:
    """The fixtures of wider than function scope defined in the item's own module that the item uses."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    module = item.nodeid.split("::")[0]
    return {
        name
        for name, defs in info.name2fixturedefs.items()
        if defs and defs[-1].scope != "function" and defs[-1].baseid == module
    }


def pytest_collection_modifyitems(config, items):
    for item in items:
        check_xdist_group(item)
    listed = []
    for item in items:
        names = INTEGRATION.get(item.module.__name__, ())
        if "*" in names or item.originalname in names or item.get_closest_marker("integration") is not None:
            listed.append(item)
    shared = {(item.module.__name__, name) for item in listed for name in _module_fixtures(item)}
    for item in items:
        if (
            item in listed
            or not INTEGRATION_FIXTURES.isdisjoint(item.fixturenames)
            or any((item.module.__name__, name) in shared for name in _module_fixtures(item))
        ):
            item.add_marker(pytest.mark.integration)


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


@pytest.fixture(scope="session")
def micro_sweep(tmp_path_factory):
    """experiments/micro.yaml run for real once per session (prepare -> train -> eval -> attacks -> study report,
    ``train_helpers.MICRO_OVERRIDES``), its model loads and scoring passes counted (``LOADS["first"]``,
    ``SCORED["first"]``): the folder the tests of a real experiment read (test_experiment_e2e.py,
    test_experiment_attacks.py). A test may rerun it in place with the same overrides (finished cells are kept), never
    change it."""
    out = tmp_path_factory.mktemp("micro") / "run"
    assert train_helpers.run_counting_loads(out, "first", *train_helpers.MICRO_OVERRIDES) == 0
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A tiny prepared folder: 16 rows x 32 tokens, vocabulary 64 (see ``train_helpers.make_prepared``)."""
    return make_prepared(tmp_path_factory.mktemp("prepared") / "tiny", rows=16, seq_len=32, vocab=64)


# PNG (and SVG) rendering is most of an experiment's report time (36 figures: 96 % of the slowest runner test), and
# no number depends on it: results.json names the figures a report shows, which the figure builders decide before
# drawing. So in the tests goldfish.eval.plots.save_figure writes a placeholder of each file instead of drawing it;
# the tests marked ``render`` (the plot tests) draw for real. A subprocess (the CLI tests) draws for real too.
PNG_STUB = b"\x89PNG\r\n\x1a\n" + b"placeholder: figure not drawn in the tests (tests/conftest.py)\n"
SVG_STUB = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"><!-- not drawn in the tests --></svg>\n'


def _placeholder_figure(fig, path):
    from goldfish.io import atomic_write_bytes

    path = Path(path)
    atomic_write_bytes(path, PNG_STUB)
    atomic_write_bytes(path.with_suffix(".svg"), SVG_STUB)
    return path


def _fsync_checked_only(fd) -> None:
    """``os.fsync`` in the tests: the descriptor is checked (a closed or bad one raises as fsync would), nothing is
    flushed to the disk."""
    os.fstat(fd if isinstance(fd, int) else fd.fileno())


@pytest.fixture(scope="session", autouse=True)
def _no_fsync():
    """Session-wide, in the test process (not its subprocesses): ``os.fsync`` does not wait for the disk. Every
    atomic write fsyncs its file and folder (goldfish.io), ~500 of them in one small experiment, each a wait of 5-25 ms
    on a busy disk; what they buy -- the data surviving a power cut -- no test can observe (a SIGKILLed process leaves
    its written pages in the page cache, so the kill tests hold either way). The code still calls os.fsync at the same
    places: tests that make it fail (tests/test_faults.py) patch it over this."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "fsync", _fsync_checked_only)
        yield


@pytest.fixture(scope="session", autouse=True)
def _figures_not_drawn():
    """Session-wide (so module- and session-scoped fixtures that run experiments get it too): no figure is drawn."""
    from goldfish.eval import plots

    real = plots.save_figure
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "save_figure", _placeholder_figure)
        yield plots, real


@pytest.fixture(autouse=True)
def _figures_drawn_when_marked(request, _figures_not_drawn):
    """A test marked ``render`` draws its figures (the real ``save_figure``) for its own duration; marked
    ``render("a.png", ...)``, only the figures of those file names (the others stay placeholders)."""
    marker = request.node.get_closest_marker("render")
    if marker is None:
        yield
        return
    plots, real = _figures_not_drawn
    names = set(marker.args)

    def save_figure(fig, path):
        return real(fig, path) if not names or Path(path).name in names else _placeholder_figure(fig, path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "save_figure", save_figure)
        yield
