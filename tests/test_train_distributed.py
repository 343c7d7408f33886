"""``goldfish train`` on 2 CPU ranks started as torchrun starts them (``dist_utils.launch_train``) and under
``accelerate launch`` (gloo): the data-parallel run matches one process.

The trainer shards every global batch over data-parallel ranks and normalises by the global kept-token count, so
two ranks with micro-batch 2 must give the single-process run's losses and weights up to the order of float sums
(``train_helpers.assert_same_training``; AdamW's ε is 1e-2 so that a rounding difference cannot move a weight by
more than the bound derives, see ``tolerances.adamw_drift``).
"""

from __future__ import annotations

import json

import pytest
import torch
from dist_utils import launch_train
from train_helpers import accelerate_train, assert_same_training, tiny_config

from goldfish.config import from_dict
from goldfish.train import train
from goldfish.train_config import TrainConfig

pytestmark = pytest.mark.dist  # every test here starts ranks as torchrun does (dist_utils.launch_train)

EPS = 1e-2  # AdamW ε of both runs


def _launch(cfg: dict, nproc: int = 2):
    return launch_train(cfg, nproc, timeout=300)


@pytest.mark.parametrize("fsdp", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["ddp", "fsdp"])
def test_two_data_parallel_ranks_match_one_process(data, tmp_path, fsdp):
    schedule = {"max_steps": 4, "global_batch_size": 8, "micro_batch_size": 2}
    loss = {"type": "goldfish", "goldfish": {"k": 4, "h": 13}}
    optim = {"lr": 1e-2, "warmup_steps": 2, "eps": EPS}
    multi = tiny_config(
        data,
        tmp_path / "multi",
        schedule=schedule,
        loss=loss,
        optim=optim,
        parallel={"fsdp": fsdp},
        checkpoint={"every_steps": 2, "keep_last": 1, "keep_optimizer": True},
    )  # step 4's shards kept
    done = _launch(multi)
    assert done.returncode == 0, done.stderr[-3000:]
    torch.set_num_threads(1)
    single = train(
        from_dict(TrainConfig, tiny_config(data, tmp_path / "single", schedule=schedule, loss=loss, optim=optim))
    )
    assert_same_training(single, tmp_path / "multi", EPS, tokens=8 * 32)
    ckpt = tmp_path / "multi" / "checkpoints" / "step_000004"
    assert sorted(p.name for p in ckpt.glob("model_rank*")) == [
        "model_rank00000.safetensors",
        "model_rank00001.safetensors",
    ]


def test_accelerate_launch_matches_one_process(data, tmp_path):
    """HF users start multi-GPU jobs with `accelerate launch`: it runs the same trainer (torchrun underneath)."""
    schedule = {"max_steps": 4, "global_batch_size": 8, "micro_batch_size": 2}
    loss = {"type": "goldfish", "goldfish": {"k": 4, "h": 13}}
    optim = {"lr": 1e-2, "warmup_steps": 2, "eps": EPS}
    done = accelerate_train(tiny_config(data, tmp_path / "multi", schedule=schedule, loss=loss, optim=optim))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "multi" / "summary.json").read_text())["world_size"] == 2
    torch.set_num_threads(1)
    single = train(
        from_dict(TrainConfig, tiny_config(data, tmp_path / "single", schedule=schedule, loss=loss, optim=optim))
    )
    assert_same_training(single, tmp_path / "multi", EPS, tokens=8 * 32)
