"""A study costs what it reads: tuning cells read only for their validation loss (``tune.by: validation_loss``)
compute only that -- training and the validation loss -- and only the cells at a chosen value are evaluated; the
dry run prints the study's time from the measured per-cell costs (``cost``) and what that saves. Fake phases
(``test_experiment_runner``) with the validation-loss phase standing in for the exposure counts' analysis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from goldfish.errors import ConfigError
from goldfish.experiment import DONE, phases, plan_cells
from goldfish.experiment.analyses.exposure import exposure_file
from goldfish.experiment.dryrun import study_time
from goldfish.experiment.runner import run_experiment
from goldfish.io import atomic_write_json

from test_experiment_runner import Calls, experiment, make_pipeline

GRID = {"train.model": ["tiny", "big"], "train.steps": [10, 20, 40], "train.seed": [0, 1]}


def _validation_phase(written: list[str]) -> phases.Phase:
    """The exposure phase's stand-in: the validation loss 3 + |steps - 20| / 10 of the cell's (fake) model."""

    def run(r: phases.CellRun) -> None:
        steps = json.loads((r.plan.train_dir / "fake_config.json").read_text())["steps"]
        written.append(r.plan.cell.id)
        atomic_write_json(exposure_file(r.plan), {"validation_loss": 3.0 + abs(steps - 20) / 10})

    return phases.Phase("exposure", lambda p: [exposure_file(p)], lambda r: True, run, tuning=True)


def _cfg(tmp_path: Path, cost: dict | None = None, **tune):
    return experiment(
        tmp_path,
        control=True,
        control_mode="background",
        grid=GRID,
        cost=cost or {},
        tune={"axis": "steps", "by": "validation_loss", "per": ["model"], **tune},
    )


def _run(tmp_path: Path, monkeypatch, **tune) -> tuple[Calls, list[str], Path]:
    calls, written = Calls(), []
    swapped = tuple(_validation_phase(written) if p.name == "exposure" else p for p in phases.PHASES)
    monkeypatch.setattr(phases, "PHASES", swapped)
    run_experiment(_cfg(tmp_path, **tune), make_pipeline(calls), progress=False)
    return calls, written, tmp_path / "exp"


def test_the_phases_a_tuning_cell_is_read_for_are_training_and_the_validation_loss():
    assert [p.name for p in phases.PHASES if p.tuning] == ["prepare", "configs", "train", "exposure"]


def test_tuning_cells_compute_only_their_validation_loss_and_the_chosen_ones_are_evaluated(tmp_path, monkeypatch):
    calls, written, out = _run(tmp_path, monkeypatch)
    cell = lambda path: Path(path).parent.name  # noqa: E731  (<cell>/train or <cell>/eval -> <cell>)
    tuning = {f"control__model={m}__steps={s}__seed=0" for m in ("tiny", "big") for s in (10, 20, 40)}
    assert {cell(t) for t in calls.trained[:6]} == tuning and len(calls.trained) == 6 + 10  # as with full tuning
    assert set(written) == {cell(t) for t in calls.trained}  # every trained cell has its validation loss, once
    # evaluated: only cells at the chosen 20 steps -- the two chosen tuning cells among them -- each once
    evaluated = [cell(e) for e in calls.evaluated]
    assert len(evaluated) == len(set(evaluated)) == 2 + 10 and all("steps=20" in e for e in evaluated)
    for c in tuning:
        chosen = "steps=20" in c
        assert (out / "cells" / c / "eval" / "results.json").is_file() == chosen
        assert (out / "cells" / c / DONE).is_file() == chosen
        assert (out / "cells" / c / "exposure.json").is_file()  # what the choice read
    results = json.loads((out / "results.json").read_text())
    assert [(g["per"], g["chosen"]) for g in results["tune"]["groups"]] == [
        ({"model": "tiny"}, 20),
        ({"model": "big"}, 20),
    ]
    assert results["tune"]["groups"][0]["losses"] == {"10": 4.0, "20": 3.0, "40": 5.0}  # every value's loss kept
    assert results["missing"] == [] and results["n_cells"] == 12  # the cells at 10 and 40 are in the tune block only
    assert {c["cell"] for c in results["cells"]} == set(evaluated)
    # a second run finds nothing to do: the tuning cells at values not chosen are not trained or evaluated again
    again = Calls()
    run_experiment(_cfg(tmp_path), make_pipeline(again), progress=False)
    assert again.trained == again.evaluated == []


def test_tune_evaluate_evaluates_every_tuning_cell_as_before(tmp_path, monkeypatch):
    calls, _, out = _run(tmp_path, monkeypatch, evaluate=True)
    evaluated = {Path(e).parent.name for e in calls.evaluated}
    assert {f"control__model={m}__steps={s}__seed=0" for m in ("tiny", "big") for s in (10, 40)} <= evaluated
    assert len(evaluated) == 16 and json.loads((out / "results.json").read_text())["n_cells"] == 16


def test_the_dry_run_prints_the_study_time_from_measured_cell_costs_and_what_tuning_saves(tmp_path):
    cost = {
        "axis": "model",
        "train_s": {"tiny": 10, "big": 100},
        "rest_s": {"tiny": 20, "big": 200},
        "measured": "by hand",
    }
    for evaluate in (False, True):
        cfg = _cfg(tmp_path, cost, evaluate=evaluate)
        lines = study_time(cfg, plan_cells(cfg, make_pipeline(Calls())))
        # 16 cells run (6 tuning cells, 10 at the chosen value), 8 per model: 8 x 30 s + 8 x 300 s = 44 min; the 4
        # tuning cells at values not chosen (2 per model) would skip 2 x 20 s + 2 x 200 s = 440 s of evaluation
        assert (
            lines[0] == "study time from the measured per-cell costs (by hand): 16 cells, 44.0 min of cell time "
            "with every cell evaluated"
        )
        assert lines[1].startswith(
            "  4 tuning cells at values not chosen: 7.3 min of evaluation (17 %) "
            + ("not saved" if evaluate else "saved")
        )
        assert lines[1].endswith(f"this study: {'44.0' if evaluate else '36.7'} min")
    assert study_time(experiment(tmp_path, grid=GRID), []) == []  # no measured costs: no estimate
    with pytest.raises(
        ConfigError,
        match=r"cost.rest_s must give seconds >= 0 for each value of grid axis model "
        r"\(tiny, big\), no other; big",
    ):
        _cfg(tmp_path, {**cost, "rest_s": {"tiny": 20}})
