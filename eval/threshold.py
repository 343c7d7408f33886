"""The exposure threshold E50: how many exposures it takes until half of the targets are extracted.

Exact match at one fixed exposure count floors for small models; the count at which a target *becomes* extractable
does not. With targets in repetition strata (exposures e_1 < e_2 < ...), the fraction extracted is modelled as

    P(extracted | e) = sigmoid(b * (log2 e - t)),        E50 = 2 ** t,  b >= 0,

a logistic regression of exact match (one binary outcome per target) on log2 exposures, fitted to the grouped
counts ``successes_j / trials_j`` of each stratum.

**The interval is the profile likelihood of t** (Venzon and Moolgavkar 1988): for every t, the log-likelihood
maximised over the slope b in [0, inf] -- the limit b -> inf included: the step at t, whose likelihood is 1 exactly
when t separates the strata without extractions from those with only extractions -- and the 95 % interval
``{t : 2 (l_max - l(t)) <= 3.84}`` (the chi-square quantile with one degree of freedom). A Wald or bootstrap
interval around a penalised fit is not valid where the data separate (a steep threshold between two strata, the
usual pattern): it centres on the penalty's midpoint and covers the truth rarely. The profile keeps every t the data
cannot exclude. The point estimate and its status:

* ``interior``: the maximum-likelihood t inside the tested range (no separation: the plain fit; with one mixed
  stratum between strata that separate -- quasi-separation, ``separation: quasi`` -- the likelihood's supremum,
  approached as b -> inf at that stratum's exposure, so E50 is that exposure);
* ``separated`` (``separation: complete``): every stratum at 0 / n or n / n and ordered; every t between the last
  stratum without and the first with extractions has likelihood 1, so E50 is *identified* only as that range
  (``identified``: [e_j, e_j+1]) and ``e50`` is null; the interval is that range and what the likelihood ratio
  allows beyond it;
* censored ``above`` (no target extracted, or the fitted rate below one half up to the largest exposure: E50 >
  e_max) or ``below`` (E50 < e_1). Two limits land here too: a mixed top stratum with fewer than half extracted
  above strata with none (the step approaches it from above, so E50 > e_max; a mixed bottom stratum with more than
  half, below strata with all, is ``below``), and a rate that does not rise with exposure (b >= 0 binds: the
  maximum is the constant rate p, approached as b -> 0 with t -> +inf for p < 1/2, -inf for p > 1/2); ``none``
  only where that constant rate is exactly one half.

An interval end beyond the tested exposures is censored the same way (``low_status`` / ``high_status``).
tests/test_threshold.py checks the coverage by simulation (a steep logistic, E50 20 or 50, strata 4 / 16 / 64 / 256
of 16 targets: >= 90 % of nominal 95 % intervals cover the truth) and that separated strata give an interval
containing the identified range.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy.special import expit
from scipy.stats import chi2

from goldfish.errors import UserError

from .stats import logistic_batch

CHI2_95 = float(chi2.ppf(0.95, 1))  # 3.841: the profile deviance of a 95 % interval
GRID_STEP = 1.0 / 64  # spacing in log2 exposures of the profile grid (boundaries then refined by bisection)
PAD = 3.0  # log2 units the grid reaches beyond the tested exposures (an end beyond them is censored)
LOG_B = (-20.0, 25.0)  # natural-log range of the slope searched per t (e^25 ~ 7e10: a step to float precision)
STEEP = 1e3  # a maximising slope above this (logit units per doubling) is reported as unbounded (None)
ITERATIONS = 60  # bisection steps on log b (each halves the bracket: 45 / 2^60 at the end)


def _checked(x: Sequence[float], successes: Sequence[int], trials: Sequence[int]) -> tuple[np.ndarray, ...]:
    xs, k, n = (np.asarray(v, dtype=np.float64) for v in (x, successes, trials))
    if xs.ndim != 1 or not (xs.shape == k.shape == n.shape) or len(np.unique(xs[n > 0])) < 2:
        raise UserError(f"a logistic fit needs >= 2 distinct x with trials, got x={list(xs)} trials={list(n)}")
    if np.any((k < 0) | (k > n)):
        raise UserError(f"successes {list(k)} must lie in [0, trials {list(n)}]")
    return xs, k, n


def _slope_se(x: np.ndarray, n: np.ndarray, intercept: float, slope: float) -> float:
    p = 1.0 / (1.0 + np.exp(-(intercept + slope * x)))
    design = np.stack([np.ones_like(x), x], axis=1)
    cov = np.linalg.pinv(design.T @ ((n * p * (1 - p))[:, None] * design))
    return float(math.sqrt(max(cov[1, 1], 0.0)))


def _log_sigmoid(z: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -z)


def _loglik(x: np.ndarray, k: np.ndarray, n: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(T,) log-likelihood at slopes ``b`` (T,) and thresholds ``t`` (T,) of strata ``x``, ``k``, ``n`` (S,)."""
    z = b[:, None] * (x[None, :] - t[:, None])  # (T, S)
    return (k * _log_sigmoid(z) + (n - k) * _log_sigmoid(-z)).sum(axis=1)


def profile(x: np.ndarray, k: np.ndarray, n: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log-likelihood (T,), maximising slope (T,)) of each threshold ``t`` (T,), maximised over b in [0, inf].

    For fixed t the log-likelihood is concave in b; its derivative at 0 is ``sum (x - t)(k - n/2)`` and at inf
    ``-sum_{x > t} (x - t)(n - k) - sum_{x < t} (t - x) k`` (<= 0, = 0 exactly when t separates the strata): b = 0
    when the first is <= 0, the step (b = inf) when the second is 0, else the root, by bisection on log b."""
    d = x[None, :] - t[:, None]  # (T, S)
    slope0 = (d * (k - n / 2.0)).sum(axis=1)
    slope_inf = -(np.where(d > 0, d * (n - k), 0.0) + np.where(d < 0, -d * k, 0.0)).sum(axis=1)
    lo, hi = np.full(len(t), LOG_B[0]), np.full(len(t), LOG_B[1])
    for _ in range(ITERATIONS):  # the derivative at b = e^mid, decreasing in b
        mid = (lo + hi) / 2.0
        grad = (d * (k - n * expit(np.exp(mid)[:, None] * d))).sum(axis=1)
        lo, hi = np.where(grad > 0, mid, lo), np.where(grad > 0, hi, mid)
    b = np.where(slope0 <= 0, 0.0, np.exp((lo + hi) / 2.0))
    step = (slope0 > 0) & (slope_inf >= 0)  # separated at t: the supremum is the step's likelihood
    b = np.where(step, np.inf, b)
    at = np.where(np.abs(d) == 0, n * math.log(0.5), 0.0).sum(axis=1)  # the step's likelihood: strata at t are 1/2
    finite = np.where(np.isfinite(b), b, 0.0)
    return np.where(step, at, _loglik(x, k, n, finite, t)), b


def _at_its_rate(k: float, n: float) -> float:
    """The binomial log-likelihood of k successes in n at the rate k / n (0 < k < n)."""
    q = k / n
    return float(k * math.log(q) + (n - k) * math.log(1.0 - q))


def _supremum(x: np.ndarray, k: np.ndarray, n: np.ndarray) -> dict:
    """The maximum likelihood: its threshold, status, slope and log-likelihood, and the kind of separation."""
    succ, fail = x[k > 0], x[k < n]
    if not succ.size:
        return {"t": math.inf, "status": "above", "loglik": 0.0, "separation": "complete", "slope": None}
    if not fail.size:
        return {"t": -math.inf, "status": "below", "loglik": 0.0, "separation": "complete", "slope": None}
    low_success, high_failure = float(succ.min()), float(fail.max())
    if high_failure < low_success:  # every t between them has likelihood 1
        return {
            "t": math.nan,
            "status": "separated",
            "loglik": 0.0,
            "separation": "complete",
            "slope": None,
            "identified": (high_failure, low_success),
        }
    if high_failure == low_success:  # one mixed stratum between separated ones: the step there, as b -> inf
        j = int(np.flatnonzero(x == low_success)[0])
        q, loglik = k[j] / n[j], _at_its_rate(k[j], n[j])
        # the step approaches that stratum from above where fewer than half of it are extracted (t -> x_j+), from
        # below where more are: at the largest (smallest) exposure that is beyond the tested range, i.e. censored
        if (q < 0.5 and low_success == x.max()) or (q > 0.5 and low_success == x.min()):
            return {
                "t": math.inf if q < 0.5 else -math.inf,
                "status": "above" if q < 0.5 else "below",
                "separation": "quasi",
                "slope": None,
                "loglik": loglik,
            }
        return {"t": low_success, "status": "interior", "separation": "quasi", "slope": None, "loglik": loglik}
    design = np.stack([np.ones_like(x), x], axis=1)
    a, b = logistic_batch(design, k[None, :], n, firth=False)[0]  # the plain fit exists: no separation
    if b <= 0:  # b >= 0 binds: the maximum is the constant rate p (b -> 0+ with t -> +-inf as p < or > 1/2)
        p, loglik = float(k.sum() / n.sum()), _at_its_rate(k.sum(), n.sum())
        if p == 0.5:
            return {"t": math.nan, "status": "none", "separation": None, "slope": 0.0, "loglik": loglik}
        return {
            "t": math.inf if p < 0.5 else -math.inf,
            "status": "above" if p < 0.5 else "below",
            "separation": None,
            "slope": 0.0,
            "loglik": loglik,
        }
    t = float(-a / b)
    status = "interior" if x.min() <= t <= x.max() else ("above" if t > x.max() else "below")
    return {
        "t": t,
        "status": status,
        "separation": None,
        "slope": float(b),
        "intercept": float(a),
        "loglik": float(_loglik(x, k, n, np.array([b]), np.array([t]))[0]),
    }


def _boundary(x: np.ndarray, k: np.ndarray, n: np.ndarray, inside: float, outside: float, cut: float) -> float:
    """The threshold between ``inside`` (profile above ``cut``) and ``outside`` (below), by bisection."""
    for _ in range(40):
        mid = (inside + outside) / 2.0
        if profile(x, k, n, np.array([mid]))[0][0] >= cut:
            inside = mid
        else:
            outside = mid
    return inside


def profile_interval(x: np.ndarray, k: np.ndarray, n: np.ndarray, l_max: float) -> tuple[float, float]:
    """(low, high) in log2 exposures of ``{t : 2 (l_max - l(t)) <= CHI2_95}`` on the grid from PAD below to PAD
    above the tested range, its ends refined by bisection; an end at the grid's edge is +-inf (not bounded there)."""
    grid = np.arange(x.min() - PAD, x.max() + PAD + GRID_STEP / 2, GRID_STEP)
    grid = np.unique(np.concatenate([grid, x, x - 1e-9, x + 1e-9]))  # the profile jumps at a stratum
    cut = l_max - CHI2_95 / 2.0
    inside = np.flatnonzero(profile(x, k, n, grid)[0] >= cut)
    if not inside.size:  # cannot happen for a supremum the grid approaches; guard against rounding
        return math.nan, math.nan
    first, last = int(inside[0]), int(inside[-1])
    low = -math.inf if first == 0 else _boundary(x, k, n, grid[first], grid[first - 1], cut)
    high = math.inf if last == len(grid) - 1 else _boundary(x, k, n, grid[last], grid[last + 1], cut)
    return low, high


def e50(exposures: Sequence[float], successes: Sequence[int], trials: Sequence[int]) -> dict:
    """E50 of targets in strata (one entry per stratum: exposures read, targets extracted, targets) with its
    profile-likelihood interval -> ``{e50, log2_e50, status, separation, identified, low, high, low_status,
    high_status, intercept, slope, slope_se, n_targets, strata, method}``. ``e50`` / ``low`` / ``high`` are None
    where censored or only identified (their status says which); ``identified`` is the exposure range of a complete
    separation; ``slope`` is None where the likelihood's maximum is a step (separation)."""
    e, k, n = (np.asarray(v, dtype=np.float64) for v in (exposures, successes, trials))
    keep = n > 0
    e, k, n = e[keep], k[keep], n[keep]
    if np.any(e <= 0):
        raise UserError(f"exposures must be > 0 for a fit on log2 exposures, got {list(e)}")
    x, k, n = _checked(np.log2(e), k, n)
    top = _supremum(x, k, n)
    low, high = profile_interval(x, k, n, top["loglik"])
    lo_x, hi_x = float(x.min()), float(x.max())
    slope = top.get("slope")
    return {
        "e50": _exp2(top["t"]) if top["status"] == "interior" else None,
        "log2_e50": top["t"] if top["status"] == "interior" else None,
        "status": top["status"],
        "separation": top["separation"],
        "identified": [_exp2(v) for v in top["identified"]] if "identified" in top else None,
        "low": _exp2(low) if lo_x <= low <= hi_x else None,
        "high": _exp2(high) if lo_x <= high <= hi_x else None,
        "low_status": _side(low, lo_x, hi_x),
        "high_status": _side(high, lo_x, hi_x),
        "intercept": top.get("intercept"),
        "slope": slope if slope is None or slope < STEEP else None,
        "slope_se": _slope_se(x, n, top["intercept"], slope) if top.get("intercept") is not None else None,
        "n_targets": int(n.sum()),
        "method": "logistic regression on log2 exposures; 95 % profile-likelihood "
        "interval of E50 (the slope profiled out over [0, inf], separation included)",
        "strata": [{"exposures": float(ei), "extracted": int(ki), "targets": int(ni)} for ei, ki, ni in zip(e, k, n)],
    }


def _exp2(x: float) -> float | None:
    return float(2.0**x) if math.isfinite(x) else None


def _side(x: float, lo: float, hi: float) -> str:
    """Where an interval end lies: ``interior`` (inside the tested range), ``below`` / ``above`` it, ``none``."""
    if math.isnan(x):
        return "none"
    return "below" if x < lo else ("above" if x > hi else "interior")
