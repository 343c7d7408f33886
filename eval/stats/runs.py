"""Run-level statistics: inference with the training run (seed: its own split, order and model) as the unit.

* :func:`pooled_paired_auc_difference` -- two arms' AUCs on the same documents in several independent groups (seeds,
  each its own split): the mean per-group difference, resampled within groups, with the 90 % interval of a TOST
  equivalence test against a margin stated in advance.
* :func:`replicate_tost` -- the training run as the unit: one difference per independent run (seed), its mean with
  a t interval over runs (the between-run spread ``sd`` beside it) and the two one-sided t tests of equivalence
  against a margin stated in advance; the within-run intervals above treat each trained model as fixed.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy.stats import t as student_t

from .auc import paired_auc_difference, rank_auc
from .bootstrap import bootstrap_p
from .intervals import percentiles


def pooled_paired_auc_difference(groups: Sequence[tuple[Any, Any, Any, Any]], n_bootstrap: int = 1000,
                                 seed: int = 0, margin: float | None = None) -> dict[str, Any]:
    """AUC_a - AUC_b over independent groups (seeds: each its own members, nonmembers and models), each group
    ``(a_members, a_nonmembers, b_members, b_nonmembers)`` scored on the same documents by both arms.

    The estimate is the mean of the groups' differences (each group one replicate, equal weight); the bootstrap
    resamples members and nonmembers within each group with the same draws for both arms (as
    :func:`paired_auc_difference`). Returns ``diff``, the 95 % ``ci_low`` / ``ci_high`` and two-sided ``p_value``,
    the 90 % ``ci90_low`` / ``ci90_high``, ``groups`` (each group's :func:`paired_auc_difference`) and, with a
    ``margin`` stated before the run, the two one-sided tests of equivalence (TOST, Schuirmann 1987): ``equivalent``
    when the 90 % interval lies inside (-margin, +margin), ``tost_p`` = the larger bootstrap tail beyond a margin."""
    per_group, samples = [], []
    for g, (am, an, bm, bn) in enumerate(groups):
        per_group.append(paired_auc_difference(am, an, bm, bn, 0))
        am_, an_ = np.asarray(am, np.float64), np.asarray(an, np.float64)
        bm_, bn_ = np.asarray(bm, np.float64), np.asarray(bn, np.float64)
        ok_m, ok_n = np.isfinite(am_) & np.isfinite(bm_), np.isfinite(an_) & np.isfinite(bn_)
        am_, bm_, an_, bn_ = am_[ok_m], bm_[ok_m], an_[ok_n], bn_[ok_n]
        if n_bootstrap > 0 and len(am_) and len(an_):
            rng = np.random.default_rng([seed, g])
            im = rng.integers(0, len(am_), size=(n_bootstrap, len(am_)))  # (B, m)
            inn = rng.integers(0, len(an_), size=(n_bootstrap, len(an_)))  # (B, n)
            samples.append(rank_auc(am_[im], an_[inn]) - rank_auc(bm_[im], bn_[inn]))
    diffs = [g["diff"] for g in per_group if g["diff"] is not None]
    out: dict[str, Any] = {"diff": float(np.mean(diffs)) if diffs else None, "ci_low": None, "ci_high": None,
                           "p_value": None, "ci90_low": None, "ci90_high": None, "margin": margin,
                           "equivalent": None, "tost_p": None, "n_groups": len(diffs), "groups": per_group}
    if samples and len(samples) == len(diffs):
        pooled = np.mean(np.stack(samples), axis=0)  # (B,)
        out["ci_low"], out["ci_high"] = percentiles(pooled)
        out["ci90_low"], out["ci90_high"] = (float(v) for v in np.percentile(pooled, (5.0, 95.0)))
        out["p_value"] = bootstrap_p(pooled)
        if margin is not None:
            out["equivalent"] = bool(-margin < out["ci90_low"] and out["ci90_high"] < margin)
            out["tost_p"] = float(max(np.mean(pooled <= -margin), np.mean(pooled >= margin)))
    return out


def replicate_tost(values: Sequence[float | None], margin: float | None = None) -> dict[str, Any]:
    """Inference with the training run as the unit: ``values`` are one difference per independent replicate (seed:
    its own split, order and model), e.g. each seed's paired AUC difference. Returns ``n``, ``mean``, ``sd`` (the
    between-run spread), ``se``, the 95 % t interval ``ci_low`` / ``ci_high`` and two-sided ``p_value`` (mean = 0),
    the 90 % t interval ``ci90_low`` / ``ci90_high`` and, with a ``margin`` stated before the run, the two one-sided
    t tests of equivalence (Schuirmann 1987): ``tost_p`` (the larger one-sided p) and ``equivalent`` (``tost_p`` <
    0.05, i.e. the 90 % interval inside (-margin, +margin)). Fewer than two finite values: no interval (``None``):
    one run cannot say how much runs differ. The within-run bootstrap of :func:`pooled_paired_auc_difference` treats
    each model as fixed; this one does not."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    out: dict[str, Any] = {"n": int(len(x)), "mean": float(x.mean()) if len(x) else None, "sd": None, "se": None,
                           "ci_low": None, "ci_high": None, "p_value": None, "ci90_low": None, "ci90_high": None,
                           "margin": margin, "tost_p": None, "equivalent": None}
    if len(x) < 2:
        return out
    df = len(x) - 1
    sd = float(x.std(ddof=1))
    se = sd / math.sqrt(len(x))
    mean = float(x.mean())
    out.update(sd=sd, se=se)
    for level, low, high in ((0.975, "ci_low", "ci_high"), (0.95, "ci90_low", "ci90_high")):
        half = float(student_t.ppf(level, df)) * se
        out[low], out[high] = mean - half, mean + half
    if se == 0:  # every run agrees exactly: the mean is known without error
        out["p_value"] = 1.0 if mean == 0 else 0.0
        if margin:
            out["tost_p"] = 0.0 if -margin < mean < margin else 1.0
            out["equivalent"] = out["tost_p"] < 0.05
        return out
    out["p_value"] = float(2 * student_t.sf(abs(mean) / se, df))
    if margin:
        lower = float(student_t.sf((mean + margin) / se, df))  # H0: mean <= -margin
        upper = float(student_t.cdf((mean - margin) / se, df))  # H0: mean >= +margin
        out["tost_p"] = max(lower, upper)
        out["equivalent"] = out["tost_p"] < 0.05
    return out
