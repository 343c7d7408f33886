"""Ours beside the paper's Fig. 1 (``paper_numbers: true``): the mean over the arms named standard, goldfish and
control. ``goldfish experiment`` prints it on the terminal too."""

from __future__ import annotations

from goldfish.eval.metrics import ROUGE
from goldfish.eval.tables import fmt, markdown_section, markdown_table, plain_table

from ..glossary import define
from ..summary import Study
from .spread import arm_means

# Hans et al. 2024 (NeurIPS), Fig. 1: Llama-2-7B fine-tuned on 100 Wikipedia articles for 100 epochs; Goldfish k=4.
PAPER_FIG1 = {
    "standard": {"exact_match_rate": 0.85, "rouge_l_paper": 0.96},
    "goldfish": {"exact_match_rate": 0.0, "rouge_l_paper": 0.51},
    "control": {"exact_match_rate": 0.0, "rouge_l_paper": 0.26},
}
PAPER_SETTING = "Hans et al. 2024, Fig. 1: Llama-2-7B, 100 Wikipedia articles x 100 epochs, Goldfish k=4"


PAPER_TERMS = define(
    "beside the paper",
    (
        "The paper's model is 50x larger and saw 100 epochs; compare the ordering (control < Goldfish < standard in "
        "ROUGE-L, exact match only for standard), not the decimals. ROUGE-L is compared as the paper computes it "
        "(rouge-score on the decoded words); our token-id ROUGE-L is beside it."
    ),
)


def compute(study: Study) -> dict:
    return {}


def paper_table(results: dict, markdown: bool = True) -> str | None:
    """Ours (mean over the arm's cells) beside the paper's Fig. 1 for the arms standard / goldfish / control."""
    rows = []
    for arm, metrics in arm_means(results).items():
        paper = PAPER_FIG1.get(arm)
        if paper is None:
            continue
        em, rl, tok = (metrics.get(k) for k in ("exact_match_rate", *ROUGE))
        rows.append(
            [
                arm,
                fmt(em[0] if em else None, "pct"),
                fmt(paper["exact_match_rate"], "pct"),
                fmt(rl[0] if rl else None),
                fmt(paper["rouge_l_paper"]),
                fmt(tok[0] if tok else None),
            ]
        )
    if not rows:
        return None
    header = [
        "arm",
        "exact match (ours)",
        "exact match (paper)",
        "ROUGE-L rouge-score (ours)",
        "ROUGE-L (paper)",
        "ROUGE-L token ids (ours)",
    ]
    return markdown_table(header, rows) if markdown else plain_table(header, rows)


def render(results: dict) -> str:
    paper = paper_table(results) if (results.get("config") or {}).get("paper_numbers") else None
    if not paper:
        return ""
    return markdown_section("Beside the paper", f"{PAPER_SETTING}; ours: the setting above.", paper, PAPER_TERMS)
