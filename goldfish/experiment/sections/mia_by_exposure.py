"""The headline attack's AUC per exposure count (members with r copies vs all nonmembers, attacks.json
``by_exposure``) with its 95 % bootstrap CI, per cell, when there are at least two counts."""

from __future__ import annotations

from goldfish.eval.tables import ci_suffix, fmt, markdown_section, markdown_table

from ..summary import Study, cells_of, one_per_arm


def compute(study: Study) -> dict:
    return {}


def exposure_table(results: dict) -> str | None:
    """The table (None with fewer than two exposure counts)."""
    cells = cells_of(results)
    counts = sorted({int(r) for c in cells for r in (c.mia_by_exposure or {})})
    if len(counts) < 2:
        return None
    one = one_per_arm(cells)
    rows = []
    for c in cells:
        by, ci = c.mia_by_exposure or {}, c.mia_by_exposure_ci or {}
        row = [c.label(results["axes"], one)]
        for r in counts:
            low, high = (ci.get(str(r)) or {}).get(c.mia_attack) or (None, None)
            row.append(fmt((by.get(str(r)) or {}).get(c.mia_attack)) + ci_suffix(low, high))
        rows.append(row)
    return markdown_table(["cell"] + [f"{r}x" for r in counts], rows)


def render(results: dict) -> str:
    table = exposure_table(results)
    if not table:
        return ""
    return markdown_section(
        "MIA AUC by exposure count",
        table,
        "Members with r copies vs all nonmembers, 95 % bootstrap CI in brackets; the attack is "
        "the headline one of each cell.",
    )
