"""A finished cell's files -> its :class:`~goldfish.experiment.summary.CellSummary` (the unit of ``results.json``'s
``cells`` and of ``summary.json``).

What a summary takes from which file (``goldfish/experiment/SCHEMA.md`` documents every field):

* ``train/summary.json`` (read as a ``trainsummary.TrainSummary``: the trainer's names) and ``metrics.jsonl``:
  parameters, tokens, time, steps, the reads per label
  (``exposures``), the final kept / dropped loss (token-weighted over the last 5 % of steps: one step is noisy);
* eval's ``results.json``: extraction over the member windows (overall, per prefix length, per repetition stratum,
  per (prefix, stratum) in ``strata``), the adaptive attacks (beam search, sampling) and the mask-consistent
  attack when they ran, the canaries, where it ran (device, precisions, versions, code);
* membership, from one scoring pass (eval's membership section and the cell's ``attacks.json`` score the same
  documents with the same function, ``goldfish.eval.membership``): every attack's AUC (``mia_aucs``), the held-out
  and member loss (the LOSS scores' means), the headline attack (``mia_attack``) with its CI, ROC, exact p-value and
  guarded TPR at 1 % FPR (``goldfish.experiment.inference``), and from ``attacks.json`` the per-target losses the
  size sweep's loss gap is made of;
* every per-cell analysis's part (``goldfish.experiment.analyses``: the k baseline's ``eval/k_baseline.json``,
  the exposure counts' ``exposure.json``, the attacks' ``attacks.json``: the kept / dropped teacher-forced
  accuracy, the calibrated and hash-aware AUCs, the AUC per exposure count, the leakage audit), each read by its
  own module.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from goldfish.eval.aggregate import ci_keys, group_rates
from goldfish.eval.membership import evaluate_attack
from goldfish.eval.metrics import HEADLINE, METRICS, ROUGE
from goldfish.eval.stats import cluster_bootstrap_mean, mean_interval, wilson_interval

from ..data import load_prepared
from ..io import read_json, read_jsonl
from .analyses import ANALYSES, exposure
from .inference import cell_statistics
from .plan import CellPlan
from .summary import CellSummary
from .trainsummary import TrainSummary

# the per-window metrics the strata pool (in the registry's order: the columns of results.csv)
STRATUM_METRICS = {m.name: m.summary_key for m in METRICS.values() if m.name in HEADLINE}
# eval's adaptive extraction attacks (decoding.beam > 1, decoding.samples > 0): their summary columns
ADAPTIVE_KEYS = tuple(k for m in METRICS.values() if m.optional for k in (m.summary_key, *ci_keys(m)))
N_BOOTSTRAP = 1000
_TAIL_FRACTION = 0.05


def final_losses(metrics: list[dict]) -> dict[str, float | None]:
    """Token-weighted kept/dropped loss over the last 5 % of steps, plus token totals over the whole run."""
    out: dict[str, Any] = {
        "kept_tokens": sum(int(m.get("kept_tokens") or 0) for m in metrics),
        "dropped_tokens": sum(int(m.get("dropped_tokens") or 0) for m in metrics),
    }
    tail = metrics[-max(1, math.ceil(len(metrics) * _TAIL_FRACTION)) :] if metrics else []
    for kind in ("kept", "dropped"):
        pairs = [(m.get(f"{kind}_loss"), m.get(f"{kind}_tokens") or 0) for m in tail]
        pairs = [(loss, n) for loss, n in pairs if loss is not None and n and not math.isnan(loss)]
        total = sum(n for _, n in pairs)
        out[f"final_{kind}_loss"] = sum(loss * n for loss, n in pairs) / total if total else None
    return out


def resolve_mia_attack(setting: str, fine_tune: bool) -> str:
    """The headline attack of a cell: the experiment's ``mia_attack``, with ``auto`` = ``reference`` for a fine-tune
    (target NLL calibrated by the starting model) and ``loss`` from scratch."""
    if setting != "auto":
        return setting
    return "reference" if fine_tune else "loss"


def loss_numbers(scores: dict[str, dict]) -> dict[str, float | None]:
    """The held-out (nonmember) and member mean NLL: the LOSS scores (negated mean NLLs) of the one scoring pass; the
    held-out one with a 95 % bootstrap interval resampling documents."""
    loss = scores.get("loss") or {}
    out: dict[str, Any] = {"heldout_loss": None, "heldout_loss_ci": None, "heldout_ppl": None, "member_loss": None}
    if loss.get("nonmembers"):
        nll = -np.asarray(loss["nonmembers"], dtype=np.float64)  # (N,) mean NLL per nonmember document
        out["heldout_loss"] = float(nll.mean())
        found = cluster_bootstrap_mean(nll, None, N_BOOTSTRAP, 0)  # resampling documents
        out["heldout_loss_ci"] = [found["ci_low"], found["ci_high"]] if len(nll) > 1 else None
        out["heldout_ppl"] = math.exp(min(out["heldout_loss"], 50.0))
    if loss.get("members"):
        out["member_loss"] = float(-np.mean(np.asarray(loss["members"], dtype=np.float64)))
    return out


def headline_numbers(attack: str, found: dict[str, dict]) -> dict[str, Any]:
    """``mia_auc`` with its CI and ROC, all of ``attack`` (from ``found``: attack -> evaluation as attacks.json /
    eval's membership section hold it); None where the cell did not run that attack."""
    a = found.get(attack) or {}
    roc = {"fpr": a.get("roc_fpr") or [], "tpr": a.get("roc_tpr") or [], "auc": a.get("auc")} if a else None
    return {
        "mia_attack": attack,
        "mia_auc": a.get("auc"),
        "mia_auc_ci_low": a.get("auc_ci_low"),
        "mia_auc_ci_high": a.get("auc_ci_high"),
        "mia_auc_ci": [a.get("auc_ci_low"), a.get("auc_ci_high")],
        "mia_roc": roc,
    }


def adaptive_numbers(results: dict) -> dict[str, Any]:
    """Eval's adaptive extraction attacks over the windows of ``exact_match_rate``, empty when none ran: the beam
    exact-match rate (Wilson CI) and beam width, the mean sample rate (normal CI), and the fraction of windows with at
    least one exact temperature sample (Wilson CI), with the number of samples and their temperature."""
    overall = (results.get("summary") or {}).get("overall") or {}
    decoding = (results.get("config") or {}).get("decoding") or {}
    out: dict[str, Any] = {k: overall[k] for k in ADAPTIVE_KEYS if overall.get(k) is not None}
    if "beam_exact_match_rate" in out:
        out["beam_width"] = decoding.get("beam")
    hits = [w["sample_hits"] for w in results.get("windows") or [] if w.get("sample_hits") is not None]
    if hits:
        n_any = sum(h > 0 for h in hits)
        out.update(
            n_samples=decoding.get("samples"),
            sample_temperature=decoding.get("temperature"),
            sample_any_rate=n_any / len(hits),
        )
        out["sample_any_rate_ci_low"], out["sample_any_rate_ci_high"] = wilson_interval(n_any, len(hits))
    return out


def adversary_numbers(results: dict) -> dict | None:
    """Eval's mask-consistent extraction attack (results.json ``adversary``), None when it did not run: the mask
    assumed (k, h, strategy), the switch threshold and the rows (exact match of greedy and both variants with their
    McNemar tests against greedy, accuracy on the dropped suffix positions)."""
    section = results.get("adversary")
    if not section:
        return None
    mask = {k: (section.get("mask") or {}).get(k) for k in ("k", "h", "strategy")}
    return {"mask": mask, "switch_threshold": section.get("switch_threshold"), "rows": section.get("rows") or []}


def stratum_rows(windows: list[dict]) -> list[dict]:
    """Member windows grouped by (prefix_len, repetitions): n and mean metrics (rates for booleans)."""
    members = [w for w in windows if w.get("split") in (None, "members")]
    by = ("prefix_len", "repetitions")
    metrics = {out: group_rates(members, by, key) for key, out in STRATUM_METRICS.items()}
    counts: dict[tuple, int] = {}
    for w in members:
        key = (w.get("prefix_len"), w.get("repetitions"))
        counts[key] = counts.get(key, 0) + 1
    rows = []
    for key in sorted(counts, key=lambda k: tuple((v is None, v if v is not None else 0) for v in k)):
        row = {"prefix_len": key[0], "repetitions": key[1], "n_windows": counts[key]}
        for out, table in metrics.items():
            row[out] = table.get(key)
        rows.append(row)
    return rows


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
        for name in ROUGE:
            rouge = [w[name] for w in group if w.get(name) is not None]
            rlow, rhigh = mean_interval(rouge, METRICS[name].bounds)
            out[str(r)][name] = {"mean": float(np.mean(rouge)) if rouge else None, "low": rlow, "high": rhigh}
    return out


def stratum_membership(membership: dict | None, reps: np.ndarray, seed: int = 0) -> dict[str, dict[str, dict]]:
    """``{attack: {r: {auc, low, high, n_members}}}``: each of eval's attacks on the members labelled r vs every
    nonmember (scores in the members' order, as eval scored them)."""
    out: dict[str, dict[str, dict]] = {}
    for attack, scores in ((membership or {}).get("scores") or {}).items():
        members, nonmembers = (
            np.asarray(scores.get("members") or [], float),
            np.asarray(scores.get("nonmembers") or [], float),
        )
        if len(members) != len(reps) or not len(nonmembers) or not np.all(np.isfinite(members)):
            continue
        out[attack] = {}
        for r in np.unique(reps):
            found = evaluate_attack(members[reps == r], nonmembers, n_bootstrap=N_BOOTSTRAP, seed=seed)
            out[attack][str(int(r))] = {
                "auc": found["auc"],
                "low": found["auc_ci_low"],
                "high": found["auc_ci_high"],
                "n_members": int((reps == r).sum()),
            }
    return out


def target_losses(attacks: dict, reps: list[int], split: str | None = None) -> dict[str, list[float | None]] | None:
    """``{repetitions: [mean NLL of each member document]}`` and ``{"0": [... of each nonmember]}`` from
    attacks.json's per-token log-probs; ``reps``: the members' repetition counts (the prepared folder's order).
    ``split`` ("kept" | "dropped"): the members' NLL over only the positions the Goldfish mask keeps / drops
    (``member_nll_by_split``; None for a document without such positions), the nonmembers' over every target, as the
    leakage audit's held-out side."""
    logprobs = attacks.get("logprobs") or {}
    if not logprobs.get("members"):
        return None
    out: dict[str, list[float | None]] = {}
    members = (
        [(-sum(lp) / len(lp)) if lp else None for lp in logprobs["members"]]
        if split is None
        else attacks["member_nll_by_split"][split]
    )
    pairs = list(zip(reps, members, logprobs["members"]))
    pairs += [(0, -sum(lp) / len(lp) if lp else None, lp) for lp in logprobs.get("nonmembers") or []]
    for r, nll, lp in pairs:
        if lp:
            out.setdefault(str(r), []).append(nll)
    return out


def _member_repetitions(data_dir: Path) -> np.ndarray:
    """Labelled repetitions of the prepared members, in the prepared order (the order eval and attacks score)."""
    return np.asarray(load_prepared(data_dir, verify=False).members["repetitions"], dtype=np.int64)


def _losses(attacks: dict | None, data_dir: Path) -> dict[str, Any]:
    """``target_losses`` and ``target_losses_by_split`` of an attacks.json (None without one)."""
    if not attacks:
        return {"target_losses": None, "target_losses_by_split": None}
    reps = [int(r) for r in _member_repetitions(data_dir)] if (attacks.get("logprobs") or {}).get("members") else []
    split = (
        {s: target_losses(attacks, reps, s) for s in ("kept", "dropped")}
        if attacks.get("member_nll_by_split")
        else None
    )
    return {"target_losses": target_losses(attacks, reps), "target_losses_by_split": split}


def _extras(plan: CellPlan, results: dict) -> dict[str, Any]:
    """What a summary takes from eval's per-stratum numbers and canaries, and the plan (``start_model``)."""
    canaries = results.get("canaries") or None
    if canaries:
        canaries = {k: canaries.get(k) for k in ("method", "space_bits", "n_candidates", "resolution_bits", "canaries")}
    membership = results.get("membership") or {}
    by_stratum = {}
    if membership.get("scores") and (Path(plan.data_dir) / "members").is_dir():  # a real prepared folder
        reps = _member_repetitions(plan.data_dir)
        reps = reps[: int((results.get("data") or {}).get("members") or len(reps))]
        by_stratum = stratum_membership(membership, reps, plan.eval_cfg.seed)
    return {
        "canaries": canaries,
        "start_model": plan.start_model,
        "nonmembers": (results.get("data") or {}).get("nonmembers"),
        "stratum_extraction": stratum_extraction(results.get("windows") or []),
        "stratum_membership": by_stratum,
    }


def _strata_of(summary: dict, key: str) -> dict[str, dict]:
    return {
        str(v): {k: row.get(k) for k in ("n_windows", "exact_match_rate", *ROUGE)}
        for v, row in (summary.get(key) or {}).items()
    }


def summarize_cell(plan: CellPlan, mia_attack: str = "auto") -> CellSummary:
    """Everything known about one finished cell; ``mia_attack``: the experiment's headline-attack setting."""
    results = read_json(plan.results_file)
    train = TrainSummary.read(plan.train_summary)
    metrics = read_jsonl(plan.metrics_file) if plan.metrics_file.is_file() else []
    attacks = read_json(plan.attacks_file) if plan.attacks_file.is_file() else None
    summary = results.get("summary") or {}
    overall = summary.get("overall") or {}
    model = results.get("model") or {}
    membership = results.get("membership") or {}
    # every attack evaluated for this cell and its per-document scores: one scoring pass (attacks.json's where
    # the cell has one, eval's membership section beside it)
    found = {**(membership.get("attacks") or {}), **((attacks or {}).get("attacks") or {})}
    scores = {**(membership.get("scores") or {}), **((attacks or {}).get("scores") or {})}
    headline = headline_numbers(resolve_mia_attack(mia_attack, plan.start_model is not None), found)
    mia_aucs = {name: a.get("auc") for name, a in found.items()}
    # every attack's TPR at the low FPRs (None where too few nonmembers resolve that FPR -- fewer than 1 / FPR: the
    # value is then the TPR at zero false positives)
    mia_tprs = {
        name: {
            k: a.get(src) if (a.get("n_nonmembers") or 0) * fpr >= 1 else None
            for k, src, fpr in (
                ("tpr_at_1pct_fpr", "tpr_at_1pct_fpr", 0.01),
                ("tpr_at_0_1pct_fpr", "tpr_at_0.1pct_fpr", 0.001),
            )
        }
        for name, a in found.items()
    }
    return CellSummary(
        cell=plan.cell.id,
        arm=plan.cell.arm,
        values=dict(plan.cell.values),
        params=train.params or model.get("num_parameters"),  # a control's: the model it evaluates
        tokens_seen=train.tokens,
        train_time_s=train.train_time_s,
        steps=train.steps,
        **final_losses(metrics),
        **{
            k: overall.get(k)
            for k in (
                "n_windows",
                "exact_match_rate",
                "exact_match_ci_low",
                "exact_match_ci_high",
                *ROUGE,
                "token_match",
            )
        },
        **adaptive_numbers(results),
        adversary=adversary_numbers(results),
        mia_aucs=mia_aucs,
        mia_tprs=mia_tprs,
        **loss_numbers(scores),
        mia_auc_loss=mia_aucs.get("loss"),
        **headline,
        **cell_statistics(scores.get(headline["mia_attack"]), results.get("windows") or []),
        by_prefix_len=_strata_of(summary, "by_prefix_len"),
        by_repetitions=_strata_of(summary, "by_repetitions"),
        strata=stratum_rows(results.get("windows") or []),
        exposures=train.exposures,
        precision=train.precision,  # resolved by the trainer; None for a control that trains nothing
        eval_precision=model.get("precision"),
        device=model.get("device") or train.device,
        versions=results.get("versions"),
        git=results.get("git"),
        code=results.get("code"),
        **_losses(attacks, plan.data_dir),
        **_extras(plan, results),
        **{k: v for a in ANALYSES for k, v in vars(a.collect(plan)).items()},
    )


def tuning_loss(plan: CellPlan, by: str) -> float | None:
    """A finished tuning cell's ``heldout_loss`` or ``validation_loss`` (what ``tune.by`` minimises), as its
    summary has it."""
    if by == "validation_loss":
        return exposure.collect(plan).validation_loss
    results = read_json(plan.results_file)
    attacks = read_json(plan.attacks_file) if plan.attacks_file.is_file() else {}
    scores = {**((results.get("membership") or {}).get("scores") or {}), **(attacks.get("scores") or {})}
    return loss_numbers(scores)["heldout_loss"]
