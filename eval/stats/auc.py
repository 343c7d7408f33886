"""A membership attack's ROC-AUC (Mann-Whitney U, ties as 1/2), its stratified bootstrap and exact p-value, TPR at a
low FPR, and two arms' paired AUC difference.

* :func:`bootstrap_auc` -- ROC-AUCs of stratified resamples (members and nonmembers resampled separately), for an
  attack's 95 % interval.
* :func:`auc_pvalue` -- the probability, under the null that members and nonmembers are exchangeable, of an AUC at
  least as large as the observed one. A perfect separation of m members from n nonmembers has probability exactly
  ``1 / C(m + n, m)`` (one labelling of the pooled scores out of C(m + n, m) puts every member on top), which a
  percentile bootstrap cannot show (every resample also has AUC 1). Otherwise the one-sided Mann-Whitney test: exact
  without ties (scipy's exact null distribution of U), the normal approximation with tie correction otherwise.
* :func:`tpr_at_fpr` -- TPR at a false-positive rate (the largest TPR of the ROC at that FPR, no interpolation), shown
  only when there are at least ``ceil(1 / fpr)`` nonmembers; with fewer, "TPR at 1 % FPR" is the TPR at zero false
  positives, so it is withheld and the number of nonmembers it needs is reported instead.
* :func:`paired_auc_difference` -- two arms' attack scores on the same member and nonmember documents: AUC_a -
  AUC_b, members and nonmembers resampled separately with the same indices for both arms.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import mannwhitneyu, rankdata

from .bootstrap import bootstrap_p
from .intervals import percentiles


EXACT_MAX_ITEMS = 400  # scipy's exact Mann-Whitney null distribution up to this many pooled scores (no ties)


def rank_auc(members: np.ndarray, nonmembers: np.ndarray) -> np.ndarray:
    """Row-wise ROC-AUC of (b, n_m) member vs (b, n_n) nonmember scores via the Mann-Whitney U statistic
    (average ranks, so a tie counts 1/2 -- the same value as scikit-learn's ``roc_auc_score``)."""
    n_m, n_n = members.shape[1], nonmembers.shape[1]
    ranks = rankdata(np.concatenate([members, nonmembers], axis=1), axis=1)  # (b, n_m + n_n)
    return (ranks[:, :n_m].sum(1) - n_m * (n_m + 1) / 2) / (n_m * n_n)


def finite(values: Any) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    return arr[np.isfinite(arr)]


def auc_of(members: np.ndarray, nonmembers: np.ndarray) -> float:
    """ROC-AUC via the Mann-Whitney U statistic (average ranks: a tie counts 1/2, as in scikit-learn)."""
    return float(rank_auc(members[None, :], nonmembers[None, :])[0])


def bootstrap_auc(members: np.ndarray, nonmembers: np.ndarray, n_bootstrap: int, seed: int) -> np.ndarray:
    """AUCs of ``n_bootstrap`` stratified resamples (members and nonmembers resampled separately, so both classes
    are always present), vectorised over resamples with :func:`rank_auc`."""
    rng = np.random.default_rng(seed)
    n_m, n_n = len(members), len(nonmembers)
    aucs = np.empty(n_bootstrap)
    chunk = max(1, 2_000_000 // (n_m + n_n))  # resamples per vectorised chunk (bounded memory)
    for b0 in range(0, n_bootstrap, chunk):
        b = min(chunk, n_bootstrap - b0)
        m = members[rng.integers(0, n_m, size=(b, n_m))]  # (b, n_m)
        n = nonmembers[rng.integers(0, n_n, size=(b, n_n))]  # (b, n_n)
        aucs[b0 : b0 + b] = rank_auc(m, n)
    return aucs


def auc_pvalue(members: Any, nonmembers: Any) -> dict[str, Any]:
    """One-sided p-value of the observed AUC (members score higher) under exchangeability.

    Returns ``auc``, ``p_value``, ``log10_p`` (finite where ``p_value`` underflows), ``method`` (``perfect`` |
    ``exact`` | ``asymptotic``), ``n_members``, ``n_nonmembers``; non-finite scores are left out.
    """
    m, n = finite(members), finite(nonmembers)
    out: dict[str, Any] = {
        "auc": None,
        "p_value": None,
        "log10_p": None,
        "method": None,
        "n_members": int(len(m)),
        "n_nonmembers": int(len(n)),
    }
    if not len(m) or not len(n):
        return out
    out["auc"] = auc_of(m, n)
    if m.min() > n.max():  # the only labelling of the pooled scores with every member above every nonmember
        log10_p = -math.log10(math.comb(len(m) + len(n), len(m)))
        out.update(p_value=10.0**log10_p, log10_p=log10_p, method="perfect")
        return out
    ties = len(np.unique(np.concatenate([m, n]))) < len(m) + len(n)
    method = "exact" if not ties and len(m) + len(n) <= EXACT_MAX_ITEMS else "asymptotic"
    p = float(mannwhitneyu(m, n, alternative="greater", method=method).pvalue)
    out.update(p_value=p, log10_p=math.log10(p) if p > 0 else None, method=method)
    return out


def tpr_at_fpr(members: Any, nonmembers: Any, fpr: float) -> dict[str, Any]:
    """TPR at ``fpr``: the largest TPR over thresholds whose FPR <= ``fpr`` (the ROC read at that FPR, no
    interpolation; Carlini et al. 2022), shown only with enough nonmembers to measure that FPR at all:
    ``needed = ceil(1 / fpr)``.

    Returns ``fpr``, ``roc_tpr`` (that largest TPR whatever the number of nonmembers: below ``needed`` it is the TPR
    at zero false positives; None without members), ``tpr`` (``roc_tpr``, or None when withheld), ``n_nonmembers``,
    ``needed`` and ``note`` (why it is withheld). Non-finite scores are left out.
    """
    m, n = finite(members), finite(nonmembers)
    needed = math.ceil(1 / fpr - 1e-9)
    out: dict[str, Any] = {
        "fpr": fpr,
        "roc_tpr": None,
        "tpr": None,
        "n_nonmembers": int(len(n)),
        "needed": needed,
        "note": None,
    }
    if len(m):
        allowed = math.floor(fpr * len(n) + 1e-9)  # false positives allowed
        # threshold t: members with score > t count; the (allowed+1)-th highest nonmember score is the lowest t
        # that keeps at most `allowed` nonmembers strictly above it
        top = np.sort(n)[::-1]
        threshold = top[allowed] if allowed < len(top) else -np.inf
        out["roc_tpr"] = float(np.mean(m > threshold))
    if len(n) < needed:
        out["note"] = f"needs >= {needed} nonmembers (has {len(n)}): below that it is the TPR at zero false positives"
    elif not len(m):
        out["note"] = "no members"
    else:
        out["tpr"] = out["roc_tpr"]
    return out


def paired_auc_difference(
    a_members: Any, a_nonmembers: Any, b_members: Any, b_nonmembers: Any, n_bootstrap: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """AUC of arm ``a`` minus AUC of arm ``b``, both scoring the same member and the same nonmember documents (in
    the same order), with a 95 % interval and a two-sided bootstrap p-value: each resample draws member and
    nonmember documents separately and uses the same draws for both arms. Returns ``a``, ``b``, ``diff``,
    ``ci_low``, ``ci_high``, ``p_value``, ``n_members``, ``n_nonmembers``."""
    am, an = np.asarray(a_members, np.float64), np.asarray(a_nonmembers, np.float64)
    bm, bn = np.asarray(b_members, np.float64), np.asarray(b_nonmembers, np.float64)
    if am.shape != bm.shape or an.shape != bn.shape:
        raise ValueError("paired AUCs need both arms' scores on the same member and nonmember documents")
    ok_m = np.isfinite(am) & np.isfinite(bm)
    ok_n = np.isfinite(an) & np.isfinite(bn)
    am, bm, an, bn = am[ok_m], bm[ok_m], an[ok_n], bn[ok_n]
    out: dict[str, Any] = {
        "a": None,
        "b": None,
        "diff": None,
        "ci_low": None,
        "ci_high": None,
        "p_value": None,
        "n_members": int(len(am)),
        "n_nonmembers": int(len(an)),
    }
    if not len(am) or not len(an):
        return out
    a_auc, b_auc = auc_of(am, an), auc_of(bm, bn)
    out.update(a=a_auc, b=b_auc, diff=a_auc - b_auc)
    if n_bootstrap > 0:
        rng = np.random.default_rng(seed)
        im = rng.integers(0, len(am), size=(n_bootstrap, len(am)))  # (B, m)
        inn = rng.integers(0, len(an), size=(n_bootstrap, len(an)))  # (B, n)
        samples = rank_auc(am[im], an[inn]) - rank_auc(bm[im], bn[inn])
        out["ci_low"], out["ci_high"] = percentiles(samples)
        out["p_value"] = bootstrap_p(samples)
    return out
