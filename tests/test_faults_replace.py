"""Fault family 4 (issue 33): ``--overwrite`` removes the old run only after the new one has succeeded.

The new run is built beside the old one (``.<out>.<random>.tmp``) and swapped in only when it has finished --
checkpoints, exported model, card and summary. A run failing at any point (diverging after its first checkpoint,
weights turning non-finite, a full disk at export) leaves every byte of the old run; a kill leaves the old run too,
and the same command then continues the new run from its own last checkpoint instead of starting over.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from test_faults import _raise_enospc, assert_one_error, cli, hashes, leftovers, train_argv
from train_helpers import REPO, cli_env

from goldfish.checkpoint import COMPLETE
from goldfish.io import read_jsonl


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread, as the rest of the fault suite."""


@pytest.fixture
def finished(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    return run


def test_a_replacement_diverging_after_its_first_checkpoint_leaves_the_old_run(
    data, finished, tmp_path, capsys, monkeypatch
):
    """Checkpoints every 2 steps; from the 3rd step on the learning rate is 1e30: step 2 is checkpointed, step 4's
    loss is no longer finite. (Before issue 33 the new run took the old one's place at its first checkpoint.)"""
    import goldfish.train as train

    real = train.learning_rate
    monkeypatch.setattr(train, "learning_rate", lambda step, plan, opt: 1e30 if step >= 2 else real(step, plan, opt))
    before = hashes(finished)
    assert_one_error(
        *cli([*train_argv(data, finished, optim__lr=0.005), "--overwrite"], capsys), "training diverged at step 4"
    )
    assert hashes(finished) == before and leftovers(tmp_path) == []


def test_a_replacement_whose_weights_turn_non_finite_leaves_the_old_run(data, finished, tmp_path, capsys):
    """One step with a learning rate beyond float32: the step's loss was finite, the weights after it are not; the
    checkpoint (and so the export) is refused."""
    schedule = {"max_steps": 1, "global_batch_size": 4, "micro_batch_size": 2}
    before = hashes(finished)
    argv = train_argv(
        data, finished, optim__lr=1e300, optim__warmup_steps=0, optim__max_grad_norm=None, schedule=schedule
    )
    assert_one_error(*cli([*argv, "--overwrite"], capsys), "weights are no longer finite")
    assert hashes(finished) == before and leftovers(tmp_path) == []


def test_a_replacement_failing_at_export_leaves_the_old_run(data, finished, tmp_path, capsys, monkeypatch):
    from transformers import PreTrainedModel

    before = hashes(finished)
    monkeypatch.setattr(PreTrainedModel, "save_pretrained", _raise_enospc)
    assert_one_error(
        *cli([*train_argv(data, finished, optim__lr=0.005), "--overwrite"], capsys), "no space left on device"
    )
    assert hashes(finished) == before and leftovers(tmp_path) == []


def test_a_replacement_that_succeeds_leaves_nothing_of_the_old_run(data, finished, tmp_path, capsys):
    schedule = {"max_steps": 4, "global_batch_size": 4, "micro_batch_size": 2}
    assert cli([*train_argv(data, finished, optim__lr=0.005, schedule=schedule), "--overwrite"], capsys)[0] == 0
    assert json.loads((finished / "fingerprint.json").read_text())["optim.lr"] == 0.005
    assert [r["step"] for r in read_jsonl(finished / "metrics.jsonl")] == [1, 2, 3, 4]
    assert sorted(p.name for p in (finished / "checkpoints").iterdir()) == ["step_000002", "step_000004"]
    assert leftovers(tmp_path) == []


def test_a_killed_replacement_keeps_the_old_run_and_the_same_command_continues_it(data, finished, tmp_path, capsys):
    """SIGKILL after the new run's step-4 checkpoint: the old run is whole; rerunning the same --overwrite resumes
    the new run at step 4 (it does not start over) and publishes it when it finishes, bit-identical to a run that
    was never killed."""
    schedule = {"max_steps": 30, "global_batch_size": 4, "micro_batch_size": 2}
    argv = [*train_argv(data, finished, optim__lr=0.005, schedule=schedule), "--overwrite"]
    before = hashes(finished)
    proc = subprocess.Popen(
        [sys.executable, "-m", "goldfish", *map(str, argv)],
        env=cli_env(),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not list(tmp_path.glob(f".run.*.tmp/checkpoints/step_000004/{COMPLETE}")):
        assert proc.poll() is None and time.monotonic() < deadline, "the replacement ended before it was killed"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert hashes(finished) == before
    staged = next(tmp_path.glob(".run.*.tmp"))
    written = hashes(staged / "checkpoints" / "step_000004")  # its trainer_state.json records that session's time
    rc, err = cli(argv, capsys)
    assert rc == 0, err
    steps = [r["step"] for r in read_jsonl(finished / "metrics.jsonl")]
    assert steps == list(range(1, 31)) and leftovers(tmp_path) == []
    assert hashes(finished / "checkpoints" / "step_000004") == written  # continued, not trained again
    reference = tmp_path / "reference"
    assert cli(train_argv(data, reference, optim__lr=0.005, schedule=schedule), capsys)[0] == 0
    assert hashes(finished / "model")["model.safetensors"] == hashes(reference / "model")["model.safetensors"]


def test_an_interrupted_replacement_is_continued_not_restarted(data, finished, tmp_path, capsys, monkeypatch):
    """Ctrl-C (KeyboardInterrupt) keeps the staging folder for the next --overwrite with the same config; another
    config starts afresh (the first's staging folder is goldfish's debris, deleted)."""
    import goldfish.train as train

    schedule = {"max_steps": 6, "global_batch_size": 4, "micro_batch_size": 2}
    argv = [*train_argv(data, finished, optim__lr=0.005, schedule=schedule), "--overwrite"]
    real_save = train._save

    def interrupted_after_step_4(cfg, out, engine, plan, progress, *rest):
        real_save(cfg, out, engine, plan, progress, *rest)
        if progress.step == 4:
            raise KeyboardInterrupt

    monkeypatch.setattr(train, "_save", interrupted_after_step_4)
    before = hashes(finished)
    assert cli(argv, capsys)[0] == 130 and hashes(finished) == before
    monkeypatch.undo()
    staged = next(tmp_path.glob(".run.*.tmp"))
    written = hashes(staged / "checkpoints" / "step_000002")
    assert cli(argv, capsys)[0] == 0
    assert hashes(finished / "checkpoints" / "step_000002") == written  # not retrained: continued from step 4
    assert leftovers(tmp_path) == []
    monkeypatch.setattr(train, "_save", interrupted_after_step_4)
    assert cli([*train_argv(data, finished, optim__lr=0.004, schedule=schedule), "--overwrite"], capsys)[0] == 130
    monkeypatch.undo()
    assert cli([*train_argv(data, finished, optim__lr=0.003, schedule=schedule), "--overwrite"], capsys)[0] == 0
    assert leftovers(tmp_path) == [] and json.loads((finished / "fingerprint.json").read_text())["optim.lr"] == 0.003


def test_rerun_stale_replaces_a_cell_only_after_its_rerun_succeeded(tmp_path):
    """--rerun-stale: a rerun that fails puts the old cell back byte for byte (the family's experiment half)."""
    from test_experiment_runner import Calls, experiment, make_pipeline

    from goldfish.errors import UserError
    from goldfish.experiment import run_experiment

    run_experiment(experiment(tmp_path, grid={}), make_pipeline(Calls()), progress=False)
    before = hashes(tmp_path / "exp")
    failing = make_pipeline(Calls())

    def diverges(cfg):
        (tmp_path / "exp" / "cells" / "standard" / "train").mkdir(parents=True, exist_ok=True)
        raise UserError("training diverged at step 3")

    failing.train = dataclasses.replace(failing.train, run=diverges)
    with pytest.raises(UserError, match="diverged"):
        run_experiment(experiment(tmp_path, grid={}, train={"steps": 30}), failing, progress=False, rerun_stale=True)
    assert hashes(tmp_path / "exp") == before and leftovers(tmp_path) == []
    assert not os.path.exists(tmp_path / "exp" / "cells" / ".standard.replaced")
