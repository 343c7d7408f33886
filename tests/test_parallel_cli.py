"""``goldfish train`` under torchrun with tensor and pipeline parallelism (CPU, gloo): same run as one process.

The whole trainer path -- config, data sharding by ``engine.dp_rank``, Goldfish masks, checkpoints, HF export -- runs
on a tp=2 or pp=2 mesh and must log the one-process losses and gradient norms; a pipeline run killed after its step-2
checkpoint continues bit for bit.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from train_helpers import load_weights, tiny_config, torchrun_train

from goldfish.config import from_dict
from goldfish.io import read_jsonl
from goldfish.train import train
from goldfish.train_config import TrainConfig

# each case launches torchrun (about 20 s of CPU on 2 cores)
pytestmark = [pytest.mark.slow, pytest.mark.dist]

SCHEDULE = {"max_steps": 4, "global_batch_size": 8, "micro_batch_size": 4}
LOSS = {"type": "goldfish", "goldfish": {"k": 4, "h": 13}}
KEYS = ("loss", "kept_loss", "dropped_loss", "grad_norm")


def _torchrun(cfg: dict, nproc: int = 2):
    return torchrun_train(cfg, nproc, timeout=600)


@pytest.fixture(scope="module")
def single(data, tmp_path_factory):
    torch.set_num_threads(1)
    cfg = tiny_config(data, tmp_path_factory.mktemp("single") / "run", schedule=SCHEDULE, loss=LOSS)
    return train(from_dict(TrainConfig, cfg))


def _assert_same_run(single, multi) -> None:
    a, b = read_jsonl(single / "metrics.jsonl"), read_jsonl(multi / "metrics.jsonl")
    assert [r["kept_tokens"] for r in a] == [r["kept_tokens"] for r in b]
    for key in KEYS:
        assert [r[key] for r in b] == pytest.approx([r[key] for r in a], abs=1e-5), key
    wa, wb = load_weights(single), load_weights(multi)
    assert sorted(wa) == sorted(wb)
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-4  # Adam amplifies 1e-7 summation differences


@pytest.mark.parametrize("parallel", [{"tp": 2}, {"pp": 2, "pp_schedule": "gpipe", "pp_microbatches": 4}],
                         ids=["tp2", "pp2-gpipe"])
def test_tensor_and_pipeline_runs_match_one_process(data, single, tmp_path, parallel):
    cfg = tiny_config(data, tmp_path / "multi", schedule=SCHEDULE, loss=LOSS, parallel=parallel)
    done = _torchrun(cfg)
    assert done.returncode == 0, done.stderr[-3000:]
    applied = [line for line in done.stdout.splitlines() if line.startswith("parallel: applied")]
    assert len(applied) == 1 and ("tensor" if "tp" in parallel else "pipeline") in applied[0]  # rank 0 only
    _assert_same_run(single, tmp_path / "multi")


def test_pipeline_run_resumes_exactly(data, single, tmp_path):
    cfg = tiny_config(data, tmp_path / "multi", schedule=SCHEDULE, loss=LOSS,
                      parallel={"pp": 2, "pp_schedule": "1f1b"}, checkpoint={"every_steps": 2, "keep_last": 2})
    assert _torchrun(cfg).returncode == 0
    run = tmp_path / "multi"
    full = read_jsonl(run / "metrics.jsonl")
    shutil.rmtree(run / "checkpoints" / "step_000004")  # as if killed after the step-2 checkpoint
    done = _torchrun(cfg)
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = {r["step"]: r for r in read_jsonl(run / "metrics.jsonl")}
    for step in (3, 4):
        assert [resumed[step][k] for k in KEYS] == [full[step - 1][k] for k in KEYS]
    _assert_same_run(single, run)
