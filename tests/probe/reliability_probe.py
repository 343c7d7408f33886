#!/usr/bin/env python
"""The reliability probe: goldfish used as the most careless and the most hostile users would.

    .venv/bin/python tests/probe/reliability_probe.py                 # every case (about 10-20 min on 2 cores)
    .venv/bin/python tests/probe/reliability_probe.py --fast          # the quick subset (what pytest runs)
    .venv/bin/python tests/probe/reliability_probe.py --family 1 --family 8 --case lock

One row per case: family, case, PASS/FAIL, seconds, peak MiB above the probe's own, and what failed. Exit status 1
when any case failed. What every case holds goldfish to (``docs/reliability.md``):

* nothing goldfish did not create is deleted, renamed, written or adopted, whatever its name;
* a replacement (``--overwrite``, ``overwrite=true``) takes the old output's place only after it has succeeded;
* bad input -- a path, a number, a file -- is one ``error:`` line, exit 2, no traceback, within seconds and bounded
  memory, and nothing is written;
* no silently wrong result: what cannot be computed correctly is refused.

Families follow issue 33: 1 debris, 2 locks, 3 adoption, 4 replace after success, 6 series and reference models,
7 concurrent experiments, 8 values, 9 numbers, 10 paths and files, 11 resume; 12 gathers cases beyond them.
Issue 39: 13 clean-up inside a prepared folder, 14 the Hugging Face cache, 15 tampered shards, manifests and sources,
16 bounded work per input, 17 one error line, 18 local paths in a model card.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import CASES, Probe, ProbeFailure  # noqa: E402
import cases_folders  # noqa: E402,F401 - registers families 1-4
import cases_inputs  # noqa: E402,F401 - registers families 6-12
import cases_v  # noqa: E402,F401 - registers families 13-18 (issue 39)


def _warm_imports() -> None:
    """Import what the commands import, once, before the first fork (children then start at once)."""
    import datasets  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import goldfish.cli  # noqa: F401
    import goldfish.commands.evaluate  # noqa: F401
    import goldfish.commands.experiment  # noqa: F401
    import goldfish.commands.mask  # noqa: F401
    import goldfish.commands.prepare  # noqa: F401
    import goldfish.commands.train  # noqa: F401
    import goldfish.data.prepare  # noqa: F401
    import goldfish.eval.run  # noqa: F401
    import goldfish.eval.series  # noqa: F401
    import goldfish.experiment  # noqa: F401
    import goldfish.train  # noqa: F401


def selected(families: list[str], names: list[str], fast: bool) -> list:
    return [
        c
        for c in CASES
        if (not families or c.family in families)
        and (not names or any(n in c.name for n in names))
        and (c.fast or not fast)
    ]


def run_cases(cases: list, root: Path, keep: bool = False, echo=print) -> list[tuple]:
    """Run ``cases`` in folders under ``root``; returns (case, passed, seconds, detail) rows."""
    probe = Probe(root)
    rows = []
    for c in cases:
        probe.work = root / f"{c.family}_{c.name}"
        probe.work.mkdir(parents=True)
        start = time.monotonic()
        try:
            c.fn(probe)
            passed, detail = True, ""
        except ProbeFailure as e:
            passed, detail = False, str(e)
        except Exception as e:  # noqa: BLE001 - a broken case is a failed case
            passed, detail = False, f"the case itself raised {type(e).__name__}: {e}"
        seconds = time.monotonic() - start
        rows.append((c, passed, seconds, detail))
        echo(f"{c.family:>3}  {c.name:<58} {'PASS' if passed else 'FAIL'}  {seconds:6.1f} s  {detail[:200]}")
        if not keep:
            shutil.rmtree(probe.work, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", action="append", default=[], help="run only this family (repeatable)")
    parser.add_argument("--case", action="append", default=[], help="run only cases whose name contains this")
    parser.add_argument("--fast", action="store_true", help="only the quick subset")
    parser.add_argument("--keep", action="store_true", help="keep every case's folder (printed at the end)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args(argv)
    cases = selected(args.family, args.case, args.fast)
    if args.list:
        for c in cases:
            print(f"{c.family:>3}  {c.name}{'  (fast)' if c.fast else ''}")
        print(f"{len(cases)} cases")
        return 0
    _warm_imports()
    root = Path(tempfile.mkdtemp(prefix="goldfish-probe-"))
    print(f"{'fam':>3}  {'case':<58} {'':4}  {'time':>8}  detail")
    try:
        rows = run_cases(cases, root, args.keep)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    failed = [r for r in rows if not r[1]]
    print(f"\n{len(rows) - len(failed)} of {len(rows)} cases pass" + (f"; kept in {root}" if args.keep else ""))
    for c, _, _, detail in failed:
        print(f"FAIL {c.family} {c.name}: {detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
