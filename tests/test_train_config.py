"""Config validation and one-line errors for bad input; every shipped experiments/train_*.yaml loads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from tolerances import U64, rounding
from train_helpers import REPO, tiny_config

from goldfish.cli import main
from goldfish.config import from_dict, load_config
from goldfish.errors import ConfigError, UserError
from goldfish.precision import resolve_precision
from goldfish.train import micro_batches, train
from goldfish.train_config import OptimConfig, ScheduleConfig, TrainConfig, learning_rate, make_plan

SHIPPED = sorted((REPO / "experiments").glob("train_*.yaml"))


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Every test here runs with one torch thread (the ``one_thread`` fixture of conftest.py)."""


def test_there_are_shipped_configs():
    assert any(p.name == "train_tiny.yaml" for p in SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    cfg = load_config(TrainConfig, path)
    assert cfg.out and cfg.data.path


def test_unknown_key_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown config key 'optim.lrr'; valid keys here: betas, eps, lr"):
        load_config(TrainConfig, None, ["optim.lrr=1e-3"])


def test_all_problems_are_reported_at_once():
    with pytest.raises(ConfigError) as err:
        load_config(TrainConfig, None, ["optim.lr=-1", "optim.betas=[0.9, 1.5]", "schedule.epochs=many"])
    message = str(err.value)
    assert "optim: lr=-1.0 must be > 0" in message and "optim: " in message and "betas=[0.9, 1.5]" in message
    assert "schedule.epochs='many' is not a valid" in message and "\n" not in message
    with pytest.raises(ConfigError, match="model: name='llama-7T' is not a known size; choose one of: llama-demo"):
        load_config(TrainConfig, None, ["model.name=llama-7T"])


def test_indivisible_batch_prints_every_factor():
    schedule = ScheduleConfig(global_batch_size=10, micro_batch_size=4)
    with pytest.raises(UserError, match=r"global_batch_size=10 is not divisible by micro_batch_size\(4\)·dp\(2\)=8"):
        make_plan(schedule, OptimConfig(), rows=100, seq_len=16, dp_size=2)


def test_the_first_budget_reached_ends_training():
    optim = OptimConfig(warmup_frac=0.1)
    plan = make_plan(ScheduleConfig(epochs=3, global_batch_size=4, micro_batch_size=2), optim, 40, 16, 1)
    assert (plan.steps_per_epoch, plan.total_steps, plan.warmup_steps) == (10, 30, 3)
    batch = {k: torch.arange(4 * 3).view(4, 3) for k in ("input_ids", "labels", "position_ids")}
    micro = micro_batches(batch, torch.zeros(4, 3, dtype=torch.bool), plan, dp_rank=0)
    assert [m["input_ids"][:, 0].tolist() for m in micro] == [[0, 3], [6, 9]]  # 4 rows as 2 micro-batches of 2
    tokens = ScheduleConfig(epochs=3, max_tokens=64 * 7 + 1, global_batch_size=4, micro_batch_size=2)
    assert make_plan(tokens, optim, 40, 16, 1).total_steps == 8  # 7 steps of 64 tokens + 1 token -> 8 steps
    # one epoch reads every row: 41 rows in batches of 4 -> 10 full steps + one of 1 row (topped up with empty rows)
    assert make_plan(ScheduleConfig(global_batch_size=4, micro_batch_size=4), optim, 41, 16, 1).total_steps == 11


def test_learning_rate_warms_up_then_decays_to_the_floor():
    optim = OptimConfig(lr=1.0, warmup_steps=4, min_lr_ratio=0.1)
    plan = make_plan(ScheduleConfig(max_steps=24, global_batch_size=1, micro_batch_size=1), optim, 100, 8, 1)
    lrs = [learning_rate(s, plan, optim) for s in range(24)]
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    # half way through the decay: (1 + 0.1) / 2, from float64 cos(pi / 2) and ~5 more operations
    assert lrs[4] == 1.0 and lrs[14] == pytest.approx(0.55, rel=rounding(6, U64), abs=0)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:])) and lrs[-1] > 0.1


def _cli(args: list[str], capsys) -> tuple[int, str]:
    code = main(["train", *args])
    return code, capsys.readouterr().err.strip()


def test_cli_errors_are_one_line(data, tmp_path, capsys):
    code, err = _cli([f"data.path={tmp_path / 'nope'}", f"out={tmp_path / 'run'}"], capsys)
    assert code == 2 and err.startswith("error: prepared data not found") and "goldfish prepare" in err
    assert "\n" not in err
    code, err = _cli(["optim.lr=fast"], capsys)
    assert code == 2 and err == "error: optim.lr='fast' is not a number"
    code, err = _cli(
        [f"data.path={data}", f"out={tmp_path / 'run'}", "schedule.global_batch_size=6", "schedule.micro_batch_size=4"],
        capsys,
    )
    assert code == 2 and "micro_batch_size(4)·dp(1)=4" in err and "\n" not in err
    assert not (tmp_path / "run").exists()  # nothing written for a run that could not start


def test_vocabulary_mismatch_of_a_fine_tuned_model(data, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=500, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    LlamaForCausalLM(config).save_pretrained(str(tmp_path / "other"))
    cfg = tiny_config(data, tmp_path / "run", model={"path": str(tmp_path / "other")})
    with pytest.raises(UserError, match="vocabulary mismatch"):
        train(from_dict(TrainConfig, cfg))


def test_fine_tuning_a_local_model_with_the_same_vocabulary(data, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    start = LlamaForCausalLM(config)
    start.save_pretrained(str(tmp_path / "base"))
    cfg = tiny_config(
        data,
        tmp_path / "run",
        model={"path": str(tmp_path / "base")},
        schedule={"max_steps": 2, "global_batch_size": 4, "micro_batch_size": 4},
    )
    out = train(from_dict(TrainConfig, cfg))
    from train_helpers import load_weights

    tuned = load_weights(out)
    assert tuned["model.embed_tokens.weight"].shape == (64, 32)
    assert not torch.equal(
        tuned["model.layers.0.mlp.up_proj.weight"], start.state_dict()["model.layers.0.mlp.up_proj.weight"]
    )


def test_resolved_config_is_saved_and_reloads(data, tmp_path):
    cfg = tiny_config(data, tmp_path / "run", schedule={"max_steps": 1, "global_batch_size": 4, "micro_batch_size": 4})
    out = train(from_dict(TrainConfig, cfg))
    again = load_config(TrainConfig, Path(out) / "config.yaml")
    # saved resolved: precision=auto (the default) as this machine resolves it, everything else as given
    assert again.precision == resolve_precision("auto", "cpu") and from_dict(TrainConfig, cfg).precision == "auto"
    assert again == dataclasses.replace(from_dict(TrainConfig, cfg), precision=again.precision)
