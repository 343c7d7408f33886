"""Checkpoints: a SIGKILLed run resumes bit-identically; broken checkpoints are skipped (auto) or refused (path)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from train_helpers import REPO, cli_env, load_weights, overrides_of, tiny_config

from goldfish.checkpoint import COMPLETE, list_checkpoints
from goldfish.config import from_dict
from goldfish.errors import UserError
from goldfish.io import read_jsonl
from goldfish.train import train
from goldfish.train_config import TrainConfig

TIMING = ("step_time", "tokens_per_s", "mfu")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Every test here runs with one torch thread (the ``one_thread`` fixture of conftest.py)."""


def _cfg(data, out, **kw):
    """These tests resume runs, also finished ones: their checkpoints keep the optimizer state
    (checkpoint.keep_optimizer=true; a finished run drops it by default, test_finished_run_keeps_the_model_only)."""
    base = {
        "loss": {"type": "goldfish", "goldfish": {"k": 4, "h": 13}},
        "schedule": {"max_steps": 12, "global_batch_size": 4, "micro_batch_size": 2},
    }
    checkpoint = {"every_steps": 2, "keep_last": 0, "keep_optimizer": True, **kw.pop("checkpoint", {})}
    return tiny_config(data, out, **{**base, "checkpoint": checkpoint, **kw})


def _losses(run: Path) -> list[tuple]:
    return [tuple(v for k, v in r.items() if k not in TIMING) for r in read_jsonl(run / "metrics.jsonl")]


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = load_weights(a), load_weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def _kill_after_first_checkpoint(cfg: dict, seed: int) -> int:
    """Start ``goldfish train``, SIGKILL it at a random moment after its first checkpoint; return that step."""
    cmd = [sys.executable, "-m", "goldfish", "train", *overrides_of(cfg)]
    proc = subprocess.Popen(cmd, env=cli_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    try:
        while not any((p / COMPLETE).exists() for p in list_checkpoints(cfg["out"])):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.01)
        time.sleep(random.Random(seed).uniform(0.0, 0.3))  # somewhere in a later step or checkpoint save
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return proc.returncode


def test_sigkilled_run_resumes_bit_identically(data, tmp_path):
    """A real ``goldfish train`` process is SIGKILLed; resuming gives the uninterrupted run's weights, bit for bit."""
    schedule = {"max_steps": 40, "global_batch_size": 4, "micro_batch_size": 2}
    killed = _cfg(data, tmp_path / "killed", schedule=schedule, checkpoint={"every_steps": 3, "keep_last": 2})
    assert _kill_after_first_checkpoint(killed, seed=int(time.time())) == -signal.SIGKILL
    assert not (tmp_path / "killed" / "summary.json").exists(), "the run finished before the kill; lengthen it"
    resumed_from = max(
        int(p.name.split("_")[1]) for p in list_checkpoints(tmp_path / "killed") if (p / COMPLETE).exists()
    )
    train(from_dict(TrainConfig, killed))  # resume: auto (one thread here, as in the killed process)
    reference = train(from_dict(TrainConfig, {**killed, "out": str(tmp_path / "reference")}))
    _assert_same_weights(reference, tmp_path / "killed")
    assert _losses(tmp_path / "killed") == _losses(reference)  # every step logged exactly once
    assert len(list_checkpoints(tmp_path / "killed")) == 2  # keep_last
    assert 3 <= resumed_from < 40


def test_auto_skips_a_corrupt_newest_checkpoint(data, tmp_path, capsys):
    reference = train(from_dict(TrainConfig, _cfg(data, tmp_path / "ref")))
    run = train(from_dict(TrainConfig, _cfg(data, tmp_path / "run")))
    (run / "model").rename(tmp_path / "first_model")
    newest = list_checkpoints(run)[-1]
    assert newest.name == "step_000012"
    (newest / "model_rank00000.safetensors").write_bytes(b"garbage")
    train(from_dict(TrainConfig, _cfg(data, run)))  # resumes from step 10 (12 is broken), recomputes 11 and 12
    assert "skipping checkpoint" in capsys.readouterr().err
    _assert_same_weights(reference, run)
    assert _losses(run) == _losses(reference)
    assert (list_checkpoints(run)[-1] / COMPLETE).exists()


def test_an_explicit_corrupt_checkpoint_is_one_clear_error(data, tmp_path):
    run = train(
        from_dict(
            TrainConfig,
            _cfg(data, tmp_path / "run", schedule={"max_steps": 4, "global_batch_size": 4, "micro_batch_size": 2}),
        )
    )
    target = list_checkpoints(run)[0]
    (target / "optimizer_rank00000.pt").write_bytes(b"\x80\x04not a checkpoint")
    cfg = _cfg(data, tmp_path / "other", checkpoint={"every_steps": 2, "resume": str(target)})
    with pytest.raises(UserError, match="optimizer_rank00000.pt is corrupt"):
        train(from_dict(TrainConfig, cfg))
    (target / COMPLETE).unlink()
    with pytest.raises(UserError, match="incomplete"):
        train(from_dict(TrainConfig, cfg))
    assert not (tmp_path / "other").exists()  # nothing written before the checkpoint was validated


def test_resume_never_refuses_to_overwrite_and_keep_last_prunes(data, tmp_path):
    run = train(from_dict(TrainConfig, _cfg(data, tmp_path / "run", checkpoint={"every_steps": 1, "keep_last": 2})))
    assert [p.name for p in list_checkpoints(run)] == ["step_000011", "step_000012"]
    with pytest.raises(UserError, match="already holds this run, finished"):
        train(from_dict(TrainConfig, _cfg(data, run, checkpoint={"every_steps": 1, "resume": "never"})))
    (run / "summary.json").unlink()  # unfinished: its checkpoints are what resume=never refuses to overwrite
    with pytest.raises(UserError, match="already holds checkpoints"):
        train(from_dict(TrainConfig, _cfg(data, run, checkpoint={"every_steps": 1, "resume": "never"})))
    with pytest.raises(UserError, match="schedule.global_batch_size: 4 -> 8"):
        train(
            from_dict(
                TrainConfig, _cfg(data, run, schedule={"max_steps": 20, "global_batch_size": 8, "micro_batch_size": 2})
            )
        )


def test_checkpoint_files_are_safe_formats(data, tmp_path):
    """Tensors in safetensors, the rest loadable with weights_only=True (no code runs on load)."""
    run = train(
        from_dict(
            TrainConfig,
            _cfg(data, tmp_path / "run", schedule={"max_steps": 2, "global_batch_size": 4, "micro_batch_size": 2}),
        )
    )
    folder = list_checkpoints(run)[-1]
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        COMPLETE,
        "model_rank00000.safetensors",
        "optimizer_rank00000.pt",
        "rng_rank00000.json",
        "rng_rank00000.safetensors",
        "trainer_state.json",
    ]
    opt = torch.load(folder / "optimizer_rank00000.pt", weights_only=True)
    assert opt["state"][0]["step"].item() == 2


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_finished_run_keeps_the_model_only(data, tmp_path, capsys):
    """checkpoint.keep_optimizer=false (the default): the final step is not checkpointed (model/ holds its weights),
    the earlier checkpoints kept by keep_last lose the optimizer state and say so; they still export (a checkpoint
    series) but do not resume; a rerun of the finished run trains nothing. keep_optimizer=true keeps everything."""
    from goldfish.checkpoint import WEIGHTS_ONLY, export_checkpoint

    lean = _cfg(data, tmp_path / "lean", checkpoint={"keep_last": 3, "keep_optimizer": False})
    full = _cfg(data, tmp_path / "full", checkpoint={"keep_last": 3})
    run, kept = train(from_dict(TrainConfig, lean)), train(from_dict(TrainConfig, full))
    _assert_same_weights(run, kept)
    assert [p.name for p in list_checkpoints(kept)] == ["step_000008", "step_000010", "step_000012"]
    assert [p.name for p in list_checkpoints(run)] == ["step_000008", "step_000010"]  # model/ is the third
    for folder in list_checkpoints(run):
        assert sorted(p.name for p in folder.iterdir()) == [
            COMPLETE,
            WEIGHTS_ONLY,
            "model_rank00000.safetensors",
            "rng_rank00000.json",
            "rng_rank00000.safetensors",
            "trainer_state.json",
        ]
        twin = kept / "checkpoints" / folder.name
        assert (folder / "model_rank00000.safetensors").read_bytes() == (
            twin / "model_rank00000.safetensors"
        ).read_bytes()
        # AdamW keeps two moments per weight: without them a checkpoint is about a third of its size
        assert _size(folder) < 0.4 * _size(twin)
    exported = export_checkpoint(list_checkpoints(run)[-1], run / "model", tmp_path / "step10")
    assert (exported / "config.json").is_file()
    with pytest.raises(UserError, match="holds model weights only .*keep_optimizer=true keeps it"):
        train(
            from_dict(
                TrainConfig,
                {**lean, "out": str(tmp_path / "again"), "checkpoint": {"resume": str(list_checkpoints(run)[-1])}},
            )
        )
    metrics = (run / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert train(from_dict(TrainConfig, lean)) == run  # finished: nothing to train, nothing rewritten
    assert "already holds this run, finished: nothing to train" in capsys.readouterr().err
    assert (run / "metrics.jsonl").read_bytes() == metrics
    with pytest.raises(UserError, match="already holds this run, finished"):
        train(from_dict(TrainConfig, {**lean, "checkpoint": {"resume": "never"}}))
