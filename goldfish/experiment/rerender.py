"""Re-render a committed study from its ``results.json`` alone: ``report.md``
(:func:`goldfish.experiment.report.render`) and ``summary.json`` (:func:`goldfish.experiment.aggregate.summary_of`),
both pure functions of the results, so a study whose cells are gone (experiments/results/<config>/ keeps no weights and
no cell files) shows what this code reads from the same numbers: the readings and their verdict words included.
``results.json`` itself is never rewritten. ``python -m goldfish.experiment.rerender experiments/results/*``
(``make docs``); with ``--check`` it writes nothing and exits 1 when a file differs (the suite runs the same
comparison)."""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

from ..io import atomic_write_text, strict_json
from .aggregate import summary_of
from .glossary import markdown as glossary_markdown
from .report import render
from .sections.readings import table


def read_results(folder: Path) -> dict:
    """A committed study's results: ``results.json`` or, over the repo's size limit, ``results.json.gz``."""
    plain = folder / "results.json"
    if plain.is_file():
        return json.loads(plain.read_text(encoding="utf-8"))
    return json.loads(gzip.decompress((folder / "results.json.gz").read_bytes()))


def rendered(folder: Path) -> dict[str, str]:
    """``{file name: text}`` of what a committed study's report and summary are under this code."""
    results = read_results(folder)
    return {"report.md": render(results), "summary.json": strict_json(summary_of(results), 2) + "\n"}


BLOCK = re.compile(
    r"(<!-- readings: (?P<folder>\S+)(?: \| (?P<questions>[^>]*?))? -->\n)"
    r"(?P<body>.*?)(<!-- /readings -->)",
    re.S,
)


def render_blocks(text: str, repo: Path) -> str:
    """A doc with each ``<!-- readings: experiments/results/<config>[ | question; question] -->`` ... ``<!--
    /readings -->`` block filled by :func:`goldfish.experiment.sections.readings.table` from that study's
    results.json: the docs quote the readings, never retype them."""
    cache: dict[str, dict] = {}

    def fill(m: re.Match) -> str:
        folder = m.group("folder")
        results = cache.setdefault(folder, read_results(repo / folder))
        questions = [q.strip() for q in (m.group("questions") or "").split(";") if q.strip()] or None
        return m.group(1) + table(results, questions) + "\n" + m.group(5)

    return BLOCK.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m goldfish.experiment.rerender", description=__doc__)
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument(
        "--docs",
        nargs="*",
        type=Path,
        default=[],
        help="Markdown files whose <!-- readings: ... --> blocks are filled from the studies",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file would change")
    parser.add_argument(
        "--glossary", type=Path, default=None, help="write the report glossary here (docs/report-glossary.md)"
    )
    args = parser.parse_args(argv)
    stale = []
    for folder in args.folders:
        for name, text in rendered(folder).items():
            path = folder / name
            if path.is_file() and path.read_text(encoding="utf-8") == text:
                continue
            stale.append(str(path))
            if not args.check:
                atomic_write_text(path, text)
    for doc in args.docs:
        text = doc.read_text(encoding="utf-8")
        new = render_blocks(text, Path.cwd())
        if new != text:
            stale.append(str(doc))
            if not args.check:
                atomic_write_text(doc, new)
    if args.glossary:
        text = glossary_markdown()
        if not args.glossary.is_file() or args.glossary.read_text(encoding="utf-8") != text:
            stale.append(str(args.glossary))
            if not args.check:
                atomic_write_text(args.glossary, text)
    for path in stale:
        print(f"{'differs' if args.check else 'rewritten'}: {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
