"""Memorisation of documents with one copy per epoch (repetitions = 1) per cell, when the data has other strata too;
read ``epochs`` times in all (the train summary's ``exposures``), so it is single-exposure memorisation only for a
one-epoch budget."""

from __future__ import annotations

from goldfish.eval.metrics import METRICS, ROUGE
from goldfish.eval.tables import fmt, markdown_section, markdown_table

from ..summary import Study, cells_of
from .by_stratum import mean_over


def compute(study: Study) -> dict:
    return {}


def repetition1_table(results: dict) -> str | None:
    """The table (None without a cell with repetition-1 documents)."""
    cells, axes = cells_of(results), results["axes"]
    rows = []
    for c in sorted(cells, key=lambda c: (c.arm, c.params or 0)):
        agg = mean_over(c.strata, "repetitions")
        if 1 in agg:
            rows.append(
                [
                    c.label(axes, False),
                    fmt(c.params, "params"),
                    fmt(agg[1]["exact_match_rate"], "pct"),
                    *(fmt(agg[1][m]) for m in ROUGE),
                ]
            )
    if not rows:
        return None
    return markdown_table(["cell", "params", *(f"{METRICS[m].short} (rep. 1)" for m in ("exact_match", *ROUGE))], rows)


def render(results: dict) -> str:
    single = repetition1_table(results)
    if not single or len({s["repetitions"] for c in cells_of(results) for s in c.strata}) <= 1:
        return ""
    return markdown_section("Repetition-1 memorisation (one copy in the training data, seen once per epoch)", single)
