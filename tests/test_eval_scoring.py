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
