"""Report sections on what a cell's model read and what each repetition stratum reveals: the training stream (the
targets' share of the tokens actually read, the reads per label, the nonmember count), extraction and every
membership attack per stratum with intervals, and the exposure threshold and canaries of a size sweep
(:func:`goldfish.experiment.scaling.threshold_markdown`).

Two hooks: :func:`cell_extras` adds to each cell summary (``goldfish.experiment.aggregate.cell_summary``) what
``exposure.json`` and eval's ``results.json`` hold beyond the headline numbers; :func:`study_sections` renders the
sections for ``report.md`` (``goldfish.experiment.report``).

Per stratum r (members labelled x r), from the cell's eval windows and membership scores:

* ``exact``: exact match k / n with a Wilson 95 % interval; ``rouge_l_paper`` (the paper's, rouge-score on words) and
  ``rouge_l`` (token ids): mean with a normal 95 % interval;
* ``mia``: for every attack of eval's membership section (LOSS, zlib, lowercase, Min-K %, Min-K %++) the ROC-AUC of
  the stratum's members against all nonmembers with its bootstrap CI; the reference attack calibrated by the
  control's model comes from ``attacks.json`` (``mia_by_exposure``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from goldfish.eval.stats import mean_interval, wilson_interval
from goldfish.eval.report import markdown_table

from .plan import EXPOSURE_FILE, CellPlan
from .scaling import threshold_markdown

N_BOOTSTRAP = 1000


def _member_repetitions(results: dict, data_dir: Path) -> np.ndarray:
    """Labelled repetitions of the evaluated members, in the order eval scored them (the prepared order)."""
    from ..data import load_prepared

    reps = np.asarray(load_prepared(data_dir, verify=False).members["repetitions"], dtype=np.int64)
    return reps[:int((results.get("data") or {}).get("members") or len(reps))]


def stratum_extraction(windows: list[dict]) -> dict[str, dict[str, Any]]:
    """Per labelled repetitions of the member windows: exact match (Wilson) and both ROUGE-Ls (normal interval)."""
    by: dict[int, list[dict]] = {}
    for w in windows:
        if w.get("split") in (None, "members") and w.get("repetitions") is not None:
            by.setdefault(int(w["repetitions"]), []).append(w)
    out = {}
    for r, group in sorted(by.items()):
        k = sum(bool(w["exact_match"]) for w in group)
        low, high = wilson_interval(k, len(group))
        out[str(r)] = {"exact": k, "n": len(group), "rate": k / len(group), "low": low, "high": high}
        for name in ("rouge_l_paper", "rouge_l"):
            rouge = [w[name] for w in group if w.get(name) is not None]
            rlow, rhigh = mean_interval(rouge, (0.0, 1.0))
            out[str(r)][name] = {"mean": float(np.mean(rouge)) if rouge else None, "low": rlow, "high": rhigh}
    return out


def stratum_membership(membership: dict | None, reps: np.ndarray, seed: int = 0) -> dict[str, dict[str, dict]]:
    """``{attack: {r: {auc, low, high, n_members}}}``: each of eval's attacks on the members labelled r vs every
    nonmember (scores in the members' order, as eval scored them)."""
    from goldfish.eval.membership import evaluate_attack

    out: dict[str, dict[str, dict]] = {}
    for attack, scores in ((membership or {}).get("scores") or {}).items():
        members, nonmembers = np.asarray(scores.get("members") or [], float), np.asarray(scores.get("nonmembers")
                                                                                        or [], float)
        if len(members) != len(reps) or not len(nonmembers) or not np.all(np.isfinite(members)):
            continue
        out[attack] = {}
        for r in np.unique(reps):
            found = evaluate_attack(members[reps == r], nonmembers, n_bootstrap=N_BOOTSTRAP, seed=seed)
            out[attack][str(int(r))] = {"auc": found["auc"], "low": found["auc_ci_low"],
                                        "high": found["auc_ci_high"], "n_members": int((reps == r).sum())}
    return out


def cell_extras(plan: CellPlan, results: dict) -> dict[str, Any]:
    """What a cell summary takes from ``exposure.json`` (``stream``, ``reads``, ``validation_loss``) and from eval's
    results (``canaries``, ``stratum_extraction``, ``stratum_membership``, ``nonmembers``) and the plan
    (``start_model``)."""
    path = Path(plan.dir) / EXPOSURE_FILE
    found = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    canaries = results.get("canaries") or None
    if canaries:
        canaries = {k: canaries.get(k) for k in ("method", "space_bits", "n_candidates", "resolution_bits",
                                                 "canaries")}
    membership = results.get("membership") or {}
    by_stratum = stratum_membership(membership, _member_repetitions(results, plan.data_dir), plan.eval_cfg.seed) \
        if membership.get("scores") and (Path(plan.data_dir) / "members").is_dir() else {}  # a real prepared folder
    return {"stream": found.get("stream"), "reads": found.get("reads"),
            "validation_loss": found.get("validation_loss"), "canaries": canaries, "start_model": plan.start_model,
            "nonmembers": (results.get("data") or {}).get("nonmembers"),
            "stratum_extraction": stratum_extraction(results.get("windows") or []), "stratum_membership": by_stratum}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def stream_markdown(cells: list[dict]) -> list[str]:
    """One line per trained cell: tokens read, the targets' (and canaries') share of them, the reads per label."""
    lines = []
    for c in cells:
        s = c.get("stream") or {}
        if not s.get("tokens"):
            continue
        reads = "; ".join(f"{kind} " + ", ".join(f"x{r}: {lo}" + ("" if lo == hi else f"-{hi}")
                                                  for r, (lo, hi) in sorted(v.items(), key=lambda kv: int(kv[0])))
                          for kind, v in (c.get("reads") or {}).items())
        canary = f", canaries {s['canaries']:,} ({_pct(s['canary_share'])} %)" if s.get("canaries") else ""
        lines.append(f"- `{c['cell']}`: {s['tokens']:,} tokens read; targets {s['members']:,} "
                     f"({_pct(s['member_share'])} %){canary}; copies read per label: {reads or '-'}.")
    if not lines:
        return []
    nonmembers = {c.get("nonmembers") for c in cells if c.get("nonmembers")}
    return ["## Training stream (counted from the rows training read)", "", *lines, "",
            f"Nonmembers (held-out documents of the same pool): {', '.join(str(n) for n in sorted(nonmembers))}.", ""]


def _interval(v: dict | None, key: str = "auc") -> str:
    """``v[key]`` with its ``[low, high]``, "-" when absent."""
    if not v or v.get(key) is None:
        return "-"
    return f"{v[key]:.3f}" + (f" [{v['low']:.3f}, {v['high']:.3f}]" if v.get("low") is not None else "")


def strata_markdown(cells: list[dict], axes: list[str]) -> list[str]:
    """Per cell and stratum: exact match, ROUGE-L and every membership attack's AUC, each with its interval."""
    if not any(c.get("stratum_membership") for c in cells):
        return []
    attacks = list(dict.fromkeys(a for c in cells for a in c.get("stratum_membership") or {}))
    rows = []
    for c in cells:
        label = c["arm"] + "".join(f" {a}={c.get(a)}" for a in axes)
        extraction, mia = c.get("stratum_extraction") or {}, c.get("stratum_membership") or {}
        ref, ref_ci = c.get("mia_by_exposure") or {}, c.get("mia_by_exposure_ci") or {}
        for r, e in sorted(extraction.items(), key=lambda kv: int(kv[0])):
            low, high = (ref_ci.get(r) or {}).get("reference") or (None, None)
            reference = {"auc": (ref.get(r) or {}).get("reference"), "low": low, "high": high}
            rows.append([label, f"x{r}", f"{_pct(e['rate'])} % [{_pct(e['low'])}, {_pct(e['high'])}] "
                         f"({e['exact']}/{e['n']})",
                         _interval(e.get("rouge_l_paper"), "mean"), _interval(e.get("rouge_l"), "mean"),
                         *[_interval((mia.get(a) or {}).get(r)) for a in attacks], _interval(reference)])
    return ["## Per repetition stratum: extraction and every membership attack", "",
            markdown_table(["cell", "stratum", "exact match % [95 % CI]", "ROUGE-L rouge-score [95 % CI]",
                            "ROUGE-L tokens [95 % CI]",
                            *[f"AUC {a}" for a in attacks], "AUC reference (control)"], rows), "",
            "Members labelled x r against all nonmembers; AUC with a 95 % bootstrap CI (0.5 = chance). Exact "
            "match: Wilson interval; ROUGE-L: normal interval over windows. The reference attack is calibrated by "
            "the control's model (attacks.json).", ""]


def study_sections(results: dict) -> list[str]:
    """The report lines of this module's sections (empty where they do not apply)."""
    cells, axes = results.get("cells") or [], results.get("axes") or []
    lines = stream_markdown(cells) + strata_markdown(cells, axes)
    threshold = threshold_markdown(results)
    if threshold:
        lines += ["## Exposure threshold (E50) and canaries", "", threshold, ""]
    return lines
