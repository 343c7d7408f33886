"""Fault family 3 (issue 33): a folder without goldfish's ownership marker is never adopted.

The rule (goldfish/ownership.py, docs/reliability.md): a command writes only into a new or empty folder or one whose
``.goldfish-owner.json`` names its own kind. A folder that merely looks like a run -- a valid train ``config.yaml``,
a real run's ``fingerprint.json`` copied with it, an eval's files, an experiment's ``experiment.yaml``, ``report.md``
and ``summary.json`` -- is refused in one line and stays byte for byte, also under ``--overwrite`` and
``--report-only``. goldfish itself never leaves a marker-less folder: every writer marks a folder before its first
other write.
"""

from __future__ import annotations

import shutil

import pytest
from test_faults import _eval_argv, assert_one_error, cli, hashes, train_argv

from goldfish.ownership import MARKER


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread, as the rest of the fault suite."""


def _users_copy_of_a_run(data, tmp_path, capsys):
    """A real run's files without its marker, with the user's notes: what copying a run by hand leaves."""
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    mine = tmp_path / "mine"
    shutil.copytree(run, mine)
    (mine / MARKER).unlink()
    (mine / "notes.txt").write_text("my notes")
    return mine


@pytest.mark.parametrize(
    "extra, needle",
    [([], "goldfish did not write there"), (["--overwrite"], "replaces only a training run"), (["--fresh"], None)],
)
def test_train_does_not_adopt_a_copy_of_a_run(data, tmp_path, capsys, extra, needle):
    mine = _users_copy_of_a_run(data, tmp_path, capsys)
    before = hashes(mine)
    if needle is None:  # --fresh trains beside it instead
        rc, err = cli([*train_argv(data, mine), *extra], capsys)
        assert rc == 0 and "training in" in err and (tmp_path / "mine_2" / MARKER).is_file()
    else:
        assert_one_error(*cli([*train_argv(data, mine), *extra], capsys), needle)
    assert hashes(mine) == before


def test_train_does_not_adopt_a_folder_with_a_valid_config_yaml(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    mine = tmp_path / "mine"
    (mine / "model").mkdir(parents=True)
    shutil.copy(run / "config.yaml", mine / "config.yaml")
    (mine / "model" / "weights.bin").write_bytes(b"my own model")
    before = hashes(mine)
    assert_one_error(*cli(train_argv(data, mine), capsys), "goldfish did not write there")
    assert hashes(mine) == before


def test_eval_does_not_adopt_a_copy_of_an_evaluation(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    assert cli(_eval_argv(run / "model", data, tmp_path / "ev"), capsys)[0] == 0
    mine = tmp_path / "mine"
    shutil.copytree(tmp_path / "ev", mine)
    (mine / MARKER).unlink()
    before = hashes(mine)
    for extra in ([], ["overwrite=true"]):
        assert_one_error(*cli(_eval_argv(run / "model", data, mine, *extra), capsys), str(mine))
        assert hashes(mine) == before


def test_an_evaluation_is_marked_before_its_fingerprint_is_written(data, tmp_path, capsys, monkeypatch):
    """Killed at the first write after the marker: the folder is goldfish's (marked), so the rerun resumes it
    instead of refusing a folder goldfish itself left without a marker."""
    import goldfish.eval.state as state

    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as a kill at this moment

    monkeypatch.setattr(state, "write_fingerprint", killed)
    assert cli(_eval_argv(run / "model", data, tmp_path / "ev"), capsys)[0] == 130
    assert sorted(p.name for p in (tmp_path / "ev").iterdir()) == [MARKER]
    monkeypatch.undo()
    assert cli(_eval_argv(run / "model", data, tmp_path / "ev"), capsys)[0] == 0


@pytest.mark.parametrize("flags", [[], ["--report-only"]])
def test_experiment_does_not_adopt_a_folder_holding_an_experiments_files(tmp_path, capsys, flags):
    from train_helpers import REPO

    mine = tmp_path / "mine"
    mine.mkdir()
    for name, text in (
        ("experiment.yaml", "name: mine\n"),
        ("report.md", "# my report\n"),
        ("summary.json", '{"mine": true}\n'),
    ):
        (mine / name).write_text(text)
    before = hashes(mine)
    argv = ["experiment", REPO / "experiments" / "micro.yaml", f"out={mine}", "--no-progress", *flags]
    assert_one_error(*cli(argv, capsys), "goldfish did not write there")
    assert hashes(mine) == before


def test_report_only_refuses_another_kinds_folder(data, tmp_path, capsys):
    from train_helpers import REPO

    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    before = hashes(run)
    argv = ["experiment", REPO / "experiments" / "micro.yaml", f"out={run}", "--no-progress", "--report-only"]
    assert_one_error(*cli(argv, capsys), "holds a training run")
    assert hashes(run) == before


def test_an_empty_folder_is_used_and_marked(data, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli(train_argv(data, tmp_path / "empty"), capsys)[0] == 0
    assert (tmp_path / "empty" / MARKER).is_file()
