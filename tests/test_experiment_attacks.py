"""What attacks.json and the study report add beyond ``goldfish eval``: per-exposure AUCs with their bootstrap CI,
the dropped-token leakage audit (arm vs control), and the adaptive-decoding summaries -- on constructed numbers
where the answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from goldfish.eval.membership import evaluate_attack
from goldfish.experiment.attacks import exposure_aucs
from goldfish.experiment.report import exposure_table


def test_each_exposure_count_gets_an_auc_with_a_bootstrap_ci():
    rng = np.random.default_rng(0)
    reps = np.array([1] * 20 + [4] * 20)
    nonmembers = rng.normal(0.0, 1.0, 30)
    members = np.concatenate([rng.normal(0.0, 1.0, 20), rng.normal(3.0, 1.0, 20)])  # only x4 is separable
    scores = {"loss": {"members": members, "nonmembers": nonmembers},
              "kept_loss": {"members": members, "nonmembers": nonmembers}}  # not broken down by exposure
    aucs, cis = exposure_aucs(scores, reps, n_bootstrap=200, seed=0)
    assert set(aucs) == set(cis) == {"1", "4"} and set(aucs["4"]) == {"loss"}
    for r in (1, 4):
        want = evaluate_attack(members[reps == r], nonmembers, n_bootstrap=200, seed=0)
        assert aucs[str(r)]["loss"] == want["auc"]
        assert cis[str(r)]["loss"] == [want["auc_ci_low"], want["auc_ci_high"]]
        low, high = cis[str(r)]["loss"]
        assert low < aucs[str(r)]["loss"] <= high
    assert cis["4"]["loss"][0] > 0.9 > cis["1"]["loss"][1]  # x4 separates, x1 does not


def test_the_exposure_table_shows_each_auc_with_its_ci():
    cell = {"cell": "goldfish", "arm": "goldfish", "mia_attack": "loss",
            "mia_by_exposure": {"1": {"loss": 0.5}, "4": {"loss": 0.9}},
            "mia_by_exposure_ci": {"1": {"loss": [0.4, 0.6]}, "4": {"loss": [0.8, 0.97]}}}
    old = {"cell": "standard", "arm": "standard", "mia_by_exposure": {"1": {"loss": 0.7}, "4": {"loss": 1.0}}}
    table = exposure_table({"cells": [cell, old], "axes": []})
    assert "| goldfish | 0.500 [0.400, 0.600] | 0.900 [0.800, 0.970] |" in table
    assert "| standard | 0.700 | 1.000 |" in table  # an attacks.json written before the CI was added
