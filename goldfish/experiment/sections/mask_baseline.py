"""Goldfish cells: exact match next to the mask-arithmetic baseline (``eval/k_baseline.json``,
``goldfish.eval.baseline``), over all windows of a prefix length and per repetition stratum: the mean over windows of
(1 - g)^d_w from each window's own dropped count (kept tokens assumed known) beside the nominal (1 - g/k)^S, and the
baseline with the measured kept-token accuracy a, a^(S - d_w) (1 - g)^d_w, with the exact test of the verbatim count
against it."""

from __future__ import annotations

from goldfish.eval.tables import fmt, markdown_section, markdown_table, p_text

from ..summary import CellSummary, Study, cells_of, one_per_arm


def compute(study: Study) -> dict:
    return {}


def _greedy(c: CellSummary, prefix: int, stratum: object) -> float | None:
    """The cell's greedy exact-match rate at a prefix length, over all windows or one stratum."""
    if stratum == "all":
        return ((c.by_prefix_len or {}).get(str(prefix)) or {}).get("exact_match_rate")
    found = [s for s in c.strata or [] if s.get("prefix_len") == prefix and s.get("repetitions") == stratum]
    return found[0].get("exact_match_rate") if found else None


def _test_text(r: dict) -> str:
    """``3 vs 4.1 expected, p 0.72 (P(<=) 0.41)``: the verbatim count against the baseline with a measured."""
    t = r.get("test")
    if not t:
        return "-"
    return (f"{r['onepass_exact']} vs {t['expected']:.1f} expected, p {p_text(t['p_value'])} "
            f"(P(X <= {r['onepass_exact']}) {t['p_at_most']:.2g})")


def k_baseline_table(results: dict) -> str | None:
    """The table (None without a Goldfish cell)."""
    cells, axes = cells_of(results), results["axes"]
    one = one_per_arm(cells)
    rows = []
    for c in cells:
        kb = c.k_baseline
        if not kb:
            continue
        for r in kb["rows"]:
            stratum = r.get("repetitions", "all")
            shown = str(r["prefix_len"]) if r["prefix_len"] > 0 else "all"
            nominal = r.get("baseline_nominal", r.get("baseline"))
            rows.append([c.label(axes, one), f"{kb['strategy']} k={kb['k']}", shown,
                         "all" if stratum == "all" else f"x{stratum}",
                         f"{fmt(r['n_windows'], 'int')} ({fmt(r.get('n_windows_no_drop'), 'int')})",
                         fmt(_greedy(c, r["prefix_len"], stratum), "pct"), fmt(r["g"]), fmt(r["kept_acc"], "pct"),
                         f"{fmt(r.get('baseline_windows'), 'pct')} ({fmt(nominal, 'pct')})",
                         fmt(r.get("baseline_kept"), "pct"), _test_text(r)])
    if not rows:
        return None
    return markdown_table(["cell", "mask", "prefix", "stratum", "windows (without a dropped token)", "exact match",
                           "g (dropped missed)", "kept-token acc. a", "baseline a = 1: mean (1-g)^d_w (nominal)",
                           "baseline a measured: mean a^(S-d_w) (1-g)^d_w", "verbatim vs baseline (exact test)"],
                          rows)


def render(results: dict) -> str:
    table = k_baseline_table(results)
    if not table:
        return ""
    return markdown_section(
        "Exact match against the mask baseline", table,
        "g: fraction of the suffix positions the cell's own mask dropped whose teacher-forced argmax is wrong; a: "
        "fraction of the kept suffix positions whose argmax is right. The baseline is the exact-match rate of a model "
        "whose misses are independent across positions: with a = 1 (kept tokens known, the old assumption) the mean "
        "over windows of (1-g)^d_w, d_w the dropped targets in window w's suffix as the mask placed them (the "
        "nominal (1-g/k)^S in brackets assumes every target dropped with probability 1/k); with a measured, "
        "a^(S-d_w) (1-g)^d_w. Per stratum, since g and a differ between targets read 4 and 256 times. The last "
        "column tests the teacher-forced verbatim count against that many independent windows with the "
        "measured-a chances (exact Poisson-binomial, two-sided; P(X <= observed) for 'below'). A count near the "
        "baseline is explained by per-position accuracy alone; below it, misses cluster in some windows; above it, "
        "hits do.")
