"""ReCaLL at the cost of one pass per document: its unconditional likelihood read from the target pass where the
same tokens were scored, and its nonmember prefix read once per model (keys/values reused). Checked against the
old two-pass computation (a plain forward pass over ``prefix + head`` and one over ``head``, per document) on a
tiny model, to float rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from goldfish.errors import UserError
from goldfish.eval.membership import score_documents
from goldfish.eval.scoring import token_statistics

from eval_fixtures import TEXTS, tiny_llama, tiny_tokenizer


def _mean_logp(model, ids: list[int], first: int) -> float:
    """Average log p of targets first .. len-1 from one plain forward pass (the second implementation)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()  # (T, V)
    logp = torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]  # (T-1,)
    return float(logp[first - 1 :].mean())


class Passes:
    """A ``logger`` of the scoring passes: documents and tokens per pass name."""

    def __init__(self):
        self.docs: dict[str, int] = {}

    def log(self, record: dict) -> None:
        self.docs[record["pass"]] = self.docs.get(record["pass"], 0) + record["docs"]


def _embedded(model) -> list[tuple[int, ...]]:
    """Shapes of every input the model's embedding reads (appended as the model runs)."""
    shapes: list[tuple[int, ...]] = []
    model.get_input_embeddings().register_forward_hook(lambda m, args, out: shapes.append(tuple(args[0].shape)))
    return shapes


def test_recall_equals_the_two_pass_computation_with_one_pass_per_document():
    tok = tiny_tokenizer()
    model = tiny_llama(len(tok), seed=3)
    docs = [tok(t, add_special_tokens=False)["input_ids"][: 6 + 3 * i] for i, t in enumerate(TEXTS)]  # 6 .. 21
    prefix = tok(TEXTS[5], add_special_tokens=False)["input_ids"][:10]
    window = 24
    n = window - len(prefix)  # each document's first n tokens are scored beside the prefix
    assert sum(len(d) <= n for d in docs) >= 2 and sum(len(d) > n for d in docs) >= 2  # both kinds below
    shapes, passes = _embedded(model), Passes()
    got = score_documents(
        model, docs, recall_prefix=prefix, recall_skip=[1], window=window, progress=False, logger=passes
    )["recall"]
    # the prefix went through the model once, alone (batch 1); no batch read it again: the only batch wider than n
    # tokens is the target pass's (every document whole, one batch)
    assert shapes.count((1, len(prefix))) == 1 and [w for _, w in shapes if w > n] == [max(map(len, docs))]
    for i, d in enumerate(docs):
        if i == 1:
            assert np.isnan(got[i])  # the prefix's own document is not scored
            continue
        head = d[:n]
        want = _mean_logp(model, prefix + head, len(prefix) + 1) / _mean_logp(model, head, 1)
        assert got[i] == pytest.approx(want, rel=1e-5)
    # a document within n tokens was scored whole by the target pass: no second unconditional pass for it
    assert passes.docs["target"] == len(docs)
    assert passes.docs["recall_plain"] == sum(len(d) > n for d in docs)
    assert passes.docs["recall_prefixed"] == len(docs)


def test_scores_after_a_shared_context_equal_those_of_the_joined_sequence():
    """Padded batches of unequal documents read after a context (its cache expanded to the batch) score every
    target exactly as the context + document sequence scored whole: log p, rank and Min-K%++ z."""
    tok = tiny_tokenizer()
    model = tiny_llama(len(tok), seed=4)
    docs = [tok(t, add_special_tokens=False)["input_ids"][: 8 + 2 * i] for i, t in enumerate(TEXTS[:5])]
    context = tok(TEXTS[5], add_special_tokens=False)["input_ids"][:9]
    first = [1 + i % 3 for i in range(len(docs))]
    kw = dict(window=64, token_budget=40, progress=False, want_pp=True)  # token_budget: several padded batches
    joined = token_statistics(model, [context + d for d in docs], first=[len(context) + f for f in first], **kw)
    shared = token_statistics(model, docs, first=first, context=context, **kw)
    for a, b in zip(joined, shared):
        np.testing.assert_allclose(b.logp, a.logp, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b.z, a.z, rtol=1e-4, atol=1e-5)
        assert (b.rank == a.rank).all()


def test_a_document_that_does_not_fit_beside_its_context_is_refused():
    tok = tiny_tokenizer()
    model = tiny_llama(len(tok), seed=4)
    with pytest.raises(UserError, match="does not fit the scoring window of 16 after its context of 10 tokens"):
        token_statistics(model, [list(range(2, 10))], context=list(range(10)), window=16, progress=False)
