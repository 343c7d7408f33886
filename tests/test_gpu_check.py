"""benchmarks/gpu_check.py: refuses without CUDA in one line, and its CPU dry run exercises every check (and labels
what a single device cannot check, such as mask parity, as not checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tolerances import llama_terms, rounding

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_refuses_without_cuda_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(tmp_path / "out.json")], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
    assert "--cpu-smoke" in done.stderr and not (tmp_path / "out.json").exists()


@pytest.mark.slow
def test_cpu_smoke_runs_every_check_and_writes_the_table(tmp_path):
    out = tmp_path / "check.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu-smoke", "--json", str(out)], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["table"] in done.stdout
    # one device: the smoke run exercises the mask code path on every strategy but claims no device parity
    assert sorted(result["mask"]) == ["canonical", "hash", "hash-table", "static"]
    assert all(m["compared"] == "cpu vs cpu" and m["identical"] is None for m in result["mask"].values())
    assert "mask parity" not in result["table"] and result["table"].count("parity not checked") == 4
    arms = {a["engine"]: a for a in result["train"]}
    assert sorted(arms) == ["axonn", "native", "native fast"] and all(a["tokens_per_s"] > 0 for a in arms.values())
    # same init, same batches, fp32: chunked CE and AxoNN 1x1x1 train like the default native engine, up to the
    # order of float sums. The smoke shape (llama-demo: hidden 128, MLP 320, 2 layers, heads of 32; 64 positions,
    # vocabulary 512; 2 x 2 rows a step) trains 2 steps: the last loss carries step 1's gradient rounding (each
    # target's path forward and backward, over the step's targets) and its own targets' forward paths and sum
    forward = llama_terms(hidden=128, intermediate=320, layers=2, head_dim=32, seq=64, vocab=512)
    targets = 2 * 2 * 64
    losses = [arms[n]["last_kept_loss"] for n in ("native", "native fast", "axonn")]
    assert losses == pytest.approx([losses[0]] * 3, rel=rounding(2 * forward + targets + forward + targets), abs=0)
    ev = result["eval"]
    assert ev["identical_tokens"] == ev["identical_verdicts"] == ev["windows"] == 8
    assert "error" not in result["demo"]
    assert sorted(result["demo"]["exact_match"]) == ["control", "goldfish", "standard"]
