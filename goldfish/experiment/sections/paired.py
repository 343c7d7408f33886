"""Paired tests between the arms of each grid point (Goldfish vs standard, each arm vs the control), windows matched
by sha256 and documents by id: exact match by McNemar's test over documents, ROUGE-L by a paired bootstrap over
documents, the headline attack's AUC difference by a paired bootstrap of members and nonmembers
(:func:`goldfish.experiment.inference.paired_tests`, into ``results.json`` and ``summary.json`` as ``paired``)."""

from __future__ import annotations

from typing import Sequence

from goldfish.eval.tables import bootstrap_text, markdown_table, mcnemar_text, num

from ..glossary import define
from ..inference import paired_tests
from ..summary import Study


PAIRED_TERMS = define(
    "paired tests",
    (
        "Each pair of arms on the same grid point, windows matched by their sha256 and documents by id. Exact "
        "match: McNemar's exact test (two-sided binomial at 1/2) on the documents where one arm has more verbatim "
        "windows than the other -- with several windows per document (placements, prefix lengths) a sign test "
        "of the documents, since a document's windows are not independent; with one, the windows themselves. "
        "ROUGE-L: mean of a - b over the matched windows with a 95 % bootstrap interval and two-sided p-value "
        "that resample documents. MIA AUC: the headline attack of arm a on both cells' scores of the same "
        "member and nonmember documents, each resample drawing members and nonmembers separately with the same "
        "draws for both arms. A bootstrap p-value cannot fall below 2/1000 unless every resample agrees."
    ),
)


def compute(study: Study) -> dict:
    return {"paired": paired_tests(study.done, [c.mia_attack for c in study.cells], study.axes)}


def paired_markdown(paired: Sequence[dict], axes: Sequence[str]) -> list[str]:
    """The report section of :func:`paired_tests` (empty without pairs)."""
    if not paired:
        return []
    rows = []
    for t in paired:
        where = " ".join(f"{a}={t.get(a)}" for a in axes)
        em = t["exact_match"]
        rows.append(
            [
                f"{t['a']} vs {t['b']}" + (f" ({where})" if where else ""),
                f"{t['n_windows']} ({t['n_documents']})",
                f"{num(em['a_rate'], True)} / {num(em['b_rate'], True)}; {mcnemar_text(em)}",
                bootstrap_text(t.get("rouge_l_paper")),
                bootstrap_text(t.get("rouge_l")),
                (t["auc"]["attack"] + ": " + bootstrap_text(t["auc"])) if t.get("auc") else "-",
            ]
        )
    return [
        "## Paired tests between arms (same windows, same documents)",
        "",
        markdown_table(
            [
                "a vs b",
                "windows (documents)",
                "exact match a / b; McNemar over documents",
                "ROUGE-L rouge-score a / b, a - b [95 % CI] (p)",
                "ROUGE-L tokens a / b, a - b [95 % CI] (p)",
                "MIA AUC a / b, a - b [95 % CI] (p)",
            ],
            rows,
        ),
        "",
        PAIRED_TERMS,
        "",
    ]


def render(results: dict) -> str:
    return "\n".join(paired_markdown(results.get("paired") or [], results["axes"]))
