"""A few example generations per arm (the same documents in every arm): the first ``report_examples`` member windows
of the first arm's first cell, and the same windows of each other arm's first cell. The windows are copied into
``results.json`` (``examples``) so the reports render from the results alone: report.md lists each window's verdict,
report.html shows the generation beside the truth."""

from __future__ import annotations

from goldfish.eval.tables import markdown_section, markdown_table

from ...io import read_json
from ..summary import Study

KEPT = ("doc_id", "title", "prefix_len", "generation", "truth", "exact_match", "rouge_l_paper", "rouge_l")


def compute(study: Study) -> dict:
    """``examples``: ``[{arm, windows: [{doc_id, title, prefix_len, generation, truth, exact_match, rouge_l_paper,
    rouge_l}]}]``, one entry per arm; empty with ``report_examples: 0``."""
    shown = study.cfg.report_examples
    if shown <= 0:
        return {"examples": []}
    first: dict[str, object] = {}
    for plan in study.done:
        first.setdefault(plan.cell.arm, plan)
    out = []
    chosen: list[tuple] | None = None
    for arm, plan in first.items():
        windows = [w for w in read_json(plan.results_file)["windows"] if w.get("split") in (None, "members")]
        if chosen is None:
            chosen = [(w["doc_id"], w["prefix_len"]) for w in windows[:shown]]
        by_key = {(w["doc_id"], w["prefix_len"]): w for w in windows}
        out.append(
            {
                "arm": arm,
                "windows": [{k: by_key[key][k] for k in KEPT if k in by_key[key]} for key in chosen if key in by_key],
            }
        )
    return {"examples": out}


def render(results: dict) -> str:
    """One row per example window: its document, placement and verdict; the generated text beside the truth, with
    the differences marked, is in the study's report.html (the same ``examples`` of results.json)."""
    rows = []
    for entry in results.get("examples") or []:
        for w in entry["windows"]:
            verdict = (
                "verbatim"
                if w["exact_match"]
                else f"ROUGE-L {w.get('rouge_l_paper', w['rouge_l']):.2f} (rouge-score), {w['rouge_l']:.2f} (tokens)"
            )
            placement = "all" if w["prefix_len"] == -1 else str(w["prefix_len"])
            rows.append([entry["arm"], w.get("title") or w["doc_id"], placement, verdict])
    if not rows:
        return ""
    return markdown_section(
        "Example generations",
        markdown_table(["arm", "document", "prefix tokens", "verdict"], rows),
        "Generations beside the truth: report.html.",
    )
