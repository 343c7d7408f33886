"""The exposure threshold E50 (``goldfish.eval.threshold``): a logistic fit of exact match on log2 exposures.

Checked against a hand solution (two strata whose empirical logits are -ln 3 and +ln 3 meet at log2 e = 3, so
E50 = 8, for the plain and the penalised fit alike by symmetry), against scikit-learn's logistic regression on the
same outcomes one target per row (a second implementation), on data simulated with a known threshold (its interval's
width against the delta method's standard error), and at the edges: separation, the floor and the ceiling.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from tolerances import U64, rounding

from goldfish.eval.threshold import e50, logistic_fit
from goldfish.experiment.summary import CellSummary

# Newton's method stops after a step below 1e-10 (eval/threshold.py); convergence is quadratic, so the coefficients
# are then within that step of the root, plus the float64 rounding of the score and the 2 x 2 solve (a few dozen
# operations on values of the coefficients' scale, <= 4 here)
NEWTON = 1e-10 + rounding(32, U64) * 4


def test_two_symmetric_strata_put_e50_exactly_between_them():
    # 1/4 extracted at 4 exposures, 3/4 at 16: logits -ln 3 at x=2 and +ln 3 at x=4 -> x50 = 3 -> E50 = 2^3 = 8
    plain = logistic_fit([2, 4], [1, 3], [4, 4], firth=False)
    assert plain["slope"] == pytest.approx(math.log(3), rel=0, abs=NEWTON)
    assert plain["intercept"] == pytest.approx(-3 * math.log(3), rel=0, abs=NEWTON)
    found = e50([4, 16], [1, 3], [4, 4], n_bootstrap=50)
    # x50 = -a/b: a and b each within NEWTON moves x50 = 3 by <= NEWTON·(1 + 3)/b, and E50 = 2^x50 by 8·ln 2 times that
    e50_tol = 8 * math.log(2) * NEWTON * (1 + 3) / found["slope"]
    assert found["status"] == "interior" and found["e50"] == pytest.approx(8.0, rel=0, abs=e50_tol)
    assert found["slope"] < plain["slope"]  # Firth's penalty shrinks the slope, not the symmetric midpoint


def test_the_plain_fit_matches_scikit_learn_on_one_row_per_target():
    from sklearn.linear_model import LogisticRegression

    x, k, n = [1.0, 3.0, 5.0, 7.0], [1, 3, 6, 9], [10, 10, 10, 10]
    rows = np.repeat(x, n)[:, None]
    y = np.concatenate([[1] * ki + [0] * (ni - ki) for ki, ni in zip(k, n)])
    ref = LogisticRegression(C=1e12, tol=1e-10, max_iter=10000).fit(rows, y)  # an L2 weight of 1e-12: none
    mine = logistic_fit(x, k, n, firth=False)
    # scikit-learn's L-BFGS stops once its mean log-loss (< 1 here) falls by less than ftol = 64·eps in a step, which
    # near the minimum (where the loss exceeds its least value by d'Hd/2 for a coefficient error d) leaves the
    # coefficients within about sqrt(2·ftol/lambda), lambda the smallest eigenvalue of H, the mean Fisher
    # information per row (its gradient stop, tol = 1e-10, is far inside that, as is our Newton fit, NEWTON)
    a, b = mine["intercept"], mine["slope"]
    fitted = 1 / (1 + np.exp(-(a + b * np.asarray(x))))
    w = np.asarray(n) * fitted * (1 - fitted)  # (4,) Fisher weights
    design = np.stack([np.ones(4), x], axis=1)
    lam = np.linalg.eigvalsh(design.T @ (w[:, None] * design) / sum(n)).min()
    lbfgs = math.sqrt(2 * 64 * 2.0 ** -52 / lam) + NEWTON
    assert mine["slope"] == pytest.approx(ref.coef_[0, 0], rel=0, abs=lbfgs)
    assert mine["intercept"] == pytest.approx(ref.intercept_[0], rel=0, abs=lbfgs)


def _delta_se(x, n, fit) -> float:
    """Standard error of x50 = -a/b by the delta method from the inverse Fisher information (no bootstrap)."""
    x, n = np.asarray(x, float), np.asarray(n, float)
    a, b = fit["intercept"], fit["slope"]
    p = 1 / (1 + np.exp(-(a + b * x)))
    design = np.stack([np.ones_like(x), x], axis=1)
    cov = np.linalg.inv(design.T @ ((n * p * (1 - p))[:, None] * design))
    grad = np.array([-1 / b, a / b**2])
    return float(np.sqrt(grad @ cov @ grad))


def test_e50_recovers_a_known_threshold_with_an_interval_of_the_right_width():
    rng = np.random.default_rng(7)
    exposures = np.array([2, 8, 32, 128])
    true_x50, slope = 4.0, 1.5  # E50 = 16 exposures
    p = 1 / (1 + np.exp(-slope * (np.log2(exposures) - true_x50)))
    n = np.full(4, 400)
    k = rng.binomial(n, p)
    found = e50(exposures, k, n, n_bootstrap=300, seed=1)
    assert found["status"] == "interior"
    se = _delta_se(np.log2(exposures), n, found)  # ~0.05 at 1,600 targets
    # 4 delta-method standard errors (a two-sided chance of 6e-5 under the normal approximation; the draws are seeded)
    assert found["log2_e50"] == pytest.approx(true_x50, abs=4 * se)
    assert found["low"] < found["e50"] < found["high"]
    half = (math.log2(found["high"]) - math.log2(found["low"])) / 2
    # the bootstrap agrees with the delta method's scale: each 2.5 % / 97.5 % percentile of B = 300 draws has a
    # relative sampling error of about sqrt(0.025·0.975/B) / (phi(1.96)·1.96) = 8 %; the rest of the band allows for
    # the skew of the ratio -a/b, which the delta method's symmetric interval ignores
    assert 0.6 * 1.96 * se < half < 1.6 * 1.96 * se
    # 3 of the fit's own standard errors of the slope (0.072 at 1,600 targets; was 0.25 = 3.5 of them)
    assert found["slope"] == pytest.approx(slope, abs=3 * found["slope_se"])


def test_separated_strata_give_a_finite_threshold_between_them():
    found = e50([2, 8, 32, 128], [0, 0, 8, 8], [8, 8, 8, 8], n_bootstrap=100)
    assert found["status"] == "interior" and 8 < found["e50"] < 32  # plain maximum likelihood has no finite fit
    assert math.isfinite(found["slope"])
    # the smoothed bootstrap keeps an interval where resampling 0/8 and 8/8 as they are would give zero width
    assert found["low"] < found["e50"] < found["high"] and found["high"] / found["low"] > 1.5


def test_the_floor_and_the_ceiling_are_censored_not_extrapolated():
    floor = e50([2, 8, 32, 128], [0, 0, 0, 0], [8, 8, 8, 8], n_bootstrap=50)
    assert floor["status"] == "above" and floor["e50"] is None and floor["high_status"] == "above"
    ceiling = e50([2, 8, 32, 128], [8, 8, 8, 8], [8, 8, 8, 8], n_bootstrap=50)
    assert ceiling["status"] == "below" and ceiling["e50"] is None
    partial = e50([2, 8, 32, 128], [0, 0, 1, 3], [8, 8, 8, 8], n_bootstrap=200)
    assert partial["status"] == "above"  # 3/8 at the top: half is not reached within the tested exposures
    assert partial["low_status"] in ("interior", "above")


# ---------------------------------------------------------------- E50 vs size in the sweep's scaling block


def _cell(arm, size, params, x50, seed, n=200, pretrained=False):
    """A cell summary whose strata hold the expected exact-match counts of a logistic with threshold 2^x50."""
    strata = []
    for r in (2, 8, 32, 128):
        p = 1 / (1 + math.exp(-2.0 * (math.log2(r) - x50)))
        strata.append({"prefix_len": 16, "repetitions": r, "n_windows": n, "exact_match_rate": round(n * p) / n})
    return CellSummary(f"{arm}__size={size}__seed={seed}", arm, {"size": size, "seed": seed}, params=params,
                       heldout_loss=5.0, strata=strata, exposures={str(r): [r, r] for r in (2, 8, 32, 128)},
                       start_model="smollm2.gguf" if pretrained else None)


def test_e50_falls_with_size_along_a_known_power_law_and_the_fit_recovers_it():
    from goldfish.experiment.scaling import size_analysis

    # log10 E50 = 3.0 - 0.3 log10 params: E50 ~ 32 at 1e5, ~16 at 1e6, ~8 at 1e7 parameters
    sizes = {"a": 1e5, "b": 1e6, "c": 1e7}
    cells = [_cell("standard", s, p, math.log2(10 ** (3.0 - 0.3 * math.log10(p))), seed)
             for s, p in sizes.items() for seed in (0, 1)]
    cells += [_cell("standard", "pre", 1.35e8, 0.5, 0, pretrained=True)]  # never fitted
    cells += [_cell("goldfish", s, p, 20.0, 0) for s, p in sizes.items()]  # never reaches half: censored
    found = size_analysis(cells, ["size", "seed"])
    rows = {(r["arm"], r["size"]): r for r in found["rows"]}
    for s, p in sizes.items():
        e = rows[("standard", s)]["e50"]
        assert e["status"] == "interior" and e["n_targets"] == 2 * 4 * 200  # two seeds pooled
        # not chance but the cells' counts rounded to integers (round(200 p) per seed, off by <= 1 of the 400
        # pooled): to first order that moves log10 E50 by at most log10(2)·sum_s |d x50 / d k_s| = 0.005 to 0.007
        # at these three sizes (grad(-a/b)·I^-1·[1, x_s], I the Fisher information); 0.02 leaves room for Firth's
        # O(1/n) bias and second-order terms
        assert math.log10(e["e50"]) == pytest.approx(3.0 - 0.3 * math.log10(p), abs=0.02)
    fits = {f["arm"]: f for f in found["e50_fits"]}
    # the slope of three equally spaced points is (y_7 - y_5) / 2: at most the mean of two such count effects
    assert fits["standard"]["n"] == 3 and fits["standard"]["slope"] == pytest.approx(-0.3, abs=0.02)
    assert fits["standard"]["slope_se"] < 0.02
    assert rows[("goldfish", "a")]["e50"]["status"] == "above" and "why_not" in fits["goldfish"]
    assert fits["goldfish"]["censored"] == ["a", "b", "c"]
