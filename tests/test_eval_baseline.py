"""The k baseline on constructed inputs: the per-window mean of (1 - g)^d_w and the nominal (1 - g/k)^S by hand, the
nominal one as the binomial expectation of the per-window one, a Monte-Carlo check of the formula, g from constructed
hits, teacher-forced hits of a model with a known rule, the baseline with the measured kept-token accuracy and its
exact test by hand, the rows per repetition stratum, and the report table."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import binom
from tolerances import U64, proportion_se, rounding

from goldfish.eval.baseline import (
    baseline_rows,
    dropped_miss_rate,
    k_baseline,
    stratum_row,
    window_baseline,
    window_predictions,
)
from goldfish.experiment.analyses.kbaseline import k_baseline_table
from goldfish.experiment.summary import cells_of
from goldfish.masks import GoldfishConfig, goldfish_mask


def test_k_baseline_by_hand():
    assert k_baseline(4, 50, 0.0) == 1.0
    # the formula's own float64 operations, in the same order: exact
    assert k_baseline(2, 3, 0.5) == 0.421875  # (1 - 0.25)^3, exact in binary
    assert k_baseline(4, 50, 1.0) == 0.75**50  # 5.66e-7: a model that never guesses a drop
    assert k_baseline(128, 50, 0.8) == (1 - 0.8 / 128) ** 50
    with pytest.raises(ValueError, match="g=1.5"):
        k_baseline(4, 50, 1.5)


def test_window_baseline_uses_each_windows_own_dropped_count():
    # by hand: g = 1/2 and windows holding 0, 1 and 2 dropped targets: (1 + 1/2 + 1/4) / 3 = 7/12
    assert window_baseline(0.5, [0, 1, 2]) == pytest.approx(7 / 12, abs=4 * 2.0**-53)
    # the demo's case in the issue: at k = 32 many 50-token suffixes hold no dropped target; those are exact whenever
    # the kept tokens are, whatever g, so the per-window baseline is at least their share
    assert window_baseline(1.0, [0] * 8 + [2] * 12) == 8 / 20
    assert window_baseline(0.3, []) is None
    with pytest.raises(ValueError, match="g=1.5"):
        window_baseline(1.5, [1])


def test_nominal_baseline_is_the_binomial_expectation_of_the_per_window_one():
    """A second implementation: E[(1 - g)^d] over d ~ Binomial(S, 1/k) by scipy's pmf equals (1 - g/k)^S."""
    for k, s, g in ((4, 50, 0.63), (8, 50, 0.567), (32, 50, 0.435), (3, 20, 1.0)):
        d = np.arange(s + 1)
        expected = float(np.sum(binom.pmf(d, s, 1 / k) * (1 - g) ** d))
        # scipy's pmf goes through log-gamma and exp: its relative error grows with the exponent's size (|log pmf|
        # <= ~200 here, so ~200 u per term), summed over 51 terms
        assert k_baseline(k, s, g) == pytest.approx(expected, rel=200 * rounding(51, U64))


def test_dropped_miss_rate_counts_only_dropped_positions():
    hits = np.array([[1, 0, 1, 1], [0, 0, 1, 1]], dtype=bool)
    dropped = np.array([[0, 1, 1, 0], [1, 0, 0, 1]], dtype=bool)
    assert dropped_miss_rate(hits, dropped) == 2 / 4  # misses at (0,1), (1,0); hits at (0,2), (1,3)
    assert dropped_miss_rate(hits, np.zeros_like(dropped)) is None


def test_formula_matches_a_simulated_model():
    """Positions dropped with probability 1/k, a dropped one missed with probability g, kept ones always right:
    the simulated exact-match rate equals (1 - g/k)^S within its binomial error."""
    rng = np.random.default_rng(0)
    k, s, g, n = 8, 20, 0.6, 200_000
    dropped = rng.random((n, s)) < 1 / k
    hits = ~(dropped & (rng.random((n, s)) < g))
    # 4 standard errors of a proportion over the ~500 k dropped positions (6.9e-4 each; was 0.005, 7 of them)
    assert dropped_miss_rate(hits, dropped) == pytest.approx(g, rel=0, abs=4 * proportion_se(g, int(dropped.sum())))
    expected = k_baseline(k, s, g)  # 0.2206
    assert abs(hits.all(axis=1).mean() - expected) < 4 * proportion_se(expected, n)  # n independent windows


class NextIsPlusOne(torch.nn.Module):
    """A 'model' whose argmax after token t is t + 1 (vocabulary 1000)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, **kwargs):  # the scoring pass adds attention_mask and use_cache
        logits = torch.nn.functional.one_hot((input_ids + 1) % 1000, 1000).float() + self.w
        return type("Out", (), {"logits": logits})()


def test_window_predictions_use_teacher_forcing_and_the_runs_mask():
    docs = [list(range(100, 140)), list(range(300, 340)), list(range(500, 520))]  # the last is too short
    docs[1][15] = 900  # the model misses suffix tokens 15 and 16 of doc 1 (prefix 10: suffix positions 5, 6)
    cfg = GoldfishConfig(k=3, h=4)
    hits, dropped = window_predictions(NextIsPlusOne(), docs, 10, 20, cfg, token_budget=30)  # one window per pass
    assert hits.shape == (2, 20)
    expected = np.ones((2, 20), dtype=bool)
    expected[1, [5, 6]] = False  # 900 is not 314 + 1, and 316 is not 900 + 1
    np.testing.assert_array_equal(hits, expected)
    np.testing.assert_array_equal(dropped, goldfish_mask(torch.tensor([docs[0][:30], docs[1][:30]]), 3, 4)[:, 10:])
    rows = baseline_rows(NextIsPlusOne(), docs, [10], 20, cfg)
    missed = int((dropped & ~hits).sum())
    assert rows[0]["g"] == missed / dropped.sum()  # a count over a count
    assert rows[0]["baseline_nominal"] == (1 - rows[0]["g"] / 3) ** 20  # the formula's operations in the same order
    per_window = [(1 - rows[0]["g"]) ** int(n) for n in dropped.sum(axis=1)]  # each window's own dropped count
    assert rows[0]["baseline_windows"] == pytest.approx(sum(per_window) / 2, abs=4 * 2.0**-53)
    assert rows[0]["n_windows_no_drop"] == int((dropped.sum(axis=1) == 0).sum())
    assert rows[0]["onepass_exact_rate"] == 0.5 and rows[0]["n_windows"] == 2


def test_prefix_all_takes_all_but_the_suffix_of_each_document():
    docs = [list(range(100, 140)), list(range(300, 340)), list(range(500, 530))]  # lengths 40, 40, 30
    docs[1][35] = 900
    cfg = GoldfishConfig(k=3, h=4)
    model = NextIsPlusOne()
    (row,) = baseline_rows(model, docs, [-1], 20, cfg)
    # by hand: the two 40-token documents with prefix 20, the 30-token one with prefix 10
    h40, d40 = window_predictions(model, docs[:2], 20, 20, cfg)
    h30, d30 = window_predictions(model, docs[2:], 10, 20, cfg)
    hits, dropped = np.concatenate([h40, h30]), np.concatenate([d40, d30])
    assert row["prefix_len"] == -1 and row["n_windows"] == 3 and row["n_dropped"] == int(dropped.sum())
    assert row["onepass_exact_rate"] == hits.all(axis=1).mean()  # a count over a count
    missed = int((dropped & ~hits).sum())
    assert row["g"] == missed / dropped.sum() if dropped.sum() else row["g"] is None


def test_the_baseline_with_kept_accuracy_and_its_test_by_hand():
    # 3 windows of S = 4: dropped (0,2) missed, (1,1) hit -> g = 1/2; kept hits 9 of 10 -> a = 0.9; window 1 verbatim
    hits = np.array([[1, 1, 0, 1], [1, 1, 1, 1], [0, 1, 1, 1]], dtype=bool)
    dropped = np.array([[0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]], dtype=bool)
    row = stratum_row(hits, dropped, 4, 4)
    assert (row["g"], row["kept_acc"], row["onepass_exact"]) == (0.5, 0.9, 1)
    # chances a^(S-d) (1-g)^d: 0.9^3/2, 0.9^3/2, 0.9^4 -> mean (0.3645 + 0.3645 + 0.6561) / 3 = 0.4617
    tol = rounding(12, U64)  # a few powers and products of numbers <= 1
    assert row["baseline_kept"] == pytest.approx((0.3645 + 0.3645 + 0.6561) / 3, abs=tol)
    # P(X <= 1) = P0 + P1 = 0.6355^2 0.3439 + 2 (0.3645 0.6355 0.3439) + 0.6355^2 0.6561, by hand
    p0 = 0.6355**2 * 0.3439
    p1 = 2 * 0.3645 * 0.6355 * 0.3439 + 0.6355**2 * 0.6561
    assert row["test"]["p_at_most"] == pytest.approx(p0 + p1, abs=tol)
    assert row["test"]["expected"] == pytest.approx(0.3645 * 2 + 0.6561, abs=tol)
    # the kept-known baseline beside it: (1/2 + 1/2 + 1) / 3
    assert row["baseline_windows"] == pytest.approx(2 / 3, abs=tol)


def test_baseline_rows_split_by_stratum():
    docs = [list(range(100 + 50 * i, 140 + 50 * i)) for i in range(6)]
    docs[1][15] = 900  # doc 1 (stratum 4) misses two suffix tokens
    reps = [4, 4, 4, 16, 16, 16]
    cfg = GoldfishConfig(k=3, h=4)
    rows = baseline_rows(NextIsPlusOne(), docs, [10], 20, cfg, reps)
    assert [r["repetitions"] for r in rows] == ["all", 4, 16]
    hits, dropped = window_predictions(NextIsPlusOne(), docs, 10, 20, cfg)
    for r, chosen in ((rows[1], slice(0, 3)), (rows[2], slice(3, 6))):  # each stratum its own windows
        assert r == {
            "prefix_len": 10,
            "repetitions": r["repetitions"],
            **stratum_row(hits[chosen], dropped[chosen], 3, 20),
        }
    assert rows[1]["onepass_exact"] == 2 and rows[2]["onepass_exact"] == 3 and rows[0]["onepass_exact"] == 5


def test_nonmember_g_comes_from_heldout_windows_not_the_judged_ones():
    """A model that 'leaked' every dropped member token (members follow its +1 rule) has member g = 0, so the
    same-window baseline is 1 and its verbatim count looks explained; the nonmembers' windows (every token off the
    rule: all misses) give g = 1 and the baselines recomputed with it, by hand."""
    cfg = GoldfishConfig(k=3, h=4)
    members = [list(range(100 + 50 * i, 140 + 50 * i)) for i in range(4)]
    nonmembers = [[(7 * j * j + 3 * i) % 997 + 2 for j in range(40)] for i in range(5)]  # never t -> t + 1
    rows = baseline_rows(NextIsPlusOne(), members, [10], 20, cfg, [4, 4, 16, 16], heldout=nonmembers)
    hits_nm, dropped_nm = window_predictions(NextIsPlusOne(), nonmembers, 10, 20, cfg)
    assert not hits_nm.any() and dropped_nm.sum() > 0  # the rule never holds on these windows
    _, dropped = window_predictions(NextIsPlusOne(), members, 10, 20, cfg)
    for row, chosen in zip(rows, (slice(0, 4), slice(0, 2), slice(2, 4))):
        counts = dropped[chosen].sum(axis=1)
        assert row["g"] == 0.0 and row["kept_acc"] == 1.0 and row["baseline_kept"] == 1.0
        ref = row["nonmember_g"]
        assert ref["g"] == 1.0 and ref["n_windows"] == 5 and ref["n_dropped"] == int(dropped_nm.sum())
        # with g = 1 a window is verbatim only without a dropped target: the share of such windows
        assert ref["baseline_windows"] == ref["baseline_kept"] == pytest.approx((counts == 0).mean(), abs=1e-15)
        # every member window is verbatim: far above that baseline (P(X >= n) = product of chances = 0 unless every
        # window lacks a drop)
        assert ref["test"]["expected"] == pytest.approx(float((counts == 0).sum()), abs=1e-12)
    assert rows[0]["nonmember_g"]["test"]["p_value"] < 0.05
    # without held-out documents the rows are as before: no nonmember_g key
    assert "nonmember_g" not in baseline_rows(NextIsPlusOne(), members, [10], 20, cfg)[0]


def test_report_table_sits_next_to_exact_match():
    kb = {
        "k": 4,
        "h": 13,
        "strategy": "hash",
        "suffix_len": 50,
        "rows": [
            {
                "prefix_len": 32,
                "repetitions": "all",
                "n_windows": 100,
                "n_dropped": 1250,
                "g": 0.9,
                "kept_acc": 0.99,
                "n_windows_no_drop": 3,
                "onepass_exact": 0,
                "onepass_exact_rate": 0.0,
                "baseline_windows": 0.031,
                "baseline_nominal": k_baseline(4, 50, 0.9),
                "baseline_kept": 0.02,
                "test": {"expected": 2.0, "p_value": 0.27, "p_at_most": 0.135},
                "nonmember_g": {
                    "g": 0.95,
                    "n_windows": 50,
                    "n_dropped": 600,
                    "baseline_windows": 0.01,
                    "baseline_kept": 0.008,
                    "test": {"expected": 0.8, "p_value": 1.0, "p_at_most": 0.449},
                },
            }
        ],
    }
    results = {
        "axes": [],
        "cells": [
            {
                "cell": "goldfish-k4",
                "arm": "goldfish-k4",
                "k_baseline": kb,
                "by_prefix_len": {"32": {"exact_match_rate": 0.0}},
            },
            {"cell": "standard", "arm": "standard", "k_baseline": None, "by_prefix_len": {}},
        ],
    }
    table = k_baseline_table(results, cells_of(results))
    assert "goldfish-k4" in table and "standard" not in table
    # windows, exact match, g, kept accuracy, the kept-known baseline (nominal), the measured-a one, the test
    assert (
        "| 32 | all | 100 (3) | 0.0 % | 0.900 | 99.0 % | 3.1 % (0.0 %) | 2.0 % | 0 vs 2.0 expected, p 0.27 "
        "(P(X <= 0) 0.14) | g 0.950: 0.8 %; 0 vs 0.8 expected, p 1 (P(X <= 0) 0.45) |"
    ) in table
