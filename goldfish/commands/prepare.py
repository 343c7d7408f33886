"""``goldfish prepare``: build a memorization dataset folder from a recipe."""

from __future__ import annotations

import argparse
import sys

from ..config import describe
from ..data.config import resolve_recipe

DESCRIPTION = """\
Build a prepared dataset (members, nonmembers, optional background, packed training rows, tokenizer, manifest)
from a recipe. Recipes live in data/*.yaml (see data/README.md); key=value overrides win over the file.
Same recipe + seed -> byte-identical Arrow files. Default output: data/prepared/<name>.

examples:
  goldfish prepare data/wikipedia_demo.yaml
  goldfish prepare data/wikipedia_canaries.yaml --out /tmp/canaries seed=1 --overwrite
  goldfish prepare wikipedia_demo tokenizer.name=gpt2 num_members=50 doc_tokens=64
  goldfish prepare data/local_jsonl.yaml source.path=my.jsonl source.text_field=body
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..data.config import PrepareConfig

    parser.add_argument("config", help="recipe YAML file, or the name of a recipe in data/ (e.g. wikipedia_demo)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="override recipe keys (e.g. seed=1)")
    parser.add_argument("--out", default=None, help="output folder (default: data/prepared/<name>)")
    parser.add_argument("--overwrite", action="store_true", help="replace the output folder if it exists")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no summary")
    parser.epilog = "recipe keys:\n" + "\n".join(describe(PrepareConfig))


def load_recipe(spec: str, overrides: list[str] | tuple[str, ...] = ()):
    """Recipe file (or name) + ``key=value`` overrides -> ``PrepareConfig``; ``name`` defaults to the file's stem."""
    from ..config import load_config, parse_overrides, read_yaml
    from ..data.config import PrepareConfig

    path = resolve_recipe(spec)
    has_name = "name" in read_yaml(path) or "name" in parse_overrides(overrides)
    extra = [] if has_name else [f"name={path.stem}"]
    return load_config(PrepareConfig, path, [*extra, *overrides])


def run(args: argparse.Namespace) -> int:
    from ..data.prepare import prepare, summary

    cfg = load_recipe(args.config, args.overrides)
    show = not args.quiet
    out = prepare(cfg, out=args.out, overwrite=args.overwrite, progress=show and sys.stderr.isatty())
    if show:
        print(summary(out))
    return 0
