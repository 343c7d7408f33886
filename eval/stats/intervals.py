"""Intervals of a rate or a mean, and what an interval implies: its standard error, the smallest effect a test
detects.

* :func:`wilson_interval` -- a binomial rate's 95 % score interval (well-behaved at 0 and 1); :func:`mean_interval`
  -- the normal-approximation interval of a mean, clipped to the measure's range.
* :func:`minimum_detectable_effect` -- the smallest true difference a two-sided test at 5 % detects with 80 %
  power, from the standard error an interval implies: (z_0.975 + z_0.8) x SE (Student's quantiles for a t test over
  runs).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy.stats import chi2, norm
from scipy.stats import t as student_t


CI = (2.5, 97.5)
Z95 = 1.96


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """Wilson score interval of a binomial rate (well-behaved at 0 and 1, unlike the normal approximation; an
    exact-match rate of 0/50 still gets an upper bound of ~7 %)."""
    if n <= 0:
        return None, None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(
    values: Sequence[float], bounds: tuple[float, float] = (-math.inf, math.inf), z: float = Z95
) -> tuple[float | None, float | None]:
    """Normal-approximation 95 % interval of a mean, mean ± z·s/sqrt(n) (s: sample std), clipped to ``bounds``;
    None below 2 values. Windows of one document are not independent: read it as a lower bound on the uncertainty."""
    vals = np.asarray([float(v) for v in values if v is not None], dtype=np.float64)
    if len(vals) < 2:
        return None, None
    half = z * float(vals.std(ddof=1)) / math.sqrt(len(vals))
    return max(bounds[0], float(vals.mean()) - half), min(bounds[1], float(vals.mean()) + half)


def percentiles(samples: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(samples, CI)
    return float(low), float(high)


def se_from_interval(low: float | None, high: float | None, z: float = Z95) -> float | None:
    """The standard error a symmetric 95 % interval implies: (high - low) / (2 z); None without both ends."""
    if low is None or high is None:
        return None
    return (float(high) - float(low)) / (2.0 * z)


def minimum_detectable_effect(
    se: float | None, alpha: float = 0.05, power: float = 0.8, df: int | None = None
) -> float | None:
    """The smallest true difference a two-sided test at level ``alpha`` detects with probability ``power``, for an
    estimate with standard error ``se``: (z_{1-alpha/2} + z_power) x se (2.80 se at 5 % and 80 %); with ``df`` (a
    t test over runs, the standard error itself estimated) Student's quantiles instead, (t_{1-alpha/2, df} +
    t_{power, df}) x se (3.72 se at df = 4); None without ``se`` (or with ``df`` < 1)."""
    if se is None or (df is not None and df < 1):
        return None
    if df is not None:
        return float((student_t.ppf(1.0 - alpha / 2.0, df) + student_t.ppf(power, df)) * se)
    return float((norm.ppf(1.0 - alpha / 2.0) + norm.ppf(power)) * se)


def mde_range(
    se: float | None, df: int | None, level: float = 0.95, alpha: float = 0.05, power: float = 0.8
) -> tuple[float, float] | None:
    """The uncertainty of a minimum detectable effect over runs: the MDE is a plug-in of a standard error estimated
    from ``df`` degrees of freedom, so its ``level`` range follows the SD's chi-square interval, MDE x sqrt(df /
    chi2_{(1 +- level) / 2, df}) (at df = 4 a range of 0.60x to 2.87x the plug-in). None without ``se`` or ``df``."""
    mde = minimum_detectable_effect(se, alpha, power, df)
    if mde is None or not df:
        return None
    tail = (1.0 - level) / 2.0
    return (float(mde * math.sqrt(df / chi2.ppf(1.0 - tail, df))), float(mde * math.sqrt(df / chi2.ppf(tail, df))))
