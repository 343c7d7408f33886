"""Goldfish cells: exact match next to the mask-arithmetic baseline (``eval/k_baseline.json``,
``goldfish.eval.baseline``): the mean over windows of (1 - g)^d_w from each window's own dropped count, and the
nominal (1 - g/k)^S."""

from __future__ import annotations

from goldfish.eval.tables import markdown_section, fmt, markdown_table

from ..summary import Study, cells_of, one_per_arm


def compute(study: Study) -> dict:
    return {}


def k_baseline_table(results: dict) -> str | None:
    """The table (None without a Goldfish cell)."""
    cells, axes = cells_of(results), results["axes"]
    one = one_per_arm(cells)
    rows = []
    for c in cells:
        kb = c.k_baseline
        if not kb:
            continue
        exact = {str(p): v.get("exact_match_rate") for p, v in (c.by_prefix_len or {}).items()}
        for r in kb["rows"]:
            shown = str(r["prefix_len"]) if r["prefix_len"] > 0 else "all"
            rows.append([c.label(axes, one), f"{kb['strategy']} k={kb['k']}", shown,
                         fmt(exact.get(str(r["prefix_len"])), "pct"), fmt(r.get("baseline_windows"), "pct"),
                         fmt(r.get("baseline_nominal", r.get("baseline")), "pct"), fmt(r["g"]),
                         fmt(r["kept_acc"], "pct"), fmt(r["n_dropped"], "int"),
                         f"{fmt(r.get('n_windows_no_drop'), 'int')} / {fmt(r['n_windows'], 'int')}"])
    if not rows:
        return None
    return markdown_table(["cell", "mask", "prefix", "exact match", "baseline mean (1-g)^d_w (actual counts)",
                           "nominal (1-g/k)^S", "g (dropped missed)", "kept-token acc.", "dropped positions",
                           "windows without a dropped token"], rows)


def render(results: dict) -> str:
    table = k_baseline_table(results)
    if not table:
        return ""
    return markdown_section(
        "Exact match against the mask baseline", table,
        "g: fraction of the suffix positions the cell's own mask dropped whose teacher-forced argmax is "
        "wrong. The baseline is the exact-match rate of a model that misses those and nothing else: the "
        "mean over windows of (1-g)^d_w, d_w the dropped targets in window w's suffix as the mask "
        "actually placed them. The nominal (1-g/k)^S beside it assumes every target is dropped with "
        "probability 1/k; it is the headline only where the windows' counts follow that. Exact match near "
        "the baseline is explained by the mask arithmetic alone, far below it by missed kept tokens "
        "(kept-token accuracy < 100 %), above it by misses that are not independent.")
