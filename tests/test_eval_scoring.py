"""The one teacher-forced scoring pass (goldfish.eval.scoring): ranks against a stable sort of the full logits, ties
broken like argmax, scoring from a later target equal to the tail of scoring everything (also across context
windows), and one-pass extraction records derived from it by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from eval_fixtures import tiny_llama
from tolerances import U32, llama_terms, scaled

from goldfish.eval import scoring
from goldfish.eval.extraction import onepass
from goldfish.eval.scoring import DEFAULT_WINDOW, default_stride, scoring_window, segments, token_statistics


def forward_terms(seq: int, vocab: int) -> int:
    """Rounded fp32 terms along one token's path through :func:`eval_fixtures.tiny_llama` (hidden 32, 2 layers,
    4 heads of 8) to its log-probabilities over ``seq`` positions of context."""
    return llama_terms(hidden=32, intermediate=64, layers=2, head_dim=8, seq=seq, vocab=vocab)


def full_logits(model, doc: list[int]) -> np.ndarray:
    """(L-1, V) float32 next-token logits of one unpadded document, straight from the model."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([doc])).logits[0, :-1].float().numpy()


def stable_rank(logits: np.ndarray, target: int) -> int:
    """Position of ``target`` in the ids sorted by descending logit, ties by ascending id (a stable sort)."""
    order = np.argsort(-logits, kind="stable")
    return int(np.nonzero(order == target)[0][0])


def half_greedy(model, n: int, seed: int) -> list[int]:
    """A document whose even targets are the model's argmax and odd ones random: hits and misses both occur."""
    g = torch.Generator().manual_seed(seed)
    doc = [int(torch.randint(1, 50, (1,), generator=g))]
    while len(doc) < n:
        nxt = int(torch.randint(1, 50, (1,), generator=g))
        doc.append(int(full_logits(model, doc + [0])[-1].argmax()) if len(doc) % 2 else nxt)
    return doc


def test_ranks_are_positions_in_a_stable_descending_sort():
    model = tiny_llama(vocab_size=50, seed=3, init=1.0)  # a wide init: ranks spread over the vocabulary
    docs = [half_greedy(model, n, n) for n in (12, 30, 7)]
    for doc, st in zip(docs, token_statistics(model, docs, token_budget=40, chunk=5)):
        logits = full_logits(model, doc)
        want = [stable_rank(row, t) for row, t in zip(logits, doc[1:])]
        assert st.rank.tolist() == want
        assert st.correct.tolist() == [int(row.argmax()) == t for row, t in zip(logits, doc[1:])]
        assert 0 < st.correct.sum() < len(want) and max(want) > 5  # the check covers hits and deep misses


class Flat(torch.nn.Module):
    """Logits 1 at id (input + 1) % 10 and at id 7, 0 elsewhere: exact ties between two ids."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, **kwargs):
        logits = torch.nn.functional.one_hot((input_ids + 1) % 10, 10).float()
        logits[..., 7] = 1.0
        return type("Out", (), {"logits": logits + self.w})()


def test_ties_are_broken_by_the_lower_id_like_argmax():
    doc = [2, 3, 8, 9, 5, 1]
    (st,) = token_statistics(Flat(), [doc])
    # by hand, (top ids) target: rank = ids with logit above + ids with an equal logit and a lower id
    #   (3, 7) 3: 0 + 0   (4, 7) 8: 2 + 6 (0, 1, 2, 3, 5, 6)   (9, 7) 9: 0 + 1 (7)   (0, 7) 5: 2 + 4 (1..4)
    #   (6, 7) 1: 2 + 1 (0)
    assert st.rank.tolist() == [0, 8, 1, 6, 3]
    assert st.correct.tolist() == [True, False, False, False, False]  # 9 ties with 7 but argmax picks 7


@pytest.mark.parametrize("window,stride", [(None, None), (16, 8), (16, 12)])
def test_scoring_from_a_later_target_equals_the_tail_of_scoring_everything(window, stride):
    model = tiny_llama(vocab_size=60, seed=4)
    docs = [torch.randint(1, 60, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (50, 33, 17)]
    first = [31, 2, 16]
    whole = token_statistics(model, docs, window=window, stride=stride)
    tail = token_statistics(model, docs, first=first, window=window, stride=stride)
    for w, t, f in zip(whole, tail, first):
        # the two passes batch and pad differently: two fp32 forwards rounding in other orders, each over a context
        # of at most the window (or the 50-token document)
        atol = scaled(w.logp[f - 1 :], forward_terms(window or 50, 60), U32)
        np.testing.assert_allclose(t.logp, w.logp[f - 1 :], rtol=0, atol=atol)
        assert t.rank.tolist() == w.rank[f - 1 :].tolist()
    if window is not None:  # the segments before `first` are never computed
        kept = segments(0, 50, window, stride, first=31)
        assert kept and all(s.end > 31 for s in kept) and len(kept) < len(segments(0, 50, window, stride))


def test_onepass_records_come_from_the_suffix_scores(monkeypatch):
    model = tiny_llama(vocab_size=40, seed=5)
    prefixes = [[1, 2, 3, 4], [5, 6]]
    suffixes = [[7, 8, 9], [10, 11, 12]]
    got = onepass(model, prefixes, suffixes, batch_size=2, progress=False)
    for p, x, rec in zip(prefixes, suffixes, got):
        logits = full_logits(model, p + x)[len(p) - 1 :]  # (S, V): the rows that predict the suffix
        hit = [int(row.argmax()) == t for row, t in zip(logits, x)]
        lp = torch.tensor(logits).double().log_softmax(-1).numpy()
        logp = sum(lp[i, t] for i, t in enumerate(x))
        run = next((i for i, h in enumerate(hit) if not h), len(hit))
        assert rec["onepass_exact"] == all(hit) and rec["extraction_strength"] == run / len(x)
        assert rec["onepass_token_acc"] == np.mean(hit)  # a count of hits over S on both sides: exact
        assert rec["onepass_hits"] == "".join("1" if h else "0" for h in hit)  # per position, in order
        # a batched fp32 pass against an unpadded one (log-softmax here in float64, a subset of the same roundings),
        # and the sum of S terms: S times the per-term bound at the terms' scale
        terms = np.array([lp[i, t] for i, t in enumerate(x)])
        assert rec["suffix_logprob"] == pytest.approx(
            logp, rel=0, abs=len(x) * scaled(terms, forward_terms(len(p + x), 40) + len(x), U32)
        )
    # only the suffix targets are scored: each window's prefix is context, never a target
    seen = []
    real = scoring._score_batch
    monkeypatch.setattr(
        scoring, "_score_batch", lambda m, batch, *a: seen.extend((s.first, s.end) for s in batch) or real(m, batch, *a)
    )
    onepass(model, prefixes, suffixes, batch_size=2, progress=False)
    assert sorted(seen) == [(2, 5), (4, 7)]


def test_the_scoring_window_is_capped_by_the_model_and_the_stride_keeps_a_quarter_window_of_context():
    model = tiny_llama()  # max_position_embeddings = 512
    assert scoring_window(None) == DEFAULT_WINDOW and scoring_window(None, model) == 512
    assert scoring_window(64, model) == 64 and scoring_window(4096, model, None) == 512
    assert default_stride(2048) == 1536 and default_stride(1) == 1
    segs = segments(0, 5000, 2048, None)
    assert [(s.begin, s.end, s.first) for s in segs] == [(0, 2048, 1), (1536, 3584, 2048), (3072, 5000, 3584)]
    assert min(s.first - s.begin for s in segs[1:]) == 2048 - 1536  # every later target keeps 512 tokens of context


def test_the_extra_hook_sees_each_target_with_its_position_and_logits():
    model = tiny_llama(vocab_size=60, seed=6)
    docs = [torch.randint(1, 60, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (40, 23)]
    seen = []

    def hook(doc, positions, logits, targets):  # columns: the position, the argmax, the target's logit
        seen.append(doc)
        return torch.stack(
            [positions.float(), logits.argmax(-1).float(), logits.gather(-1, targets[:, None])[:, 0]], dim=1
        )

    stats = token_statistics(model, docs, first=[30, 5], window=16, stride=12, chunk=4, extra=hook)
    for doc, first, st in zip(docs, [30, 5], stats):
        assert st.extra[:, 0].tolist() == list(range(first, len(doc)))  # each target once, by its document position
        # the hook's logits are the ones the ranks come from (the segment's context): argmax == target iff rank 0
        np.testing.assert_array_equal(st.extra[:, 1] == np.array(doc[first:]), st.correct)
    assert set(seen) == {0, 1}
    (whole,) = token_statistics(model, docs[1:], first=[5], extra=hook)  # one segment: the full logits
    # target logits of a batched pass against a plain forward: the forward's terms without the log-softmax's sum
    # over the vocabulary, at the logits' scale
    want = full_logits(model, docs[1])[np.arange(4, 22), docs[1][5:]]
    np.testing.assert_allclose(whole.extra[:, 2], want, rtol=0, atol=scaled(want, forward_terms(23, 60) - 60, U32))


def test_rank_counts_equal_a_plain_sum_at_a_large_vocabulary_with_ties():
    # the byte count (scoring._count) against torch's own bool sum; rows of many exact ties included
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(40, 70_000, generator=g).bfloat16().float()  # bf16 values: many equal logits per row
    logits[5] = 0.0  # a row where every id ties with the target
    targets = torch.randint(0, 70_000, (40,), generator=g)
    own = logits.gather(-1, targets[:, None])
    ids = torch.arange(70_000)
    want = (logits > own).sum(-1) + ((logits == own) & (ids < targets[:, None])).sum(-1)
    assert torch.equal(scoring._ranks(logits, targets), want)
    assert scoring._ranks(logits, targets)[5] == targets[5]  # all tied: the ids below it come first


def test_a_pass_without_ranks_gives_the_same_log_probs_and_refuses_correctness():
    model = tiny_llama(vocab_size=50, seed=6)
    docs = [torch.randint(1, 50, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (20, 9)]
    full = token_statistics(model, docs, want_pp=True)
    bare = token_statistics(model, docs, want_pp=True, want_rank=False)
    for a, b in zip(full, bare):
        assert b.rank is None and np.array_equal(a.logp, b.logp) and np.array_equal(a.z, b.z)
        with pytest.raises(ValueError, match="without ranks"):
            b.correct


def counted_batches(monkeypatch) -> list[int]:
    """Rows of every batch the model is run on from now on."""
    rows: list[int] = []
    real = scoring._score_batch
    monkeypatch.setattr(scoring, "_score_batch", lambda m, batch, *a: rows.append(len(batch)) or real(m, batch, *a))
    return rows


@pytest.mark.parametrize("window,stride", [(None, None), (16, 12)])
def test_a_memo_answers_the_targets_it_covers_with_the_same_numbers(monkeypatch, window, stride):
    model = tiny_llama(vocab_size=60, seed=7)
    docs = [torch.randint(1, 60, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (40, 24, 11)]
    first = [30, 12, 5]
    kw = dict(window=window, stride=stride, token_budget=200)
    plain = token_statistics(model, docs, want_pp=True, **kw)  # the second implementation: no memo at all
    memo = scoring.ScoreMemo()
    rows = counted_batches(monkeypatch)
    tail = token_statistics(model, docs, first=first, memo=memo, **kw)  # no z-scores, targets from `first`
    after_tail = len(rows)
    whole = token_statistics(model, docs, want_pp=True, memo=memo, **kw)  # wider and with z: scored again
    assert len(rows) == 2 * after_tail or window is not None  # every segment again (no window: one a document)
    assert memo.hits == 0
    computed = len(rows)
    again_tail = token_statistics(model, docs, first=first, memo=memo, **kw)  # covered by `whole`: no batch
    again = token_statistics(model, docs, want_pp=True, memo=memo, **kw)
    assert len(rows) == computed > 0
    all_segments = sum(len(segments(i, len(d), window, stride)) for i, d in enumerate(docs))
    tail_segments = sum(len(segments(i, len(d), window, stride, f)) for i, (d, f) in enumerate(zip(docs, first)))
    assert memo.hits == all_segments + tail_segments
    for p, w, a, t in zip(plain, whole, again, again_tail):
        # the same batches (plan and padding) as without the memo: the same numbers, not merely close ones
        assert np.array_equal(p.logp, w.logp) and np.array_equal(p.rank, w.rank) and np.array_equal(p.z, w.z)
        assert np.array_equal(a.logp, w.logp) and np.array_equal(a.rank, w.rank) and np.array_equal(a.z, w.z)
        n = len(t.logp)  # a later first target: the tail of the whole document's scores
        assert t.z is None and np.array_equal(t.logp, w.logp[-n:]) and np.array_equal(t.rank, w.rank[-n:])
    for t, a in zip(tail, again_tail):
        assert np.array_equal(t.rank, a.rank)
        np.testing.assert_allclose(t.logp, a.logp, rtol=0, atol=scaled(a.logp, forward_terms(40, 60), U32))


def test_a_pass_that_asks_for_no_ranks_still_leaves_them_in_the_memo(monkeypatch):
    model = tiny_llama(vocab_size=40, seed=8)
    docs = [[3, 4, 5, 6, 7, 8, 9], [9, 8, 7, 6]]
    memo = scoring.ScoreMemo()
    bare = token_statistics(model, docs, want_rank=False, memo=memo)
    rows = counted_batches(monkeypatch)
    ranked = token_statistics(model, docs, memo=memo)
    assert not rows and memo.hits == 2 and all(b.rank is None for b in bare)
    assert [r.rank.tolist() for r in ranked] == [r.rank.tolist() for r in token_statistics(model, docs)]


def test_a_memo_belongs_to_one_model_and_skips_a_shared_context(monkeypatch):
    docs = [[1, 2, 3, 4, 5, 6]]
    memo = scoring.ScoreMemo()
    token_statistics(tiny_llama(vocab_size=20, seed=1), docs, memo=memo)
    with pytest.raises(ValueError, match="one model"):
        token_statistics(tiny_llama(vocab_size=20, seed=2), docs, memo=memo)
    model = tiny_llama(vocab_size=20, seed=3)
    fresh = scoring.ScoreMemo()
    rows = counted_batches(monkeypatch)
    for _ in range(2):  # scores read after a context are a function of the context too: never memoised
        token_statistics(model, docs, context=[7, 8], memo=fresh)
    assert len(rows) == 2 and fresh.hits == 0


def test_a_memo_keeps_at_most_its_bound_dropping_the_least_recently_used():
    model = tiny_llama(vocab_size=30, seed=4)
    docs = [[i, i + 1, i + 2, i + 3, i + 4] for i in range(1, 6)]  # 4 targets each (distinct token sequences)
    memo = scoring.ScoreMemo(max_targets=12)
    token_statistics(model, docs[:3], memo=memo)  # 12 targets: all kept
    token_statistics(model, docs[:1], memo=memo)  # doc 0 used again: doc 1 is now the oldest
    token_statistics(model, docs[3:4], memo=memo)  # 16 > 12: doc 1 dropped
    before = memo.hits
    token_statistics(model, [docs[0], docs[2], docs[3]], memo=memo)
    assert memo.hits - before == 3
    token_statistics(model, docs[1:2], memo=memo)
    assert memo.hits - before == 3  # doc 1 was scored again
