"""The analysis of a series of evaluations (:mod:`goldfish.eval.series`): one table, trajectories, and how well an
earlier or smaller model's memorised set predicts the last model's.

A member window (one document x prefix length x placement, the same in every model: same data, same settings) is
*memorised* by a model when its token match -- the fraction of the S suffix tokens greedy decoding reproduces at
their positions, Biderman et al. (2023)'s memorization score -- is at least ``memorized`` (1.0 = exact match).

* ``rows``: per model, in series order: step, tokens, parameters, exact match (Wilson 95 % CI), memorised windows,
  token match, ROUGE-L, the same per repetition stratum, and held-out loss / LOSS-attack AUC when membership ran;
* ``strata``: per repetition stratum, the first model (step) where some window is exact and where at least half
  are -- "when does each stratum become extractable";
* ``trajectories``: per window, the memorised flag in every model, the first model that memorises it, whether every
  later one does too, and (checkpoints of a run) how many times the target had been read by then;
* ``prediction`` (Biderman et al. 2023, "Emergent and Predictable Memorization"): for every model m before the last
  model L, with M_m and M_L the memorised sets, precision = |M_m n M_L| / |M_m| (how many of m's memorised windows
  L memorises too) and recall = |M_m n M_L| / |M_L| (how many of L's m already had), each with a Wilson interval;
  beside it (``rule``) the trivial predictor a referee asks for: "memorised iff the target has >= t copies", t fitted
  on M_m (``goldfish.eval.stats.threshold_rule``: what model m alone says), with its precision and recall for M_L --
  a model's memorised set predicts the last one's beyond the repetition count only where it beats that rule.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from goldfish.config import load_config
from goldfish.data import load_prepared
from goldfish.data.order import consumed_rows
from goldfish.io import atomic_write_json, atomic_write_text
from goldfish.run_folder import TrainRun
from goldfish.train_config import TrainConfig, make_plan

from .series_report import write_series_report
from .stats import set_prediction, threshold_rule, wilson_interval

SERIES_SCHEMA = "goldfish-series/1"


def _members(results: dict) -> list[dict]:
    return [w for w in results.get("windows") or [] if w.get("split") in (None, "members")]


def _rate(k: int, n: int) -> dict[str, Any]:
    low, high = wilson_interval(k, n)
    return {"k": k, "n": n, "rate": k / n if n else None, "low": low, "high": high}


def _membership(results: dict) -> dict[str, Any]:
    m = results.get("membership") or {}
    nonmembers = ((m.get("scores") or {}).get("loss") or {}).get("nonmembers") or []
    return {
        "heldout_loss": -float(np.mean(nonmembers)) if nonmembers else None,
        "mia_auc": ((m.get("attacks") or {}).get("loss") or {}).get("auc"),
    }


def model_rows(entries: Sequence[Any], results: Sequence[dict], memorized: float) -> list[dict]:
    """One row per model (module docstring)."""
    rows = []
    for e, r in zip(entries, results):
        windows = _members(r)
        by: dict[str, list[dict]] = {}
        for w in windows:
            by.setdefault(str(w.get("repetitions")), []).append(w)
        rows.append(
            {
                "label": e.label,
                "step": e.step,
                "tokens": e.tokens,
                "final": e.final,
                "params": (r.get("model") or {}).get("num_parameters"),
                "exact_match": _rate(sum(bool(w["exact_match"]) for w in windows), len(windows)),
                "memorized": sum(w["token_match"] >= memorized for w in windows),
                "token_match": float(np.mean([w["token_match"] for w in windows])) if windows else None,
                "rouge_l": float(np.mean([w["rouge_l"] for w in windows])) if windows else None,
                "by_repetitions": {
                    k: _rate(sum(bool(w["exact_match"]) for w in v), len(v))
                    for k, v in sorted(by.items(), key=lambda kv: _num(kv[0]))
                },
                **_membership(r),
            }
        )
    return rows


def _num(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("inf")


def stratum_onsets(rows: list[dict]) -> dict[str, dict[str, Any]]:
    """Per repetition stratum: the first model with an exact window and the first with at least half exact."""
    out: dict[str, dict[str, Any]] = {}
    for stratum in dict.fromkeys(k for r in rows for k in r["by_repetitions"]):
        first = half = None
        for r in rows:
            v = r["by_repetitions"].get(stratum) or {}
            if first is None and v.get("k"):
                first = r
            if half is None and v.get("rate") is not None and v["rate"] >= 0.5:
                half = r
        out[stratum] = {
            "first_exact": first and first["label"],
            "first_exact_step": first and first["step"],
            "half_exact": half and half["label"],
            "half_exact_step": half and half["step"],
        }
    return out


def trajectories(
    entries: Sequence[Any], results: Sequence[dict], memorized: float, reads: list[dict[str, int]] | None = None
) -> list[dict]:
    """Per member window (in the first model's order): flags per model, first memorising model, whether it stays,
    and the target's reads by then (``reads[i]``: doc id -> reads up to model i's step)."""
    flags: dict[str, list[bool]] = {}
    meta: dict[str, dict] = {}
    for i, r in enumerate(results):
        for w in _members(r):
            flags.setdefault(w["sha256"], [False] * len(results))[i] = w["token_match"] >= memorized
            meta.setdefault(
                w["sha256"], {k: w.get(k) for k in ("doc_id", "repetitions", "prefix_len", "window", "start")}
            )
    out = []
    for key, f in flags.items():
        first = next((i for i, v in enumerate(f) if v), None)
        row = {
            **meta[key],
            "memorized": [int(v) for v in f],
            "first": None if first is None else entries[first].label,
            "first_step": None if first is None else entries[first].step,
            "stays": None if first is None else all(f[first:]),
        }
        if reads is not None and first is not None:
            row["reads_at_first"] = reads[first].get(meta[key]["doc_id"])
        out.append(row)
    return out


def prediction(entries: Sequence[Any], results: Sequence[dict], memorized: float) -> list[dict]:
    """Precision and recall of each earlier model's memorised set for the last model's, and of the repetition rule
    fitted on it (module docstring)."""
    windows = {w["sha256"]: w for w in _members(results[-1])}  # the last model's windows: what is predicted
    keys = list(windows)
    reps = [float(windows[k].get("repetitions") or 0) for k in keys]
    sets = [{w["sha256"] for w in _members(r) if w["token_match"] >= memorized} for r in results]
    final = [k in sets[-1] for k in keys]
    out = []
    for e, mine in zip(entries[:-1], sets[:-1]):
        found = set_prediction([k in mine for k in keys], final)
        t = threshold_rule(reps, [k in mine for k in keys])
        rule = set_prediction([r >= t for r in reps], final)
        out.append(
            {
                "label": e.label,
                "step": e.step,
                "memorized": len(mine),
                "final_memorized": found["actual"],
                "both": found["both"],
                "precision": found["precision"],
                "recall": found["recall"],
                "rule": {
                    "min_repetitions": None if math.isinf(t) else t,
                    "predicted": rule["predicted"],
                    "precision": rule["precision"],
                    "recall": rule["recall"],
                },
            }
        )
    return out


def checkpoint_reads(entries: Sequence[Any], results: Sequence[dict]) -> list[dict[str, int]] | None:
    """For the checkpoints of one run: per model, member doc id -> copies read up to its step, counted from the
    rows the trainer consumed (its config.yaml and data); None for another series or a run without them."""
    runs = {e.run for e in entries}
    if len(runs) != 1 or None in runs or any(e.step is None for e in entries):
        return None

    run = TrainRun(next(iter(runs)))
    if not run.config.is_file():
        return None
    cfg = load_config(TrainConfig, run.config)
    prepared = load_prepared(cfg.data.path, verify=False)
    ids = list(prepared.members["id"])
    plan = make_plan(cfg.schedule, cfg.optim, len(prepared.train), prepared.train.seq_len, 1)
    out = []
    for e in entries:
        consumed = consumed_rows(dataclasses.replace(plan, total_steps=e.step), cfg.seed, cfg.data.shuffle)
        starts, _ = prepared.train.reads(consumed, len(ids))
        out.append({doc: int(n) for doc, n in zip(ids, starts)})
    return out


def analyse(
    entries: Sequence[Any], results: Sequence[dict], memorized: float, reads: list[dict[str, int]] | None = None
) -> dict[str, Any]:
    """The ``series.json`` object (module docstring)."""
    rows = model_rows(entries, results, memorized)
    return {
        "schema": SERIES_SCHEMA,
        "memorized_threshold": memorized,
        "x": _axis(rows),
        "models": [
            {
                "label": e.label,
                "path": e.path,
                "checkpoint": e.checkpoint,
                "step": e.step,
                "tokens": e.tokens,
                "final": e.final,
            }
            for e in entries
        ],
        "rows": rows,
        "strata": stratum_onsets(rows),
        "prediction": prediction(entries, results, memorized),
        "trajectories": trajectories(entries, results, memorized, reads),
    }


def _axis(rows: list[dict]) -> str:
    """What the models differ in: ``step`` (a run's checkpoints) or ``params`` (a size family)."""
    if (
        all(r["step"] is not None for r in rows)
        and len({r["step"] for r in rows}) == len(rows)
        and len({r["params"] for r in rows}) == 1
    ):
        return "step"
    return "params"


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    columns = list(dict.fromkeys(k for r in rows for k in r))
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _flat_row(r: dict) -> dict:
    out = {
        k: r[k]
        for k in ("label", "step", "tokens", "params", "memorized", "token_match", "rouge_l", "heldout_loss", "mia_auc")
    }
    out.update(
        exact_match=r["exact_match"]["rate"],
        exact_match_ci_low=r["exact_match"]["low"],
        exact_match_ci_high=r["exact_match"]["high"],
        n_windows=r["exact_match"]["n"],
    )
    out.update({f"exact_match_x{k}": v["rate"] for k, v in r["by_repetitions"].items()})
    return out


def write_series(analysis: dict, out: Path, report: bool = True) -> None:
    """series.json, series.csv, trajectories.csv and (``report``) report.md with plots."""
    atomic_write_json(out / "series.json", analysis)
    atomic_write_text(out / "series.csv", _csv([_flat_row(r) for r in analysis["rows"]]))
    atomic_write_text(
        out / "trajectories.csv",
        _csv(
            [
                {**{k: v for k, v in t.items() if k != "memorized"}, "memorized": "".join(map(str, t["memorized"]))}
                for t in analysis["trajectories"]
            ]
        ),
    )
    if report:
        write_series_report(analysis, out)
