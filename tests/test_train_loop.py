"""The training loop on a tiny model: learning, Goldfish statistics, exact loss values, accumulation, determinism,
Hugging Face export."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tolerances import rounding
from train_helpers import EOS, TINY_FORWARD, assert_same_training, tiny_config

from goldfish.config import from_dict
from goldfish.data import load_prepared
from goldfish.data.order import epoch_order
from goldfish.io import read_jsonl
from goldfish.masks import GoldfishConfig, apply_goldfish
from goldfish.models import build_model
from goldfish.train import train
from goldfish.train_config import TrainConfig

TIMING = ("step_time", "tokens_per_s", "mfu")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Every test here runs with one torch thread (the ``one_thread`` fixture of conftest.py)."""


def run(cfg: dict):
    out = train(from_dict(TrainConfig, cfg))
    return out, read_jsonl(out / "metrics.jsonl")


def test_loss_decreases_from_uniform(data, tmp_path):
    _, records = run(
        tiny_config(data, tmp_path / "r", schedule={"max_steps": 40, "global_batch_size": 4, "micro_batch_size": 4})
    )
    losses = [r["loss"] for r in records]
    assert [r["step"] for r in records] == list(range(1, 41))
    assert abs(losses[0] - math.log(64)) < 0.3  # an untrained model is close to uniform over the 64-token vocabulary
    assert sum(losses[-4:]) / 4 < losses[0] - 1.0


@pytest.mark.parametrize("k", [2, 4])
def test_goldfish_drops_one_in_k(data, tmp_path, k):
    """One epoch (every row once): dropped / droppable ≈ 1/k, where EOS targets are never droppable."""
    cfg = tiny_config(
        data,
        tmp_path / "r",
        loss={"type": "goldfish", "goldfish": {"k": k, "h": 13}},
        schedule={"epochs": 1, "global_batch_size": 4, "micro_batch_size": 4},
    )
    out, records = run(cfg)
    labels = torch.from_numpy(load_prepared(data).train.batch(np.arange(16))["labels"])
    eos_targets = int((labels[:, 1:] == EOS).sum())
    dropped = sum(r["dropped_tokens"] for r in records)
    supervised = sum(r["kept_tokens"] for r in records) + dropped
    assert supervised == int((labels[:, 1:] != -100).sum())
    assert abs(dropped / (supervised - eos_targets) - 1 / k) < 0.07  # ~450 droppable targets: 3 sigma
    assert all(r["dropped_loss"] is not None for r in records)


def _per_document_logits(model, ids, docs, positions):
    """(B, T, V) logits computed one document at a time (the packed run must attend within documents only)."""
    logits = torch.zeros(*ids.shape, model.config.vocab_size)
    for b in range(ids.shape[0]):
        for d in docs[b].unique():
            if d < 0:
                continue  # padding: its targets are -100
            where = (docs[b] == d).nonzero().squeeze(-1)
            logits[b, where] = model(ids[b, where][None], position_ids=positions[b, where][None]).logits[0]
    return logits


def test_logged_losses_equal_a_hand_computation(data, tmp_path):
    """Step 1's kept and dropped losses = F.cross_entropy(ignore_index=-100) after apply_goldfish, per document."""
    cfg = tiny_config(
        data,
        tmp_path / "r",
        loss={"type": "goldfish", "goldfish": {"k": 3, "h": 4}},
        schedule={"max_steps": 1, "global_batch_size": 8, "micro_batch_size": 4},
    )
    _, records = run(cfg)
    config = from_dict(TrainConfig, cfg)
    rows = epoch_order(16, 0, config.seed, True)[:8].tolist()
    batch = {k: torch.from_numpy(v) for k, v in load_prepared(data).train.batch(np.array(rows)).items()}
    model = build_model(config.model, 64, config.seed).eval()
    gf = GoldfishConfig(k=3, h=4, special_ids=[0, 1, 2])
    gf_labels = apply_goldfish(
        batch["labels"], gf, document_ids=batch["document_ids"], position_ids=batch["position_ids"]
    )
    with torch.no_grad():
        logits = _per_document_logits(model, batch["input_ids"], batch["document_ids"], batch["position_ids"])
    flat = logits[:, :-1].reshape(-1, 64)
    kept = F.cross_entropy(flat, gf_labels[:, 1:].reshape(-1), ignore_index=-100)
    dropped_labels = torch.where(gf_labels == batch["labels"], -100, batch["labels"])
    dropped = F.cross_entropy(flat, dropped_labels[:, 1:].reshape(-1), ignore_index=-100)
    assert records[0]["kept_tokens"] == int((gf_labels[:, 1:] != -100).sum())
    assert records[0]["dropped_tokens"] == int((dropped_labels[:, 1:] != -100).sum()) > 0
    # the same tokens' forward paths in another batch shape (one document at a time), then a mean over the tokens
    kept_tol, dropped_tol = (rounding(TINY_FORWARD + records[0][n]) for n in ("kept_tokens", "dropped_tokens"))
    assert records[0]["loss"] == pytest.approx(kept.item(), rel=kept_tol, abs=0)
    assert records[0]["dropped_loss"] == pytest.approx(dropped.item(), rel=dropped_tol, abs=0)
    assert not (dropped_labels == EOS).any()  # special tokens are never dropped


def test_gradient_accumulation_matches_one_big_batch(data, tmp_path):
    """4 steps of one 4-row micro-batch vs four 1-row micro-batches: the same sums in another order.

    AdamW's ε is 1e-2 here: the update moves by up to (1 + C)/ε times a gradient difference. At the default 1e-8,
    one weight whose step-1 gradient was -5.57e-9 in one run and -5.60e-9 in the other (a 3e-11 rounding difference)
    ended 6e-6 apart with AVX2 kernels, so no bound from the arithmetic could be tight there. A wrong normaliser
    (each micro-batch divided by its own kept count, then averaged) moves the step-1 gradient norm by 4 % and the
    weights by 5e-3, far outside the bounds of train_helpers.assert_same_training (1.3e-4 and 1.8e-4)."""
    eps = 1e-2
    cfg = lambda name, micro: tiny_config(  # noqa: E731
        data,
        tmp_path / name,
        loss={"type": "goldfish", "goldfish": {"k": 4, "h": 13}},
        optim={"lr": 1e-2, "warmup_steps": 2, "eps": eps},
        schedule={"max_steps": 4, "global_batch_size": 4, "micro_batch_size": micro},
    )
    assert_same_training(run(cfg("a", 4))[0], run(cfg("b", 1))[0], eps, tokens=4 * 32)


def test_same_config_same_metrics(data, tmp_path):
    def cfg(name):
        return tiny_config(
            data,
            tmp_path / name,
            loss={"type": "goldfish"},
            schedule={"max_steps": 5, "global_batch_size": 4, "micro_batch_size": 2},
        )

    _, first = run(cfg("a"))
    _, second = run(cfg("b"))
    strip = lambda rs: [{k: v for k, v in r.items() if k not in TIMING} for r in rs]  # noqa: E731
    assert strip(first) == strip(second)
    _, other_seed = run({**cfg("c"), "seed": 1})
    assert strip(other_seed) != strip(first)


def test_bf16_autocast_trains_with_fp32_master_weights(data, tmp_path):
    out, records = run(
        tiny_config(
            data,
            tmp_path / "r",
            precision="bf16",
            schedule={"max_steps": 20, "global_batch_size": 4, "micro_batch_size": 4},
        )
    )
    from train_helpers import load_weights

    assert all(t.dtype == torch.float32 for t in load_weights(out).values())
    assert records[-1]["loss"] < records[0]["loss"] - 0.3


def test_export_loads_with_auto_classes_and_gives_the_trained_logits(data, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = tiny_config(data, tmp_path / "r", checkpoint={"every_steps": 0, "keep_last": 1, "keep_optimizer": True})
    out, _ = run(cfg)
    exported = AutoModelForCausalLM.from_pretrained(str(out / "model"), local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(out / "model"), local_files_only=True)
    assert tokenizer("w5 w6")["input_ids"][-2:] == [5, 6]
    assert exported.config.eos_token_id == EOS
    # the same weights, read from the final checkpoint into a freshly built model
    config = from_dict(TrainConfig, cfg)
    reference = build_model(config.model, 64, config.seed).eval()
    state = load_file(str(out / "checkpoints" / "step_000006" / "model_rank00000.safetensors"))
    reference.load_state_dict(state)
    ids = torch.randint(3, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(exported(ids).logits, reference(ids).logits)
    summary = (out / "summary.json").read_text()
    assert '"steps": 6' in summary


@pytest.mark.slow
def test_compiled_layers_train_like_eager_ones(data, tmp_path):
    """compile=true trains like eager: fused kernels only reorder and fuse float operations (same tolerances as
    gradient accumulation, with AdamW's ε = 1e-2 for the same reason)."""
    eps, schedule = 1e-2, {"max_steps": 4, "global_batch_size": 4, "micro_batch_size": 4}
    optim = {"lr": 1e-2, "warmup_steps": 2, "eps": eps}
    eager = run(tiny_config(data, tmp_path / "eager", schedule=schedule, optim=optim))
    compiled = run(tiny_config(data, tmp_path / "compiled", schedule=schedule, optim=optim, compile=True))
    assert_same_training(eager[0], compiled[0], eps, tokens=4 * 32)


@pytest.mark.integration
def test_the_no_leak_twin_trains_without_ever_seeing_a_dropped_token(data, tmp_path, monkeypatch):
    """`goldfish train` with ``replace_dropped``: every micro-batch the engine receives has a pseudo-random id at each
    dropped position (never the original, which the labels keep and the loss ignores), the Goldfish arm's drop mask
    (from the original ids), and the same inputs on a rerun."""
    import goldfish.train as loop

    seen: list[list[dict]] = []  # per run: each step's (only) micro-batch, as the engine receives it
    original = loop.micro_batches

    def spy(batch, dropped, plan, dp_rank):
        found = original(batch, dropped, plan, dp_rank)
        seen[-1].append({k: v.clone() for k, v in found[0].items()})
        return found

    monkeypatch.setattr(loop, "micro_batches", spy)
    steps = {"max_steps": 2, "global_batch_size": 4, "micro_batch_size": 4}
    for name, twin in (("goldfish", False), ("twin", True), ("again", True)):
        seen.append([])
        _, records = run(
            tiny_config(
                data,
                tmp_path / name,
                schedule=steps,
                loss={"type": "goldfish", "goldfish": {"k": 3, "h": 4, "replace_dropped": twin}},
            )
        )
        assert all(r["dropped_tokens"] > 0 for r in records)
    for gold, twin, again in zip(*seen):
        dropped = twin["drop_mask"]
        assert torch.equal(dropped, gold["drop_mask"])  # the Goldfish arm's positions
        assert (twin["input_ids"][dropped] != twin["labels"][dropped]).all()  # never the original token
        assert torch.equal(twin["input_ids"][~dropped], gold["input_ids"][~dropped])
        assert torch.equal(twin["labels"], gold["labels"]) and torch.equal(
            gold["input_ids"][dropped], gold["labels"][dropped]
        )
        assert torch.equal(again["input_ids"], twin["input_ids"])  # bit-identical on a rerun
