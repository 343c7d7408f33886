"""Fault family 11 (issue 33): a resume with another ``schedule.micro_batch_size`` is refused in one line.

The micro-batch size splits a step into passes whose sum is the same in exact arithmetic but rounds in another
order, so a run resumed with another one equals neither the run it continues nor a run with the new size. It is part
of the train fingerprint (``goldfish/train_config.py``): the resume is refused like any other changed setting.
"""

from __future__ import annotations

import dataclasses

import pytest
from test_faults import as_killed_at_step_4, assert_one_error, cli, hashes, train_argv

from goldfish.checkpoint import list_checkpoints
from goldfish.train_config import TrainConfig, train_fingerprint


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread, as the rest of the fault suite."""


def _schedule(micro: int) -> dict:
    return {"max_steps": 6, "global_batch_size": 4, "micro_batch_size": micro}


def test_the_train_fingerprint_holds_the_micro_batch_size():
    cfg = TrainConfig()
    other = dataclasses.replace(cfg, schedule=dataclasses.replace(cfg.schedule, micro_batch_size=4))
    a, b = train_fingerprint(cfg, None), train_fingerprint(other, None)
    assert (a["schedule.micro_batch_size"], b["schedule.micro_batch_size"]) == (8, 4)
    assert {k for k in a if a[k] != b[k]} == {"schedule.micro_batch_size"}


def test_resuming_a_killed_run_with_another_micro_batch_size_is_refused(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(train_argv(data, run, schedule=_schedule(2)), capsys)[0] == 0
    as_killed_at_step_4(run)
    before = hashes(run)
    assert_one_error(
        *cli(train_argv(data, run, schedule=_schedule(4)), capsys),
        "schedule.micro_batch_size: 2 -> 4",
        "--fresh",
        "--overwrite",
    )
    assert hashes(run) == before
    assert cli(train_argv(data, run, schedule=_schedule(2)), capsys)[0] == 0  # the same config resumes


def test_a_checkpoint_of_another_micro_batch_size_is_refused_as_a_start(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(train_argv(data, run, schedule=_schedule(2)), capsys)[0] == 0
    step = list_checkpoints(run)[1]
    other = tmp_path / "other"
    argv = train_argv(data, other, schedule=_schedule(4), checkpoint={"every_steps": 2, "resume": str(step)})
    assert_one_error(*cli(argv, capsys), f"checkpoint {step}", "schedule.micro_batch_size: 2 -> 4")
    assert not other.exists()
