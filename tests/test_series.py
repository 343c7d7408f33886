"""``goldfish eval`` over a series of models (``goldfish.eval.series``): a tiny run's checkpoints, recounted by hand.

* the analysis on constructed results: rates, when each stratum becomes extractable, trajectories, and Biderman et
  al.'s precision / recall, against values worked out by hand;
* a real tiny run that keeps every checkpoint: each checkpoint is exported and evaluated, the per-model table, the
  trajectories and the prediction are recounted from the per-model results.json files, the reads at each checkpoint
  from the rows the training loop actually asked for, and the last checkpoint's export equals the run's model/;
* a rerun evaluates nothing again; bad series settings are one-line errors.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from train_helpers import word_corpus

from goldfish.config import from_dict
from goldfish.data import PrepareConfig, load_prepared, prepare
from goldfish.errors import ConfigError, UserError
from goldfish.eval.config import EvalConfig
from goldfish.eval.series_analysis import analyse
from goldfish.train_config import TrainConfig


def _window(key, doc, reps, tm):
    return {
        "sha256": key,
        "doc_id": doc,
        "repetitions": reps,
        "split": "members",
        "prefix_len": 4,
        "window": "start",
        "start": 0,
        "token_match": tm,
        "exact_match": tm == 1.0,
        "rouge_l": tm,
    }


def test_the_analysis_of_constructed_results_by_hand():
    entries = [
        SimpleNamespace(label=f"m{i}", path="", checkpoint=True, step=10 * (i + 1), tokens=None, final=i == 2)
        for i in range(3)
    ]
    # token match of windows a..e (a, b: x1; c, d, e: x4) in three models
    table = {
        "a": (0.0, 1.0, 1.0),
        "b": (1.0, 0.5, 0.0),
        "c": (0.0, 0.0, 1.0),
        "d": (1.0, 1.0, 1.0),
        "e": (0.5, 0.9, 0.9),
    }
    reps = {"a": 1, "b": 1, "c": 4, "d": 4, "e": 4}
    results = [
        {"model": {"num_parameters": 100}, "windows": [_window(k, k, reps[k], v[i]) for k, v in table.items()]}
        for i in range(3)
    ]
    found = analyse(entries, results, memorized=1.0)
    assert found["x"] == "step"
    assert [r["exact_match"]["k"] for r in found["rows"]] == [2, 2, 3]
    assert found["rows"][0]["by_repetitions"]["1"]["k"] == 1 and found["rows"][2]["by_repetitions"]["4"]["k"] == 2
    # x1: m0 has b (1 of 2 = half); x4: m0 has d (1 of 3), m2 has c and d (2 of 3: half first reached at m2)
    assert found["strata"]["1"] == {
        "first_exact": "m0",
        "first_exact_step": 10,
        "half_exact": "m0",
        "half_exact_step": 10,
    }
    assert found["strata"]["4"]["first_exact"] == "m0" and found["strata"]["4"]["half_exact"] == "m2"
    traj = {t["doc_id"]: t for t in found["trajectories"]}
    assert traj["a"]["first"] == "m1" and traj["a"]["stays"] and traj["a"]["memorized"] == [0, 1, 1]
    assert traj["b"]["first"] == "m0" and not traj["b"]["stays"]
    assert traj["e"]["first"] is None
    # last model memorises {a, c, d}; m0 memorises {b, d}: precision 1/2, recall 1/3; m1 {a, d}: 2/2 and 2/3
    m0, m1 = found["prediction"]
    assert (m0["precision"]["k"], m0["precision"]["n"], m0["recall"]["k"], m0["recall"]["n"]) == (1, 2, 1, 3)
    assert (m1["precision"]["rate"], m1["recall"]["rate"]) == (1.0, 2 / 3)  # counts over counts: exact
    # the repetition rule fitted on each earlier model: m0 {b, d} is best reproduced by "x1 or more" (2 right of 5)
    # or nothing (3 right): nothing; m1 {a, d}: "x4 or more" gets c, e wrong and a missed (2 right), "x1 or more"
    # 2 right, nothing 3 right -> nothing as well; so the rule predicts no window: precision undefined, recall 0/3
    assert m0["rule"]["min_repetitions"] is None and m0["rule"]["predicted"] == 0
    assert (m0["rule"]["recall"]["k"], m0["rule"]["recall"]["n"], m0["rule"]["precision"]["rate"]) == (0, 3, None)
    # a model memorising exactly the x4 windows: the rule is "x4 or more", for the last model {a, c, d}: 2 of 3
    # predicted right (precision 2/3), 2 of 3 found (recall 2/3)
    x4 = [{**results[0], "windows": [_window(k, k, reps[k], float(reps[k] == 4)) for k in table]}] + results[1:]
    rule = analyse(entries, x4, memorized=1.0)["prediction"][0]["rule"]
    assert rule["min_repetitions"] == 4.0 and (rule["precision"]["rate"], rule["recall"]["rate"]) == (2 / 3, 2 / 3)
    loose = analyse(entries, results, memorized=0.9)  # e counts from m1 on at token match 0.9
    assert {t["doc_id"]: t["first"] for t in loose["trajectories"]}["e"] == "m1"


# ---------------------------------------------------------------- a tiny run's checkpoints


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny model trained 12 epochs (132 steps) on 8 members (x1 / x4) with a checkpoint every 33 steps, all kept;
    the rows of every step the loop asked for, recorded."""
    import goldfish.train as T

    root = tmp_path_factory.mktemp("series")
    word_corpus(root / "docs.jsonl", 40, 40, seed=3)
    data = prepare(
        from_dict(
            PrepareConfig,
            {
                "name": "s",
                "source": {"name": "local", "path": str(root / "docs.jsonl")},
                "tokenizer": {"name": "bpe", "vocab_size": 300},
                "seq_len": 32,
                "packing": "pack",
                "min_tokens": 8,
                "doc_tokens": 16,
                "num_members": 8,
                "repetitions": [1, 4],
                "nonmember_mode": "random_split",
                "num_nonmembers": 4,
                "num_background": 6,
            },
        ),
        root / "prep",
        progress=False,
    )
    cfg = from_dict(
        TrainConfig,
        {
            "data": {"path": str(data)},
            "out": str(root / "run"),
            "progress": False,
            "log_every": 1000,
            "model": {
                "name": "llama-demo",
                "hidden_size": 64,
                "num_layers": 2,
                "num_heads": 2,
                "intermediate_size": 128,
            },
            "optim": {"lr": 3e-3, "warmup_frac": 0.0},
            "schedule": {"epochs": 12, "global_batch_size": 4, "micro_batch_size": 4},
            # keep_optimizer: the final checkpoint too, which
            # test_the_last_checkpoint_exports_the_final_weights compares with model/ (a finished run's weights-only
            # checkpoints: test_checkpoint_resume.py)
            "checkpoint": {"every_steps": 33, "keep_last": 0, "keep_optimizer": True},
        },
    )
    steps: list[np.ndarray] = []
    real_step = T._train_step
    mp = pytest.MonkeyPatch()
    mp.setattr(
        T,
        "_train_step",
        lambda cfg_, engine, plan, rows, index, *rest: (
            steps.append(np.asarray(index)),
            real_step(cfg_, engine, plan, rows, index, *rest),
        )[1],
    )
    try:
        T.train(cfg)
    finally:
        mp.undo()
    return SimpleNamespace(root=root, data=data, run=root / "run", steps=steps)


def _eval_config(run, out, **series):
    return from_dict(
        EvalConfig,
        {
            "out": str(out),
            "tasks": ["extraction"],
            "progress": False,
            "data": {"path": str(run.data), "prefix_lens": [8], "suffix_len": 8},
            "series": {"checkpoints": str(run.run), **series},
        },
    )


def test_a_runs_checkpoints_are_exported_evaluated_and_recounted(run, tmp_path):
    from goldfish.eval.series import run_series

    out = tmp_path / "series"
    found = run_series(_eval_config(run, out))
    total = json.loads((run.run / "summary.json").read_text())["steps"]
    steps = list(range(33, total, 33)) + [total]
    assert [r["step"] for r in found["rows"]] == steps and found["x"] == "step"
    per_model = [json.loads((out / "models" / r["label"] / "eval" / "results.json").read_text()) for r in found["rows"]]
    flags = []
    for row, res in zip(found["rows"], per_model):
        windows = [w for w in res["windows"] if w["split"] == "members"]
        exact = {w["sha256"]: w["exact_match"] for w in windows}
        flags.append(exact)
        assert row["exact_match"]["k"] == sum(exact.values()) and row["exact_match"]["n"] == 8
    final = {k for k, v in flags[-1].items() if v}
    for p, mine in zip(found["prediction"], flags[:-1]):
        chosen = {k for k, v in mine.items() if v}
        assert (p["both"], p["memorized"], p["final_memorized"]) == (len(chosen & final), len(chosen), len(final))
    assert found["rows"][-1]["exact_match"]["k"] > found["rows"][0]["exact_match"]["k"]  # it does memorise
    # reads at first memorisation: recounted from the rows the training loop asked for
    prepared = load_prepared(run.data)
    rows = prepared.train.batch(np.arange(len(prepared.train)))
    member = {doc: k for k, doc in enumerate(prepared.members["id"])}
    for t in found["trajectories"]:
        if t["first"] is None:
            continue
        step = t["first_step"]
        consumed = np.concatenate(run.steps[:step])
        starts = (rows["document_ids"][consumed] == member[t["doc_id"]]) & (rows["position_ids"][consumed] == 0)
        assert t["reads_at_first"] == int(starts.sum())
    assert not any((out / "models" / r["label"] / "model").exists() for r in found["rows"][:-1])  # exports gone
    assert (out / "report.md").is_file() and (out / "series.csv").read_text().count("\n") == len(steps) + 1


def test_the_last_checkpoint_exports_the_final_weights(run, tmp_path):
    from safetensors.torch import load_file

    from goldfish.checkpoint import export_checkpoint, list_checkpoints

    last = list_checkpoints(run.run)[-1]
    out = export_checkpoint(last, run.run / "model", tmp_path / "exported")
    mine, theirs = load_file(str(out / "model.safetensors")), load_file(str(run.run / "model" / "model.safetensors"))
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert np.array_equal(mine[name].numpy(), theirs[name].numpy()), name
    assert (out / "tokenizer.json").is_file()


def test_a_rerun_evaluates_nothing_again_and_settings_are_fingerprinted(run, tmp_path, monkeypatch):
    import goldfish.eval.run as R
    from goldfish.eval.series import run_series

    out = tmp_path / "series"
    first = run_series(_eval_config(run, out, keep_exports=True))
    monkeypatch.setattr(R, "run_eval", lambda cfg: pytest.fail(f"evaluated {cfg.model.path} again"))
    again = run_series(_eval_config(run, out, keep_exports=True))
    assert again["rows"] == first["rows"]
    other = _eval_config(run, out)
    other.data.prefix_lens = [4]  # another evaluation setting into the same folder
    with pytest.raises(UserError, match="holds results of a different evaluation"):
        run_series(other)


def test_series_settings_errors_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="both set"):
        from_dict(EvalConfig, {"series": {"models": ["a"], "checkpoints": "b"}})
    with pytest.raises(ConfigError, match="labels has 1 entries"):
        from_dict(EvalConfig, {"series": {"models": ["a", "b"], "labels": ["x"]}})
    from goldfish.eval.series import run_series

    with pytest.raises(UserError, match="both set"):
        run_series(from_dict(EvalConfig, {"model": {"path": "m"}, "series": {"models": ["a"]}}))
    with pytest.raises(UserError, match="no complete checkpoint"):
        (tmp_path / "empty").mkdir()
        run_series(
            from_dict(
                EvalConfig,
                {"out": str(tmp_path / "o"), "data": {"path": "x"}, "series": {"checkpoints": str(tmp_path / "empty")}},
            )
        )
