"""Exact statistics of a cell and paired tests between the arms of a grid point (:mod:`goldfish.eval.stats`).

Per cell (:func:`cell_statistics`, into the cell summary):

* ``mia_auc_p``: the headline attack's one-sided permutation p-value (``auc_pvalue``): at AUC = 1, exactly
  ``1 / C(m + n, m)``, where a percentile bootstrap can only say "[1.000, 1.000]";
* ``mia_tpr_at_1pct_fpr`` and ``mia_tpr_at_0_1pct_fpr``: TPR at 1 % FPR only with >= 100 nonmembers, at 0.1 % FPR
  only with >= 1000 (both by ``tpr_at_fpr``, one rule: ``ceil(1 / fpr)`` nonmembers), else None and its ``_note``
  says how many it needs;
* ``extraction_ci``: exact match and both ROUGE-Ls over the member windows with a 95 % interval that resamples
  *documents* (``cluster_bootstrap_mean``): several windows of one document (two prefix lengths, say) are not
  independent. Exact match keeps Wilson's interval with one window per document, and takes Wilson's over the
  documents where a rate of 0 or 1 would make the bootstrap degenerate (``method`` names which).

Across a grid axis (:func:`axis_tests`, the experiment's ``compare`` section, into ``results.json`` as
``paired_axis``): each value of the axis against a reference value for the same arm, per repetition stratum, with
cells that differ only in ``compare.pool`` axes (e.g. seeds) pooled.

Between arms (:func:`paired_tests`, into ``results.json`` and ``summary.json`` as ``paired``): in each grid point
(cells with the same axis values and data), every later non-control arm against every earlier one (e.g. Goldfish vs
standard), then every arm against the control; windows matched by their sha256 and documents by their id, never by
position: exact match by McNemar's test over documents (the exact sign test of each document's difference in verbatim
windows; McNemar's exact test with one window per document), ROUGE-L (rouge-score and token ids) by a paired bootstrap
over documents, and the AUC difference of the headline attack by a paired bootstrap of member and nonmember documents.
"""

from __future__ import annotations

from typing import Any, Sequence

from goldfish.eval import stats

from ..io import read_json
from .grid import CONTROL
from .plan import CellPlan

N_BOOTSTRAP = 1000
FPR = 0.01
FPRS = {"1pct": FPR, "0_1pct": 0.001}  # the cell summary's mia_tpr_at_<key>_fpr (+ _note), each by tpr_at_fpr
EXTRACTION = ("exact_match", "rouge_l_paper", "rouge_l")  # per-window measures given document-level intervals


def member_windows(windows: Sequence[dict]) -> list[dict]:
    """The extraction windows of member documents."""
    return [w for w in windows if w.get("split") in (None, "members")]


def cell_statistics(scores: dict | None, windows: Sequence[dict], seed: int = 0) -> dict[str, Any]:
    """``mia_auc_p``, ``mia_tpr_at_<1pct | 0_1pct>_fpr`` (+ ``_note``; :data:`FPRS`) of the headline attack's
    per-document ``scores`` (``{"members": [...], "nonmembers": [...]}``, None when not kept) and ``extraction_ci``
    of the member windows."""
    out: dict[str, Any] = {"mia_auc_p": None}
    for key in FPRS:
        out[f"mia_tpr_at_{key}_fpr"] = None
        out[f"mia_tpr_at_{key}_fpr_note"] = "no per-document scores of the attack were kept"
    if scores and scores.get("members") and scores.get("nonmembers"):
        out["mia_auc_p"] = stats.auc_pvalue(scores["members"], scores["nonmembers"])
        for key, fpr in FPRS.items():
            tpr = stats.tpr_at_fpr(scores["members"], scores["nonmembers"], fpr)
            out[f"mia_tpr_at_{key}_fpr"], out[f"mia_tpr_at_{key}_fpr_note"] = tpr["tpr"], tpr["note"]
    ws = member_windows(windows)
    out["extraction_ci"] = {}
    for name in EXTRACTION:
        kept = [w for w in ws if w.get(name) is not None]
        if kept:
            found = stats.cluster_bootstrap_mean(
                [float(w[name]) for w in kept], [w.get("doc_id") for w in kept], N_BOOTSTRAP, seed
            )
            found["method"] = "cluster bootstrap"
            if name == "exact_match":
                found.update(rate_interval(found))
            out["extraction_ci"][name] = found
    return out


def rate_interval(found: dict) -> dict[str, Any]:
    """The exact-match interval where a bootstrap says too little: with one window per document, Wilson's over the
    windows (as eval reports it); a rate of 0 or 1 over several windows per document resamples to itself every
    time, so then Wilson's over the documents (each document's windows all verbatim or all not)."""
    n_items, n_docs, mean = found["n_items"], found["n_clusters"], found["mean"]
    if n_items == n_docs:
        low, high = stats.wilson_interval(round(mean * n_items), n_items)
        return {"ci_low": low, "ci_high": high, "method": "wilson"}
    if mean in (0.0, 1.0):
        low, high = stats.wilson_interval(round(mean * n_docs), n_docs)
        return {"ci_low": low, "ci_high": high, "method": "wilson over documents"}
    return {}


def _pair_windows(a: Sequence[dict], b: Sequence[dict]) -> tuple[list[dict], list[dict]]:
    """The member windows both cells evaluated, matched by sha256, in ``a``'s order."""
    by_key = {w["sha256"]: w for w in member_windows(b) if w.get("sha256")}
    both = [(w, by_key[w["sha256"]]) for w in member_windows(a) if w.get("sha256") in by_key]
    return [x for x, _ in both], [y for _, y in both]


def _pair_scores(a: dict, b: dict, attack: str) -> dict[str, tuple[list, list]] | None:
    """``{"members" | "nonmembers": (a's scores, b's scores)}`` of ``attack`` on the documents both attacks.json
    scored, matched by document id; None when either lacks the attack's scores or the ids."""
    sa, sb = (a.get("scores") or {}).get(attack), (b.get("scores") or {}).get(attack)
    ia, ib = a.get("doc_ids") or {}, b.get("doc_ids") or {}
    if not sa or not sb or not ia or not ib:
        return None
    out = {}
    for split in ("members", "nonmembers"):
        found = dict(zip(ib.get(split) or [], sb.get(split) or []))
        ids = [i for i in ia.get(split) or [] if i in found]
        mine = dict(zip(ia[split], sa[split]))
        out[split] = ([mine[i] for i in ids], [found[i] for i in ids])
    return out


def _nan(values: list) -> list[float]:
    return [float("nan") if v is None else float(v) for v in values]


def window_tests(
    wa: Sequence[dict], wb: Sequence[dict], seed: int = 0, clusters: Sequence[Any] | None = None
) -> dict[str, Any]:
    """Paired tests of matched windows (``wa[i]`` and ``wb[i]``: one window of one document): ``n_windows``,
    ``n_documents``, ``exact_match`` (McNemar's test over documents, :func:`goldfish.eval.stats.document_mcnemar`:
    the windows of one document -- placements, prefix lengths -- are one cluster), ``rouge_l_paper`` / ``rouge_l``
    (paired bootstrap resampling documents). ``clusters[i]``: window i's document where the id alone does not say
    it (pooled pairs of cells: a text that is a target in two seeds' cells is two documents, scored by independent
    models); default the windows' ``doc_id``."""
    docs = list(clusters) if clusters is not None else [w.get("doc_id") for w in wa]
    out: dict[str, Any] = {
        "n_windows": len(wa),
        "n_documents": len(set(docs)),
        "exact_match": stats.document_mcnemar(
            [bool(w.get("exact_match")) for w in wa], [bool(w.get("exact_match")) for w in wb], docs
        ),
    }
    for name in EXTRACTION[1:]:
        pairs = [
            (x[name], y[name], d)
            for x, y, d in zip(wa, wb, docs)
            if x.get(name) is not None and y.get(name) is not None
        ]
        out[name] = (
            stats.paired_bootstrap(
                [p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs], N_BOOTSTRAP, seed
            )
            if pairs
            else None
        )
    return out


def compare(a: dict, b: dict, attack: str, seed: int = 0) -> dict[str, Any]:
    """Paired tests of cell ``a`` against cell ``b``, each ``{"windows": [...], "attacks": attacks.json}``: those of
    :func:`window_tests` on the windows both evaluated, and ``auc`` (``attack``'s paired AUC difference; None without
    per-document scores)."""
    out = window_tests(*_pair_windows(a["windows"], b["windows"]), seed)
    scores = _pair_scores(a["attacks"], b["attacks"], attack)
    out["auc"] = (
        None
        if scores is None
        else {
            "attack": attack,
            **stats.paired_auc_difference(
                _nan(scores["members"][0]),
                _nan(scores["nonmembers"][0]),
                _nan(scores["members"][1]),
                _nan(scores["nonmembers"][1]),
                N_BOOTSTRAP,
                seed,
            ),
        }
    )
    return out


def arm_pairs(arms: Sequence[str]) -> list[tuple[str, str]]:
    """(a, b) pairs to test within a grid point: every later non-control arm against every earlier one (Goldfish
    after standard gives Goldfish vs standard), then every arm against the control."""
    trained = [a for a in arms if a != CONTROL]
    pairs = [(trained[j], trained[i]) for j in range(len(trained)) for i in range(j)]
    return pairs + ([(a, CONTROL) for a in trained] if CONTROL in arms else [])


def paired_tests(
    plans: Sequence[CellPlan], attacks: Sequence[str | None], axes: Sequence[str], seed: int = 0
) -> list[dict]:
    """Every arm pair of every grid point among the finished cells (``plans``, and the headline attack of each,
    ``attacks``, in the same order): ``{a, b, cell_a, cell_b, <axis values>, attack, n_windows, n_documents,
    exact_match, rouge_l_paper, rouge_l, auc}``; arm a's headline attack is compared."""
    points: dict[tuple, dict[str, tuple[CellPlan, str | None]]] = {}
    for plan, attack in zip(plans, attacks):
        key = (tuple(str(plan.cell.values.get(a)) for a in axes), str(plan.data_dir))
        points.setdefault(key, {})[plan.cell.arm] = (plan, attack)
    loaded: dict[str, dict] = {}

    def load(plan: CellPlan) -> dict:
        if plan.cell.id not in loaded:
            loaded[plan.cell.id] = {
                "windows": read_json(plan.results_file, {}).get("windows") or [],
                "attacks": read_json(plan.attacks_file, {}),
            }
        return loaded[plan.cell.id]

    out = []
    for arms in points.values():
        for a, b in arm_pairs(list(arms)):
            (pa, attack_a), (pb, _) = arms[a], arms[b]
            attack = str(attack_a)
            out.append(
                {
                    "a": a,
                    "b": b,
                    "cell_a": pa.cell.id,
                    "cell_b": pb.cell.id,
                    **{x: pa.cell.values.get(x) for x in axes},
                    "attack": attack,
                    **compare(load(pa), load(pb), attack, seed),
                }
            )
    return out


def axis_tests(
    plans: Sequence[CellPlan],
    axes: Sequence[str],
    axis: str,
    reference: str,
    pool: Sequence[str] = (),
    seed: int = 0,
    free: Sequence[str] = (),
) -> list[dict]:
    """Each value of grid ``axis`` against its ``reference`` value: a cell is paired with the finished cell of the same
    arm and the same other axis values at the reference, their member windows matched by sha256; the cells that differ
    only in ``pool`` axes are pooled (matched windows concatenated). ``free`` axes are not matched: an axis tuned per
    value of ``axis`` (e.g. the learning rate chosen per size), whose arm cells exist at one chosen value each, so the
    reference is its cell at its own chosen value. One record per (arm, value, the other axes) and repetition stratum
    (``repetitions``: the stratum, or ``"all"``): ``{arm, axis, value, reference, <other axes>, repetitions, cells,
    ...}`` with :func:`window_tests`'s fields."""
    matched = [a for a in axes if a not in free]

    def shown(plan: CellPlan, names: Sequence[str]) -> tuple[str, ...]:
        return tuple(str(plan.cell.values.get(a)) for a in names)

    key_of = {(p.cell.arm, shown(p, matched)): p for p in plans if p.cell.arm != CONTROL}
    at = matched.index(axis)
    kept = [a for a in matched if a != axis and a not in pool]
    groups: dict[tuple, list[tuple[CellPlan, CellPlan]]] = {}
    for plan in plans:
        values, arm = shown(plan, matched), plan.cell.arm
        if values[at] == str(reference) or arm == CONTROL:
            continue
        ref = key_of.get((arm, values[:at] + (str(reference),) + values[at + 1 :]))
        if ref is not None:
            groups.setdefault((arm, values[at], shown(plan, kept)), []).append((plan, ref))
    out = []
    for (arm, value, rest), pairs in groups.items():
        wa, wb, docs = [], [], []
        for i, (plan, ref) in enumerate(pairs):
            a, b = _pair_windows(
                read_json(plan.results_file, {}).get("windows") or [],
                read_json(ref.results_file, {}).get("windows") or [],
            )
            wa, wb, docs = wa + a, wb + b, docs + [f"{i}/{w.get('doc_id')}" for w in a]  # a document of one pair
        strata = sorted({w.get("repetitions") for w in wa if w.get("repetitions") is not None})
        for stratum in strata + ["all"]:
            both = [(x, y, d) for x, y, d in zip(wa, wb, docs) if stratum == "all" or x.get("repetitions") == stratum]
            out.append(
                {
                    "arm": arm,
                    "axis": axis,
                    "value": value,
                    "reference": str(reference),
                    **dict(zip(kept, rest)),
                    "repetitions": stratum,
                    "cells": [[p.cell.id, r.cell.id] for p, r in pairs],
                    **window_tests([x for x, _, _ in both], [y for _, y, _ in both], seed, [d for _, _, d in both]),
                }
            )
    return out
