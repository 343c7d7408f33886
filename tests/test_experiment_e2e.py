"""A real experiment end to end: experiments/micro.yaml through `goldfish experiment` (prepare -> train -> eval ->
aggregate -> report, ~15 s of CPU; the session's one run, conftest's ``micro_sweep``), then a rerun that must skip every
finished cell. Model loads are counted: a cell reads its model once for evaluation, k baseline and attacks together;
and whole-document scoring passes are counted: eval's membership task and the cell's attacks analysis score each
document once between them."""

from __future__ import annotations

import csv
import json

import pytest
from tolerances import U32, decimals
from train_helpers import LOADS, MICRO_EVAL, MICRO_OVERRIDES, SCORED, run_counting_loads, run_micro_experiment

from goldfish.cli import main
from goldfish.data import load_prepared


@pytest.fixture
def micro(micro_sweep):
    return micro_sweep  # the session's one real micro experiment (conftest), with MICRO_OVERRIDES


def test_each_cell_loads_its_model_once_for_eval_k_baseline_and_attacks(micro):
    # micro trains from scratch (the trainer builds its model), so every load is a cell's post-training phases
    expected = sorted(str(micro / "cells" / arm / "train" / "model") for arm in ("control", "standard", "goldfish"))
    assert sorted(LOADS["first"]) == expected
    assert (micro / "cells" / "goldfish" / "eval" / "k_baseline.json").is_file()  # it did run on the shared model
    prepared = load_prepared(next((micro / "prepared").iterdir()))
    rows = json.loads((micro / "cells" / "goldfish" / "eval" / "k_baseline.json").read_text())["rows"]
    for row in rows:  # g also from the nonmembers' windows: one per nonmember long enough for the window
        ref = row["nonmember_g"]
        n = row["prefix_len"] + 16 if row["prefix_len"] > 0 else 17
        assert ref["n_windows"] == sum(len(d) >= n for d in prepared.nonmembers["input_ids"]) > 0
        assert 0 <= ref["g"] <= 1 and ref["n_dropped"] > 0
    assert all((micro / "cells" / arm / "attacks.json").is_file() for arm in ("control", "standard", "goldfish"))


def test_membership_and_attacks_score_each_document_once(micro):
    """One membership pipeline: eval's membership task keeps its per-token scores and the attacks analysis reads
    them, so each member and nonmember document goes through each cell's model once, not twice."""
    prepared = load_prepared(next((micro / "prepared").iterdir()))
    docs = [tuple(int(t) for t in d) for split in (prepared.members, prepared.nonmembers) for d in split["input_ids"]]
    assert {d: SCORED["first"][d] for d in docs} == {d: 3 for d in docs}  # three cells, once each


def test_every_phase_wrote_its_files(micro):
    for arm in ("standard", "goldfish"):
        cell = micro / "cells" / arm
        assert (cell / "DONE").is_file()
        assert (cell / "train" / "model" / "config.json").is_file()
        assert (cell / "eval" / "results.json").is_file()
        assert json.loads((cell / "cell.json").read_text())["arm"] == arm
    assert len(list((micro / "prepared").iterdir())) == 1  # both arms share one prepared dataset
    for name in (
        "results.csv",
        "results.json",
        "summary.json",
        "report.md",
        "experiment.yaml",
        "loss_curves.png",
        "exact_match_rate_by_arm.png",
        "roc_by_arm.png",
    ):
        assert (micro / name).is_file(), name


def test_summary_and_table_agree_with_the_cells(micro):
    summary = json.loads((micro / "summary.json").read_text())
    assert set(summary) == {"control", "standard", "goldfish", "blind_auc", "blind_auc_ci", "paired", "readings"}
    for arm in ("standard", "goldfish"):
        s = summary[arm]
        results = json.loads((micro / "cells" / arm / "eval" / "results.json").read_text())
        train = json.loads((micro / "cells" / arm / "train" / "summary.json").read_text())
        assert s["exact_match_rate"] == results["summary"]["overall"]["exact_match_rate"]
        assert s["mia_auc"] == results["membership"]["attacks"]["loss"]["auc"]
        assert s["tokens_seen"] == train["tokens"] and s["params"] == train["params"]
        assert 0.0 <= s["rouge_l"] <= 1.0 and s["heldout_loss"] > 0
        # the resolved precision and the device, as the trainer and the evaluation recorded them
        assert (
            s["precision"]
            == train["precision"]
            == results["config"]["model"]["dtype"]
            == s["eval_precision"]
            in ("fp32", "bf16")
        )
        assert s["device"]["type"] == "cpu" and s["device"]["name"] == results["model"]["device"]["name"]
    report = (micro / "report.md").read_text()
    device = summary["standard"]["device"]
    assert (
        f"Computed on {device['name']}" in report and f"Training precision {summary['standard']['precision']}" in report
    )
    # same token budget; Goldfish trains on ~3/4 of the targets and measures loss on the dropped ~1/4
    assert summary["standard"]["tokens_seen"] == summary["goldfish"]["tokens_seen"]
    assert summary["standard"]["dropped_tokens"] == 0 and summary["standard"]["final_dropped_loss"] is None
    frac = summary["goldfish"]["dropped_tokens"] / (
        summary["goldfish"]["dropped_tokens"] + summary["goldfish"]["kept_tokens"]
    )
    assert 0.15 < frac < 0.35
    with open(micro / "results.csv") as f:
        rows = list(csv.DictReader(f))
    # 3 cells x 1 prefix length x 2 repetition strata (repetitions [1, 2])
    assert sorted((r["cell"], r["prefix_len"], r["repetitions"]) for r in rows) == sorted(
        (a, "16", r) for a in ("control", "standard", "goldfish") for r in ("1", "2")
    )
    assert sum(int(r["n_windows"]) for r in rows if r["cell"] == "standard") == 16


def test_the_control_cell_is_the_untrained_initial_model(micro):
    import torch
    from safetensors.torch import load_file

    from goldfish.config import load_config
    from goldfish.models import build_model
    from goldfish.train_config import TrainConfig

    cell = micro / "cells" / "control"
    assert not (cell / "train" / "metrics.jsonl").exists()  # no training step ran
    train_cfg = load_config(TrainConfig, cell / "train_config.yaml", [])
    vocab = json.loads((micro / "cells" / "control" / "eval" / "results.json").read_text())["model"]["vocab_size"]
    fresh = build_model(train_cfg.model, vocab, train_cfg.seed).state_dict()
    saved = load_file(str(cell / "train" / "model" / "model.safetensors"))
    trained = load_file(str(micro / "cells" / "standard" / "train" / "model" / "model.safetensors"))
    name = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(saved[name], fresh[name]) and not torch.equal(trained[name], fresh[name])
    summary = json.loads((micro / "summary.json").read_text())
    assert summary["control"]["tokens_seen"] == 0 and summary["control"]["steps"] == 0
    attacks = json.loads((cell / "attacks.json").read_text())
    assert attacks["attacks"]["reference"]["auc"] == 0.5  # the control is its own reference: no signal
    assert 0.0 <= summary["blind_auc"] <= 1.0


def test_kept_and_dropped_positions_are_the_ones_training_dropped(micro):
    import numpy as np
    import torch

    from goldfish.config import load_config
    from goldfish.data import load_prepared
    from goldfish.data.order import consumed_rows
    from goldfish.experiment.analyses.attacks import dropped_targets
    from goldfish.masks import GoldfishConfig, config_mask
    from goldfish.train_config import TrainConfig, make_plan, read_mask_settings

    cell = micro / "cells" / "goldfish"
    train_cfg = load_config(TrainConfig, cell / "train_config.yaml", [])
    prepared = load_prepared(train_cfg.data.path)
    ours = read_mask_settings(cell / "train")  # what the trainer recorded in its run folder
    tok = prepared.manifest["tokenizer"]
    specials = sorted({tok[k] for k in ("eos_id", "bos_id", "pad_id") if tok.get(k) is not None})
    assert specials and ours == GoldfishConfig(k=4, h=13, strategy="hash", seed=0, special_ids=specials)  # micro.yaml
    assert read_mask_settings(micro / "cells" / "standard" / "train") is None
    # the recorded mask reproduces the dropped-target count the trainer logged at every step
    rows = prepared.train
    plan = make_plan(train_cfg.schedule, train_cfg.optim, len(rows), rows.seq_len, 1)
    order = consumed_rows(plan, train_cfg.seed, train_cfg.data.shuffle)
    logged = [r["dropped_tokens"] for r in map(json.loads, (cell / "train" / "metrics.jsonl").read_text().splitlines())]
    steps = np.split(
        order, np.cumsum([min(plan.global_batch, len(order) - i) for i in range(0, len(order), plan.global_batch)])[:-1]
    )
    for step, (index, count) in enumerate(zip(steps, logged)):
        t = {k: torch.from_numpy(v) for k, v in rows.batch(index).items()}
        dropped = config_mask(t["labels"], ours, document_ids=t["document_ids"], position_ids=t["position_ids"])
        assert int((dropped[:, 1:] & (t["labels"][:, 1:] != -100)).sum()) == count, f"step {step + 1}"
    assert len(logged) == plan.total_steps and sum(logged) > 0
    checked = 0
    for ids in prepared.members["input_ids"]:  # one document per row: the row that starts with it
        row = next(r for r in prepared.train if list(r["input_ids"][: len(ids)]) == list(ids))
        t = {k: torch.tensor([row[k]]) for k in ("labels", "document_ids", "position_ids")}
        trained = config_mask(t["labels"], ours, document_ids=t["document_ids"], position_ids=t["position_ids"])
        assert trained[0, 1 : len(ids)].tolist() == dropped_targets([ids], ours)[0].tolist()
        checked += 1
    assert checked == 16


def test_every_trained_cell_is_a_tensorboard_run_of_the_experiment(micro):
    """`tensorboard --logdir <experiment>` (TensorBoard's own multiplexer) finds one run per trained cell, with the
    kept loss of both arms and the dropped loss of the Goldfish arm, step for step as in metrics.jsonl."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
    from tensorboard.util import tensor_util

    from goldfish.config import load_config
    from goldfish.io import read_jsonl
    from goldfish.train_config import TrainConfig

    mux = EventMultiplexer(tensor_size_guidance={"scalars": 0})  # scalars are tensor events to the plugins
    mux.AddRunsFromDirectory(str(micro))
    mux.Reload()
    assert sorted(mux.Runs()) == ["cells/goldfish/train/tensorboard", "cells/standard/train/tensorboard"]
    for arm in ("standard", "goldfish"):
        run = f"cells/{arm}/train/tensorboard"
        records = read_jsonl(micro / "cells" / arm / "train" / "metrics.jsonl")
        tags = mux.Runs()[run]["tensors"]
        keys = ["kept_loss", "dropped_loss"] if arm == "goldfish" else ["kept_loss"]
        assert ("train/dropped_loss" in tags) == (arm == "goldfish")  # nothing is dropped in the standard arm
        for key in keys:
            events = mux.Tensors(run, f"train/{key}")
            logged = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in events]
            # TensorBoard stores float32: one rounding to nearest, within u32 relative
            assert logged == [(r["step"], pytest.approx(r[key], rel=U32, abs=0)) for r in records]
        logging = load_config(TrainConfig, micro / "cells" / arm / "train_config.yaml", []).logging
        assert (logging.group, logging.run_name) == ("micro", arm)  # W&B: one run per cell, grouped by experiment


def test_every_cell_model_card_holds_its_headline_numbers(micro):
    from huggingface_hub import ModelCard

    for arm in ("standard", "goldfish", "control"):
        cell = micro / "cells" / arm
        card = ModelCard.load(cell / "train" / "model" / "README.md")
        results = json.loads((cell / "eval" / "results.json").read_text())
        attacks = json.loads((cell / "attacks.json").read_text())
        got = {(r.task_name, r.metric_name): r.metric_value for r in card.data.eval_results}
        row = results["summary"]["by_window"]["start"]

        def as_written(value):  # the card keeps 6 decimals (goldfish.modelcard: round(value, 6))
            return pytest.approx(value, rel=0, abs=decimals(value, 6))

        assert got[("verbatim extraction", "exact match rate")] == as_written(row["exact_match_rate"])
        assert got[("verbatim extraction", "ROUGE-L (tokens)")] == as_written(row["rouge_l"])
        for attack in ("loss", "reference"):
            auc = attacks["attacks"][attack]["auc"]
            assert got[("membership inference", f"{attack} attack ROC-AUC")] == as_written(auc)
        assert got[("held-out loss", "held-out loss (nats per token)")] == as_written(attacks["heldout_loss"])
        steps = json.loads((cell / "train" / "summary.json").read_text())["steps"]
        assert f"| budget | {steps} steps," in card.text
    assert "goldfish-k4" in ModelCard.load(micro / "cells" / "goldfish" / "train" / "model" / "README.md").data.tags


def test_rerun_skips_finished_cells(micro):
    done = {arm: (micro / "cells" / arm / "DONE").stat().st_mtime_ns for arm in ("standard", "goldfish")}
    model = (micro / "cells" / "goldfish" / "train" / "model" / "model.safetensors").stat().st_mtime_ns
    assert run_counting_loads(micro, "rerun", *MICRO_EVAL) == 0  # without the logging override: never stale
    assert LOADS["rerun"] == []  # finished cells load nothing
    for arm, mtime in done.items():
        assert (micro / "cells" / arm / "DONE").stat().st_mtime_ns == mtime
    assert (micro / "cells" / "goldfish" / "train" / "model" / "model.safetensors").stat().st_mtime_ns == model


def test_report_only_writes_what_the_full_run_wrote(micro):
    study = ("results.json", "results.csv", "summary.json", "report.md", "experiment.yaml")
    # a full run (every cell is done: it only writes the study)
    assert run_micro_experiment(micro, *MICRO_OVERRIDES) == 0
    written = {name: (micro / name).read_bytes() for name in study}
    for name in study:
        (micro / name).unlink()
    assert run_micro_experiment(micro, *MICRO_OVERRIDES, "--report-only") == 0
    assert {name: (micro / name).read_bytes() for name in study} == written


def test_finished_cells_kept_without_prepared_data_or_weights_render_the_same_study(micro, capsys):
    """Results kept as the cells' files alone (prepared data and weights are never kept with them, e.g. a committed
    archive of a sweep): ``--report-only`` prepares the data again -- the documents each cell was evaluated on --
    loads no model, and writes the study byte for byte; prepared data that differs from what the cells were
    evaluated on is one line, exit 2, with the study already written kept."""
    import shutil

    study = ("results.json", "results.csv", "summary.json", "report.md", "experiment.yaml")
    assert run_micro_experiment(micro, *MICRO_OVERRIDES, "--report-only") == 0
    written = {name: (micro / name).read_bytes() for name in study}
    aside = micro.parent / f"{micro.name}.aside"
    aside.mkdir()
    (micro / "prepared").rename(aside / "prepared")
    weights = sorted(micro.glob("cells/*/train/model/model.safetensors"))
    assert len(weights) == 3
    for i, w in enumerate(weights):
        w.rename(aside / f"{i}.safetensors")
    fingerprint = micro / "cells" / "goldfish" / "eval" / "fingerprint.json"
    recorded = fingerprint.read_text()
    try:
        assert run_counting_loads(micro, "kept", *MICRO_OVERRIDES, "--report-only") == 0
        assert LOADS["kept"] == []
        assert {name: (micro / name).read_bytes() for name in study} == written
        (remade,) = (micro / "prepared").iterdir()
        original = json.loads((aside / "prepared" / remade.name / "manifest.json").read_text())
        assert json.loads((remade / "manifest.json").read_text())["sha256"] == original["sha256"]
        # a recipe or code that prepares other documents than the cells were evaluated on: refused, nothing rewritten
        shutil.rmtree(remade)
        documents = json.loads(recorded)["data_sha256"]
        fingerprint.write_text(recorded.replace(documents, "0" * 64))
        capsys.readouterr()
        assert run_micro_experiment(micro, *MICRO_OVERRIDES, "--report-only") == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == (
            f"error: {remade} was prepared again for the finished cell goldfish, but holds other "
            f"documents than it was evaluated on (sha256 {documents} vs {'0' * 64}): the recipe or the "
            f"code that prepares it changed; restore the cells' prepared data, or use a new out=... "
            f"folder and run them again"
        )
        assert {name: (micro / name).read_bytes() for name in study} == written
    finally:  # the session's micro folder as it was, for the tests after this one
        fingerprint.write_text(recorded)
        if (micro / "prepared").exists():
            shutil.rmtree(micro / "prepared")
        (aside / "prepared").rename(micro / "prepared")
        for i, w in enumerate(weights):
            (aside / f"{i}.safetensors").rename(w)
        aside.rmdir()


def test_cli_errors_are_one_line(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\narms: {a: {train.optim.lr: -1}}\n")
    assert main(["experiment", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: experiment 'bad' has invalid cells: train: ")
    assert "optim" in err[0] and "lr=-1" in err[0] and err[0].endswith("[a]")  # the control cell has no arm overrides
