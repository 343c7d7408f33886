"""Memorisation vs model size (Carlini et al. 2022), for experiments with a ``size`` grid axis.

Per (arm, size), pooled over the other axes' cells (e.g. seeds):

* exact match per exposure stratum as ``successes / windows`` with a Wilson 95 % interval;
* the *loss gap* per stratum: the control's target NLL minus the arm's, per target, less the same difference on the
  nonmembers (a difference in differences: what the arm learnt about *these* texts, not about the language in
  general, relative to the same model trained on the background alone, ``control_mode: background``), averaged
  over targets and cells with a bootstrap interval over targets; and the same gap split by the positions the
  experiment's Goldfish mask keeps / drops (``loss_gap_kept`` / ``loss_gap_dropped``: every arm on the same
  positions, as the leakage audit), so a Goldfish arm's gap on the tokens it never trained on is visible;
* held-out loss (mean and sd over cells), so an under-trained size is visible.

The log-linear fit ``rate = a + b log10(params)`` is made per arm and stratum only over sizes whose exact match is
*off the floor* (Wilson lower bound above the control's rate at that size), and only when there are at least
``MIN_FIT_POINTS`` of them; it reports the slope's standard error. Otherwise the table says why there is no fit.

The exposure threshold (a fixed exposure count floors; the count at which targets become extractable does not):

* ``e50`` per (arm, size): the exposures at which half of the targets are extracted, from a logistic fit of exact
  match on log2 of the exposures actually read (``goldfish.eval.threshold``), with its profile-likelihood interval
  (or, where the strata separate, the identified range between them, flagged);
* ``size_model`` per arm (:func:`size_model`): ONE logistic regression of every target's exact match on log2
  exposures read and log10 parameters over the from-scratch sizes (a pretrained model, ``base_model``, is shown
  but never fitted), targets as clusters (a target is measured at every size of its seed), intervals from a cluster
  bootstrap within seed x stratum (``goldfish.eval.stats.clustered_logistic``): its size coefficient, the E50
  elasticity d log10 E50 / d log10 params = -log10(2) c / b it implies and the model's E50 per size, each with a
  95 % interval, and the size coefficient of each seed alone -- in place of a line through per-size E50 points
  (which ignores their intervals and moves with each point's place inside its identified range);
* ``by_cell`` per (arm, size): each cell's (seed's) exact-match counts per stratum, beside the pooled ones;
* ``canaries`` per (arm, size): the Secret-Sharer exposure of the canaries per stratum (``goldfish.eval.canaries``),
  a continuous measure that never floors, with a bootstrap CI over canaries.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from goldfish.eval.stats import cluster_bootstrap_mean, clustered_logistic, loglinear_fit, t_over_runs, wilson_interval
from goldfish.eval.threshold import e50

from ..io import read_json
from .plan import CellPlan
from .summary import CellSummary

MIN_FIT_POINTS = 3
SIZE_AXIS = "size"


def _pool(cells: list[CellSummary]) -> dict[int, tuple[int, int]]:
    """``{repetitions: (exact-match successes, windows)}`` summed over cells and prefix lengths."""
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for c in cells:
        for s in c.strata or []:
            if s.get("repetitions") is None or s.get("exact_match_rate") is None:
                continue
            n = int(s["n_windows"])
            out[int(s["repetitions"])][0] += int(round(s["exact_match_rate"] * n))
            out[int(s["repetitions"])][1] += n
    return {r: (k, n) for r, (k, n) in out.items()}


def _target_losses(cell: CellSummary | None, split: str | None) -> dict | None:
    if not cell:
        return None
    return cell.target_losses if split is None else (cell.target_losses_by_split or {}).get(split)


def loss_gaps(
    pairs: list[tuple[CellSummary, CellSummary | None]],
    n_bootstrap: int = 1000,
    seed: int = 0,
    split: str | None = None,
) -> dict[int, dict[str, float]]:
    """``{repetitions: {gap, low, high, n}}``: per target, control NLL minus arm NLL less the mean of the same
    difference over the nonmembers (stratum "0"), pooled over (arm cell, its control cell) pairs, with a bootstrap
    interval over targets. ``split`` ("kept" | "dropped"): the targets' NLL over only the positions the Goldfish
    mask keeps / drops (``target_losses_by_split``; the held-out side stays every nonmember target, as in the
    leakage audit); a target without such positions is left out."""
    diffs: dict[int, list[float]] = defaultdict(list)
    for c, control in pairs:
        mine, theirs = _target_losses(c, split), _target_losses(control, split)
        if not mine or not theirs:
            continue
        held = [b - a for a, b in zip(mine.get("0") or [], theirs.get("0") or [])]
        shift = float(np.mean(held)) if held else 0.0
        for r, losses in mine.items():
            if r != "0":
                diffs[int(r)] += [
                    b - a - shift for a, b in zip(losses, theirs.get(r) or []) if a is not None and b is not None
                ]
    out = {}
    for r, values in sorted(diffs.items()):
        found = cluster_bootstrap_mean(values, None, n_bootstrap, seed)
        out[r] = {"gap": found["mean"], "low": found["ci_low"], "high": found["ci_high"], "n": len(values)}
    return out


def size_analysis(cells: list[CellSummary], axes: list[str]) -> dict | None:
    """The ``scaling`` block of results.json (None without a ``size`` axis). ``cells``: the cell summaries that
    count (without the tuning cells at values that were not chosen); an arm cell is paired with the control cell of
    the same grid point."""
    if SIZE_AXIS not in axes:
        return None
    point = {id(c): tuple(str(c.values.get(a)) for a in axes) for c in cells}
    controls = {point[id(c)]: c for c in cells if c.arm == "control"}
    by: dict[tuple[str, str], list[CellSummary]] = defaultdict(list)
    for c in cells:
        by[(c.arm, str(c.values[SIZE_AXIS]))].append(c)
    rows = []
    for (arm, size), group in by.items():
        pooled = _pool(group)
        held = [c.heldout_loss for c in group if c.heldout_loss is not None]
        strata = {}
        for r, (k, n) in sorted(pooled.items()):
            low, high = wilson_interval(k, n)
            strata[str(r)] = {"exact": k, "n": n, "rate": k / n if n else None, "low": low, "high": high}
        for split in (None, "kept", "dropped"):
            gaps = loss_gaps([(c, controls.get(point[id(c)])) for c in group], split=split) if arm != "control" else {}
            for r, g in gaps.items():
                strata.setdefault(str(r), {})["loss_gap" if split is None else f"loss_gap_{split}"] = g
        exposures = [c.exposures for c in group if c.exposures]
        by_cell = [
            {
                "cell": c.cell,
                "values": {a: c.values.get(a) for a in axes if a != SIZE_AXIS},
                "strata": {str(r): list(kn) for r, kn in sorted(_pool([c]).items())},
            }
            for c in group
        ]
        rows.append(
            {
                "arm": arm,
                "size": size,
                "params": group[0].params,
                "cells": len(group),
                "by_cell": by_cell,
                "heldout_loss": float(np.mean(held)) if held else None,
                "heldout_loss_sd": float(np.std(held, ddof=1)) if len(held) > 1 else None,
                "tokens_seen": group[0].tokens_seen,
                "strata": strata,
                "exposures": exposures[0] if exposures else None,
                "exposures_agree": all(e == exposures[0] for e in exposures) if exposures else None,
                "pretrained": any(c.start_model for c in group),
                "e50": group_e50(group) if arm != "control" else None,
                **(e50_runs(group, [a for a in axes if a != SIZE_AXIS]) if arm != "control" else {}),
                "canaries": canary_strata(group),
            }
        )
    return {"rows": rows, "fits": _fits(rows)}


def _fits(rows: list[dict]) -> list[dict]:
    """Per (arm, stratum): the fit over off-floor sizes trained from scratch, or why there is none."""
    control = {r["size"]: r for r in rows if r["arm"] == "control"}
    fits = []
    for arm in dict.fromkeys(r["arm"] for r in rows if r["arm"] != "control"):
        arm_rows = sorted(
            (r for r in rows if r["arm"] == arm and not r.get("pretrained")), key=lambda r: r["params"] or 0
        )
        strata = sorted({int(s) for r in arm_rows for s, v in r["strata"].items() if v.get("n")})
        for s in strata:
            points, floor = [], []
            for r in arm_rows:
                v = r["strata"].get(str(s)) or {}
                if not v.get("n") or r["params"] is None:
                    continue
                base = ((control.get(r["size"]) or {}).get("strata") or {}).get(str(s)) or {}
                floor_rate = base.get("rate") or 0.0
                if v["low"] is not None and v["low"] > floor_rate:
                    points.append((r["params"], v["rate"]))
                else:
                    floor.append(r["size"])
            entry = {"arm": arm, "repetitions": s, "off_floor": len(points), "on_floor": floor}
            if len(points) >= MIN_FIT_POINTS:
                entry.update(loglinear_fit([p for p, _ in points], [y for _, y in points]))
            else:
                entry["why_not"] = (
                    f"{len(points)} of {len(arm_rows)} sizes off the floor (need {MIN_FIT_POINTS}): no fit"
                )
            fits.append(entry)
    return fits


# ------------------------------------------------------------------ the exposure threshold E50 and canaries


def _reads(cell: CellSummary, label: str) -> float | None:
    """Copies of a target labelled ``label`` the cell's training read: the trainer's [fewest, most] (their mean when
    they differ, e.g. under a token budget of part of an epoch)."""
    lo_hi = (cell.exposures or {}).get(label)
    return None if not lo_hi else (lo_hi[0] + lo_hi[1]) / 2


def group_e50(cells: list[CellSummary]) -> dict | None:
    """E50 of an (arm, size) group (``goldfish.eval.threshold.e50``) on the exact-match counts of its cells'
    windows at their first prefix length, pooled by the exposures actually read (not the labels); None without
    two exposure values read."""
    pooled: dict[float, list[int]] = defaultdict(lambda: [0, 0])
    prefix = min(
        (s["prefix_len"] for c in cells for s in c.strata or [] if s.get("prefix_len") is not None), default=None
    )
    for c in cells:
        for s in c.strata or []:
            reads = _reads(c, str(s.get("repetitions")))
            if s.get("prefix_len") != prefix or s.get("exact_match_rate") is None or not reads:
                continue
            n = int(s["n_windows"])
            pooled[reads][0] += int(round(s["exact_match_rate"] * n))
            pooled[reads][1] += n
    if len(pooled) < 2:
        return None
    xs = sorted(pooled)
    found = e50(xs, [pooled[x][0] for x in xs], [pooled[x][1] for x in xs])
    return {
        **found,
        "prefix_len": prefix,
        "exact_reads": all(len({*(c.exposures or {}).get(k, [0])}) == 1 for c in cells for k in (c.exposures or {})),
    }


def e50_runs(cells: list[CellSummary], axes: list[str]) -> dict:
    """E50 per training run of an (arm, size) group -- each cell's own fit (:func:`group_e50` of one cell) -- and
    across runs: ``{e50_runs: [{values, e50}], e50_over_runs}``, the latter the geometric mean of the runs' E50 with
    a t interval over runs on log2 E50 (:func:`goldfish.eval.stats.t_over_runs`; ``sd``: the between-run spread in
    log2 units), only where every run has a point (an interior E50); else None, with ``why_not`` saying how many
    runs lie beyond the tested exposures or are only identified between two strata. The pooled ``e50`` treats every
    run's targets as one sample: within-run detail."""
    runs = [{"values": {a: c.values.get(a) for a in axes}, "e50": group_e50([c])} for c in cells]
    points = [r["e50"]["log2_e50"] for r in runs if r["e50"] and r["e50"].get("log2_e50") is not None]
    over: dict[str, Any] = {"n_runs": len(runs), "n_points": len(points)}
    if len(points) == len(runs) and len(runs) >= 2:
        found = t_over_runs(points)
        over.update(
            geo_mean=2.0 ** found["mean"],
            ci_low=2.0 ** found["ci_low"],
            ci_high=2.0 ** found["ci_high"],
            sd_log2=found["sd"],
            df=found["df"],
        )
    elif len(runs) < 2:
        over["why_not"] = "one run: no interval over runs"
    else:  # above / below the tested exposures, separated (only identified between two strata), none (no fit)
        others = [
            r["e50"]["status"] if r["e50"] else "none"
            for r in runs
            if not (r["e50"] and r["e50"].get("log2_e50") is not None)
        ]
        over["why_not"] = (
            f"{len(points)} of {len(runs)} runs have an E50 inside the tested exposures (the others: "
            + ", ".join(f"{others.count(s)} {s}" for s in dict.fromkeys(others))
            + "): no interval over runs"
        )
    return {"e50_runs": runs, "e50_over_runs": over}


def canary_strata(cells: list[CellSummary], n_bootstrap: int = 1000, seed: int = 0) -> dict | None:
    """Secret-Sharer exposure pooled over an (arm, size) group's canaries, per labelled repetitions: ``{r: {mean,
    low, high, n, saturated, extrapolated}}`` (bootstrap interval over canaries) plus ``method`` and
    ``resolution_bits``; None without canaries."""
    by: dict[int, list[dict]] = defaultdict(list)
    method = None
    for c in cells:
        found = c.canaries or {}
        method = method or {k: found.get(k) for k in ("method", "space_bits", "resolution_bits", "n_candidates")}
        for row in found.get("canaries") or []:
            by[int(row["repetitions"])].append(row)
    if not by:
        return None
    out: dict[str, Any] = {"method": method, "strata": {}}
    for r, rows in sorted(by.items()):
        found = cluster_bootstrap_mean([x["exposure"] for x in rows], None, n_bootstrap, seed)
        out["strata"][str(r)] = {
            "mean": found["mean"],
            "low": found["ci_low"],
            "high": found["ci_high"],
            "n": len(rows),
            "saturated": sum(bool(x.get("saturated")) for x in rows),
            "extrapolated": float(np.mean([x["extrapolated"] for x in rows])),
        }
    return out


def first_prefix_windows(plan: CellPlan) -> list[dict]:
    """The member windows of a cell's eval results at the first prefix length it evaluated."""
    results = read_json(plan.results_file) if plan.results_file.is_file() else {}
    members = [w for w in results.get("windows") or [] if w.get("split") in (None, "members")]
    first = min((w["prefix_len"] for w in members if w.get("prefix_len") is not None), default=None)
    return [w for w in members if w.get("prefix_len") == first]


def _elasticity(beta: np.ndarray) -> np.ndarray:
    """d log10 E50 / d log10 params = -log10(2) c / b of (B, 3) coefficients [a, b (log2 exposures), c (log10
    params)]: log2 E50 = -(a + c log10 N) / b; NaN where b <= 0 (no threshold)."""
    b = np.where(beta[:, 1] > 0, beta[:, 1], np.nan)
    return -math.log10(2.0) * beta[:, 2] / b


def _e50_at(params: float):
    """(B, 3) coefficients -> (B,) E50 the model implies at ``params`` parameters."""

    def fn(beta: np.ndarray) -> np.ndarray:
        b = np.where(beta[:, 1] > 0, beta[:, 1], np.nan)
        return 2.0 ** (-(beta[:, 0] + beta[:, 2] * math.log10(params)) / b)

    return fn


def size_model(plans: list[CellPlan], cells: list[CellSummary], n_bootstrap: int = 1000, seed: int = 0) -> list[dict]:
    """Per arm (not the control): ``logit P(exact) = a + b log2(exposures read) + c log10(params)`` over every member
    window (first prefix length) of its from-scratch cells (``plans`` and their summaries ``cells``, aligned), one
    row per target and size; a target is a cluster (the prepared folder -- its seed's split -- and its document id),
    resampled with all its sizes, within its seed and stratum (``goldfish.eval.stats.clustered_logistic``).

    Returns per arm ``{arm, sizes, cells, n_rows, n_events, n_clusters, coef, ci_low, ci_high, se, derived
    (elasticity and e50 per size: {value, ci_low, ci_high}), by_split: [{split, cells, coef, ci_low, ci_high}],
    method}``, or ``{arm, why_not}`` where the model is not identified (no extraction, every target extracted, or
    one size)."""
    out = []
    for arm in dict.fromkeys(c.arm for c in cells if c.arm != "control"):
        design, y, clusters, strata, splits, sizes = [], [], [], [], [], {}
        for plan, cell in zip(plans, cells):
            if cell.arm != arm or cell.start_model or not cell.params:
                continue
            sizes[str(cell.values.get(SIZE_AXIS))] = cell.params
            for w in first_prefix_windows(plan):
                reads = _reads(cell, str(w.get("repetitions")))
                if not reads:
                    continue
                design.append([1.0, math.log2(reads), math.log10(cell.params)])
                y.append(float(bool(w.get("exact_match"))))
                clusters.append((str(plan.data_dir), w.get("doc_id")))
                strata.append((str(plan.data_dir), w.get("repetitions")))
                splits.append(str(plan.data_dir))
        entry: dict[str, Any] = {"arm": arm, "sizes": sizes, "n_rows": len(y), "n_events": int(sum(y))}
        if len(sizes) < 2 or not y or 0 < sum(y) == len(y) or not sum(y):
            entry["why_not"] = (
                f"{len(sizes)} from-scratch size(s)"
                if len(sizes) < 2
                else f"{int(sum(y))} of {len(y)} target windows extracted: the model is not identified"
            )
            out.append(entry)
            continue
        names = ["intercept", "log2_exposures", "log10_params"]
        derived = {"e50_elasticity": _elasticity, **{f"e50_{s}": _e50_at(p) for s, p in sizes.items()}}
        x, yy = np.asarray(design), np.asarray(y)
        entry.update(clustered_logistic(x, yy, clusters, strata, names, derived, n_bootstrap, seed))
        entry["by_split"] = []
        for split in dict.fromkeys(splits):
            rows = [i for i, s in enumerate(splits) if s == split]
            if 0 < yy[rows].sum() < len(rows):
                found = clustered_logistic(
                    x[rows],
                    yy[rows],
                    [clusters[i] for i in rows],
                    [strata[i] for i in rows],
                    names,
                    None,
                    n_bootstrap,
                    seed,
                )
                entry["by_split"].append(
                    {
                        "split": split.rsplit("/", 1)[-1],
                        **{k: found[k][names[2]] for k in ("coef", "ci_low", "ci_high")},
                    }
                )
        out.append(entry)
    return out
