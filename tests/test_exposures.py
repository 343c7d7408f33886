"""Exposure counts are exact: a member labelled xr occurs exactly r times in the packed stream of one epoch, and
the trainer reads every row once per epoch, so a budget of E epochs shows it exactly r*E times. Counted
independently (token-sequence search in the flattened stream; the rows the real training loop asked for)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from reference_rows import build_rows, occurrences

from goldfish.config import from_dict
from goldfish.data import PrepareConfig, load_prepared, prepare
from goldfish.data.order import consumed_rows, member_exposures
from goldfish.data.packing import training_order, variant_layout
from goldfish.train_config import OptimConfig, ScheduleConfig, TrainConfig, make_plan

EOS, PAD = 1, 0
WORDS = (
    "river stone light north market garden winter letter silver engine harbor forest paper window "
    "morning voice island bridge valley castle thunder mirror candle meadow planet signal"
).split()


def _count_subsequence(stream: list[int], needle: list[int]) -> int:
    n = len(needle)
    return sum(stream[i : i + n] == needle for i in range(len(stream) - n + 1))


@pytest.mark.parametrize("packing", ["pack", "one_per_row"])
def test_packed_stream_holds_each_member_exactly_its_label(packing):
    rng = np.random.default_rng(0)
    reps = [1, 2, 3, 5, 1, 2, 3, 5]
    # members of distinct tokens (so a search cannot match across documents); some longer than a row of 16
    members = [100 * (i + 1) + np.arange(int(rng.integers(5, 24))) for i in range(len(reps))]
    background = [5000 + 100 * j + np.arange(int(rng.integers(3, 30))) for j in range(6)]
    order = training_order(reps, len(background), seed=3)
    cols, stats = build_rows(members + background, order, 16, packing, EOS, PAD, whole=len(members))
    real = cols["attention_mask"].reshape(-1) == 1
    stream = [t for t in cols["input_ids"].reshape(-1)[real].tolist() if t != EOS]  # the tokens trained on, in order
    assert [_count_subsequence(stream, m.tolist()) for m in members] == reps
    assert [_count_subsequence(stream, b.tolist()) for b in background] == [1] * len(background)
    np.testing.assert_array_equal(occurrences(cols["document_ids"], cols["position_ids"], len(members)), reps)
    assert stats["occurrences"] == sum(reps) + len(background)


def test_variant_layout_labels_variants_with_their_member():
    order, owner = variant_layout([1, 3, 2], num_background=2, seed=0)
    # documents: members 0..2, variants of member 1 (two) and of member 2 (one), then background 0..1
    np.testing.assert_array_equal(owner, [0, 1, 2, 1, 1, 2, 3, 4])
    assert sorted(order.tolist()) == list(range(8))  # every document once per epoch
    docs = [np.arange(10 * d, 10 * d + 4) for d in range(8)]
    cols, _ = build_rows(docs, order, 8, "pack", EOS, PAD, whole=6, owner=owner)
    np.testing.assert_array_equal(occurrences(cols["document_ids"], cols["position_ids"], 5), [1, 3, 2, 1, 1])


# ---------------------------------------------------------------- the stream the trainer consumes


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("exp")
    rng = np.random.default_rng(1)
    with open(root / "docs.jsonl", "w") as f:
        for i in range(60):
            f.write(json.dumps({"id": f"d{i}", "text": " ".join(rng.choice(WORDS, 60))}) + "\n")
    cfg = from_dict(
        PrepareConfig,
        {
            "name": "exp",
            "source": {"name": "local", "path": str(root / "docs.jsonl")},
            "tokenizer": {"name": "bpe", "vocab_size": 300},
            "seq_len": 48,
            "packing": "pack",
            "min_tokens": 8,
            "doc_tokens": 20,
            "num_members": 12,
            "repetitions": [1, 2, 3],
            "nonmember_mode": "held_out",
            "num_nonmembers": 6,
            "num_background": 10,
        },
    )
    return load_prepared(prepare(cfg, root / "prep", progress=False))


def _exposures(prepared, schedule: dict) -> dict[str, list[int]]:
    plan = make_plan(ScheduleConfig(**schedule), OptimConfig(), len(prepared.train), 48, 1)
    return member_exposures(prepared, consumed_rows(plan, seed=0, shuffle=True))


def test_a_budget_of_whole_epochs_multiplies_every_label_exactly(prepared):
    rows = len(prepared.train)
    batch = next(g for g in (4, 5, 7) if rows % g)  # an epoch that does not end on a full batch
    assert _exposures(prepared, {"epochs": 1, "global_batch_size": batch, "micro_batch_size": 1}) == {
        "1": [1, 1],
        "2": [2, 2],
        "3": [3, 3],
    }
    assert _exposures(prepared, {"epochs": 3, "global_batch_size": batch, "micro_batch_size": 1}) == {
        "1": [3, 3],
        "2": [6, 6],
        "3": [9, 9],
    }
    # a token budget of 1.5 epochs: some members are read once more than others, and the summary says so
    half = _exposures(prepared, {"max_tokens": int(1.5 * rows * 48), "global_batch_size": 1, "micro_batch_size": 1})
    assert all(int(r) <= lo <= hi <= 2 * int(r) for r, (lo, hi) in half.items())
    assert any(lo < hi for lo, hi in half.values())


def test_the_training_loop_reads_exactly_the_counted_rows(prepared, tmp_path, monkeypatch, one_thread):
    import goldfish.train as T
    from goldfish.train import train

    seen: list[np.ndarray] = []
    real_step = T._train_step

    def recording_step(cfg, engine, plan, rows, index, *rest):
        seen.append(np.asarray(index))
        return real_step(cfg, engine, plan, rows, index, *rest)

    monkeypatch.setattr(T, "_train_step", recording_step)
    rows = len(prepared.train)
    batch = next(g for g in (4, 5, 7) if rows % g)
    cfg = from_dict(
        TrainConfig,
        {
            "data": {"path": str(prepared.path)},
            "out": str(tmp_path / "run"),
            "progress": False,
            "log_every": 1000,
            "model": {
                "name": "llama-demo",
                "hidden_size": 32,
                "num_layers": 1,
                "num_heads": 2,
                "intermediate_size": 64,
            },
            "schedule": {"epochs": 2, "global_batch_size": batch, "micro_batch_size": 1},
            "checkpoint": {"every_steps": 0},
        },
    )
    out = train(cfg)
    stream = np.concatenate(seen)
    assert len(stream) == 2 * rows and sorted(stream.tolist()) == sorted(list(range(rows)) * 2)
    plan = make_plan(cfg.schedule, cfg.optim, rows, 48, 1)
    np.testing.assert_array_equal(stream, consumed_rows(plan, cfg.seed, cfg.data.shuffle))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exposures"] == {"1": [2, 2], "2": [4, 4], "3": [6, 6]}
    # independently: each member's token sequence, searched in the rows the loop read
    ids = prepared.train.batch(stream)
    flat = [t for t in ids["input_ids"][ids["attention_mask"] == 1].tolist()]
    for member in prepared.members:
        assert _count_subsequence(flat, member["input_ids"]) == 2 * member["repetitions"]
