"""Collect finished cells into one table: ``results.csv``/``results.json`` and ``summary.json``.

Rows of ``results.csv`` (one per cell x prefix length x repetition stratum of the member windows)::

    cell, arm, <one column per grid axis>, params, tokens_seen, kept_tokens, train_time_s,
    prefix_len, repetitions, n_windows, exact_match_rate, token_match, rouge_l, rouge_l_paper,
    mia_auc, mia_auc_ci_low, mia_auc_ci_high, final_kept_loss, final_dropped_loss, heldout_loss, heldout_ppl

(``prefix_len`` -1: eval's ``all``, all but the last suffix_len tokens of each document.)

``mia_auc`` is the ROC-AUC (members = trained text vs nonmembers) of the cell's headline attack, named by
``mia_attack`` (the experiment's ``mia_attack`` setting resolved per cell: ``auto`` = the reference attack for a
fine-tune, calibrated by the starting model, and the LOSS attack from scratch); its CI, TPR at 1 % FPR and ROC
(``mia_roc``) are the same attack's. Every attack's AUC is in ``results.json`` under each cell's ``mia_aucs``.
``heldout_loss`` is the mean per-token NLL of the nonmember documents (the negated LOSS-attack scores): what Goldfish
costs on text the model never saw.
``final_kept_loss``/``final_dropped_loss`` are token-weighted over the last 5 % of training steps (one step is noisy).

A cell of ``results.json`` (and an entry of ``summary.json``) also carries, when eval ran them, the adaptive
extraction attacks over the same windows as ``exact_match_rate`` (:func:`adaptive_numbers`): ``beam_exact_match_rate``
(+ ``_ci_low``/``_ci_high``, Wilson) with ``beam_width``; ``sample_rate`` (mean fraction of exact temperature samples,
+ normal CI), ``sample_any_rate`` (windows with at least one exact sample, + Wilson CI), ``n_samples``,
``sample_temperature``; ``adversary``, eval's mask-consistent extraction attack when it ran
(``decoding.adversary``; :func:`adversary_numbers`: the mask assumed and one row per placement and prefix length, as
in eval's results.json); and ``leakage``, the dropped-token leakage audit of the cell's ``attacks.json`` (its ``did``:
the difference in differences against held-out text). ``rouge_l_paper`` (the paper's ROUGE-L, rouge-score on words)
is the headline ROUGE-L, ``rouge_l`` (token ids) beside it; ``mia_auc_p``, the guarded ``mia_tpr_at_1pct_fpr`` and
``extraction_ci`` (intervals over documents) come from :mod:`goldfish.experiment.inference`, and so does
``paired`` (top level of ``results.json`` and ``summary.json``): the paired tests between the arms of each grid point;
and ``paired_axis`` (``results.json``, with a ``compare`` section): each value of one grid axis against a reference.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from goldfish.eval.aggregate import group_rates
from goldfish.eval.stats import wilson_interval

from ..io import atomic_write_json, atomic_write_text, read_jsonl
from .config import ExperimentConfig
from .inference import axis_tests, cell_statistics, paired_tests
from .plan import ATTACKS_FILE, CellPlan
from .scaling import size_analysis
from .sections import cell_extras

RESULTS_SCHEMA = "goldfish-experiment/1"
STRATUM_METRICS = {"exact_match": "exact_match_rate", "token_match": "token_match", "rouge_l": "rouge_l",
                   "rouge_l_paper": "rouge_l_paper"}
ROUGE_KEYS = ("rouge_l_paper", "rouge_l")  # the paper's word ROUGE-L (rouge-score) is the headline; token ids beside
# eval's adaptive extraction attacks (decoding.beam > 1, decoding.samples > 0), carried into a cell when present
ADAPTIVE_KEYS = ("beam_exact_match_rate", "beam_exact_match_rate_ci_low", "beam_exact_match_rate_ci_high",
                 "sample_rate", "sample_rate_ci_low", "sample_rate_ci_high")
ADAPTIVE_FIELDS = ADAPTIVE_KEYS + ("beam_width", "n_samples", "sample_temperature", "sample_any_rate",
                                   "sample_any_rate_ci_low", "sample_any_rate_ci_high")
_TAIL_FRACTION = 0.05


def _read_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _first(mapping: dict, *keys: str) -> Any:
    """The first present, non-null value among ``keys`` (summary files name things slightly differently)."""
    for key in keys:
        if mapping.get(key) is not None:
            return mapping[key]
    return None


def final_losses(metrics: list[dict]) -> dict[str, float | None]:
    """Token-weighted kept/dropped loss over the last 5 % of steps, plus token totals over the whole run."""
    out: dict[str, Any] = {
        "kept_tokens": sum(int(m.get("kept_tokens") or 0) for m in metrics),
        "dropped_tokens": sum(int(m.get("dropped_tokens") or 0) for m in metrics),
    }
    tail = metrics[-max(1, math.ceil(len(metrics) * _TAIL_FRACTION)):] if metrics else []
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


def headline_numbers(attack: str, found: dict[str, dict]) -> dict[str, Any]:
    """``mia_auc`` with its CI, TPR at 1 % FPR and ROC, all of ``attack`` (from ``found``: attack -> evaluation as
    attacks.json / eval's membership section hold it); None where the cell did not run that attack."""
    a = found.get(attack) or {}
    roc = {"fpr": a.get("roc_fpr") or [], "tpr": a.get("roc_tpr") or [], "auc": a.get("auc")} if a else None
    return {"mia_attack": attack, "mia_auc": a.get("auc"), "mia_auc_ci_low": a.get("auc_ci_low"),
            "mia_auc_ci_high": a.get("auc_ci_high"), "mia_tpr_at_1pct_fpr": a.get("tpr_at_1pct_fpr"), "mia_roc": roc}


def membership_numbers(membership: dict | None) -> dict[str, Any]:
    """Every attack's AUC of eval's membership section, and the held-out (nonmember) / member mean NLL."""
    out: dict[str, Any] = {"mia_aucs": {}, "heldout_loss": None, "heldout_ppl": None, "member_loss": None}
    if not membership:
        return out
    out["mia_aucs"] = {name: a.get("auc") for name, a in (membership.get("attacks") or {}).items()}
    loss_scores = (membership.get("scores") or {}).get("loss") or {}
    nonmembers, members = loss_scores.get("nonmembers") or [], loss_scores.get("members") or []
    if nonmembers:
        out["heldout_loss"] = -sum(nonmembers) / len(nonmembers)  # scores are negated mean NLLs
        out["heldout_ppl"] = math.exp(min(out["heldout_loss"], 50.0))
    if members:
        out["member_loss"] = -sum(members) / len(members)
    return out


def stratum_rows(windows: list[dict]) -> list[dict]:
    """Member windows grouped by (prefix_len, repetitions): n and mean metrics (rates for booleans)."""
    members = [w for w in windows if w.get("split") in (None, "members")]
    by = ("prefix_len", "repetitions")
    metrics = {out: group_rates(members, by, key) for key, out in STRATUM_METRICS.items()}
    counts = {}
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


def attack_numbers(attacks: dict | None) -> dict[str, Any]:
    """What a cell's attacks.json adds: kept/dropped teacher-forced accuracy, the LOSS, hash-aware and reference
    AUCs, AUC per exposure count, and held-out loss (identical to eval's, which may be switched off)."""
    if not attacks:
        return {}
    acc = attacks.get("accuracy") or {}
    out: dict[str, Any] = {"tf_accuracy": acc.get("accuracy"), "tf_kept_accuracy": acc.get("kept_accuracy"),
                           "tf_dropped_accuracy": acc.get("dropped_accuracy"),
                           "heldout_accuracy": attacks.get("heldout_accuracy"),
                           "mia_by_exposure": attacks.get("by_exposure") or {},
                           "mia_by_exposure_ci": attacks.get("by_exposure_ci") or {},
                           "leakage": attacks.get("leakage")}
    if attacks.get("heldout_loss") is not None:  # the same mean NLL as eval's LOSS scores, one pass fewer
        out.update(heldout_loss=attacks["heldout_loss"], heldout_ppl=math.exp(min(attacks["heldout_loss"], 50.0)),
                   member_loss=attacks.get("member_loss"))
    found = attacks.get("attacks") or {}
    if found.get("loss"):
        out["mia_auc_loss"] = found["loss"].get("auc")
    for name in ("reference", "kept_loss", "kept_reference"):
        a = found.get(name) or {}
        out[f"mia_auc_{name}"] = a.get("auc")
        out[f"mia_auc_{name}_ci"] = [a.get("auc_ci_low"), a.get("auc_ci_high")] if a else None
    return out


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
        out.update(n_samples=decoding.get("samples"), sample_temperature=decoding.get("temperature"),
                   sample_any_rate=n_any / len(hits))
        out["sample_any_rate_ci_low"], out["sample_any_rate_ci_high"] = wilson_interval(n_any, len(hits))
    return out


def adversary_numbers(results: dict) -> dict[str, Any]:
    """Eval's mask-consistent extraction attack (results.json ``adversary``), empty when it did not run: the mask
    assumed (k, h, strategy), the switch threshold and the rows (exact match of greedy and both variants with their
    McNemar tests against greedy, accuracy on the dropped suffix positions)."""
    section = results.get("adversary")
    if not section:
        return {}
    mask = {k: (section.get("mask") or {}).get(k) for k in ("k", "h", "strategy")}
    return {"adversary": {"mask": mask, "switch_threshold": section.get("switch_threshold"),
                          "rows": section.get("rows") or []}}


def cell_summary(plan: CellPlan, mia_attack: str = "auto") -> dict[str, Any]:
    """Everything known about one finished cell (the unit of summary.json); ``mia_attack``: the experiment's
    headline-attack setting."""
    results = _read_json(plan.eval_dir / "results.json")
    train = _read_json(plan.train_dir / "summary.json")
    metrics_path = plan.train_dir / "metrics.jsonl"
    metrics = read_jsonl(metrics_path) if metrics_path.is_file() else []
    overall = (results.get("summary") or {}).get("overall") or {}
    out: dict[str, Any] = {"cell": plan.cell.id, "arm": plan.cell.arm, **plan.cell.values}
    out["params"] = _first(train, "num_parameters", "params", "parameters") or \
        (results.get("model") or {}).get("num_parameters")
    out["tokens_seen"] = _first(train, "tokens_seen", "tokens", "total_tokens")
    out["train_time_s"] = _first(train, "train_time_s", "wall_time_s", "wall_time", "time_s")
    out["steps"] = _first(train, "steps", "step", "total_steps")
    out.update(final_losses(metrics))
    out.update({k: overall.get(k) for k in ("n_windows", "exact_match_rate", "exact_match_ci_low",
                                            "exact_match_ci_high", *ROUGE_KEYS, "token_match")})
    out.update(adaptive_numbers(results))
    out.update(adversary_numbers(results))
    membership = results.get("membership") or {}
    out.update(membership_numbers(membership))
    attacks_path = plan.dir / ATTACKS_FILE
    attacks = _read_json(attacks_path) if attacks_path.is_file() else None
    out.update(attack_numbers(attacks))
    # every attack evaluated for this cell: eval's membership section, then attacks.json (the same scoring pass)
    found = {**(membership.get("attacks") or {}), **((attacks or {}).get("attacks") or {})}
    out["mia_aucs"] = {name: a.get("auc") for name, a in found.items()}
    out.setdefault("mia_auc_loss", out["mia_aucs"].get("loss"))
    out.update(headline_numbers(resolve_mia_attack(mia_attack, plan.start_model is not None), found))
    out["mia_auc_ci"] = [out.get("mia_auc_ci_low"), out.get("mia_auc_ci_high")]
    # the exact p-value and the guarded TPR of the headline attack, document-level extraction intervals
    scores = {**(membership.get("scores") or {}), **((attacks or {}).get("scores") or {})}
    out.update(cell_statistics(scores.get(out["mia_attack"]), results.get("windows") or []))
    summary = results.get("summary") or {}
    out["by_prefix_len"] = {str(p): {k: v.get(k) for k in ("n_windows", "exact_match_rate", *ROUGE_KEYS)}
                            for p, v in (summary.get("by_prefix_len") or {}).items()}
    out["by_repetitions"] = {str(r): {k: v.get(k) for k in ("n_windows", "exact_match_rate", *ROUGE_KEYS)}
                             for r, v in (summary.get("by_repetitions") or {}).items()}
    out["strata"] = stratum_rows(results.get("windows") or [])
    baseline = plan.eval_dir / "k_baseline.json"
    out["k_baseline"] = _read_json(baseline) if baseline.is_file() else None  # Goldfish cells only
    out["exposures"] = train.get("exposures")
    model = results.get("model") or {}
    out["precision"] = train.get("precision")  # resolved by the trainer; None for a control that trains nothing
    out["eval_precision"] = model.get("precision")
    out["device"] = model.get("device") or train.get("device")
    out["versions"], out["git"], out["code"] = results.get("versions"), results.get("git"), results.get("code")
    reps = _member_repetitions(plan.data_dir) if attacks and (attacks.get("logprobs") or {}).get("members") else []
    out["target_losses"] = target_losses(attacks, reps) if attacks else None
    out["target_losses_by_split"] = {split: target_losses(attacks, reps, split) for split in ("kept", "dropped")} \
        if attacks and attacks.get("member_nll_by_split") else None
    out.update(cell_extras(plan, results))  # stream, reads, strata, canaries (goldfish.experiment.sections)
    return out


def _member_repetitions(data_dir: Path) -> list[int]:
    from ..data import load_prepared

    return [int(r) for r in load_prepared(data_dir, verify=False).members["repetitions"]]


def target_losses(attacks: dict, reps: list[int], split: str | None = None) -> dict[str, list[float | None]] | None:
    """``{repetitions: [mean NLL of each member document]}`` and ``{"0": [... of each nonmember]}`` from
    attacks.json's per-token log-probs; ``reps``: the members' repetition counts (the prepared folder's order).
    ``split`` ("kept" | "dropped"): the members' NLL over only the positions
    the Goldfish mask keeps / drops (``member_nll_by_split``; None for a document without such positions), the
    nonmembers' over every target, as the leakage audit's held-out side."""
    logprobs = attacks.get("logprobs") or {}
    if not logprobs.get("members"):
        return None
    out: dict[str, list[float | None]] = {}
    members = [(-sum(lp) / len(lp)) if lp else None for lp in logprobs["members"]] if split is None \
        else attacks["member_nll_by_split"][split]
    pairs = list(zip(reps, members, logprobs["members"]))
    pairs += [(0, -sum(lp) / len(lp) if lp else None, lp) for lp in logprobs.get("nonmembers") or []]
    for r, nll, lp in pairs:
        if lp:
            out.setdefault(str(r), []).append(nll)
    return out


def target_share(data_dir: Path) -> dict[str, Any]:
    """How much of the training stream the targets are: member tokens x copies / training tokens (manifest)."""
    from ..data import load_prepared

    prepared = load_prepared(data_dir, verify=False)
    copies = sum(len(ids) * int(r) for ids, r in zip(prepared.members["input_ids"], prepared.members["repetitions"]))
    train = int(prepared.manifest["tokens"]["train"])
    return {"target_tokens": copies, "train_tokens": train, "target_share": copies / train if train else None}


_ROW_CELL_KEYS = ("params", "tokens_seen", "kept_tokens", "train_time_s", "mia_auc", "mia_auc_ci_low",
                  "mia_auc_ci_high", "final_kept_loss", "final_dropped_loss", "heldout_loss", "heldout_ppl")


def rows_of(cells: list[dict], axes: list[str]) -> list[dict]:
    """Flatten cell summaries into the results.csv rows (cell x prefix length x repetition stratum)."""
    rows = []
    for c in cells:
        base = {"cell": c["cell"], "arm": c["arm"], **{a: c.get(a) for a in axes}}
        base.update({k: c.get(k) for k in _ROW_CELL_KEYS})
        for s in c["strata"]:
            rows.append({**base, **s})
    return rows


def to_csv(rows: list[dict]) -> str:
    if not rows:
        return ""
    columns = list(rows[0])
    for r in rows[1:]:
        columns += [k for k in r if k not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    return buf.getvalue()


def summary_of(cells: list[dict]) -> dict[str, dict]:
    """summary.json: one entry per arm when each arm has a single cell (the demo), else one per cell."""
    arms = [c["arm"] for c in cells]
    one_per_arm = len(set(arms)) == len(arms)
    keep = ("cell", "params", "tokens_seen", "kept_tokens", "dropped_tokens", "train_time_s", "steps",
            "n_windows", "exact_match_rate", *ROUGE_KEYS, "token_match", "mia_attack", "mia_auc", "mia_auc_ci",
            "mia_auc_ci_low", "mia_auc_ci_high", "mia_auc_p", "mia_tpr_at_1pct_fpr", "mia_tpr_at_1pct_fpr_note",
            "mia_aucs", "mia_auc_loss",
            "mia_auc_reference", "mia_auc_reference_ci", "mia_auc_kept_loss", "mia_auc_kept_loss_ci",
            "mia_auc_kept_reference", "mia_auc_kept_reference_ci", "mia_by_exposure", "mia_by_exposure_ci", "tf_accuracy",
            "tf_kept_accuracy", "tf_dropped_accuracy", "heldout_accuracy", "final_kept_loss", "final_dropped_loss",
            "heldout_loss", "heldout_ppl", "member_loss", "by_prefix_len", "by_repetitions", "exact_match_ci_low",
            "exact_match_ci_high", "extraction_ci", *ADAPTIVE_FIELDS, "adversary", "leakage", "k_baseline", "precision",
            "eval_precision", "device")
    return {(c["arm"] if one_per_arm else c["cell"]): {k: c.get(k) for k in keep} for c in cells}


def blind_numbers(plans: list[CellPlan], n_bootstrap: int, seed: int) -> dict[str, Any]:
    """The model-free baseline (zlib ratio of the text alone) per prepared folder, and the first one's AUC."""
    from .analysis import blind_auc

    per_data = {}
    for p in plans:
        key = str(p.data_dir)
        if key not in per_data and (p.data_dir / "members").is_dir():  # a real prepared folder
            per_data[key] = blind_auc(p.data_dir, n_bootstrap, seed)
    if not per_data:
        return {}
    first = next(iter(per_data.values()))
    return {"blind_auc": first["auc"], "blind_auc_ci": [first["auc_ci_low"], first["auc_ci_high"]], "blind": per_data}


def _tuning_only(cell: dict, tune: dict | None) -> bool:
    """A tuning cell at a value that was not chosen: it informs the choice, not the comparison of the arms."""
    if not tune or cell["arm"] != "control":
        return False
    for group in tune["groups"]:
        if all(str(cell.get(a)) == str(v) for a, v in group["per"].items()):
            return group["chosen"] is not None and str(cell.get(tune["axis"])) != str(group["chosen"])
    return False


def aggregate(cfg: ExperimentConfig, plans: list[CellPlan], wall_time_s: float | None = None,
              tune: dict | None = None) -> dict:
    """Read every finished cell, write results.csv/results.json/summary.json into the output folder. ``plans``: the
    cells that count (with ``tune``, the tuning cells and those at a chosen value; ``tune`` is the choice made)."""
    out = cfg.out_dir
    done = [p for p in plans if p.done]
    cells = [cell_summary(p, cfg.mia_attack) for p in done]
    axes = list(plans[0].cell.values) if plans else []
    rows = rows_of(cells, axes)
    blind = blind_numbers(done, 1000, 0)
    scaling = size_analysis([c for c in cells if not _tuning_only(c, tune)], axes)
    if scaling is not None:
        scaling["data"] = {str(d): target_share(d) for d in dict.fromkeys(p.data_dir for p in done)}
    results = {
        "schema": RESULTS_SCHEMA, "experiment": cfg.name, "description": cfg.description, "axes": axes,
        "arms": list(dict.fromkeys(p.cell.arm for p in plans)), "n_cells": len(plans), "n_done": len(done),
        "wall_time_s": wall_time_s, "mia_attack": cfg.mia_attack, "cells": cells, "rows": rows,
        "missing": [p.cell.id for p in plans if not p.done],
        "start_model": next((p.start_model for p in plans if p.start_model), None), **blind,
        "control_mode": cfg.control_mode, "tune": tune, "scaling": scaling,
        "paired": paired_tests(done, cells, axes),
        "paired_axis": axis_tests(done, cells, axes, cfg.compare.axis, cfg.compare.reference, cfg.compare.pool,
                                  free=[cfg.tune.axis] if cfg.tune.axis and cfg.compare.axis in cfg.tune.per else [])
        if cfg.compare.axis else [],
    }
    atomic_write_json(out / "results.json", results)
    atomic_write_text(out / "results.csv", to_csv(rows))
    summary = summary_of(cells)
    if blind:
        summary.update(blind_auc=blind["blind_auc"], blind_auc_ci=blind["blind_auc_ci"])
    summary["paired"] = results["paired"]
    atomic_write_json(out / "summary.json", summary)
    return results
