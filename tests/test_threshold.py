"""The exposure threshold E50 (``goldfish.eval.threshold``): a logistic fit of exact match on log2 exposures with
its profile-likelihood interval, and the size sweep's joint model of the size effect (``scaling.size_model``).

Checked against a hand solution (two strata whose empirical logits are -ln 3 and +ln 3 meet at log2 e = 3, so
E50 = 8), against scikit-learn's logistic regression on the same outcomes one target per row and a second
implementation of the profile interval (scipy's scalar search and root finder), by simulation (the interval's
coverage of a known threshold under steep slopes, the issue's case), and at the edges: complete and
quasi-separation, the floor and the ceiling. The joint model recovers a known size effect from simulated targets.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from tolerances import U64, rounding

from goldfish.eval.stats import logistic_batch
from goldfish.eval.threshold import e50
from goldfish.experiment.summary import CellSummary

# Newton's method stops after a step below 1e-10 (eval/threshold.py); convergence is quadratic, so the coefficients
# are then within that step of the root, plus the float64 rounding of the score and the 2 x 2 solve (a few dozen
# operations on values of the coefficients' scale, <= 4 here)
NEWTON = 1e-10 + rounding(32, U64) * 4


def logistic_fit(x, successes, trials, firth: bool = True) -> dict[str, float]:
    """``logit P = intercept + slope * x`` fitted to grouped binary outcomes by ``stats.logistic_batch`` (one row)."""
    xs = np.asarray(x, dtype=np.float64)
    design = np.stack([np.ones_like(xs), xs], axis=1)
    intercept, slope = logistic_batch(
        design, np.asarray(successes, dtype=np.float64)[None, :], np.asarray(trials, dtype=np.float64), firth
    )[0]
    return {"intercept": float(intercept), "slope": float(slope)}


def test_two_symmetric_strata_put_e50_exactly_between_them():
    # 1/4 extracted at 4 exposures, 3/4 at 16: logits -ln 3 at x=2 and +ln 3 at x=4 -> x50 = 3 -> E50 = 2^3 = 8
    plain = logistic_fit([2, 4], [1, 3], [4, 4], firth=False)
    assert plain["slope"] == pytest.approx(math.log(3), rel=0, abs=NEWTON)
    assert plain["intercept"] == pytest.approx(-3 * math.log(3), rel=0, abs=NEWTON)
    found = e50([4, 16], [1, 3], [4, 4])
    # x50 = -a/b: a and b each within NEWTON moves x50 = 3 by <= NEWTON·(1 + 3)/b, and E50 = 2^x50 by 8·ln 2 times that
    e50_tol = 8 * math.log(2) * NEWTON * (1 + 3) / found["slope"]
    assert found["status"] == "interior" and found["e50"] == pytest.approx(8.0, rel=0, abs=e50_tol)
    assert found["separation"] is None and found["slope"] == pytest.approx(plain["slope"], abs=NEWTON)
    assert logistic_fit([2, 4], [1, 3], [4, 4])["slope"] < plain["slope"]  # Firth's penalty shrinks the slope


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
    lbfgs = math.sqrt(2 * 64 * 2.0**-52 / lam) + NEWTON
    assert mine["slope"] == pytest.approx(ref.coef_[0, 0], rel=0, abs=lbfgs)
    assert mine["intercept"] == pytest.approx(ref.intercept_[0], rel=0, abs=lbfgs)


def _profile_interval_by_scipy(x, k, n):
    """The 95 % profile-likelihood interval of t = -a/b by a second implementation: for each t the likelihood
    maximised over b by scipy's bounded scalar search, and the ends by Brent's root finder on the deviance."""
    from scipy.optimize import brentq, minimize_scalar

    x, k, n = (np.asarray(v, float) for v in (x, k, n))

    def loglik(b, t):
        z = b * (x - t)
        return float(np.sum(k * -np.logaddexp(0, -z) + (n - k) * -np.logaddexp(0, z)))

    def prof(t):
        return -minimize_scalar(lambda b: -loglik(b, t), bounds=(0, 50), method="bounded", options={"xatol": 1e-10}).fun

    design = np.stack([np.ones_like(x), x], axis=1)
    from goldfish.eval.stats import logistic_batch

    a, b = logistic_batch(design, k[None, :], n, firth=False)[0]
    t_hat, top = -a / b, loglik(b, -a / b)

    def dev(t):
        return 2 * (top - prof(t)) - 3.841458820694124

    return brentq(dev, t_hat - 6, t_hat, xtol=1e-10), brentq(dev, t_hat, t_hat + 6, xtol=1e-10)


def test_the_profile_interval_matches_a_second_implementation():
    exposures, k, n = [2, 8, 32, 128, 512], [1, 4, 9, 13, 15], [16] * 5  # no separation: the plain fit exists
    found = e50(exposures, k, n)
    low, high = _profile_interval_by_scipy(np.log2(exposures), k, n)
    # both solve the same equation to ~1e-9 in log2 units (bisection here, Brent there; the inner maximisation to
    # 1e-10 in b): 1e-6 leaves room for the deviance's flatness near the ends, ~1/|d dev/dt| ~ 1
    assert math.log2(found["low"]) == pytest.approx(low, abs=1e-6)
    assert math.log2(found["high"]) == pytest.approx(high, abs=1e-6)
    assert found["low"] < found["e50"] < found["high"] and found["status"] == "interior"


def test_separated_strata_report_the_identified_range_and_an_interval_containing_it():
    # the size sweep's pattern: none of the targets at x16, all at x64
    found = e50([4, 16, 64, 256], [0, 0, 16, 16], [16] * 4)
    assert found["status"] == "separated" and found["separation"] == "complete" and found["e50"] is None
    assert found["identified"] == [16.0, 64.0]
    # the interval contains the identified range (every t in it has likelihood 1); with 16 targets per stratum it
    # adds nothing beyond: a threshold below 16 gives the x16 stratum a rate >= 1/2, likelihood <= 2^-16
    assert found["low"] <= 16 * (1 + 1e-9) and found["high"] >= 64 * (1 - 1e-9)
    assert found["low_status"] == found["high_status"] == "interior"
    # fewer targets per stratum: the likelihood ratio then allows thresholds beyond the identified range
    few = e50([4, 16, 64, 256], [0, 0, 2, 2], [2] * 4)
    assert few["identified"] == [16.0, 64.0] and few["low"] < 16 and few["high"] > 64
    # one mixed stratum between separated ones (quasi-separation): its exposure is the estimate
    quasi = e50([4, 16, 64, 256], [0, 5, 16, 16], [16] * 4)
    assert quasi["separation"] == "quasi" and quasi["e50"] == 16.0 and quasi["slope"] is None
    assert quasi["low"] < 16 < quasi["high"]


def test_the_interval_covers_a_known_threshold_under_steep_slopes():
    """The issue's simulation: strata 4 / 16 / 64 / 256 of 16 targets, a steep logistic (4 logits per doubling) with
    E50 = 20 or 50. The Firth + smoothed-bootstrap interval covered the truth in 2 of 50 draws; the profile interval
    must cover it in >= 90 % (its nominal 95 %, with a sampling error of sqrt(0.95·0.05/100) = 2.2 points per
    truth: 90 % is 2.3 of them below nominal; the draws are seeded)."""
    rng = np.random.default_rng(11)
    exposures = np.array([4, 16, 64, 256])
    interval = functools.lru_cache(maxsize=None)(lambda counts: e50(exposures, list(counts), [16] * 4))
    for true, slope in ((20.0, 4.0), (50.0, 4.0), (20.0, 2.0), (50.0, 2.0)):
        p = 1 / (1 + np.exp(-slope * (np.log2(exposures) - math.log2(true))))
        covered = 0
        for _ in range(100):
            found = interval(tuple(rng.binomial(16, p).tolist()))  # 68 distinct draws of the 400: each fitted once
            low = 0.0 if found["low_status"] == "below" else (found["low"] or math.inf)
            high = math.inf if found["high_status"] == "above" else (found["high"] or 0.0)
            covered += low <= true <= high
        assert covered >= 90, (true, slope, covered)


def test_the_floor_and_the_ceiling_are_censored_not_extrapolated():
    floor = e50([2, 8, 32, 128], [0, 0, 0, 0], [8, 8, 8, 8])
    assert floor["status"] == "above" and floor["e50"] is None and floor["high_status"] == "above"
    ceiling = e50([2, 8, 32, 128], [8, 8, 8, 8], [8, 8, 8, 8])
    assert ceiling["status"] == "below" and ceiling["e50"] is None and ceiling["low_status"] == "below"
    partial = e50([2, 8, 32, 128], [0, 0, 1, 3], [8, 8, 8, 8])
    assert partial["status"] == "above"  # 3/8 at the top: half is not reached within the tested exposures
    assert partial["high_status"] == "above" and partial["low_status"] in ("interior", "above")


def test_a_mixed_top_stratum_below_half_is_censored_above_not_an_e50_there():
    # the size sweep's Goldfish runs: 1 of 8 extracted at x128, none below. The likelihood's supremum is the step
    # approaching x128 from above (P(x128) -> 1/8 as b -> inf, t -> 7+): E50 lies beyond the tested exposures, as
    # "the fitted rate below one half up to the largest exposure" says, not at 128
    strata = [4, 16, 24, 32, 48, 64, 128]
    top = e50(strata, [0, 0, 0, 0, 0, 0, 1], [8] * 7)
    assert top["status"] == "above" and top["e50"] is None and top["separation"] == "quasi"
    assert top["high_status"] == "above"
    # its mirror: 7 of 8 at the smallest exposure, all above it -> E50 below the tested range
    bottom = e50(strata, [7, 8, 8, 8, 8, 8, 8], [8] * 7)
    assert bottom["status"] == "below" and bottom["e50"] is None and bottom["low_status"] == "below"
    # a mixed stratum inside the range still gives its exposure (the step between tested strata)
    assert e50(strata, [0, 0, 1, 8, 8, 8, 8], [8] * 7)["e50"] == 24.0


def test_a_rate_that_does_not_rise_with_exposure_is_censored_by_its_level():
    # 1/8 at x16 and x32, none elsewhere: the unconstrained fit's slope is negative (scikit-learn, one row per
    # target), so b >= 0 binds and the maximum is the constant rate 2/56 < 1/2: E50 above the tested exposures
    from sklearn.linear_model import LogisticRegression

    strata, hits = [4, 16, 24, 32, 48, 64, 128], [0, 1, 0, 1, 0, 0, 0]
    rows = np.array([[math.log2(e)] for e in strata for _ in range(8)])
    y = np.array([int(i < h) for h in hits for i in range(8)])
    assert LogisticRegression(C=1e12, max_iter=10000).fit(rows, y).coef_[0, 0] < 0
    flat = e50(strata, hits, [8] * 7)
    assert flat["status"] == "above" and flat["e50"] is None and flat["slope"] == 0.0
    assert flat["high_status"] == "above"
    high = e50(strata, [8 - h for h in hits][::-1], [8] * 7)  # 54 of 56, falling: constant rate > 1/2 -> below
    assert high["status"] == "below" and high["e50"] is None
    # exactly one half, falling: no side to censor on
    assert e50([4, 16], [2, 0], [2, 2])["status"] == "none"


# ---------------------------------------------------------------- E50 vs size in the sweep's scaling block


def _cell(arm, size, params, seed, pretrained=False):
    return CellSummary(
        f"{arm}__size={size}__seed={seed}",
        arm,
        {"size": size, "seed": seed},
        params=params,
        heldout_loss=5.0,
        exposures={str(r): [r, r] for r in (2, 8, 32, 128)},
        start_model="smollm2.gguf" if pretrained else None,
    )


def test_the_joint_model_recovers_a_known_size_effect(tmp_path):
    """Targets of two seeds, each measured at three sizes (the same targets per seed), simulated from logit P = -6
    + 1.5 log2 e + 1.0 log10 params + a per-target effect: the model's size coefficient and the E50 elasticity
    -log10(2) c / b = -0.2007 it implies must come out within their cluster-bootstrap intervals' reach."""
    import json
    from types import SimpleNamespace

    from goldfish.experiment.scaling import size_model

    rng = np.random.default_rng(5)
    sizes = {"a": 1e5, "b": 1e6, "c": 1e7}
    plans, cells = [], []
    for seed in (0, 1):
        effects = rng.normal(0, 0.5, 400)
        reps = [(2, 8, 32, 128)[i % 4] for i in range(400)]
        for label, params in sizes.items():
            windows = []
            for doc, (r, u) in enumerate(zip(reps, effects)):
                p = 1 / (1 + math.exp(-(-6.0 + 1.5 * math.log2(r) + 1.0 * math.log10(params) - 5.0 + u)))
                windows.append(
                    {
                        "doc_id": f"d{doc}",
                        "split": "members",
                        "prefix_len": 16,
                        "repetitions": r,
                        "exact_match": bool(rng.random() < p),
                    }
                )
            folder = tmp_path / f"seed{seed}" / label
            folder.mkdir(parents=True)
            (folder / "results.json").write_text(json.dumps({"windows": windows}))
            plans.append(SimpleNamespace(results_file=folder / "results.json", data_dir=tmp_path / f"data{seed}"))
            cells.append(_cell("standard", label, params, seed))
    plans.append(SimpleNamespace(results_file=tmp_path / "none.json", data_dir=tmp_path / "pre"))
    cells.append(_cell("standard", "pre", 1.35e8, 0, pretrained=True))  # shown in the table, never in the model
    (model,) = size_model(plans, cells, n_bootstrap=300, seed=1)
    assert model["sizes"] == sizes and model["n_rows"] == 2 * 3 * 400 and model["n_clusters"] == 800
    c, b = model["coef"]["log10_params"], model["coef"]["log2_exposures"]
    # 2,400 rows: the coefficients' bootstrap standard errors are ~0.05-0.1; 4 of them around the truth
    assert c == pytest.approx(1.0, abs=4 * model["se"]["log10_params"])
    assert b == pytest.approx(1.5, abs=4 * model["se"]["log2_exposures"])
    el = model["derived"]["e50_elasticity"]
    assert el["value"] == pytest.approx(-math.log10(2) * c / b, rel=rounding(4, U64))
    assert el["ci_low"] < -math.log10(2) / 1.5 < el["ci_high"]
    assert [s["split"] for s in model["by_split"]] == ["data0", "data1"]
    for split in model["by_split"]:  # each seed's own size coefficient, from 1,200 rows
        assert split["ci_low"] < split["coef"] < split["ci_high"]
    # an arm that extracts nothing (Goldfish): no model, and why
    none_plans = []
    for label in sizes:
        (tmp_path / f"none_{label}.json").write_text(
            json.dumps(
                {
                    "windows": [
                        {
                            "doc_id": f"d{i}",
                            "split": "members",
                            "prefix_len": 16,
                            "repetitions": 2,
                            "exact_match": False,
                        }
                        for i in range(8)
                    ]
                }
            )
        )
        none_plans.append(SimpleNamespace(results_file=tmp_path / f"none_{label}.json", data_dir=tmp_path / "d"))
    (nothing,) = size_model(none_plans, [_cell("goldfish", s, p, 0) for s, p in sizes.items()], n_bootstrap=10)
    assert nothing["why_not"] == "0 of 24 target windows extracted: the model is not identified"
