"""The power calculation committed before standard_setting's rerun (experiments/power/, issue 54): its TPR reading is
the toolkit's, its test is the two one-sided t tests, and the committed choice has the power it claims."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from goldfish.eval.stats import replicate_tost, tpr_at_fpr

HERE = Path(__file__).resolve().parent.parent / "experiments" / "power"


def _load():
    spec = importlib.util.spec_from_file_location("power_tpr", HERE / "standard_setting_tpr.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


power = _load()


def test_its_tpr_is_the_toolkits():
    rng = np.random.default_rng(1)
    m, n = rng.normal(2.0, 1.0, (3, 144)), rng.normal(0.0, 1.0, (3, 1000))
    for fpr in (0.01, 0.001):
        got = power.tpr_at(m, n, fpr)
        assert got.tolist() == [tpr_at_fpr(m[i], n[i], fpr)["tpr"] for i in range(3)]


def test_its_equivalence_test_is_replicate_tost():
    rng = np.random.default_rng(2)
    diffs = rng.normal(0.0, 0.06, (200, 8))
    share = np.mean([replicate_tost(list(d), 0.10)["equivalent"] for d in diffs])
    assert power.tost_power(diffs, 0.10) == pytest.approx(share)


def test_its_calibration_input_is_the_first_designs_frozen_from_its_results():
    """The rerun replaced the first design's results.json; the script reads the per-seed input frozen from it, which
    gives back exactly the AUC and between-run SD the committed calculation recorded."""
    frozen = json.loads((HERE / "standard_setting_first_design.json").read_text(encoding="utf-8"))
    assert frozen["nonmembers"] == 500 and [r["seed"] for r in frozen["runs"]] == list(range(5))
    found = json.loads((HERE / "standard_setting_tpr.json").read_text(encoding="utf-8"))
    assert power.committed() == (found["committed_auc"], found["committed_between_run_sd"])
    diffs = [r["goldfish_k4"]["mia_tpr_at_1pct_fpr"] - r["standard"]["mia_tpr_at_1pct_fpr"] for r in frozen["runs"]]
    assert np.std(diffs, ddof=1) == pytest.approx(0.0742, abs=5e-5)  # the 7.4 points the docstring quotes


def test_the_committed_choice():
    found = json.loads((HERE / "standard_setting_tpr.json").read_text(encoding="utf-8"))
    chosen = found["chosen"]
    assert chosen["nonmembers"] >= 1000 and chosen["power_1pct"] >= 0.8 and chosen["power_0_1pct"] >= 0.8
    for fpr, key in ((0.01, "power_1pct"), (0.001, "power_0_1pct")):
        row = next(
            r
            for r in found["rows"]
            if (r["fpr"], r["nonmembers"], r["runs"]) == (fpr, chosen["nonmembers"], chosen["runs"])
        )
        assert row["power"] == chosen[key]
    fewer = [r for r in found["rows"] if r["nonmembers"] == chosen["nonmembers"] and r["runs"] < chosen["runs"]]
    assert all(r["power"] < 0.8 for r in fewer if r["fpr"] == 0.001) or all(
        r["power"] < 0.8 for r in fewer if r["fpr"] == 0.01
    )  # no cheaper design with that many nonmembers
    # the committed design (5 runs, 500 nonmembers) is underpowered, as the issue measured (0.59)
    old = next(r for r in found["rows"] if r["fpr"] == 0.01 and r["nonmembers"] == 500 and r["runs"] == 5)
    assert 0.4 < old["power"] < 0.7
    assert found["committed_between_run_sd"] == pytest.approx(old["between_run_sd"], abs=0.01)


def test_the_config_runs_the_chosen_design_and_quotes_its_power():
    """standard_setting.yaml runs what the calculation chose (its runs, its nonmembers) and the readings quote the
    calculation's powers, not retyped ones."""
    from goldfish.experiment import load_experiment

    chosen = json.loads((HERE / "standard_setting_tpr.json").read_text(encoding="utf-8"))["chosen"]
    cfg = load_experiment(HERE.parent / "standard_setting.yaml")
    assert len(cfg.grid["seed"]) == chosen["runs"] and cfg.data["num_nonmembers"] == chosen["nonmembers"]
    assert cfg.equivalence.power == {
        "tpr_at_1pct_fpr": chosen["power_1pct"],
        "tpr_at_0_1pct_fpr": chosen["power_0_1pct"],
    }
