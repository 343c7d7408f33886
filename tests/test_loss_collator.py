"""Goldfish loss and collator: equal to the HF seam (labels=-100 + cross_entropy) computed independently."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tolerances import rounding

from goldfish import GoldfishCollator, GoldfishConfig, apply_goldfish, goldfish_loss, goldfish_mask


def _batch(B=3, T=40, V=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, requires_grad=True)
    labels = torch.randint(3, V, (B, T), generator=g)
    labels[1, 30:] = -100  # padding
    return logits, labels


def test_goldfish_loss_equals_cross_entropy_after_apply_goldfish():
    logits, labels = _batch()
    cfg = GoldfishConfig(k=3, h=5)
    out = goldfish_loss(logits, labels, cfg)
    masked = apply_goldfish(labels, cfg)
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, 50), masked[:, 1:].reshape(-1), ignore_index=-100)
    # the same per-token cross-entropies (one kernel), summed in another order over at most 3·39 targets
    assert torch.allclose(out.loss, expected, rtol=rounding(3 * 39), atol=0)
    # dropped statistics: mean CE over exactly the dropped supervised targets
    drop = goldfish_mask(labels, 3, 5)[:, 1:] & (labels[:, 1:] != -100)
    ce = F.cross_entropy(
        logits[:, :-1].reshape(-1, 50), labels[:, 1:].reshape(-1), ignore_index=-100, reduction="none"
    ).view(3, 39)
    assert int(out.dropped_count) == int(drop.sum()) > 0
    assert torch.allclose(out.dropped_loss, ce[drop].mean(), rtol=rounding(3 * 39), atol=0)
    assert int(out.kept_count) == int((masked[:, 1:] != -100).sum())


def test_dropped_tokens_get_no_gradient():
    logits, labels = _batch(seed=1)
    cfg = GoldfishConfig(k=2, h=3)
    goldfish_loss(logits, labels, cfg).loss.backward()
    drop = goldfish_mask(labels, 2, 3)[:, 1:]
    grad_rows = logits.grad[:, :-1].abs().sum(-1)
    assert torch.all(grad_rows[drop] == 0)
    assert torch.all(grad_rows[~drop & (labels[:, 1:] != -100)] > 0)


def test_standard_loss_without_config_matches_hf():
    logits, labels = _batch(seed=2)
    out = goldfish_loss(logits, labels)
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, 50), labels[:, 1:].reshape(-1), ignore_index=-100)
    assert torch.allclose(out.loss, expected, rtol=rounding(3 * 39), atol=0)  # 3·39 targets summed in another order
    assert int(out.dropped_count) == 0


class _PadCollator:
    """A minimal HF-style LM collator: right-pad with pad id 0, labels = ids with -100 at padding."""

    def __call__(self, features):
        T = max(len(f["input_ids"]) for f in features)
        ids = torch.zeros(len(features), T, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, f in enumerate(features):
            ids[i, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
            att[i, : len(f["input_ids"])] = 1
        return {"input_ids": ids, "attention_mask": att, "labels": ids.masked_fill(att == 0, -100)}


class _Tok:
    all_special_ids = [0, 1]


def test_collator_masks_labels_exactly_where_goldfish_mask_says():
    g = torch.Generator().manual_seed(3)
    docs = [torch.randint(2, 1000, (n,), generator=g).tolist() for n in (30, 55, 12)]
    docs[1][20] = 1  # an EOS inside: never dropped, window boundary
    collator = GoldfishCollator(_PadCollator(), GoldfishConfig(k=4, h=13), _Tok())
    batch = collator([{"input_ids": d} for d in docs])
    for i, d in enumerate(docs):
        expected = torch.tensor(d).masked_fill(goldfish_mask(torch.tensor(d), 4, 13, special_ids=[0, 1]), -100)
        assert torch.equal(batch["labels"][i, : len(d)], expected)
        assert torch.all(batch["labels"][i, len(d) :] == -100)
    assert batch["labels"][1, 20] == 1


def test_collator_works_with_hf_data_collator():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, **{f"w{i}": i + 2 for i in range(100)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>")
    base = DataCollatorForLanguageModeling(tok, mlm=False)
    collator = GoldfishCollator(base, GoldfishConfig(k=2, h=4), tok)
    texts = [" ".join(f"w{(i * 7 + j) % 100}" for j in range(n)) for i, n in enumerate((25, 40))]
    batch = collator([tok(t) for t in texts])
    plain = base([tok(t) for t in texts])
    dropped = (batch["labels"] == -100) & (plain["labels"] != -100)
    assert dropped.any()
    expected = goldfish_mask(plain["labels"], 2, 4, special_ids=[0, 1])
    assert torch.equal(dropped, expected)
