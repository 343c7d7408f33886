"""Fault family 7 (issue 33, its first half) and the experiment half of family 8: concurrent experiments with
different configs into one folder, and arm names.

A run that waited on a cell's lock re-reads the cell's fingerprint (its saved train/eval configs) once it holds the
lock: a cell another run started or finished meanwhile with another config is refused in one line -- never reported
as this run's (its ``experiment.yaml`` would say one learning rate, the cell trained at another). With
``--rerun-stale`` it is replaced instead. ``--report-only`` refuses cells made with another config the same way. An
arm names a cell's folder: ``..``, ``.`` and names with ``/`` are refused before anything is written.
"""

from __future__ import annotations

import pytest
from test_experiment_runner import Calls, experiment, make_pipeline
from test_faults import assert_one_error, cli, hashes

from goldfish.errors import ConfigError, UserError
from goldfish.experiment import run_experiment
from goldfish.experiment.plan import CellPlan


def _meanwhile(monkeypatch, other) -> None:
    """Run ``other()`` -- a second run of the experiment -- the moment this run first asks for a cell's lock: after
    it checked the cells, before it holds the cell (the window the two runs of issue 33 raced through)."""
    real = CellPlan.lock
    fired = []

    def lock(plan, wait=True):
        if not fired:
            fired.append(plan.cell.id)
            other()
        return real(plan, wait)

    monkeypatch.setattr(CellPlan, "lock", lock)


def test_a_cell_finished_meanwhile_with_another_config_is_refused(tmp_path, monkeypatch):
    first = experiment(tmp_path, grid={}, train={"steps": 20})
    second = experiment(tmp_path, grid={}, train={"steps": 30})
    _meanwhile(monkeypatch, lambda: run_experiment(first, make_pipeline(Calls()), progress=False))
    calls = Calls()
    with pytest.raises(
        UserError,
        match=r"cell standard was run meanwhile by another goldfish process with a "
        r"different config \(train.steps: 20 -> 30\)",
    ):
        run_experiment(second, make_pipeline(calls), progress=False)
    assert calls.trained == []  # nothing of the second run's own was trained or reported
    assert "steps: 30" not in (tmp_path / "exp" / "experiment.yaml").read_text()


def test_a_cell_finished_meanwhile_with_the_same_config_is_skipped(tmp_path, monkeypatch):
    """The shards of one experiment (same config) still share cells: the waiting run skips a finished one."""
    cfg = experiment(tmp_path, grid={})
    _meanwhile(monkeypatch, lambda: run_experiment(cfg, make_pipeline(Calls()), progress=False))
    calls = Calls()
    run_experiment(cfg, make_pipeline(calls), progress=False)
    assert calls.trained == []


def test_rerun_stale_does_not_replace_what_another_run_finished_meanwhile(tmp_path, monkeypatch):
    """--rerun-stale replaces the stale cells it found when it started; a cell another run finished since is that
    run's result (it is about to report it): refused too. A later --rerun-stale, which finds it stale, replaces it."""
    first = experiment(tmp_path, grid={}, train={"steps": 20})
    second = experiment(tmp_path, grid={}, train={"steps": 30})
    _meanwhile(monkeypatch, lambda: run_experiment(first, make_pipeline(Calls()), progress=False))
    with pytest.raises(UserError, match="was run meanwhile by another goldfish process"):
        run_experiment(second, make_pipeline(Calls()), progress=False, rerun_stale=True)
    monkeypatch.undo()
    calls = Calls()
    run_experiment(second, make_pipeline(calls), progress=False, rerun_stale=True)
    assert len(calls.trained) == 2
    assert "steps: 30" in (tmp_path / "exp" / "cells" / "standard" / "train_config.yaml").read_text()


def test_report_only_refuses_cells_made_with_another_config(tmp_path, capsys, monkeypatch):
    """``--report-only`` with another config would render the folder's cells under that config's name."""
    import goldfish.experiment

    config = tmp_path / "fake.yaml"
    config.write_text(f"""name: fake
out: {tmp_path / "exp"}
control: false
data: {{seq_len: 16, repetitions: [1, 2]}}
train: {{steps: 20}}
eval: {{data: {{prefix_lens: [4, 8]}}}}
arms:
  standard: {{train.loss.type: standard}}
  goldfish: {{train.loss.type: goldfish, train.loss.k: 2}}
""")
    monkeypatch.setattr(goldfish.experiment, "default_pipeline", lambda: make_pipeline(Calls()))
    assert cli(["experiment", config, "--no-progress"], capsys)[0] == 0
    before = hashes(tmp_path / "exp")
    assert_one_error(
        *cli(["experiment", config, "--no-progress", "--report-only", "train.steps=30"], capsys),
        "started with a different config",
        "train.steps: 20 -> 30",
    )
    assert hashes(tmp_path / "exp") == before
    assert cli(["experiment", config, "--no-progress", "--report-only"], capsys)[0] == 0


@pytest.mark.parametrize("arm", ["..", ".", "a/b", "", "../up"])
def test_an_arm_name_that_is_not_one_folder_name_is_refused(tmp_path, arm):
    with pytest.raises(ConfigError, match="arm name"):
        experiment(tmp_path, grid={}, arms={arm: {"train.loss.type": "standard"}})
    assert not (tmp_path / "exp").exists()


def test_an_arm_named_dotdot_in_a_yaml_file_is_one_line(tmp_path, capsys):
    from train_helpers import REPO

    config = tmp_path / "micro.yaml"
    config.write_text((REPO / "experiments" / "micro.yaml").read_text().replace("  goldfish:", "  ..:", 1))
    assert "  ..:" in config.read_text()
    assert_one_error(*cli(["experiment", config, f"out={tmp_path / 'exp'}", "--no-progress"], capsys), "'..'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["micro.yaml"]
