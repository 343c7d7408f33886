"""``goldfish train`` with tensor and pipeline parallelism on 2 CPU ranks started as torchrun starts them (gloo;
``dist_utils.launch_train``): same run as one process.

The whole trainer path -- config, data sharding by ``engine.dp_rank``, Goldfish masks, checkpoints, HF export -- runs
on a tp=2 or pp=2 mesh and must log the one-process losses and gradient norms and end with its weights, up to the order
of float sums (``train_helpers.assert_same_training``); a pipeline run killed after its step-2 checkpoint continues bit
for bit.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from dist_utils import launch_train
from train_helpers import STEP_KEYS, assert_same_training, tiny_config

from goldfish.config import from_dict
from goldfish.io import read_jsonl
from goldfish.train import train
from goldfish.train_config import TrainConfig

# each case starts 2 ranks (dist_utils.launch_train)
pytestmark = [pytest.mark.slow, pytest.mark.dist]

SCHEDULE = {"max_steps": 4, "global_batch_size": 8, "micro_batch_size": 4}
LOSS = {"type": "goldfish", "goldfish": {"k": 4, "h": 13}}
EPS = 1e-2  # AdamW ε of every run here: bounds how far a rounding difference moves a weight (tolerances.adamw_drift)
OPTIM = {"lr": 1e-2, "warmup_steps": 2, "eps": EPS}


def _launch(cfg: dict, nproc: int = 2):
    return launch_train(cfg, nproc, timeout=600)


@pytest.fixture(scope="module")
def single(data, tmp_path_factory):
    torch.set_num_threads(1)
    cfg = tiny_config(data, tmp_path_factory.mktemp("single") / "run", schedule=SCHEDULE, loss=LOSS, optim=OPTIM)
    return train(from_dict(TrainConfig, cfg))


@pytest.mark.parametrize(
    "parallel", [{"tp": 2}, {"pp": 2, "pp_schedule": "gpipe", "pp_microbatches": 4}], ids=["tp2", "pp2-gpipe"]
)
def test_tensor_and_pipeline_runs_match_one_process(data, single, tmp_path, parallel):
    cfg = tiny_config(data, tmp_path / "multi", schedule=SCHEDULE, loss=LOSS, optim=OPTIM, parallel=parallel)
    done = _launch(cfg)
    assert done.returncode == 0, done.stderr[-3000:]
    applied = [line for line in done.stdout.splitlines() if line.startswith("parallel: applied")]
    assert len(applied) == 1 and ("tensor" if "tp" in parallel else "pipeline") in applied[0]  # rank 0 only
    assert_same_training(single, tmp_path / "multi", EPS, tokens=8 * 32)


def test_pipeline_run_resumes_exactly(data, single, tmp_path):
    cfg = tiny_config(
        data,
        tmp_path / "multi",
        schedule=SCHEDULE,
        loss=LOSS,
        optim=OPTIM,
        parallel={"pp": 2, "pp_schedule": "1f1b"},
        checkpoint={"every_steps": 2, "keep_last": 2, "keep_optimizer": True},
    )
    assert _launch(cfg).returncode == 0
    run = tmp_path / "multi"
    full = read_jsonl(run / "metrics.jsonl")
    for name in ("checkpoints/step_000004", "model", "summary.json"):  # as if killed after the step-2 checkpoint
        shutil.rmtree(run / name) if (run / name).is_dir() else (run / name).unlink()
    done = _launch(cfg)
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = {r["step"]: r for r in read_jsonl(run / "metrics.jsonl")}
    for step in (3, 4):
        assert [resumed[step][k] for k in STEP_KEYS] == [full[step - 1][k] for k in STEP_KEYS]
    assert_same_training(single, run, EPS, tokens=8 * 32)
