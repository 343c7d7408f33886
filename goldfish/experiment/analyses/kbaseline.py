"""Each Goldfish cell's mask-arithmetic baseline (see ``goldfish.eval.baseline``), the whole analysis: after
evaluation, the mean over windows of ``(1 - g)^d_w`` from each window's own dropped count, the nominal
``(1 - g/k)^S`` and, with the measured kept-token accuracy a, ``a^(S - d_w) (1 - g)^d_w`` with the exact test of the
verbatim count against it, over all windows and per repetition stratum, written to the cell's
``eval/k_baseline.json``; the cell summary's ``k_baseline`` (that file, null for a standard-loss cell); and the report
section showing it next to exact match."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from goldfish.eval.baseline import baseline_rows
from goldfish.eval.tables import fmt, markdown_section, markdown_table, p_text

from ...data import load_prepared
from ...io import atomic_write_json, read_json
from ..glossary import define
from ..plan import CellFolder, CellPlan
from .base import Analysis, Cell, Section


BASELINE_TERMS = define(
    "mask baseline",
    (
        "g: fraction of the suffix positions the cell's own mask dropped whose teacher-forced argmax is wrong; a: "
        "fraction of the kept suffix positions whose argmax is right. The baseline is the exact-match rate of a model "
        "whose misses are independent across positions: with a = 1 (kept tokens known, the old assumption) the mean "
        "over windows of (1-g)^d_w, d_w the dropped targets in window w's suffix as the mask placed them (the "
        "nominal (1-g/k)^S in brackets assumes every target dropped with probability 1/k); with a measured, "
        "a^(S-d_w) (1-g)^d_w. Per stratum, since g and a differ between targets read 4 and 256 times. The last "
        "column tests the teacher-forced verbatim count against that many independent windows with the "
        "measured-a chances (exact Poisson-binomial, two-sided; P(X <= observed) for 'below'). A count near the "
        "baseline is explained by per-position accuracy alone; below it, misses cluster in some windows; above it, "
        "hits do. A g measured on the windows it judges moves with any leak it should detect (a leaked dropped "
        "token lowers g and so raises the baseline), so the last column takes g from the same model on the "
        "nonmembers' windows (same prefix length and mask, text it never trained on) instead."
    ),
)


def k_baseline_file(folder: CellFolder) -> Path:
    """The cell's mask-arithmetic baseline: ``eval/k_baseline.json``."""
    return folder.eval_dir / "k_baseline.json"


def write_k_baseline(plan: CellPlan, model: Any) -> Path | None:
    """Measure g on the cell's member windows (prefix from token 0: each prefix length of the eval config, ``all``
    = all but the last suffix_len tokens) with the mask the cell's training recorded, and beside it on the
    nonmembers' windows (``nonmember_g``: a g no leak can move), from the cell's shared ``model`` handle
    (``goldfish.eval.loading.SharedModel``); None (nothing written) for a standard-loss cell."""
    prepared = load_prepared(plan.data_dir)
    gcfg = plan.mask(prepared)
    if gcfg is None:
        return None
    docs = [m["input_ids"] for m in prepared.members]
    reps = [int(r) for r in prepared.members["repetitions"]]
    heldout = [m["input_ids"] for m in prepared.nonmembers]
    rows = baseline_rows(
        model.get(),
        docs,
        plan.eval_cfg.data.prefix_lens,
        plan.eval_cfg.data.suffix_len,
        gcfg,
        reps,
        heldout=heldout,
        token_budget=plan.eval_cfg.membership.token_budget,
        chunk=plan.eval_cfg.membership.chunk,
        memo=model.memo,  # the windows evaluation scored (whole documents under prefix_lens [all]) are not rescored
    )
    out = k_baseline_file(plan)
    atomic_write_json(
        out,
        {
            "k": gcfg.k,
            "h": gcfg.h,
            "strategy": gcfg.strategy,
            "suffix_len": plan.eval_cfg.data.suffix_len,
            "rows": rows,
        },
    )
    return out


@dataclasses.dataclass
class KBaselineSummary:
    """The cell summary's part (SCHEMA.md, ``cells``): ``k_baseline``, the cell's ``eval/k_baseline.json``
    ``{k, h, strategy, suffix_len, rows}``, None for a cell without a Goldfish mask."""

    k_baseline: dict | None = None


def collect(plan: CellPlan) -> KBaselineSummary:
    found = k_baseline_file(plan)
    return KBaselineSummary(read_json(found) if found.is_file() else None)


def _greedy(c: Cell, prefix: int, stratum: object) -> float | None:
    """The cell's greedy exact-match rate at a prefix length, over all windows or one stratum."""
    if stratum == "all":
        return ((c.by_prefix_len or {}).get(str(prefix)) or {}).get("exact_match_rate")
    found = [s for s in c.strata or [] if s.get("prefix_len") == prefix and s.get("repetitions") == stratum]
    return found[0].get("exact_match_rate") if found else None


def _test_text(r: dict, t: dict | None) -> str:
    """``3 vs 4.1 expected, p 0.72 (P(<=) 0.41)``: the verbatim count of row ``r`` against a baseline's test ``t``."""
    if not t:
        return "-"
    return (
        f"{r['onepass_exact']} vs {t['expected']:.1f} expected, p {p_text(t['p_value'])} "
        f"(P(X <= {r['onepass_exact']}) {t['p_at_most']:.2g})"
    )


def _nonmember_text(r: dict) -> str:
    """The baseline with g from the nonmembers: ``g 0.610: 2.0 %, 3 vs 4.1 expected, p ...`` ("-" without it)."""
    ref = r.get("nonmember_g")
    if not ref or ref.get("g") is None:
        return "-"
    return f"g {fmt(ref['g'])}: {fmt(ref.get('baseline_kept'), 'pct')}; {_test_text(r, ref.get('test'))}"


def k_baseline_table(results: dict, cells: Sequence[Cell]) -> str | None:
    """Exact match next to the baseline, a row per Goldfish cell, prefix length and stratum (None without a
    Goldfish cell); ``cells``: the typed summaries of ``results``'s cells."""
    axes = results["axes"]
    one = len({c.arm for c in cells}) == len(cells)
    rows = []
    for c in cells:
        kb = c.k_baseline
        if not kb:
            continue
        strata = {r.get("repetitions", "all") for r in kb["rows"]} - {"all"}
        for r in kb["rows"]:
            stratum = r.get("repetitions", "all")
            if len(strata) == 1 and stratum != "all":
                continue  # one stratum: its row is the 'all' row
            shown = str(r["prefix_len"]) if r["prefix_len"] > 0 else "all"
            nominal = r.get("baseline_nominal", r.get("baseline"))
            rows.append(
                [
                    c.label(axes, one),
                    f"{kb['strategy']} k={kb['k']}",
                    shown,
                    "all" if stratum == "all" else f"x{stratum}",
                    f"{fmt(r['n_windows'], 'int')} ({fmt(r.get('n_windows_no_drop'), 'int')})",
                    fmt(_greedy(c, r["prefix_len"], stratum), "pct"),
                    fmt(r["g"]),
                    fmt(r["kept_acc"], "pct"),
                    f"{fmt(r.get('baseline_windows'), 'pct')} ({fmt(nominal, 'pct')})",
                    fmt(r.get("baseline_kept"), "pct"),
                    _test_text(r, r.get("test")),
                    _nonmember_text(r),
                ]
            )
    if not rows:
        return None
    return markdown_table(
        [
            "cell",
            "mask",
            "prefix",
            "stratum",
            "windows (without a dropped token)",
            "exact match",
            "g (dropped missed)",
            "kept-token acc. a",
            "baseline a = 1: mean (1-g)^d_w (nominal)",
            "baseline a measured: mean a^(S-d_w) (1-g)^d_w",
            "verbatim vs baseline (exact test)",
            "with g from the nonmembers: baseline a measured; verbatim vs it",
        ],
        rows,
    )


def render(results: dict, cells: Sequence[Cell]) -> str:
    """Goldfish cells: exact match next to the mask-arithmetic baseline, over all windows of a prefix length and per
    repetition stratum."""
    table = k_baseline_table(results, cells)
    if not table:
        return ""
    return markdown_section("Exact match against the mask baseline", table, BASELINE_TERMS)


K_BASELINE = Analysis(
    name="k baseline",
    output=k_baseline_file,
    applies=lambda plan: not plan.cell.control,  # a standard-loss cell writes none
    run=write_k_baseline,
    part=KBaselineSummary,
    collect=collect,
    summary_keys=("k_baseline",),
    sections=(Section(after="repetition1", render=render),),
)
