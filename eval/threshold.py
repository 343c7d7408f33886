"""The exposure threshold E50: how many exposures it takes until half of the targets are extracted.

Exact match at one fixed exposure count floors for small models; the count at which a target *becomes* extractable
does not. With targets in repetition strata (exposures e_1 < e_2 < ...), the fraction extracted is modelled as

    P(extracted | e) = sigmoid(a + b * log2 e),        E50 = 2 ** (-a / b),

a logistic regression of exact match (one binary outcome per target) on log2 exposures, fitted to the grouped
counts ``successes_j / trials_j`` of each stratum. The fit is penalised with Jeffreys' prior (Firth 1993): it is the
maximum-likelihood fit made finite under separation (every target of the high strata extracted, none of the low
ones), where plain maximum likelihood has no finite solution; with symmetric counts its midpoint is the plain fit's.
It is solved by Newton-Raphson on Firth's modified score (the algorithm of R's ``logistf``), vectorised over the
bootstrap draws.

E50 is reported only where it lies inside the tested range ``[e_1, e_max]`` (``status: interior``); otherwise it is
censored: ``above`` (the fitted rate stays below one half up to the largest exposure: E50 > e_max) or ``below`` (E50
< e_1). The 95 % interval is a percentile bootstrap over targets, resampled within each stratum (a designed
experiment keeps its strata): ``k*_j ~ Binomial(n_j, (k_j + 1/2) / (n_j + 1))``, the stratum's rate smoothed by
Jeffreys' prior so that a stratum at 0/n or n/n still varies -- resampling its targets as they are (rate k_j / n_j)
would give a zero-width interval exactly when the strata separate, where E50 is least determined. A bound that
falls outside the tested range is censored the same way.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from goldfish.errors import UserError

N_BOOTSTRAP = 1000


MAX_ITER = 100
MAX_STEP = 5.0  # cap on a Newton step (logit units), as R's logistf does, so a separated start cannot overshoot


def fit_batch(x: np.ndarray, successes: np.ndarray, trials: np.ndarray, firth: bool = True) -> np.ndarray:
    """(B, 2) ``[intercept, slope]`` of ``logit P = intercept + slope * x`` for B sets of grouped counts at once.

    ``x`` (S,), ``trials`` (S,), ``successes`` (B, S). Newton-Raphson on the score, with ``firth`` Firth's
    modified score ``sum_s (k_s + h_s / 2 - (n_s + h_s) p_s) x_s`` (h: the leverages of the weighted hat matrix),
    whose root maximises the likelihood penalised by Jeffreys' prior."""
    design = np.stack([np.ones_like(x), x], axis=1)  # (S, 2)
    beta = np.zeros((successes.shape[0], 2))
    for _ in range(MAX_ITER):
        p = 1.0 / (1.0 + np.exp(-(beta @ design.T)))  # (B, S)
        w = trials * p * (1.0 - p)  # (B, S) Fisher weights
        inv = np.linalg.pinv(np.einsum("si,bs,sj->bij", design, w, design))  # (B, 2, 2) inverse information
        k, n = successes, np.broadcast_to(trials, successes.shape)
        if firth:
            hat = w * np.einsum("si,bij,sj->bs", design, inv, design)  # (B, S) leverages
            k, n = k + hat / 2.0, n + hat
        step = np.einsum("bij,bj->bi", inv, (k - n * p) @ design)  # (B, 2)
        step *= np.minimum(1.0, MAX_STEP / np.maximum(np.abs(step).max(axis=1, keepdims=True), 1e-300))
        beta = beta + step
        if np.abs(step).max() < 1e-10:
            break
    return beta


def logistic_fit(x: Sequence[float], successes: Sequence[int], trials: Sequence[int],
                 firth: bool = True) -> dict[str, float]:
    """Fit ``logit P = intercept + slope * x`` to grouped binary outcomes -> {intercept, slope, slope_se}.

    ``firth``: penalise by Jeffreys' prior (finite under separation). ``slope_se`` from the inverse Fisher
    information at the fit."""
    xs, k, n = (np.asarray(v, dtype=np.float64) for v in (x, successes, trials))
    if xs.ndim != 1 or not (xs.shape == k.shape == n.shape) or len(np.unique(xs[n > 0])) < 2:
        raise UserError(f"a logistic fit needs >= 2 distinct x with trials, got x={list(xs)} trials={list(n)}")
    if np.any((k < 0) | (k > n)):
        raise UserError(f"successes {list(k)} must lie in [0, trials {list(n)}]")
    intercept, slope = fit_batch(xs, k[None, :], n, firth)[0]
    p = 1.0 / (1.0 + np.exp(-(intercept + slope * xs)))
    design = np.stack([np.ones_like(xs), xs], axis=1)
    cov = np.linalg.pinv(design.T @ ((n * p * (1 - p))[:, None] * design))
    return {"intercept": float(intercept), "slope": float(slope), "slope_se": float(math.sqrt(max(cov[1, 1], 0.0)))}


def threshold_of(fit: dict[str, float], lo: float, hi: float) -> tuple[float, str]:
    """(x where the fitted probability is one half, status) on the tested range ``[lo, hi]`` of x: ``interior``,
    or censored ``above`` (+inf: not reached by ``hi``) / ``below`` (-inf: already past by ``lo``), or ``none``
    (the rate falls with x)."""
    a, b = fit["intercept"], fit["slope"]
    at_lo, at_hi = a + b * lo, a + b * hi  # logits at the ends of the range
    if at_hi < 0 and at_lo < 0:
        return math.inf, "above"
    if at_hi > 0 and at_lo > 0:
        return -math.inf, "below"
    if b <= 0:
        return math.nan, "none"
    return -a / b, "interior"


def e50(exposures: Sequence[float], successes: Sequence[int], trials: Sequence[int],
        n_bootstrap: int = N_BOOTSTRAP, seed: int = 0) -> dict:
    """E50 of targets in strata (one entry per stratum: exposures read, targets extracted, targets), with its
    bootstrap interval -> ``{e50, log2_e50, status, low, high, low_status, high_status, intercept, slope,
    slope_se, n_targets, strata, method}``; ``e50`` / ``low`` / ``high`` are None where censored (their status
    says on which side)."""
    e, k, n = (np.asarray(v, dtype=np.float64) for v in (exposures, successes, trials))
    keep = n > 0
    e, k, n = e[keep], k[keep], n[keep]
    if np.any(e <= 0):
        raise UserError(f"exposures must be > 0 for a fit on log2 exposures, got {list(e)}")
    x = np.log2(e)
    lo, hi = float(x.min()), float(x.max())
    fit = logistic_fit(x, k, n)
    x50, status = threshold_of(fit, lo, hi)
    rng = np.random.default_rng(seed)
    smoothed = (k + 0.5) / (n + 1.0)  # Jeffreys: a stratum at 0/n or n/n still varies (module docstring)
    draws = rng.binomial(n.astype(np.int64), smoothed, size=(n_bootstrap, len(n))).astype(np.float64)  # (B, S)
    boot = np.array([threshold_of({"intercept": a, "slope": b}, lo, hi)[0]
                     for a, b in fit_batch(x, draws, n)])  # +-inf = censored draws; nan ('none') drops out
    boot = boot[~np.isnan(boot)]
    low, high = (np.quantile(boot, [0.025, 0.975], method="inverted_cdf") if boot.size else (math.nan, math.nan))
    return {"e50": _exp2(x50), "log2_e50": x50 if status == "interior" else None, "status": status,
            "low": _exp2(low), "high": _exp2(high), "low_status": _side(low), "high_status": _side(high),
            **fit, "n_targets": int(n.sum()), "method": "logistic regression on log2 exposures, Firth-penalised; "
            f"percentile bootstrap over targets within strata, Jeffreys-smoothed rates ({n_bootstrap} draws)",
            "strata": [{"exposures": float(ei), "extracted": int(ki), "targets": int(ni)}
                       for ei, ki, ni in zip(e, k, n)]}


def _exp2(x: float) -> float | None:
    return float(2.0 ** x) if math.isfinite(x) else None


def _side(x: float) -> str:
    if math.isnan(x):
        return "none"
    return "interior" if math.isfinite(x) else ("above" if x > 0 else "below")
