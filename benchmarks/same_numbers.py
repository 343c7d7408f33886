"""Same command, same numbers: the demo experiment run twice on this machine, once idle and once beside CPU-bound
jobs, with the toolkit's default settings (precision by rule, the default threads, the checkpoint's dtype in
evaluation). Prints whether every number of the two runs' ``summary.json`` and ``results.json`` (the report's
digits) is equal, each run's wall time, and the loaded / idle ratio.

    python benchmarks/same_numbers.py --json same_numbers.json                  # ~12-15 min on 2 cores
    python benchmarks/same_numbers.py --config experiments/default.yaml --hogs 1

``--against FOLDER`` runs the config once and compares it with a committed run instead (e.g.
``experiments/results/default``): every value both runs' files hold must be equal; fields only the newer code writes
are listed, not counted as differences (:func:`shared_differences`).

    python benchmarks/same_numbers.py --against experiments/results/default    # one run, ~10 min on 2 cores

A "hog" is a process spinning on one core (``while True: pass``), started before the loaded run and stopped after
it. Absolute times depend on the machine; the ratio is measured side by side in one run. Nothing else should run
on the machine during the idle run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# what a run reports about itself, not what it measured: left out of the comparison
VOLATILE = {
    "created",
    "git",
    "code",
    "versions",
    "wall_time_s",
    "train_time_s",
    "mean_tokens_per_s",
    "mean_mfu",
    "mfu_peak_flops",
    "mfu_peak_source",
    "seconds",
    "elapsed_s",
    "duration_s",
    "path",
    "out",
    "time_s",
    "weights",
    "mfu_unavailable",
    "train_s",
    "eval_s",
    "tokens_per_s",
    "windows_per_s",
}


def _spin() -> None:
    while True:
        pass


def numbers(value, key: str = ""):
    """``value`` without the fields that describe the run rather than its results (times, paths, dates)."""
    if isinstance(value, dict):
        return {k: numbers(v, k) for k, v in value.items() if k not in VOLATILE and not k.endswith("_time_s")}
    if isinstance(value, list):
        return [numbers(v, key) for v in value]
    if isinstance(value, str) and ("/" in value or key.endswith(("dir", "file", "folder"))):
        return "<path>"
    return value


def differences(a, b, where: str = "") -> list[str]:
    """Dotted paths where ``a`` and ``b`` differ (at most a few dozen)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += differences(a.get(k), b.get(k), f"{where}.{k}" if where else str(k))
        return out[:40]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")][:40]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def shared_differences(a, b, where: str = "") -> tuple[int, list[str], list[str]]:
    """(values equal, differences, fields only one side holds) over what both ``a`` and ``b`` hold: a run of newer
    code writes fields an older committed run lacks (None or absent there), which are not differences."""
    if isinstance(a, dict) and isinstance(b, dict):
        equal, diffs, only = 0, [], []
        for k in sorted(set(a) | set(b), key=str):
            if (a.get(k) is None) != (b.get(k) is None):
                only.append(f"{where}.{k}" if where else str(k))
                continue
            e, d, o = shared_differences(a.get(k), b.get(k), f"{where}.{k}" if where else str(k))
            equal, diffs, only = equal + e, diffs + d, only + o
        return equal, diffs, only
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        parts = [shared_differences(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b))]
        return sum(p[0] for p in parts), [d for p in parts for d in p[1]], [o for p in parts for o in p[2]]
    return (1, [], []) if a == b else (0, [f"{where}: {a!r} != {b!r}"], [])


def _blind_by_content(results: dict) -> dict:
    """results.json's ``blind`` is keyed by the prepared folder's path, which differs between two runs' folders."""
    blind = results.get("blind")
    if isinstance(blind, dict) and len(blind) == 1:
        results["blind"] = {"<prepared>": next(iter(blind.values()))}
    return results


def against(config: str, committed: Path, work: Path) -> dict:
    """One run of ``config`` compared with the committed run in ``committed`` (:func:`shared_differences`)."""
    seconds, _ = run(config, work / "run")
    equal, diffs, only = 0, [], []
    for name in ("summary.json", "results.json"):
        a, b = (
            _blind_by_content(numbers(json.loads((folder / name).read_text().replace(str(folder), "<run>"))))
            for folder in (committed, work / "run")
        )
        e, d, o = shared_differences(a, b, name)
        equal, diffs, only = equal + e, diffs + d, only + o
    return {
        "config": config,
        "against": str(committed),
        "seconds": round(seconds, 1),
        "values_equal": equal,
        "same_numbers": not diffs,
        "differences": diffs[:40],
        "new_fields": only,
    }


def _console(text: str, out: Path) -> str:
    """The printed report without its run folder and its timings (``82 s``)."""
    return re.sub(r"\b\d+(\.\d+)? s\b", "<t> s", text.replace(str(out), "<run>"))


def run(config: str, out: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "goldfish", "experiment", config, f"out={out}"], cwd=REPO, capture_output=True, text=True
    )
    if done.returncode:
        sys.exit(f"the experiment failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start, done.stdout


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="experiments/default.yaml")
    p.add_argument("--hogs", type=int, default=1, help="CPU-bound processes beside the loaded run (default 1)")
    p.add_argument("--work", default=None, help="folder for the two runs (default: a temporary one, removed)")
    p.add_argument("--json", default=None, help="write the measurements here")
    p.add_argument("--against", default=None, help="a committed run's folder: one run compared with it instead")
    args = p.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="same_numbers_"))
    try:
        if args.against:
            result = against(args.config, (REPO / args.against).resolve(), work)
            print(json.dumps(result, indent=2))
            if args.json:
                Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
            return 0 if result["same_numbers"] else 1
        idle_s, idle_out = run(args.config, work / "idle")
        hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.hogs)]
        for h in hogs:
            h.start()
        try:
            loaded_s, loaded_out = run(args.config, work / "loaded")
        finally:
            for h in hogs:
                h.terminate()
        diffs = []
        for name in ("summary.json", "results.json"):
            a, b = (
                numbers(json.loads((work / run_ / name).read_text().replace(str(work / run_), "<run>")))
                for run_ in ("idle", "loaded")
            )
            diffs += [f"{name}: {d}" for d in differences(a, b)]
        same_console = _console(idle_out, work / "idle") == _console(loaded_out, work / "loaded")
        result = {
            "config": args.config,
            "hogs": args.hogs,
            "idle_s": round(idle_s, 1),
            "loaded_s": round(loaded_s, 1),
            "loaded_over_idle": round(loaded_s / idle_s, 2),
            "same_numbers": not diffs,
            "same_console_output": same_console,
            "differences": diffs,
        }
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["same_numbers"] else 1


if __name__ == "__main__":
    sys.exit(main())
