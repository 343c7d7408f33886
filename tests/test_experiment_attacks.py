"""What attacks.json and the study report add beyond ``goldfish eval``: per-exposure AUCs with their bootstrap CI,
the dropped-token leakage audit (arm vs control, a difference in differences against held-out text), and the
adaptive-decoding summaries -- on constructed numbers where the answer is known, then on experiments/micro.yaml with
beam search and samples (~20 s of CPU)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from tolerances import U64, rounding

from goldfish.eval.membership import evaluate_attack
from goldfish.experiment.analyses.attacks import exposure_aucs
from goldfish.experiment.sections.mia_by_exposure import exposure_table

RATE = rounding(20, U64)  # rates in [0, 1] from float64 means of <= 16 values or Wilson's ~10 operations


def test_each_exposure_count_gets_an_auc_with_a_bootstrap_ci():
    rng = np.random.default_rng(0)
    reps = np.array([1] * 20 + [4] * 20)
    nonmembers = rng.normal(0.0, 1.0, 30)
    members = np.concatenate([rng.normal(0.0, 1.0, 20), rng.normal(3.0, 1.0, 20)])  # only x4 is separable
    scores = {
        "loss": {"members": members, "nonmembers": nonmembers},
        "kept_loss": {"members": members, "nonmembers": nonmembers},
    }  # not broken down by exposure
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
    cell = {
        "cell": "goldfish",
        "arm": "goldfish",
        "mia_attack": "loss",
        "mia_by_exposure": {"1": {"loss": 0.5}, "4": {"loss": 0.9}},
        "mia_by_exposure_ci": {"1": {"loss": [0.4, 0.6]}, "4": {"loss": [0.8, 0.97]}},
    }
    old = {
        "cell": "standard",
        "arm": "standard",
        "mia_attack": "loss",
        "mia_by_exposure": {"1": {"loss": 0.7}, "4": {"loss": 1.0}},
    }
    table = exposure_table({"cells": [cell, old], "axes": []})
    assert "| goldfish | 0.500 [0.400, 0.600] | 0.900 [0.800, 0.970] |" in table
    assert "| standard | 0.700 | 1.000 |" in table  # an attacks.json written before the CI was added


def _docs(n_docs: int, length: int, every: int) -> list[np.ndarray]:
    """(length,) bool per document, True at every ``every``-th position: the constructed "dropped" positions."""
    return [np.arange(length) % every == every - 1 for _ in range(n_docs)]


def test_leakage_audit_is_a_difference_in_differences_against_held_out_text():
    from goldfish.experiment.analyses.attacks import leakage_audit

    dropped = _docs(10, 8, 4)  # members: targets 3 and 7 dropped, 20 dropped and 60 kept positions
    held = [np.arange(6) % 2 == 0 for _ in range(5)]  # the control is right on half of every held-out target
    arm = {
        "logp": {
            "members": [np.full(8, np.log(0.5)) for _ in dropped],  # the arm: p = 1/2 on every target
            "nonmembers": [np.full(6, np.log(0.5)) for _ in held],
        },
        "correct": {"members": [np.ones(8, np.int8) for _ in dropped], "nonmembers": [np.ones(6, np.int8)] * 5},
    }
    control = {
        "logp": {
            "members": [np.where(d, np.log(0.25), np.log(0.5)) for d in dropped],
            "nonmembers": [np.full(6, np.log(0.25)) for _ in held],
        },  # worse on held-out text everywhere
        "correct": {
            "members": [(~d).astype(int).tolist() for d in dropped],  # as attacks.json stores it
            "nonmembers": [h.astype(int).tolist() for h in held],
        },
    }
    audit = leakage_audit(arm, control, dropped, n_bootstrap=100, seed=0)
    loss = rounding(60, U64) * np.log(4)  # float64 means of <= 60 log-probs, relative to their scale
    # the old members-only reading, kept beside: arm - control on the member positions
    assert audit["dropped"]["accuracy"]["diff"] == 1.0 and audit["kept"]["accuracy"]["diff"] == 0.0
    assert audit["dropped"]["loss"]["arm"] == pytest.approx(np.log(2), abs=loss)
    assert audit["dropped"]["loss"]["control"] == pytest.approx(np.log(4), abs=loss)
    assert audit["dropped"]["loss"]["diff"] == pytest.approx(-np.log(2), abs=loss)
    assert audit["kept"]["loss"]["diff"] == 0.0  # the same values in the same order on both sides
    assert audit["dropped"]["loss"]["n_positions"] == 20 and audit["kept"]["loss"]["n_positions"] == 60
    # by hand: held-out arm - control is +1/2 in accuracy and -log 2 in loss, so on the dropped positions the gain of
    # +1 in accuracy is +1/2 beyond the held-out shift and the loss gain of -log 2 is none at all; on the kept ones
    # (no member difference) the DiD is minus the held-out shift
    did = audit["did"]
    assert did["dropped"]["accuracy"]["heldout_diff"] == 0.5 and did["dropped"]["accuracy"]["did"] == 0.5
    assert did["kept"]["accuracy"]["did"] == -0.5
    assert did["dropped"]["loss"]["heldout_diff"] == pytest.approx(-np.log(2), abs=loss)
    assert did["dropped"]["loss"]["did"] == pytest.approx(0.0, abs=loss)
    assert did["kept"]["loss"]["did"] == pytest.approx(np.log(2), abs=loss)
    assert did["dropped"]["loss"]["n_heldout_documents"] == 5 and did["dropped"]["loss"]["n_heldout_positions"] == 30
    for side in did.values():
        for d in side.values():
            assert d["ci_low"] <= d["did"] <= d["ci_high"]
    # a control file written before the nonmembers' top-1 correctness was kept: no accuracy DiD; before any: none
    older = {**control, "correct": {"members": control["correct"]["members"], "nonmembers": None}}
    audit = leakage_audit(arm, older, dropped, n_bootstrap=0, seed=0)
    assert "accuracy" in audit["dropped"] and "accuracy" not in audit["did"]["dropped"]
    oldest = {**control, "correct": {"members": None, "nonmembers": None}}
    audit = leakage_audit(arm, oldest, dropped, n_bootstrap=0, seed=0)
    assert "accuracy" not in audit["dropped"]
    assert audit["dropped"]["loss"]["diff"] == pytest.approx(-np.log(2), abs=loss)


def _planted(leak: float, confound: float, seed: int, n_docs: int = 60, length: int = 40) -> tuple:
    """Constructed arm and control per-token values: the arm gains a general +0.1 in top-1 probability on every
    target (members and nonmembers), ``leak`` more on the member positions the mask drops, and ``confound`` more on
    the positions the mask would drop in ANY document (members and nonmembers alike: a selection effect of the
    mask, not leakage). Returns (arm, control, member masks, nonmember masks)."""
    rng = np.random.default_rng(seed)
    member_drop = [rng.random(length) < 0.25 for _ in range(n_docs)]
    held_drop = [rng.random(length) < 0.25 for _ in range(n_docs)]

    def draw(p: np.ndarray) -> np.ndarray:
        return (rng.random(len(p)) < p).astype(np.int8)

    base = 0.3
    control = {
        "correct": {
            "members": [draw(np.full(length, base)) for _ in member_drop],
            "nonmembers": [draw(np.full(length, base)) for _ in held_drop],
        }
    }
    arm = {
        "correct": {
            "members": [draw(base + 0.1 + (leak + confound) * d) for d in member_drop],
            "nonmembers": [draw(base + 0.1 + confound * d) for d in held_drop],
        }
    }
    for who in (arm, control):  # the loss side: -log of a constant, unused by these checks
        who["logp"] = {k: [np.full(length, -1.0) for _ in v] for k, v in who["correct"].items()}
    return arm, control, member_drop, held_drop


def test_the_placebo_is_zero_without_a_confound_and_a_planted_leak_is_detected():
    from goldfish.experiment.analyses.attacks import leakage_audit

    # no leak, no confound: the DiD and the placebo are ~0 (their intervals cover it), the reading "none detected",
    # with the minimum detectable leak reported (2.80 standard errors of the DiD)
    arm, control, md, hd = _planted(0.0, 0.0, seed=1)
    audit = leakage_audit(arm, control, md, 500, 0, hd)
    placebo, did = audit["placebo"]["accuracy"], audit["did"]["dropped"]["accuracy"]
    assert placebo["ci_low"] <= 0 <= placebo["ci_high"] and did["ci_low"] <= 0 <= did["ci_high"]
    assert audit["reading"]["accuracy"] == "none detected"
    mde = audit["mde"]["accuracy"]
    assert mde == pytest.approx(2.801585 * (did["ci_high"] - did["ci_low"]) / (2 * 1.96), rel=1e-6)
    assert 0.02 < mde < 0.15  # 60 documents x ~10 dropped positions: a proportion's SE ~0.02 on each side
    # a planted leak of twice the minimum detectable one is detected, and only on the dropped positions
    arm, control, md, hd = _planted(2 * mde, 0.0, seed=2)
    audit = leakage_audit(arm, control, md, 500, 0, hd)
    assert audit["reading"]["accuracy"] == "leak" and audit["did"]["dropped"]["accuracy"]["ci_low"] > 0
    kept = audit["did"]["kept"]["accuracy"]
    assert kept["ci_low"] <= 0 <= kept["ci_high"]
    # a mask that selects positions training moves more anyway (in nonmembers too) fakes a leak: the placebo sees
    # it, and the reading is inconclusive instead of "leak"
    arm, control, md, hd = _planted(0.0, 0.3, seed=3)
    audit = leakage_audit(arm, control, md, 500, 0, hd)
    assert audit["did"]["dropped"]["accuracy"]["ci_low"] > 0  # the naive audit would report leakage
    assert audit["placebo"]["accuracy"]["ci_low"] > 0 and audit["reading"]["accuracy"] == "inconclusive"


def test_the_supervised_fraction_of_the_audited_positions():
    from goldfish.experiment.analyses.attacks import leakage_audit

    arm, control, md, hd = _planted(0.0, 0.0, seed=4, n_docs=10)
    everything = [np.ones(len(d), bool) for d in md]
    assert leakage_audit(arm, control, md, 0, 0, hd, everything)["supervised_fraction"] == 1.0  # standard loss
    own = [~d for d in md]  # the Goldfish arm on its own mask: never trained on a dropped position
    assert leakage_audit(arm, control, md, 0, 0, hd, own)["supervised_fraction"] == 0.0
    half = [np.arange(len(d)) % 2 == 0 for d in md]  # by hand: the even positions among the dropped ones
    want = sum(int((d & h).sum()) for d, h in zip(md, half)) / sum(int(d.sum()) for d in md)
    assert leakage_audit(arm, control, md, 0, 0, hd, half)["supervised_fraction"] == want


def _audit(diff: float) -> dict:
    side = {
        "arm": 0.9,
        "control": 0.9 - diff,
        "diff": diff,
        "diff_ci_low": diff - 0.1,
        "diff_ci_high": diff + 0.1,
        "n_documents": 16,
        "n_positions": 100,
    }
    did = {
        "member_diff": diff,
        "heldout_diff": 0.25,
        "did": diff - 0.25,
        "ci_low": diff - 0.35,
        "ci_high": diff - 0.15,
        "p_value": 0.002,
        "n_member_documents": 16,
        "n_member_positions": 100,
        "n_heldout_documents": 40,
        "n_heldout_positions": 900,
    }
    out = {p: {"accuracy": side, "loss": {**side, "arm": 2.0, "control": 2.5}} for p in ("dropped", "kept")}
    return {**out, "did": {p: {"accuracy": did, "loss": did} for p in ("dropped", "kept")}}


def test_the_leakage_section_has_a_table_or_says_why_not():
    from goldfish.experiment.sections.leakage import leakage_lines as leakage_section

    control = {"cell": "control", "arm": "control", "tf_accuracy": 0.1, "leakage": None}
    gold = {"cell": "goldfish", "arm": "goldfish", "tf_accuracy": 0.5, "leakage": _audit(0.5)}
    text = "\n".join(leakage_section({"cells": [control, gold], "axes": []}))
    assert "## Dropped-token leakage audit" in text
    assert "## Dropped-token leakage audit (difference in differences)" in text
    # the difference in differences with its CI and p, on the dropped and the kept positions
    assert (
        "| goldfish | Goldfish | dropped | 16 / 40 | 25.0 % [15.0 %, 35.0 %] (p 0.002) | - | 0.250 [0.150, 0.350] "
        "(p 0.002) | - | - | - |"
    ) in text
    assert "| goldfish |  | kept | 16 / 40 | 25.0 % [15.0 %, 35.0 %] (p 0.002) |" in text
    # with its validity: the placebo, the minimum detectable DiD, the reading, the share trained on; and a positive
    # control on another arm's mask (one row: its dropped positions)
    placebo = {"did": 0.01, "ci_low": -0.03, "ci_high": 0.05, "p_value": 0.6}
    valid = {
        **_audit(0.5),
        "placebo": {"accuracy": placebo, "loss": placebo},
        "mde": {"accuracy": 0.08, "loss": 0.2},
        "reading": {"accuracy": "leak", "loss": "none detected"},
        "supervised_fraction": 0.0,
    }
    other = {**valid, "supervised_fraction": 0.75, "reading": {"accuracy": "leak", "loss": "leak"}}
    gold2 = {**gold, "k_baseline": {"rows": []}, "leakage": valid, "leakage_by_mask": {"goldfish_seed1": other}}
    text = "\n".join(leakage_section({"cells": [control, gold2], "axes": []}))
    assert (
        "| goldfish | goldfish (trained on 0.0 %) | dropped | 16 / 40 | 25.0 % [15.0 %, 35.0 %] (p 0.002) | "
        "1.0 % [-3.0 %, 5.0 %] (p 0.6) |"
    ) in text
    assert "| 8.0 % / 0.200 | leak / none detected |" in text
    assert "| goldfish | goldfish_seed1 (trained on 75.0 %) | dropped |" in text and "| leak / leak |" in text
    # a grid with two points, one without its control; a grid point whose data has no Goldfish mask
    cells = [
        {**control, "model": "a"},
        {**gold, "model": "a"},
        {**gold, "cell": "goldfish__model=b", "model": "b"},
        {"cell": "standard__model=a", "arm": "standard", "model": "a", "tf_accuracy": 0.5, "leakage": None},
    ]
    text = "\n".join(leakage_section({"cells": cells, "axes": ["model"]}))
    assert "| goldfish model=a |  | kept |" in text and "goldfish model=b |" not in text
    assert "No control cell at model=b (`control: false`): no leakage audit there." in text
    assert "standard model=a: no Goldfish mask on its data" in text
    # no control anywhere: one line, no table
    text = "\n".join(leakage_section({"cells": [gold], "axes": []}))
    assert "| positions |" not in text and "No control cell in this experiment" in text
    # no attacks.json at all (pipelines without the analysis): no section
    assert leakage_section({"cells": [{"cell": "goldfish", "arm": "goldfish"}], "axes": []}) == []


def test_the_adaptive_table_appears_only_when_some_cell_ran_beam_or_samples():
    from goldfish.experiment.sections.adaptive import adaptive_table

    plain = {"cell": "standard", "arm": "standard", "n_windows": 16, "exact_match_rate": 0.5}
    assert adaptive_table({"cells": [plain], "axes": []}) is None
    beam = {
        **plain,
        "cell": "goldfish",
        "arm": "goldfish",
        "exact_match_ci_low": 0.3,
        "exact_match_ci_high": 0.7,
        "beam_exact_match_rate": 0.75,
        "beam_exact_match_rate_ci_low": 0.5,
        "beam_exact_match_rate_ci_high": 0.9,
        "beam_width": 2,
    }
    table = adaptive_table({"cells": [plain, beam], "axes": []})
    assert "| goldfish | 16 | 50.0 % [30.0 %, 70.0 %] | 75.0 % [50.0 %, 90.0 %] (beam 2) | - | - |" in table
    assert "| standard | 16 | 50.0 % | - | - | - |" in table


@pytest.fixture
def micro(micro_sweep):
    return micro_sweep  # the session's one real micro experiment (conftest): beam 2, 2 samples, margin 0.1


def _wilson(k: int, n: int) -> tuple[float, float]:
    p, z = k / n, 1.96
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))


def test_beam_and_sampling_summaries_equal_a_recomputation_from_the_windows(micro):
    results = json.loads((micro / "results.json").read_text())
    summary = json.loads((micro / "summary.json").read_text())
    report = (micro / "report.md").read_text()
    assert "## Adaptive extraction attacks (beam search, sampling)" in report
    for c in results["cells"]:
        windows = json.loads((micro / "cells" / c["cell"] / "eval" / "results.json").read_text())["windows"]
        n = len(windows)
        assert n == c["n_windows"] == 16 and c["beam_width"] == 2 and c["n_samples"] == 2
        beam = sum(bool(w["beam_exact_match"]) for w in windows)
        assert c["beam_exact_match_rate"] == beam / n  # a count over a count
        assert [c["beam_exact_match_rate_ci_low"], c["beam_exact_match_rate_ci_high"]] == pytest.approx(
            _wilson(beam, n), abs=RATE
        )
        assert c["sample_rate"] == pytest.approx(sum(w["sample_hits"] / 2 for w in windows) / n, abs=RATE)
        hit = sum(w["sample_hits"] > 0 for w in windows)
        assert c["sample_any_rate"] == hit / n
        assert [c["sample_any_rate_ci_low"], c["sample_any_rate_ci_high"]] == pytest.approx(_wilson(hit, n), abs=RATE)
        assert summary[c["arm"]]["beam_exact_match_rate"] == c["beam_exact_match_rate"]
        assert f"| {c['cell']} | 16 | " in report and "(beam 2)" in report and "(2 samples, T=" in report


def test_the_leakage_audit_equals_a_recomputation_from_the_stored_tokens(micro):
    from goldfish.config import load_config
    from goldfish.data import load_prepared
    from goldfish.experiment.analyses.attacks import dropped_targets
    from goldfish.train_config import TrainConfig, goldfish_config

    train_cfg = load_config(TrainConfig, micro / "cells" / "goldfish" / "train_config.yaml", [])
    prepared = load_prepared(train_cfg.data.path)
    dropped = dropped_targets([list(x) for x in prepared.members["input_ids"]], goldfish_config(train_cfg, prepared))
    control = json.loads((micro / "cells" / "control" / "attacks.json").read_text())
    assert "leakage" not in control  # the control is the reference, not audited against itself
    report = (micro / "report.md").read_text()
    assert "## Dropped-token leakage audit" in report
    for arm in ("standard", "goldfish"):
        attacks = json.loads((micro / "cells" / arm / "attacks.json").read_text())
        audit = attacks["leakage"]["dropped"]
        # accuracy: the same positions and tokens as each cell's own teacher-forced dropped accuracy
        assert audit["accuracy"]["arm"] == pytest.approx(attacks["accuracy"]["dropped_accuracy"], abs=RATE)
        assert audit["accuracy"]["control"] == pytest.approx(control["accuracy"]["dropped_accuracy"], abs=RATE)
        for who, lp in (("arm", attacks["logprobs"]["members"]), ("control", control["logprobs"]["members"])):
            nll = np.concatenate([-np.asarray(x)[d] for x, d in zip(lp, dropped)])
            # a float64 mean of the same values in another order, relative to their scale
            assert audit["loss"][who] == pytest.approx(nll.mean(), abs=rounding(len(nll), U64) * nll.max())
        for side in ("dropped", "kept"):
            for measure in ("accuracy", "loss"):
                a = attacks["leakage"][side][measure]
                scale = max(abs(a["arm"]), abs(a["control"]))
                assert a["diff"] == pytest.approx(a["arm"] - a["control"], abs=rounding(a["n_positions"], U64) * scale)
                assert a["diff_ci_low"] <= a["diff"] <= a["diff_ci_high"] and a["n_documents"] == 16
        assert re.search(rf"\| {arm} \| [^|]+ \| dropped \| 16 / ", report) and f"| {arm} |  | kept | 16 / " in report
        # the audit's validity: the placebo on the nonmembers, the minimum detectable DiD, what the cell trained on
        assert set(attacks["leakage"]["placebo"]) == set(attacks["leakage"]["mde"]) == {"accuracy", "loss"}
        assert attacks["leakage"]["supervised_fraction"] == (1.0 if arm == "standard" else 0.0)
        _check_did(attacks, control, dropped)
        split = attacks["member_nll_by_split"]  # what the size sweep's split loss gap reads
        for lp, d, kept, drop in zip(attacks["logprobs"]["members"], dropped, split["kept"], split["dropped"]):
            x = -np.asarray(lp)
            tol = rounding(len(x), U64) * x.max()  # a float64 mean of <= len(x) values, relative to their scale
            assert kept == pytest.approx(x[~d].mean(), abs=tol)
            assert drop == (pytest.approx(x[d].mean(), abs=tol) if d.any() else None)
    # the per-exposure AUCs of the report carry their bootstrap CI (micro has repetitions 1 and 2)
    section = report.split("## MIA AUC by exposure count")[1].split("##")[0]
    assert section.count("[") >= 6


def _check_did(attacks: dict, control: dict, dropped: list) -> None:
    """The difference in differences recomputed from the stored per-token values, by plain pooled means."""
    for side, keep in (("dropped", dropped), ("kept", [~d for d in dropped])):
        for measure, field, sign in (("accuracy", "correct", 1.0), ("loss", "logprobs", -1.0)):

            def pooled(found: dict, split: str, positions) -> float:
                docs = [sign * np.asarray(x, float) for x in found[field][split]]
                if positions is not None:
                    docs = [x[p] for x, p in zip(docs, positions)]
                return float(np.concatenate(docs).mean())

            member = pooled(attacks, "members", keep) - pooled(control, "members", keep)
            held = pooled(attacks, "nonmembers", None) - pooled(control, "nonmembers", None)
            d = attacks["leakage"]["did"][side][measure]
            scale = 1.0 if measure == "accuracy" else 50.0  # per-token NLLs of the micro model stay below 50 nats
            tol = rounding(10_000, U64) * scale  # float64 sums of <= 10 k per-token values in another order
            assert d["member_diff"] == pytest.approx(member, abs=tol)
            assert d["heldout_diff"] == pytest.approx(held, abs=tol)
            assert d["did"] == pytest.approx(member - held, abs=2 * tol)
            assert d["ci_low"] <= d["did"] <= d["ci_high"]


def test_paired_tests_equal_a_recomputation_from_the_cells_files(micro):
    from sklearn.metrics import roc_auc_score

    results = json.loads((micro / "results.json").read_text())
    summary = json.loads((micro / "summary.json").read_text())
    assert summary["paired"] == results["paired"]
    assert [(t["a"], t["b"]) for t in results["paired"]] == [
        ("goldfish", "standard"),
        ("standard", "control"),
        ("goldfish", "control"),
    ]

    def cell(name: str) -> tuple[dict, dict]:
        windows = json.loads((micro / "cells" / name / "eval" / "results.json").read_text())["windows"]
        return {w["sha256"]: w for w in windows}, json.loads((micro / "cells" / name / "attacks.json").read_text())

    for t in results["paired"]:
        (wa, aa), (wb, ab) = cell(t["cell_a"]), cell(t["cell_b"])
        keys = sorted(set(wa) & set(wb))
        assert t["n_windows"] == len(keys) == 16
        a_only = sum(bool(wa[k]["exact_match"]) and not wb[k]["exact_match"] for k in keys)
        b_only = sum(bool(wb[k]["exact_match"]) and not wa[k]["exact_match"] for k in keys)
        assert (t["exact_match"]["a_only"], t["exact_match"]["b_only"]) == (a_only, b_only)
        for name in ("rouge_l_paper", "rouge_l"):
            diff = np.mean([wa[k][name] - wb[k][name] for k in keys])
            assert t[name]["diff"] == pytest.approx(diff, abs=rounding(16, U64))
        # the AUC difference by scikit-learn on the same documents (both cells scored them in the prepared order)
        assert aa["doc_ids"] == ab["doc_ids"]
        attack = t["auc"]["attack"]

        def auc(found: dict) -> float:
            s = found["scores"][attack]
            return roc_auc_score([1] * len(s["members"]) + [0] * len(s["nonmembers"]), s["members"] + s["nonmembers"])

        assert t["auc"]["diff"] == pytest.approx(auc(aa) - auc(ab), abs=rounding(100, U64))
    for c in results["cells"]:  # the headline AUC's exact p-value is computed on the same scores as the AUC
        assert c["mia_auc_p"]["auc"] == pytest.approx(c["mia_auc"], abs=rounding(100, U64))
        assert c["mia_tpr_at_1pct_fpr"] is None and "needs >= 100 nonmembers" in c["mia_tpr_at_1pct_fpr_note"]
    report = (micro / "report.md").read_text()
    assert "## Paired tests between arms" in report and "| goldfish vs standard | 16 (16) |" in report


def test_the_membership_comparison_equals_a_recomputation_from_the_attacks_files(micro):
    from goldfish.data import load_prepared
    from goldfish.eval.stats import paired_auc_difference
    from goldfish.experiment.sections.membership import comparison_table

    out = micro  # run with equivalence.margin=0.1
    (entry,) = json.loads((out / "results.json").read_text())["membership_comparison"]
    assert (entry["a"], entry["b"], entry["margin"], entry["replicates"]) == ("goldfish", "standard", 0.1, [{}])
    a, b = (json.loads((out / "cells" / arm / "attacks.json").read_text()) for arm in ("goldfish", "standard"))
    attack = entry["attack"]
    prepared = load_prepared(next((out / "prepared").iterdir()))
    reps = np.asarray(prepared.members["repetitions"])
    assert a["doc_ids"] == b["doc_ids"]  # the same documents in the same order: plain indexing below
    for stratum, found in entry["strata"].items():
        chosen = np.ones(len(reps), bool) if stratum == "all" else reps == int(stratum)
        sa, sb = a["scores"][attack], b["scores"][attack]
        want = paired_auc_difference(
            np.asarray(sa["members"])[chosen],
            sa["nonmembers"],
            np.asarray(sb["members"])[chosen],
            sb["nonmembers"],
            n_bootstrap=0,
        )
        assert found["diff"] == want["diff"] and found["groups"][0]["a"] == want["a"]  # the same rank counts
        assert found["n_members"] == [int(chosen.sum())] and found["tpr_a"] == [None]  # 8 nonmembers: withheld
        assert found["ci90_low"] >= found["ci_low"] and found["equivalent"] == (
            -0.1 < found["ci90_low"] and found["ci90_high"] < 0.1
        )
    assert set(entry["strata"]) == {"all", "1", "2"}
    assert "## Membership inference between arms" in (out / "report.md").read_text()
    members, nonmembers = len(prepared.members), len(prepared.nonmembers)
    assert (members, nonmembers) == (16, 8)  # micro.yaml: 16 members, a 50/50 random split of the rest
    assert f"| goldfish vs standard | all | {members} vs {nonmembers} |" in comparison_table([entry])
    assert {found["verdict"] for found in entry["strata"].values()} <= {"one run", "uninformative (ceiling)"}


def _stratum(auc_pairs, tpr_pairs):
    """A membership_comparison stratum as compute builds it, from each replicate's (AUC a, AUC b) and TPRs."""
    return {
        "groups": [{"a": a, "b": b, "diff": a - b} for a, b in auc_pairs],
        "tpr_a": [t[0] for t in tpr_pairs],
        "tpr_b": [t[1] for t in tpr_pairs],
    }


def test_the_membership_reading_is_made_over_training_runs():
    """Issue 38: five runs are five observations (a t test over them, the between-run SD beside it); strata where
    both arms sit at the ceiling read as uninformative; a TPR margin must hold as well as the AUC's."""
    from goldfish.eval.stats import replicate_tost
    from goldfish.experiment.sections.membership import _run_level

    aucs = [(0.95, 0.96), (0.94, 0.95), (0.96, 0.965), (0.95, 0.955), (0.945, 0.96)]
    close_tpr = [(0.60, 0.62), (0.58, 0.61), (0.61, 0.63), (0.60, 0.60), (0.59, 0.62)]
    read = _run_level(_stratum(aucs, close_tpr), 0.05, 0.10)
    assert read["runs"] == replicate_tost([a - b for a, b in aucs], 0.05) and read["verdict"] == "equivalent"
    assert read["tpr_runs"]["mean"] == pytest.approx(-0.02)
    far_tpr = [(0.28, 0.47), (0.30, 0.45), (0.25, 0.50), (0.31, 0.44), (0.27, 0.49)]  # the x1 drop of issue 38
    assert _run_level(_stratum(aucs, far_tpr), 0.05, 0.10)["verdict"] == "not shown"
    assert _run_level(_stratum(aucs, far_tpr), 0.05, 0.0)["verdict"] == "equivalent"  # an AUC margin alone
    missing = [(None, None)] * 5  # too few nonmembers for TPR at 1 % FPR: a TPR margin cannot be shown
    assert _run_level(_stratum(aucs, missing), 0.05, 0.10)["verdict"] == "not shown"
    ceiling = [(0.999, 1.0)] * 4 + [(0.995, 0.998)]
    assert _run_level(_stratum(ceiling, close_tpr), 0.05, 0.10)["verdict"] == "uninformative (ceiling)"
    assert _run_level(_stratum(aucs[:1], close_tpr[:1]), 0.05, 0.10)["verdict"] == "one run"
