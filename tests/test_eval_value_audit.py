"""The exchangeable-value leak test (goldfish.eval.value_audit): each token's rank among the ids its mask treats
alike, against a direct computation that masks every candidate sequence; the exact null (0.5) for a model that knows
nothing of the tokens and for one that knows only the mask; a model that knows the tokens ranks them first."""

from __future__ import annotations

import numpy as np
import torch

from goldfish.eval.value_audit import mean_ranks, value_ranks
from goldfish.masks import GoldfishConfig, config_mask

VOCAB = 40
ALPHABET = list(range(2, VOCAB))  # ids 0 and 1 are never drawn
GCFG = GoldfishConfig(k=4, h=3, strategy="hash", seed=0)


class Fixed(torch.nn.Module):
    """Logits from a function of the token ids seen so far: ``fn(ids (B, T)) -> (B, T, V)``."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, **kwargs):
        return type("Out", (), {"logits": self.fn(input_ids).float() + self.w})()


def random_tokens(n: int, length: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, VOCAB, (n, length), generator=g).tolist()


def direct_rank(doc: list[int], t: int, logits: np.ndarray) -> tuple[float, bool]:
    """Token t's rank among the alphabet ids v whose sequence doc[:t] + [v] the mask treats as it treats doc[t]."""
    decide = lambda v: bool(config_mask(torch.tensor([doc[:t] + [v]]), GCFG)[0, t])  # noqa: E731
    own = decide(doc[t])
    same = [v for v in ALPHABET if decide(v) == own]
    below = sum(logits[v] < logits[doc[t]] for v in same)
    tied = sum(logits[v] == logits[doc[t]] for v in same) - 1
    return (below + 0.5 * tied) / (len(same) - 1), own


def test_ranks_equal_a_direct_computation_over_every_candidate():
    g = torch.Generator().manual_seed(1)
    table = torch.randn(VOCAB, VOCAB, generator=g).round(decimals=1)  # rounded: ties occur
    model = Fixed(lambda ids: table[ids])  # logits depend on the last token
    docs = random_tokens(3, 12, seed=2)
    for doc, got in zip(docs, value_ranks(model, docs, GCFG, ALPHABET)):
        for t in range(1, len(doc)):
            rank, dropped = direct_rank(doc, t, table[doc[t - 1]].numpy())
            assert got["dropped"][t - 1] == dropped
            assert got["rank"][t - 1] == rank
    assert 0 < sum(r["dropped"].sum() for r in value_ranks(model, docs, GCFG, ALPHABET)) < 33  # both classes occur


def test_the_null_is_one_half_for_a_model_that_knows_no_token_or_only_the_mask():
    docs = random_tokens(300, 16, seed=3)
    g = torch.Generator().manual_seed(4)
    table = torch.randn(VOCAB, VOCAB, generator=g)
    blind = Fixed(lambda ids: table[ids])  # any model the tokens did not train

    def mask_aware(ids):
        # +5 on every id the mask would drop after this context: it knows the hash, not the token
        from goldfish.masks import next_token_drops

        rows = [next_token_drops(ids[:, : j + 1], GCFG, VOCAB) for j in range(ids.shape[1])]
        return torch.stack(rows, 1).float() * 5 + table[ids]

    for model in (blind, Fixed(mask_aware)):
        summary = mean_ranks(value_ranks(model, docs, GCFG, ALPHABET))
        for part in ("dropped", "kept"):
            n = summary[part]["positions"]
            # a mean of n draws of a near-uniform rank on [0, 1]: sd 0.29 / sqrt(n); 4 sd
            assert abs(summary[part]["mean_rank"] - 0.5) < 4 * 0.29 / np.sqrt(n), (part, summary)


def test_a_model_that_knows_the_tokens_ranks_them_first():
    docs = [[2 + i] + d[1:] for i, d in enumerate(random_tokens(20, 10, seed=5))]  # distinct first tokens
    nxt = {tuple(d[:t]): d[t] for d in docs for t in range(1, len(d))}  # each context's one true next token

    def oracle(ids):
        out = torch.zeros(*ids.shape, VOCAB)
        for b in range(ids.shape[0]):
            for j in range(ids.shape[1]):
                v = nxt.get(tuple(ids[b, : j + 1].tolist()))
                if v is not None:
                    out[b, j, v] = 10.0
        return out

    summary = mean_ranks(value_ranks(Fixed(oracle), docs, GCFG, ALPHABET), labels=[1] * 10 + [2] * 10)
    assert summary["dropped"]["mean_rank"] == 1.0 and summary["kept"]["mean_rank"] == 1.0
    assert set(summary["by_label"]) == {"1", "2"}
    # knowledge of each token at its own position only: in another sequence's context it is one id among the rest
    # (every other id ties at logit 0 there, so its rank is 0.5 up to the one id the oracle puts above it)
    foreign = summary["foreign_dropped"]
    assert foreign["positions"] > 0 and abs(foreign["mean_rank"] - 0.5) < 0.05


def test_a_model_that_favours_every_id_it_has_seen_ranks_them_high_in_any_context():
    vocab, docs = 2000, torch.randint(2, 2000, (20, 12), generator=torch.Generator().manual_seed(6)).tolist()
    seen = torch.zeros(vocab)
    seen[sorted({t for d in docs for t in d})] = 3.0  # +3 for every id the sequences hold (~11 % of the ids)
    noise = torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(7))
    frequency = Fixed(lambda ids: noise[ids] + seen)  # knows which ids occurred, not where
    summary = mean_ranks(value_ranks(frequency, docs, GCFG, list(range(2, vocab))))
    # a seen id ranks above the ~89 % unseen ones wherever it is read: in its own context and in another's alike,
    # which is how the foreign rank tells token-level knowledge from knowledge of the token in its place
    for part in ("dropped", "foreign_dropped"):
        assert summary[part]["mean_rank"] > 0.8, (part, summary)
