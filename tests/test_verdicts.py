"""The verdict rule (eval/verdicts.py) and the exact trend test (eval/stats/exact.py), against hand cases and a
second implementation."""

from __future__ import annotations

import itertools
import math

import pytest
from scipy.stats import fisher_exact

from goldfish.eval.stats import exact_trend
from goldfish.eval.verdicts import EQUIVALENT, INCONCLUSIVE, NOT_SHOWN, NOT_TESTED, QUESTIONS, p_verdict, verdict


def test_the_rule_in_its_order():
    assert verdict("cost", 0.03, 0.21, 5) == "cost"
    assert verdict("cost", -0.21, -0.03, 5) == "gain"
    assert verdict("cost", -0.01, 0.21, 5) == "no cost detected"
    assert verdict("leak", 0.001, 0.02, 5) == "leak detected"
    assert verdict("leak", 0.001, 0.02, 5, valid=False) == INCONCLUSIVE  # the placebo failed: no reading
    assert verdict("leak", 0.001, 0.02, 1) == NOT_TESTED  # one run: no interval over runs
    assert verdict("difference", None, None, 5) == NOT_TESTED
    # a margin stated: the 90 % interval decides, whatever the 95 % one says
    assert verdict("difference", -0.026, 0.000, 5, margin=0.05, ci90_low=-0.024, ci90_high=-0.002) == EQUIVALENT
    assert verdict("difference", -0.19, -0.01, 5, margin=0.10, ci90_low=-0.17, ci90_high=-0.03) == NOT_SHOWN
    assert verdict("difference", -0.02, 0.02, 5, margin=0.01, ci90_low=-0.015, ci90_high=0.015) == NOT_SHOWN
    # an interval that touches 0 does not exclude it
    assert verdict("difference", 0.0, 0.3, 5) == QUESTIONS["difference"].none


def test_the_p_value_form():
    assert p_verdict("trend", 0.0019, 13.0) == "rising"
    assert p_verdict("trend", 0.0019, -13.0) == "falling"
    assert p_verdict("trend", 0.2, 13.0) == "no trend detected"
    assert p_verdict("trend", None, 1.0) == NOT_TESTED


def _brute(events, trials):
    """Every table with the observed margins, weighted by its hypergeometric probability: P(T >= t)."""
    total = sum(events)
    t_obs = sum(i * k for i, k in enumerate(events))
    num = den = 0
    for ks in itertools.product(*(range(n + 1) for n in trials)):
        if sum(ks) != total:
            continue
        w = math.prod(math.comb(n, k) for n, k in zip(trials, ks))
        den += w
        if sum(i * k for i, k in enumerate(ks)) >= t_obs:
            num += w
    return num / den


@pytest.mark.parametrize(
    "events, trials", [([0, 1, 3], [6, 6, 6]), ([2, 0, 1, 2], [4, 5, 3, 4]), ([0, 0, 2], [5, 5, 5])]
)
def test_exact_trend_is_the_enumeration(events, trials):
    assert exact_trend(events, trials)["p_greater"] == pytest.approx(_brute(events, trials), rel=1e-9)


def test_two_groups_is_fishers_exact_test():
    p = exact_trend([1, 6], [10, 10])["p_greater"]
    assert p == pytest.approx(fisher_exact([[6, 4], [1, 9]], alternative="greater").pvalue, rel=1e-9)


def test_the_size_sweeps_goldfish_counts():
    # issue 53: 0/0/2/3/5 of 280 windows from the smallest size up; the penalised slope read it as no trend
    r = exact_trend([0, 0, 2, 3, 5], [280] * 5)
    assert r["statistic"] == 33 and r["expected"] == pytest.approx(20.0)
    assert 0.001 < r["p_greater"] < 0.003 and r["p_value"] == pytest.approx(2 * r["p_greater"], rel=0.05)
    assert exact_trend([0, 0, 0], [10, 10, 10])["p_value"] == 1.0  # no event: nothing to test
    with pytest.raises(ValueError):
        exact_trend([3], [2])
