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
* :func:`document_mcnemar` -- the same comparison where a document contributes several windows (placements, prefix
  lengths): windows of one document are not independent, so the test counts *documents* -- the exact two-sided sign
  test of each document's difference in verbatim windows (McNemar's exact test when each document has one window).
* :func:`poisson_binomial` -- the exact distribution of a count of independent events with unequal probabilities
  (a baseline's per-window exact-match chances), and the two-sided p-value of an observed count under it.
* :func:`logistic_batch` / :func:`clustered_logistic` -- logistic regression by Newton's method (Firth's
  bias-reduced version, finite under separation), vectorised over bootstrap draws, and its cluster bootstrap:
  clusters (targets) resampled within strata (seed x repetition stratum, a designed experiment), each draw a
  frequency weight per row.
* :func:`minimum_detectable_effect` -- the smallest true difference a two-sided test at 5 % detects with 80 %
  power, from the standard error an interval implies: (z_0.975 + z_0.8) x SE.
* :func:`pooled_paired_auc_difference` -- two arms' AUCs on the same documents in several independent groups (seeds,
  each its own split): the mean per-group difference, resampled within groups, with the 90 % interval of a TOST
  equivalence test against a margin stated in advance.
* :func:`replicate_tost` -- the training run as the unit: one difference per independent run (seed), its mean with
  a t interval over runs (the between-run spread ``sd`` beside it) and the two one-sided t tests of equivalence
  against a margin stated in advance; the within-run intervals above treat each trained model as fixed.
* :func:`set_prediction` -- precision and recall of a predicted set (e.g. the targets a smaller model memorised) for
  the actual one (the larger model's), with Wilson intervals (Biderman et al. 2023); :func:`threshold_rule` -- the
  trivial predictor beside it: "memorised iff read >= t times", t fitted on the predicting model's set.
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

Every interval except :func:`replicate_tost`'s (Student's t over runs) is a 95 % percentile bootstrap from ``numpy.random.default_rng(seed)`` (same seed, same interval);
every bootstrap p-value is two-sided: ``min(1, 2 * min(P*(d <= 0), P*(d >= 0)))`` over the resamples (Efron and
Tibshirani 1993, sec. 16.4), so it cannot be smaller than ``2 / n_bootstrap`` unless every resample agrees.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy.stats import binomtest, mannwhitneyu, norm, rankdata, t as student_t

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


def document_mcnemar(a: Sequence[bool], b: Sequence[bool], clusters: Sequence[Any] | None = None) -> dict[str, Any]:
    """Two arms' paired binary outcomes (exact match on the same windows) tested at the level of documents.

    Windows of one document (several placements or prefix lengths) are not independent, so counting discordant
    *windows* overstates the evidence (4 discordant documents with 2 windows each are not 8 independent pairs). Per
    document c, ``d_c`` = a's verbatim windows minus b's; under the null that the arms are exchangeable within a
    document, ``d_c`` is symmetric about 0, and the exact two-sided sign test of the documents with ``d_c != 0``
    (binomial at 1/2) is the test. With one window per document it is McNemar's exact test (:func:`mcnemar_exact`).
    ``clusters[i]``: the document of window i (None: one window per document).

    Returns :func:`mcnemar_exact`'s fields (``a_only`` / ``b_only`` count *windows*), ``n_documents``,
    ``a_only_documents`` / ``b_only_documents`` (documents whose difference is > 0 / < 0), ``p_value`` (of the
    documents) and ``test`` (``McNemar exact`` | ``document sign test``)."""
    x, y = np.asarray(a, dtype=bool).reshape(-1), np.asarray(b, dtype=bool).reshape(-1)
    windows = mcnemar_exact(x, y)
    index = _cluster_index(clusters, len(x))
    n_docs = int(index.max()) + 1 if len(index) else 0
    d = np.bincount(index, x.astype(np.float64) - y.astype(np.float64), minlength=n_docs)  # (D,) per document
    a_docs, b_docs = int((d > 0).sum()), int((d < 0).sum())
    p = float(binomtest(a_docs, a_docs + b_docs, 0.5).pvalue) if a_docs + b_docs else 1.0
    return {**windows, "n_documents": n_docs, "a_only_documents": a_docs, "b_only_documents": b_docs,
            "p_value": p, "test": "McNemar exact" if n_docs == len(x) else "document sign test"}


def poisson_binomial(probs: Sequence[float], observed: int | None = None) -> dict[str, Any]:
    """The count of independent events with probabilities ``probs`` (a Poisson-binomial variable, e.g. how many
    windows a baseline expects verbatim, each with its own chance): ``n``, ``expected``, ``sd`` and, given an
    ``observed`` count, ``p_at_most`` = P(X <= observed), ``p_at_least`` = P(X >= observed) and the two-sided
    ``p_value`` = min(1, 2 min of the two), from the exact distribution (a convolution of the events)."""
    p = np.clip(np.asarray(probs, dtype=np.float64).reshape(-1), 0.0, 1.0)
    pmf = np.ones(1)
    for q in p:  # (n + 1,) after every event: P(X = j)
        pmf = np.convolve(pmf, [1.0 - q, q])
    out: dict[str, Any] = {"n": int(len(p)), "expected": float(p.sum()),
                           "sd": float(math.sqrt(float((p * (1 - p)).sum()))), "observed": observed,
                           "p_at_most": None, "p_at_least": None, "p_value": None}
    if observed is not None:
        at_most, at_least = float(pmf[: observed + 1].sum()), float(pmf[observed:].sum())
        out.update(p_at_most=min(1.0, at_most), p_at_least=min(1.0, at_least),
                   p_value=min(1.0, 2.0 * min(at_most, at_least)))
    return out


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


def clustered_logistic(design: Any, outcomes: Any, clusters: Sequence[Any], strata: Sequence[Any] | None = None,
                       names: Sequence[str] | None = None, derived: dict[str, Any] | None = None,
                       n_bootstrap: int = 1000, seed: int = 0, firth: bool = True) -> dict[str, Any]:
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
    index = _cluster_index(clusters, len(y))  # (n,) cluster of each row
    n_clusters = int(index.max()) + 1 if len(index) else 0
    stratum_of = np.zeros(n_clusters, dtype=np.int64)  # (C,) each cluster's stratum (its first row's)
    if strata is not None:
        codes = _cluster_index(strata, len(y))
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
    out: dict[str, Any] = {"coef": {}, "ci_low": {}, "ci_high": {}, "se": {}, "derived": {}, "n_rows": int(len(y)),
                           "n_events": int(y.sum()), "n_clusters": n_clusters, "n_bootstrap": int(n_bootstrap),
                           "method": ("Firth-penalised" if firth else "maximum-likelihood") + " logistic regression; "
                           f"95 % percentile cluster bootstrap ({n_bootstrap} draws, clusters resampled within "
                           "strata)"}
    for j, name in enumerate(names):
        out["coef"][name] = float(point[0, j])
        if n_bootstrap > 0:
            out["ci_low"][name], out["ci_high"][name] = _percentiles(boot[:, j])
            out["se"][name] = float(boot[:, j].std(ddof=1))
    for name, fn in (derived or {}).items():
        value = float(np.asarray(fn(point)).reshape(-1)[0])
        entry: dict[str, Any] = {"value": value, "ci_low": None, "ci_high": None}
        if n_bootstrap > 0:
            samples = np.asarray(fn(boot), dtype=np.float64).reshape(-1)
            samples = samples[np.isfinite(samples)]
            if samples.size:
                entry["ci_low"], entry["ci_high"] = _percentiles(samples)
        out["derived"][name] = entry
    return out


def se_from_interval(low: float | None, high: float | None, z: float = Z95) -> float | None:
    """The standard error a symmetric 95 % interval implies: (high - low) / (2 z); None without both ends."""
    if low is None or high is None:
        return None
    return (float(high) - float(low)) / (2.0 * z)


def minimum_detectable_effect(se: float | None, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest true difference a two-sided test at level ``alpha`` detects with probability ``power``, for an
    estimate with standard error ``se``: (z_{1-alpha/2} + z_power) x se (2.80 se at 5 % and 80 %); None without
    ``se``."""
    if se is None:
        return None
    return float((norm.ppf(1.0 - alpha / 2.0) + norm.ppf(power)) * se)


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
        out["ci_low"], out["ci_high"] = _percentiles(pooled)
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


def set_prediction(predicted: Sequence[bool], actual: Sequence[bool]) -> dict[str, Any]:
    """How well one set predicts another over the same items (Biderman et al. 2023): ``predicted`` / ``actual``
    (n,) bool. Returns ``n``, ``predicted``, ``actual``, ``both`` (counts) and ``precision`` = both / predicted,
    ``recall`` = both / actual, each ``{k, n, rate, low, high}`` with Wilson's 95 % interval."""
    p, a = np.asarray(predicted, dtype=bool).reshape(-1), np.asarray(actual, dtype=bool).reshape(-1)
    if p.shape != a.shape:
        raise ValueError(f"predicted and actual sets over different items: {len(p)} and {len(a)}")
    both = int((p & a).sum())

    def rate(k: int, n: int) -> dict[str, Any]:
        low, high = wilson_interval(k, n)
        return {"k": k, "n": n, "rate": k / n if n else None, "low": low, "high": high}

    return {"n": int(len(p)), "predicted": int(p.sum()), "actual": int(a.sum()), "both": both,
            "precision": rate(both, int(p.sum())), "recall": rate(both, int(a.sum()))}


def threshold_rule(counts: Sequence[float], labels: Sequence[bool]) -> float:
    """The threshold t of the rule "label iff count >= t" that best reproduces ``labels`` (most items right; ties:
    the smallest t), over t in the counts' values and +inf (the rule that predicts nothing): e.g. "memorised iff read
    >= 16 times", fitted on one model's memorised set to predict another's -- the baseline a predictor of
    memorisation must beat."""
    c, y = np.asarray(counts, dtype=np.float64).reshape(-1), np.asarray(labels, dtype=bool).reshape(-1)
    if c.shape != y.shape:
        raise ValueError(f"{len(c)} counts for {len(y)} labels")
    best, best_right = math.inf, int((~y).sum())  # t = inf: nothing predicted
    for t in np.unique(c):
        right = int(((c >= t) == y).sum())
        if right > best_right:
            best, best_right = float(t), right
    return best
