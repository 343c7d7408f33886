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
    scipy_p = permutation_test(
        (m, n),
        lambda x, y: stats.auc_of(x, y),
        permutation_type="independent",
        alternative="greater",
        n_resamples=np.inf,
    ).pvalue
    assert out["p_value"] == pytest.approx(scipy_p, abs=mwu)
    # perfect separation with 3 vs 4 by enumeration: exactly 1 / C(7, 3) = 1/35
    assert stats.auc_pvalue([5, 6, 7], [1, 2, 3, 4])["p_value"] == pytest.approx(
        1 / 35, rel=_pow10_rel(math.log10(35)), abs=0
    )
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
    sd = math.sqrt(6 * 5 / 12 * ((N + 1) - (t**3 - t).sum() / (N * (N - 1))))
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
    assert stats.mcnemar_exact([True] * 20, [False] * 20)["p_value"] == pytest.approx(2 / 2**20, rel=boost, abs=0)
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
        roc_fpr, roc_tpr, _ = roc_curve(
            np.r_[np.ones(n_members), np.zeros(n_nonmembers)], np.r_[members, nonmembers], drop_intermediate=False
        )
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
    assert out == {
        "arm": 1.0,
        "control": 1.0,
        "diff": 0.0,
        "diff_ci_low": 0.0,
        "diff_ci_high": 0.0,
        "n_documents": 20,
        "n_positions": 60,
    }
    control = [np.where(np.arange(12) == 3, 1.0, 0.0) for _ in dropped]  # right at 3 only: 1 of 3 dropped
    assert stats.paired_difference(arm, control, dropped, n_bootstrap=0)["diff"] == pytest.approx(2 / 3, abs=RATE)
    # documents differ: the control is right on all dropped positions of half the documents, none of the others
    control = [np.full(12, float(i % 2)) for i in range(20)]
    out = stats.paired_difference(arm, control, dropped, n_bootstrap=500, seed=0)
    assert out["arm"] == 1.0 and out["control"] == 0.5 and out["diff"] == 0.5
    assert 0.0 < out["diff_ci_low"] < 0.5 < out["diff_ci_high"] <= 1.0  # resampled documents: a real interval
    none = stats.paired_difference(arm, control, [np.zeros(12, bool)] * 20)
    assert none["diff"] is None and none["n_documents"] == 0


# ------------------------------------------------------------------ issue 32: tests over documents, baselines, models


def test_document_mcnemar_counts_documents_not_windows():
    # the case: 4 documents, 2 placements each, a verbatim on both and b on neither -> 8 discordant windows
    # (window-level p = 2 / 2^8 = 0.0078) but 4 discordant documents: p = 2 / 2^4 = 0.125, exact in binary
    a, b = [True] * 8 + [False] * 4, [False] * 8 + [False] * 4
    docs = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    out = stats.document_mcnemar(a, b, docs)
    boost = 1e-12  # scipy's binomial tails: see test_mcnemar_exact_by_hand_and_against_statsmodels
    assert (out["a_only"], out["b_only"]) == (8, 0) and (out["a_only_documents"], out["b_only_documents"]) == (4, 0)
    assert out["p_value"] == pytest.approx(0.125, abs=boost) and out["test"] == "document sign test"
    assert stats.mcnemar_exact(a, b)["p_value"] == pytest.approx(2 / 2**8, abs=boost)  # what it was
    assert out["n_documents"] == 6
    # a document where each arm wins one window has difference 0: it is not discordant
    mixed = stats.document_mcnemar([True, False, True, True], [False, True, False, False], [0, 0, 1, 1])
    assert (mixed["a_only_documents"], mixed["b_only_documents"]) == (1, 0) and mixed["p_value"] == 1.0
    # one window per document: McNemar's exact test itself (and statsmodels')
    x = [True] * 7 + [False] * 3 + [True] * 5 + [False] * 5
    y = [False] * 7 + [True] * 3 + [True] * 5 + [False] * 5
    one = stats.document_mcnemar(x, y)
    assert one["test"] == "McNemar exact" and one["p_value"] == stats.mcnemar_exact(x, y)["p_value"]
    contingency = pytest.importorskip("statsmodels.stats.contingency_tables")
    assert one["p_value"] == pytest.approx(contingency.mcnemar([[5, 7], [3, 5]], exact=True).pvalue, abs=boost)


def test_poisson_binomial_against_enumeration_and_the_binomial():
    from scipy.stats import binom

    probs = np.array([0.1, 0.5, 0.25, 0.9, 0.6])
    exact = np.zeros(6)
    for outcome in itertools.product([0, 1], repeat=5):  # all 32 outcomes by brute force
        exact[sum(outcome)] += np.prod(np.where(np.array(outcome) == 1, probs, 1 - probs))
    out = stats.poisson_binomial(probs, observed=1)
    # each value is a sum of <= 10 products of 5 factors: <= 15 roundings of numbers <= 1
    tol = rounding(15, U64)
    assert out["p_at_most"] == pytest.approx(exact[:2].sum(), abs=tol)
    assert out["p_at_least"] == pytest.approx(exact[1:].sum(), abs=tol)
    assert out["p_value"] == pytest.approx(2 * exact[:2].sum(), abs=2 * tol)
    assert out["expected"] == pytest.approx(2.35, abs=tol) and out["n"] == 5
    # equal probabilities: the binomial (scipy's Boost tails, see the McNemar test's tolerance)
    equal = stats.poisson_binomial([0.127] * 32, observed=3)
    assert equal["p_at_most"] == pytest.approx(binom.cdf(3, 32, 0.127), abs=1e-12)
    # the reading: 3 of 32 windows verbatim against a 12.7 % baseline is not "below" it (P(X <= 3) = 0.41)
    assert round(equal["p_at_most"], 2) == 0.41 and equal["p_value"] > 0.5


def _logistic_data(n_clusters: int, seed: int):
    """Targets (clusters) measured at 3 sizes each: exposures and size raise the chance, a per-target effect
    correlates a target's outcomes."""
    rng = np.random.default_rng(seed)
    exposures = rng.choice([1.0, 2.0, 3.0, 4.0], size=n_clusters)
    effect = rng.normal(0, 1.0, n_clusters)
    rows, y, clusters, strata = [], [], [], []
    for c in range(n_clusters):
        for size in (0.0, 0.5, 1.0):
            p = 1 / (1 + math.exp(-(-3.0 + 1.0 * exposures[c] + 1.5 * size + effect[c])))
            rows.append([1.0, exposures[c], size])
            y.append(float(rng.random() < p))
            clusters.append(c)
            strata.append(exposures[c])
    return np.array(rows), np.array(y), clusters, strata


def test_logistic_regression_matches_statsmodels_and_firth_maximises_the_penalised_likelihood():
    sm = pytest.importorskip("statsmodels.api")
    from scipy.optimize import minimize

    x, y, clusters, _ = _logistic_data(200, 1)
    plain = stats.logistic_batch(x, y[None, :], np.ones(len(y)), firth=False)[0]
    ref = sm.Logit(y, x).fit(disp=0, tol=1e-12, maxiter=200)
    # both are Newton's method to a gradient of ~1e-10 on a well-conditioned problem (600 rows, coefficients ~1):
    # the coefficients agree to about that gradient times the inverse information (<= 1 here), far inside 1e-8
    assert plain == pytest.approx(ref.params, abs=1e-8)
    firth = stats.logistic_batch(x, y[None, :], np.ones(len(y)), firth=True)[0]

    def penalised(beta):  # -(log-likelihood + 1/2 log det I): Firth's objective, a second implementation
        z = x @ beta
        p = 1 / (1 + np.exp(-z))
        info = x.T @ ((p * (1 - p))[:, None] * x)
        return -(np.sum(y * z - np.logaddexp(0, z)) + 0.5 * np.linalg.slogdet(info)[1])

    best = minimize(penalised, plain, method="BFGS", options={"gtol": 1e-10}).x
    # BFGS stops at a gradient of 1e-10; the penalised information is ~ that of the data (eigenvalues >= 10 here)
    assert firth == pytest.approx(best, abs=1e-6)
    assert np.all(np.abs(firth[1:]) < np.abs(plain[1:]))  # Firth shrinks towards 0 (bias reduction)


def test_clustered_logistic_bootstrap_agrees_with_the_cluster_robust_standard_error():
    sm = pytest.importorskip("statsmodels.api")
    x, y, clusters, strata = _logistic_data(400, 2)
    found = stats.clustered_logistic(x, y, clusters, None, ["a", "b", "c"], n_bootstrap=1000, seed=3, firth=False)
    robust = sm.GLM(y, x, family=sm.families.Binomial()).fit(
        cov_type="cluster", cov_kwds={"groups": np.array(clusters)}
    )
    # two estimates of one standard error: the bootstrap's (B = 1000: a relative sampling error of 1/sqrt(2B) =
    # 2.2 %) and the sandwich (its own finite-sample error with 400 clusters, ~1/sqrt(400) = 5 %): 4 of the two
    # combined errors is 22 %
    for j, name in enumerate(["a", "b", "c"]):
        assert found["se"][name] == pytest.approx(robust.bse[j], rel=0.22)
        assert found["ci_low"][name] < found["coef"][name] < found["ci_high"][name]
    # ignoring the clusters misstates the errors: it understates that of a target's exposures (the same for all its
    # rows, whose outcomes are correlated) and overstates that of the size, which varies within a target (a paired
    # comparison), as the sandwich does too
    naive = stats.clustered_logistic(
        x, y, list(range(len(y))), None, ["a", "b", "c"], n_bootstrap=1000, seed=3, firth=False
    )
    assert naive["se"]["b"] < found["se"]["b"] and naive["se"]["c"] > found["se"]["c"]
    # derived quantities get the same percentile interval; stratified resampling keeps each stratum's size
    ratio = stats.clustered_logistic(
        x, y, clusters, strata, ["a", "b", "c"], {"c/b": lambda b: b[:, 2] / b[:, 1]}, n_bootstrap=200, seed=4
    )
    d = ratio["derived"]["c/b"]
    assert d["value"] == pytest.approx(ratio["coef"]["c"] / ratio["coef"]["b"], rel=rounding(2, U64))
    assert d["ci_low"] < d["value"] < d["ci_high"]


def test_clustered_logistic_is_finite_under_separation():
    # every target at exposure 3 and 4 extracted, none at 1 and 2: plain maximum likelihood diverges, Firth's not
    x = np.array([[1.0, e, s] for e in (1, 2, 3, 4) for s in (0.0, 1.0) for _ in range(4)])
    y = (x[:, 1] >= 3).astype(float)
    out = stats.clustered_logistic(x, y, list(range(len(y))), None, ["a", "b", "c"], n_bootstrap=50, seed=0)
    assert all(math.isfinite(v) for v in out["coef"].values()) and out["coef"]["b"] > 0
    assert out["n_events"] == 16 and out["n_rows"] == 32


def test_minimum_detectable_effect_and_the_standard_error_of_an_interval():
    # (1.959964 + 0.841621) x SE, the textbook 2.80 for a two-sided 5 % test at 80 % power
    assert stats.minimum_detectable_effect(1.0) == pytest.approx(2.801585, abs=1e-6)
    assert stats.minimum_detectable_effect(0.5, power=0.5) == pytest.approx(0.5 * 1.959964, abs=1e-6)
    assert stats.se_from_interval(-1.96, 1.96) == 1.0 and stats.minimum_detectable_effect(None) is None


def test_pooled_paired_auc_difference_averages_groups_and_tests_equivalence():
    rng = np.random.default_rng(6)
    groups = []
    for _ in range(3):
        am, an = rng.normal(1, 1, 40), rng.normal(0, 1, 60)
        groups.append((am, an, am + rng.normal(0, 0.3, 40), an + rng.normal(0, 0.3, 60)))
    out = stats.pooled_paired_auc_difference(groups, n_bootstrap=400, seed=1, margin=0.05)
    single = [stats.paired_auc_difference(*g, n_bootstrap=0)["diff"] for g in groups]
    assert out["diff"] == pytest.approx(float(np.mean(single)), abs=rounding(3, U64))
    assert out["n_groups"] == 3 and out["ci90_low"] >= out["ci_low"] and out["ci90_high"] <= out["ci_high"]
    assert out["equivalent"] == (-0.05 < out["ci90_low"] and out["ci90_high"] < 0.05)
    # identical arms: every resample's difference is 0 -> equivalent at any margin, TOST p 0
    same = stats.pooled_paired_auc_difference([(g[0], g[1], g[0], g[1]) for g in groups], 100, 0, margin=0.01)
    assert same["diff"] == 0.0 and same["equivalent"] and same["tost_p"] == 0.0
    # a large difference is not equivalent, and its 95 % interval excludes 0
    far = stats.pooled_paired_auc_difference([(g[0] + 3, g[1], g[0], g[1]) for g in groups], 200, 0, margin=0.05)
    assert not far["equivalent"] and far["ci_low"] > 0.05


def test_set_prediction_by_hand():
    predicted = [True, True, True, False, False, False]
    actual = [True, True, False, True, False, False]
    out = stats.set_prediction(predicted, actual)
    assert (out["predicted"], out["actual"], out["both"]) == (3, 3, 2)
    assert out["precision"]["rate"] == 2 / 3 and out["recall"]["rate"] == 2 / 3
    assert (out["precision"]["low"], out["precision"]["high"]) == stats.wilson_interval(2, 3)


def test_threshold_rule_by_hand():
    counts = [1, 1, 4, 4, 16, 16, 32, 32]
    # memorised: both x16, both x32 and one x4 -> t = 4 gets 7 of 8 right (one x4 wrongly predicted), t = 16 gets 7
    # too (one x4 missed), t = 1 and t = 32 fewer: a tie, and the smaller t is kept
    labels = [False, False, True, False, True, True, True, True]
    assert stats.threshold_rule(counts, labels) == 4.0
    assert stats.threshold_rule(counts, [False, False, False, False, True, True, True, True]) == 16.0
    assert stats.threshold_rule(counts, [False] * 8) == math.inf  # nothing memorised: predict nothing
    assert stats.threshold_rule(counts, [True] * 8) == 1.0


# ------------------------------------------------------------------------------------------------ runs as the unit


def test_replicate_tost_against_scipy_and_a_hand_value():
    from scipy import stats as sp

    from goldfish.eval.stats import replicate_tost

    diffs = [-0.020, 0.004, -0.012, 0.010, -0.018]
    r = replicate_tost(diffs, margin=0.05)
    x = np.asarray(diffs)
    assert r["n"] == 5 and r["mean"] == pytest.approx(x.mean()) and r["sd"] == pytest.approx(x.std(ddof=1))
    assert r["p_value"] == pytest.approx(sp.ttest_1samp(x, 0.0).pvalue)
    low = sp.ttest_1samp(x, -0.05, alternative="greater").pvalue  # H0: mean <= -margin
    high = sp.ttest_1samp(x, 0.05, alternative="less").pvalue  # H0: mean >= +margin
    assert r["tost_p"] == pytest.approx(max(low, high)) and r["equivalent"] is True
    ci = sp.t.interval(0.95, 4, loc=x.mean(), scale=sp.sem(x))
    assert (r["ci_low"], r["ci_high"]) == pytest.approx(ci)
    # by hand: mean -0.0072; squared deviations sum to 7.248e-4, sd = sqrt(7.248e-4 / 4) = 0.013461,
    # se = 0.013461 / sqrt(5) = 0.0060200; t_0.95,4 = 2.131847 -> 90 % CI -0.0072 -+ 0.012834
    assert (r["ci90_low"], r["ci90_high"]) == pytest.approx((-0.020034, 0.005634), abs=2e-6)
    assert replicate_tost(diffs, margin=0.01)["equivalent"] is False  # the 90 % CI crosses -0.01
    one = replicate_tost([0.01], margin=0.05)
    assert one["ci_low"] is None and one["equivalent"] is None  # one run says nothing about runs


def test_replicate_tost_keeps_its_5pct_error_at_the_margin_when_seeds_disagree():
    """Issue 38: the pooled within-run bootstrap claimed equivalence from 3 seeds whose differences disagreed
    (Cochran's Q 9.2). Simulated here: 5 runs whose true differences scatter (between-run SD 0.02, far above the
    within-run noise 0.003) around a mean exactly at the margin -- the false 'equivalent' rate must stay <= 5 %
    (and the within-run pooled reading, which ignores the scatter, exceeds it)."""
    from goldfish.eval.stats import replicate_tost

    rng = np.random.default_rng(7)
    margin, sims, runs = 0.05, 4000, 5
    seed_effects = rng.normal(-margin, 0.02, size=(sims, runs))  # each run's own true difference
    observed = seed_effects + rng.normal(0, 0.003, size=(sims, runs))  # plus its within-run estimation noise
    claims = np.mean([bool(replicate_tost(row, margin)["equivalent"]) for row in observed])
    naive_se = 0.003 / np.sqrt(runs)  # what a within-run interval pooled over runs would use
    naive = np.mean(observed.mean(axis=1) - 1.645 * naive_se > -margin)
    assert claims <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / sims)  # 5 % plus Monte Carlo error
    assert claims >= 0.03 and naive > 0.3  # the test is not trivially conservative; the naive one is badly wrong
