"""Membership inference: score orientation, each attack against a direct computation, and the ROC statistics."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score
from tolerances import U64, llama_terms, rounding, scaled
from transformers import LlamaConfig, LlamaForCausalLM

from goldfish.eval.membership import (
    ATTACKS,
    downsample_roc,
    evaluate_attack,
    evaluate_attacks,
    lowest_k_mean,
    membership_section,
    score_documents,
    target_pass,
)
from goldfish.errors import UserError
from goldfish.eval import scoring
from goldfish.eval.scoring import token_statistics
from goldfish.eval.stats import bootstrap_auc, rank_auc
from goldfish.io import JsonlLogger, read_jsonl

ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,"
BOS = 0


class CharTokenizer:
    """A character tokenizer with the HF ``encode``/``decode``/``all_special_ids`` interface (id 0 = BOS)."""

    all_special_ids = [BOS]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [ALPHABET.index(c) + 1 for c in text]
        return [BOS] + ids if add_special_tokens else ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(ALPHABET[i - 1] if i > 0 else ("" if skip_special_tokens else "<s>") for i in ids)


def tiny_llama(seed: int = 0, vocab: int = 64) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).eval()


# rounded terms along one token's forward path through tiny_llama (hidden 32, MLP 64, 2 layers, 4 heads of 8, up to
# its 128-position context, a vocabulary of up to 300): the scorer's batches, padding and chunks round in another
# order than one document at a time, so a log-prob moves by at most rounding(FORWARD) of its scale, and a mean over a
# document's tokens adds their sum
FORWARD = llama_terms(hidden=32, intermediate=64, layers=2, head_dim=8, seq=128, vocab=300)


def mean_tol(token_lp: np.ndarray) -> float:
    """Absolute tolerance of a mean of these fp32 log-probs computed in another order."""
    return scaled(token_lp, FORWARD + len(token_lp))


def z_tol(lp: np.ndarray, z: np.ndarray) -> float:
    """Absolute tolerance of z = (log p - mu) / sigma (or a mean of z's) when every log-prob of the (T, V) ``lp`` may
    move by d = rounding(FORWARD)·max|lp|: log p - mu moves by <= 2d and sigma (a weighted 2-norm of lp - mu) by
    <= 2d, so z moves by <= 2d·(1 + |z|)/sigma."""
    mu = (np.exp(lp) * lp).sum(-1, keepdims=True)
    sigma = np.sqrt((np.exp(lp) * (lp - mu) ** 2).sum(-1))
    return 2 * rounding(FORWARD) * float(np.abs(lp).max()) * (1 + float(np.abs(z).max())) / float(sigma.min())


def direct_token_logprobs(model, doc: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Float64 log-softmax of one unpadded document: (log p of the true next tokens, full (T-1, V) log-probs)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([doc])).logits[0, :-1].double()
    lp = logits.log_softmax(-1)
    return lp.gather(-1, torch.tensor(doc[1:])[:, None]).squeeze(-1).numpy(), lp.numpy()


def random_docs(n: int, seed: int, vocab: int = 64, lo: int = 10, hi: int = 30) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[BOS] + rng.integers(1, vocab, size=int(rng.integers(lo, hi))).tolist() for _ in range(n)]


# ------------------------------------------------------------------------------------------------ scores


def test_loss_attack_separates_trained_members():
    """Pins the sign: a model trained on the members gives them higher LOSS scores (AUC > 0.5, here ~1)."""
    model = tiny_llama().train()
    members, nonmembers = random_docs(8, seed=1, lo=24, hi=25), random_docs(8, seed=2, lo=24, hi=25)
    batch = torch.tensor(members)
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    for _ in range(15):
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    m = score_documents(model, members, token_budget=100)
    n = score_documents(model, nonmembers, token_budget=100)
    attacks = evaluate_attacks(m, n, n_bootstrap=100)
    assert attacks["loss"]["auc"] > 0.9 and attacks["loss"]["auc_ci_low"] > 0.5
    assert attacks["min_k_20"]["auc"] > 0.9
    assert np.all(m["loss"] <= 0) and m["loss"].mean() > n["loss"].mean()


def test_padding_and_batching_do_not_change_scores(tmp_path):
    model = tiny_llama()
    docs = random_docs(7, seed=3)  # different lengths -> right padding inside batches
    one = score_documents(model, docs, token_budget=1)  # one document per pass
    longest = max(map(len, docs))
    with JsonlLogger(tmp_path / "log.jsonl") as logger:
        many = score_documents(model, docs, token_budget=4 * longest, progress=False, logger=logger)
    records = read_jsonl(tmp_path / "log.jsonl")
    assert records[0]["docs"] == 4 and sum(r["docs"] for r in records) == 7
    assert sum(r["tokens"] for r in records) == sum(map(len, docs))
    for key in one:  # means of at most 30 log-probs, in another batch shape and padding
        np.testing.assert_allclose(one[key], many[key], rtol=0, atol=scaled(one[key], FORWARD + 30))
    assert model.training is False


def test_loss_and_min_k_match_direct_computation():
    model = tiny_llama()
    docs = random_docs(5, seed=4)
    s = score_documents(model, docs, token_budget=60, min_k_ratios=(0.2, 1.0))
    for i, doc in enumerate(docs):
        token_lp, _ = direct_token_logprobs(model, doc)
        assert s["loss"][i] == pytest.approx(token_lp.mean(), abs=mean_tol(token_lp))
        k = max(1, int(0.2 * len(token_lp)))
        assert s["min_k_20"][i] == pytest.approx(np.sort(token_lp)[:k].mean(), abs=mean_tol(token_lp))
    # k = 100 % is the LOSS score: the same float64 values summed in sorted order (at most 30 terms)
    np.testing.assert_allclose(s["min_k_100"], s["loss"], rtol=rounding(30, U64), atol=0)


def test_min_k_plus_plus_matches_hand_computation():
    model = tiny_llama(seed=5)
    doc = random_docs(1, seed=6, lo=20, hi=21)[0]
    token_lp, lp = direct_token_logprobs(model, doc)
    p = np.exp(lp)
    mu = (p * lp).sum(-1)
    sigma = np.sqrt((p * lp**2).sum(-1) - mu**2)  # the paper's E[lp^2] - mu^2 form, safe in float64
    z = (token_lp - mu) / sigma
    s = score_documents(model, [doc], min_k_ratios=(0.2, 0.5))
    n = len(z)  # 20 predicted tokens -> 4 and 10 lowest
    assert s["min_k_pp_20"][0] == pytest.approx(np.sort(z)[: int(0.2 * n)].mean(), abs=z_tol(lp, z))
    assert s["min_k_pp_50"][0] == pytest.approx(np.sort(z)[: n // 2].mean(), abs=z_tol(lp, z))


def test_zlib_lowercase_and_reference_match_direct_computation():
    tok = CharTokenizer()
    texts = ["The Cat sat on the Mat, quietly.", "Hello World and Everyone In It.", "abc ABC abc ABC abc ABC."]
    docs = [tok.encode(t) for t in texts]
    model, ref = tiny_llama(seed=7), tiny_llama(seed=8)
    s = score_documents(model, docs, tokenizer=tok, reference_model=ref, token_budget=70)
    for i, (text, doc) in enumerate(zip(texts, docs)):
        lp, lp_lower, lp_ref = (
            direct_token_logprobs(m, d)[0] for m, d in ((model, doc), (model, tok.encode(text.lower())), (ref, doc))
        )
        nll, nll_lower, nll_ref = -lp.mean(), -lp_lower.mean(), -lp_ref.mean()
        zbytes = len(zlib.compress(text.encode("utf-8")))
        # each NLL within mean_tol; a quotient moves by the sum of its parts' relative errors
        assert s["zlib_mimir"][i] == pytest.approx(-nll / zbytes, abs=mean_tol(lp) / zbytes)
        # total NLL in bits over zlib bits: (len(doc) - 1) predicted tokens
        bits = (len(doc) - 1) / np.log(2) / (8 * zbytes)
        assert s["zlib_ratio"][i] == pytest.approx(-nll * bits, abs=mean_tol(lp) * bits)
        assert s["lowercase"][i] == pytest.approx(
            -nll / nll_lower, rel=mean_tol(lp) / nll + mean_tol(lp_lower) / nll_lower
        )
        assert s["reference"][i] == pytest.approx(nll_ref - nll, abs=mean_tol(lp) + mean_tol(lp_ref))
    given = {"tokenizer", "reference_model"}  # every registered attack that needs no more than these ran
    assert set(s) == {k for a in ATTACKS.values() if given >= set(a.needs) for k in a.keys([0.2])}
    assert {"zlib_mimir", "zlib_ratio", "lowercase", "reference", "min_k_pp_20"} <= set(s)
    # bounded: the lowercase attack compares the first 12 characters (tokens) of each text with their lowercase form
    bounded = score_documents(model, docs, tokenizer=tok, token_budget=70, lowercase_tokens=12)
    for i, (text, doc) in enumerate(zip(texts, docs)):
        lp_head = direct_token_logprobs(model, doc[:12])[0]
        lp_head_lower = direct_token_logprobs(model, tok.encode(tok.decode(doc[:12], True).lower()))[0]
        head, head_lower = -lp_head.mean(), -lp_head_lower.mean()
        # as above: a quotient of two NLLs, each within mean_tol (was rel=1e-5)
        assert bounded["lowercase"][i] == pytest.approx(
            -head / head_lower, rel=mean_tol(lp_head) / head + mean_tol(lp_head_lower) / head_lower
        )
        assert bounded["loss"][i] == s["loss"][i]  # every other attack still reads the whole document


def test_real_fast_tokenizer_interface():
    """zlib and lowercase through a Hugging Face fast tokenizer (byte-level BPE with a leading EOT document marker)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = ["The Cat sat on the Mat.", "Hello World, Hello Moon.", "A Quick Brown Fox Jumps."]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")
    eot = tok.eos_token_id
    docs = [[eot] + tok.encode(t, add_special_tokens=False) for t in texts]
    model = tiny_llama(seed=9, vocab=len(tok))
    s = score_documents(model, docs, tokenizer=tok)
    for i, (text, doc) in enumerate(zip(texts, docs)):
        lp = direct_token_logprobs(model, doc)[0]
        lp_lower = direct_token_logprobs(model, [eot] + tok.encode(text.lower(), add_special_tokens=False))[0]
        nll, nll_lower, zbytes = -lp.mean(), -lp_lower.mean(), len(zlib.compress(text.encode("utf-8")))
        assert s["zlib_mimir"][i] == pytest.approx(-nll / zbytes, abs=mean_tol(lp) / zbytes)
        assert s["lowercase"][i] == pytest.approx(
            -nll / nll_lower, rel=mean_tol(lp) / nll + mean_tol(lp_lower) / nll_lower
        )


def sliding_window_logprobs(model, doc: list[int], window: int, stride: int) -> np.ndarray:
    """The Hugging Face perplexity guide's loop, written out: windows [b, b + window) for b = 0, stride, ...; each
    scores the tokens the previous window did not."""
    out, scored_to, begin = [], 1, 0
    while scored_to < len(doc):
        end = min(begin + window, len(doc))
        lp = direct_token_logprobs(model, doc[begin:end])[0]  # predictions of tokens begin+1 .. end-1
        out.append(lp[scored_to - begin - 1 :])
        scored_to, begin = end, begin + stride
    return np.concatenate(out)


def test_long_documents_are_scored_whole_in_context_windows():
    model = tiny_llama()  # max_position_embeddings = 128
    long_doc = random_docs(1, seed=10, lo=300, hi=301)[0]
    s = score_documents(model, [long_doc, long_doc[:50]])  # default window: capped by the context (128), stride 96
    expected = sliding_window_logprobs(model, long_doc, 128, 96)
    assert len(expected) == len(long_doc) - 1  # every token but the first scored exactly once
    assert s["loss"][0] == pytest.approx(expected.mean(), abs=mean_tol(expected))
    short = direct_token_logprobs(model, long_doc[:50])[0]
    assert s["loss"][1] == pytest.approx(short.mean(), abs=mean_tol(short))
    s40 = score_documents(model, [long_doc], window=40, stride=30)
    expected40 = sliding_window_logprobs(model, long_doc, 40, 30)
    assert s40["loss"][0] == pytest.approx(expected40.mean(), abs=mean_tol(expected40))
    with pytest.raises(UserError, match="window=1"):
        score_documents(model, [long_doc], window=1)


def test_chunked_scoring_equals_unchunked_per_token_losses():
    """Chunks of 7 positions through the output head, several documents per pass, equal the full-logits pass."""
    model = tiny_llama(seed=11)
    docs = random_docs(5, seed=12, lo=20, hi=60)
    stats = token_statistics(model, docs, chunk=7, token_budget=150, want_pp=True)
    for doc, st in zip(docs, stats):
        logp, z = st.logp, st.z
        full, lp = direct_token_logprobs(model, doc)
        np.testing.assert_allclose(logp, full, rtol=0, atol=scaled(full, FORWARD))
        p = np.exp(lp)
        mu = (p * lp).sum(-1)
        expected = (full - mu) / np.sqrt((p * (lp - mu[:, None]) ** 2).sum(-1))
        np.testing.assert_allclose(z, expected, rtol=0, atol=z_tol(lp, expected))


def test_cached_documents_are_not_rescored(monkeypatch):
    model = tiny_llama()
    docs = random_docs(4, seed=13)
    cache: dict = {}
    first = score_documents(model, docs[:2], cache=cache)
    assert len(cache) == 2
    calls = []
    real = scoring._score_batch
    monkeypatch.setattr(scoring, "_score_batch", lambda m, batch, *a: calls.append(len(batch)) or real(m, batch, *a))
    again = score_documents(model, docs, cache=cache)
    assert sum(calls) == 2 and len(cache) == 4  # only the two new documents went through the model
    np.testing.assert_array_equal(again["loss"][:2], first["loss"])


def test_kept_tokens_are_the_scoring_pass_and_a_later_target_pass_reads_them(monkeypatch):
    """``keep_tokens``: the target pass keeps each target's log-prob and top-1 correctness (what an experiment's
    attacks analysis needs) beside the reduced scores, which stay the same; the same pass asked again with those
    settings scores nothing."""
    model = tiny_llama(seed=14)
    docs = random_docs(3, seed=15, lo=20, hi=40)
    plain = score_documents(model, docs)
    cache: dict = {}
    kept = score_documents(model, docs, cache=cache, keep_tokens=True)
    for name in plain:
        np.testing.assert_array_equal(kept[name], plain[name])  # the same pass: bit for bit
    direct = token_statistics(model, docs)  # the second implementation: the scoring pass itself
    calls = []
    real = scoring._score_batch
    monkeypatch.setattr(scoring, "_score_batch", lambda m, batch, *a: calls.append(len(batch)) or real(m, batch, *a))
    rows = target_pass(model, docs, cache=cache, keep_tokens=True)
    assert calls == []  # every document found in the cache
    for row, st in zip(rows, direct):
        np.testing.assert_array_equal(row["logp"], st.logp)  # the same batches (documents within one window)
        assert row["correct"] == st.correct.astype(int).tolist()


def test_memory_estimate_refuses_a_plan_that_cannot_fit(monkeypatch):
    model = tiny_llama()
    monkeypatch.setattr(scoring, "available_bytes", lambda device: 100_000)  # 100 kB free
    with pytest.raises(UserError, match="membership.token_budget") as e:
        score_documents(model, random_docs(2, seed=14, lo=100, hi=101))
    assert "\n" not in str(e.value)
    monkeypatch.setattr(scoring, "available_bytes", lambda device: 10**12)
    assert score_documents(model, random_docs(2, seed=14, lo=100, hi=101))["loss"].shape == (2,)


def test_user_errors():
    model = tiny_llama()
    with pytest.raises(UserError, match="document 1 has 1 token"):
        score_documents(model, [[0, 1, 2], [3]])
    with pytest.raises(UserError, match="token id 64 outside the model vocabulary"):
        score_documents(model, [[0, 64]])
    with pytest.raises(UserError, match="must be in \\(0, 1\\]"):
        score_documents(model, [[0, 1]], min_k_ratios=(0.0,))
    with pytest.raises(UserError, match="nonmember"):
        evaluate_attack([1.0, 2.0], [], name="loss")
    assert score_documents(model, [])["loss"].shape == (0,)


# ------------------------------------------------------------------------------------------- ROC statistics


def test_lowest_k_mean():
    assert lowest_k_mean(np.array([5.0, 1.0, 3.0, 2.0, 4.0]), 0.4) == 1.5  # (1 + 2) / 2: exact in binary
    assert lowest_k_mean(np.array([5.0, 1.0, 3.0]), 0.1) == 1.0  # at least one token


def test_perfect_separation_gives_auc_one():
    r = evaluate_attack([5.0, 6.0, 7.0], [1.0, 2.0, 3.0], n_bootstrap=200)
    assert r["auc"] == 1.0 and r["auc_ci_low"] == 1.0 and r["auc_ci_high"] == 1.0
    assert r["tpr_at_1pct_fpr"] == 1.0 and r["tpr_at_0.1pct_fpr"] == 1.0


def test_identical_distributions_give_auc_half_with_ci_covering_it():
    rng = np.random.default_rng(0)
    r = evaluate_attack(rng.normal(size=400), rng.normal(size=400), n_bootstrap=500, seed=1)
    assert abs(r["auc"] - 0.5) < 0.06  # 3 standard deviations: sqrt((400 + 400 + 1) / (12·400·400)) = 0.020
    assert r["auc_ci_low"] < 0.5 < r["auc_ci_high"]
    assert 0.05 < r["auc_ci_high"] - r["auc_ci_low"] < 0.15  # ~ 2 * 1.96 * sqrt(1/(12 n)) * sqrt(2) ≈ 0.08


def test_bootstrap_is_seeded():
    rng = np.random.default_rng(0)
    m, n = rng.normal(1, 1, 50), rng.normal(0, 1, 50)
    a = evaluate_attacks({"x": m}, {"x": n}, n_bootstrap=100, seed=3)["x"]
    b = evaluate_attacks({"x": m}, {"x": n}, n_bootstrap=100, seed=3)["x"]
    c = evaluate_attacks({"x": m}, {"x": n}, n_bootstrap=100, seed=4)["x"]
    assert a == b and a["auc_ci_low"] != c["auc_ci_low"]
    assert len(bootstrap_auc(m, n, 7, 0)) == 7


def test_rank_auc_equals_sklearn_with_ties():
    rng = np.random.default_rng(1)
    m, n = rng.integers(0, 5, size=(3, 30)).astype(float), rng.integers(0, 4, size=(3, 20)).astype(float)
    expected = [roc_auc_score(np.r_[np.ones(30), np.zeros(20)], np.r_[m[i], n[i]]) for i in range(3)]
    # float64, another algorithm: sklearn sums the trapezoids of <= 50 thresholds over cumulative sums of 50 scores
    np.testing.assert_allclose(rank_auc(m, n), expected, rtol=rounding(2 * 50, U64), atol=0)


def test_tpr_at_fpr_on_hand_example():
    # 1000 nonmembers at 0.000..0.999. At FPR <= 0.1 % the threshold must stay above 0.998 (admitting at most the
    # nonmember 0.999), so members {2.0, 1.5, 0.9995} pass: TPR 3/5. At FPR <= 1 % it may go down to 0.990 and the
    # member 0.9975 passes too: 4/5. The member 0.5 never does below 50 % FPR.
    nonmembers = np.arange(1000) / 1000
    members = np.array([2.0, 1.5, 0.9995, 0.9975, 0.5])
    r = evaluate_attack(members, nonmembers, n_bootstrap=0)
    assert r["tpr_at_0.1pct_fpr"] == 3 / 5  # a count over 5: one rounded division, as 3 / 5 is
    assert r["tpr_at_1pct_fpr"] == 4 / 5
    assert r["auc_ci_low"] is None


def test_roc_is_downsampled_and_keeps_endpoints():
    rng = np.random.default_rng(2)
    r = evaluate_attack(rng.normal(1, 1, 600), rng.normal(0, 1, 600), n_bootstrap=0)
    assert 100 < len(r["roc_fpr"]) <= 200 and len(r["roc_fpr"]) == len(r["roc_tpr"])
    assert (r["roc_fpr"][0], r["roc_tpr"][0]) == (0.0, 0.0) and (r["roc_fpr"][-1], r["roc_tpr"][-1]) == (1.0, 1.0)
    assert np.all(np.diff(r["roc_fpr"]) >= 0)
    assert downsample_roc(np.array([0.0, 1.0]), np.array([0.0, 1.0])) == ([0.0, 1.0], [0.0, 1.0])


def test_non_finite_scores_are_dropped_and_section_follows_schema(caplog):
    with caplog.at_level("INFO", logger="goldfish.eval.membership"):
        section = membership_section({"loss": [3.0, np.nan, 4.0]}, {"loss": [1.0, 2.0, np.inf]}, n_bootstrap=10)
    # a NaN is a document not scored by design (INFO), an infinite score a numerical failure (WARNING)
    levels = {r.levelname: r.getMessage() for r in caplog.records}
    assert "1 member document(s) not scored" in levels["INFO"] and "1 infinite nonmember" in levels["WARNING"]
    assert section["n_members"] == 3 and section["n_nonmembers"] == 3
    attack = section["attacks"]["loss"]
    assert attack["auc"] == 1.0 and attack["n_members"] == 2
    assert set(attack) >= {
        "auc",
        "auc_ci_low",
        "auc_ci_high",
        "tpr_at_1pct_fpr",
        "tpr_at_0.1pct_fpr",
        "roc_fpr",
        "roc_tpr",
    }
    assert section["scores"]["loss"]["nonmembers"] == [1.0, 2.0, np.inf]


def test_a_perfect_separation_reports_its_exact_p_and_too_few_nonmembers_withhold_the_tpr():
    import math

    from scipy.stats import mannwhitneyu

    from goldfish.eval.tables import fmt_auc, fmt_tpr

    r = evaluate_attack([5.0, 6.0, 7.0], [1.0, 2.0, 3.0, 4.0], n_bootstrap=50)
    # 1 of the C(7, 3) = 35 ways to label 7 scores with 3 members puts every member on top
    assert (r["auc"], r["auc_p_method"]) == (1.0, "perfect")
    # 10 ** (-log10 35): log10 rounds once, exp10 turns its absolute error into a relative one times ln 10, plus
    # its own rounding
    assert r["auc_p_value"] == pytest.approx(1 / 35, rel=rounding(2, U64) * (1 + math.log(10) * math.log10(35)))
    assert (r["auc_ci_low"], r["auc_ci_high"]) == (1.0, 1.0)  # the degenerate interval the reports no longer show
    assert fmt_auc(r) == f"1.000 (perfect separation of 3 vs 4: p = 10^{-math.log10(35):.1f}, exact)"
    assert r["tpr_at_1pct_fpr"] == 1.0  # kept in the JSON: the TPR at zero false positives ...
    assert r["tpr_at_1pct_fpr_note"].startswith("needs >= 100 nonmembers (has 4)")  # ... but not shown
    assert fmt_tpr(r, "tpr_at_1pct_fpr") == "- (needs >= 100 nonmembers (has 4))"
    # an overlap with 120 nonmembers: Mann-Whitney's one-sided p, and the 1 % TPR shown (the 0.1 % one is not)
    rng = np.random.default_rng(0)
    m, n = rng.normal(0.5, 1.0, 30), rng.normal(0.0, 1.0, 120)
    r = evaluate_attack(m, n, n_bootstrap=0)
    expected = mannwhitneyu(m, n, alternative="greater", method=r["auc_p_method"]).pvalue
    assert r["auc_p_method"] in ("exact", "asymptotic") and r["auc_p_value"] == expected  # the same call
    assert r["tpr_at_1pct_fpr_note"] is None and fmt_tpr(r, "tpr_at_1pct_fpr") == f"{r['tpr_at_1pct_fpr']:.3f}"
    assert r["tpr_at_0.1pct_fpr_note"].startswith("needs >= 1000 nonmembers (has 120)")
