"""``goldfish prepare``: build a memorization dataset folder from a recipe."""

from __future__ import annotations

import argparse
import re
import sys

from ..config import describe
from ..errors import UserError
from ..data.config import resolve_recipe

DESCRIPTION = """\
Build a prepared dataset (members, nonmembers, optional background, packed training rows, tokenizer, manifest)
from a recipe. Recipes live in data/*.yaml (see data/README.md); key=value overrides win over the file.
Same recipe + seed -> byte-identical data files. Default output: data/prepared/<name>.
A background_source streams: it is tokenized in --num-proc worker processes and written in shards, so memory
stays flat whatever its size; a killed prepare resumes at its first unfinished shard when run again.

examples:
  goldfish prepare data/wikipedia_demo.yaml
  goldfish prepare data/wikipedia_canaries.yaml --out /tmp/canaries seed=1 --overwrite
  goldfish prepare wikipedia_demo tokenizer.name=gpt2 num_members=50 doc_tokens=64
  goldfish prepare data/local_jsonl.yaml source.path=my.jsonl source.text_field=body
  goldfish prepare RECIPE --out big --num-proc 16                  # one machine, 16 tokenizer processes
  goldfish prepare RECIPE --out big --shards 0:100                 # job 1 of an array (shards 0..99) ...
  goldfish prepare RECIPE --out big --shards 100:200               # ... job 2, side by side into one folder
  goldfish prepare RECIPE --out big --merge                        # then the layout and manifest, once
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..data.config import PrepareConfig

    parser.add_argument("config", help="recipe YAML file, or the name of a recipe in data/ (e.g. wikipedia_demo)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="override recipe keys (e.g. seed=1)")
    parser.add_argument("--out", default=None, help="output folder (default: data/prepared/<name>)")
    parser.add_argument("--overwrite", action="store_true", help="replace the output folder if it exists")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no summary")
    parser.add_argument(
        "--num-proc",
        type=int,
        default=None,
        metavar="N",
        help="worker processes tokenizing a streamed background (default: the CPUs available; never "
        "more than those CPUs, nor than the shards there are to write)",
    )
    parser.add_argument(
        "--shards",
        default=None,
        metavar="A:B",
        help="write only background shards A..B-1 (one job of several into one folder); no merge",
    )
    parser.add_argument(
        "--merge", action="store_true", help="merge the background shards other jobs wrote (a missing one is an error)"
    )
    parser.epilog = "recipe keys:\n" + "\n".join(describe(PrepareConfig))


def load_recipe(spec: str, overrides: list[str] | tuple[str, ...] = ()):
    """Recipe file (or name) + ``key=value`` overrides -> ``PrepareConfig``; ``name`` defaults to the file's stem."""
    from ..config import load_config, parse_overrides, read_yaml
    from ..data.config import PrepareConfig

    path = resolve_recipe(spec)
    has_name = "name" in read_yaml(path) or "name" in parse_overrides(overrides)
    extra = [] if has_name else [f"name={path.stem}"]
    return load_config(PrepareConfig, path, [*extra, *overrides])


def shard_range(spec: str | None) -> tuple[int, int] | None:
    """``"A:B"`` -> (A, B) with 0 <= A < B; one line otherwise."""
    if spec is None:
        return None
    a, sep, b = spec.partition(":")
    digits = re.compile(r"[0-9]{1,12}")  # ASCII digits only (not "٣"), and no number past a trillion shards
    if not (sep and digits.fullmatch(a.strip()) and digits.fullmatch(b.strip()) and int(a) < int(b)):
        raise UserError(f"--shards {spec!r} is not a range A:B of shard numbers with A < B (e.g. --shards 0:100)")
    return int(a), int(b)


def run(args: argparse.Namespace) -> int:
    from ..data.prepare import prepare, summary

    cfg = load_recipe(args.config, args.overrides)
    shards = shard_range(args.shards)
    if args.num_proc is not None and args.num_proc < 1:
        raise UserError(f"--num-proc {args.num_proc} must be >= 1")
    if shards is not None and args.merge:
        raise UserError("--shards writes some shards and --merge merges them all: give one of them")
    show = not args.quiet
    terminal = sys.stderr.isatty()
    log = None if not show or terminal else (lambda line: print(line, file=sys.stderr, flush=True))
    out = prepare(
        cfg,
        out=args.out,
        overwrite=args.overwrite,
        progress=show and terminal,
        num_proc=args.num_proc,
        shards=shards,
        merge_only=args.merge,
        log=log,
    )
    if shards is not None:
        if show:
            print(
                f"wrote background shards {shards[0]}..{shards[1] - 1} into {out} (the last ones may lie past the "
                f"end of the source); when every job is done: goldfish prepare {args.config} --out {out} --merge"
            )
    elif show:
        print(summary(out))
    return 0
