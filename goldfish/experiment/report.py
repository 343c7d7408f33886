"""The study report, ``<out>/report.md``: one pipe over the sections of :mod:`goldfish.experiment.sections`.

Each section renders its Markdown from ``results.json`` alone (``render(results) -> str``, "" where it does not
apply); the report is the header (``overview``), then, once a cell has finished, every other section in
:data:`~goldfish.experiment.sections.SECTIONS` order. So a report re-renders from ``results.json`` without the cells'
files (the plots it lists were drawn when the results were computed).
"""

from __future__ import annotations

from pathlib import Path

from ..io import atomic_write_text
from .sections import SECTIONS


def render(results: dict) -> str:
    """The report's Markdown: a pure function of ``results.json``."""
    sections = SECTIONS if results.get("cells") else SECTIONS[:1]
    return "\n".join(text for text in (s.render(results) for s in sections) if text) + "\n"


def write_report(results: dict, path: Path) -> Path:
    """Write :func:`render`'s Markdown to ``path`` (atomically); returns it."""
    atomic_write_text(path, render(results))
    return Path(path)
