"""Config system (defaults < file < overrides), atomic I/O, and the CLI's one-line user errors."""

from __future__ import annotations

import dataclasses
import os

import pytest

from goldfish import GoldfishConfig
from goldfish.cli import main
from goldfish.config import (
    describe,
    flatten,
    get_dotted,
    load_config,
    merged,
    option,
    parse_overrides,
    pop_dotted,
    save_config,
    set_dotted,
    split_arguments,
    to_dict,
)
from goldfish.errors import ConfigError, UserError
from goldfish.io import JsonlLogger, atomic_directory, atomic_write_text, read_json, read_jsonl, remove_tree


@dataclasses.dataclass
class Optim:
    lr: float = option(1e-3, "learning rate")
    betas: list[float] = option(factory=lambda: [0.9, 0.95], help="AdamW betas")


@dataclasses.dataclass
class Run:
    name: str = option("run", "run name")
    steps: int = option(10, "optimizer steps")
    bf16: bool = option(False, "autocast")
    optim: Optim = option(factory=Optim, help="optimizer")
    goldfish: GoldfishConfig = option(factory=GoldfishConfig, help="mask")


def test_precedence_defaults_file_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("steps: 20\noptim:\n  lr: 3.0e-4\ngoldfish:\n  k: 8\n")
    cfg = load_config(Run, path, ["optim.lr=1e-2", "bf16=true", "goldfish.h=5"])
    assert (cfg.steps, cfg.optim.lr, cfg.bf16, cfg.goldfish.k, cfg.goldfish.h, cfg.name) == (
        20,
        1e-2,
        True,
        8,
        5,
        "run",
    )
    assert cfg.optim.betas == [0.9, 0.95]
    save_config(cfg, tmp_path / "out.yaml")
    assert load_config(Run, tmp_path / "out.yaml") == cfg


def test_unknown_key_lists_valid_keys_and_all_problems_reported_once():
    with pytest.raises(ConfigError) as e:
        load_config(Run, None, ["optim.lrr=1", "steps=many", "goldfish.k=1"])
    msg = str(e.value)
    assert "unknown config key 'optim.lrr'" in msg and "betas, lr" in msg
    assert "steps='many' is not an integer" in msg
    e2 = pytest.raises(ConfigError, load_config, Run, None, ["goldfish.k=1"])
    assert "k must be an integer >= 2" in str(e2.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(Run, tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(Run, bad)


def test_dotted_keys_set_get_pop_merge_and_flatten_agree():
    base = {"train": {"loss": {"type": "standard"}, "seed": 0}, "data": {}}
    out = merged(base, {"train.loss.type": "goldfish", "train.loss.goldfish.k": 4, "eval.out": "x"})
    assert out == {
        "train": {"loss": {"type": "goldfish", "goldfish": {"k": 4}}, "seed": 0},
        "data": {},
        "eval": {"out": "x"},
    }
    assert base["train"]["loss"] == {"type": "standard"}  # the base is never changed
    assert flatten(out) == {
        "train.loss.type": "goldfish",
        "train.loss.goldfish.k": 4,
        "train.seed": 0,
        "data": {},
        "eval.out": "x",
    }
    assert merged({}, flatten(out)) == {k: v for k, v in out.items() if k != "data"} | {"data": {}}  # a round trip
    assert get_dotted(out, "train.loss.goldfish.k") == 4 and get_dotted(out, "train.nothing.here", "-") == "-"
    assert get_dotted(out, ["train", "seed"]) == 0
    value = [1, 2]
    set_dotted(out, "train.tags", value)
    value.append(3)
    assert out["train"]["tags"] == [1, 2]  # a copy was stored
    assert pop_dotted(out, "train.loss.goldfish") == {"k": 4} and "goldfish" not in out["train"]["loss"]
    assert pop_dotted(out, "train.loss.goldfish", "absent") == "absent" and pop_dotted(out, "a.b") is None


def test_one_reading_of_a_config_file_and_key_value_overrides(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text("seed: 1\n")
    assert split_arguments([str(conf), "a.b=1"]) == (str(conf), ["a.b=1"])
    assert split_arguments(["a.b=1", "c=2"]) == (None, ["a.b=1", "c=2"])  # key=value only: no file
    odd = tmp_path / "k=v.yaml"  # a file whose name reads as key=value is still the file
    odd.write_text("{}\n")
    assert split_arguments([str(odd)]) == (str(odd), [])
    assert split_arguments([]) == (None, [])
    assert parse_overrides(["optim.lr=0.5", "tags=[a, b]", "seed=1", "seed=2"]) == {
        "optim.lr": 0.5,
        "tags": ["a", "b"],
        "seed": 2,
    }  # YAML values; a later key wins


def test_read_json_names_a_damaged_file_and_remove_tree_survives_a_leftover(tmp_path):
    (tmp_path / "ok.json").write_text('{"a": [1, 2]}')
    assert read_json(tmp_path / "ok.json") == {"a": [1, 2]}
    (tmp_path / "torn.json").write_text('{"a": [1, ')
    with pytest.raises(UserError, match="torn.json is damaged"):
        read_json(tmp_path / "torn.json")
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "absent.json")
    folder = tmp_path / "cell"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "f").write_text("x")
    (tmp_path / ".cell.deleting").mkdir()  # what a kill during an earlier delete left
    remove_tree(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.json", "torn.json"]


def test_describe_lists_nested_fields_with_help():
    lines = describe(Run)
    assert any(line.strip().startswith("optim.lr (float, default 0.001): learning rate") for line in lines)
    assert any("goldfish.strategy" in line for line in lines)
    assert to_dict(Run())["goldfish"]["k"] == 4


def test_aliases_name_one_setting_in_every_spelling(tmp_path):
    """One spelling per setting across commands: goldfish.k is train's loss.goldfish.k and eval's (formerly
    mask.k); eval also reads train's precision and lm-eval's device, limit, batch_size. The saved config holds the
    canonical key; an alias and its canonical key both set is one error naming both."""
    from goldfish.eval.config import EvalConfig
    from goldfish.train_config import TrainConfig

    train = load_config(TrainConfig, None, ["goldfish.k=3", "loss.type=goldfish"])
    assert train.loss.goldfish.k == 3 and train.loss.type == "goldfish"
    merged = load_config(TrainConfig, None, ["goldfish.k=3", "loss.goldfish.h=7"])  # disjoint: merged
    assert (merged.loss.goldfish.k, merged.loss.goldfish.h) == (3, 7)
    with pytest.raises(ConfigError, match="goldfish and loss.goldfish both given: they name one setting"):
        load_config(TrainConfig, None, ["goldfish.k=3", "loss.goldfish.k=5"])
    (tmp_path / "old.yaml").write_text("mask: {k: 3, h: 5}\nprecision: fp32\nlimit: 7\nbatch_size: 4\ndevice: cpu\n")
    ev = load_config(EvalConfig, tmp_path / "old.yaml")
    assert (
        ev.goldfish.k,
        ev.goldfish.h,
        ev.model.dtype,
        ev.data.max_docs,
        ev.decoding.batch_size,
        ev.model.device,
    ) == (3, 5, "fp32", 7, 4, "cpu")
    saved = to_dict(ev)
    assert "mask" not in saved and saved["goldfish"]["k"] == 3 and "limit" not in saved
    assert load_config(EvalConfig, None, ["goldfish.k=3"]).goldfish.k == 3
    with pytest.raises(ConfigError, match="precision and model.dtype both given"):
        load_config(EvalConfig, None, ["precision=fp32", "model.dtype=bf16"])
    assert "  mask: alias of goldfish" in describe(EvalConfig)


def test_atomic_write_keeps_old_file_when_writer_fails(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    atomic_write_text(target, "old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temp files left behind


def test_atomic_directory_refuses_existing_and_cleans_up_on_error(tmp_path):
    target = tmp_path / "prepared"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("1")
    assert (target / "a.txt").read_text() == "1"
    with pytest.raises(FileExistsError):
        with atomic_directory(target):
            pass
    with pytest.raises(RuntimeError):
        with atomic_directory(target, overwrite=True) as tmp:
            (tmp / "b.txt").write_text("2")
            raise RuntimeError("crash mid-way")
    assert sorted(p.name for p in target.iterdir()) == ["a.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["prepared"]


def test_jsonl_logger_and_torn_last_line(tmp_path):
    path = tmp_path / "m.jsonl"
    with JsonlLogger(path) as log:
        log.log({"step": 1, "loss": 2.5})
        log.log({"step": 2, "loss": float("nan")})
    with open(path, "a") as f:
        f.write('{"step": 3, "lo')
    assert read_jsonl(path) == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": None, "json_nulls": {"loss": "nan"}}]


def test_cli_help_and_unknown_command(capsys):
    assert main(["--help"]) == 0
    assert "experiment" in capsys.readouterr().out
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown command 'frobnicate'")


_EXIT_SCRIPT = """
import atexit, sys, threading, time
from goldfish import cli
atexit.register(lambda: print("atexit ran"))   # no flush: block-buffered into the pipe until someone flushes
threading.Thread(target=lambda: (time.sleep(0.2), print("thread done"))).start()
class Global:
    def __del__(self):
        print("interpreter shut down")
keep = Global()   # a module global: freed only by a normal interpreter shutdown
sys.argv = ["goldfish", *sys.argv[1:]]
cli.run()
"""


@pytest.mark.integration
@pytest.mark.parametrize("world_size", ["1", "2"])
@pytest.mark.parametrize("argv, code", [(["--version"], 0), (["frobnicate"], 2)])
def test_the_command_exits_a_launched_process_without_the_interpreter_shutdown(tmp_path, world_size, argv, code):
    """`goldfish` (goldfish.cli.run) under a launcher (WORLD_SIZE > 1) ends by os._exit with main's status -- after
    its non-daemon threads finished, its atexit functions ran and its output was flushed, but without the interpreter
    shutdown where a gloo worker thread can abort the process (goldfish.cli.run's docstring); alone it exits
    normally."""
    import subprocess
    import sys

    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, "WORLD_SIZE": world_size}
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, *argv], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == code, done.stderr
    lines = done.stdout.splitlines()
    assert "thread done" in lines and lines[-1 if world_size == "2" else -2] == "atexit ran", done.stdout
    assert ("interpreter shut down" in lines) == (world_size == "1"), done.stdout
