"""Aggregation of per-window extraction results: the ``summary`` section, generic grouping and log-linear fits.

Windows are plain dicts following the results.json schema (see ``eval/run.py``); a metric missing from a window, or
``None`` there, is left out of that metric's mean rather than counted as zero, so partial results still summarise.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable, Sequence

import numpy as np

from goldfish.errors import UserError

# summary key -> window key, averaged (booleans become rates)
MEAN_METRICS = {
    "exact_match_rate": "exact_match",
    "token_match": "token_match",
    "rouge_l": "rouge_l",
    "rouge_l_words": "rouge_l_words",
    "longest_match_prefix": "longest_match_prefix",
    "edit_distance": "edit_distance",
    "onepass_exact_rate": "onepass_exact",
}
SUMMARY_KEYS = ("n_windows", *MEAN_METRICS, "exact_match_ci_low", "exact_match_ci_high", "onepass_disagreements")


def _mean(values: Iterable[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float | None, float | None]:
    """Wilson score interval of a binomial rate (well-behaved at 0 and 1, unlike the normal approximation; an
    exact-match rate of 0/50 still gets an upper bound of ~7 %)."""
    if n <= 0:
        return None, None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize_group(windows: Sequence[dict]) -> dict[str, Any]:
    """Means of the per-window metrics of one group of windows (one row of the summary)."""
    out: dict[str, Any] = {"n_windows": len(windows)}
    for key, field in MEAN_METRICS.items():
        out[key] = _mean(w.get(field) for w in windows)
    exact = [bool(w["exact_match"]) for w in windows if w.get("exact_match") is not None]
    out["exact_match_ci_low"], out["exact_match_ci_high"] = wilson_interval(sum(exact), len(exact))
    both = [w for w in windows if w.get("onepass_exact") is not None and w.get("exact_match") is not None]
    # one-pass (teacher-forced argmax) and greedy decoding agree by construction; a disagreement flags a decoding bug
    out["onepass_disagreements"] = sum(bool(w["onepass_exact"]) != bool(w["exact_match"]) for w in both)
    return out


def _sort_key(value: Any) -> tuple:
    """Numbers in numeric order, then strings, then None (unknown) last."""
    if value is None:
        return (2, 0, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value, "")
    return (1, 0, str(value))


def _stratify(windows: Sequence[dict], field: str) -> dict[str, dict]:
    groups: dict[Any, list[dict]] = defaultdict(list)
    for w in windows:
        groups[w.get(field)].append(w)
    return {
        ("unknown" if k is None else str(k)): summarize_group(groups[k]) for k in sorted(groups, key=_sort_key)
    }


def summarize(windows: list[dict]) -> dict:
    """The results.json ``summary``: ``overall``, ``by_prefix_len`` and ``by_repetitions`` (keys are strings;
    repetitions ``None`` -> ``"unknown"``), each row holding :data:`SUMMARY_KEYS`."""
    return {
        "overall": summarize_group(windows),
        "by_prefix_len": _stratify(windows, "prefix_len"),
        "by_repetitions": _stratify(windows, "repetitions"),
    }


def group_rates(rows: list[dict], by: str | tuple[str, ...], metric: str) -> dict:
    """Mean of ``metric`` (a rate for booleans) per group of ``rows``, rows without the metric left out.

    ``by`` names one field (keys are its values) or several (keys are tuples of values); keys are sorted with
    numbers numerically and ``None`` last. Example: ``group_rates(windows, ("prefix_len", "repetitions"),
    "exact_match") -> {(32, 1): 0.0, (32, 4): 0.25, ...}``.
    """
    fields = (by,) if isinstance(by, str) else tuple(by)
    if not fields:
        raise UserError("group_rates needs at least one field to group by")
    groups: dict[Any, list[float]] = defaultdict(list)
    for row in rows:
        value = row.get(metric)
        if value is None:
            continue
        key = tuple(row.get(f) for f in fields)
        groups[key if len(fields) > 1 else key[0]].append(float(value))
    order = sorted(groups, key=lambda k: tuple(_sort_key(v) for v in (k if len(fields) > 1 else (k,))))
    return {k: sum(groups[k]) / len(groups[k]) for k in order}


def loglinear_fit(x: Sequence[float], y: Sequence[float]) -> dict[str, float | int | None]:
    """Least-squares fit ``y = intercept + slope * log10(x)``, the form Carlini et al. (2022) use for extraction
    rate vs model size or repetitions. Returns slope (change of y per 10x of x), intercept, r2 (None when y is
    constant) and n."""
    xs, ys = np.asarray(x, dtype=np.float64).reshape(-1), np.asarray(y, dtype=np.float64).reshape(-1)
    problems = []
    if xs.shape != ys.shape:
        problems.append(f"x has {xs.size} values but y has {ys.size}")
    elif len(np.unique(xs)) < 2:
        problems.append(f"a log-linear fit needs at least 2 distinct x values, got {np.unique(xs).tolist()}")
    if np.any(~np.isfinite(xs)) or np.any(xs <= 0):
        problems.append(f"log-linear fit needs finite x > 0, got {xs.tolist()}")
    if np.any(~np.isfinite(ys)):
        problems.append(f"log-linear fit needs finite y, got {ys.tolist()}")
    if problems:
        raise UserError("; ".join(problems))
    lx = np.log10(xs)
    design = np.stack([np.ones_like(lx), lx], axis=1)  # (n, 2)
    (intercept, slope), *_ = np.linalg.lstsq(design, ys, rcond=None)
    residual = ys - (intercept + slope * lx)
    ss_tot = float(np.sum((ys - ys.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residual**2)) / ss_tot if ss_tot > 0 else None
    return {"slope": float(slope), "intercept": float(intercept), "r2": r2, "n": int(xs.size)}


def predict(fit: dict, x: float | Sequence[float]) -> np.ndarray:
    """Evaluate a :func:`loglinear_fit` at ``x`` (> 0)."""
    return fit["intercept"] + fit["slope"] * np.log10(np.asarray(x, dtype=np.float64))
