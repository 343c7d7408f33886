"""The experiment runner with fake phases: grid expansion, fail-fast validation, resumability, aggregation.

Fake prepare/train/eval phases have the real signatures and run in milliseconds.

The fakes write the same files the real phases write (manifest.json; metrics.jsonl + summary.json + model/;
results.json in the ``goldfish-eval/1`` schema), with numbers that are simple functions of the cell's settings so
aggregation can be checked by hand: a member window is memorised iff ``(doc + repetitions) % mod == 0`` with
``mod = 1`` for the standard loss (everything memorised) and ``mod = k`` for Goldfish.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import threading
from pathlib import Path

import pytest
from tolerances import U64, rounding
from train_helpers import REPO

from goldfish.config import check, from_dict, option, raise_problems, save_config
from goldfish.errors import ConfigError, UserError
from goldfish.experiment import (
    DONE,
    ExperimentConfig,
    Pipeline,
    default_pipeline,
    expand_cells,
    load_experiment,
    plan_cells,
    run_experiment,
)
from goldfish.experiment.analyses.attacks import ATTACKS
from goldfish.experiment.plan import Evaluate, Step, Train
from goldfish.experiment.runner import stale_cells
from goldfish.io import atomic_write_json

SIZES = {"tiny": 1_000_000, "small": 3_000_000, "big": 10_000_000}


@dataclasses.dataclass
class FakePrepare:
    name: str = option("fake", "recipe name")
    seq_len: int = option(16, "tokens per row")
    repetitions: list[int] = option(factory=lambda: [1], help="repetition strata")
    num_members: int = option(4, "member documents")
    seed: int = option(0, "seed")
    train_members: bool = option(True, "false: rows without the members (a background-trained control)")


@dataclasses.dataclass
class FakeData:
    path: str = option("", "prepared folder")


@dataclasses.dataclass
class FakeLoss:
    type: str = option("standard", "standard | goldfish")
    k: int = option(4, "goldfish k")

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(self.k >= 2, problems, f"loss.k={self.k} must be >= 2")
        raise_problems(problems)


@dataclasses.dataclass
class FakeTrain:
    data: FakeData = option(factory=FakeData, help="data")
    loss: FakeLoss = option(factory=FakeLoss, help="loss")
    model: str = option("tiny", "size")
    steps: int = option(20, "steps")
    seed: int = option(0, "seed")
    out: str = option("", "run folder")
    progress: bool = option(True, "bar")

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(self.model in SIZES, problems, f"model={self.model!r} is not one of {sorted(SIZES)}")
        raise_problems(problems)


@dataclasses.dataclass
class FakeEvalModel:
    path: str = option("", "model folder")


@dataclasses.dataclass
class FakeEvalData:
    path: str = option("", "prepared folder")
    prefix_lens: list[int] = option(factory=lambda: [4, 8], help="prefix lengths")


@dataclasses.dataclass
class FakeEval:  # the shape of goldfish.eval.EvalConfig: model.path, data.path, out
    model: FakeEvalModel = option(factory=FakeEvalModel, help="model")
    data: FakeEvalData = option(factory=FakeEvalData, help="data")
    out: str = option("", "out")


class Calls:
    """Records what ran, and can fail on the n-th training call (a crash in the middle of an experiment)."""

    def __init__(self, fail_on_train: int | None = None):
        self.prepared: list[str] = []
        self.trained: list[str] = []
        self.evaluated: list[str] = []
        self.initialised: list[str] = []
        self.fail_on_train = fail_on_train


def _run_config(run_dir: Path) -> dict:
    return json.loads((run_dir / "fake_config.json").read_text())


def make_pipeline(calls: Calls) -> Pipeline:
    def prepare(cfg: FakePrepare, out, overwrite=False, progress=True) -> Path:
        out = Path(out)
        assert not out.exists() or overwrite
        calls.prepared.append(str(out))
        docs = [{"doc": d, "repetitions": cfg.repetitions[d % len(cfg.repetitions)]} for d in range(cfg.num_members)]
        atomic_write_json(out / "docs.json", docs)
        atomic_write_json(out / "cfg.json", {"train_members": cfg.train_members})
        atomic_write_json(
            out / "manifest.json",
            {"format": "goldfish-prepared/1", "counts": {"train": 8}, "tokenizer": {"vocab_size": 100}},
        )
        return out

    def train(cfg: FakeTrain) -> Path:
        calls.trained.append(cfg.out)
        if calls.fail_on_train is not None and len(calls.trained) == calls.fail_on_train:
            raise RuntimeError("simulated crash during training")
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        k = cfg.loss.k if cfg.loss.type == "goldfish" else 1
        lines = []
        for step in range(1, cfg.steps + 1):
            kept, dropped = 100 - (100 // k if k > 1 else 0), (100 // k if k > 1 else 0)
            lines.append(
                json.dumps(
                    {
                        "step": step,
                        "kept_loss": 10.0 / step,
                        "dropped_loss": 5.0 if dropped else None,
                        "kept_tokens": kept,
                        "dropped_tokens": dropped,
                    }
                )
            )
        (out / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        (out / "model").mkdir(exist_ok=True)
        atomic_write_json(out / "fake_config.json", {"k": k, "data": cfg.data.path, "steps": cfg.steps})
        atomic_write_json(
            out / "summary.json",
            {"steps": cfg.steps, "params": SIZES[cfg.model], "tokens": 100 * cfg.steps, "train_time_s": 1.5},
        )  # the trainer's names
        return out

    def initial_model(cfg: FakeTrain, out: Path) -> Path:  # the untrained model: memorises (almost) nothing
        calls.initialised.append(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(Path(cfg.out) / "fake_config.json", {"k": 1000, "data": cfg.data.path})
        return out

    def evaluate(cfg: FakeEval, model=None) -> dict:
        calls.evaluated.append(cfg.out)
        run = _run_config(Path(cfg.model.path).parent)
        docs = json.loads((Path(cfg.data.path) / "docs.json").read_text())
        windows = []
        for p in cfg.data.prefix_lens:
            for d in docs:
                hit = (d["doc"] + d["repetitions"]) % run["k"] == 0
                windows.append(
                    {
                        "doc_id": f"d{d['doc']}",
                        "title": f"Doc {d['doc']}",
                        "split": "members",
                        "repetitions": d["repetitions"],
                        "prefix_len": p,
                        "suffix_len": 4,
                        "exact_match": hit,
                        "token_match": 1.0 if hit else 0.5,
                        "rouge_l": 1.0 if hit else 0.25,
                        "generation": "a b c d" if hit else "a x c y",
                        "truth": "a b c d",
                    }
                )
        members = [-1.0] * len(docs)
        nonmembers = [-(3.0 + abs(run.get("steps", 20) - 20) / 10)] * len(docs)  # held-out loss: best at 20 steps
        results = {
            "schema": "goldfish-eval/1",
            "windows": windows,
            "summary": {
                "overall": {
                    "n_windows": len(windows),
                    "exact_match_rate": sum(w["exact_match"] for w in windows) / len(windows),
                    "rouge_l": sum(w["rouge_l"] for w in windows) / len(windows),
                    "token_match": sum(w["token_match"] for w in windows) / len(windows),
                }
            },
            "membership": {
                "attacks": {
                    "loss": {
                        "auc": 0.9 if run["k"] == 1 else 0.6,
                        "auc_ci_low": 0.5,
                        "auc_ci_high": 1.0,
                        "tpr_at_1pct_fpr": 0.1,
                        "roc_fpr": [0, 0.5, 1],
                        "roc_tpr": [0, 0.9, 1],
                    }
                },
                "scores": {"loss": {"members": members, "nonmembers": nonmembers}},
            },
        }
        atomic_write_json(Path(cfg.out) / "results.json", results)
        return results

    return Pipeline(
        Step(FakePrepare, prepare),
        Train(FakeTrain, train, initial_model=initial_model),
        Evaluate(FakeEval, evaluate),
        analyses=(),
    )  # the fakes run no per-cell analysis


def with_run(pipeline: Pipeline, **runs) -> Pipeline:
    """``pipeline`` with the ``run`` of some steps replaced: ``with_run(p, train=fake_train)``."""
    return dataclasses.replace(
        pipeline, **{step: dataclasses.replace(getattr(pipeline, step), run=run) for step, run in runs.items()}
    )


def experiment(tmp_path: Path, **extra) -> ExperimentConfig:
    data = {
        "name": "fake",
        "out": str(tmp_path / "exp"),
        "control": False,
        "data": {"seq_len": 16, "repetitions": [1, 2]},
        "train": {"steps": 20},
        "eval": {"data": {"prefix_lens": [4, 8]}},
        "arms": {
            "standard": {"train.loss.type": "standard"},
            "goldfish": {"train.loss.type": "goldfish", "train.loss.k": 2},
        },
        "grid": {"train.model": ["tiny", "big"]},
    }
    data.update(extra)
    return from_dict(ExperimentConfig, data)


def test_cells_are_arms_times_grid_with_readable_ids(tmp_path):
    cfg = experiment(
        tmp_path,
        grid={
            "train.model": ["tiny", "big"],
            "train.seed": [0, 1],
            "data_axis": [{"label": "short", "data.seq_len": 8}, {"label": "long", "data.seq_len": 32}],
        },
    )
    cells = expand_cells(cfg)
    assert len(cells) == 2 * 2 * 2 * 2
    assert cells[0].id == "standard__model=tiny__seed=0__data_axis=short"
    assert cells[1].id == "goldfish__model=tiny__seed=0__data_axis=short"
    assert cells[1].overrides == {
        "train.loss.type": "goldfish",
        "train.loss.k": 2,
        "train.model": "tiny",
        "train.seed": 0,
        "data.seq_len": 8,
    }
    assert cells[-1].values == {"model": "big", "seed": 1, "data_axis": "long"}


def test_cells_with_equal_data_share_one_prepared_folder(tmp_path):
    cfg = experiment(tmp_path, grid={"train.model": ["tiny", "big"], "data.seed": [0, 1]})
    plans = plan_cells(cfg, make_pipeline(Calls()))
    assert len(plans) == 8
    assert len({p.data_dir for p in plans}) == 2  # two distinct data configs (data.seed), whatever the arm/model
    for p in plans:
        assert p.train_cfg.data.path == str(p.data_dir)
        assert p.train_cfg.out == str(p.dir / "train")
        assert p.eval_cfg.model.path == str(p.dir / "train" / "model")
        assert p.train_cfg.progress is False  # one progress bar: the experiment's


def test_every_cell_is_validated_before_anything_runs(tmp_path):
    calls = Calls()
    cfg = experiment(
        tmp_path, grid={"train.model": ["tiny", "huge"]}, arms={"a": {"train.loss.k": 1}, "b": {"train.loss.k": 4}}
    )
    with pytest.raises(ConfigError) as info:
        run_experiment(cfg, make_pipeline(calls), progress=False)
    message = str(info.value)
    assert "model='huge' is not one of" in message and "loss.k=1 must be >= 2" in message
    assert "[a__model=tiny, a__model=huge]" in message  # each problem names the cells it affects
    assert calls.prepared == [] and calls.trained == []  # failed fast: nothing ran
    assert not (tmp_path / "exp").exists()


def test_unknown_section_in_an_arm_is_one_clear_error(tmp_path):
    cfg = experiment(tmp_path, arms={"x": {"training.loss.k": 3}})
    with pytest.raises(ConfigError, match=r"must start with one of data\., train\., eval\., hardware\."):
        plan_cells(cfg, make_pipeline(Calls()))


def test_a_crash_resumes_with_only_the_unfinished_cells(tmp_path):
    cfg = experiment(tmp_path)
    crashed = Calls(fail_on_train=2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(cfg, make_pipeline(crashed), progress=False)
    cells = tmp_path / "exp" / "cells"
    done = sorted(p.parent.name for p in cells.glob(f"*/{DONE}"))
    assert done == ["standard__model=tiny"]
    assert len(crashed.prepared) == 1  # shared data prepared once

    rerun = Calls()
    run_experiment(cfg, make_pipeline(rerun), progress=False)
    trained = [Path(p).parent.name for p in rerun.trained]
    assert trained == ["goldfish__model=tiny", "standard__model=big", "goldfish__model=big"]
    assert rerun.prepared == []  # the prepared folder is complete and reused
    assert len(list(cells.glob(f"*/{DONE}"))) == 4

    again = Calls()
    run_experiment(cfg, make_pipeline(again), progress=False)
    assert again.trained == [] and again.evaluated == []  # everything done: only re-aggregation


def test_a_trained_cell_is_not_retrained_when_eval_was_interrupted(tmp_path):
    cfg = experiment(tmp_path, grid={})
    calls = Calls()
    pipeline = make_pipeline(calls)
    real_eval = pipeline.evaluate

    def flaky_eval(c, model=None):
        raise KeyboardInterrupt

    pipeline.evaluate = dataclasses.replace(real_eval, run=flaky_eval)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, pipeline, progress=False)
    pipeline.evaluate = real_eval
    calls2 = Calls()
    p2 = make_pipeline(calls2)
    run_experiment(cfg, p2, progress=False)
    # the standard cell had finished training before its evaluation was interrupted: only the goldfish cell trains
    assert [Path(p).parent.name for p in calls2.trained] == ["goldfish"]
    assert [Path(p).parent.name for p in calls2.evaluated] == ["standard", "goldfish"]


def _hand_rate(k: int, reps: int, docs=range(4), repetitions=(1, 2)) -> float:
    """Exact-match rate of one stratum under the fake rule (doc + repetitions) % k == 0."""
    members = [d for d in docs if repetitions[d % len(repetitions)] == reps]
    return sum((d + reps) % k == 0 for d in members) / len(members)


def test_aggregation_matches_a_hand_computation(tmp_path):
    cfg = experiment(tmp_path)
    run_experiment(cfg, make_pipeline(Calls()), progress=False)
    out = tmp_path / "exp"
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    # 4 cells x 2 prefix lengths x 2 repetition strata
    assert len(rows) == 16
    by = {(r["cell"], r["prefix_len"], r["repetitions"]): r for r in rows}
    for model in ("tiny", "big"):
        for p in ("4", "8"):
            for reps in (1, 2):
                std = by[(f"standard__model={model}", p, str(reps))]
                gf = by[(f"goldfish__model={model}", p, str(reps))]
                assert float(std["exact_match_rate"]) == 1.0
                assert float(gf["exact_match_rate"]) == _hand_rate(2, reps)  # a count over a count
                # a float64 mean of 2 windows' 1.0 or 0.25 against 0.25 + 0.75·rate: <= 4 roundings
                assert float(gf["rouge_l"]) == pytest.approx(0.25 + 0.75 * _hand_rate(2, reps), rel=rounding(4, U64))
                assert int(gf["n_windows"]) == 2
                assert gf["model"] == model
    r = by[("goldfish__model=big", "4", "1")]
    assert int(r["params"]) == 10_000_000 and int(r["tokens_seen"]) == 2000 and int(r["kept_tokens"]) == 50 * 20
    # small integers and halves, and their means: exact in binary (results.csv writes repr, which round-trips)
    assert float(r["heldout_loss"]) == 3.0  # the negated LOSS-attack scores of the nonmembers
    assert float(r["mia_auc"]) == 6 / 10  # a count of ordered pairs over m·n
    assert float(r["final_kept_loss"]) == 10.0 / 20  # last 5 % of 20 steps = the last step
    assert float(r["final_dropped_loss"]) == 5.0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {
        "standard__model=tiny",
        "goldfish__model=tiny",
        "standard__model=big",
        "goldfish__model=big",
        "paired",
        "readings",
    }  # the paired tests and the readings beside
    assert summary["standard__model=tiny"]["final_dropped_loss"] is None  # nothing dropped by the standard loss


def test_summary_is_keyed_by_arm_when_each_arm_has_one_cell(tmp_path):
    cfg = experiment(tmp_path, grid={})
    run_experiment(cfg, make_pipeline(Calls()), progress=False)
    summary = json.loads((tmp_path / "exp" / "summary.json").read_text())
    assert set(summary) == {"standard", "goldfish", "paired", "readings"}
    assert [(t["a"], t["b"]) for t in summary["paired"]] == [("goldfish", "standard")]
    hand = sum((d + (1, 2)[d % 2]) % 2 == 0 for d in range(4)) / 4
    assert summary["goldfish"]["exact_match_rate"] == hand  # a count over a count
    assert summary["standard"]["exact_match_rate"] == 1.0
    assert summary["standard"]["mia_auc"] == 0.9 and summary["goldfish"]["tokens_seen"] == 2000


DRAWN = (
    "exact_match_rate_by_arm.png",
    "rouge_l_by_arm.png",
    "roc_by_arm.png",
    "loss_curves.png",
    "exact_match_rate_vs_size.png",
    "exact_match_rate_vs_repetitions.png",
    "exact_match_rate_vs_prefix_len.png",
    "exact_match_rate_rep1_vs_size.png",
    "rouge_l_vs_size.png",
    "rouge_l_vs_repetitions.png",
)


@pytest.mark.render(*DRAWN)  # these figures drawn for real (the report's others are placeholders, tests/conftest.py)
def test_report_has_the_expected_tables_and_plots(tmp_path):
    cfg = experiment(tmp_path, grid={"train.model": ["tiny", "small", "big"]})
    run_experiment(cfg, make_pipeline(Calls()), progress=False)
    out = tmp_path / "exp"
    report = (out / "report.md").read_text()
    for heading in (
        "## Headline",
        "## By prefix length",
        "## By repetition count",
        "## Repetition-1 memorisation",
        "## Example generations",
    ):
        assert heading in report
    assert "| goldfish model=big |" in report
    # no beam search / samples in eval, no attacks.json: no empty adaptive or leakage table
    assert "## Adaptive extraction attacks" not in report and "## Dropped-token leakage audit" not in report
    for png in DRAWN:
        assert (out / png).is_file() and (out / png).stat().st_size > 1000, png
        assert f"]({png})" in report


def test_the_mask_consistent_attack_of_each_goldfish_cell_is_a_report_table(tmp_path):
    """A cell whose eval ran `decoding.adversary` carries its rows (eval's own summary of the windows) into
    results.json, and the report shows them beside greedy: rates counted here by hand, the McNemar p of one
    discordant window (1.0) and of four (2 x 1/2^4 = 0.125)."""
    from goldfish.eval.adversary import summarize

    hits = {
        "greedy_dropped_hits": [1, 0, 0, 1],
        "mc_oracle_dropped_hits": [2, 2, 1, 1],
        "mc_switch_dropped_hits": [2, 1, 1, 1],
        "tf_dropped_hits": [1, 1, 0, 1],
        "tf_oracle_dropped_hits": [2, 2, 2, 1],
        "tf_switch_dropped_hits": [2, 1, 1, 1],
    }
    windows = [
        {
            "doc_id": f"d{i}",
            "window": "start",
            "prefix_len": 4,
            "mask_dropped": 2,
            "exact_match": False,
            "mc_oracle_exact_match": i < 4,
            "mc_switch_exact_match": i == 0,
            **{key: values[i] for key, values in hits.items()},
        }
        for i in range(4)
    ]
    section = {
        "name": "mask_consistent",
        "mask": {"k": 2, "h": 13, "strategy": "hash", "seed": 0, "special_ids": []},
        "switch_threshold": 0.9,
        "rows": summarize(windows, n_bootstrap=200),
    }
    base = make_pipeline(Calls())

    def evaluate(c, model=None):
        results = base.evaluate.run(c, model)
        if "goldfish" in c.out:
            results["adversary"] = section
            atomic_write_json(Path(c.out) / "results.json", results)
        return results

    run_experiment(experiment(tmp_path, grid={}), with_run(base, evaluate=evaluate), progress=False)
    out = tmp_path / "exp"
    cells = {c["arm"]: c for c in json.loads((out / "results.json").read_text())["cells"]}
    assert cells["standard"]["adversary"] is None
    row = cells["goldfish"]["adversary"]["rows"][0]
    assert cells["goldfish"]["adversary"]["mask"] == {"k": 2, "h": 13, "strategy": "hash"}
    assert (row["n_windows"], row["n_dropped"]) == (4, 8)
    assert row["exact_match"]["mc_oracle"]["mean"] == 1.0 and row["exact_match"]["mc_switch"]["mean"] == 0.25
    report = (out / "report.md").read_text()
    assert "## Mask-consistent extraction" in report
    line = next(ln for ln in report.splitlines() if ln.startswith("| goldfish | k=2 h=13 hash |"))
    cols = [x.strip() for x in line.strip("|").split("|")]
    assert cols[2:6] == ["start prefix 4", "4", "8", "0.0 % [0.0 %, 0.0 %]"]
    assert cols[6].startswith("100.0 %") and cols[6].endswith("(p 0.125)")
    assert cols[7].startswith("25.0 %") and cols[7].endswith("(p 1)")
    assert [c.split(" [")[0] for c in cols[8:13]] == ["25.0 %", "75.0 %", "62.5 %", "37.5 %", "87.5 %"]


def test_each_value_of_an_axis_is_tested_against_the_reference_per_stratum_pooling_seeds(tmp_path):
    """compare: {axis: model, reference: tiny, pool: [seed]}: a Goldfish cell at model=big is paired with the Goldfish
    cell at model=tiny of the same seed; both seeds' matched windows are pooled. Only big's goldfish windows of d0
    (repetition 1, prefixes 4 and 8, 2 seeds) are verbatim beyond tiny's: 4 discordant windows of 2 documents (d0
    in each seed's pair of cells: independent models), McNemar over documents p = 2 x (1/2)^2 = 0.5 in stratum 1 and
    over all -- not the 0.125 of the 4 windows; none in stratum 2 or for standard (verbatim everywhere)."""
    cfg = experiment(
        tmp_path,
        grid={"train.model": ["tiny", "big"], "train.seed": [0, 1]},
        compare={"axis": "model", "reference": "tiny", "pool": ["seed"]},
    )
    base = make_pipeline(Calls())

    def evaluate(c, model=None):
        results = base.evaluate.run(c, model)
        cell = Path(c.out).parent.name
        for w in results["windows"]:
            w["sha256"] = f"{w['doc_id']}/{w['prefix_len']}"
            if cell.startswith("goldfish__model=big") and w["doc_id"] == "d0":
                w["exact_match"] = True
        atomic_write_json(Path(c.out) / "results.json", results)
        return results

    run_experiment(cfg, with_run(base, evaluate=evaluate), progress=False)
    tests = json.loads((tmp_path / "exp" / "results.json").read_text())["paired_axis"]
    found = {(t["arm"], t["value"], t["repetitions"]): t for t in tests}
    assert set(found) == {(arm, "big", r) for arm in ("goldfish", "standard") for r in (1, 2, "all")}
    assert len(tests) == 6
    g1 = found[("goldfish", "big", 1)]
    assert (g1["n_windows"], g1["n_documents"]) == (8, 4)  # d0, d2 x 2 prefixes x 2 seeds: 4 documents of 2 pairs
    assert (g1["exact_match"]["a_only"], g1["exact_match"]["b_only"]) == (4, 0)
    assert (g1["exact_match"]["a_only_documents"], g1["exact_match"]["b_only_documents"]) == (2, 0)
    assert g1["exact_match"]["p_value"] == pytest.approx(0.5, abs=U64)
    assert sorted(g1["cells"]) == [
        ["goldfish__model=big__seed=0", "goldfish__model=tiny__seed=0"],
        ["goldfish__model=big__seed=1", "goldfish__model=tiny__seed=1"],
    ]
    assert found[("goldfish", "big", "all")]["exact_match"]["a_only"] == 4
    assert found[("goldfish", "big", 2)]["exact_match"]["p_value"] == 1.0
    assert found[("standard", "big", "all")]["exact_match"]["a_rate"] == 1.0
    report = (tmp_path / "exp" / "report.md").read_text()
    assert "## Paired against model=tiny (same arm, pooled over seed" in report
    assert (
        "| goldfish | big | 1 | 8 (4) | 50.0 % / 0.0 %; 2 vs 0 discordant documents (4 vs 0 windows; p 0.5) |" in report
    )


@pytest.mark.parametrize(
    "compare, message",
    [
        ({"axis": "size"}, r"compare.axis='size' is not a grid axis; choose one of: model"),
        (
            {"axis": "model", "reference": "huge"},
            r"compare.reference='huge' is not a value of grid axis model; choose "
            r"one of: tiny, big",
        ),
        ({"axis": "model", "reference": "tiny", "pool": ["model"]}, r"compare.pool=\['model'\] must name other grid"),
    ],
)
def test_a_compare_section_names_a_grid_axis_and_one_of_its_values(tmp_path, compare, message):
    with pytest.raises(ConfigError, match=message):
        experiment(tmp_path, grid={"train.model": ["tiny", "big"]}, compare=compare)


def test_torchrun_command_fills_nodes_and_processes_per_cell(tmp_path):
    import sys

    from goldfish.experiment.phases import torchrun_command

    cfg = experiment(
        tmp_path,
        grid={
            "size": [
                {"label": "small", "hardware.gpus": 4},
                {"label": "big", "hardware.gpus": 16},
                {"label": "odd", "hardware.gpus": 6},
            ]
        },
        hardware={"gpus_per_node": 4},
        launcher="torchrun",
        launcher_prefix=["srun", "--nodes={nnodes}", "--ntasks-per-node=1"],
        torchrun_args=["--rdzv-backend=c10d", "--rdzv-endpoint=head:29500"],
    )
    plans = {p.cell.id: p for p in plan_cells(cfg, make_pipeline(Calls()))}
    big = plans["goldfish__size=big"]
    cmd = torchrun_command(cfg, big, Path("cfg.yaml"))
    assert cmd == [
        "srun",
        "--nodes=4",
        "--ntasks-per-node=1",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=4",
        "--nproc_per_node=4",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=head:29500",
        "-m",
        "goldfish",
        "train",
        "cfg.yaml",
    ]
    small = torchrun_command(cfg, plans["standard__size=small"], Path("c.yaml"))
    assert small[:2] == ["srun", "--nodes=1"] and "--nproc_per_node=4" in small
    with pytest.raises(UserError, match=r"hardware.gpus=6 is not a multiple of hardware.gpus_per_node=4"):
        torchrun_command(cfg, plans["standard__size=odd"], Path("c.yaml"))


def test_a_changed_config_does_not_reuse_finished_cells(tmp_path):
    run_experiment(experiment(tmp_path, grid={}), make_pipeline(Calls()), progress=False)
    changed = experiment(tmp_path, grid={}, train={"steps": 30})
    with pytest.raises(
        UserError,
        match=r"cells were started with a different config: "
        r"standard \(train.steps: 20 -> 30\); goldfish \(train.steps: 20 -> 30\)",
    ):
        run_experiment(changed, make_pipeline(Calls()), progress=False)


def test_only_runs_matching_cells_but_reports_every_finished_one(tmp_path):
    cfg = experiment(tmp_path)
    run_experiment(cfg, make_pipeline(Calls()), progress=False, only=lambda cid: cid.endswith("tiny"))
    calls = Calls()
    run_experiment(cfg, make_pipeline(calls), progress=False, only=lambda cid: cid.startswith("standard"))
    assert [Path(p).parent.name for p in calls.trained] == ["standard__model=big"]
    results = json.loads((tmp_path / "exp" / "results.json").read_text())
    assert results["n_done"] == 3 and results["missing"] == ["goldfish__model=big"]


def _shard(cfg, pipeline, only, errors: list) -> threading.Thread:
    """One ``--only`` run of ``cfg`` in a thread (a process of its own would hold its own locks the same way: flock
    locks belong to open files, not to processes); an exception is kept in ``errors``."""

    def run() -> None:
        try:
            run_experiment(cfg, pipeline, progress=False, only=only)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    return threading.Thread(target=run, daemon=True)


def test_two_shards_run_side_by_side_into_one_folder(tmp_path):
    """The documented two-shard run (`--only A & --only B`): both train at the same time (each waits in training
    until the other is training too; one locked out of the folder would never get there), the data both cells share
    is prepared once, and the results hold both cells."""
    cfg = experiment(tmp_path, grid={})
    calls, both_training, errors = Calls(), threading.Barrier(2, timeout=60), []

    def pipeline() -> Pipeline:
        base = make_pipeline(calls)

        def train(c):
            both_training.wait()
            return base.train.run(c)

        return with_run(base, train=train)

    shards = [_shard(cfg, pipeline(), lambda cid, arm=arm: cid == arm, errors) for arm in ("standard", "goldfish")]
    for t in shards:
        t.start()
    for t in shards:
        t.join(120)
    assert errors == [] and not any(t.is_alive() for t in shards)
    assert sorted(Path(p).parent.name for p in calls.trained) == ["goldfish", "standard"]
    assert len(calls.prepared) == 1  # the second shard waited for the first's preparation, then reused it
    results = json.loads((tmp_path / "exp" / "results.json").read_text())
    assert results["n_done"] == 2 and results["missing"] == []
    leftover = sorted(p.name for p in (tmp_path / "exp").rglob(".*.lock")) + sorted(
        p.name for p in tmp_path.glob(".*.lock")
    )
    assert leftover == []  # every lock released and removed by its last holder


def test_a_cell_two_runs_both_want_runs_once(tmp_path, monkeypatch):
    """Overlapping shards: the second run reaches the cell the first is training, waits for it (one line naming the
    holder) and then skips it, finished; nothing is trained twice."""
    from goldfish.experiment.plan import CellPlan

    cfg = experiment(tmp_path, grid={})
    calls, errors = Calls(), []
    first_training, second_waiting = threading.Event(), threading.Event()
    real_lock = CellPlan.lock

    def spying_lock(plan, wait=True):
        lock = real_lock(plan, wait)
        said = lock.on_wait

        def on_wait(holder: str) -> None:
            said(holder)
            second_waiting.set()

        lock.on_wait = on_wait
        return lock

    monkeypatch.setattr(CellPlan, "lock", spying_lock)
    base = make_pipeline(calls)

    def train(c):
        if Path(c.out).parent.name == "standard" and not first_training.is_set():
            first_training.set()
            assert second_waiting.wait(60), "the second run never waited for the cell"
        return base.train.run(c)

    first = _shard(cfg, with_run(base, train=train), lambda cid: cid == "standard", errors)
    first.start()
    assert first_training.wait(60)
    second = _shard(cfg, with_run(base, train=train), None, errors)  # every cell, standard included
    second.start()
    for t in (first, second):
        t.join(120)
    assert errors == [] and not first.is_alive() and not second.is_alive()
    assert sorted(Path(p).parent.name for p in calls.trained) == ["goldfish", "standard"]
    assert json.loads((tmp_path / "exp" / "results.json").read_text())["n_done"] == 2


def test_a_shard_without_the_control_leaves_its_arms_attacks_until_the_control_is_done(tmp_path, capsys):
    """An arm's attacks phase reads its control's scores (the reference attack, the leakage audit): a shard that runs
    the arm before (or without) the control trains and evaluates it, says so in one line, and leaves it unfinished;
    the next run does the control first, then only the arm's attacks, now with the control's scores."""
    cfg = experiment(tmp_path, grid={}, control=True)
    calls, analysed = Calls(), []

    def analyse(plan, model, others):
        plans = others.plans
        assert others.control is next(p for p in plans if p.cell.control) or plan.cell.control
        control = next(p for p in plans if p.cell.control)
        analysed.append((plan.cell.id, (control.dir / "attacks.json").is_file()))
        atomic_write_json(plan.dir / "attacks.json", {"attacks": {}})
        return {}

    pipeline = dataclasses.replace(make_pipeline(calls), analyses=(dataclasses.replace(ATTACKS, run=analyse),))
    run_experiment(cfg, pipeline, progress=False, only=lambda cid: cid == "goldfish")
    assert (
        "[goldfish] trained and evaluated; its attacks wait for control, which is not done" in capsys.readouterr().err
    )
    assert analysed == [] and not (tmp_path / "exp" / "cells" / "goldfish" / DONE).exists()
    trained = len(calls.trained)
    run_experiment(cfg, pipeline, progress=False)
    assert analysed == [("control", False), ("standard", True), ("goldfish", True)]
    assert len(calls.trained) == trained + 1  # standard only: goldfish's training and eval were kept
    assert all((tmp_path / "exp" / "cells" / c / DONE).is_file() for c in ("control", "standard", "goldfish"))


def test_another_writer_is_refused_while_shards_hold_the_folder(tmp_path):
    """Shards share the folder's lock with each other only: an exclusive writer (a `goldfish train out=` into it) is
    one line naming a holder, and the last shard to leave removes the lock file."""
    from goldfish.ownership import FolderLock

    out = tmp_path / "exp"
    with FolderLock(out, shared=True), FolderLock(out, shared=True):
        with pytest.raises(UserError, match=rf"{out} is being written by another goldfish process \(pid \d+ on "):
            FolderLock(out).__enter__()
    assert not (tmp_path / ".exp.lock").exists()
    with FolderLock(out):  # free again
        with pytest.raises(UserError, match="is being written by another goldfish process"):
            FolderLock(out, shared=True).__enter__()


def test_the_control_cell_trains_nothing_and_is_evaluated_like_the_arms(tmp_path):
    calls = Calls()
    cfg = experiment(tmp_path, grid={"train.model": ["tiny", "big"]}, control=True)
    cells = expand_cells(cfg)
    assert [c.id for c in cells] == [
        "control__model=tiny",
        "standard__model=tiny",
        "goldfish__model=tiny",
        "control__model=big",
        "standard__model=big",
        "goldfish__model=big",
    ]
    assert cells[0].control and not cells[1].control and cells[0].overrides == {"train.model": "tiny"}
    run_experiment(cfg, make_pipeline(calls), progress=False)
    out = tmp_path / "exp"
    assert sorted(Path(t).parent.name for t in calls.trained) == sorted(
        f"{a}__model={m}" for a in ("standard", "goldfish") for m in ("tiny", "big")
    )
    assert sorted(Path(t).parent.name for t in calls.initialised) == ["control__model=big", "control__model=tiny"]
    assert len(calls.evaluated) == 6
    train = json.loads((out / "cells" / "control__model=tiny" / "train" / "summary.json").read_text())
    assert train["control"] is True and train["steps"] == 0 and train["tokens"] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["control__model=tiny"]["exact_match_rate"] == 0.0  # (d + reps) % 1000 == 0 never holds here
    assert summary["control__model=tiny"]["tokens_seen"] == 0


def test_control_is_a_reserved_arm_name(tmp_path):
    with pytest.raises(ConfigError, match="arm name 'control' is reserved"):
        experiment(tmp_path, control=True, arms={"control": {"train.loss.type": "standard"}})


def test_a_cell_is_stale_by_the_commands_own_fingerprints(tmp_path, monkeypatch):
    """The real pipeline: a started cell is stale when its saved configs determine other results by
    ``goldfish train``'s fingerprint (optimizer, loss ...) or ``goldfish eval``'s settings (prefix lengths ...), and
    not for what those commands would resume through (logging, checkpointing, progress, eval's token budget)."""
    monkeypatch.chdir(REPO)
    pipeline = default_pipeline()

    def plans(*overrides: str) -> list:
        return plan_cells(load_experiment("experiments/micro.yaml", [f"out={tmp_path}", *overrides]), pipeline)

    for plan in plans():  # every cell started: its configs saved, its run folder begun
        save_config(plan.train_cfg, plan.train_config_file)
        save_config(plan.eval_cfg, plan.eval_config_file)
        plan.train_dir.mkdir(parents=True)
    assert stale_cells(plans(), pipeline) == {}
    same = [
        "train.logging.tensorboard=true",
        "train.checkpoint.every_steps=5",
        "train.progress=true",
        "eval.membership.token_budget=512",
        "eval.progress=true",
        "eval.report=true",
    ]
    assert stale_cells(plans(*same), pipeline) == {}
    found = stale_cells(plans("train.optim.lr=0.02", "eval.data.prefix_lens=[8]"), pipeline)
    assert set(found) == {"control", "standard", "goldfish"}
    assert found["standard"] == "train.optim.lr: 0.01 -> 0.02, eval.data.prefix_lens: [16] -> [8]"
