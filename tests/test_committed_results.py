"""The committed studies (experiments/results/<config>/) are what this code renders from their results.json, and
their readings follow from the numbers by the verdict rule -- checked here against hand computations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import t as student_t

from goldfish.experiment.rerender import main, read_results, rendered
from goldfish.experiment.sections.readings import derive, strongest
from goldfish.experiment.summary import cells_of

RESULTS = Path(__file__).resolve().parent.parent / "experiments" / "results"
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


def test_membership_is_read_on_each_arms_strongest_attack():
    results = read_results(RESULTS / "standard_setting")
    cells = {c.cell: c for c in cells_of(results)}
    seeds = range(5)
    g = {s: cells[f"goldfish_k4__seed={s}"] for s in seeds}
    st = {s: cells[f"standard__seed={s}"] for s in seeds}
    mean_auc = {a: np.mean([g[s].mia_aucs[a] for s in seeds]) for a in g[0].mia_aucs}
    assert strongest(g) == max(mean_auc, key=mean_auc.get) == "kept_reference"  # the mask-aware attack
    assert strongest(st) == "reference"
    mean, lo, hi, lo90, hi90 = _by_hand([g[s].mia_aucs["kept_reference"] - st[s].mia_aucs["reference"] for s in seeds])
    r = next(x for x in derive(results) if x["question"] == "membership AUC")
    assert r["estimate"] == pytest.approx(mean)
    assert r["ci_low"] == pytest.approx(lo) and r["ci_high"] == pytest.approx(hi)
    # the margin of the config (+-0.05) holds the 90 % interval: equivalent by the rule
    assert -0.05 < lo90 and hi90 < 0.05 and r["word"] == "equivalent"
    tpr = next(x for x in derive(results) if x["question"] == "membership TPR at 1 % FPR")
    assert tpr["word"] == "not tested" and "not stored" in tpr["note"]


def test_a_failed_placebo_makes_the_leak_reading_inconclusive():
    results = read_results(RESULTS / "standard_setting")
    placebo = [c.leakage["placebo"]["accuracy"]["did"] for c in cells_of(results) if c.arm == "goldfish_k4"]
    _, lo, hi, _, _ = _by_hand(placebo)
    leak = next(x for x in derive(results) if x["question"].startswith("leak on dropped"))
    assert (hi < 0 or lo > 0) and leak["word"] == "inconclusive"


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


def test_tpr_at_both_fprs_is_read_against_the_stated_margin_with_its_stated_power():
    # standard_setting's committed cells given what the rerun stores (1,000 nonmembers, every attack's TPRs) and the
    # config's power: both TPR readings are two one-sided tests at tpr_margin, each quoting its stated power
    import copy

    results = copy.deepcopy(read_results(RESULTS / "standard_setting"))
    results["config"]["equivalence"]["power"] = {"tpr_at_1pct_fpr": 0.9955, "tpr_at_0_1pct_fpr": 0.911}
    rng = np.random.default_rng(0)
    made = {}
    for c in results["cells"]:
        c["nonmembers"] = 1000
        c["mia_tprs"] = {
            a: {"tpr_at_1pct_fpr": float(rng.uniform(0.3, 0.6)), "tpr_at_0_1pct_fpr": float(rng.uniform(0.1, 0.3))}
            for a in c["mia_aucs"]
        }
        made[c["cell"]] = c["mia_tprs"]
    seeds = range(5)
    for key, label, power in (("tpr_at_1pct_fpr", "1 %", "0.9955"), ("tpr_at_0_1pct_fpr", "0.1 %", "0.911")):
        diffs = [
            made[f"goldfish_k4__seed={s}"]["kept_reference"][key] - made[f"standard__seed={s}"]["reference"][key]
            for s in seeds
        ]
        mean, lo, hi, lo90, hi90 = _by_hand(diffs)
        r = next(x for x in derive(results) if x["question"] == f"membership TPR at {label} FPR")
        assert r["estimate"] == pytest.approx(mean) and r["margin"] == 0.10
        assert r["ci90_low"] == pytest.approx(lo90) and r["ci90_high"] == pytest.approx(hi90)
        inside = -0.10 < lo90 and hi90 < 0.10
        assert r["word"] == ("equivalent" if inside else "not shown")
        assert r["note"] == f"power {float(power):.3g} at a true difference of 0 (stated before the run)"


def test_every_attack_is_tabulated_over_runs_with_the_best_of_each_column_marked():
    # standard_setting's committed cells given every attack's TPRs and 500 nonmembers: each attack's row is its mean
    # over runs with the t interval (by hand), the highest mean of each column in bold, the readings' attack marked,
    # and TPR at 0.1 % FPR (unresolved by 500 nonmembers) left out
    import copy

    from goldfish.experiment.sections import attacks

    results = copy.deepcopy(read_results(RESULTS / "standard_setting"))
    rng = np.random.default_rng(1)
    for c in results["cells"]:
        c["nonmembers"] = 500
        c["mia_tprs"] = {
            a: {"tpr_at_1pct_fpr": float(rng.uniform(0.1, 0.9)), "tpr_at_0_1pct_fpr": float(rng.uniform(0.1, 0.9))}
            for a in c["mia_aucs"]
        }
    text = attacks.render(results)
    assert "TPR at 1 % FPR" in text and "TPR at 0.1 % FPR" not in text
    rows = {
        tuple(x.strip() for x in line.split("|")[2:4]): line for line in text.splitlines() if "| goldfish_k4 |" in line
    }
    g = [c for c in results["cells"] if c["arm"] == "goldfish_k4"]
    names = list(g[0]["mia_aucs"])
    means = {a: np.mean([c["mia_tprs"][a]["tpr_at_1pct_fpr"] for c in g]) for a in names}
    for a in names:
        mean, lo, hi, _, _ = _by_hand([c["mia_tprs"][a]["tpr_at_1pct_fpr"] for c in g])
        entry = f"{100 * mean:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"
        line = rows[("goldfish_k4", f"{a} (read)" if a == "kept_reference" else a)]
        best = a == max(means, key=means.get)
        assert (f"| **{entry}** |" if best else f"| {entry} |") in line
    assert len(rows) == len(names) and "**" in rows[("goldfish_k4", "kept_reference (read)")].split("|")[5]
