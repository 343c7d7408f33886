"""Secret-Sharer canaries and validation documents in prepared data, and the rank-based exposure of a canary.

Data: every canary occurs in the packed rows exactly as often as its label, whole within one row, built from
non-special ids only; adding canaries or validation documents leaves members and nonmembers unchanged; a
background-only control keeps the same canaries without training on them. Exposure: the rank and exposure of
constructed candidate sets, by hand (full space and sampled), the skew-normal extrapolation against the normal
tail it should recover, and the scores of a real model against a second, direct computation of the ranking.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from reference_rows import occurrences
from tolerances import U32, U64, llama_terms, rounding, scaled
from train_helpers import word_corpus
import torch

from goldfish.config import from_dict
from goldfish.data import PrepareConfig, load_prepared, prepare
from goldfish.data.canaries import canary_alphabet
from goldfish.errors import ConfigError
from goldfish.eval.canaries import canary_exposures, enumerated_perplexities, rank_exposure, sampled_secrets, space_bits


def _recipe(root, **extra) -> dict:
    return {
        "name": "can",
        "source": {"name": "local", "path": str(root / "docs.jsonl")},
        "tokenizer": {"name": "bpe", "vocab_size": 300},
        "seq_len": 48,
        "packing": "pack",
        "min_tokens": 8,
        "doc_tokens": 20,
        "num_members": 12,
        "repetitions": [1, 2, 3],
        "nonmember_mode": "random_split",
        "num_nonmembers": 6,
        "num_background": 10,
        **extra,
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("can")
    word_corpus(root / "docs.jsonl", 60, 60, seed=2)
    return root


@pytest.fixture(scope="module")
def with_canaries(corpus):
    cfg = from_dict(
        PrepareConfig, _recipe(corpus, num_validation=5, canaries={"count": 6, "tokens": 12, "secret_tokens": 4})
    )
    return load_prepared(prepare(cfg, corpus / "with", progress=False))


def test_each_canary_is_read_its_label_whole_in_one_row_from_ordinary_ids(with_canaries):
    p = with_canaries
    m, b, c = len(p.members), len(p.background), len(p.canaries)
    assert c == 6 and list(p.canaries["repetitions"]) == [1, 2, 3, 1, 2, 3]  # the members' strata, round-robin
    rows = p.train.batch(np.arange(len(p.train)))
    seen = occurrences(rows["document_ids"], rows["position_ids"], m + b + c)
    assert seen[m + b :].tolist() == list(p.canaries["repetitions"])
    alphabet = set(canary_alphabet(p.tokenizer).tolist())
    special = set(p.tokenizer.all_special_ids)
    for k, canary in enumerate(p.canaries["input_ids"]):
        assert len(canary) == 12 and set(canary) <= alphabet and not set(canary) & special
        where = rows["document_ids"] == m + b + k
        for r in np.nonzero(where.any(axis=1))[0]:  # whole in each row it occupies: the canary then its EOS
            assert rows["input_ids"][r][where[r]].tolist() == list(canary) + [p.manifest["tokenizer"]["eos_id"]]
    assert p.manifest["stats"]["canary_alphabet"] == len(alphabet)


def test_canaries_and_validation_leave_members_and_nonmembers_alone(corpus, with_canaries):
    plain = load_prepared(prepare(from_dict(PrepareConfig, _recipe(corpus)), corpus / "plain", progress=False))
    for split in ("members", "nonmembers"):
        assert getattr(plain, split)["input_ids"] == getattr(with_canaries, split)["input_ids"]
    val = set(with_canaries.validation["id"])
    assert len(val) == 5 and set(with_canaries.validation["repetitions"]) == {0}
    used = set(with_canaries.members["id"]) | set(with_canaries.nonmembers["id"])
    assert not val & used
    # a validation document's text is never trained on: no background chunk begins like one of these documents
    # (the first chunk of the same article would)
    heads = {
        tuple(x[:8])
        for split in ("members", "nonmembers", "validation")
        for x in getattr(with_canaries, split)["input_ids"]
    }
    chunks = [with_canaries.background[i] for i in range(len(with_canaries.background))]
    assert chunks and not {tuple(c[:8].tolist()) for c in chunks} & heads


def test_a_background_only_control_keeps_the_canaries_untrained(corpus, with_canaries):
    cfg = from_dict(
        PrepareConfig,
        _recipe(corpus, num_validation=5, train_members=False, canaries={"count": 6, "tokens": 12, "secret_tokens": 4}),
    )
    control = load_prepared(prepare(cfg, corpus / "control", progress=False))
    assert control.canaries["input_ids"] == with_canaries.canaries["input_ids"]
    rows = control.train.batch(np.arange(len(control.train)))
    m, b = len(control.members), len(control.background)
    assert occurrences(rows["document_ids"], rows["position_ids"], m + b + 6)[:m].sum() == 0
    assert occurrences(rows["document_ids"], rows["position_ids"], m + b + 6)[m + b :].sum() == 0


def test_canary_config_errors_are_one_line(corpus):
    with pytest.raises(ConfigError, match="must exceed secret_tokens"):
        from_dict(PrepareConfig, _recipe(corpus, canaries={"count": 2, "tokens": 4, "secret_tokens": 4}))
    with pytest.raises(ConfigError, match="num_validation needs nonmember_mode"):
        from_dict(PrepareConfig, _recipe(corpus, nonmember_mode="later_chunk", num_validation=3))


# ---------------------------------------------------------------- exposure on constructed ranks


def test_full_space_rank_and_exposure_by_hand():
    bits = space_bits(4, 2)  # 16 secrets: 4 bits
    others = np.arange(15, dtype=float)  # the 15 other secrets' log-perplexities 0..14
    top = rank_exposure(-1.0, others, bits, full=True)  # below every other: rank 1
    # exact: log2 of a power of two is exact, 4 - 0, 4 - 3 and 4 - 4 too, and 4 - log2(4.5) is the same two
    # float64 operations on the same operands as the code's
    assert top["rank"] == 1 and top["exposure"] == 4.0
    mid = rank_exposure(6.5, others, bits, full=True)  # 7 others below (0..6): rank 8
    assert mid["rank"] == 8 and mid["exposure"] == 4 - 3
    last = rank_exposure(99.0, others, bits, full=True)
    assert last["rank"] == 16 and last["exposure"] == 0.0
    tie = rank_exposure(3.0, others, bits, full=True)  # 3 below, one tie counted half: rank 4.5
    assert tie["rank"] == 4.5 and tie["exposure"] == 4 - math.log2(4.5)


def test_sampled_rank_scales_the_fraction_below_to_the_whole_space():
    bits = 40.0
    sample = np.linspace(0, 1, 1000, endpoint=False)  # 1000 candidates 0.000 .. 0.999; 10 below 0.0095
    found = rank_exposure(0.0095, sample, bits, full=False)
    # exact: (2^40 - 1)·10 < 2^53 is an exact product, then one correctly rounded division by 1000 and one addition,
    # in the same order as the code's; the exposure is the same log2 and subtraction of that rank
    assert found["rank"] == 1 + (2**40 - 1) * 10 / 1000
    assert found["exposure"] == 40 - math.log2(1 + (2**40 - 1) * 10 / 1000)  # ~ -log2(0.01) = 6.64
    # the exact difference from log2(100) is log2(1 + 99 / 2^40) = 1.3e-10 (the rank counts 1 + (2^40 - 1)/100,
    # not 2^40/100), plus the rounding of log2(1.1e10) = 33.4 and of 40 - 33.4 (two float64 values of scale 40)
    gap = math.log2(1 + 99 / 2**40) + rounding(2, U64) * 40
    assert found["exposure"] == pytest.approx(-math.log2(0.01), abs=gap) and not found["saturated"]
    none_below = rank_exposure(-1.0, sample, bits, full=False)  # beats the whole sample: saturated
    assert none_below["saturated"] and none_below["sampled_exposure"] == 40.0  # 40 - log2(1): exact
    # then the skew-normal extrapolation, never below what the sample resolves (log2 1000 = 9.97 bits); the code
    # takes the same max of the same two values, exactly
    assert none_below["exposure"] == max(none_below["extrapolated"], math.log2(1000))
    assert math.log2(1000) <= none_below["exposure"] <= 40.0


def test_skew_normal_extrapolation_recovers_a_normal_tail():
    rng = np.random.default_rng(0)
    sample = rng.normal(50.0, 5.0, size=20000)  # log-perplexities of random candidates
    canary = 50.0 - 3 * 5.0  # three standard deviations below: P = Phi(-3) = 0.00135 -> 9.53 bits
    got = rank_exposure(canary, sample, 64.0, full=False)["extrapolated"]
    # sampling error of the fitted tail (the draws are seeded, so this guards a change of fit, not chance): a normal
    # fit of n = 20,000 draws puts the canary at z = -3 with standard error sqrt((1 + z²/2) / n) = 0.0166 (delta
    # method on the mean and sd), and d ln Phi(z)/dz = phi(3)/Phi(-3) = 3.28, so ln P has standard error 0.054
    # nats = 0.079 bits; the band is 3 of those (0.24 bits). The skew-normal's extra shape parameter (its Fisher
    # information is singular at shape 0, a normal) widens this by an amount not derived here.
    z, n = -3.0, sample.size
    se_bits = stats.norm.pdf(z) / stats.norm.cdf(z) * math.sqrt((1 + z * z / 2) / n) / math.log(2)
    assert got == pytest.approx(-math.log2(stats.norm.cdf(z)), abs=3 * se_bits)


def test_sampled_secrets_draw_from_the_alphabet():
    sample = sampled_secrets(np.array([3, 5, 7]), 9, 50, np.random.default_rng(0))
    assert sample.shape == (50, 9) and set(sample.reshape(-1).tolist()) <= {3, 5, 7}


def _direct_log2_prob(model, prefix, secret) -> float:
    """log2 P(secret | prefix) from one plain forward pass: a second implementation of the scoring."""
    ids = torch.tensor([list(prefix) + list(secret)])
    logp = model(input_ids=ids).logits[0].float().log_softmax(-1)
    n = len(prefix)
    return sum(float(logp[n - 1 + i, t]) for i, t in enumerate(secret)) / math.log(2)


def test_exposure_of_a_real_model_matches_a_direct_ranking_of_the_whole_space():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=16, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    ).eval()
    alphabet = np.arange(2, 12)  # 10 ids, secrets of 2 tokens: |R| = 100, enumerated
    canaries = [[3, 9, 4, 5, 7], [11, 2, 2, 8, 6]]
    found = canary_exposures(model, canaries, [1, 4], 2, alphabet, n_candidates=10, max_full=100)
    # 2·log2(10) against log2(100): each one libm log2 (glibc: within 1 ulp, <= 2u relative), the doubling exact
    assert found["method"] == "full" and found["space_bits"] == pytest.approx(
        math.log2(100), rel=rounding(2, U64), abs=0
    )
    with torch.no_grad():
        for row, canary in zip(found["canaries"], canaries):
            prefix, secret = canary[:3], canary[3:]
            mine = _direct_log2_prob(model, prefix, secret)
            others = [_direct_log2_prob(model, prefix, (a, b)) for a in alphabet for b in alphabet if [a, b] != secret]
            # the two computations (a batched teacher-forced pass, a plain forward) are fp32 chains of
            # llama_terms + 2 (two tokens summed) rounded terms each, at the scale of the log-probabilities: a
            # candidate closer than that to the canary has no defined order, so none may be (then no ties either)
            tie = scaled(np.array(others + [mine]), llama_terms(32, 64, 1, 16, 5, 16) + 2, U32)
            assert not any(abs(o - mine) <= tie for o in others)
            rank = 1 + sum(o > mine for o in others)
            assert row["rank"] == rank  # counts: exact
            assert row["exposure"] == found["space_bits"] - math.log2(rank)  # the same float64 operations
    assert found["by_repetitions"]["4"]["n"] == 1


def test_the_chain_rule_enumeration_equals_scoring_every_secret_directly():
    """Every secret of R = alphabet^m, 1 to 3 tokens, by the enumeration (the prefix's cache reused, one next-token
    distribution per partial secret) against a plain forward pass of prefix + secret per candidate (brute force)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=24, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    ).eval()
    prefix = [5, 17, 3, 9]
    for alphabet, m in ((np.arange(1, 24), 1), (np.arange(2, 14), 2), (np.array([1, 4, 6, 8, 20]), 3)):
        found = enumerated_perplexities(model, prefix, alphabet, m, rows=7)  # rows=7: several chunks per level
        with torch.no_grad():
            direct = np.array(
                [-_direct_log2_prob(model, prefix, secret) for secret in itertools.product(alphabet.tolist(), repeat=m)]
            )  # row-major order
        # two fp32 chains (a cached forward and a plain one) of llama_terms + m rounded terms each, at the scale of
        # the log-probabilities, plus float64 sums of m terms
        tol = scaled(direct, llama_terms(32, 64, 2, 16, len(prefix) + m, 24) + m, U32)
        assert found.shape == (len(alphabet) ** m,) and np.abs(found - direct).max() <= tol


def test_the_dry_run_counts_the_canaries_copies_in_the_stream(corpus, with_canaries):
    from goldfish.experiment.dryrun import canary_copies_of

    cfg = from_dict(PrepareConfig, _recipe(corpus, canaries={"count": 6, "tokens": 12, "secret_tokens": 4}))
    assert canary_copies_of(cfg) == (sum(with_canaries.canaries["repetitions"]), 12)  # 2 x (1 + 2 + 3)
    assert canary_copies_of(
        from_dict(PrepareConfig, {**_recipe(corpus), "train_members": False, "canaries": {"count": 6}})
    ) == (0, 0)
