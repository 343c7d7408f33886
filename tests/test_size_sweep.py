"""The Carlini-style size sweep's parts: a tokenizer trained on another corpus (never on a nonmember), the
background-only control data, the control trained on it, the per-size tuning and the scaling analysis -- each
against an independent expectation (a tokenizer trained directly, the rows searched for member tokens, a fake
pipeline whose held-out loss is known, hand-computed Wilson intervals, gaps and regression slopes)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from tolerances import U64, line_fit, rounding

from goldfish.config import from_dict
from goldfish.data import PrepareConfig, load_prepared, prepare
from goldfish.data.tokenizer import train_bpe
from goldfish.errors import ConfigError
from goldfish.eval.stats import wilson_interval
from goldfish.experiment.config import ExperimentConfig
from goldfish.experiment import DONE, plan_cells
from goldfish.experiment.analyses.attacks import ATTACKS
from goldfish.experiment.runner import report_only, run_experiment
from goldfish.experiment.sections.size import tune_lines
from goldfish.experiment.scaling import loss_gaps, size_analysis
from goldfish.experiment.summary import CellSummary
from goldfish.io import atomic_write_json

from test_experiment_runner import Calls, experiment, make_pipeline

WORDS = (
    "river stone light north market garden winter letter silver engine harbor forest paper window "
    "morning voice island bridge valley castle thunder mirror candle meadow planet signal"
).split()
OTHER = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec "
    "romeo sierra tango uniform victor whiskey xray yankee zulu"
).split()


def _corpus(path, words, n, seed):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i in range(n):
            text = " ".join(f"{w}{n}" for w, n in zip(rng.choice(words, 40), rng.integers(0, 10_000, 40)))
            f.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")  # numbered words: no sequence repeats
    return str(path)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    return root, _corpus(root / "main.jsonl", WORDS, 60, 1), _corpus(root / "other.jsonl", OTHER, 30, 2)


def _recipe(corpora, **extra) -> PrepareConfig:
    root, main, other = corpora
    data = {
        "name": "s",
        "source": {"name": "local", "path": main},
        "tokenizer": {"name": "bpe", "vocab_size": 300, "source": {"name": "local", "path": other}},
        "seq_len": 48,
        "packing": "pack",
        "min_tokens": 8,
        "doc_tokens": 16,
        "num_members": 12,
        "repetitions": [1, 3],
        "nonmember_mode": "random_split",
        "num_nonmembers": 8,
        "num_background": 10,
    }
    data.update(extra)
    return from_dict(PrepareConfig, data)


def test_the_tokenizer_is_trained_on_its_own_corpus_only(corpora, tmp_path):
    root, _, other = corpora
    prepared = load_prepared(prepare(_recipe(corpora), tmp_path / "p", progress=False))
    texts = [json.loads(line)["text"] for line in open(other)]
    direct = train_bpe(texts, 300, 0)  # the same trainer on the other corpus alone
    ours = json.loads((prepared.path / "tokenizer" / "tokenizer.json").read_text())
    assert ours["model"]["vocab"] == json.loads(direct.backend_tokenizer.to_str())["model"]["vocab"]
    assert prepared.manifest["stats"]["tokenizer_corpus"] == f"local:{other}"
    with pytest.raises(ConfigError, match="only a trained tokenizer"):
        _recipe(corpora, tokenizer={"name": "gpt2", "source": {"name": "local", "path": other}})


def test_background_only_rows_hold_no_member_and_keep_the_evaluation_splits(corpora, tmp_path):
    full = load_prepared(prepare(_recipe(corpora), tmp_path / "full", progress=False))
    bare = load_prepared(prepare(_recipe(corpora, train_members=False), tmp_path / "bare", progress=False))
    for split in ("members", "nonmembers"):  # the same texts, ids and labels to evaluate on
        assert getattr(full, split).to_pandas().equals(getattr(bare, split).to_pandas())
    assert (full.path / "tokenizer" / "tokenizer.json").read_text() == (
        bare.path / "tokenizer" / "tokenizer.json"
    ).read_text()

    def stream(p):
        cols = p.train.batch(np.arange(len(p.train)))
        return cols["input_ids"][cols["attention_mask"] == 1].tolist()

    def count(s, needle):
        return sum(s[i : i + len(needle)] == needle for i in range(len(s) - len(needle) + 1))

    full_stream, bare_stream = stream(full), stream(bare)
    members = [list(m["input_ids"]) for m in full.members]
    assert [count(full_stream, m) for m in members] == list(full.members["repetitions"])
    assert [count(bare_stream, m) for m in members] == [0] * len(members)
    assert bare.manifest["stats"]["members_trained"] is False
    assert len(bare_stream) < len(full_stream)


# ---------------------------------------------------------------- tuning and the background-trained control


def test_tuning_picks_each_size_value_from_background_controls_then_runs_the_arms_there(tmp_path):
    calls = Calls()
    cfg = experiment(
        tmp_path,
        control=True,
        control_mode="background",
        tune={"axis": "steps", "per": ["model"]},
        grid={"train.model": ["tiny", "big"], "train.steps": [10, 20, 40], "train.seed": [0, 1]},
    )
    run_experiment(cfg, make_pipeline(calls), progress=False)
    out = tmp_path / "exp"
    trained = [t.split("/")[-2] for t in calls.trained]
    tuning = [f"control__model={m}__steps={s}__seed=0" for m in ("tiny", "big") for s in (10, 20, 40)]
    assert trained[:6] == tuning  # the tuning cells first, every one of them trained (none initialised)
    assert calls.initialised == []
    # the fake held-out loss is 3 + |steps - 20| / 10: 20 wins for both sizes; nothing runs at 10 or 40 after that
    assert sorted(trained[6:]) == sorted(
        [
            f"{a}__model={m}__steps=20__seed={s}"
            for m in ("tiny", "big")
            for s in (0, 1)
            for a in ("standard", "goldfish")
        ]
        + [f"control__model={m}__steps=20__seed=1" for m in ("tiny", "big")]
    )
    assert len(trained) == 6 + 10
    results = json.loads((out / "results.json").read_text())
    assert [(g["per"], g["chosen"]) for g in results["tune"]["groups"]] == [
        ({"model": "tiny"}, 20),
        ({"model": "big"}, 20),
    ]
    assert results["tune"]["groups"][0]["losses"] == {"10": 4.0, "20": 3.0, "40": 5.0}
    assert results["missing"] == [] and results["n_cells"] == 16
    # --report-only writes what the full run wrote at its end: the same cells counted, the same tuning block
    study = ("results.json", "results.csv", "summary.json", "report.md", "experiment.yaml")
    written = {name: (out / name).read_bytes() for name in study}
    for name in study:
        (out / name).unlink()
    pipeline = make_pipeline(Calls())
    report_only(cfg, plan_cells(cfg, pipeline), pipeline)
    assert {name: (out / name).read_bytes() for name in study} == written
    # the control trained on the background-only data, and was evaluated on the arms' data
    control = json.loads(
        (out / "cells" / "control__model=big__steps=20__seed=1" / "train" / "fake_config.json").read_text()
    )
    cell = out / "cells" / "standard__model=big__steps=20__seed=1"
    arm = json.loads((cell / "train" / "fake_config.json").read_text())
    assert control["data"] != arm["data"]
    assert (
        json.loads((out / "prepared" / control["data"].rsplit("/", 1)[-1] / "cfg.json").read_text())["train_members"]
        is False
    )
    evals = [e for e in calls.evaluated if "control__model=big__steps=20__seed=1" in e]
    assert (
        evals
        and (out / "cells" / "control__model=big__steps=20__seed=1" / "eval_config.yaml").read_text().count(arm["data"])
        == 1
    )


def test_control_data_gives_the_background_control_its_own_data_keys(tmp_path):
    # e.g. more background, so the control reads as many tokens as the arms (which also read the targets)
    # (the fake pipeline's data config has seq_len and num_members: a longer stream stands in for more background)
    cfg = experiment(
        tmp_path,
        control=True,
        control_mode="background",
        control_data={"num_members": 7},
        grid={"train.model": ["tiny"]},
    )
    plans = {p.cell.arm: p for p in plan_cells(cfg, make_pipeline(Calls()))}
    control_data, _ = plans["control"].train_data
    assert (control_data.train_members, control_data.num_members) == (False, 7)
    assert plans["standard"].prepare_cfg.num_members != 7 and plans["standard"].train_data is None
    assert plans["control"].prepare_cfg == plans["standard"].prepare_cfg  # evaluated on the arms' data
    with pytest.raises(ConfigError, match="control_data sets the data of a control trained on the background"):
        experiment(tmp_path, control=True, control_data={"num_members": 7})


def test_tune_config_errors_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="tune.axis='lr' is not a grid axis"):
        experiment(tmp_path, control=True, tune={"axis": "lr"})
    with pytest.raises(ConfigError, match="set control: true"):
        experiment(tmp_path, control=False, tune={"axis": "model"})
    with pytest.raises(ConfigError, match=r"tune.per=\['arms'\] must name other grid axes .* or arm"):
        experiment(tmp_path, control=True, tune={"axis": "model", "per": ["arms"]})
    with pytest.raises(ConfigError, match=r"tune.per=\['seed'\]"):
        experiment(tmp_path, control=True, tune={"axis": "model", "per": ["seed"]})


def test_the_shipped_size_sweep_measures_the_exposure_threshold_over_a_decade_and_a_half():
    import math

    from goldfish.config import load_config
    from goldfish.models import llama_config
    from goldfish.train_config import ModelConfig

    cfg = load_config(ExperimentConfig, "experiments/size_sweep.yaml")
    assert cfg.control_mode == "background" and cfg.tune.axis == "lr" and cfg.tune.per == ["size", "arm"]
    assert cfg.tune.by == "validation_loss"  # never the nonmembers the membership test reports on
    assert len(cfg.grid["seed"]) >= 5 and cfg.train["schedule"]["epochs"] == 1  # issue 38: runs are the unit
    from goldfish.config import from_dict
    from goldfish.experiment.config import load_data_recipe

    recipe = from_dict(PrepareConfig, load_data_recipe(cfg))  # the recipe with the experiment's data section
    assert recipe.num_validation >= 50 and recipe.num_members // len(recipe.repetitions) >= 8
    # strata between x16 and x64 (the first run's E50s lay there, between two separated strata) and on both sides
    reps = recipe.repetitions
    assert len([r for r in reps if 16 < r < 64]) >= 2 and min(reps) <= 4 and max(reps) >= 128
    # canaries below the targets' strata (a dose-response where targets floor), ranked exactly: |R| enumerable
    canaries = recipe.canaries
    assert sorted(set(canaries.repetitions)) == [1, 2, 4, 8] and canaries.count >= 8 * len(canaries.repetitions)
    assert (recipe.tokenizer.vocab_size - 1) ** canaries.secret_tokens <= cfg.eval["canaries"]["max_full"]
    names = [item["train.model.name"] for item in cfg.grid["size"]]

    def params(name: str) -> int:
        c = llama_config(ModelConfig(name=name), recipe.tokenizer.vocab_size)
        layer = 4 * c.hidden_size**2 + 3 * c.hidden_size * c.intermediate_size + 2 * c.hidden_size
        heads = 1 if c.tie_word_embeddings else 2
        return c.num_hidden_layers * layer + heads * c.vocab_size * c.hidden_size + c.hidden_size

    assert math.log10(params(names[-1]) / params(names[0])) >= 1.5  # 0.92 M -> 44.9 M: 1.69 decades


# ---------------------------------------------------------------- the scaling analysis on constructed cells


def _cell(arm, size, params, seed, exact, losses, nonmember_losses):
    strata = [
        {"prefix_len": 16, "repetitions": r, "n_windows": n, "exact_match_rate": k / n} for r, (k, n) in exact.items()
    ]
    return CellSummary(
        f"{arm}__size={size}__seed={seed}",
        arm,
        {"size": size, "seed": seed},
        params=params,
        heldout_loss=5.0 + seed,
        strata=strata,
        target_losses={**{str(r): v for r, v in losses.items()}, "0": nonmember_losses},
        exposures={"1": [1, 1], "9": [9, 9]} if arm != "control" else {"1": [0, 0], "9": [0, 0]},
    )


def test_loss_gap_is_a_difference_in_differences_against_the_paired_control():
    arm = CellSummary("arm", "arm", target_losses={"1": [2.0, 3.0], "0": [4.0, 4.0]})
    control = CellSummary("control", "control", target_losses={"1": [3.0, 5.0], "0": [4.5, 4.5]})
    gaps = loss_gaps([(arm, control)], n_bootstrap=200)
    # per target (3-2) - 0.5 = 0.5 and (5-3) - 0.5 = 1.5: mean 1.0
    assert gaps[1]["gap"] == 1.0 and gaps[1]["n"] == 2  # halves and their mean: exact in binary
    assert 0.5 <= gaps[1]["low"] <= 1.0 <= gaps[1]["high"] <= 1.5


def test_loss_gap_split_by_the_mask_leaves_out_targets_without_such_positions():
    from goldfish.experiment.analyses.attacks import member_nll_by_split

    # two members: log-probs by hand, the first drops its 2nd target, the second drops none
    split = member_nll_by_split(
        [np.array([-1.0, -3.0, -2.0]), np.array([-0.5, -1.5])],
        [np.array([False, True, False]), np.array([False, False])],
    )
    assert split == {"kept": [1.5, 1.0], "dropped": [3.0, None]}  # means of halves and integers: exact in binary
    arm = CellSummary("arm", "arm", target_losses_by_split={"dropped": {"1": [3.0, None], "0": [4.0]}})
    control = CellSummary("control", "control", target_losses_by_split={"dropped": {"1": [4.5, 2.0], "0": [4.25]}})
    gaps = loss_gaps([(arm, control)], n_bootstrap=50, split="dropped")
    assert gaps == {1: {"gap": 1.25, "low": 1.25, "high": 1.25, "n": 1}}  # (4.5 - 3) - (4.25 - 4); one target
    assert loss_gaps([(arm, control)], split="kept") == {}  # no kept losses recorded: no gap, not a zero


def test_size_analysis_pools_seeds_with_wilson_and_fits_only_off_the_floor():
    cells = []
    sizes = {"1M": 1e6, "3M": 3e6, "10M": 1e7}
    for seed in (0, 1):
        for size, params in sizes.items():
            cells.append(
                _cell("control", size, params, seed, {1: (0, 50), 9: (1, 50)}, {1: [5.0] * 3, 9: [5.0] * 3}, [5.0] * 3)
            )
            hits = {"1M": 5, "3M": 10, "10M": 20}[size]
            cells.append(
                _cell(
                    "standard", size, params, seed, {1: (0, 50), 9: (hits, 50)}, {1: [4.9] * 3, 9: [3.0] * 3}, [4.8] * 3
                )
            )
    scaling = size_analysis(cells, ["size", "seed"])
    row = next(r for r in scaling["rows"] if r["arm"] == "standard" and r["size"] == "3M")
    assert row["cells"] == 2 and row["strata"]["9"]["exact"] == 20 and row["strata"]["9"]["n"] == 100
    assert (row["strata"]["9"]["low"], row["strata"]["9"]["high"]) == wilson_interval(20, 100)  # the same call
    # means and differences of losses near 5 in another order: float64 rounding relative to 5
    gap_tol = rounding(8, U64) * 5.0
    assert row["strata"]["9"]["loss_gap"]["gap"] == pytest.approx((5.0 - 3.0) - (5.0 - 4.8), abs=gap_tol)
    assert row["strata"]["1"]["loss_gap"]["gap"] == pytest.approx((5.0 - 4.9) - 0.2, abs=gap_tol)
    assert row["heldout_loss"] == 5.5
    assert row["heldout_loss_sd"] == pytest.approx(math.sqrt(0.5), rel=rounding(6, U64), abs=0)  # sd of 5, 6
    assert row["exposures"] == {"1": [1, 1], "9": [9, 9]} and row["exposures_agree"]
    fits = {(f["arm"], f["repetitions"]): f for f in scaling["fits"]}
    x9 = fits[("standard", 9)]
    assert x9["off_floor"] == 3
    ref = stats.linregress(np.log10([1e6, 3e6, 1e7]), [0.1, 0.2, 0.4])
    tol = line_fit(np.log10([1e6, 3e6, 1e7]))
    assert x9["slope"] == pytest.approx(ref.slope, rel=tol, abs=0)
    assert x9["slope_se"] == pytest.approx(ref.stderr, rel=tol, abs=0)
    assert "slope" not in fits[("standard", 1)] and "need 3" in fits[("standard", 1)]["why_not"]
    assert size_analysis(cells, ["seed"]) is None  # no size axis, no section


def test_smaller_to_larger_prediction_beside_the_repetition_rule_by_hand(tmp_path):
    from types import SimpleNamespace

    from goldfish.experiment.sections.prediction import compute, render

    # one seed, targets a..f with copies 1, 1, 4, 4, 16, 16; the small model memorises {d, e, f}, the large {c, d, e, f}
    reps = dict(zip("abcdef", (1, 1, 4, 4, 16, 16)))
    memorised = {"small": set("def"), "large": set("cdef")}
    plans, cells = [], []
    for size, params in (("small", 1e6), ("large", 1e7)):
        path = tmp_path / f"{size}.json"
        path.write_text(
            json.dumps(
                {
                    "windows": [
                        {
                            "doc_id": d,
                            "split": "members",
                            "prefix_len": 16,
                            "repetitions": r,
                            "exact_match": d in memorised[size],
                        }
                        for d, r in reps.items()
                    ]
                }
            )
        )
        plans.append(SimpleNamespace(results_file=path, data_dir=tmp_path / "data0"))
        cells.append(CellSummary(f"standard__size={size}", "standard", {"size": size}, params=int(params)))
    study = SimpleNamespace(axes=["size"], done=plans, cells=cells, tune=None)
    (entry,) = compute(study)["size_prediction"]
    assert (entry["size"], entry["largest"], entry["splits"]) == ("small", "large", 1)
    # the small model's set {d, e, f}: all three memorised by the large one (precision 3/3), 3 of its 4 (recall 3/4)
    assert (entry["model"]["precision"]["k"], entry["model"]["precision"]["n"]) == (3, 3)
    assert (entry["model"]["recall"]["k"], entry["model"]["recall"]["n"]) == (3, 4)
    # the rule fitted on the small model: ">= x4" gets 5 of 6 right (c wrong), ">= x16" 5 too (d missed): the smaller
    # t, so it predicts {c, d, e, f}: precision 4/4, recall 4/4 -- the trivial rule beats the smaller model here
    assert entry["rule"]["min_repetitions"] == [4.0]
    assert entry["rule"]["precision"]["rate"] == 1.0 and entry["rule"]["recall"]["rate"] == 1.0
    assert "| standard | small -> large | 3 / 4 | 100 % [44, 100] (3/3) | 75 % [30, 95] (3/4) | >= x4 |" in render(
        compute(study)
    )


def test_prefix_collisions_by_hand_and_none_in_a_prepared_folder_of_unique_texts(corpora, tmp_path):
    from goldfish.experiment.sections.collisions import collisions_of, prefix_collisions

    members = {"a": [1, 2, 3, 4, 5], "b": [1, 2, 3, 9, 9], "c": [7, 8, 9, 1, 1], "d": [5, 5]}  # d: shorter than p
    nonmembers = {"x": [7, 8, 9, 0, 0], "y": [4, 4, 4, 4, 4]}
    background = [[0, 0, 2, 3, 4, 6], [4, 4, 4]]  # holds 2 3 4 (no member opens with it) and 4 4 4 (y's opening)
    found = collisions_of(members, nonmembers, background, 3)
    assert found["member_member"] == ["a", "b"] and found["member_nonmember"] == ["c"]
    assert found["member_background"] == [] and found["nonmember_background"] == ["y"]
    assert found["nonmember_member"] == ["x"] and found["background_tokens"] == 9
    assert collisions_of(members, nonmembers, background + [[9, 1, 2, 3]], 3)["member_background"] == ["a", "b"]
    # numbered words never repeat: no prefix collides in a real prepared folder
    real = prefix_collisions(prepare(_recipe(corpora), tmp_path / "p", progress=False), 8)
    assert real["members"] == 12 and real["background_tokens"] > 0
    assert all(
        real[k] == []
        for k in ("member_member", "member_nonmember", "member_background", "nonmember_background", "nonmember_member")
    )


def test_tuning_per_arm_gives_each_arm_its_own_choice_and_says_when_it_is_at_the_edge(tmp_path):
    """tune.per: [model, arm]: every arm (control included) is a tuning cell at every steps value of seed 0, and
    each arm runs seed 1 at its own lowest held-out loss. The fake's loss is 3 + |steps - best| / 10 with best = 20,
    and for the Goldfish arm (the fake's k = 2) best = 40 here: Goldfish picks 40 -- at the grid's edge, which the
    tuning block and the report say -- the others 20 (interior)."""
    calls = Calls()
    pipeline = make_pipeline(calls)
    evaluate = pipeline.evaluate.run

    def goldfish_prefers_40(cfg, model=None):
        results = evaluate(cfg, model)
        run = json.loads((Path(cfg.model.path).parent / "fake_config.json").read_text())
        if run["k"] == 2:
            scores = results["membership"]["scores"]["loss"]
            scores["nonmembers"] = [-(3.0 + abs(run["steps"] - 40) / 10)] * len(scores["nonmembers"])
            atomic_write_json(Path(cfg.out) / "results.json", results)
        return results

    calibrated = {}  # cell -> the control its attacks were calibrated by, and whether that one was done

    def analyse(plan, model, others):
        control = others.control
        calibrated[plan.cell.id] = None if control is None else (control.cell.id, control.done)
        atomic_write_json(plan.attacks_file, {"attacks": {}})
        return {}

    pipeline = dataclasses.replace(
        pipeline,
        evaluate=dataclasses.replace(pipeline.evaluate, run=goldfish_prefers_40),
        analyses=(dataclasses.replace(ATTACKS, run=analyse),),
    )
    cfg = experiment(
        tmp_path,
        control=True,
        control_mode="background",
        tune={"axis": "steps", "per": ["model", "arm"]},
        grid={"train.model": ["tiny", "big"], "train.steps": [10, 20, 40], "train.seed": [0, 1]},
    )
    run_experiment(cfg, pipeline, progress=False)  # one run finishes every cell: no arm waits for a control
    assert all((tmp_path / "exp" / "cells" / c / DONE).is_file() for c in calibrated) and len(calibrated) == 24
    # every arm, whatever steps it runs at (Goldfish's 40, a tuning cell's 10), is calibrated by the control at the
    # control's own choice (20) and the same seed -- the run the report pairs it with -- done before its attacks
    assert calibrated == {
        f"{a}__model={m}__steps={s}__seed={seed}": None
        if a == "control"
        else (f"control__model={m}__steps=20__seed={seed}", True)
        for m in ("tiny", "big")
        for a in ("control", "standard", "goldfish")
        for seed, steps in ((0, (10, 20, 40)), (1, (40 if a == "goldfish" else 20,)))
        for s in steps
    }
    trained = [t.split("/")[-2] for t in calls.trained]
    tuning = {
        f"{a}__model={m}__steps={s}__seed=0"
        for a in ("control", "standard", "goldfish")
        for s in (10, 20, 40)
        for m in ("tiny", "big")
    }
    assert set(trained[:18]) == tuning  # every arm's tuning cells first
    assert sorted(trained[18:]) == sorted(
        f"{a}__model={m}__steps={s}__seed=1"
        for m in ("tiny", "big")
        for a, s in (("control", 20), ("standard", 20), ("goldfish", 40))
    )
    results = json.loads((tmp_path / "exp" / "results.json").read_text())
    groups = {(g["per"]["model"], g["per"]["arm"]): (g["chosen"], g["interior"]) for g in results["tune"]["groups"]}
    assert groups == {
        (m, a): (40, False) if a == "goldfish" else (20, True)
        for m in ("tiny", "big")
        for a in ("control", "standard", "goldfish")
    }
    text = "\n".join(tune_lines(results["tune"]))  # the size section's tuning table (fakes have no size section)
    assert "Tuning: each arm's own held-out loss (the nonmembers) per steps" in text
    assert (
        "At the grid's edge (no value tried beyond it, so the optimum may lie outside): model=tiny, arm=goldfish; "
        "model=big, arm=goldfish." in text
    )
    assert "| model=tiny, arm=goldfish | 6.000 | 5.000 | **3.000** |" in text  # 3 + |steps - 40| / 10
    control_only = {
        **results["tune"],
        "per": ["model"],
        "groups": [g for g in results["tune"]["groups"] if g["per"]["arm"] == "control"],
    }
    assert "the control's held-out loss" in "\n".join(tune_lines(control_only))
    assert "Every choice has a value tried on each side." in "\n".join(tune_lines(control_only))


def test_the_grid_brackets_a_choice_only_with_a_value_on_each_side():
    from goldfish.experiment.tune import interior

    assert interior([1e-3, 3e-3, 1e-2], 3e-3) is True
    assert interior([1e-3, 3e-3, 1e-2], 1e-2) is False and interior([1e-3, 3e-3, 1e-2], 1e-3) is False
    assert interior([1e-3], 1e-3) is False and interior([1e-3, 3e-3], None) is None
    assert interior(["a", 1], "a") is None  # values that do not order


def test_e50_per_run_and_its_geometric_mean_over_runs_by_hand():
    """Each run's own E50 (two symmetric strata put it exactly at their geometric midpoint: 8 between x4 and x16, 32
    between x16 and x64) and, over runs, 2 ** (a t interval of the log2 E50s); a run beyond the tested exposures
    leaves no interval and says so."""
    from goldfish.experiment.scaling import e50_runs

    def run(seed, low, high, k=(1, 3)):
        strata = [
            {"prefix_len": 16, "repetitions": r, "n_windows": 4, "exact_match_rate": kk / 4}
            for r, kk in zip(("a", "b"), k)
        ]
        return CellSummary(
            f"standard__seed={seed}",
            "standard",
            {"size": "s", "seed": seed, "lr": 1e-3},
            strata=strata,
            exposures={"a": [low, low], "b": [high, high]},
        )

    found = e50_runs([run(0, 4, 16), run(1, 16, 64), run(2, 4, 16)], ["seed", "lr"])
    assert [r["values"] for r in found["e50_runs"]] == [{"seed": s, "lr": 1e-3} for s in (0, 1, 2)]
    assert [r["e50"]["e50"] for r in found["e50_runs"]] == pytest.approx([8.0, 32.0, 8.0])
    logs = np.array([3.0, 5.0, 3.0])
    half = stats.t.ppf(0.975, 2) * logs.std(ddof=1) / math.sqrt(3)
    over = found["e50_over_runs"]
    assert (over["n_runs"], over["n_points"], over["df"]) == (3, 3, 2)
    assert over["geo_mean"] == pytest.approx(2 ** logs.mean())
    assert (over["ci_low"], over["ci_high"]) == pytest.approx((2 ** (logs.mean() - half), 2 ** (logs.mean() + half)))
    assert over["sd_log2"] == pytest.approx(logs.std(ddof=1))
    beyond = e50_runs([run(0, 4, 16), run(1, 4, 16, k=(0, 0)), run(2, 4, 16)], ["seed"])["e50_over_runs"]
    assert beyond == {
        "n_runs": 3,
        "n_points": 2,
        "why_not": "2 of 3 runs have an E50 inside the tested exposures (the others: 1 above): no interval over runs",
    }
    from goldfish.experiment.sections.threshold import e50_runs_markdown

    table = "\n".join(e50_runs_markdown([{"arm": "standard", "size": "s", **found}], "lr"))
    assert "| arm | size | seed=0 | seed=1 | seed=2 | over runs [95 % t] |" in table  # the tuned lr is no label
    assert (
        f"| standard | s | 8 | 32 | 8 | {2 ** logs.mean():.3g} [{2 ** (logs.mean() - half):.3g}, "
        f"{2 ** (logs.mean() + half):.3g}]; SD {logs.std(ddof=1):.2f} |"
    ) in table
    assert e50_runs_markdown([{"arm": "standard", "size": "s", **e50_runs([run(0, 4, 16)], ["seed"])}], None) == []
