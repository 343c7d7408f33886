"""Run-level statistics (eval/stats/runs.py, issue 38) against a second implementation (scipy, statsmodels), and two
simulations of the designs they read: the size sweep (5 sizes, 5 seeds, a per-run logit shift of SD 1) and the
seed-level equivalence test at its margin when seeds disagree."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from goldfish.eval.stats import logistic_batch, replicate_tost
from goldfish.eval.stats import minimum_detectable_effect, slope_over_runs
from goldfish.eval.stats import run_logits, size_effect_over_runs, size_slope_over_runs, t_over_runs


def _statsmodels():
    """statsmodels (the test extra) as the second implementation: (statsmodels.api, its formula api, pandas)."""
    return (
        pytest.importorskip("statsmodels.api"),
        pytest.importorskip("statsmodels.formula.api"),
        pytest.importorskip("pandas"),
    )


# the size sweep's design (experiments/size_sweep.yaml): five sizes, seven exposure strata of eight targets
PARAMS = np.log10([0.9e6, 1.5e6, 4.2e6, 12.2e6, 44.9e6])
EXPOSURES = np.log2([4, 16, 24, 32, 48, 64, 128])
TARGETS = 8


def test_t_over_runs_is_scipys_one_sample_t():
    x = [0.3, -0.1, 0.5, 0.2, 0.05]
    found = t_over_runs(x)
    ref = sps.ttest_1samp(x, 0.0)
    low, high = ref.confidence_interval(0.95)
    assert found["p_value"] == pytest.approx(ref.pvalue, rel=1e-12)
    assert (found["ci_low"], found["ci_high"]) == pytest.approx((low, high), rel=1e-12)
    assert found["sd"] == pytest.approx(np.std(x, ddof=1)) and found["df"] == 4
    one = t_over_runs([0.3, None, float("nan")])
    assert one["n"] == 1 and one["ci_low"] is None and one["sd"] is None  # one run cannot say how runs differ


def test_slope_over_runs_is_each_runs_linregress_then_a_t_over_runs():
    x = [[0.0, 0.05, 0.1, 0.25], [0.0, 0.05, 0.1, 0.25], [0.0, 0.06, 0.1, 0.24]]
    y = [[0.01, 0.02, 0.05, 0.09], [-0.01, 0.03, 0.02, 0.1], [0.0, 0.01, None, 0.07]]  # a missing point
    found = slope_over_runs(x, y)
    fits = [
        sps.linregress(x[0], y[0]),
        sps.linregress(x[1], y[1]),
        sps.linregress([0.0, 0.06, 0.24], [0.0, 0.01, 0.07]),
    ]
    assert found["per_run"] == pytest.approx([f.slope for f in fits], rel=1e-12)
    assert found["intercept"] == pytest.approx(np.mean([f.intercept for f in fits]), rel=1e-12)
    ref = sps.ttest_1samp([f.slope for f in fits], 0.0)
    assert found["p_value"] == pytest.approx(ref.pvalue, rel=1e-12) and found["n"] == 3 and found["df"] == 2
    assert slope_over_runs([[0.1, 0.1]], [[1.0, 2.0]])["per_run"] == [None]  # one dose: no slope


def test_the_minimum_detectable_effect_over_runs_uses_students_quantiles():
    assert minimum_detectable_effect(1.0) == pytest.approx(1.959964 + 0.841621, abs=1e-6)
    assert minimum_detectable_effect(0.5, df=4) == pytest.approx(0.5 * (2.776445 + 0.940965), abs=1e-6)
    assert minimum_detectable_effect(1.0, df=0) is None and minimum_detectable_effect(None, df=4) is None


def _windows(k: np.ndarray, size_index: np.ndarray, reads: np.ndarray, n: int):
    """Per-window 0/1 rows of grouped counts (k successes of n per group)."""
    y, x_size, x_reads = [], [], []
    for kk, j, r in zip(k, size_index, reads):
        y += [1] * int(kk) + [0] * (n - int(kk))
        x_size += [j] * n
        x_reads += [r] * n
    return np.asarray(y), np.asarray(x_size), np.asarray(x_reads)


def test_run_logits_are_statsmodels_logit_without_the_penalty():
    """Stage 1 by maximum likelihood (no separation in these counts) is statsmodels' Logit with size as a factor."""
    sm, _, _ = _statsmodels()
    size_index = np.repeat(np.arange(3), 4)
    reads = np.tile(np.log2([4, 16, 32, 64]), 3)
    k = np.array([1, 2, 4, 6, 2, 3, 5, 7, 3, 5, 6, 7])
    alpha, se, b = run_logits(k[None, :], np.full(12, 8), size_index, reads, 3, firth=False)
    y, xs, xr = _windows(k, size_index, reads, 8)
    design = np.column_stack([(xs[:, None] == np.arange(3)[None, :]).astype(float), xr])
    ref = sm.Logit(y, design).fit(disp=0)
    assert alpha[0] == pytest.approx(ref.params[:3], rel=1e-6)
    assert b[0] == pytest.approx(ref.params[3], rel=1e-6)
    assert se[0] == pytest.approx(ref.bse[:3], rel=1e-5)


def test_stage_two_is_statsmodels_ols_and_its_f_test():
    _, smf, pd = _statsmodels()
    rng = np.random.default_rng(3)
    logits = -2 + 1.5 * (PARAMS[None, :] - 6.6) + rng.normal(0, 0.8, (4, 5)) + rng.normal(0, 1, (4, 1))
    logits[2, 4] = np.nan  # one run missing
    found = size_slope_over_runs(logits, PARAMS)
    seed, size = np.nonzero(np.isfinite(logits))
    frame = pd.DataFrame(
        {"y": logits[seed, size], "seed": seed.astype(str), "size": size.astype(str), "x": PARAMS[size]}
    )
    linear = smf.ols("y ~ C(seed) + x", data=frame).fit()
    factor = smf.ols("y ~ C(seed) + C(size)", data=frame).fit()
    run = found["run_level"]
    assert run["slope"] == pytest.approx(linear.params["x"], rel=1e-9)
    assert run["se"] == pytest.approx(linear.bse["x"], rel=1e-9)
    assert (run["ci_low"], run["ci_high"]) == pytest.approx(tuple(linear.conf_int().loc["x"]), rel=1e-9)
    assert run["between_run_sd"] == pytest.approx(math.sqrt(factor.mse_resid), rel=1e-9)
    f_stat, p, df1 = factor.compare_f_test(linear)
    lin = found["linearity"]
    assert (lin["F"], lin["p_value"], lin["df1"], lin["df2"]) == pytest.approx((f_stat, p, df1, factor.df_resid))
    slopes = [np.polyfit(PARAMS[np.isfinite(r)], r[np.isfinite(r)], 1)[0] for r in logits]  # by hand: per seed
    assert [s["slope"] for s in found["per_seed"]] == pytest.approx(slopes, rel=1e-9)
    assert found["two_stage"]["mean"] == pytest.approx(np.mean(slopes), rel=1e-12)
    assert found["two_stage"]["sd"] == pytest.approx(np.std(slopes, ddof=1), rel=1e-12)


def test_from_windows_is_the_two_stages_and_keeps_the_per_run_table():
    _, smf, pd = _statsmodels()
    rng = np.random.default_rng(1)
    size_index, reads = np.repeat(np.arange(5), 7), np.tile(EXPOSURES, 5)
    k = rng.binomial(TARGETS, 1 / (1 + np.exp(-(reads - 5 + 2 * (PARAMS[size_index] - 6.6)))), (3, 35))
    y, xs, xr, seeds = [], [], [], []
    for s in range(3):
        a, b, c = _windows(k[s], size_index, reads, TARGETS)
        y.append(a)
        xs.append(PARAMS[b])
        xr.append(c)
        seeds += [f"seed{s}"] * len(a)
    found = size_effect_over_runs(np.concatenate(y), np.concatenate(xr), np.concatenate(xs), seeds)
    alpha, _, _ = run_logits(k, np.full(35, TARGETS), size_index, reads, 5)
    direct = size_slope_over_runs(alpha, PARAMS)
    assert found["two_stage"]["mean"] == pytest.approx(direct["two_stage"]["mean"], rel=1e-8)
    assert len(found["runs"]) == 15 and found["seeds"] == ["seed0", "seed1", "seed2"]
    assert [r["exact"] for r in found["runs"][:5]] == [int(k[0, size_index == j].sum()) for j in range(5)]
    assert size_effect_over_runs([1, 0], [2.0, 2.0], [6.0, 6.0], ["0", "0"])["why_not"] == "1 size(s)"
    # the window-level likelihood-ratio test of log-linearity: statsmodels' Logit, factor vs linear, per seed, summed
    frame = pd.DataFrame({"y": np.concatenate(y), "x": np.concatenate(xs), "reads": np.concatenate(xr), "seed": seeds})
    lr = 0.0
    for _, part in frame.groupby("seed"):
        factor = smf.logit("y ~ 0 + C(x) + reads", data=part).fit(disp=0)
        linear = smf.logit("y ~ x + reads", data=part).fit(disp=0)
        lr += 2 * (factor.llf - linear.llf)
    within = found["linearity_within_runs"]
    assert within["df"] == 3 * 3 and within["LR"] == pytest.approx(lr, rel=1e-6)
    assert within["p_value"] == pytest.approx(sps.chi2.sf(lr, 9), rel=1e-6)


def _size_sweep(n_sims: int, n_seeds: int, c: float, shift_sd: float, seed: int):
    """Exact-match counts (n_sims, n_seeds, 35) of the size sweep's design: logit = (log2 e - 5) + c (log10 N - 6.6)
    + the run's shift ~ N(0, shift_sd), one shift per (seed, size) -- every target of a run shares it."""
    rng = np.random.default_rng(seed)
    size_index, reads = np.repeat(np.arange(5), 7), np.tile(EXPOSURES, 5)
    shift = rng.normal(0.0, shift_sd, (n_sims, n_seeds, 5))[:, :, size_index]
    logit = (reads - 5.0) + c * (PARAMS[size_index] - 6.6) + shift
    return rng.binomial(TARGETS, 1 / (1 + np.exp(-logit))), size_index, reads


def test_the_size_effects_interval_covers_under_a_per_run_shift():
    """Issue 38's done-when: the size sweep's design, 5 seeds, a per-run logit shift of SD 1. The reported interval
    (two-stage: per-seed slope, t over seeds) covers the true slope >= 90 % of the time (nominal 95 %); the window
    -level interval that treats each model as fixed (one pooled logistic regression, Wald) does not, so the
    simulation can tell the two apart. 600 simulated sweeps: the coverage's Monte-Carlo SE is ~0.009."""
    n_sims, n_seeds, c = 600, 5, 3.0
    k, size_index, reads = _size_sweep(n_sims, n_seeds, c, 1.0, seed=38)
    alpha, _, _ = run_logits(k.reshape(-1, 35), np.full(35, TARGETS), size_index, reads, 5)
    alpha = alpha.reshape(n_sims, n_seeds, 5)
    covered = 0
    for i in range(n_sims):
        t = size_slope_over_runs(alpha[i], PARAMS)["two_stage"]
        covered += t["ci_low"] <= c <= t["ci_high"]
    assert covered / n_sims >= 0.90
    # the window-level reading of the same sweeps: ONE logistic regression over every seed's windows, Wald interval
    design = np.tile(np.column_stack([np.ones(35), reads, PARAMS[size_index]]), (n_seeds, 1))
    pooled = k.reshape(n_sims, -1)
    beta = logistic_batch(design, pooled, np.full(design.shape[0], TARGETS), firth=False)
    p = 1 / (1 + np.exp(-(beta @ design.T)))
    info = np.einsum("si,bs,sj->bij", design, TARGETS * p * (1 - p), design)
    se = np.sqrt(np.linalg.inv(info)[:, 2, 2])
    window_level = np.mean(np.abs(beta[:, 2] - c) <= 1.96 * se)
    assert window_level < 0.85


@pytest.mark.parametrize("n_seeds", [3, 5])
def test_the_seed_level_equivalence_test_keeps_its_level_when_seeds_disagree(n_seeds):
    """Issue 38's done-when: replicate_tost at the margin (true mean difference = +margin, then -margin) with seeds
    that disagree -- a between-seed SD of 0.02 AUC plus within-run noise whose SD differs by seed -- declares
    equivalence at most 5 % of the time (+ 3 Monte-Carlo SEs)."""
    rng = np.random.default_rng(n_seeds)
    margin, n_sims = 0.05, 2000
    within = np.linspace(0.005, 0.02, n_seeds)
    slack = 3 * math.sqrt(0.05 * 0.95 / n_sims)
    for truth in (margin, -margin):
        values = truth + rng.normal(0, 0.02, (n_sims, n_seeds)) + rng.normal(0, 1, (n_sims, n_seeds)) * within
        rejected = np.mean([bool(replicate_tost(v, margin)["equivalent"]) for v in values])
        assert rejected <= 0.05 + slack
    inside = rng.normal(0, 0.02, (500, n_seeds)) + rng.normal(0, 1, (500, n_seeds)) * within
    assert np.mean([bool(replicate_tost(v, margin)["equivalent"]) for v in inside]) > 0.2  # it can say yes


def test_the_size_section_reads_the_size_effect_across_runs(monkeypatch):
    """sections/size.py: a cell is a run, its seed its value on the axes other than size and the tuned one; the
    report shows the log-linearity test, the t interval over seeds and the per-run table."""
    from types import SimpleNamespace

    from goldfish.experiment.sections import size as section

    k, size_index, reads = _size_sweep(1, 3, 3.0, 1.0, seed=5)
    labels = [4, 16, 24, 32, 48, 64, 128]
    counted = []
    for s in range(3):
        for j, params in enumerate(PARAMS):
            windows = [
                {"repetitions": r, "exact_match": t < k[0, s, j * 7 + e]}
                for e, r in enumerate(labels)
                for t in range(TARGETS)
            ]
            cell = SimpleNamespace(
                arm="standard",
                start_model=None,
                params=10**params,
                values={"size": f"s{j}", "lr": "0.003", "seed": str(s)},
                exposures={str(r): [r, r] for r in labels},
            )
            counted.append((SimpleNamespace(windows=windows), cell))
    control = SimpleNamespace(arm="control", start_model=None, params=1e6, values={}, exposures={})
    counted.append((SimpleNamespace(windows=[]), control))
    monkeypatch.setattr(section, "first_prefix_windows", lambda plan: plan.windows)
    found = section.size_runs(counted, ["size", "lr", "seed"], "lr")
    assert [m["arm"] for m in found] == ["standard"] and found[0]["seeds"] == ["seed=0", "seed=1", "seed=2"]
    alpha, _, _ = run_logits(k[0], np.full(35, TARGETS), size_index, reads, 5)
    assert found[0]["two_stage"]["mean"] == pytest.approx(size_slope_over_runs(alpha, PARAMS)["two_stage"]["mean"])
    text = "\n".join(section.size_runs_markdown(found))
    assert "95 % t over seeds" in text and "(t, 2 df)" in text and "within-run detail" in text
    assert text.count("| standard | seed=") == 15  # one row per run
    assert section.replicate_of(counted[0][1], ["size", "lr"], "lr") == "-"


def test_the_size_section_says_when_log_linearity_is_rejected():
    from goldfish.experiment.sections import size as section

    logits = np.array([[-3.0, 1.0, -2.0, 2.0, 0.0], [-3.1, 0.9, -2.1, 2.2, 0.1], [-2.9, 1.1, -1.9, 1.9, -0.1]])
    found = {
        "arm": "standard",
        **size_slope_over_runs(logits, PARAMS),
        "runs": [],
        "per_seed": [{"seed": f"seed={i}", "slope": 0.0} for i in range(3)],
    }
    assert found["linearity"]["p_value"] < 0.001
    assert "log-linearity rejected" in "\n".join(section.size_runs_markdown([found]))
