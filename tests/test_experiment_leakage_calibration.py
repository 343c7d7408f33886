"""The leakage audit calibrated on members (report section ``leakage``, results.json ``leakage_calibration``): which
arms are a Goldfish arm's no-leak twin and positive controls, and the across-run sensitivity, against a hand
computation (numbers chosen so each step is exact arithmetic: slopes, means, SDs), then the analysis that feeds it:
every control audited on the Goldfish arm's base mask with the share its own loss trained on."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from eval_fixtures import schema_fields
from scipy import stats as sps

import goldfish.experiment

from goldfish.experiment.analyses.attacks import _other_masks, dropped_targets, leakage_audit
from goldfish.experiment.sections.leakage import calibration, calibration_lines, render
from goldfish.experiment.summary import CellSummary
from goldfish.masks import GoldfishConfig

SCHEMA = Path(goldfish.experiment.__file__).parent / "SCHEMA.md"
MASK = {"k": 4, "h": 13, "strategy": "hash", "seed": 0}
ARMS = {
    "standard": None,
    "goldfish": GoldfishConfig(**MASK),
    "goldfish_seed1": GoldfishConfig(**{**MASK, "seed": 1}),
    "twin": GoldfishConfig(**MASK, replace_dropped=True),
    "pc10": GoldfishConfig(**MASK, supervised_fraction=0.1),
    "pc20": GoldfishConfig(**MASK, supervised_fraction=0.2),
}
# per seed: (Goldfish DiD, twin DiD, pc10's (fraction, DiD), pc20's (fraction, DiD)) in accuracy; loss = -2 x these
RUNS = {
    0: (0.02, 0.01, (0.1, 0.04), (0.2, 0.06)),
    1: (0.00, 0.00, (0.1, 0.03), (0.2, 0.04)),
    2: (0.03, 0.00, (0.1, 0.04), (0.2, 0.07)),
}


def _plan(arm: str, mask: GoldfishConfig | None) -> SimpleNamespace:
    loss = SimpleNamespace(type="standard" if mask is None else "goldfish", goldfish=mask)
    return SimpleNamespace(
        train_cfg=SimpleNamespace(loss=loss), cell=SimpleNamespace(arm=arm), data_dir="d", mask=lambda prepared: mask
    )


def _leakage(did: float, fraction: float) -> dict:
    return {"did": {"dropped": {"accuracy": {"did": did}, "loss": {"did": -2 * did}}}, "supervised_fraction": fraction}


def _study() -> tuple[list, list]:
    plans, cells = [], []
    for seed, (gold, twin, pc10, pc20) in RUNS.items():
        audits = {
            "goldfish": _leakage(gold, 0.0),
            "twin": _leakage(twin, 0.0),
            "pc10": _leakage(pc10[1], pc10[0]),
            "pc20": _leakage(pc20[1], pc20[0]),
            "standard": _leakage(0.5, 1.0),
            "goldfish_seed1": _leakage(0.01, 0.0),
        }
        for arm, mask in ARMS.items():
            plans.append(_plan(arm, mask))
            cells.append(CellSummary(cell=f"{arm}_seed={seed}", arm=arm, values={"seed": seed}, leakage=audits[arm]))
    return plans, cells


def test_the_roles_and_the_per_run_values():
    plans, cells = _study()
    (family,) = calibration(plans, cells, ["seed"])  # goldfish_seed1 has no control: no family of its own
    assert family["goldfish"] == "goldfish" and family["twin"] == "twin"
    assert family["positive"] == {"pc10": 0.1, "pc20": 0.2}
    first = family["runs"][0]
    assert first["run"] == "seed=0" and first["goldfish"] == {"accuracy": 0.02, "loss": -0.04}
    assert first["difference"]["accuracy"] == pytest.approx(0.01, abs=1e-15)
    assert first["positive"]["pc20"] == {"supervised_fraction": 0.2, "accuracy": 0.06, "loss": -0.12}
    assert calibration(plans[:3], cells[:3], ["seed"]) is None  # no twin, no positive control: nothing to calibrate
    assert set(family) == schema_fields(SCHEMA)["leakage_calibration"]  # every field documented


def test_the_sensitivity_across_runs_against_a_hand_computation():
    plans, cells = _study()
    (family,) = calibration(plans, cells, ["seed"])
    acc, loss = family["accuracy"], family["loss"]
    # Goldfish - twin per seed: 0.01, 0.00, 0.03 -> mean 0.04/3, SD by hand
    diffs = [0.01, 0.0, 0.03]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    assert acc["difference"]["mean"] == pytest.approx(mean, rel=1e-12)
    assert acc["difference"]["sd"] == pytest.approx(sd, rel=1e-12)
    se = sd / math.sqrt(3)
    mde = (sps.t.ppf(0.975, 2) + sps.t.ppf(0.8, 2)) * se
    assert acc["difference_mde"] == pytest.approx(mde, rel=1e-12)
    # each seed's line through (0, Goldfish) and its positive controls; by hand (x = 0, 0.1, 0.2: centred -0.1, 0, 0.1)
    slopes = [(0.06 - 0.02) / 0.2, (0.04 - 0.00) / 0.2, (0.07 - 0.03) / 0.2]
    assert acc["slope"]["per_run"] == pytest.approx(slopes, rel=1e-12)
    assert acc["slope"]["mean"] == pytest.approx(0.2, rel=1e-12)
    assert acc["detectable_fraction"] == pytest.approx(mde / 0.2, rel=1e-12)
    # loss: every DiD x -2, a leak lowers the loss: the same fraction, read in the leak's direction
    assert loss["slope"]["mean"] == pytest.approx(-0.4, rel=1e-12)
    assert loss["detectable_fraction"] == pytest.approx(acc["detectable_fraction"], rel=1e-12)
    assert acc["reading"] == "none detected" and loss["reading"] == "none detected"  # t interval covers 0 (df 2)
    assert acc["positive"]["pc10"]["supervised_fraction"] == pytest.approx(0.1)
    assert acc["twin"]["mean"] == pytest.approx(0.01 / 3, rel=1e-12)


def test_the_report_states_the_sensitivity():
    plans, cells = _study()
    results = {"axes": ["seed"], "cells": [], "leakage_calibration": calibration(plans, cells, ["seed"])}
    text = "\n".join(calibration_lines(results))
    assert "### Calibrated on members: goldfish, its no-leak twin" in text
    assert "| seed=0 | 2.0 % / -0.040 | 1.0 % / -0.020 | 1.0 % / -0.020 | 10.0 %: 4.0 % / -0.080 |" in text
    assert "minimum detectable leak, as a supervised fraction" in text
    assert "Reading, accuracy: Goldfish - twin 1.3 % [" in text and "**none detected**; its minimum detectable" in text
    assert "95 % range" in text and "a plug-in estimate, as uncertain as the MDE" in text
    assert render({"axes": [], "cells": []}) == ""  # no audit at all: no section


def test_a_twin_and_a_positive_control_are_audited_on_the_goldfish_positions():
    rng = np.random.default_rng(0)
    docs = [list(rng.integers(2, 3000, 200)) for _ in range(6)]
    base = dropped_targets(docs, ARMS["goldfish"])
    assert all(np.array_equal(b, d) for b, d in zip(base, dropped_targets(docs, ARMS["twin"].base)))
    assert all(np.array_equal(b, d) for b, d in zip(base, dropped_targets(docs, ARMS["pc20"].base)))
    plans = [_plan(a, m) for a, m in ARMS.items()]
    assert list(_other_masks(ARMS["goldfish"], plans[1], plans, None)) == ["goldfish_seed1"]  # controls: no new mask
    arm = {"logp": {"members": [np.zeros(len(d) - 1) for d in docs], "nonmembers": []}, "correct": {"members": []}}
    for name, want in (("twin", 0.0), ("pc20", None)):
        trained = [~d for d in dropped_targets(docs, ARMS[name])]  # what its own loss trained on (effective mask)
        audit = leakage_audit(arm, {**arm, "correct": {}}, base, 0, 0, supervised=trained)
        if want is None:  # by hand: the share of the Goldfish positions the control's effective mask keeps
            want = sum(int((b & t).sum()) for b, t in zip(base, trained)) / sum(int(b.sum()) for b in base)
            assert 0.1 < want < 0.3
        assert audit["supervised_fraction"] == want
