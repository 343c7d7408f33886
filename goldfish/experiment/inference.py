"""Exact statistics of a cell and paired tests between the arms of a grid point (:mod:`goldfish.eval.stats`).

Per cell (:func:`cell_statistics`, into the cell summary):

* ``mia_auc_p``: the headline attack's one-sided permutation p-value (``auc_pvalue``): at AUC = 1, exactly
  ``1 / C(m + n, m)``, where a percentile bootstrap can only say "[1.000, 1.000]";
* ``mia_tpr_at_1pct_fpr``: TPR at 1 % FPR only with >= 100 nonmembers (``tpr_at_fpr``), else None and
  ``mia_tpr_at_1pct_fpr_note`` says how many it needs;
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
position: exact match by McNemar's exact test, ROUGE-L (rouge-score and token ids) by a paired bootstrap over
documents, and the AUC difference of the headline attack by a paired bootstrap of member and nonmember documents.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from goldfish.eval import stats
from goldfish.eval.report import markdown_table

from .config import CONTROL
from .plan import ATTACKS_FILE, CellPlan

N_BOOTSTRAP = 1000
FPR = 0.01
EXTRACTION = ("exact_match", "rouge_l_paper", "rouge_l")  # per-window measures given document-level intervals


def member_windows(windows: Sequence[dict]) -> list[dict]:
    """The extraction windows of member documents."""
    return [w for w in windows if w.get("split") in (None, "members")]


def cell_statistics(scores: dict | None, windows: Sequence[dict], seed: int = 0) -> dict[str, Any]:
    """``mia_auc_p``, ``mia_tpr_at_1pct_fpr`` (+ ``_note``) of the headline attack's per-document ``scores``
    (``{"members": [...], "nonmembers": [...]}``, None when not kept) and ``extraction_ci`` of the member windows."""
    out: dict[str, Any] = {"mia_auc_p": None, "mia_tpr_at_1pct_fpr": None,
                           "mia_tpr_at_1pct_fpr_note": "no per-document scores of the attack were kept"}
    if scores and scores.get("members") and scores.get("nonmembers"):
        out["mia_auc_p"] = stats.auc_pvalue(scores["members"], scores["nonmembers"])
        tpr = stats.tpr_at_fpr(scores["members"], scores["nonmembers"], FPR)
        out["mia_tpr_at_1pct_fpr"], out["mia_tpr_at_1pct_fpr_note"] = tpr["tpr"], tpr["note"]
    ws = member_windows(windows)
    out["extraction_ci"] = {}
    for name in EXTRACTION:
        kept = [w for w in ws if w.get(name) is not None]
        if kept:
            found = stats.cluster_bootstrap_mean([float(w[name]) for w in kept], [w.get("doc_id") for w in kept],
                                                 N_BOOTSTRAP, seed)
            found["method"] = "cluster bootstrap"
            if name == "exact_match":
                found.update(_rate_interval(found))
            out["extraction_ci"][name] = found
    return out


def _rate_interval(found: dict) -> dict[str, Any]:
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


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


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


def window_tests(wa: Sequence[dict], wb: Sequence[dict], seed: int = 0) -> dict[str, Any]:
    """Paired tests of matched windows (``wa[i]`` and ``wb[i]``: one window of one document): ``n_windows``,
    ``n_documents``, ``exact_match`` (McNemar exact), ``rouge_l_paper`` / ``rouge_l`` (paired bootstrap resampling
    documents)."""
    docs = [w.get("doc_id") for w in wa]
    out: dict[str, Any] = {"n_windows": len(wa), "n_documents": len(set(docs)),
                           "exact_match": stats.mcnemar_exact([bool(w.get("exact_match")) for w in wa],
                                                              [bool(w.get("exact_match")) for w in wb])}
    for name in EXTRACTION[1:]:
        pairs = [(x[name], y[name], d) for x, y, d in zip(wa, wb, docs)
                 if x.get(name) is not None and y.get(name) is not None]
        out[name] = stats.paired_bootstrap([p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs],
                                           N_BOOTSTRAP, seed) if pairs else None
    return out


def compare(a: dict, b: dict, attack: str, seed: int = 0) -> dict[str, Any]:
    """Paired tests of cell ``a`` against cell ``b``, each ``{"windows": [...], "attacks": attacks.json}``: those of
    :func:`window_tests` on the windows both evaluated, and ``auc`` (``attack``'s paired AUC difference; None without
    per-document scores)."""
    out = window_tests(*_pair_windows(a["windows"], b["windows"]), seed)
    scores = _pair_scores(a["attacks"], b["attacks"], attack)
    out["auc"] = None if scores is None else {"attack": attack, **stats.paired_auc_difference(
        _nan(scores["members"][0]), _nan(scores["nonmembers"][0]), _nan(scores["members"][1]),
        _nan(scores["nonmembers"][1]), N_BOOTSTRAP, seed)}
    return out


def arm_pairs(arms: Sequence[str]) -> list[tuple[str, str]]:
    """(a, b) pairs to test within a grid point: every later non-control arm against every earlier one (Goldfish
    after standard gives Goldfish vs standard), then every arm against the control."""
    trained = [a for a in arms if a != CONTROL]
    pairs = [(trained[j], trained[i]) for j in range(len(trained)) for i in range(j)]
    return pairs + ([(a, CONTROL) for a in trained] if CONTROL in arms else [])


def paired_tests(plans: Sequence[CellPlan], cells: Sequence[dict], axes: Sequence[str],
                 seed: int = 0) -> list[dict]:
    """Every arm pair of every grid point among the finished cells (``plans`` and their summaries ``cells`` in the
    same order): ``{a, b, cell_a, cell_b, <axis values>, attack, n_windows, n_documents, exact_match, rouge_l_paper,
    rouge_l, auc}``."""
    points: dict[tuple, dict[str, tuple[CellPlan, dict]]] = {}
    for plan, cell in zip(plans, cells):
        key = (tuple(str(cell.get(a)) for a in axes), str(plan.data_dir))
        points.setdefault(key, {})[cell["arm"]] = (plan, cell)
    loaded: dict[str, dict] = {}

    def load(plan: CellPlan) -> dict:
        if plan.cell.id not in loaded:
            loaded[plan.cell.id] = {"windows": _read(plan.eval_dir / "results.json").get("windows") or [],
                                    "attacks": _read(plan.dir / ATTACKS_FILE)}
        return loaded[plan.cell.id]

    out = []
    for arms in points.values():
        for a, b in arm_pairs(list(arms)):
            (pa, ca), (pb, _) = arms[a], arms[b]
            attack = str(ca.get("mia_attack"))
            out.append({"a": a, "b": b, "cell_a": pa.cell.id, "cell_b": pb.cell.id,
                        **{x: ca.get(x) for x in axes}, "attack": attack,
                        **compare(load(pa), load(pb), attack, seed)})
    return out


def axis_tests(plans: Sequence[CellPlan], cells: Sequence[dict], axes: Sequence[str], axis: str, reference: str,
               pool: Sequence[str] = (), seed: int = 0, free: Sequence[str] = ()) -> list[dict]:
    """Each value of grid ``axis`` against its ``reference`` value: a cell is paired with the finished cell of the same
    arm and the same other axis values at the reference, their member windows matched by sha256; the cells that differ
    only in ``pool`` axes are pooled (matched windows concatenated). ``free`` axes are not matched: an axis tuned per
    value of ``axis`` (e.g. the learning rate chosen per size), whose arm cells exist at one chosen value each, so the
    reference is its cell at its own chosen value. One record per (arm, value, the other axes) and repetition stratum
    (``repetitions``: the stratum, or ``"all"``): ``{arm, axis, value, reference, <other axes>, repetitions, cells,
    ...}`` with :func:`window_tests`'s fields."""
    matched = [a for a in axes if a not in free]
    key_of = {(c["arm"], tuple(str(c.get(a)) for a in matched)): p for p, c in zip(plans, cells)
              if c["arm"] != CONTROL}
    at = matched.index(axis)
    kept = [a for a in matched if a != axis and a not in pool]
    groups: dict[tuple, list[tuple[CellPlan, CellPlan]]] = {}
    for plan, cell in zip(plans, cells):
        values = tuple(str(cell.get(a)) for a in matched)
        if values[at] == str(reference) or cell["arm"] == CONTROL:
            continue
        ref = key_of.get((cell["arm"], values[:at] + (str(reference),) + values[at + 1:]))
        if ref is not None:
            groups.setdefault((cell["arm"], values[at], tuple(str(cell.get(a)) for a in kept)), []).append((plan, ref))
    out = []
    for (arm, value, rest), pairs in groups.items():
        wa, wb = [], []
        for plan, ref in pairs:
            a, b = _pair_windows(_read(plan.eval_dir / "results.json").get("windows") or [],
                                 _read(ref.eval_dir / "results.json").get("windows") or [])
            wa, wb = wa + a, wb + b
        strata = sorted({w.get("repetitions") for w in wa if w.get("repetitions") is not None})
        for stratum in strata + ["all"]:
            both = [(x, y) for x, y in zip(wa, wb) if stratum == "all" or x.get("repetitions") == stratum]
            out.append({"arm": arm, "axis": axis, "value": value, "reference": str(reference),
                        **dict(zip(kept, rest)), "repetitions": stratum,
                        "cells": [[p.cell.id, r.cell.id] for p, r in pairs],
                        **window_tests([x for x, _ in both], [y for _, y in both], seed)})
    return out


def axis_markdown(tests: Sequence[dict], pool: Sequence[str]) -> list[str]:
    """The report section of :func:`axis_tests` (empty without tests)."""
    if not tests:
        return []
    t0 = tests[0]
    others = [k for k in t0 if k not in ("arm", "axis", "value", "reference", "repetitions", "cells", "n_windows",
                                         "n_documents", *EXTRACTION)]
    rows = []
    for t in tests:
        em = t["exact_match"]
        rows.append([t["arm"], str(t["value"]), *(str(t.get(k)) for k in others), str(t["repetitions"]),
                     f"{t['n_windows']} ({t['n_documents']})",
                     f"{_num(em['a_rate'], True)} / {_num(em['b_rate'], True)}; {em['a_only']} vs {em['b_only']} "
                     f"(p {p_text(em['p_value'])})", _bootstrap(t.get("rouge_l_paper"))])
    pooled = f", pooled over {', '.join(pool)}" if pool else ""
    return [f"## Paired against {t0['axis']}={t0['reference']} (same arm{pooled}, the same target windows)", "",
            markdown_table(["arm", t0["axis"], *others, "repetitions", "windows (documents)",
                            f"exact match value / {t0['reference']}; discordant, McNemar exact",
                            f"ROUGE-L rouge-score value / {t0['reference']}, difference [95 % CI] (p)"], rows), "",
            f"Each cell against the cell of the same arm and other settings at {t0['axis']}={t0['reference']}, "
            "windows matched by their sha256 (the same targets, evaluated unedited), per repetition stratum and over "
            "all. Exact match: McNemar's exact test; ROUGE-L: paired bootstrap resampling documents (a document "
            "that is a target in several pooled cells is one cluster).", ""]


def _num(v: float | None, pct: bool = False) -> str:
    if v is None or v != v:  # None or NaN
        return "-"
    return f"{100 * v:.1f} %" if pct else f"{v:.3f}"


def p_text(p: float | None) -> str:
    """A p-value for a table; a bootstrap p-value of 0 as its resolution, ``< 2 / N_BOOTSTRAP``."""
    if p is None:
        return "-"
    if p == 0:  # a bootstrap p-value: every resample on one side
        return f"< {2 / N_BOOTSTRAP:g}"
    return f"{p:.3g}" if p >= 1e-3 else f"{p:.1e}"


def _bootstrap(d: dict | None, pct: bool = False) -> str:
    """``a / b, diff [low, high] (p)`` of a paired bootstrap result."""
    if not d or d.get("diff") is None:
        return "-"
    a, b = d.get("a"), d.get("b")
    return (f"{_num(a, pct)} / {_num(b, pct)}, {_num(d['diff'], pct)} [{_num(d.get('ci_low'), pct)}, "
            f"{_num(d.get('ci_high'), pct)}] (p {p_text(d.get('p_value'))})")


def paired_markdown(paired: Sequence[dict], axes: Sequence[str]) -> list[str]:
    """The report section of :func:`paired_tests` (empty without pairs)."""
    if not paired:
        return []
    rows = []
    for t in paired:
        where = " ".join(f"{a}={t.get(a)}" for a in axes)
        em = t["exact_match"]
        rows.append([f"{t['a']} vs {t['b']}" + (f" ({where})" if where else ""),
                     f"{t['n_windows']} ({t['n_documents']})",
                     f"{_num(em['a_rate'], True)} / {_num(em['b_rate'], True)}; {em['a_only']} vs {em['b_only']} "
                     f"discordant (p {p_text(em['p_value'])})",
                     _bootstrap(t.get("rouge_l_paper")), _bootstrap(t.get("rouge_l")),
                     (t["auc"]["attack"] + ": " + _bootstrap(t["auc"])) if t.get("auc") else "-"])
    return ["## Paired tests between arms (same windows, same documents)", "",
            markdown_table(["a vs b", "windows (documents)", "exact match a / b; McNemar exact",
                            "ROUGE-L rouge-score a / b, a - b [95 % CI] (p)",
                            "ROUGE-L tokens a / b, a - b [95 % CI] (p)",
                            "MIA AUC a / b, a - b [95 % CI] (p)"], rows), "",
            "Each pair of arms on the same grid point, windows matched by their sha256 and documents by id. Exact "
            "match: McNemar's exact test on the windows where only one arm is verbatim (two-sided binomial at 1/2). "
            "ROUGE-L: mean of a - b over the matched windows with a 95 % bootstrap interval and two-sided p-value "
            "that resample documents. MIA AUC: the headline attack of arm a on both cells' scores of the same "
            "member and nonmember documents, each resample drawing members and nonmembers separately with the same "
            "draws for both arms. A bootstrap p-value cannot fall below 2/1000 unless every resample agrees.", ""]
