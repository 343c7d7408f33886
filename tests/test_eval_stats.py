"""goldfish.eval.stats against hand-computed values and second implementations (scipy's permutation test and
linregress, statsmodels' McNemar, scikit-learn's ROC, numpy's polyfit, explicit loops)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import linregress, permutation_test
from sklearn.metrics import roc_curve
from tolerances import U64, line_fit, rounding

from goldfish.eval import stats
from goldfish.errors import UserError

F64 = rounding(10, U64)  # float64 intervals of a few values: <= 10 roundings each
RATE = rounding(20, U64)  # rates in [0, 1] from float64 means of <= 16 values


def _pow10_rel(x: float) -> float:
    """Relative error of 10 ** x for x = -log10(C): x carries the rounding of C to a float and of log10 (<= 2u
    relative each), 10 ** x turns x's absolute error into ln(10) times that relative error, plus pow's own 2u."""
    return rounding(2, U64) * (1 + math.log(10) * abs(x))


def test_perfect_separation_p_value_is_one_over_binomial():
    # the case: 20 members all above 50 nonmembers -> 1 / C(70, 20) = 1 / 161,884,603,662,657,876
    rng = np.random.default_rng(0)
    members, nonmembers = 10 + rng.random(20), rng.random(50)
    out = stats.auc_pvalue(members, nonmembers)
    assert out["auc"] == 1.0 and out["method"] == "perfect"
    assert math.comb(70, 20) == 161_884_603_662_657_876
    log10_p = -math.log10(161_884_603_662_657_876)  # the same float64 operation as the code's: exact
    assert out["log10_p"] == log10_p
    # 10 ** log10_p against a correctly rounded 1 / C (one more rounding, inside pow's 2u)
    assert out["p_value"] == pytest.approx(1 / 161_884_603_662_657_876, rel=_pow10_rel(log10_p), abs=0)
    # 2000 vs 2000: the p-value underflows a float, its log does not: log10 C(4000, 2000) = 1202.22
    big = stats.auc_pvalue(np.arange(2000) + 5000.0, np.arange(2000.0))
    assert big["p_value"] == 0.0 and big["log10_p"] == -math.log10(math.comb(4000, 2000))
    assert round(big["log10_p"]) == -1202


def _enumerated_p(m: np.ndarray, n: np.ndarray) -> float:
    """P(AUC >= observed) over every labelling of the pooled scores (the permutation null, by brute force)."""
    pooled = np.concatenate([m, n])
    observed = stats.auc_of(m, n)
    hits = total = 0
    for idx in itertools.combinations(range(len(pooled)), len(m)):
        mask = np.zeros(len(pooled), bool)
        mask[list(idx)] = True
        # an AUC is a count over m·n (half-integer rank sums, exact), so equal AUCs are equal floats
        hits += stats.auc_of(pooled[mask], pooled[~mask]) >= observed
        total += 1
    return hits / total


def test_auc_p_value_exact_against_enumeration_and_scipy_permutation_test():
    m, n = np.array([0.9, 0.8, 0.35, 0.7, 0.2]), np.array([0.1, 0.4, 0.3, 0.6, 0.05, 0.5])  # no ties, AUC < 1
    out = stats.auc_pvalue(m, n)
    assert out["method"] == "exact" and 0 < out["auc"] < 1
    # scipy's exact null counts U-configurations in integers, divides each by C(11, 5) = 462, sums at most
    # m·n/2 + 1 = 16 of those and takes 1 - cdf + pmf: <= 34 roundings of values <= 1; the enumeration and the
    # permutation test divide one count by 462 (exact up to one rounding)
    mwu = rounding(34, U64)
    assert out["p_value"] == pytest.approx(_enumerated_p(m, n), abs=mwu)
    scipy_p = permutation_test((m, n), lambda x, y: stats.auc_of(x, y), permutation_type="independent",
                               alternative="greater", n_resamples=np.inf).pvalue
    assert out["p_value"] == pytest.approx(scipy_p, abs=mwu)
    # perfect separation with 3 vs 4 by enumeration: exactly 1 / C(7, 3) = 1/35
    assert stats.auc_pvalue([5, 6, 7], [1, 2, 3, 4])["p_value"] == pytest.approx(1 / 35, rel=_pow10_rel(
        math.log10(35)), abs=0)
    assert _enumerated_p(np.array([5.0, 6, 7]), np.array([1.0, 2, 3, 4])) == 1 / 35  # 1 of 35 labellings


def test_auc_p_value_with_ties_is_the_normal_approximation():
    m, n = np.array([1, 2, 2, 3, 3, 3.0]), np.array([0, 1, 1, 2, 2.0])
    out = stats.auc_pvalue(m, n)
    assert out["method"] == "asymptotic"
    # scipy's tie-corrected normal approximation with continuity correction, by hand:
    u = stats.auc_of(m, n) * 6 * 5
    pooled = np.concatenate([m, n])
    _, t = np.unique(pooled, return_counts=True)
    N = 11
    sd = math.sqrt(6 * 5 / 12 * ((N + 1) - (t ** 3 - t).sum() / (N * (N - 1))))
    z = (u - 15 - 0.5) / sd
    # z carries <= 12 roundings on each side (U, the tie term, sd, z), relative; p = Phi(-z) moves relatively by
    # phi(z)/Phi(-z)·|z|·that <= (z² + 1)·that (the Mills-ratio bound), plus erfc's and scipy's ndtr's few ulp
    rel = rounding(12, U64) * (z * z + 1) + rounding(4, U64)
    assert out["p_value"] == pytest.approx(0.5 * math.erfc(z / math.sqrt(2)), rel=rel, abs=0)


def test_cluster_bootstrap_resamples_documents_not_windows():
    # 3 documents, each with 2 windows that agree perfectly: the cluster bootstrap sees 3 units, not 6
    values = [1, 1, 0, 0, 1, 1]
    docs = ["a", "a", "b", "b", "c", "c"]
    out = stats.cluster_bootstrap_mean(values, docs, n_bootstrap=4000, seed=0)
    # 0/1 values: an exact sum, one correctly rounded division
    assert out["mean"] == 4 / 6 and out["n_clusters"] == 3 and out["n_items"] == 6
    # every cluster resample's mean is a multiple of 1/3 (2 items per cluster, equal sizes)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 3, size=(4000, 3))
    sums, counts = np.array([2.0, 0.0, 2.0]), np.array([2.0, 2.0, 2.0])
    expected = np.percentile(sums[idx].sum(1) / counts[idx].sum(1), [2.5, 97.5])
    assert (out["ci_low"], out["ci_high"]) == tuple(expected)  # the same draws and float64 operations: exact
    # by hand: P(all three draws are document b) = 1/27 > 2.5 % -> 0; P(none is b) = 8/27 > 2.5 % -> 1
    assert out["ci_low"] == 0.0 and out["ci_high"] == 1.0
    # pooled as 6 independent windows the interval is narrower: the error the cluster bootstrap avoids
    naive = stats.cluster_bootstrap_mean(values, None, n_bootstrap=4000, seed=0)
    assert naive["n_clusters"] == 6 and naive["ci_high"] - naive["ci_low"] < out["ci_high"] - out["ci_low"]


def test_tpr_at_fpr_needs_enough_nonmembers():
    rng = np.random.default_rng(1)
    members, few = rng.normal(1, 1, 20), rng.normal(0, 1, 50)
    withheld = stats.tpr_at_fpr(members, few, 0.01)
    assert withheld["tpr"] is None and withheld["needed"] == 100 and withheld["n_nonmembers"] == 50
    assert "100 nonmembers" in withheld["note"]
    assert stats.tpr_at_fpr(members, few, 0.001)["needed"] == 1000
    many = rng.normal(0, 1, 300)
    shown = stats.tpr_at_fpr(members, many, 0.01)
    # second implementation: scikit-learn's ROC, the largest TPR at FPR <= 1 % (3 false positives of 300)
    y = np.r_[np.ones(20), np.zeros(300)]
    fpr, tpr, _ = roc_curve(y, np.r_[members, many], drop_intermediate=False)
    # a count over 20 on every side (scikit-learn's tps / tps[-1], our mean of booleans): one rounding, exact
    assert shown["tpr"] == tpr[fpr <= 0.01].max() and shown["note"] is None
    # by hand: members above the 4th-highest nonmember
    assert shown["tpr"] == np.mean(members > np.sort(many)[::-1][3])


def test_mcnemar_exact_by_hand_and_against_statsmodels():
    a = [True] * 7 + [False] * 3 + [True] * 5 + [False] * 5  # a right on 12 of 20
    b = [False] * 7 + [True] * 3 + [True] * 5 + [False] * 5  # b right on 8; discordant 7 vs 3
    out = stats.mcnemar_exact(a, b)
    assert (out["a_only"], out["b_only"], out["n"]) == (7, 3, 20)
    assert out["diff"] == pytest.approx(0.2, abs=rounding(3, U64) * 12 / 20)  # 12/20 - 8/20: 3 roundings of <= 0.6
    # two-sided exact binomial: 2 * P(X <= 3 | 10, 1/2) = 2 * (1 + 10 + 45 + 120) / 1024
    # scipy's binomtest and statsmodels' mcnemar take binomial tails from Boost's regularised incomplete beta, a
    # special function (continued fractions and series, not a countable sum): 1e-12 allows ~4,500 ulp of 0.34,
    # its documented accuracy with ample margin, not a count of roundings (the hand value 352/1024 is exact)
    boost = 1e-12
    assert out["p_value"] == pytest.approx(2 * 176 / 1024, abs=boost)
    contingency = pytest.importorskip("statsmodels.stats.contingency_tables")
    table = [[5, 7], [3, 5]]  # rows: a right / wrong; columns: b right / wrong
    assert out["p_value"] == pytest.approx(contingency.mcnemar(table, exact=True).pvalue, abs=boost)
    # 20/20 vs 0/20 (the demo's standard vs Goldfish): p = 2 / 2**20, exact in binary; the two tails as above
    # (relative, since the value is 1.9e-6)
    assert stats.mcnemar_exact([True] * 20, [False] * 20)["p_value"] == pytest.approx(2 / 2 ** 20, rel=boost,
                                                                                      abs=0)
    assert stats.mcnemar_exact([True, False], [True, False])["p_value"] == 1.0


def test_paired_bootstrap_matches_a_loop():
    rng = np.random.default_rng(2)
    a, b = rng.random(12), rng.random(12) * 0.5
    docs = [i // 2 for i in range(12)]  # 6 documents x 2 windows
    out = stats.paired_bootstrap(a, b, docs, n_bootstrap=500, seed=3)
    assert out["diff"] == float(np.mean(a - b)) and out["n_clusters"] == 6  # the same numpy mean: exact
    idx = np.random.default_rng(3).integers(0, 6, size=(500, 6))
    d = (a - b).reshape(6, 2)
    loop = np.array([d[row].sum() / (2 * len(row)) for row in idx])
    # each resample mean sums 12 differences in another order (per document first) and divides: the mean of 12
    # terms carries rounding(12) of their largest magnitude, the percentile's interpolation 2 more roundings
    tol = rounding(14, U64) * float(np.abs(d).max())
    assert (out["ci_low"], out["ci_high"]) == pytest.approx(tuple(np.percentile(loop, [2.5, 97.5])), abs=tol)
    assert np.abs(loop).min() > tol  # no resample within rounding of 0: the signs, and so the p-value, are exact
    assert out["p_value"] == min(1.0, 2 * min((loop <= 0).mean(), (loop >= 0).mean()))
    same = stats.paired_bootstrap(a, a, n_bootstrap=100)
    assert same["diff"] == 0.0 and same["p_value"] == 1.0


def test_paired_auc_difference_matches_a_loop():
    rng = np.random.default_rng(4)
    am, an = rng.normal(1, 1, 15), rng.normal(0, 1, 25)
    bm, bn = am * 0.3 + rng.normal(0, 1, 15), an * 0.3 + rng.normal(0, 1, 25)
    out = stats.paired_auc_difference(am, an, bm, bn, n_bootstrap=300, seed=5)
    assert out["diff"] == stats.auc_of(am, an) - stats.auc_of(bm, bn)  # the same operations: exact
    r = np.random.default_rng(5)
    im, inn = r.integers(0, 15, size=(300, 15)), r.integers(0, 25, size=(300, 25))
    loop = np.array([stats.auc_of(am[i], an[j]) - stats.auc_of(bm[i], bn[j]) for i, j in zip(im, inn)])
    # AUCs are exact counts over m·n (half-integer rank sums) row by row or batched, then the same subtraction
    assert (out["ci_low"], out["ci_high"]) == tuple(np.percentile(loop, [2.5, 97.5]))
    with pytest.raises(ValueError, match="same member"):
        stats.paired_auc_difference(am, an, bm[:3], bn)


def test_difference_in_differences_hand_values():
    # the demo reading: Goldfish 4.2 points below the control on dropped member positions and 3.6 points
    # below it on held-out text -> a difference in differences of -0.6 points, not -4.2
    arm_m = [np.r_[np.ones(458), np.zeros(542)]]  # 45.8 % right on the 1000 dropped positions
    ctl_m = [np.r_[np.ones(500), np.zeros(500)]]  # 50.0 %
    dropped = [np.ones(1000, bool)]
    arm_h = [np.r_[np.ones(464), np.zeros(536)]]  # 46.4 % on held-out text
    ctl_h = [np.r_[np.ones(500), np.zeros(500)]]
    out = stats.difference_in_differences(arm_m, ctl_m, dropped, arm_h, ctl_h, n_bootstrap=0)
    # (458 - 500)/1000 and (464 - 500)/1000: exact sums, one correctly rounded division, like the literals
    assert out["member_diff"] == -0.042 and out["heldout_diff"] == -0.036
    # their difference is exact (Sterbenz: within a factor 2 of each other), but each operand and the literal -0.006
    # carry their own rounding: <= 2u of 0.042 together
    assert out["did"] == pytest.approx(-0.006, abs=rounding(2, U64) * 0.042) and out["ci_low"] is None
    # only the chosen positions count, token-weighted across documents
    arm = [np.array([1, 0, 1, 1.0]), np.array([0, 0, 1.0])]
    ctl = [np.array([0, 0, 0, 1.0]), np.array([0, 1, 1.0])]
    pos = [np.array([True, True, False, True]), np.array([False, True, True])]
    held = [np.array([1, 1.0]), np.array([0.0])]
    hctl = [np.array([0, 1.0]), np.array([0.0])]
    res = stats.difference_in_differences(arm, ctl, pos, held, hctl, n_bootstrap=200, seed=0)
    # members: arm (1+0+1)+(0+1) = 3 of 5, control (0+0+1)+(1+1) = 3 of 5 -> 0; held-out: (2+0)/3 - (1+0)/3 = 1/3
    # 0/5, 1/3 and 0 - 1/3: integer sums, one correctly rounded division each, an exact subtraction
    assert res["member_diff"] == 0.0 and res["heldout_diff"] == 1 / 3
    assert res["did"] == -1 / 3
    assert (res["n_member_documents"], res["n_member_positions"], res["n_heldout_positions"]) == (2, 5, 3)
    assert res["ci_low"] <= res["did"] <= res["ci_high"]


def test_difference_in_differences_bootstrap_resamples_both_sets():
    rng = np.random.default_rng(6)
    arm_m = [rng.random(8) for _ in range(5)]
    ctl_m = [rng.random(8) for _ in range(5)]
    pos = [rng.random(8) < 0.5 for _ in range(5)]
    arm_h = [rng.random(6) for _ in range(4)]
    ctl_h = [rng.random(6) for _ in range(4)]
    out = stats.difference_in_differences(arm_m, ctl_m, pos, arm_h, ctl_h, n_bootstrap=300, seed=7)
    dm = np.array([(a - c)[p].sum() for a, c, p in zip(arm_m, ctl_m, pos)])
    nm = np.array([p.sum() for p in pos], float)
    dh = np.array([(a - c).sum() for a, c in zip(arm_h, ctl_h)])
    nh = np.full(4, 6.0)
    keep = nm > 0
    dm, nm = dm[keep], nm[keep]
    r = np.random.default_rng(7)
    i = r.integers(0, len(dm), size=(300, len(dm)))
    j = r.integers(0, 4, size=(300, 4))
    loop = np.array([dm[a].sum() / nm[a].sum() - dh[b].sum() / nh[b].sum() for a, b in zip(i, j)])
    # the code sums arm and control per document before subtracting, here after: each ratio accumulates <= 2·40 + 2
    # roundings of per-position values in [-1, 1] over as many positions (so relative to 1), the DiD subtracts two
    # and the percentile interpolates (2 more)
    tol = rounding(2 * (2 * 40 + 2) + 3, U64)
    assert (out["ci_low"], out["ci_high"]) == pytest.approx(tuple(np.percentile(loop, [2.5, 97.5])), abs=tol)


def test_tpr_at_fpr_is_the_roc_read_at_that_fpr_with_ties_and_few_nonmembers():
    # second implementation: scikit-learn's ROC (every threshold kept), the largest TPR among points at FPR <= fpr;
    # integer scores make ties between and within the classes
    rng = np.random.default_rng(4)
    for n_members, n_nonmembers, fpr in ((30, 300, 0.01), (25, 40, 0.01), (50, 1000, 0.001), (10, 7, 0.25)):
        members = rng.integers(0, 12, n_members).astype(float)
        nonmembers = rng.integers(0, 10, n_nonmembers).astype(float)
        roc_fpr, roc_tpr, _ = roc_curve(np.r_[np.ones(n_members), np.zeros(n_nonmembers)],
                                        np.r_[members, nonmembers], drop_intermediate=False)
        found = stats.tpr_at_fpr(members, nonmembers, fpr)
        # counts over n_members on both sides (tps / tps[-1], a mean of booleans): one rounding each, exact
        assert found["roc_tpr"] == roc_tpr[roc_fpr <= fpr + 1e-12].max()
        assert (found["tpr"] is None) == (n_nonmembers < found["needed"])


def test_wilson_interval_hand_values():
    # 0/50: upper = z^2/n / (1 + z^2/n) = 3.8416/53.8416
    low, high = stats.wilson_interval(0, 50)
    assert low == 0.0 and high == pytest.approx(3.8416 / 53.8416, rel=F64, abs=0)
    # 5/10: symmetric around 0.5, half-width z*sqrt(0.025 + z^2/400)/(1 + z^2/10)
    low, high = stats.wilson_interval(5, 10)
    half = 1.96 * np.sqrt(0.025 + 1.96**2 / 400) / (1 + 1.96**2 / 10)
    assert (low, high) == (pytest.approx(0.5 - half, rel=F64, abs=0), pytest.approx(0.5 + half, rel=F64, abs=0))
    assert stats.wilson_interval(0, 0) == (None, None)


def test_loglinear_fit_matches_polyfit():
    x = [1e6, 1e7, 3e7, 1e8, 1e9]
    y = [0.01, 0.03, 0.02, 0.09, 0.12]
    fit = stats.loglinear_fit(x, y)
    slope, intercept = np.polyfit(np.log10(x), y, 1)
    tol = line_fit(np.log10(x))  # two float64 least-squares lines
    assert fit["slope"] == pytest.approx(slope, rel=tol, abs=0)
    assert fit["intercept"] == pytest.approx(intercept, rel=tol, abs=0)
    r = np.corrcoef(np.log10(x), y)[0, 1]
    assert fit["r2"] == pytest.approx(r**2, rel=tol, abs=0) and fit["n"] == 5
    np.testing.assert_allclose(stats.predict(fit, [1e8]), [intercept + 8 * slope], rtol=tol, atol=0)


def test_loglinear_fit_exact_line_and_errors():
    fit = stats.loglinear_fit([1, 10, 100], [2.0, 2.5, 3.0])  # y = 2 + 0.5 log10 x
    tol = line_fit([0.0, 1.0, 2.0])  # the float64 least-squares line through log10 x
    assert fit["slope"] == pytest.approx(0.5, rel=tol, abs=0) and fit["intercept"] == pytest.approx(2.0, rel=tol, abs=0)
    assert fit["r2"] == pytest.approx(1.0, rel=tol, abs=0)
    assert stats.loglinear_fit([1, 10], [3.0, 3.0])["r2"] is None  # constant y: r2 undefined
    with pytest.raises(UserError, match="2 distinct x"):
        stats.loglinear_fit([5, 5], [1.0, 2.0])
    with pytest.raises(UserError, match="x > 0"):
        stats.loglinear_fit([0, 10], [1.0, 2.0])
    with pytest.raises(UserError, match="x has 2 values but y has 3"):
        stats.loglinear_fit([1, 10], [1.0, 2.0, 3.0])


def test_loglinear_fit_matches_scipy_linregress_with_its_standard_error():
    x, y = [1e6, 3e6, 1e7, 4e7], [0.1, 0.22, 0.38, 0.5]
    fit = stats.loglinear_fit(x, y)
    ref = linregress(np.log10(x), y)
    tol = line_fit(np.log10(x))  # two float64 least-squares lines
    assert fit["slope"] == pytest.approx(ref.slope, rel=tol, abs=0)
    assert fit["slope_se"] == pytest.approx(ref.stderr, rel=tol, abs=0)


def test_paired_difference_on_known_per_token_arrays():
    dropped = [np.arange(12) % 4 == 3 for _ in range(20)]  # 3 dropped positions per document
    arm = [np.ones(12) for _ in dropped]  # right everywhere
    control = [np.where(np.arange(12) % 2 == 1, 1.0, 0.0) for _ in dropped]  # right at odd positions: 3, 7 and 11
    out = stats.paired_difference(arm, control, dropped, n_bootstrap=200, seed=0)
    assert out == {"arm": 1.0, "control": 1.0, "diff": 0.0, "diff_ci_low": 0.0, "diff_ci_high": 0.0,
                   "n_documents": 20, "n_positions": 60}
    control = [np.where(np.arange(12) == 3, 1.0, 0.0) for _ in dropped]  # right at 3 only: 1 of 3 dropped
    assert stats.paired_difference(arm, control, dropped, n_bootstrap=0)["diff"] == pytest.approx(2 / 3, abs=RATE)
    # documents differ: the control is right on all dropped positions of half the documents, none of the others
    control = [np.full(12, float(i % 2)) for i in range(20)]
    out = stats.paired_difference(arm, control, dropped, n_bootstrap=500, seed=0)
    assert out["arm"] == 1.0 and out["control"] == 0.5 and out["diff"] == 0.5
    assert 0.0 < out["diff_ci_low"] < 0.5 < out["diff_ci_high"] <= 1.0  # resampled documents: a real interval
    none = stats.paired_difference(arm, control, [np.zeros(12, bool)] * 20)
    assert none["diff"] is None and none["n_documents"] == 0
