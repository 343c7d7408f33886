"""Mean +- standard deviation over each arm's cells (seeds, splits), when some arm has several cells."""

from __future__ import annotations

import math

from goldfish.eval.metrics import METRICS, ROUGE
from goldfish.eval.tables import fmt, markdown_section, markdown_table

from ..summary import Study, cells_of, one_per_arm

# (cell summary field, column, format): the headline extraction metrics (the registry's words), then per-cell numbers
SPREAD_METRICS = tuple(
    (METRICS[m].summary_key, METRICS[m].short, "pct" if METRICS[m].aggregation == "rate" else "")
    for m in ("exact_match", *ROUGE)
) + (
    ("heldout_loss", "held-out loss", ""),
    ("tf_kept_accuracy", "TF acc kept", "pct"),
    ("tf_dropped_accuracy", "TF acc dropped", "pct"),
    ("mia_auc", "MIA AUC", ""),
    ("mia_auc_kept_reference", "MIA AUC kept tokens", ""),
)


def compute(study: Study) -> dict:
    return {}


def arm_means(results: dict) -> dict[str, dict[str, tuple[float, float, int]]]:
    """Per arm, per metric: (mean, sample standard deviation, n cells) over the arm's cells (e.g. seeds)."""
    cells = cells_of(results)
    out: dict[str, dict[str, tuple[float, float, int]]] = {}
    for arm in dict.fromkeys(c.arm for c in cells):
        mine = [c for c in cells if c.arm == arm]
        out[arm] = {}
        for key, _, _ in SPREAD_METRICS:
            values = [getattr(c, key) for c in mine if getattr(c, key) is not None]
            if values:
                mean = sum(values) / len(values)
                sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
                out[arm][key] = (mean, sd, len(values))
    return out


def spread_table(results: dict) -> str | None:
    """The table (None when every arm has a single cell)."""
    if one_per_arm(cells_of(results)):
        return None
    rows = []
    for arm, metrics in arm_means(results).items():
        n = max((v[2] for v in metrics.values()), default=0)
        rows.append(
            [arm, str(n)]
            + [
                f"{fmt(metrics[k][0], kind)} +- {fmt(metrics[k][1], kind)}" if k in metrics else "-"
                for k, _, kind in SPREAD_METRICS
            ]
        )
    return markdown_table(["arm", "cells"] + [name for _, name, _ in SPREAD_METRICS], rows)


def render(results: dict) -> str:
    table = spread_table(results)
    return markdown_section("Mean +- standard deviation over each arm's cells", table) if table else ""
