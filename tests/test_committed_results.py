"""The committed studies (experiments/results/<config>/) are what this code renders from their results.json, and
their readings follow from the numbers by the verdict rule -- checked here against hand computations."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import t as student_t

from goldfish.experiment.rerender import main, read_results, rendered
from goldfish.experiment.sections.readings import derive, strongest
from goldfish.experiment.sections.readings import render as render_readings
from goldfish.experiment.summary import cells_of

RESULTS = Path(__file__).resolve().parent.parent / "experiments" / "results"
SEEDS = range(10)  # standard_setting's rerun: ten seeds per arm (experiments/standard_setting.yaml)
POWER = {"tpr_at_1pct_fpr": 0.9955, "tpr_at_0_1pct_fpr": 0.911}  # experiments/power/standard_setting_tpr.json's choice
STUDIES = sorted(p.name for p in RESULTS.iterdir() if p.is_dir())


@pytest.mark.parametrize("study", STUDIES)
def test_report_and_summary_are_rendered_from_results_json(study):
    for name, text in rendered(RESULTS / study).items():
        assert (RESULTS / study / name).read_text(encoding="utf-8") == text, (
            f"experiments/results/{study}/{name} is not what this code renders from its results.json: run "
            f"`make docs` (python -m goldfish.experiment.rerender experiments/results/*/) and commit"
        )


def test_the_report_glossary_is_current():
    from goldfish.experiment.glossary import GLOSSARY, markdown
    from goldfish.experiment.report import render  # noqa: F401  (every section registers its definitions)

    assert {"headline table", "leakage audit", "paired tests", "mask baseline", "readings"} <= set(GLOSSARY)
    doc = RESULTS.parent.parent / "docs" / "report-glossary.md"
    assert doc.read_text(encoding="utf-8") == markdown(), "run `make docs` and commit docs/report-glossary.md"
    # a report names its terms and no longer repeats them
    report = (RESULTS / "default" / "report.md").read_text(encoding="utf-8")
    assert "Definitions: *headline table*, *headline details* (docs/report-glossary.md)" in report
    assert GLOSSARY["headline table"] not in report


def test_check_mode_names_a_stale_file(tmp_path, capsys):
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "results.json").write_bytes((RESULTS / "default" / "results.json").read_bytes())
    (folder / "report.md").write_text("# edited by hand\n", encoding="utf-8")
    assert main([str(folder), "--check"]) == 1 and "differs" in capsys.readouterr().out
    assert main([str(folder)]) == 0 and main([str(folder), "--check"]) == 0


def _by_hand(diffs):
    d = np.asarray(diffs, float)
    se = d.std(ddof=1) / np.sqrt(len(d))
    q95, q90 = student_t.ppf(0.975, len(d) - 1), student_t.ppf(0.95, len(d) - 1)
    return d.mean(), d.mean() - q95 * se, d.mean() + q95 * se, d.mean() - q90 * se, d.mean() + q90 * se


def _summaries_by_seed(results: dict, arm: str) -> dict:
    """An arm's typed cell summaries by seed (`_by_seed`: the raw dicts the synthetic tests edit)."""
    return {int(c.values["seed"]): c for c in cells_of(results) if c.arm == arm}


def test_membership_is_read_on_each_arms_strongest_attack():
    # standard_setting's rerun: every arm's attacks with AUC and both TPRs over 1,000 nonmembers; each arm read on its
    # strongest attack (by mean AUC), the differences paired by seed, each against the margin stated before the run
    results = read_results(RESULTS / "standard_setting")
    g, st = _summaries_by_seed(results, "goldfish_k4"), _summaries_by_seed(results, "standard")
    assert sorted(g) == sorted(st) == list(SEEDS)
    assert all(c.nonmembers >= 1000 and c.mia_tprs for c in [*g.values(), *st.values()])
    for runs, expected in ((g, "kept_reference"), (st, "reference")):  # Goldfish's is the mask-aware attack
        mean_auc = {a: np.mean([c.mia_aucs[a] for c in runs.values()]) for a in runs[0].mia_aucs}
        assert strongest(runs) == max(mean_auc, key=mean_auc.get) == expected
    readings = {x["question"]: x for x in derive(results)}
    for question, value, margin, key in (
        ("membership AUC", lambda c, a: c.mia_aucs[a], 0.05, None),
        ("membership TPR at 1 % FPR", lambda c, a: c.mia_tprs[a]["tpr_at_1pct_fpr"], 0.10, "tpr_at_1pct_fpr"),
        ("membership TPR at 0.1 % FPR", lambda c, a: c.mia_tprs[a]["tpr_at_0_1pct_fpr"], 0.10, "tpr_at_0_1pct_fpr"),
    ):
        diffs = [value(g[s], "kept_reference") - value(st[s], "reference") for s in SEEDS]
        mean, lo, hi, lo90, hi90 = _by_hand(diffs)
        r = readings[question]
        assert r["n"] == len(SEEDS) and r["margin"] == margin and r["estimate"] == pytest.approx(mean)
        assert (r["ci_low"], r["ci_high"]) == pytest.approx((lo, hi))
        assert (r["ci90_low"], r["ci90_high"]) == pytest.approx((lo90, hi90))
        assert r["word"] == ("equivalent" if -margin < lo90 and hi90 < margin else "not shown")
        if key:
            assert r["note"] == f"power {POWER[key]:.3g} at a true difference of 0 (stated before the run)"


def test_the_leak_reading_is_decided_after_its_placebo():
    results = read_results(RESULTS / "standard_setting")
    g = _summaries_by_seed(results, "goldfish_k4").values()
    _, plo, phi, _, _ = _by_hand([c.leakage["placebo"]["accuracy"]["did"] for c in g])
    _, lo, hi, _, _ = _by_hand([c.leakage["did"]["dropped"]["accuracy"]["did"] for c in g])
    leak = next(x for x in derive(results) if x["question"].startswith("leak on dropped"))
    if phi < 0 or plo > 0:  # a placebo whose interval excludes 0: the held-out text is no valid reference
        assert leak["word"] == "inconclusive"
    else:
        assert leak["word"] == ("leak detected" if lo > 0 else "below the null" if hi < 0 else "none detected")
    assert (leak["ci_low"], leak["ci_high"]) == pytest.approx((lo, hi))


def test_each_tpr_is_checked_where_another_attack_is_an_arms_best_at_that_fpr():
    results = read_results(RESULTS / "standard_setting")
    g, st = _summaries_by_seed(results, "goldfish_k4"), _summaries_by_seed(results, "standard")
    readings = {x["question"]: x for x in derive(results)}
    for key, label in (("tpr_at_1pct_fpr", "1 %"), ("tpr_at_0_1pct_fpr", "0.1 %")):
        best = []
        for runs in (g, st):
            values = {a: [c.mia_tprs[a][key] for c in runs.values()] for a in runs[0].mia_tprs}
            mean = {a: np.mean(v) for a, v in values.items() if None not in v}  # recall has no 0.1 % TPR
            best.append(max(mean, key=mean.get))
        check = readings.get(f"membership TPR at {label} FPR, each arm's strongest at it")
        if best == ["kept_reference", "reference"]:
            assert check is None
            continue
        diffs = [g[s].mia_tprs[best[0]][key] - st[s].mia_tprs[best[1]][key] for s in SEEDS]
        mean, lo, hi, lo90, hi90 = _by_hand(diffs)
        assert check["estimate"] == pytest.approx(mean) and (check["ci_low"], check["ci_high"]) == pytest.approx(
            (lo, hi)
        )
        assert check["word"] == ("equivalent" if -0.10 < lo90 and hi90 < 0.10 else "not shown")
        assert f"goldfish_k4 {best[0]} " in check["attack"] and f"standard {best[1]} " in check["attack"]


def test_positive_controls_are_read_against_the_twin():
    results = read_results(RESULTS / "leakage_audit")
    cells = cells_of(results)
    did = {(c.arm, int(c.values["seed"])): c.leakage["did"]["dropped"]["accuracy"]["did"] for c in cells if c.leakage}
    words = {x["a"]: x["word"] for x in derive(results) if x["question"] == "positive control against the same twin"}
    for arm in ("supervised_5pct", "supervised_10pct", "supervised_25pct"):
        _, lo, hi, _, _ = _by_hand([did[(arm, s)] - did[("goldfish_twin", s)] for s in range(5)])
        assert words[arm] == ("detected" if lo > 0 else "not detected")
    assert words["supervised_25pct"] == "detected" and words["supervised_5pct"] == "not detected"


def test_the_exchangeable_value_test_is_read_against_its_exact_null():
    # leakage_audit's cells with a value test added by hand: Goldfish's ranks scatter around 0.5, the positive
    # control's and the standard arm's lie above it
    results = read_results(RESULTS / "leakage_audit")
    ranks = {
        "goldfish": [0.51, 0.49, 0.50, 0.52, 0.50],
        "supervised_25pct": [0.60, 0.62, 0.58, 0.61, 0.63],
        "standard": [0.95, 0.97, 0.96, 0.94, 0.98],
    }
    for cell in results["cells"]:
        if cell["arm"] in ranks:
            rank = ranks[cell["arm"]][int(cell["seed"])]
            mask = {"arm": "goldfish", "k": 4, "h": 13, "strategy": "hash", "seed": 0}
            foreign = {"mean_rank": rank - 0.01 * int(cell["seed"]), "positions": 80}
            cell["value_audit"] = {
                "mask": mask,
                "null_rank": 0.5,
                "dropped": {"mean_rank": rank, "positions": 90},
                "foreign_dropped": foreign,
            }
    readings = derive(results)
    place = [x for x in readings if x["question"].startswith("of which in place")]
    assert [x["a"] for x in place] == ["goldfish"]  # the leak; the others as positive controls in place
    controls = [x for x in readings if x["question"].startswith("positive control in place")]
    assert [x["a"] for x in controls] == ["supervised_25pct", "standard"]
    assert all(x["estimate"] == pytest.approx(place[0]["estimate"]) for x in controls)  # the same construction
    mean, lo, hi, _, _ = _by_hand([0.01 * s for s in range(5)])  # own - foreign, by construction
    assert place[0]["estimate"] == pytest.approx(mean) and place[0]["ci_low"] == pytest.approx(lo)
    found = {x["a"]: x for x in readings if "exact null" in x["question"] or "canary tokens" in x["question"]}
    assert set(found) == set(ranks)  # the arms without a value test give no reading
    for arm, values in ranks.items():
        mean, lo, hi, _, _ = _by_hand([v - 0.5 for v in values])
        r = found[arm]
        assert r["estimate"] == pytest.approx(mean) and (r["ci_low"], r["ci_high"]) == pytest.approx((lo, hi))
    assert found["goldfish"]["word"] == "none detected" and "MDE" in found["goldfish"]["note"]
    assert found["supervised_25pct"]["word"] == found["standard"]["word"] == "detected"
    assert found["goldfish"]["question"].startswith("leak on dropped canary tokens")


def _given_tprs(nonmembers: int, seed: int, one: tuple, point_one: tuple) -> dict:
    """standard_setting's committed results given what the rerun stores: ``nonmembers`` per cell and every attack's
    TPR at 1 % and 0.1 % FPR, drawn uniformly from the ranges ``one`` and ``point_one``."""
    results = copy.deepcopy(read_results(RESULTS / "standard_setting"))
    rng = np.random.default_rng(seed)
    for c in results["cells"]:
        c["nonmembers"] = nonmembers
        c["mia_tprs"] = {
            a: {"tpr_at_1pct_fpr": float(rng.uniform(*one)), "tpr_at_0_1pct_fpr": float(rng.uniform(*point_one))}
            for a in c["mia_aucs"]
        }
    return results


def _by_seed(results: dict, arm: str) -> dict[int, dict]:
    return {int(c["seed"]): c for c in results["cells"] if c["arm"] == arm}


def test_tpr_at_both_fprs_is_read_against_the_stated_margin_with_its_stated_power():
    # the config's power given too: both TPR readings are two one-sided tests at tpr_margin, each quoting its power
    results = _given_tprs(1000, 0, (0.3, 0.6), (0.1, 0.3))
    results["config"]["equivalence"]["power"] = {"tpr_at_1pct_fpr": 0.9955, "tpr_at_0_1pct_fpr": 0.911}
    g, st = _by_seed(results, "goldfish_k4"), _by_seed(results, "standard")
    for key, label, power in (("tpr_at_1pct_fpr", "1 %", "0.9955"), ("tpr_at_0_1pct_fpr", "0.1 %", "0.911")):
        diffs = [g[s]["mia_tprs"]["kept_reference"][key] - st[s]["mia_tprs"]["reference"][key] for s in g]
        mean, lo, hi, lo90, hi90 = _by_hand(diffs)
        r = next(x for x in derive(results) if x["question"] == f"membership TPR at {label} FPR")
        assert r["estimate"] == pytest.approx(mean) and r["margin"] == 0.10
        assert r["ci90_low"] == pytest.approx(lo90) and r["ci90_high"] == pytest.approx(hi90)
        inside = -0.10 < lo90 and hi90 < 0.10
        assert r["word"] == ("equivalent" if inside else "not shown")
        assert r["note"] == f"power {float(power):.3g} at a true difference of 0 (stated before the run)"


def test_every_attack_is_tabulated_over_runs_with_the_best_of_each_column_marked():
    # with 500 nonmembers: each attack's row is its mean over runs with the t interval (by hand), the highest mean of
    # each column in bold, the readings' attack marked, and TPR at 0.1 % FPR (unresolved by 500) left out
    from goldfish.experiment.sections import mia_over_runs

    results = _given_tprs(500, 1, (0.1, 0.9), (0.1, 0.9))
    text = mia_over_runs.render(results)
    assert "TPR at 1 % FPR" in text and "TPR at 0.1 % FPR" not in text
    rows = {
        tuple(x.strip() for x in line.split("|")[2:4]): line for line in text.splitlines() if "| goldfish_k4 |" in line
    }
    g = list(_by_seed(results, "goldfish_k4").values())
    names = list(g[0]["mia_aucs"])
    means = {a: np.mean([c["mia_tprs"][a]["tpr_at_1pct_fpr"] for c in g]) for a in names}
    for a in names:
        mean, lo, hi, _, _ = _by_hand([c["mia_tprs"][a]["tpr_at_1pct_fpr"] for c in g])
        entry = f"{100 * mean:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"
        line = rows[("goldfish_k4", f"{a} (read)" if a == "kept_reference" else a)]
        best = a == max(means, key=means.get)
        assert (f"| **{entry}** |" if best else f"| {entry} |") in line
    assert len(rows) == len(names) and "**" in rows[("goldfish_k4", "kept_reference (read)")].split("|")[5]


def test_a_tpr_is_checked_on_each_arms_strongest_attack_at_that_fpr():
    # min_k_20 made every arm's best at 1 % FPR and the AUC-strongest attacks (kept_reference, reference) the best at
    # 0.1 %: one check reading, at 1 % only, by hand
    results = _given_tprs(1000, 2, (0.2, 0.4), (0.1, 0.2))
    for c in results["cells"]:
        c["mia_tprs"]["min_k_20"]["tpr_at_1pct_fpr"] += 0.3 + 0.01 * int(c["seed"])
        c["mia_tprs"]["kept_reference" if c["arm"] == "goldfish_k4" else "reference"]["tpr_at_0_1pct_fpr"] += 0.3
    checks = [x for x in derive(results) if x["question"].endswith("each arm's strongest at it")]
    assert [x["question"] for x in checks] == ["membership TPR at 1 % FPR, each arm's strongest at it"]
    g, st = _by_seed(results, "goldfish_k4"), _by_seed(results, "standard")
    diffs = [
        g[s]["mia_tprs"]["min_k_20"]["tpr_at_1pct_fpr"] - st[s]["mia_tprs"]["min_k_20"]["tpr_at_1pct_fpr"] for s in g
    ]
    mean, lo, hi, lo90, hi90 = _by_hand(diffs)
    r = checks[0]
    assert r["estimate"] == pytest.approx(mean) and (r["ci_low"], r["ci_high"]) == pytest.approx((lo, hi))
    assert (r["ci90_low"], r["ci90_high"]) == pytest.approx((lo90, hi90)) and r["margin"] == 0.10
    assert r["word"] == ("equivalent" if -0.10 < lo90 and hi90 < 0.10 else "not shown")
    assert "goldfish_k4 min_k_20" in r["attack"] and "standard min_k_20" in r["attack"]
    assert "chosen after the run" in r["note"]
    # the report's table: a TPR row read on the AUC row's attacks says "as above", the check row names its own
    rows = {line.split("|")[1].strip(): line for line in render_readings(results).splitlines() if line.startswith("|")}
    assert "attack: as above" in rows["membership TPR at 1 % FPR"]
    assert f"attack: {r['attack']} |" in rows["membership TPR at 1 % FPR, each arm's strongest at it"]
