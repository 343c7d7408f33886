"""The examples of docs/api.md for the tools researchers already use, each run on a tiny model: TRL's SFTTrainer with
the Goldfish collator, and an `accelerate` loop with `goldfish_loss` (on 1 and 2 processes); `accelerate launch` misuse
refused in one line."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
import torch
from tolerances import U32, llama_terms, rounding
from train_helpers import REPO, _tokenizer, cli_env, require_dist_marker

from goldfish import GoldfishCollator, GoldfishConfig, goldfish_loss, goldfish_mask
from goldfish.commands.train import check_accelerate_launch
from goldfish.errors import UserError


def readme_example(name: str, doc: str = "api.md") -> str:
    """The python block of docs/``doc`` that follows the comment ``<!-- example: NAME ... -->``."""
    text = (REPO / "docs" / doc).read_text(encoding="utf-8")
    match = re.search(rf"<!-- example: {name}\b[^>]*-->\s*```python\n(.*?)```", text, re.S)
    assert match, f"docs/{doc} has no example '{name}'"
    return match.group(1)


def tiny_llama(vocab: int = 64, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=vocab,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
        )
    )


def test_the_goldfish_sft_trainer_example_runs_as_written_on_cpu(tmp_path, monkeypatch):
    """docs/hf-trainer.md's GoldfishSFTTrainer block, unchanged, on a tiny Llama on CPU (issue 58: as first written,
    TRL's default bf16=True refused to run on a CPU); it trains."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoTokenizer

    _tokenizer(64, tmp_path / "tok")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    texts = [" ".join(f"w{3 + (i * 7 + j) % 60}" for j in range(30)) for i in range(8)]
    monkeypatch.chdir(tmp_path)  # the example's output_dir is relative
    env = {"model": tiny_llama(), "tokenizer": tokenizer, "train_ds": Dataset.from_dict({"text": texts})}
    exec(readme_example("goldfish-sft", "hf-trainer.md"), env)
    state = env["trainer"].state
    assert state.global_step > 0 and env["trainer"].args.bf16 is False
    assert torch.isfinite(torch.tensor(state.log_history[-1]["train_loss"]))


def test_trl_sft_trainer_trains_on_the_goldfish_labels(tmp_path, monkeypatch):
    """Every batch the model sees has exactly the targets the Goldfish mask drops (hash of the 13 ids ending at
    each; specials and padding never dropped) set to -100, and the rest untouched."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoTokenizer

    _tokenizer(64, tmp_path / "tok")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    rng = torch.Generator().manual_seed(0)
    texts = [
        " ".join(f"w{int(i)}" for i in torch.randint(3, 64, (int(n),), generator=rng))
        for n in torch.randint(20, 40, (8,), generator=rng)
    ]
    model, seen = tiny_llama(), []
    model.register_forward_pre_hook(
        lambda m, args, kw: seen.append({k: kw[k].clone() for k in ("input_ids", "attention_mask", "labels")}),
        with_kwargs=True,
    )
    monkeypatch.chdir(tmp_path)  # the example's output_dir is relative
    env = {
        "model": model,
        "tokenizer": tokenizer,
        "train_ds": Dataset.from_dict({"text": texts}),
        "GoldfishCollator": GoldfishCollator,
        "GoldfishConfig": GoldfishConfig,
    }
    exec(readme_example("trl"), env)
    assert env["trainer"].state.global_step == 4 and len(seen) == 4
    specials = sorted(tokenizer.all_special_ids)
    dropped = kept = 0
    for batch in seen:
        plain = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)  # TRL's labels before Goldfish
        mask = goldfish_mask(plain, k=4, h=13, special_ids=specials)
        assert torch.equal(batch["labels"], plain.masked_fill(mask, -100))
        dropped += int(mask.sum())
        kept += int(((plain != -100) & ~mask).sum())
    assert 0.15 < dropped / (dropped + kept) < 0.35  # about 1/k
    losses = [e["loss"] for e in env["trainer"].state.log_history if "loss" in e]
    assert all(torch.isfinite(torch.tensor(losses)))


def _accelerate_harness(folder, batch_size: int) -> str:
    """A script that runs the README's accelerate example on a tiny Llama (SGD, 16 rows of 24 ids) and saves the
    final weights to ``folder/weights.safetensors`` (main process), then ends by ``os._exit(0)`` as docs/api.md
    advises: with DDP on gloo a process aborted at exit now and then even after ``end_training()`` ("terminate called
    without an active exception"; 1 in ~20 runs of this script on 2 loaded cores, 2026-12-05; why: goldfish.cli.run)."""
    return (
        textwrap.dedent(f"""
        import torch
        from safetensors.torch import save_file
        from transformers import LlamaConfig, LlamaForCausalLM
        from goldfish import GoldfishConfig, goldfish_loss
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                             intermediate_size=64, max_position_embeddings=128))
        ids = torch.randint(3, 64, (16, 24), generator=torch.Generator().manual_seed(1))
        rows = [{{"input_ids": r, "labels": r.clone()}} for r in ids]
        loader = torch.utils.data.DataLoader(rows, batch_size={batch_size})
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        cfg = GoldfishConfig(k=4, h=13)
    """)
        + readme_example("accelerate")
        + textwrap.dedent(f"""
        if accelerator.is_main_process:
            state = accelerator.unwrap_model(model).state_dict()
            save_file({{k: v.contiguous() for k, v in state.items()}}, {str(folder / "weights.safetensors")!r})
        import os
        os._exit(0)
    """)
    )


def _run_accelerate_example(folder, nproc: int, batch_size: int) -> dict:
    from safetensors.torch import load_file

    folder.mkdir()
    script = folder / "example.py"
    script.write_text(_accelerate_harness(folder, batch_size))
    launch = [sys.executable, str(script)]
    if nproc > 1:
        require_dist_marker()
        launch = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            f"--num_processes={nproc}",
            "--num_machines=1",
            "--mixed_precision=no",
            "--dynamo_backend=no",
            "--main_process_port=0",
            str(script),
        ]
    env = {**cli_env(), "ACCELERATE_USE_CPU": "1"}  # Accelerator's multi-CPU (gloo) mode; GPUs need nothing
    done = subprocess.run(launch, env=env, cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return load_file(str(folder / "weights.safetensors"))


def _plain_sgd() -> tuple[dict, float]:
    """The example's 4 SGD steps (lr 0.5, 4 rows of 24) done in plain PyTorch -> (weights, the largest weight
    difference two runs that round in other orders may show).

    A step's gradient carries 2·forward + 4·24 rounded fp32 terms (each target's path forward and backward through
    the tiny Llama, summed over the step's targets), relative to the gradient's scale; SGD moves a weight by lr
    times its gradient and rounds it once in each run (2·u·|w|). First order, like :func:`tolerances.adamw_drift`:
    it leaves out the gradient change that the weights' own difference causes at later steps."""
    model = tiny_llama()
    ids = torch.randint(3, 64, (16, 24), generator=torch.Generator().manual_seed(1))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    step_terms = 2 * llama_terms(hidden=32, intermediate=64, layers=2, head_dim=16, seq=24, vocab=64) + 4 * 24
    drift = 0.0
    for rows in ids.split(4):
        goldfish_loss(model(input_ids=rows).logits, rows, GoldfishConfig(k=4, h=13)).loss.backward()
        grad = max(p.grad.abs().max().item() for p in model.parameters() if p.grad is not None)
        weight = max(p.detach().abs().max().item() for p in model.parameters())
        drift += 0.5 * rounding(step_terms, U32) * grad + 2 * U32 * weight
        opt.step()
        opt.zero_grad()
    return model.state_dict(), drift


def test_accelerate_example_on_one_process_is_the_plain_goldfish_step(tmp_path):
    """One process: the example's update is plain `goldfish_loss(...).loss.backward()` with SGD."""
    got = _run_accelerate_example(tmp_path / "one", nproc=1, batch_size=4)
    want, drift = _plain_sgd()  # another process (its own thread count, so its own kernel blocking)
    assert max((got[k] - want[k]).abs().max().item() for k in got) <= drift


@pytest.mark.dist
def test_accelerate_example_on_two_processes_matches_one(tmp_path):
    """Two processes with 2 rows each per step = one process with 4 rows per step (global kept-token normaliser)."""
    one = _run_accelerate_example(tmp_path / "one", nproc=1, batch_size=4)
    two = _run_accelerate_example(tmp_path / "two", nproc=2, batch_size=2)
    _, drift = _plain_sgd()  # summation order only: two halves all-reduced instead of one batch of 4 rows
    assert max((one[k] - two[k]).abs().max().item() for k in one) <= drift


def test_accelerate_launch_misuse_is_refused(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    check_accelerate_launch("fp32")  # not under accelerate: nothing to check
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # what its one-process launcher sets for --num_processes 2
    with pytest.raises(UserError, match="started one process although --num_processes asked for several.*--multi_gpu"):
        check_accelerate_launch("fp32")
    monkeypatch.setenv("WORLD_SIZE", "2")
    check_accelerate_launch("fp32")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    check_accelerate_launch("bf16")
    with pytest.raises(UserError, match="--mixed_precision bf16 does not set goldfish train's precision"):
        check_accelerate_launch("fp32")
