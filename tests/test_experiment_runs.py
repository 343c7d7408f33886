"""The across-run section (goldfish/experiment/sections/runs.py) against hand computations: the mean over runs with
scipy's t interval and the between-run SD, the paired differences matched by seed (a missing seed drops its pair,
never shifts the others), the readings from the interval, a single run's one line; and TPR at 0.1 % FPR, withheld
below 1000 nonmembers by the same rule as 1 % (goldfish.experiment.inference.cell_statistics)."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
from scipy import stats as sps

from goldfish.experiment.config import EquivalenceConfig, ExperimentConfig, UtilityConfig
from goldfish.experiment.inference import cell_statistics
from goldfish.experiment.sections import runs
from goldfish.experiment.summary import CellSummary, Study

SEEDS = (0, 1, 2, 3)


def _cell(arm: str, seed: int, loss: float, em: float = 0.1, utility: dict | None = None) -> CellSummary:
    return CellSummary(
        cell=f"{arm}__seed={seed}",
        arm=arm,
        values={"seed": seed},
        heldout_loss=loss,
        exact_match_rate=em,
        mia_auc=0.5 + loss / 100,
        utility=utility,
    )


def _study(cells: list[CellSummary], **cfg) -> Study:
    config = ExperimentConfig(grid={"seed": list(SEEDS)}, arms={"standard": {}, "goldfish": {}}, **cfg)
    plans = [types.SimpleNamespace(cell=types.SimpleNamespace(values={"seed": s})) for s in SEEDS]
    return Study(config, plans, plans, cells, None, {})


LOSS = {"standard": [3.10, 3.25, 3.02, 3.18], "goldfish": [3.15, 3.22, 3.11, 3.30], "control": [4.0, 4.1, 3.9, 4.2]}


def _cells(skip: tuple[str, int] | None = None) -> list[CellSummary]:
    return [
        _cell(arm, s, LOSS[arm][s]) for arm in ("standard", "goldfish", "control") for s in SEEDS if (arm, s) != skip
    ]


def _t_interval(x):
    x = np.asarray(x, dtype=float)
    return sps.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=sps.sem(x))


def test_over_runs_is_the_t_interval_over_seeds_with_the_between_run_sd():
    out = runs.compute(_study(_cells()))["runs"]
    assert out["replicate_axes"] == ["seed"]
    [g] = out["groups"]
    arm = next(a for a in g["arms"] if a["arm"] == "goldfish")
    assert [r["replicate"] for r in arm["runs"]] == [f"seed={s}" for s in SEEDS]
    d = arm["over_runs"]["heldout_loss"]
    low, high = _t_interval(LOSS["goldfish"])
    assert d["mean"] == pytest.approx(np.mean(LOSS["goldfish"]), rel=1e-12)
    assert (d["ci_low"], d["ci_high"]) == pytest.approx((low, high), rel=1e-12)
    assert d["sd"] == pytest.approx(np.std(LOSS["goldfish"], ddof=1), rel=1e-12)
    # TPR at 0.1 % FPR is a headline even where no cell has it (null: no interval)
    assert arm["over_runs"]["mia_tpr_at_0_1pct_fpr"]["n"] == 0


def test_paired_differences_are_matched_by_seed_later_minus_earlier_and_minus_control():
    out = runs.compute(_study(_cells()))["runs"]
    [g] = out["groups"]
    pairs = {(p["a"], p["b"], p["headline"]): p for p in g["paired"]}
    assert {(a, b) for a, b, _ in pairs} == {("goldfish", "standard"), ("standard", "control"), ("goldfish", "control")}
    p = pairs[("goldfish", "standard", "heldout_loss")]
    diffs = np.subtract(LOSS["goldfish"], LOSS["standard"])
    assert [x["diff"] for x in p["pairs"]] == pytest.approx(diffs.tolist(), rel=1e-12)
    low, high = _t_interval(diffs)
    assert (p["over_runs"]["ci_low"], p["over_runs"]["ci_high"]) == pytest.approx((low, high), rel=1e-12)
    assert p["dropped"] == []


def test_a_missing_seed_drops_its_pair_and_never_shifts_the_others():
    out = runs.compute(_study(_cells(skip=("goldfish", 1))))["runs"]
    [g] = out["groups"]
    p = next(p for p in g["paired"] if (p["a"], p["b"], p["headline"]) == ("goldfish", "standard", "heldout_loss"))
    kept = [0, 2, 3]
    assert [x["replicate"] for x in p["pairs"]] == [f"seed={s}" for s in kept]
    assert [x["diff"] for x in p["pairs"]] == pytest.approx(
        [LOSS["goldfish"][s] - LOSS["standard"][s] for s in kept], rel=1e-12
    )
    assert p["dropped"] == [{"replicate": "seed=1", "why": "no goldfish run"}]
    assert p["over_runs"]["n"] == 3


def test_reading_in_words_from_the_interval():
    out = runs.compute(_study(_cells()))["runs"]
    [g] = out["groups"]
    by = {(p["a"], p["b"], p["headline"]): p["reading"] for p in g["paired"]}
    # the verdict word by the rule (eval/verdicts.py), then the interval it was read from
    assert by[("standard", "control", "heldout_loss")].startswith("**lower**: standard below control")  # ~ -0.9
    assert by[("goldfish", "standard", "exact_match_rate")] == (
        "**none detected**: every one of the 4 runs gives +0.0 pts: no spread between runs"
    )
    assert by[("goldfish", "standard", "heldout_loss")].startswith("**none detected**: no difference detected over 4")
    text = runs.render({"runs": out})
    assert "## Across training runs" in text and "mean [95 % t] (sd)" in text and "within-run detail" in text


def test_utility_pairs_only_the_same_documents_and_decides_against_the_stated_margin():
    def util(loss, sha="same"):
        return {
            "documents": 32,
            "tokens": 128,
            "corpora": {
                "wikipedia": {"loss": loss, "loss_ci": None, "n_documents": 32, "documents_sha256": sha},
                "kjv": {"note": "skipped: not installed"},
            },
        }

    gold = [5.001, 5.012, 4.995, 5.004]
    std = [5.0, 5.01, 5.0, 5.0]
    cells = [_cell("standard", s, 3.0, utility=util(std[s])) for s in SEEDS]
    cells += [_cell("goldfish", s, 3.0, utility=util(gold[s], "other" if s == 3 else "same")) for s in SEEDS]
    out = runs.compute(_study(cells, utility=UtilityConfig(corpora=["wikipedia", "kjv"], margin=0.05)))["runs"]
    assert out["margins"] == {"utility_loss_wikipedia": 0.05, "utility_loss_kjv": 0.05}
    [g] = out["groups"]
    p = next(p for p in g["paired"] if p["headline"] == "utility_loss_wikipedia")
    assert p["dropped"] == [{"replicate": "seed=3", "why": "not the same documents"}]
    diffs = [gold[s] - std[s] for s in (0, 1, 2)]
    assert p["over_runs"]["mean"] == pytest.approx(np.mean(diffs), rel=1e-9)
    # TOST by hand: the larger one-sided p against -0.05 and +0.05
    se = np.std(diffs, ddof=1) / math.sqrt(3)
    tost = max(sps.t.sf((np.mean(diffs) + 0.05) / se, 2), sps.t.cdf((np.mean(diffs) - 0.05) / se, 2))
    assert p["over_runs"]["tost_p"] == pytest.approx(tost, rel=1e-9)
    assert p["reading"].startswith("**equivalent**: no difference beyond +-0.0500")
    assert not any(q["headline"] == "utility_loss_kjv" for q in g["paired"])  # a skipped corpus has no headline


def test_one_run_per_arm_says_one_line():
    cells = [_cell("standard", 0, 3.0), _cell("goldfish", 0, 3.1)]
    out = runs.compute(_study(cells))
    assert out["runs"]["why_not"].startswith("one training run per arm")
    text = runs.render(out)
    assert text.count("\n\n") == 1 and "no interval over runs from one run" in text


def _tpr_by_hand(members, nonmembers, allowed):
    threshold = sorted(nonmembers, reverse=True)[allowed]
    return float(np.mean(np.asarray(members) > threshold))


def test_tpr_at_0_1pct_fpr_needs_1000_nonmembers_like_1pct_needs_100():
    rng = np.random.default_rng(0)
    members = rng.normal(1.0, 1.0, 200).tolist()
    few = cell_statistics({"members": members, "nonmembers": rng.normal(0, 1, 999).tolist()}, [])
    assert (
        few["mia_tpr_at_0_1pct_fpr"] is None
        and "needs >= 1000 nonmembers (has 999)" in few["mia_tpr_at_0_1pct_fpr_note"]
    )
    assert few["mia_tpr_at_1pct_fpr"] is not None
    nonmembers = rng.normal(0, 1, 1000).tolist()
    enough = cell_statistics({"members": members, "nonmembers": nonmembers}, [])
    assert enough["mia_tpr_at_0_1pct_fpr_note"] is None
    assert enough["mia_tpr_at_0_1pct_fpr"] == _tpr_by_hand(members, nonmembers, 1)  # 1 false positive allowed
    assert enough["mia_tpr_at_1pct_fpr"] == _tpr_by_hand(members, nonmembers, 10)
    below = cell_statistics({"members": members, "nonmembers": nonmembers[:99]}, [])
    assert below["mia_tpr_at_1pct_fpr"] is None and below["mia_tpr_at_0_1pct_fpr"] is None


def test_replicate_axes_are_the_pool_axes_else_the_seed_axis():
    assert ExperimentConfig(grid={"seed": [0, 1], "k": [2, 4]}).replicate_axes == ["seed"]
    assert ExperimentConfig(grid={"split": [0, 1]}, equivalence=EquivalenceConfig(0.05, ["split"])).replicate_axes == [
        "split"
    ]
    assert ExperimentConfig(grid={"k": [2, 4]}).replicate_axes == []


def test_utility_config_refuses_an_unknown_corpus_and_a_margin_of_zero():
    from goldfish.errors import ConfigError

    with pytest.raises(ConfigError, match=r"utility.corpora=\['c4'\] must name offline corpora: wikipedia, kjv"):
        UtilityConfig(corpora=["c4"])
    with pytest.raises(ConfigError, match="utility.margin=0 must be > 0"):
        UtilityConfig(margin=0)


def _leak(accuracy: float, loss: float) -> dict:
    return {"did": {"dropped": {"accuracy": {"did": accuracy}, "loss": {"did": loss}}}}


def test_the_leakage_did_is_read_per_run_and_paired_by_seed_and_the_control_has_none():
    acc = {"goldfish": [-0.031, 0.002, 0.006, -0.016], "standard": [0.281, 0.271, 0.295, 0.235]}
    loss = {"goldfish": [-0.026, 0.022, -0.107, 0.044], "standard": [-1.819, -1.624, -1.828, -1.608]}
    cells = _cells()
    for c in cells:
        if c.arm != "control":
            s = c.values["seed"]
            c.leakage = _leak(acc[c.arm][s], loss[c.arm][s])
    out = runs.compute(_study(cells))["runs"]
    assert ("leak_did_accuracy", "pct") in {(h["key"], h["kind"]) for h in out["headlines"]}
    [g] = out["groups"]
    arms = {a["arm"]: a for a in g["arms"]}
    d = arms["goldfish"]["over_runs"]["leak_did_accuracy"]
    low, high = _t_interval(acc["goldfish"])
    assert (d["mean"], d["ci_low"], d["ci_high"]) == pytest.approx((np.mean(acc["goldfish"]), low, high), rel=1e-12)
    assert arms["control"]["over_runs"]["leak_did_loss"]["n"] == 0
    pairs = {(p["a"], p["b"], p["headline"]): p for p in g["paired"]}
    diffs = np.subtract(loss["goldfish"], loss["standard"])
    assert [x["diff"] for x in pairs[("goldfish", "standard", "leak_did_loss")]["pairs"]] == pytest.approx(diffs)
    none = pairs[("goldfish", "control", "leak_did_accuracy")]
    assert none["pairs"] == [] and {x["why"] for x in none["dropped"]} == {"no value for control"}
    text = runs.render({"runs": out})
    assert "| goldfish | seed=0 |" in text and "leak DiD accuracy (dropped)" in text
    # the per-run table shows each DiD in points; the pair with the control (undefined there) is left out
    assert "-3.1 %" in text
    assert not any(line.startswith("| goldfish - control | leak DiD") for line in text.splitlines())
    assert any(line.startswith("| goldfish - standard | leak DiD loss (dropped) |") for line in text.splitlines())
