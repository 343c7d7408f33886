"""Extraction metrics against hand-computed values and independent implementations (rouge-score, difflib)."""

from __future__ import annotations

import difflib
import random

import pytest
from rouge_score import rouge_scorer
from tolerances import U64, rounding

from goldfish.eval import metrics
from goldfish.eval.metrics import METRICS, compute_metrics

# an F-measure from integer counts, P = lcs / m, R = lcs / n, F = 2PR / (P + R), in another order of its float64
# operations: <= 5 roundings on each side
F_MEASURE = rounding(5, U64)


class _Whitespace:
    """rouge-score tokenizer that keeps tokens as they are (ids as strings, or raw words)."""

    def tokenize(self, text):
        return text.split()


SCORER = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_Whitespace())


def _rouge_ref(gen, truth) -> float:
    return SCORER.score(" ".join(map(str, truth)), " ".join(map(str, gen)))["rougeL"].fmeasure


def test_hand_computed_values():
    truth = [1, 2, 3, 4, 5, 6]
    gen = [1, 2, 9, 4, 5, 6]
    m = compute_metrics(gen, truth)
    assert m["exact_match"] is False
    assert m["token_match"] == 5 / 6  # counts over counts: one rounded division, as written here
    assert m["longest_match_prefix"] == 2
    assert m["lcs_len"] == 3  # [4, 5, 6]
    assert m["rouge_l"] == pytest.approx(5 / 6, rel=F_MEASURE, abs=0)  # LCS 5 of 6 on both sides
    assert m["edit_distance"] == 1 / 6  # one substitution
    same = compute_metrics(truth, truth)
    assert same["exact_match"] and same["token_match"] == 1 and same["longest_match_prefix"] == 6
    assert same["rouge_l"] == 1 and same["edit_distance"] == 0 and same["lcs_len"] == 6
    shifted = compute_metrics([0] + truth[:-1], truth)  # one token late: position-wise nothing matches
    assert shifted["token_match"] == 0 and shifted["longest_match_prefix"] == 0
    assert shifted["rouge_l"] == pytest.approx(5 / 6, rel=F_MEASURE, abs=0) and shifted["lcs_len"] == 5
    assert shifted["edit_distance"] == 2 / 6  # one insertion + one deletion


def test_rouge_l_matches_rouge_score_on_random_ids():
    rng = random.Random(0)
    for _ in range(200):
        truth = [rng.randrange(8) for _ in range(rng.randint(1, 20))]
        gen = [rng.randrange(8) for _ in range(rng.randint(1, 20))]
        assert metrics.rouge_l(gen, truth) == pytest.approx(_rouge_ref(gen, truth), rel=F_MEASURE, abs=0)


def test_rouge_l_words_matches_rouge_score_on_text():
    truth = "We hold these truths to be self-evident, that all men are created equal"
    gens = [
        "We hold these truths to be self-evident, that all people are equal",
        "we HOLD truths self-evident, that men are created equal and free",
        "",
        "nothing in common here",
    ]
    for gen in gens:
        ref = SCORER.score(truth, gen)["rougeL"].fmeasure
        assert metrics.rouge_l_words([], [], gen, truth) == pytest.approx(ref, rel=F_MEASURE, abs=0)
    assert metrics.rouge_l_words([], [], gens[0], truth) > 0.8


def test_rouge_l_paper_is_rouge_score_without_stemming():
    truth, gen = "The cats were running quickly.", "the cat was running quick"
    # by hand: words [the cats were running quickly] vs [the cat was running quick] (lower-cased, punctuation
    # dropped, no stemming): LCS [the, running] = 2 of 5 on both sides -> F1 = 0.4; with stemming (cats -> cat,
    # running -> run) it would be 3 of 5 -> 0.6
    assert metrics.rouge_l_paper([], [], gen, truth) == pytest.approx(0.4, rel=F_MEASURE, abs=0)
    stemmed = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(truth, gen)["rougeL"].fmeasure
    assert stemmed == pytest.approx(0.6, rel=F_MEASURE, abs=0)
    # the paper's call: evaluate's rouge with its defaults = every rouge type, use_stemmer=False
    paper = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=False)
    sample = ["We hold these truths to be self-evident, that all men are created equal", "", "Équipe 42 — won"]
    for t in sample:
        for g in sample:
            # the same rouge-score call with the same options (module docstring): the same float64 operations
            assert metrics.rouge_l_paper([], [], g, t) == paper.score(t, g)["rougeL"].fmeasure
    # case and punctuation do not count, unlike rouge_l_words
    assert metrics.rouge_l_paper([], [], "WE HOLD, these", "we hold these") == 1.0
    assert metrics.rouge_l_words([], [], "WE HOLD, these", "we hold these") < 0.5


def test_longest_common_substring_matches_difflib():
    rng = random.Random(1)
    for _ in range(200):
        a = [rng.randrange(5) for _ in range(rng.randint(0, 25))]
        b = [rng.randrange(5) for _ in range(rng.randint(0, 25))]
        ref = difflib.SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b)).size
        assert metrics.lcs_len(a, b) == ref


def test_edit_distance_against_textbook_dp():
    def lev(a, b):
        d = list(range(len(b) + 1))
        for i, x in enumerate(a, 1):
            prev, d[0] = d[0], i
            for j, y in enumerate(b, 1):
                prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (x != y))
        return d[-1]

    rng = random.Random(2)
    for _ in range(100):
        a = [rng.randrange(6) for _ in range(rng.randint(1, 15))]
        b = [rng.randrange(6) for _ in range(rng.randint(1, 15))]
        assert metrics.edit_distance(a, b) == lev(a, b) / max(len(a), len(b))  # a count over a count


def test_registry_metadata():
    generation = {n for n, m in METRICS.items() if m.fn is not None}
    assert generation == {
        "exact_match",
        "token_match",
        "longest_match_prefix",
        "rouge_l",
        "rouge_l_words",
        "rouge_l_paper",
        "lcs_len",
        "edit_distance",
    }
    assert set(compute_metrics([1], [1])) == generation  # measures of other passes are not computed here
    assert set(METRICS) - generation == {
        "onepass_exact",
        "extraction_strength",
        "onepass_token_acc",
        "suffix_logprob",
        "np_extraction",
        "beam_exact_match",
        "sample_rate",
    }
    assert not METRICS["edit_distance"].higher_is_better
    assert all(m.higher_is_better for n, m in METRICS.items() if n != "edit_distance")
    assert {n for n, m in METRICS.items() if m.aggregation == "rate"} == {
        "exact_match",
        "onepass_exact",
        "beam_exact_match",
    }
    assert METRICS["exact_match"].summary_key == "exact_match_rate" and METRICS["rouge_l"].summary_key == "rouge_l"
    with pytest.raises(ValueError):
        metrics.register_metric("exact_match", True)(lambda *a: 0)
    with pytest.raises(ValueError, match="aggregation 'median'"):
        metrics.register_metric("new_one", True, aggregation="median")(lambda *a: 0)
    assert "new_one" not in METRICS
    assert compute_metrics([1], [1], names=["token_match"]) == {"token_match": 1.0}
