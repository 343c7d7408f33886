"""The machinery of the reliability probe (``reliability_probe.py``): cases, children, checks, fixtures.

Every case runs ``goldfish`` (or a few lines of the toolkit's Python) in a child process forked from the probe, which
imported the toolkit once: a child starts in milliseconds, runs under an address-space limit and a timeout, and its
exit status, stdout, stderr, wall time and peak memory come back as a :class:`Result`. A case passes when it returns
and fails with the :class:`ProbeFailure` (or any exception) it raises.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300.0  # any one child: a case that is bounded finishes far sooner (see BOUNDED_S)
BOUNDED_S = 60.0  # a refusal of bad input comes within this, on a loaded two-core machine
MEMORY_GIB = 4.0  # address space a child may add to what it inherited
BOUNDED_MIB = 1536.0  # peak memory a refusal of bad input may add to the probe's own


class ProbeFailure(AssertionError):
    """What a case found wrong, in one line."""


@dataclasses.dataclass
class Result:
    """What one child did."""

    rc: int  # exit status; -9: killed (timeout or on purpose)
    out: str
    err: str
    seconds: float
    peak_mib: float  # peak resident memory above the probe's own at the fork

    def tail(self, chars: int = 300) -> str:
        text = " | ".join(line for line in self.err.splitlines() if line.strip())
        return text[-chars:] if text else "(no stderr)"


@dataclasses.dataclass
class Case:
    family: str
    name: str
    fn: Callable[["Probe"], None]
    fast: bool  # in the quick subset the pytest wrapper runs


CASES: list[Case] = []


def case(family: str, fast: bool = False) -> Callable:
    """Register a case of ``family`` (its function's name is the case's name)."""

    def register(fn: Callable[["Probe"], None]) -> Callable[["Probe"], None]:
        CASES.append(Case(family, fn.__name__, fn, fast))
        return fn

    return register


# ------------------------------------------------------------------------------------------------ children


def _vm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Child:
    """A forked child running ``fn()`` (its return value, an int or None, is the exit status); :meth:`wait` gives
    its :class:`Result`."""

    def __init__(self, fn: Callable[[], Any], cwd: Path | None = None, stdin: bytes | None = None):
        self.files = [tempfile.TemporaryFile() for _ in range(3)]
        if stdin is not None:
            self.files[0].write(stdin)
            self.files[0].seek(0)
        sys.stdout.flush()
        sys.stderr.flush()
        self.base = _rss_mib()
        self.start = time.monotonic()
        self.pid = os.fork()
        if self.pid == 0:
            self._be_the_child(fn, cwd)

    def _be_the_child(self, fn: Callable[[], Any], cwd: Path | None) -> None:
        code = 1
        try:
            limit = _vm_bytes() + int(MEMORY_GIB * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            for fd, f in enumerate(self.files):
                os.dup2(f.fileno(), fd)
            if cwd is not None:
                os.chdir(cwd)
            value = fn()
            code = value if isinstance(value, int) else 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - reported as the child's stderr
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def wait(self, timeout: float = TIMEOUT_S, kill_when: Callable[[], bool] | None = None) -> Result:
        """Wait for the child; SIGKILL it after ``timeout`` s or the first time ``kill_when()`` is true."""
        status, usage = 0, None
        while True:
            done, status, usage = os.wait4(self.pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() - self.start > timeout or (kill_when is not None and kill_when()):
                os.kill(self.pid, signal.SIGKILL)
                _, status, usage = os.wait4(self.pid, 0)
                break
            time.sleep(0.02)
        seconds = time.monotonic() - self.start
        out, err = (_read(f) for f in self.files[1:])
        for f in self.files:
            f.close()
        peak = max(0.0, usage.ru_maxrss / 1024 - self.base) if usage is not None else 0.0
        return Result(os.waitstatus_to_exitcode(status), out, err, seconds, peak)


def in_child(
    fn: Callable[[], Any],
    *,
    cwd: Path | None = None,
    stdin: bytes | None = None,
    timeout: float = TIMEOUT_S,
    kill_when: Callable[[], bool] | None = None,
) -> Result:
    """Run ``fn()`` in a forked :class:`Child` and wait for it."""
    return Child(fn, cwd, stdin).wait(timeout, kill_when)


def _read(f) -> str:
    f.seek(0)
    return f.read().decode("utf-8", "replace")


def _cli(argv: tuple) -> Callable[[], int]:
    from goldfish.cli import main

    return lambda: main([a if isinstance(a, str) else os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in argv])


def goldfish(*argv: Any, **kw: Any) -> Result:
    """``goldfish ARGV`` in a child (see :func:`in_child` for the keywords)."""
    return in_child(_cli(argv), **kw)


def start_goldfish(*argv: Any, cwd: Path | None = None) -> Child:
    """``goldfish ARGV`` in a child that runs while the caller goes on (:meth:`Child.wait` for its result)."""
    return Child(_cli(argv), cwd)


# ------------------------------------------------------------------------------------------------ checks


def fail(message: str) -> None:
    raise ProbeFailure(message)


def ok(r: Result, what: str = "the command") -> Result:
    """``r`` exited 0."""
    if r.rc != 0:
        fail(f"{what} failed (rc {r.rc}): {r.tail()}")
    return r


def one_error(r: Result, *needles: str, bounded: bool = True) -> str:
    """Exit 2, exactly one ``error:`` line and no traceback, the line holding every needle; with ``bounded``, within
    :data:`BOUNDED_S` seconds and :data:`BOUNDED_MIB` MiB. Returns the line."""
    lines = [line for line in r.err.splitlines() if line.startswith("error:")]
    if r.rc != 2 or len(lines) != 1 or "Traceback" in r.err:
        fail(f"expected one error line and exit 2, got rc {r.rc}: {r.tail()}")
    for needle in needles:
        if needle not in lines[0]:
            fail(f"{needle!r} not in: {lines[0][:300]}")
    if bounded and r.seconds > BOUNDED_S:
        fail(f"refused only after {r.seconds:.0f} s: {lines[0][:200]}")
    if bounded and r.peak_mib > BOUNDED_MIB:
        fail(f"refused only after using {r.peak_mib:.0f} MiB: {lines[0][:200]}")
    return lines[0]


def tree(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (itself included) -> sha256 of a file, a link's target, or ``dir``."""
    folder = Path(folder)
    if not folder.exists() and not folder.is_symlink():
        return {}
    entries = [folder] if folder.is_symlink() or not folder.is_dir() else [folder, *sorted(folder.rglob("*"))]
    out = {}
    for p in entries:
        key = str(p.relative_to(folder.parent))
        if p.is_symlink():
            out[key] = "-> " + os.readlink(p)
        elif p.is_dir():
            out[key] = "dir"
        elif p.is_file():
            out[key] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[key] = "special"
    return out


class Unchanged:
    """``with Unchanged(a, b): ...`` fails if any entry under the paths changed, appeared or vanished."""

    def __init__(self, *paths: Path):
        self.paths = [Path(p) for p in paths]

    def __enter__(self) -> "Unchanged":
        self.before = [tree(p) for p in self.paths]
        return self

    def __exit__(self, kind, *exc) -> None:
        if kind is not None:
            return
        for path, before in zip(self.paths, self.before):
            after = tree(path)
            if after != before:
                changed = sorted(set(before.items()) ^ set(after.items()))
                fail(f"{path} changed: {', '.join(k for k, _ in changed[:4])}")


def exists(path: Path, expected: bool = True) -> None:
    if Path(path).exists() != expected:
        fail(f"{path} {'is missing' if expected else 'was created'}")


# ------------------------------------------------------------------------------------------------ inputs


WORDS = (
    "the of river city king war north people was built stone light market garden winter letter silver engine "
    "harbor forest paper window morning voice island bridge valley castle"
).split()


def corpus(path: Path, docs: int = 40, seed: int = 1, words: int = 80) -> Path:
    """A JSONL corpus of ``docs`` random texts (``{"id", "text"}``)."""
    rng = random.Random(seed)
    path.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "text": " ".join(rng.choice(WORDS) for _ in range(words))}) + "\n"
            for i in range(docs)
        ),
        encoding="utf-8",
    )
    return path


def prepare_argv(source: Path, out: Path, *extra: Any) -> list:
    return [
        "prepare",
        REPO / "data" / "local_jsonl.yaml",
        f"source.path={source}",
        "seq_len=32",
        "doc_tokens=32",
        "min_tokens=16",
        "num_nonmembers=5",
        "repetitions=[1,2]",
        "tokenizer.name=bpe",
        "tokenizer.vocab_size=300",
        "--out",
        out,
        "--quiet",
        *extra,
    ]


TINY = {
    "model.name": "llama-demo",
    "model.hidden_size": 32,
    "model.num_layers": 1,
    "model.num_heads": 2,
    "model.intermediate_size": 64,
    "optim.lr": 0.01,
    "optim.warmup_steps": 2,
    "schedule.max_steps": 6,
    "schedule.global_batch_size": 4,
    "schedule.micro_batch_size": 2,
    "checkpoint.every_steps": 2,
    "checkpoint.keep_last": 0,
    "checkpoint.keep_optimizer": "true",  # the cases resume and read the last one
    "progress": "false",
    "log_every": 1000,
}


def train_argv(data: Path, out: Path, *extra: Any, **settings: Any) -> list:
    """``goldfish train`` of the tiny model; ``settings`` (``optim__lr=...``) replace the tiny defaults."""
    values = {**TINY, **{k.replace("__", "."): v for k, v in settings.items()}}
    return ["train", f"data.path={data}", f"out={out}", *(f"{k}={v}" for k, v in values.items()), *extra]


def eval_argv(model: Path, data: Path, out: Path, *extra: Any) -> list:
    return [
        "eval",
        "--model",
        model,
        "--data",
        data,
        "--out",
        out,
        "data.prefix_lens=[4]",
        "data.suffix_len=4",
        "report=false",
        "progress=false",
        "membership.n_bootstrap=10",
        *extra,
    ]


class Probe:
    """What a case gets: its own empty folder ``work`` and the shared fixtures (built once, copied on request)."""

    def __init__(self, root: Path):
        self.root = root
        self.work = root
        self._fixtures: dict[str, Path] = {}

    def _fixture(self, name: str, build: Callable[[Path], None]) -> Path:
        if name not in self._fixtures:
            path = self.root / "_fixtures" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            build(path)
            self._fixtures[name] = path
        return self._fixtures[name]

    @property
    def prepared(self) -> Path:
        """A prepared folder (BPE of 300 tokens, rows of 32): read only -- copy it to change it."""

        def build(path: Path) -> None:
            ok(goldfish(*prepare_argv(corpus(path.parent / "corpus.jsonl"), path)), "preparing the fixture")

        return self._fixture("prepared", build)

    @property
    def finished(self) -> Path:
        """A finished 6-step run with checkpoints at steps 2, 4, 6: read only -- use :meth:`run` to change one."""

        def build(path: Path) -> None:
            ok(goldfish(*train_argv(self.prepared, path)), "training the fixture")

        return self._fixture("run", build)

    @property
    def evaluated(self) -> Path:
        """An evaluation of :attr:`finished`: read only."""

        def build(path: Path) -> None:
            ok(goldfish(*eval_argv(self.finished / "model", self.prepared, path)), "evaluating the fixture")

        return self._fixture("eval", build)

    def copy(self, source: Path, name: str | None = None) -> Path:
        """A copy of a fixture in the case's folder."""
        target = self.work / (name or source.name)
        shutil.copytree(source, target, symlinks=True)
        return target

    def run(self, name: str = "run") -> Path:
        return self.copy(self.finished, name)

    def user_folder(self, path: Path, **files: str) -> Path:
        """A folder of the user's own (notes, data) -- never goldfish's to touch."""
        path.mkdir(parents=True, exist_ok=True)
        (path / "notes.txt").write_text("my notes: keep me\n")
        (path / "data.csv").write_text("a,b\n1,2\n")
        for name, text in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        return path
