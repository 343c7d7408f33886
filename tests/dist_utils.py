"""Run a function in N spawned processes that form a gloo process group on CPU (tests of parallel layouts).

Each worker initialises ``torch.distributed`` through a file store in a temporary folder (no ports to collide on a
shared CI machine), pins torch to one thread, runs ``fn(rank, world_size, *args)`` and saves what it returns with
``torch.save``; the parent loads the results with ``weights_only=True``. A failing worker's traceback is re-raised in
the parent, so a test shows the real error instead of a hang.

It also holds what the parallel tests share: a tiny Llama, deterministic Goldfish batches, and a one-process
reference that trains the *plain* Hugging Face model (its own ``forward``, no stage wrapper, no parallelism) with the
Goldfish loss, global kept-token normalisation, gradient clipping and AdamW -- an independent implementation every
distributed layout is compared with.
"""

from __future__ import annotations

import os
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import LlamaConfig, LlamaForCausalLM

from goldfish.loss import goldfish_loss
from goldfish.masks import GoldfishConfig, config_mask


def _worker(rank: int, world_size: int, folder: str, fn: Callable, args: tuple) -> None:
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    out = Path(folder)
    try:
        dist.init_process_group("gloo", init_method=f"file://{out / 'store'}", rank=rank, world_size=world_size)
        result = fn(rank, world_size, *args)
        torch.save(result, out / f"result_{rank}.pt")
    except BaseException:
        (out / f"error_{rank}.txt").write_text(traceback.format_exc())
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_distributed(fn: Callable[..., Any], world_size: int, *args: Any) -> list[Any]:
    """``[fn(rank, world_size, *args) for rank in range(world_size)]``, each in its own gloo process.

    ``fn`` must be a module-level function (it is pickled into the spawned processes) and return plain values or
    tensors."""
    with tempfile.TemporaryDirectory(prefix="goldfish-dist-") as folder:
        try:
            mp.start_processes(_worker, args=(world_size, folder, fn, args), nprocs=world_size, start_method="spawn")
        except mp.ProcessException:
            errors = sorted(Path(folder).glob("error_*.txt"))
            raise RuntimeError("\n".join(p.read_text() for p in errors) or "a worker failed") from None
        return [torch.load(Path(folder) / f"result_{r}.pt", weights_only=True) for r in range(world_size)]


# ------------------------------------------------------------------------ tiny model, data, one-process reference

VOCAB, SEQ, ROWS, STEPS, LR, MAX_NORM = 128, 16, 8, 3, 1e-3, 0.5


def tiny_config(layers: int = 2, tied: bool = False) -> LlamaConfig:
    """Hidden 32, 4 query heads / 2 KV heads (grouped-query attention), eager attention, fp32."""
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=tied, pad_token_id=None, bos_token_id=None, eos_token_id=None)
    cfg._attn_implementation = "eager"
    return cfg


def build_model(cfg: LlamaConfig, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).float()


def global_batches(steps: int = STEPS, rows: int = ROWS, seed: int = 1) -> list[dict[str, torch.Tensor]]:
    """One global batch per step: ids, labels (first 3 targets of odd rows unsupervised), Goldfish drop mask."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(steps):
        ids = torch.randint(0, VOCAB, (rows, SEQ), generator=g)
        labels = ids.clone()
        labels[1::2, :3] = -100
        drop = config_mask(labels, GoldfishConfig(k=3, h=2))
        batches.append({"input_ids": ids, "labels": labels, "drop_mask": drop})
    return batches


def kept_count(batch: dict[str, torch.Tensor]) -> int:
    """Global normaliser: supervised, kept targets after the causal shift."""
    return int(((batch["labels"][:, 1:] != -100) & ~batch["drop_mask"][:, 1:]).sum())


def reference_run(cfg: LlamaConfig, micro_rows: int = 2) -> dict:
    """Train the plain HF model in one process; returns per-step stats, grad norms and final weights."""
    model = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    losses, norms = [], []
    for batch in global_batches():
        normalizer = kept_count(batch)
        stats = torch.zeros(4, dtype=torch.float64)
        for start in range(0, ROWS, micro_rows):
            mb = {k: v[start:start + micro_rows] for k, v in batch.items()}
            out = goldfish_loss(model(input_ids=mb["input_ids"]).logits, mb["labels"], drop_mask=mb["drop_mask"])
            (out.kept_sum / normalizer).backward()
            stats += torch.stack([out.kept_sum.detach().double(), out.kept_count.double(),
                                  out.dropped_sum.double(), out.dropped_count.double()])
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
        opt.step()
        opt.zero_grad()
        losses.append(stats)
    return {"stats": torch.stack(losses), "norms": torch.tensor(norms, dtype=torch.float64),
            "weights": {k: v.detach().clone() for k, v in model.state_dict().items()}}
