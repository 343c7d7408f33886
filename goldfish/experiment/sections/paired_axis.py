"""Paired tests across one grid axis (the experiment's ``compare`` section): each value of the axis against a reference
value for the same arm, per repetition stratum, with cells that differ only in ``compare.pool`` axes pooled
(:func:`goldfish.experiment.inference.axis_tests`, into ``results.json`` as ``paired_axis``)."""

from __future__ import annotations

from typing import Sequence

from goldfish.eval.tables import bootstrap_text, markdown_table, mcnemar_text, num

from ..inference import EXTRACTION, axis_tests
from ..summary import Study


def compute(study: Study) -> dict:
    cfg = study.cfg
    if not cfg.compare.axis:
        return {"paired_axis": []}
    # an axis tuned per value of the compared one (the learning rate per size) is not matched: each cell is compared
    # at its own chosen value
    free = [cfg.tune.axis] if cfg.tune.axis and cfg.compare.axis in cfg.tune.per else []
    return {
        "paired_axis": axis_tests(
            study.done, study.axes, cfg.compare.axis, cfg.compare.reference, cfg.compare.pool, free=free
        )
    }


def axis_markdown(tests: Sequence[dict], pool: Sequence[str]) -> list[str]:
    """The report section of :func:`axis_tests` (empty without tests)."""
    if not tests:
        return []
    t0 = tests[0]
    others = [
        k
        for k in t0
        if k
        not in ("arm", "axis", "value", "reference", "repetitions", "cells", "n_windows", "n_documents", *EXTRACTION)
    ]
    rows = []
    for t in tests:
        em = t["exact_match"]
        rows.append(
            [
                t["arm"],
                str(t["value"]),
                *(str(t.get(k)) for k in others),
                str(t["repetitions"]),
                f"{t['n_windows']} ({t['n_documents']})",
                f"{num(em['a_rate'], True)} / {num(em['b_rate'], True)}; {mcnemar_text(em)}",
                bootstrap_text(t.get("rouge_l_paper")),
            ]
        )
    pooled = f", pooled over {', '.join(pool)}" if pool else ""
    return [
        f"## Paired against {t0['axis']}={t0['reference']} (same arm{pooled}, the same target windows)",
        "",
        markdown_table(
            [
                "arm",
                t0["axis"],
                *others,
                "repetitions",
                "windows (documents)",
                f"exact match value / {t0['reference']}; discordant, McNemar over documents",
                f"ROUGE-L rouge-score value / {t0['reference']}, difference [95 % CI] (p)",
            ],
            rows,
        ),
        "",
        f"Each cell against the cell of the same arm and other settings at {t0['axis']}={t0['reference']}, "
        "windows matched by their sha256 (the same targets, evaluated unedited), per repetition stratum and over "
        "all. Exact match: McNemar's exact test over documents (a sign test of each document's difference where it "
        "has several windows); ROUGE-L: paired bootstrap resampling documents. A text that is a target in "
        "several pooled pairs of cells (two seeds' splits) counts once per pair: independent models scored it.",
        "",
    ]


def render(results: dict) -> str:
    pool = ((results.get("config") or {}).get("compare") or {}).get("pool") or []
    return "\n".join(axis_markdown(results.get("paired_axis") or [], pool))
