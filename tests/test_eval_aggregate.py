"""Aggregation: summary numbers against hand computation and grouping."""

from __future__ import annotations

import numpy as np
import pytest

from tolerances import U64, rounding

from goldfish.eval.aggregate import group_rates, summarize
from goldfish.eval.stats import mean_interval
from goldfish.errors import UserError

F64 = rounding(10, U64)  # float64 means, standard deviations and intervals of <= 5 values: <= 10 roundings each


def window(p, r, exact, tm, rouge, onepass=None, **extra):
    w = {
        "prefix_len": p,
        "repetitions": r,
        "exact_match": exact,
        "token_match": tm,
        "rouge_l": rouge,
        "rouge_l_words": rouge,
        "longest_match_prefix": int(tm * 10),
        "edit_distance": 1 - tm,
        "onepass_exact": exact if onepass is None else onepass,
    }
    w.update(extra)
    return w


WINDOWS = [
    window(32, 1, False, 0.2, 0.3),
    window(32, 4, True, 1.0, 1.0),
    window(64, 4, True, 1.0, 1.0, onepass=False),  # one disagreement
    window(64, 0, False, 0.0, 0.1),
    window(64, None, False, 0.5, 0.5),
]


def test_summary_matches_hand_computation():
    s = summarize(WINDOWS)
    o = s["overall"]
    assert {
        "n_windows",
        "exact_match_rate",
        "exact_match_ci_low",
        "onepass_token_acc",
        "suffix_logprob",
        "np_extraction",
        "onepass_disagreements",
    } <= set(o)
    assert "beam_exact_match_rate" not in o and "sample_rate" not in o  # only with beams / samples
    assert o["n_windows"] == 5
    assert o["exact_match_rate"] == 2 / 5  # counts over a count and integer sums: exact
    assert o["token_match"] == pytest.approx((0.2 + 1 + 1 + 0 + 0.5) / 5, rel=F64, abs=0)
    assert o["rouge_l"] == pytest.approx((0.3 + 1 + 1 + 0.1 + 0.5) / 5, rel=F64, abs=0)
    assert o["longest_match_prefix"] == (2 + 10 + 10 + 0 + 5) / 5
    assert o["edit_distance"] == pytest.approx(1 - 2.7 / 5, rel=F64, abs=0)
    assert o["onepass_exact_rate"] == 1 / 5
    assert o["onepass_disagreements"] == 1
    assert list(s["by_prefix_len"]) == ["32", "64"]
    assert s["by_prefix_len"]["32"]["exact_match_rate"] == 0.5
    assert s["by_prefix_len"]["64"]["n_windows"] == 3
    assert s["by_prefix_len"]["64"]["token_match"] == 0.5  # (1 + 0 + 0.5) / 3: exact in binary
    assert list(s["by_repetitions"]) == ["0", "1", "4", "unknown"]
    assert s["by_repetitions"]["4"]["exact_match_rate"] == 1.0
    assert s["by_repetitions"]["4"]["onepass_disagreements"] == 1


def test_one_pass_measures_by_split_group_and_window_with_intervals():
    ws = [
        window(
            8,
            None,
            False,
            0.5,
            0.5,
            split="members",
            group="famous",
            window="start",
            doc_id="a",
            onepass_token_acc=0.9,
            suffix_logprob=-2.0,
            np_extraction=0.5,
            beam_exact_match=True,
            sample_rate=0.5,
        ),
        window(
            8,
            None,
            False,
            0.1,
            0.1,
            split="members",
            group="famous",
            window="end",
            doc_id="a",
            onepass_token_acc=0.7,
            suffix_logprob=-4.0,
            np_extraction=0.1,
            beam_exact_match=False,
            sample_rate=0.0,
        ),
        window(
            8,
            0,
            False,
            0.0,
            0.0,
            split="nonmembers",
            group=None,
            window="start",
            doc_id="z",
            onepass_token_acc=0.1,
            suffix_logprob=-60.0,
            np_extraction=0.0,
            beam_exact_match=False,
            sample_rate=0.0,
        ),
    ]
    s = summarize(ws)
    assert list(s["by_window"]) == ["end", "start"] and s["by_window"]["start"]["n_windows"] == 2
    assert list(s["by_split"]) == ["members", "nonmembers"]
    members = s["by_split"]["members"]
    assert members["onepass_token_acc"] == pytest.approx(0.8, rel=F64, abs=0) and members["suffix_logprob"] == -3.0
    # mean ± 1.96·s/sqrt(n): values 0.9, 0.7 -> s = sqrt(0.02), half-width 1.96 · sqrt(0.02 / 2) = 0.196 exactly
    assert members["onepass_token_acc_ci_low"] == pytest.approx(0.8 - 0.196, rel=F64, abs=0)
    assert members["onepass_token_acc_ci_high"] == pytest.approx(min(1.0, 0.8 + 0.196), rel=F64, abs=0)
    assert members["suffix_logprob_ci_high"] == pytest.approx(
        -3.0 + 1.96 * np.std([-2, -4], ddof=1) / np.sqrt(2), rel=F64, abs=0
    )
    assert members["beam_exact_match_rate"] == 0.5 and members["sample_rate"] == 0.25  # (0.5 + 0) / 2: exact
    assert list(s["by_group"]) == ["famous", "unknown"] and s["by_group"]["famous"]["np_extraction"] == 0.3
    assert [d["doc_id"] for d in s["documents"]] == ["a", "z"]  # ranked by one-pass top-1 accuracy
    assert s["documents"][0]["onepass_token_acc"] == pytest.approx(0.8, rel=F64, abs=0)
    assert s["documents"][0]["n_windows"] == 2
    assert summarize(WINDOWS)["by_group"] == {}  # no document has a group
    assert mean_interval([0.0, 0.0]) == (0.0, 0.0) and mean_interval([1.0]) == (None, None)
    assert mean_interval([0.0, 0.1], (0.0, 1.0))[0] == 0.0  # clipped to the measure's range


def test_summary_copes_with_missing_metrics_and_no_windows():
    s = summarize([{"prefix_len": 8, "repetitions": 1, "exact_match": True, "token_match": None}])
    assert s["overall"]["exact_match_rate"] == 1.0
    assert s["overall"]["token_match"] is None and s["overall"]["rouge_l"] is None
    assert s["overall"]["onepass_disagreements"] == 0
    empty = summarize([])
    assert empty["overall"]["n_windows"] == 0 and empty["overall"]["exact_match_rate"] is None
    assert empty["by_prefix_len"] == {}


def test_group_rates_single_and_multiple_fields():
    assert group_rates(WINDOWS, "prefix_len", "exact_match") == {32: 0.5, 64: 1 / 3}  # counts over counts
    rates = group_rates(WINDOWS, ("prefix_len", "repetitions"), "token_match")
    assert list(rates) == [(32, 1), (32, 4), (64, 0), (64, 4), (64, None)]
    assert rates[(64, None)] == 0.5
    rows = [{"arm": "a", "m": 1.0}, {"arm": "a", "m": None}, {"arm": "b", "m": 3.0}, {"arm": "a", "m": 2.0}]
    assert group_rates(rows, "arm", "m") == {"a": 1.5, "b": 3.0}
    with pytest.raises(UserError):
        group_rates(rows, (), "m")
