"""``goldfish train engine=axonn`` on 2 CPU ranks started as torchrun starts them (gloo; ``dist_utils.launch_train``)
through the real trainer.

The row-parallel AxoNN run must reproduce the native engine in one process: same global batches and Goldfish masks
(kept-token counts), every step's losses and gradient norms and the exported weights up to the order of float sums
(``train_helpers.assert_same_training``, with AdamW's ε at 1e-2 so that the weights' bound is tight); this also covers
the trainer's weight-decay grouping (by shape) and packed rows with per-document ``position_ids``. Resuming the AxoNN
run from its step-2 checkpoint must give bit-identical final weights.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from dist_utils import launch_train
from train_helpers import assert_same_training, load_weights, tiny_config

from goldfish.config import from_dict
from goldfish.io import read_jsonl
from goldfish.train import train
from goldfish.train_config import TrainConfig

pytestmark = pytest.mark.dist  # every test here starts ranks as torchrun does (dist_utils.launch_train)

SCHEDULE = {"max_steps": 4, "global_batch_size": 8, "micro_batch_size": 2}
LOSS = {"type": "goldfish", "goldfish": {"k": 4, "h": 13}}
EPS = 1e-2  # AdamW ε of both runs (tolerances.adamw_drift)
OPTIM = {"lr": 1e-2, "warmup_steps": 2, "eps": EPS}


def _launch(cfg: dict, nproc: int = 2):
    return launch_train(cfg, nproc, timeout=300)


@pytest.fixture(scope="module")
def axonn_run(data, tmp_path_factory):
    """(config, run folder) of a 4-step row(2) AxoNN run with checkpoints at steps 2 and 4 (keep_optimizer: the
    finished run keeps them whole, for the resume test)."""
    out = tmp_path_factory.mktemp("axonn") / "run"
    cfg = tiny_config(
        data,
        out,
        schedule=SCHEDULE,
        loss=LOSS,
        optim=OPTIM,
        engine="axonn",
        axonn={"row": 2},
        checkpoint={"every_steps": 2, "keep_last": 0, "keep_optimizer": True},
    )
    done = _launch(cfg)
    assert done.returncode == 0, done.stderr[-3000:]
    return cfg, out


def test_row_parallel_axonn_run_matches_native_one_process(data, axonn_run, tmp_path):
    _, out = axonn_run
    torch.set_num_threads(1)
    single = train(
        from_dict(TrainConfig, tiny_config(data, tmp_path / "single", schedule=SCHEDULE, loss=LOSS, optim=OPTIM))
    )
    assert len(read_jsonl(out / "metrics.jsonl")) == SCHEDULE["max_steps"]
    assert_same_training(single, out, EPS, tokens=SCHEDULE["global_batch_size"] * 32)
    ckpt = out / "checkpoints" / "step_000004"
    assert sorted(p.name for p in ckpt.glob("*_rank00001.*")) == [
        "axonn_layout_rank00001.pt",
        "model_rank00001.safetensors",
        "optimizer_rank00001.pt",
        "rng_rank00001.json",
        "rng_rank00001.safetensors",
    ]


@pytest.mark.slow
def test_resuming_from_a_checkpoint_is_exact(axonn_run, tmp_path):
    cfg, out = axonn_run
    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed)
    for name in ("checkpoints/step_000004", "model", "summary.json"):
        shutil.rmtree(resumed / name) if (resumed / name).is_dir() else (resumed / name).unlink()
    done = _launch(dict(cfg, out=str(resumed)))
    assert done.returncode == 0, done.stderr[-3000:]
    full, again = load_weights(out), load_weights(resumed)
    assert all(torch.equal(full[k], again[k]) for k in full)
    assert [r["loss"] for r in read_jsonl(resumed / "metrics.jsonl")] == [
        r["loss"] for r in read_jsonl(out / "metrics.jsonl")
    ]
