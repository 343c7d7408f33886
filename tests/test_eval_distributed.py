"""``goldfish eval`` split over processes (torchrun, accelerate launch) equals one process in every number: the ranks
compute their share of the same generation buckets and scoring batches and gather the rest, rank 0 alone writes and
prints. The batch unit is exercised on several buckets and scoring batches per pass (batch size 4, token budget
256), with beam search and the checkpoint series."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from dist_utils import launch
from eval_fixtures import save_model_folder, tiny_llama
from train_helpers import REPO, cli_env, require_dist_marker

from goldfish.cli import main as goldfish_main
from goldfish.data import PrepareConfig, SourceConfig, TokenizerConfig, prepare
from goldfish.hardware import physical_cores

pytestmark = pytest.mark.dist

SETTINGS = [
    "decoding.batch_size=4",
    "membership.token_budget=256",
    "data.prefix_lens=[16,32]",
    "data.suffix_len=16",
    "decoding.beam=2",
    "report=false",
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist_eval")
    data = prepare(
        PrepareConfig(
            source=SourceConfig(max_documents=60),
            tokenizer=TokenizerConfig(name="gpt2"),
            doc_tokens=64,
            num_members=20,
            num_nonmembers=20,
            nonmember_mode="random_split",
            seq_len=64,
            min_tokens=64,
        ),
        root / "data",
        progress=False,
    )
    model = save_model_folder(root / "model", tiny_llama(vocab_size=50257, hidden=32, layers=2))
    return root, data, model


def _default_env() -> dict:
    """No thread setting anywhere: one process takes the physical cores, each torchrun rank its share."""
    return {k: v for k, v in cli_env().items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}


def _eval(launcher: list[str], root: Path, data: Path, model: Path, out: str):
    cmd = [
        *launcher,
        "-m",
        "goldfish",
        "eval",
        "--model",
        str(model),
        "--data",
        str(data),
        "--out",
        str(root / out),
        *SETTINGS,
    ]
    return subprocess.run(cmd, env=_default_env(), cwd=REPO, capture_output=True, text=True, timeout=600)


def _numbers(results: dict) -> dict:
    """Every number of an evaluation (not when or where it ran)."""
    return {"summary": results["summary"], "membership": results["membership"], "windows": results["windows"]}


@pytest.fixture(scope="module")
def one_process(setup):
    """One process at the defaults: all physical cores (2 here), the checkpoint's own dtype."""
    root, data, model = setup
    done = _eval([sys.executable], root, data, model, "one")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((root / "one" / "results.json").read_text())


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_two_processes_equal_one_in_every_number(setup, one_process, launcher):
    """Also issue 43: no thread setting anywhere -- one process takes the physical cores, each rank its share
    (torchrun's OMP_NUM_THREADS=1) -- and the checkpoint's own dtype (fp32): still every number equal. (Before,
    `precision: auto` was timed per thread count and chose bf16 in the ranks, fp32 in the one process.)"""
    require_dist_marker()
    root, data, model = setup
    port = str(_port())
    cmd = (
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}"]
        if launcher == "torchrun"
        else [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes=2",
            "--num_machines=1",
            "--mixed_precision=no",
            "--dynamo_backend=no",
            f"--main_process_port={port}",
        ]
    )
    done = _eval(cmd, root, data, model, launcher)
    assert done.returncode == 0, done.stderr[-3000:]
    split = json.loads((root / launcher / "results.json").read_text())
    assert split["processes"] == 2 and "processes" not in one_process
    assert one_process["model"]["device"]["threads"] == physical_cores()  # the default, recorded
    assert split["model"]["device"]["threads"] == 1  # rank 0's share
    assert one_process["model"]["precision"] == split["model"]["precision"] == "fp32"
    assert _numbers(split) == _numbers(one_process)
    assert len(one_process["windows"]) == 40 and one_process["membership"]["attacks"]
    assert done.stdout.count("results: ") == 1  # rank 0 prints, once
    assert sorted(p.name for p in (root / launcher).iterdir() if not p.name.startswith(".")) == sorted(
        p.name for p in (root / "one").iterdir() if not p.name.startswith(".")
    )


def test_a_split_checkpoint_series_equals_one_process(setup, tmp_path):
    """The series split over 2 ranks (started as torchrun starts them: ``dist_utils.launch``) equals it run in this
    process, model by model."""
    root, data, model = setup
    other = save_model_folder(tmp_path / "other", tiny_llama(vocab_size=50257, hidden=32, layers=2, seed=1))
    argv = [
        "eval",
        "--data",
        str(data),
        "model.threads=1",
        *SETTINGS,
        f"series.models=[{model},{other}]",
        "series.labels=[a,b]",
    ]
    assert goldfish_main([*argv, "--out", str(tmp_path / "one")]) == 0  # in this process (one thread: conftest)
    two = launch([*argv, "--out", str(tmp_path / "two")], nproc=2, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    outs = {
        name: {
            label: _numbers(json.loads((tmp_path / name / "models" / label / "eval" / "results.json").read_text()))
            for label in ("a", "b")
        }
        for name in ("one", "two")
    }
    assert outs["one"] == outs["two"]
    assert outs["one"]["a"] != outs["one"]["b"]  # two models: a rank that evaluated one model twice would differ
    assert os.path.isfile(tmp_path / "two" / "series.json")
