"""Fits: the log-linear trend, and the (Firth-penalised) logistic regression with its cluster bootstrap.

* :func:`loglinear_fit` -- ``y = a + b log10(x)`` by least squares with the slope's standard error and r² (Carlini et
  al. 2022's form for extraction vs model size or repetitions); :func:`predict` evaluates it.
* :func:`logistic_batch` / :func:`clustered_logistic` -- logistic regression by Newton's method (Firth's
  bias-reduced version, finite under separation), vectorised over bootstrap draws, and its cluster bootstrap:
  clusters (targets) resampled within strata (seed x repetition stratum, a designed experiment), each draw a
  frequency weight per row.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from goldfish.errors import UserError

from .bootstrap import cluster_index
from .intervals import percentiles


def loglinear_fit(x: Sequence[float], y: Sequence[float]) -> dict[str, float | int | None]:
    """Least-squares fit ``y = intercept + slope * log10(x)``, the form Carlini et al. (2022) use for extraction
    rate vs model size or repetitions. Returns ``slope`` (change of y per 10x of x), ``intercept``, ``slope_se``
    (the slope's standard error on n - 2 degrees of freedom; NaN for 2 points), ``r2`` (None when y is constant)
    and ``n``; one :class:`~goldfish.errors.UserError` for inputs it cannot fit."""
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
    lx, n = np.log10(xs), len(xs)
    sxx = float(np.sum((lx - lx.mean()) ** 2))
    slope = float(np.sum((lx - lx.mean()) * (ys - ys.mean())) / sxx)
    intercept = float(ys.mean() - slope * lx.mean())
    resid = ys - (intercept + slope * lx)
    ss_res, ss_tot = float(np.sum(resid**2)), float(np.sum((ys - ys.mean()) ** 2))
    se = math.sqrt(ss_res / (n - 2) / sxx) if n > 2 else float("nan")
    return {
        "slope": slope,
        "intercept": intercept,
        "slope_se": se,
        "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else None,
        "n": n,
    }


def predict(fit: dict, x: float | Sequence[float]) -> np.ndarray:
    """Evaluate a :func:`loglinear_fit` at ``x`` (> 0)."""
    return fit["intercept"] + fit["slope"] * np.log10(np.asarray(x, dtype=np.float64))


LOGIT_MAX_ITER = 100
LOGIT_MAX_STEP = 5.0  # cap on a Newton step (logit units), as R's logistf does, so a separated start cannot overshoot


def logistic_batch(design: np.ndarray, successes: np.ndarray, trials: np.ndarray, firth: bool = True) -> np.ndarray:
    """(B, P) coefficients of ``logit P(success) = design @ beta`` for B sets of grouped counts at once.

    ``design`` (S, P): one row per group of identical covariates; ``successes`` (B, S); ``trials`` (S,) or (B, S)
    (a row's frequency weight: a bootstrap draw's multiplicity, 0 = left out). Newton-Raphson on the score, with
    ``firth`` on Firth's modified score ``sum_s (k_s + h_s / 2 - (n_s + h_s) p_s) x_s`` (h: the leverages of the
    weighted hat matrix), whose root maximises the likelihood penalised by Jeffreys' prior (Firth 1993): finite
    under separation, where plain maximum likelihood diverges (then stopped after ``LOGIT_MAX_ITER`` steps)."""
    design = np.asarray(design, dtype=np.float64)
    k = np.asarray(successes, dtype=np.float64)
    n = np.broadcast_to(np.asarray(trials, dtype=np.float64), k.shape)
    beta = np.zeros((k.shape[0], design.shape[1]))
    for _ in range(LOGIT_MAX_ITER):
        p = 1.0 / (1.0 + np.exp(-(beta @ design.T)))  # (B, S)
        w = n * p * (1.0 - p)  # (B, S) Fisher weights
        inv = np.linalg.pinv(np.einsum("si,bs,sj->bij", design, w, design))  # (B, P, P) inverse information
        kk, nn = k, n
        if firth:
            hat = w * np.einsum("si,bij,sj->bs", design, inv, design)  # (B, S) leverages
            kk, nn = k + hat / 2.0, n + hat
        step = np.einsum("bij,bj->bi", inv, (kk - nn * p) @ design)  # (B, P)
        step *= np.minimum(1.0, LOGIT_MAX_STEP / np.maximum(np.abs(step).max(axis=1, keepdims=True), 1e-300))
        beta = beta + step
        if np.abs(step).max() < 1e-10:
            break
    return beta


def clustered_logistic(
    design: Any,
    outcomes: Any,
    clusters: Sequence[Any],
    strata: Sequence[Any] | None = None,
    names: Sequence[str] | None = None,
    derived: dict[str, Any] | None = None,
    n_bootstrap: int = 1000,
    seed: int = 0,
    firth: bool = True,
) -> dict[str, Any]:
    """One logistic regression of binary ``outcomes`` (n,) on ``design`` (n, P) (include a column of ones for the
    intercept), with a 95 % interval per coefficient from a cluster bootstrap: the rows of one cluster (a target,
    measured at several sizes) are resampled together, clusters drawn with replacement within their stratum
    (``strata[i]`` of row i, e.g. seed x repetition stratum: a designed experiment keeps its design), every draw a
    frequency weight per row, fitted with the same Firth-penalised Newton (:func:`logistic_batch`).

    ``derived``: name -> function of a (B, P) coefficient array returning (B,) values (e.g. ``-c / b``), reported
    with the same percentile interval. Returns ``coef``, ``ci_low``, ``ci_high``, ``se`` (bootstrap sd) per name,
    ``derived`` (``{name: {value, ci_low, ci_high}}``), ``n_rows``, ``n_events``, ``n_clusters``, ``n_bootstrap``,
    ``method``."""
    x = np.asarray(design, dtype=np.float64)
    y = np.asarray(outcomes, dtype=np.float64).reshape(-1)
    if x.ndim != 2 or x.shape[0] != len(y) or len(clusters) != len(y):
        raise ValueError(f"design {x.shape}, {len(y)} outcomes and {len(clusters)} cluster labels must agree")
    names = list(names or [f"b{i}" for i in range(x.shape[1])])
    point = logistic_batch(x, y[None, :], np.ones(len(y)), firth)  # (1, P)
    index = cluster_index(clusters, len(y))  # (n,) cluster of each row
    n_clusters = int(index.max()) + 1 if len(index) else 0
    stratum_of = np.zeros(n_clusters, dtype=np.int64)  # (C,) each cluster's stratum (its first row's)
    if strata is not None:
        codes = cluster_index(strata, len(y))
        ids, first = np.unique(index, return_index=True)
        stratum_of[ids] = codes[first]
    rng = np.random.default_rng(seed)
    counts = np.zeros((n_bootstrap, n_clusters))  # (B, C) multiplicity of each cluster in each draw
    for s in np.unique(stratum_of):
        members = np.flatnonzero(stratum_of == s)
        draws = rng.integers(0, len(members), size=(n_bootstrap, len(members)))
        np.add.at(counts, (np.arange(n_bootstrap)[:, None], members[draws]), 1.0)
    weights = counts[:, index]  # (B, n)
    boot = logistic_batch(x, weights * y[None, :], weights, firth) if n_bootstrap > 0 else np.zeros((0, x.shape[1]))
    out: dict[str, Any] = {
        "coef": {},
        "ci_low": {},
        "ci_high": {},
        "se": {},
        "derived": {},
        "n_rows": int(len(y)),
        "n_events": int(y.sum()),
        "n_clusters": n_clusters,
        "n_bootstrap": int(n_bootstrap),
        "method": ("Firth-penalised" if firth else "maximum-likelihood") + " logistic regression; "
        f"95 % percentile cluster bootstrap ({n_bootstrap} draws, clusters resampled within "
        "strata)",
    }
    for j, name in enumerate(names):
        out["coef"][name] = float(point[0, j])
        if n_bootstrap > 0:
            out["ci_low"][name], out["ci_high"][name] = percentiles(boot[:, j])
            out["se"][name] = float(boot[:, j].std(ddof=1))
    for name, fn in (derived or {}).items():
        value = float(np.asarray(fn(point)).reshape(-1)[0])
        entry: dict[str, Any] = {"value": value, "ci_low": None, "ci_high": None}
        if n_bootstrap > 0:
            samples = np.asarray(fn(boot), dtype=np.float64).reshape(-1)
            samples = samples[np.isfinite(samples)]
            if samples.size:
                entry["ci_low"], entry["ci_high"] = percentiles(samples)
        out["derived"][name] = entry
    return out
