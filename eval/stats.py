"""Exact and paired statistics for memorisation readings: what a referee asks for beside a point estimate.

Every statistic of the toolkit lives here (the experiment's and eval's modules call these; none is defined twice).

* :func:`wilson_interval` -- a binomial rate's 95 % score interval (well-behaved at 0 and 1); :func:`mean_interval`
  -- the normal-approximation interval of a mean, clipped to the measure's range.
* :func:`loglinear_fit` -- ``y = a + b log10(x)`` by least squares with the slope's standard error and r² (Carlini et
  al. 2022's form for extraction vs model size or repetitions); :func:`predict` evaluates it.
* :func:`bootstrap_auc` -- ROC-AUCs of stratified resamples (members and nonmembers resampled separately), for an
  attack's 95 % interval.
* :func:`auc_pvalue` -- the probability, under the null that members and nonmembers are exchangeable, of an AUC at
  least as large as the observed one. A perfect separation of m members from n nonmembers has probability exactly
  ``1 / C(m + n, m)`` (one labelling of the pooled scores out of C(m + n, m) puts every member on top), which a
  percentile bootstrap cannot show (every resample also has AUC 1). Otherwise the one-sided Mann-Whitney test: exact
  without ties (scipy's exact null distribution of U), the normal approximation with tie correction otherwise.
* :func:`cluster_bootstrap_mean` -- a mean over pooled items (e.g. the windows of several prefix lengths of one
  document) with a 95 % interval that resamples *clusters* (documents), not items: windows of one document are not
  independent.
* :func:`tpr_at_fpr` -- TPR at a false-positive rate (the largest TPR of the ROC at that FPR, no interpolation), shown
  only when there are at least ``ceil(1 / fpr)`` nonmembers; with fewer, "TPR at 1 % FPR" is the TPR at zero false
  positives, so it is withheld and the number of nonmembers it needs is reported instead.
* :func:`mcnemar_exact` -- two arms' exact-match verdicts on the same windows: the exact two-sided binomial test on
  the discordant pairs (McNemar 1947; statsmodels' ``mcnemar(exact=True)``).
* :func:`paired_bootstrap` -- two arms' per-item values (e.g. ROUGE-L) on the same items: the mean difference with
  a bootstrap interval that resamples items (or their clusters) with the same indices for both arms.
* :func:`paired_auc_difference` -- two arms' attack scores on the same member and nonmember documents: AUC_a -
  AUC_b, members and nonmembers resampled separately with the same indices for both arms.
* :func:`paired_difference` -- two models' per-token measure (e.g. top-1 correct, -log p) on the same positions of
  the same documents: token-weighted means and their difference with an interval resampling documents.
* :func:`difference_in_differences` -- the leakage audit: (arm - control) on the dropped member positions minus
  (arm - control) on held-out text, token-weighted, with an interval that resamples member and held-out documents.
  Training on anything also moves a model on text it never saw; only the excess on the dropped positions is
  leakage.

Every interval is a 95 % percentile bootstrap from ``numpy.random.default_rng(seed)`` (same seed, same interval);
every bootstrap p-value is two-sided: ``min(1, 2 * min(P*(d <= 0), P*(d >= 0)))`` over the resamples (Efron and
Tibshirani 1993, sec. 16.4), so it cannot be smaller than ``2 / n_bootstrap`` unless every resample agrees.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy.stats import binomtest, mannwhitneyu, rankdata

from goldfish.errors import UserError

EXACT_MAX_ITEMS = 400  # scipy's exact Mann-Whitney null distribution up to this many pooled scores (no ties)
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


def mean_interval(values: Sequence[float], bounds: tuple[float, float] = (-math.inf, math.inf),
                  z: float = Z95) -> tuple[float | None, float | None]:
    """Normal-approximation 95 % interval of a mean, mean ± z·s/sqrt(n) (s: sample std), clipped to ``bounds``;
    None below 2 values. Windows of one document are not independent: read it as a lower bound on the uncertainty."""
    vals = np.asarray([float(v) for v in values if v is not None], dtype=np.float64)
    if len(vals) < 2:
        return None, None
    half = z * float(vals.std(ddof=1)) / math.sqrt(len(vals))
    return max(bounds[0], float(vals.mean()) - half), min(bounds[1], float(vals.mean()) + half)


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
    return {"slope": slope, "intercept": intercept, "slope_se": se,
            "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else None, "n": n}


def predict(fit: dict, x: float | Sequence[float]) -> np.ndarray:
    """Evaluate a :func:`loglinear_fit` at ``x`` (> 0)."""
    return fit["intercept"] + fit["slope"] * np.log10(np.asarray(x, dtype=np.float64))


def rank_auc(members: np.ndarray, nonmembers: np.ndarray) -> np.ndarray:
    """Row-wise ROC-AUC of (b, n_m) member vs (b, n_n) nonmember scores via the Mann-Whitney U statistic
    (average ranks, so a tie counts 1/2 -- the same value as scikit-learn's ``roc_auc_score``)."""
    n_m, n_n = members.shape[1], nonmembers.shape[1]
    ranks = rankdata(np.concatenate([members, nonmembers], axis=1), axis=1)  # (b, n_m + n_n)
    return (ranks[:, :n_m].sum(1) - n_m * (n_m + 1) / 2) / (n_m * n_n)


def _finite(values: Any) -> np.ndarray:
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
    m, n = _finite(members), _finite(nonmembers)
    out: dict[str, Any] = {"auc": None, "p_value": None, "log10_p": None, "method": None,
                           "n_members": int(len(m)), "n_nonmembers": int(len(n))}
    if not len(m) or not len(n):
        return out
    out["auc"] = auc_of(m, n)
    if m.min() > n.max():  # the only labelling of the pooled scores with every member above every nonmember
        log10_p = -math.log10(math.comb(len(m) + len(n), len(m)))
        out.update(p_value=10.0 ** log10_p, log10_p=log10_p, method="perfect")
        return out
    ties = len(np.unique(np.concatenate([m, n]))) < len(m) + len(n)
    method = "exact" if not ties and len(m) + len(n) <= EXACT_MAX_ITEMS else "asymptotic"
    p = float(mannwhitneyu(m, n, alternative="greater", method=method).pvalue)
    out.update(p_value=p, log10_p=math.log10(p) if p > 0 else None, method=method)
    return out


def _percentiles(samples: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(samples, CI)
    return float(low), float(high)


def bootstrap_p(samples: np.ndarray) -> float:
    """Two-sided bootstrap p-value of ``samples`` (resampled differences) against 0."""
    below, above = float(np.mean(samples <= 0)), float(np.mean(samples >= 0))
    return min(1.0, 2.0 * min(below, above))


def _cluster_index(clusters: Sequence[Any] | None, n: int) -> np.ndarray:
    """(n,) int cluster of each item: ``clusters`` mapped to 0..C-1 in order of appearance, or one per item."""
    if clusters is None:
        return np.arange(n)
    if len(clusters) != n:
        raise ValueError(f"{len(clusters)} cluster labels for {n} items")
    codes: dict[Any, int] = {}
    return np.array([codes.setdefault(c, len(codes)) for c in clusters], dtype=np.int64)


def _cluster_sums(values: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(C,) sums and (C,) counts of ``values`` per cluster."""
    size = int(index.max()) + 1 if len(index) else 0
    return np.bincount(index, values, size), np.bincount(index, minlength=size).astype(np.float64)


def _resampled_ratio(sums: np.ndarray, counts: np.ndarray, n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """(n_bootstrap,) ratios sum/count over resamples of the clusters (rows of (B, C) indices)."""
    idx = rng.integers(0, len(sums), size=(n_bootstrap, len(sums)))  # (B, C)
    return sums[idx].sum(1) / counts[idx].sum(1)


def cluster_bootstrap_mean(values: Any, clusters: Sequence[Any] | None = None, n_bootstrap: int = 1000,
                           seed: int = 0) -> dict[str, Any]:
    """Item-weighted mean of ``values`` (booleans: a rate) with a 95 % interval resampling whole clusters.

    ``clusters[i]``: the document of item i (None: every item its own cluster, the ordinary bootstrap). Returns
    ``mean``, ``ci_low``, ``ci_high`` (None with ``n_bootstrap=0`` or no items), ``n_items``, ``n_clusters``.
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    index = _cluster_index(clusters, len(v))
    out: dict[str, Any] = {"mean": None, "ci_low": None, "ci_high": None, "n_items": int(len(v)),
                           "n_clusters": int(len(np.unique(index)))}
    if not len(v):
        return out
    out["mean"] = float(v.mean())
    if n_bootstrap > 0:
        sums, counts = _cluster_sums(v, index)
        keep = counts > 0
        samples = _resampled_ratio(sums[keep], counts[keep], n_bootstrap, np.random.default_rng(seed))
        out["ci_low"], out["ci_high"] = _percentiles(samples)
    return out


def tpr_at_fpr(members: Any, nonmembers: Any, fpr: float) -> dict[str, Any]:
    """TPR at ``fpr``: the largest TPR over thresholds whose FPR <= ``fpr`` (the ROC read at that FPR, no
    interpolation; Carlini et al. 2022), shown only with enough nonmembers to measure that FPR at all:
    ``needed = ceil(1 / fpr)``.

    Returns ``fpr``, ``roc_tpr`` (that largest TPR whatever the number of nonmembers: below ``needed`` it is the TPR
    at zero false positives; None without members), ``tpr`` (``roc_tpr``, or None when withheld), ``n_nonmembers``,
    ``needed`` and ``note`` (why it is withheld). Non-finite scores are left out.
    """
    m, n = _finite(members), _finite(nonmembers)
    needed = math.ceil(1 / fpr - 1e-9)
    out: dict[str, Any] = {"fpr": fpr, "roc_tpr": None, "tpr": None, "n_nonmembers": int(len(n)), "needed": needed,
                           "note": None}
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


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> dict[str, Any]:
    """Exact McNemar test of two arms' paired binary outcomes (e.g. exact match on the same windows).

    ``a_only``: items where only ``a`` succeeds, ``b_only``: only ``b``; the two-sided p-value is the binomial
    test of ``a_only`` successes in ``a_only + b_only`` trials at 1/2 (1.0 without discordant pairs). Returns
    ``n``, ``a_rate``, ``b_rate``, ``diff`` (a - b), ``a_only``, ``b_only``, ``p_value``.
    """
    x, y = np.asarray(a, dtype=bool).reshape(-1), np.asarray(b, dtype=bool).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"paired outcomes of different lengths: {len(x)} and {len(y)}")
    a_only, b_only = int((x & ~y).sum()), int((~x & y).sum())
    discordant = a_only + b_only
    p = float(binomtest(a_only, discordant, 0.5).pvalue) if discordant else 1.0
    n = len(x)
    return {"n": n, "a_rate": float(x.mean()) if n else None, "b_rate": float(y.mean()) if n else None,
            "diff": float(x.mean() - y.mean()) if n else None, "a_only": a_only, "b_only": b_only, "p_value": p}


def paired_bootstrap(a: Any, b: Any, clusters: Sequence[Any] | None = None, n_bootstrap: int = 1000,
                     seed: int = 0) -> dict[str, Any]:
    """Mean of ``a - b`` over paired items (two arms on the same windows) with a 95 % interval and a two-sided
    bootstrap p-value; ``clusters`` (the document of each item) resamples documents instead of items.

    Returns ``a``, ``b``, ``diff``, ``ci_low``, ``ci_high``, ``p_value`` (None with ``n_bootstrap=0``), ``n_items``,
    ``n_clusters``.
    """
    x, y = np.asarray(a, dtype=np.float64).reshape(-1), np.asarray(b, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"paired values of different lengths: {len(x)} and {len(y)}")
    d = cluster_bootstrap_mean(x - y, clusters, n_bootstrap, seed)
    out = {"a": float(x.mean()) if len(x) else None, "b": float(y.mean()) if len(y) else None, "diff": d["mean"],
           "ci_low": d["ci_low"], "ci_high": d["ci_high"], "p_value": None, "n_items": d["n_items"],
           "n_clusters": d["n_clusters"]}
    if n_bootstrap > 0 and len(x):
        sums, counts = _cluster_sums(x - y, _cluster_index(clusters, len(x)))
        keep = counts > 0
        out["p_value"] = bootstrap_p(_resampled_ratio(sums[keep], counts[keep], n_bootstrap,
                                                      np.random.default_rng(seed)))
    return out


def paired_auc_difference(a_members: Any, a_nonmembers: Any, b_members: Any, b_nonmembers: Any,
                          n_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
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
    out: dict[str, Any] = {"a": None, "b": None, "diff": None, "ci_low": None, "ci_high": None, "p_value": None,
                           "n_members": int(len(am)), "n_nonmembers": int(len(an))}
    if not len(am) or not len(an):
        return out
    a_auc, b_auc = auc_of(am, an), auc_of(bm, bn)
    out.update(a=a_auc, b=b_auc, diff=a_auc - b_auc)
    if n_bootstrap > 0:
        rng = np.random.default_rng(seed)
        im = rng.integers(0, len(am), size=(n_bootstrap, len(am)))  # (B, m)
        inn = rng.integers(0, len(an), size=(n_bootstrap, len(an)))  # (B, n)
        samples = rank_auc(am[im], an[inn]) - rank_auc(bm[im], bn[inn])
        out["ci_low"], out["ci_high"] = _percentiles(samples)
        out["p_value"] = bootstrap_p(samples)
    return out


def paired_difference(arm: Sequence[Any], control: Sequence[Any], positions: Sequence[Any], n_bootstrap: int = 1000,
                      seed: int = 0) -> dict[str, float | int | None]:
    """Token-weighted mean of a per-token measure of two models over the same ``positions`` of the same documents,
    and arm - control with a 95 % bootstrap CI that resamples documents (a document's tokens stay together).

    ``arm[i]`` / ``control[i]`` / ``positions[i]``: (L_i - 1,) per target t = 1..L_i-1 (e.g. top-1 correct, or
    -log p); documents without a chosen position are left out. Returns ``arm``, ``control``, ``diff``,
    ``diff_ci_low``, ``diff_ci_high`` (None without positions or with ``n_bootstrap=0``), ``n_documents`` and
    ``n_positions``.
    """
    a, n = document_sums(arm, positions)  # (D,) per-document sums and position counts
    c, _ = document_sums(control, positions)
    some = n > 0
    a, c, n = a[some], c[some], n[some]
    out: dict[str, float | int | None] = {"arm": None, "control": None, "diff": None, "diff_ci_low": None,
                                          "diff_ci_high": None, "n_documents": int(len(n)), "n_positions": int(n.sum())}
    if not len(n):
        return out
    out.update(arm=float(a.sum() / n.sum()), control=float(c.sum() / n.sum()), diff=float((a - c).sum() / n.sum()))
    if n_bootstrap > 0:
        samples = _resampled_ratio(a - c, n, n_bootstrap, np.random.default_rng(seed))
        out["diff_ci_low"], out["diff_ci_high"] = _percentiles(samples)
    return out


def document_sums(values: Sequence[Any], positions: Sequence[Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per document, the sum of a per-token measure over the chosen positions and their count: ((D,), (D,)).

    ``values[i]`` / ``positions[i]``: (L_i,) per token of document i (``positions`` bool; None = every token).
    """
    sums, counts = [], []
    for i, v in enumerate(values):
        v = np.asarray(v, dtype=np.float64).reshape(-1)
        keep = np.ones(len(v), bool) if positions is None else np.asarray(positions[i], dtype=bool).reshape(-1)
        sums.append(float(v[keep].sum()))
        counts.append(float(keep.sum()))
    return np.array(sums, dtype=np.float64), np.array(counts, dtype=np.float64)


def difference_in_differences(arm_members: Sequence[Any], control_members: Sequence[Any],
                              member_positions: Sequence[Any], arm_heldout: Sequence[Any],
                              control_heldout: Sequence[Any], heldout_positions: Sequence[Any] | None = None,
                              n_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """(arm - control) on the chosen member positions minus (arm - control) on held-out text.

    Per-token measures (e.g. top-1 correct, or -log p) of an arm and of the control on the same documents:
    ``arm_members[i]`` / ``control_members[i]`` / ``member_positions[i]`` (L_i,) for member document i (positions:
    e.g. where the Goldfish mask drops), ``arm_heldout[j]`` / ``control_heldout[j]`` (L_j,) for held-out document
    j (``heldout_positions``: None = every token). Each difference is token-weighted over its documents; the
    95 % interval and the two-sided bootstrap p-value resample member documents and held-out documents
    separately. Returns ``member_diff``, ``heldout_diff``, ``did`` (their difference), ``ci_low``, ``ci_high``,
    ``p_value``, ``n_member_documents``, ``n_member_positions``, ``n_heldout_documents``, ``n_heldout_positions``.
    """
    a_m, n_m = document_sums(arm_members, member_positions)
    c_m, _ = document_sums(control_members, member_positions)
    a_h, n_h = document_sums(arm_heldout, heldout_positions)
    c_h, _ = document_sums(control_heldout, heldout_positions)
    dm, dh = (a_m - c_m)[n_m > 0], (a_h - c_h)[n_h > 0]
    n_m, n_h = n_m[n_m > 0], n_h[n_h > 0]
    out: dict[str, Any] = {"member_diff": None, "heldout_diff": None, "did": None, "ci_low": None, "ci_high": None,
                           "p_value": None, "n_member_documents": int(len(n_m)),
                           "n_member_positions": int(n_m.sum()), "n_heldout_documents": int(len(n_h)),
                           "n_heldout_positions": int(n_h.sum())}
    if not len(n_m) or not len(n_h):
        return out
    member_diff, heldout_diff = float(dm.sum() / n_m.sum()), float(dh.sum() / n_h.sum())
    out.update(member_diff=member_diff, heldout_diff=heldout_diff, did=member_diff - heldout_diff)
    if n_bootstrap > 0:
        rng = np.random.default_rng(seed)
        samples = _resampled_ratio(dm, n_m, n_bootstrap, rng) - _resampled_ratio(dh, n_h, n_bootstrap, rng)
        out["ci_low"], out["ci_high"] = _percentiles(samples)
        out["p_value"] = bootstrap_p(samples)
    return out
