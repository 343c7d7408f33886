"""The headline: the regime (from scratch or fine-tuned, what the control is, the model-free blind baseline) and one
row per cell in 8 columns -- extraction with intervals over documents, held-out loss, teacher-forced accuracy on
kept / dropped positions, the headline membership attack with its exact p-value, TPR at 1 % FPR where measurable,
the token budget and training time -- with a note needed in several rows once below the table; then the details
(parameters, ROUGE-L on tokens, the hash-aware AUC, the final training losses). ``goldfish experiment`` prints the
headline on the terminal too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from goldfish.eval.metrics import METRICS
from goldfish.eval.tables import ci_suffix, fmt, markdown_section, markdown_table, plain_table, with_ci

from ..analyses.attacks import blind_auc
from ..glossary import define, refer
from ..summary import CellSummary, Study, cells_of, one_per_arm

N_BOOTSTRAP = 1000


def compute(study: Study) -> dict:
    """The model-free baseline (zlib ratio of the text alone) per prepared folder, and the first one's AUC."""
    per_data = {}
    for p in study.done:
        key = str(p.data_dir)
        if key not in per_data and (p.data_dir / "members").is_dir():  # a real prepared folder
            per_data[key] = blind_auc(p.data_dir, N_BOOTSTRAP, 0)
    if not per_data:
        return {}
    first = next(iter(per_data.values()))
    return {"blind_auc": first["auc"], "blind_auc_ci": [first["auc_ci_low"], first["auc_ci_high"]], "blind": per_data}


def regime(results: dict) -> str:
    """One sentence: fine-tuned from which model, or trained from scratch; and the blind baseline."""
    start = results.get("start_model")
    trained = results.get("control_mode") == "background"
    if start:
        control = (
            "that model fine-tuned on the background alone"
            if trained
            else "that model, not fine-tuned on the target data (its pretraining may have included them)"
        )
        text = f"Regime: fine-tuning the pretrained model `{Path(start).name}`; the control is {control}."
    else:
        control = (
            "the same model trained on the same background without the targets"
            if trained
            else "the untrained initial weights"
        )
        text = f"Regime: trained from scratch; the control is {control}."
    if results.get("blind_auc") is not None:
        low, high = results.get("blind_auc_ci") or (None, None)
        text += (
            f" Blind baseline (zlib ratio of the text alone, no model): AUC {fmt(results['blind_auc'])} "
            f"[{fmt(low)}, {fmt(high)}] (*blind baseline* in the glossary)."
        )
    return text


def extraction_text(c: CellSummary, name: str, kind: str = "") -> str:
    """A member-window mean with its 95 % interval over documents (``extraction_ci``), else the plain value."""
    d = (c.extraction_ci or {}).get(name)
    if not d:
        return fmt(getattr(c, METRICS[name].summary_key), kind)
    return with_ci(d["mean"], d.get("ci_low"), d.get("ci_high"), kind)


def auc_text(c: CellSummary) -> str:
    """The headline AUC with its exact p-value; a bootstrap interval only where it is not degenerate (a perfect
    separation resamples to AUC 1 every time, so its exact probability under the null stands in its place)."""
    p = c.mia_auc_p or {}
    if p.get("method") == "perfect":
        return f"{fmt(c.mia_auc)} (p = 10^{p['log10_p']:.1f}, perfect)"
    shown = f" (p {p['p_value']:.2g})" if p.get("p_value") is not None else ""
    return f"{fmt(c.mia_auc)}{ci_suffix(c.mia_auc_ci_low, c.mia_auc_ci_high)}{shown}"


def tpr_text(c: CellSummary) -> str:
    """TPR at 1 % FPR, or why it is withheld (fewer than 100 nonmembers)."""
    if c.mia_tpr_at_1pct_fpr is not None:
        return fmt(c.mia_tpr_at_1pct_fpr, "pct")
    return c.mia_tpr_at_1pct_fpr_note or "-"


def _noted(text: str, notes: dict[str, str]) -> str:
    """A table entry too long to repeat per row: a letter, its text once below the table (``notes``: text ->
    letter, filled in order)."""
    letter = notes.setdefault(text, "abcdefghijklmnopqrstuvwxyz"[len(notes) % 26])
    return f"({letter})"


def headline_table(results: dict, markdown: bool = True) -> str:
    """Per cell, 8 columns: exact match and ROUGE-L (rouge-score) with intervals over documents, held-out loss,
    teacher-forced accuracy on kept / dropped positions, MIA AUC of the headline attack (interval and permutation
    p-value), TPR at 1 % FPR where measurable, tokens and training time; what is the same in every row (the attack)
    goes in the header, a note needed in several rows once below the table (:func:`headline_notes`); the rest in
    :func:`details_table`."""
    cells, axes = cells_of(results), results["axes"]
    one = one_per_arm(cells)
    attacks = list(dict.fromkeys(str(c.mia_attack) for c in cells))
    notes: dict[str, str] = {}
    header = [
        "cell",
        "exact match [within-run]",
        "ROUGE-L (rouge-score) [within-run]",
        "held-out loss",
        "TF acc kept / dropped",
        (f"MIA AUC ({attacks[0]})" if len(attacks) == 1 else "MIA AUC (attack)") + " [within-run]",
        "TPR at 1 % FPR",
        "tokens, train time",
    ]
    rows: list[list[Any]] = []
    for c in cells:
        auc = auc_text(c) + ("" if len(attacks) == 1 else f" ({c.mia_attack})")
        tpr = (
            fmt(c.mia_tpr_at_1pct_fpr, "pct")
            if c.mia_tpr_at_1pct_fpr is not None
            else _noted(c.mia_tpr_at_1pct_fpr_note or "not measured", notes)
            if c.mia_auc is not None
            else "-"
        )
        rows.append(
            [
                c.label(axes, one),
                extraction_text(c, "exact_match", "pct"),
                extraction_text(c, "rouge_l_paper"),
                fmt(c.heldout_loss),
                f"{fmt(c.tf_kept_accuracy, 'pct')} / {fmt(c.tf_dropped_accuracy, 'pct')}",
                auc,
                tpr,
                f"{fmt(c.tokens_seen, 'int')}, {fmt(c.train_time_s, 's')}",
            ]
        )
    table = markdown_table(header, rows) if markdown else plain_table(header, rows)
    below = [f"({letter}) TPR at 1 % FPR withheld: {text}" for text, letter in notes.items()]
    return "\n\n".join([table, *below]) if markdown else "\n".join([table, *below])


def details_table(results: dict) -> str:
    """Per cell, what the headline leaves out: parameters, ROUGE-L on token ids, the hash-aware AUC, the final
    training loss on kept / dropped tokens."""
    cells, axes = cells_of(results), results["axes"]
    one = one_per_arm(cells)
    rows = []
    for c in cells:
        kept = c.mia_auc_kept_reference if c.mia_auc_kept_reference is not None else c.mia_auc_kept_loss
        tpr = (
            fmt(c.mia_tpr_at_0_1pct_fpr, "pct")
            if c.mia_tpr_at_0_1pct_fpr is not None
            else "-"
            if c.mia_auc is None
            else f"- ({(c.mia_tpr_at_0_1pct_fpr_note or 'not measured').split(':')[0]})"
        )
        rows.append(
            [
                c.label(axes, one),
                fmt(c.params, "params"),
                extraction_text(c, "rouge_l"),
                fmt(kept),
                tpr,
                f"{fmt(c.final_kept_loss)} / {fmt(c.final_dropped_loss)}",
            ]
        )
    header = [
        "cell",
        "params",
        "ROUGE-L (tokens) [within-run]",
        "MIA AUC kept tokens",
        "TPR at 0.1 % FPR",
        "final kept / dropped loss",
    ]
    if all(c.mia_tpr_at_0_1pct_fpr is None for c in cells):  # no cell resolves 0.1 % FPR: its glossary entry says why
        header, rows = header[:4] + header[5:], [r[:4] + r[5:] for r in rows]
    return markdown_table(header, rows)


define(
    "headline table",
    (
        "Every interval in this table is within-run: it resamples documents (or windows) inside one trained model; "
        "with several training runs (seeds) the reading is made across runs (section 'Across training runs'). "
        "Exact match and ROUGE-L: mean over the member windows with a 95 % bootstrap interval that resamples "
        "documents (windows of one document, e.g. at two prefix lengths, are not independent). ROUGE-L "
        "(rouge-score) is the paper's: word-level ROUGE-L F1 of the decoded texts by the rouge-score package "
        "(lower-cased words, no stemming, as the paper's evaluation calls it). "
        "MIA AUC: members (trained text) vs nonmembers, 95 % bootstrap CI and the one-sided permutation "
        "p-value of an AUC at least this large (exact without ties up to 400 documents; at AUC 1 the exact "
        "1 / C(m + n, m), shown instead of the degenerate bootstrap interval); 0.5 = chance. The attack is named in "
        "the column (reference = target NLL calibrated by the control's model; loss = plain NLL). TPR at 1 % FPR "
        "is shown only with at least 100 nonmembers (below that it is the TPR at zero false positives). TF acc "
        "kept / dropped: teacher-forced top-1 accuracy of the member tokens at the positions the Goldfish mask "
        "keeps / drops (the same positions in every arm): a Goldfish model that fills dropped tokens back in shows "
        "it here. With `later_chunk` nonmembers (openings vs bodies of the same articles) a shift in kind separates "
        "the sets without any memorisation: compare arms rather than reading the absolute AUC. Held-out loss: mean "
        "per-token NLL of the nonmember text (lower = better language model; compare with the control's)."
    ),
)
BLIND_TERMS = define(
    "blind baseline",
    (
        "The zlib ratio of each text alone, no model, as a membership score: what separates members from nonmembers "
        "without any training. It is a check, not the evidence: with a seeded random split of one pool (the default) "
        "members and nonmembers are exchangeable by design, whatever this AUC reads; with `later_chunk` nonmembers "
        "(openings vs bodies) it shows the shift in kind a model's AUC would also pick up."
    ),
)
define(
    "headline details",
    (
        "Details: ROUGE-L (tokens) is the same F1 on token ids; TPR at 0.1 % FPR is shown only with at least "
        "1000 nonmembers (the same rule as at 1 %); MIA AUC kept tokens is the hash-aware attack, "
        "scoring only the targets the Goldfish mask keeps (the hash is public); final kept / dropped loss: the "
        "training loss on kept / dropped targets over the last 5 % of steps."
    ),
)


def render(results: dict) -> str:
    return markdown_section(
        "Headline",
        regime(results),
        headline_table(results),
        details_table(results),
        refer("headline table", "headline details"),
    )
