"""The study report's definitions, once: a report names a term and points here instead of repeating a paragraph in
every section of every report (issue 58: the headline and the readings first, the definitions one step away).

A section registers a definition at import with :func:`define`, which returns the one line the report shows in its
place; :func:`markdown` renders every definition as docs/report-glossary.md (``make docs`` writes it,
``tests/test_committed_results.py`` checks it is current)."""

from __future__ import annotations

GLOSSARY: dict[str, str] = {}
DOC = "docs/report-glossary.md"


def define(term: str, text: str) -> str:
    """Register ``text`` as the definition of ``term`` (one per term); the line a report shows instead."""
    if GLOSSARY.get(term, text) != text:
        raise ValueError(f"two definitions of {term!r}")
    GLOSSARY[term] = text
    return refer(term)


def refer(*terms: str) -> str:
    """The line a report shows for registered terms: ``Definitions: *a*, *b* (docs/report-glossary.md).``"""
    missing = [t for t in terms if t not in GLOSSARY]
    if missing:
        raise KeyError(f"no glossary entry {missing}")
    return "Definitions: " + ", ".join(f"*{t}*" for t in terms) + f" ({DOC})."


def markdown() -> str:
    """Every registered definition, in the order of the report's sections."""
    lines = [
        "# The study report's glossary",
        "",
        "What the columns and tests of an experiment's report.md mean. Each section of a report names its entry "
        "here (`Definitions: *term*`); generated from goldfish/experiment/glossary.py's registry by `make docs`.",
        "",
    ]
    for term, text in GLOSSARY.items():
        lines += [f"## {term}", "", text, ""]
    return "\n".join(lines)
