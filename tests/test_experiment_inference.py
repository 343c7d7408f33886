"""The study report's exact statistics and paired tests between arms (goldfish.experiment.inference), on constructed
cells where the answer is known by hand or by a brute-force second implementation; the paper's ROUGE-L as the
headline and the control's wording."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from tolerances import U64, rounding

from goldfish.experiment.inference import arm_pairs, cell_statistics, compare, paired_tests
from goldfish.experiment.sections.headline import auc_text, details_table, headline_table, regime, tpr_text
from goldfish.experiment.sections.paired import paired_markdown
from goldfish.experiment.sections.paper import paper_table
from goldfish.experiment.summary import CellSummary


def _permutation_p(members: list[float], nonmembers: list[float]) -> float:
    """Brute force: the share of all C(m + n, m) labellings of the pooled scores with an AUC >= the observed one."""
    pooled, m = members + nonmembers, len(members)

    def auc(mem, non):
        return sum((a > b) + 0.5 * (a == b) for a in mem for b in non) / (len(mem) * len(non))

    observed = auc(members, nonmembers)
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), m):
        rest = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        hits += auc([pooled[i] for i in chosen], rest) >= observed - 1e-12
        total += 1
    return hits / total


def _window(doc: str, sha: str, exact: bool, rouge: float, tokens: float) -> dict:
    return {
        "doc_id": doc,
        "sha256": sha,
        "split": "members",
        "exact_match": exact,
        "rouge_l_paper": rouge,
        "rouge_l": tokens,
    }


def test_cell_statistics_give_the_exact_p_value_and_withhold_tpr_below_100_nonmembers():
    # perfect separation of 3 members from 4 nonmembers: p = 1 / C(7, 3) = 1/35, which brute force confirms
    scores = {"members": [5.0, 6.0, 7.0], "nonmembers": [1.0, 2.0, 3.0, 4.0]}
    windows = [
        _window("a", "1", True, 1.0, 1.0),
        _window("a", "2", True, 1.0, 1.0),  # two prefix lengths of doc a
        _window("b", "3", False, 0.5, 0.4),
        {"doc_id": "z", "split": "nonmembers", "exact_match": True},
    ]
    out = cell_statistics(scores, windows)
    p = out["mia_auc_p"]
    assert p["method"] == "perfect" and p["auc"] == 1.0
    # 10 ** (-log10 35): log10 rounds once (u), and exp10 turns its absolute error into a relative one times ln 10,
    # plus its own rounding: under 4 u (1 / 35 in the brute force: one division)
    power = rounding(2, U64) * (1 + math.log(10) * math.log10(35))
    assert p["p_value"] == pytest.approx(1 / math.comb(7, 3), rel=power)
    assert p["p_value"] == pytest.approx(_permutation_p(scores["members"], scores["nonmembers"]), rel=power)
    assert out["mia_tpr_at_1pct_fpr"] is None and "needs >= 100 nonmembers (has 4)" in out["mia_tpr_at_1pct_fpr_note"]
    # the member windows only; two windows of document a form one cluster
    em = out["extraction_ci"]["exact_match"]
    assert em["mean"] == 2 / 3 and em["n_items"] == 3 and em["n_clusters"] == 2
    # resampling the 2 documents: a bootstrap sample is {a, a} (rate 1), {b, b} (rate 0) or {a, b} (rate 2/3)
    assert em["ci_low"] == 0.0 and em["ci_high"] == 1.0
    assert em["method"] == "cluster bootstrap"
    # a mean of 3 values below 1: two additions and a division, each within half an ulp of a number below 3
    assert out["extraction_ci"]["rouge_l_paper"]["mean"] == pytest.approx(2.5 / 3, abs=4 * 2.0**-53)
    # a rate of 0 resamples to 0 every time: Wilson's interval instead, over the windows with one per document and
    # over the documents when they are pooled; for 0 of n its upper end is z^2 / (n + z^2) in closed form
    z2 = 1.96**2
    none = [_window(f"d{i}", str(i), False, 0.2, 0.2) for i in range(20)]
    em = cell_statistics(None, none)["extraction_ci"]["exact_match"]
    assert (em["method"], em["ci_low"]) == ("wilson", 0.0)
    assert em["ci_high"] == pytest.approx(z2 / (20 + z2), rel=rounding(8, U64))  # Wilson's ~8 float64 operations
    pooled = [_window(f"d{i % 5}", str(i), False, 0.2, 0.2) for i in range(10)]  # 2 windows of each of 5 documents
    em = cell_statistics(None, pooled)["extraction_ci"]["exact_match"]
    assert (em["method"], em["ci_low"]) == ("wilson over documents", 0.0)
    assert em["ci_high"] == pytest.approx(z2 / (5 + z2), rel=rounding(8, U64))
    # a tie-free overlap: the exact Mann-Whitney p-value equals brute force
    scores = {"members": [2.5, 6.0, 7.0], "nonmembers": [1.0, 2.0, 3.0, 4.0]}
    p = cell_statistics(scores, [])["mia_auc_p"]
    # scipy sums the exact null probabilities of U (<= 35 labellings' worth of terms), the brute force counts them
    assert p["method"] == "exact"
    assert p["p_value"] == pytest.approx(_permutation_p(*scores.values()), rel=rounding(35, U64))
    # with 100 nonmembers the TPR is shown: one false positive allowed, members above the 2nd-highest nonmember
    nonmembers = list(np.arange(100.0))
    out = cell_statistics({"members": [98.5, 99.5, 50.0, 200.0], "nonmembers": nonmembers}, [])
    assert out["mia_tpr_at_1pct_fpr"] == 3 / 4 and out["mia_tpr_at_1pct_fpr_note"] is None


def test_the_headline_shows_p_instead_of_a_degenerate_interval_and_the_papers_rouge_first():
    perfect = {
        "auc": 1.0,
        "p_value": 1 / math.comb(70, 20),
        "log10_p": -math.log10(math.comb(70, 20)),
        "method": "perfect",
        "n_members": 20,
        "n_nonmembers": 50,
    }
    cell = {
        "cell": "goldfish",
        "arm": "goldfish",
        "mia_attack": "reference",
        "mia_auc": 1.0,
        "mia_auc_ci_low": 1.0,
        "mia_auc_ci_high": 1.0,
        "mia_auc_p": perfect,
        "mia_tpr_at_1pct_fpr": None,
        "mia_tpr_at_1pct_fpr_note": "needs >= 100 nonmembers (has 50)",
        "exact_match_rate": 0.0,
        "rouge_l_paper": 0.459,
        "rouge_l": 0.488,
        "extraction_ci": {
            "rouge_l_paper": {"mean": 0.459, "ci_low": 0.40, "ci_high": 0.52},
            "rouge_l": {"mean": 0.488, "ci_low": 0.43, "ci_high": 0.55},
        },
    }
    text = auc_text(CellSummary.from_json(cell, []))
    # log10 C(70, 20) = 17.2...: the exact probability, and no "[1.000, 1.000]"
    assert text == "1.000 (p = 10^-17.2, perfect)"
    assert tpr_text(CellSummary.from_json(cell, [])) == "needs >= 100 nonmembers (has 50)"
    other = {**cell, "cell": "standard", "arm": "standard"}
    table = headline_table({"cells": [cell, other], "axes": []})
    header = table.splitlines()[0]
    # at most 8 columns; the attack in the header; the withheld TPR's reason once below, not in every row
    assert header.count("|") - 1 <= 8 and "MIA AUC (reference)" in header and "ROUGE-L (rouge-score)" in header
    assert "| goldfish | 0.0 % | 0.459 [0.400, 0.520] |" in table and table.count("needs >= 100") == 1
    assert "| (a) |" in table and "(a) TPR at 1 % FPR withheld: needs >= 100 nonmembers (has 50)" in table
    assert "| 0.488 [0.430, 0.550] |" in details_table({"cells": [cell], "axes": []})  # token ROUGE-L: details
    overlap = {
        **cell,
        "mia_auc": 0.7,
        "mia_auc_ci_low": 0.55,
        "mia_auc_ci_high": 0.84,
        "mia_auc_p": {"p_value": 0.0042, "method": "exact"},
    }
    assert auc_text(CellSummary.from_json(overlap, [])) == "0.700 [0.550, 0.840] (p 0.0042)"
    mixed = headline_table({"cells": [cell, {**overlap, "cell": "x", "arm": "x", "mia_attack": "loss"}], "axes": []})
    assert "MIA AUC (attack)" in mixed and "(p 0.0042) (loss)" in mixed  # attacks differ: named per row
    # beside the paper: the paper's ROUGE-L against our rouge-score value, token ROUGE-L in its own column
    paper = paper_table({"cells": [cell], "axes": []})
    assert "| goldfish | 0.0 % | 0.0 % | 0.459 | 0.510 | 0.488 |" in paper


def test_the_control_is_not_fine_tuned_on_the_articles_rather_than_untrained():
    text = regime({"start_model": "/x/SmolLM2.gguf", "control_mode": "start"})
    assert "not fine-tuned on the target data" in text and "untrained" not in text


def test_arm_pairs_put_goldfish_against_standard_and_every_arm_against_the_control():
    assert arm_pairs(["standard", "goldfish", "control"]) == [
        ("goldfish", "standard"),
        ("standard", "control"),
        ("goldfish", "control"),
    ]
    assert arm_pairs(["standard", "goldfish"]) == [("goldfish", "standard")]


def _cell(windows: list[dict], members: dict[str, float], nonmembers: dict[str, float]) -> dict:
    return {
        "windows": windows,
        "attacks": {
            "doc_ids": {"members": list(members), "nonmembers": list(nonmembers)},
            "scores": {"loss": {"members": list(members.values()), "nonmembers": list(nonmembers.values())}},
        },
    }


def test_compare_pairs_windows_by_sha256_and_documents_by_id_not_by_position():
    a = _cell(
        [
            _window("d1", "w1", True, 1.0, 1.0),
            _window("d2", "w2", True, 0.9, 0.8),
            _window("d3", "w3", False, 0.5, 0.6),
            _window("d4", "w4", True, 1.0, 1.0),
        ],
        {"d1": 3.0, "d2": 4.0, "d3": 5.0, "d4": 6.0},
        {"n1": 1.0, "n2": 2.0, "n3": 3.5},
    )
    # b: the same windows and documents in another order, plus a window a never evaluated
    b = _cell(
        [
            _window("d4", "w4", False, 0.4, 0.5),
            _window("d3", "w3", False, 0.3, 0.2),
            _window("d2", "w2", True, 0.9, 0.8),
            _window("d1", "w1", False, 0.5, 0.5),
            _window("d9", "w9", True, 1.0, 1.0),
        ],
        {"d4": 1.5, "d3": 2.5, "d2": 0.5, "d1": 3.0},
        {"n3": 1.0, "n1": 2.0, "n2": 4.0},
    )
    out = compare(a, b, "loss")
    assert out["n_windows"] == 4 and out["n_documents"] == 4
    # by hand: a alone exact on w1 and w4, b alone on none: McNemar exact p = 2 * (1/2)^2 = 1/2
    em = out["exact_match"]
    assert (em["a_only"], em["b_only"], em["a_rate"], em["b_rate"]) == (2, 0, 0.75, 0.25)
    assert em["p_value"] == 0.5
    # ROUGE-L a - b on the matched windows: (0.5 + 0 + 0.2 + 0.6) / 4
    assert out["rouge_l_paper"]["diff"] == pytest.approx(1.3 / 4, abs=8 * 2.0**-53)
    assert out["rouge_l"]["diff"] == pytest.approx((0.5 + 0.0 + 0.4 + 0.5) / 4, abs=8 * 2.0**-53)
    # AUCs by hand on the documents matched by id. a: members 3, 4, 5, 6 vs 1, 2, 3.5 -> 11 of 12 pairs (3 < 3.5;
    # no ties); b: members d1..d4 = 3.0, 0.5, 2.5, 1.5 vs n1..n3 = 2.0, 4.0, 1.0 -> 5 of 12
    auc = out["auc"]
    assert auc["attack"] == "loss"
    # an AUC is an integer count over 12 pairs: one division, half an ulp of a value below 1; the difference of
    # two such quotients adds one more rounding, so 2^-52 bounds each
    assert auc["a"] == pytest.approx(11 / 12, abs=2.0**-52) and auc["b"] == pytest.approx(5 / 12, abs=2.0**-52)
    assert auc["diff"] == pytest.approx(6 / 12, abs=2.0**-52)
    assert auc["ci_low"] <= auc["diff"] <= auc["ci_high"]
    # without per-document scores (an attacks.json of older code): no AUC difference, the rest stands
    assert compare({**a, "attacks": {}}, b, "loss")["auc"] is None


def test_paired_tests_stay_inside_a_grid_point_and_render(tmp_path):
    from goldfish.experiment.grid import Cell
    from goldfish.experiment.plan import CellFolder

    class Plan(CellFolder):
        def __init__(self, cell_id: str, arm: str, seed: int):
            super().__init__(tmp_path / cell_id)
            self.cell, self.data_dir = Cell(cell_id, arm, {"seed": seed}, {}), tmp_path / "d"

    plans = []
    for seed in (0, 1):
        for arm, exact in (("standard", True), ("goldfish", False), ("control", False)):
            plan = Plan(f"{arm}__seed={seed}", arm, seed)
            plan.eval_dir.mkdir(parents=True)
            windows = [_window(f"d{i}", f"s{seed}w{i}", exact, 1.0 if exact else 0.5, 1.0) for i in range(3)]
            plan.results_file.write_text(json.dumps({"windows": windows}))
            plans.append(plan)
    paired = paired_tests(plans, ["loss"] * len(plans), ["seed"])
    assert [(t["a"], t["b"], t["seed"]) for t in paired] == [
        (a, b, s)
        for s in (0, 1)
        for a, b in (("goldfish", "standard"), ("standard", "control"), ("goldfish", "control"))
    ]
    first = paired[0]
    assert first["n_windows"] == 3 and first["exact_match"]["b_only"] == 3 and first["auc"] is None
    assert first["exact_match"]["p_value"] == 0.25  # 2 * (1/2)^3
    assert first["rouge_l_paper"]["diff"] == -0.5
    text = "\n".join(paired_markdown(paired, ["seed"]))
    assert "## Paired tests between arms" in text
    assert "| goldfish vs standard (seed=0) | 3 (3) | 0.0 % / 100.0 %; 0 vs 3 discordant (p 0.25) |" in text


def test_an_axis_tuned_per_the_compared_axis_pairs_each_size_with_the_reference_at_its_own_chosen_value(tmp_path):
    """size_sweep.yaml tunes lr per size and compares sizes: size=big ran its arms at lr=a, size=small at lr=b.
    With lr free, each big cell is paired with the small cell of the same arm and seed (lr ignored); the controls,
    including small's tuning cell at lr=a, never take part. By hand: 5 windows of 5 documents in stratum 16, big
    verbatim on d0-d3 and small on d3 only: discordant 3 vs 0, McNemar p = 2 x (1/2)^3 = 0.25. Without ``free``
    (lr matched) no pair exists."""
    from goldfish.experiment.grid import Cell
    from goldfish.experiment.inference import axis_tests
    from goldfish.experiment.plan import CellFolder

    class Plan(CellFolder):
        def __init__(self, arm, size, lr):
            super().__init__(tmp_path / f"{arm}_{size}_{lr}")
            self.cell = Cell(self.dir.name, arm, {"size": size, "lr": lr, "seed": "0"}, {})

    def cell(arm, size, lr, exact_docs):
        plan = Plan(arm, size, lr)
        plan.eval_dir.mkdir(parents=True)
        windows = [
            {
                **_window(f"d{i}", f"s{i}", f"d{i}" in exact_docs, 1.0 if f"d{i}" in exact_docs else 0.5, 0.5),
                "repetitions": 16,
            }
            for i in range(5)
        ]
        plan.results_file.write_text(json.dumps({"windows": windows}))
        return plan

    plans = [
        cell("standard", "big", "a", {"d0", "d1", "d2", "d3"}),
        cell("standard", "small", "b", {"d3"}),
        cell("control", "small", "a", {"d0", "d1", "d2", "d3", "d4"}),
        cell("control", "big", "a", set()),
        cell("control", "small", "b", set()),
    ]
    tests = axis_tests(plans, ["size", "lr", "seed"], "size", "small", pool=["seed"], free=["lr"])
    assert [(t["arm"], t["value"], t["repetitions"]) for t in tests] == [
        ("standard", "big", 16),
        ("standard", "big", "all"),
    ]
    t = tests[0]
    assert t["cells"] == [["standard_big_a", "standard_small_b"]] and (t["n_windows"], t["n_documents"]) == (5, 5)
    assert (t["exact_match"]["a_only"], t["exact_match"]["b_only"]) == (3, 0)
    assert t["exact_match"]["p_value"] == pytest.approx(0.25, abs=U64)
    assert "lr" not in t  # the free axis is not a column of the record
    assert axis_tests(plans, ["size", "lr", "seed"], "size", "small", pool=["seed"]) == []


def test_windows_of_one_document_are_tested_as_one_document():
    # the case: 4 documents with two placements each, a verbatim on all 8 windows and b on none; McNemar
    # over windows said p = 2 / 2^8 = 0.0078, over documents it is 2 / 2^4 = 0.125 (binomial tails from Boost:
    # see tests/test_eval_stats.py)
    a = {"windows": [_window(f"d{i // 2}", f"s{i}", True, 1.0, 1.0) for i in range(8)], "attacks": {}}
    b = {"windows": [_window(f"d{i // 2}", f"s{i}", False, 0.5, 0.5) for i in range(8)], "attacks": {}}
    found = compare(a, b, "loss")
    em = found["exact_match"]
    assert (found["n_windows"], found["n_documents"]) == (8, 4)
    assert (em["a_only"], em["a_only_documents"], em["b_only_documents"]) == (8, 4, 0)
    assert em["p_value"] == pytest.approx(0.125, abs=1e-12) and em["test"] == "document sign test"
    text = "\n".join(paired_markdown([{"a": "standard", "b": "goldfish", **found}], []))
    assert "4 vs 0 discordant documents (8 vs 0 windows; p 0.125)" in text
