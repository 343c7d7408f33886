"""A few side-by-side generations per arm (the same documents in every arm), differences highlighted: the first
``report_examples`` member windows of the first arm's first cell, and the same windows of each other arm's first
cell. The windows are copied into ``results.json`` (``examples``) so the report renders from the results alone."""

from __future__ import annotations

from goldfish.eval.tables import highlight_differences

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
        out.append({"arm": arm, "windows": [{k: by_key[key][k] for k in KEPT if k in by_key[key]}
                                            for key in chosen if key in by_key]})
    return {"examples": out}


def render(results: dict) -> str:
    parts = []
    for entry in results.get("examples") or []:
        parts.append(f"### {entry['arm']}\n")
        for w in entry["windows"]:
            gen, truth = highlight_differences(w["generation"], w["truth"])
            verdict = "verbatim" if w["exact_match"] else \
                f"ROUGE-L {w.get('rouge_l_paper', w['rouge_l']):.2f} (rouge-score), {w['rouge_l']:.2f} (tokens)"
            parts.append(f"**{w.get('title') or w['doc_id']}** (prefix {w['prefix_len']} tokens, {verdict})\n\n"
                         f"- generated: {gen}\n- truth: {truth}\n")
    if not parts:
        return ""
    return "\n".join(["## Side-by-side generations (differences in bold / struck through)", "", "\n".join(parts)])
