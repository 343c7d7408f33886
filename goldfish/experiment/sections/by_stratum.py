"""Exact match / ROUGE-L rouge-score / ROUGE-L tokens per cell by prefix length and by repetition count (the cells'
``strata``, window-weighted)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from goldfish.eval.metrics import HEADLINE, METRICS, ROUGE
from goldfish.eval.tables import fmt, markdown_section, markdown_table

from ..summary import Study, cells_of, one_per_arm

MEANED = tuple(METRICS[m].summary_key for m in HEADLINE)  # the stratum metrics the tables pool
TITLE = " / ".join(METRICS[m].short for m in ("exact_match", *ROUGE))


def compute(study: Study) -> dict:
    return {}


def mean_over(strata: list[dict], by: str) -> dict[Any, dict[str, float]]:
    """Window-weighted means of the stratum metrics grouped by one key (the other key is pooled)."""
    acc: dict[Any, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in strata:
        n = s["n_windows"]
        acc[s[by]]["n"] += n
        for m in MEANED:
            if s.get(m) is not None:
                acc[s[by]][m] += n * s[m]
                acc[s[by]][f"n_{m}"] += n
    return {k: {m: (v[m] / v[f"n_{m}"] if v[f"n_{m}"] else None) for m in MEANED} for k, v in acc.items()}


def stratum_table(results: dict, by: str) -> str:
    """Rows: cells; columns: values of ``by`` (prefix_len or repetitions); entries: exact match % / ROUGE-L."""
    cells, axes = cells_of(results), results["axes"]
    one = one_per_arm(cells)
    values = sorted({s[by] for c in cells for s in c.strata if s[by] is not None})
    header = ["cell"] + [f"{by}={'all' if by == 'prefix_len' and v == -1 else v}" for v in values]
    rows = []
    for c in cells:
        agg = mean_over(c.strata, by)
        rows.append(
            [c.label(axes, one)]
            + [
                " / ".join(
                    fmt(agg[v][METRICS[m].summary_key], "pct" if m == "exact_match" else "")
                    for m in ("exact_match", *ROUGE)
                )
                if v in agg
                else "-"
                for v in values
            ]
        )
    return markdown_table(header, rows)


def render(results: dict) -> str:
    """A table per key with more than one value; one value only repeats the headline's row and is left out."""
    cells = cells_of(results)
    return "\n".join(
        markdown_section(f"{title} ({TITLE})", stratum_table(results, by))
        for by, title in (("prefix_len", "By prefix length"), ("repetitions", "By repetition count"))
        if len({s[by] for c in cells for s in c.strata if s[by] is not None}) > 1
    )
