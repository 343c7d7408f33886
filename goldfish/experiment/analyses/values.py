"""The exchangeable-value leak test on a cell's canaries, the whole analysis (``goldfish.eval.value_audit``): its
``values.json``, the cell summary's ``value_audit`` and the report section.

Every cell of a study whose data has canaries (``data.canaries.count``; the ``canaries`` eval task, their exposure,
is not needed) is read on the positions
of one Goldfish mask: its own base mask for a Goldfish arm (a positive control's too: its supervised share lies among
those positions), else the first Goldfish cell's on the same data (the standard arm and the control are read on the
positions Goldfish drops). Per position class (dropped, kept) the mean over targets of the true token's rank among
its exchangeable set; 0.5 exactly under no leak. Across runs the readings (``goldfish.experiment.sections.readings``)
test each arm's dropped-position mean against 0.5.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from goldfish.eval.tables import fmt_num, markdown_section, markdown_table
from goldfish.eval.value_audit import NULL_RANK, mean_ranks, value_ranks

from ...data import load_prepared
from ...data.canaries import canary_alphabet
from ...io import atomic_write_json, read_json
from ..glossary import define
from ..plan import CellFolder, CellPlan
from .attacks import goldfish_plan
from .base import Analysis, Cell, Others, Section

VALUE_TERMS = define(
    "exchangeable-value test",
    (
        "each canary token is drawn uniformly from the alphabet; given its context and the mask's decision at its "
        "position, it is uniform over the ids the mask would have treated the same way (dropped or kept). Its rank "
        "among them by the model's logit, teacher-forced, is 0.5 on average exactly when the model's prediction "
        "there says nothing about it: the null is the Goldfish model itself, matched to Goldfish by construction. "
        "Above 0.5 on the dropped positions: the model learned tokens it never trained on (a leak); on positions "
        "the loss trained on it rises towards 1 as the canaries are memorised"
    ),
)


def values_file(folder: CellFolder) -> Path:
    """The cell's exchangeable-value test on its canaries: ``values.json``."""
    return folder.dir / "values.json"


def write_values(plan: CellPlan, model: Any, others: Others) -> dict | None:
    """Rank every canary target of the cell's prepared data among its exchangeable set under the Goldfish mask the
    cell is read on (module docstring) and write ``values.json``; None (nothing written) when no cell of the study
    trains with a Goldfish mask on this data."""
    prepared = load_prepared(plan.data_dir)
    source = goldfish_plan(plan, others.plans)
    if source is None or prepared.canaries is None:
        return None
    gcfg = source.mask(prepared).base
    canaries = [list(map(int, ids)) for ids in prepared.canaries["input_ids"]]
    labels = [int(r) for r in prepared.canaries["repetitions"]]
    ranks = value_ranks(
        model.get(),
        canaries,
        gcfg,
        canary_alphabet(prepared.tokenizer).tolist(),
        token_budget=plan.eval_cfg.membership.token_budget,
        chunk=plan.eval_cfg.membership.chunk,
    )
    result = {
        "mask": {"arm": source.cell.arm, "k": gcfg.k, "h": gcfg.h, "strategy": gcfg.strategy, "seed": gcfg.seed},
        "null_rank": NULL_RANK,
        "canaries": len(canaries),
        **mean_ranks(ranks, labels),
    }
    atomic_write_json(values_file(plan), result)
    return result


@dataclasses.dataclass
class ValuesSummary:
    """The cell summary's part (SCHEMA.md, ``cells``): ``value_audit``, the cell's ``values.json`` (None without
    one)."""

    value_audit: dict | None = None


def collect(plan: CellPlan) -> ValuesSummary:
    found = values_file(plan)
    return ValuesSummary(read_json(found) if found.is_file() else None)


def render(results: dict, cells: Sequence[Cell]) -> str:
    """Per cell, the mean rank of the canary tokens on the dropped and the kept positions, per repetition label."""
    rows = []
    for c in cells:
        audit = getattr(c, "value_audit", None)
        if not audit:
            continue
        labels = audit.get("by_label") or {}
        rows.append(
            [
                c.cell,
                audit["mask"]["arm"],
                fmt_num(audit["dropped"]["mean_rank"], 3),
                str(audit["dropped"]["positions"]),
                fmt_num(audit["kept"]["mean_rank"], 3),
                fmt_num((audit.get("foreign_dropped") or {}).get("mean_rank"), 3),
                "; ".join(
                    f"x{lab}: {fmt_num(v['dropped']['mean_rank'], 3)} / {fmt_num(v['kept']['mean_rank'], 3)}"
                    for lab, v in sorted(labels.items(), key=lambda kv: int(kv[0]))
                ),
            ]
        )
    if not rows:
        return ""
    table = markdown_table(
        [
            "cell",
            "mask of",
            "dropped: mean rank",
            "positions",
            "kept: mean rank",
            "dropped, in another canary's context",
            "dropped / kept by copies",
        ],
        rows,
    )
    return markdown_section(
        "Exchangeable-value test on the canaries",
        f"Mean rank of each canary token among the ids its mask treats alike: {NULL_RANK} under no leak, exactly. In "
        "another canary's context (the same position of the next canary) a dropped token's rank is 0.5 unless the "
        "model favours the tokens it has seen anywhere; above that, the model knows it in place. " + VALUE_TERMS,
        table,
    )


def run(plan: CellPlan, model: Any, others: Others) -> dict | None:
    return write_values(plan, model, others)


VALUES = Analysis(
    name="values",
    output=values_file,
    applies=lambda plan: bool(getattr(plan.prepare_cfg.canaries, "count", 0)),
    run=run,
    part=ValuesSummary,
    collect=collect,
    sections=(Section(after="leakage", render=render),),
    reads_control=True,
)
