"""The leakage audit's controls in the Goldfish config: the positive control (``supervised_fraction``: a share of the
dropped positions trained on anyway) and the no-leak twin (``replace_dropped``: the dropped tokens replaced in the
model's input), against independent expectations -- a per-token reference of the documented choice, the share on a
long random sequence, the training step's inputs and loss."""

from __future__ import annotations

import pytest
import torch
from tolerances import proportion_se

from goldfish.errors import ConfigError
from goldfish.loss import EngineLoss
from goldfish.masks import GoldfishConfig, config_mask, goldfish_mask, next_token_drops, twin_input_ids
from goldfish.train import step_batch

MASK64 = (1 << 64) - 1
SUPERVISED_TAG = 0x5355504552564953  # "SUPERVIS": the positive control's salt, from its documentation


def _mix_py(x: int) -> int:
    """splitmix64 finaliser on Python ints (unsigned 64-bit), from the published constants."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def reference_supervised(row: list[int], h: int, fraction: float, seed: int, specials: set[int]) -> list[bool]:
    """The documented choice, token by token: the ``hash`` window of t (t-h+1 .. t, cut at the document start: the
    row start and special tokens), hashed from the seed, h and the SUPERVIS tag, below ``fraction * 2**53``."""
    out = []
    for t, tok in enumerate(row):
        if tok in specials:
            out.append(False)  # a special token is never dropped: whatever the choice, it stays kept
            continue
        start = t
        while start - 1 >= 0 and t - (start - 1) < h and row[start - 1] not in specials:
            start -= 1
        acc = _mix_py(((seed * 0x9E3779B97F4A7C15) & MASK64) ^ h ^ SUPERVISED_TAG)
        for x in row[start : t + 1]:
            acc = _mix_py(acc ^ (x + 1))
        out.append((acc >> 11) < int(fraction * (1 << 53)))
    return out


def test_effective_mask_is_the_base_mask_minus_the_reference_choice():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 40, (3, 90), generator=g)
    ids[ids < 2] = 1  # id 1 is special (EOS) at random places: a document boundary
    cfg = GoldfishConfig(k=3, h=5, seed=11, special_ids=[1], supervised_fraction=0.3)
    base = config_mask(ids, cfg.base)
    effective = config_mask(ids, cfg)
    assert torch.equal(base, goldfish_mask(ids, 3, 5, "hash", [1], seed=11))  # the base ignores the control
    for b in range(3):
        chosen = reference_supervised(ids[b].tolist(), 5, 0.3, 11, {1})
        expected = [d and not c for d, c in zip(base[b].tolist(), chosen)]
        assert effective[b].tolist() == expected
    assert (base & ~effective).any() and (effective & ~base).sum() == 0


@pytest.mark.parametrize("fraction", [0.05, 0.1, 0.25])
@pytest.mark.parametrize("strategy", ["hash", "hash-preceding", "static"])
def test_supervised_share_of_the_dropped_positions_is_the_fraction(fraction, strategy):
    ids = torch.randint(0, 50_000, (200_000,), generator=torch.Generator().manual_seed(5))
    cfg = GoldfishConfig(k=4, h=13, strategy=strategy, supervised_fraction=fraction)
    base, effective = config_mask(ids, cfg.base), config_mask(ids, cfg)
    n = int(base.sum())
    share = int((base & ~effective).sum()) / n
    assert abs(share - fraction) < 4 * proportion_se(fraction, n)  # the choice is independent of the mask's


@pytest.mark.parametrize("strategy", ["hash", "hash-table", "hash-preceding", "static"])
def test_next_token_drops_follow_the_effective_mask(strategy):
    g = torch.Generator().manual_seed(9)
    cfg = GoldfishConfig(k=2, h=3, strategy=strategy, special_ids=[0], supervised_fraction=0.5)
    context = torch.randint(1, 30, (4, 7), generator=g)
    drops = next_token_drops(context, cfg, 30)
    for b in range(4):
        rows = torch.cat([context[b].expand(30, 7), torch.arange(30)[:, None]], dim=1)
        assert drops[b].tolist() == config_mask(rows, cfg)[:, -1].tolist()


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"supervised_fraction": 1.0}, "supervised_fraction=1.0 is invalid"),
        ({"supervised_fraction": -0.1}, "supervised_fraction=-0.1 is invalid"),
        ({"supervised_fraction": True}, "supervised_fraction=True is invalid"),
        ({"replace_dropped": "yes"}, "replace_dropped='yes' is invalid"),
        ({"replace_dropped": True, "supervised_fraction": 0.1}, "cannot be combined"),
    ],
)
def test_invalid_controls_are_refused_in_one_line(settings, message):
    with pytest.raises(ConfigError, match=message) as err:
        GoldfishConfig(**settings)
    assert "\n" not in str(err.value)


def test_base_strips_the_controls_and_keeps_the_mask():
    cfg = GoldfishConfig(k=5, h=7, seed=2, special_ids=[3], supervised_fraction=0.1)
    assert cfg.base == GoldfishConfig(k=5, h=7, seed=2, special_ids=[3])
    assert GoldfishConfig(replace_dropped=True).base == GoldfishConfig()


def test_the_collator_refuses_the_twin():
    from goldfish.collator import GoldfishCollator

    with pytest.raises(ConfigError, match="goldfish train"):
        GoldfishCollator(lambda features: features, GoldfishConfig(replace_dropped=True))


# ---------------------------------------------------------------------------------------------- the no-leak twin


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """A global batch as the trainer takes it (two documents per row, EOS = 1, a top-up row of padding)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 64, (3, 40), generator=g)
    ids[:, 19] = 1
    docs = torch.cat([torch.zeros(3, 20, dtype=torch.long), torch.ones(3, 20, dtype=torch.long)], dim=1)
    pos = torch.cat([torch.arange(20), torch.arange(20)]).expand(3, 40).clone()
    labels = ids.clone()
    ids[2], labels[2], docs[2], pos[2] = 0, -100, -1, 0  # a top-up row
    return {"input_ids": ids, "labels": labels, "document_ids": docs, "position_ids": pos}


def test_the_twin_step_hides_every_dropped_token_from_the_model():
    batch = _batch()
    cfg = GoldfishConfig(k=3, h=4, special_ids=[1], replace_dropped=True)
    trained, dropped = step_batch(batch, cfg, 64)
    assert torch.equal(
        dropped,
        config_mask(batch["labels"], cfg, document_ids=batch["document_ids"], position_ids=batch["position_ids"]),
    )  # from the original ids
    assert dropped.sum() > 10
    twin = trained["input_ids"]
    assert (twin[dropped] != batch["input_ids"][dropped]).all()  # never the original token at a dropped position
    assert not torch.isin(twin[dropped], torch.tensor([1])).any() and twin.min() >= 0 and twin.max() < 64
    assert torch.equal(twin[~dropped], batch["input_ids"][~dropped])  # every other input unchanged
    assert torch.equal(trained["labels"], batch["labels"])
    again, again_dropped = step_batch(_batch(), cfg, 64)
    assert torch.equal(again["input_ids"], twin) and torch.equal(again_dropped, dropped)  # bit-identical rerun
    plain, plain_dropped = step_batch(batch, cfg.base, 64)  # the Goldfish arm: the same positions, inputs as they are
    assert torch.equal(plain_dropped, dropped) and torch.equal(plain["input_ids"], batch["input_ids"])


def test_the_twin_labels_at_dropped_positions_are_ignored_by_the_loss():
    batch = _batch(1)
    cfg = GoldfishConfig(k=3, h=4, special_ids=[1], replace_dropped=True)
    trained, dropped = step_batch(batch, cfg, 64)
    logits = torch.randn(3, 40, 64, generator=torch.Generator().manual_seed(2), requires_grad=True)
    out = EngineLoss()(logits, {"labels": trained["labels"], "drop_mask": dropped})
    out.kept_sum.backward()
    targets = torch.zeros_like(dropped)
    targets[:, :-1] = dropped[:, 1:]  # logits at t - 1 predict the target at t
    assert logits.grad[targets].abs().max() == 0  # no gradient toward a dropped token
    assert logits.grad[~targets & (trained["labels"].roll(-1, 1) != -100)].abs().sum() > 0


def test_a_document_gets_the_same_twin_text_in_any_row():
    cfg = GoldfishConfig(k=2, h=4, special_ids=[1])
    doc = torch.randint(2, 500, (30,), generator=torch.Generator().manual_seed(4))
    row_a = torch.cat([torch.tensor([7, 8, 9, 1]), doc])[None]  # after another document and EOS
    row_b = torch.cat([doc, torch.tensor([1, 5])])[None]
    twins = []
    for row in (row_a, row_b):
        dropped = config_mask(row, cfg)
        twins.append(twin_input_ids(row, row, dropped, cfg, 500))
    assert torch.equal(twins[0][0, 4:], twins[1][0, :30])
