"""The training loop: ``train(cfg) -> run folder``. One readable loop for every engine and loss.

Each step (see :func:`_train_step`):

1. take the global batch: rows ``order[position : position + global_batch_size]`` of a seeded permutation of the
   epoch (every rank computes the same global batch and reads its data-parallel shard); an epoch reads every row
   once, its last batch topped up with empty rows (:func:`next_batch`, :func:`take_rows`);
2. compute the Goldfish drop mask of the whole global batch (all-False for the standard loss) and the normaliser:
   the number of kept supervised targets in the global batch, so the loss does not depend on how it is split;
3. split this rank's shard into micro-batches; the engine accumulates ``kept_sum / normaliser`` over them;
4. set the warmup + cosine learning rate and take the optimizer step (gradient clipping inside the engine);
5. log one JSON line to ``<out>/metrics.jsonl``; checkpoint every ``checkpoint.every_steps`` steps and at the end.

Packed rows: ``position_ids`` restart at each document and are passed to the model without an attention mask,
which Hugging Face Llama turns into block-diagonal (per-document) causal attention.

Outputs in ``<out>``: ``config.yaml`` (resolved), ``metrics.jsonl``, ``checkpoints/``, ``model/`` (Hugging Face
format with the tokenizer), ``summary.json``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import checkpoint as ckpt
from .config import save_config
from .engines import get_engine
from .engines.base import Engine, StepStats
from .errors import UserError
from .fingerprint import refuse_mismatch, saved_train_fingerprint, train_fingerprint, write_fingerprint
from .fold import token_fold
from .hardware import default_device, describe
from .io import JsonlLogger, atomic_directory, atomic_write_json, atomic_write_text, read_jsonl
from .loss import EngineLoss
from .masks import GoldfishConfig, config_mask
from .modelcard import write_training_card
from .models import build_model, count_parameters, flops_per_token
from .ownership import OutputFolder, fingerprint_sha256, is_main_process, writing
from .perf import MfuMeter
from .precision import resolve_precision
from .tracking import Tracker
from .train_config import OptimConfig, ScheduleConfig, TrainConfig

BATCH_COLUMNS = ("input_ids", "labels", "document_ids", "position_ids")


# ------------------------------------------------------------------------------------------------ plan


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes and lengths derived from the config, the data and the data-parallel degree."""

    rows: int  # training rows
    seq_len: int
    global_batch: int  # rows per optimizer step
    micro_batch: int  # rows per forward on one rank
    dp_size: int
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


def check_batch(schedule: ScheduleConfig, dp_size: int) -> None:
    """Every data-parallel rank takes the same whole number of micro-batches per step (one error, every factor)."""
    g, m = schedule.global_batch_size, schedule.micro_batch_size
    if g % (m * dp_size):
        # dp counts the processes that read distinct rows of a step: native dp, but every process under
        # engine=axonn (its tensor-parallel grid reads separate rows too), so 4 processes with row=2 col=2 split by 4
        fit = m * dp_size * math.ceil(g / (m * dp_size))
        smaller = [d for d in range(m, 0, -1) if g % (d * dp_size) == 0]
        hint = f" or micro_batch_size={smaller[0]}" if smaller else ""
        raise UserError(f"schedule.global_batch_size={g} is not divisible by micro_batch_size({m})·dp({dp_size})="
                        f"{m * dp_size} (dp: processes reading distinct rows; every process with engine=axonn); "
                        f"use global_batch_size={fit}{hint}")


def make_plan(schedule: ScheduleConfig, optim: OptimConfig, rows: int, seq_len: int, dp_size: int) -> Plan:
    """Check batch divisibility and resolve the training length; training stops at the first budget."""
    check_batch(schedule, dp_size)
    g, m = schedule.global_batch_size, schedule.micro_batch_size
    if rows < g:
        raise UserError(f"the training split has {rows} rows, fewer than schedule.global_batch_size={g}; lower it")
    # every row is trained on once per epoch: the last batch of an epoch is topped up with empty rows (see
    # take_rows), so labelled repetition counts are what the model sees per epoch
    steps_per_epoch = -(-rows // g)
    budgets = []
    if schedule.epochs is not None:
        budgets.append(max(1, round(schedule.epochs * steps_per_epoch)))
    if schedule.max_steps is not None:
        budgets.append(schedule.max_steps)
    if schedule.max_tokens is not None:
        budgets.append(math.ceil(schedule.max_tokens / (g * seq_len)))
    total = min(budgets) if budgets else steps_per_epoch
    warmup = optim.warmup_steps if optim.warmup_steps is not None else int(optim.warmup_frac * total)
    return Plan(rows, seq_len, g, m, dp_size, steps_per_epoch, total, min(warmup, total))


def learning_rate(step: int, plan: Plan, optim: OptimConfig) -> float:
    """Learning rate of 0-based ``step``: linear warmup to ``lr``, then cosine decay to ``min_lr_ratio * lr``."""
    if step < plan.warmup_steps:
        return optim.lr * (step + 1) / plan.warmup_steps
    progress = (step - plan.warmup_steps) / max(1, plan.total_steps - plan.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return optim.lr * (optim.min_lr_ratio + (1.0 - optim.min_lr_ratio) * cosine)


def build_optimizer(params, optim: OptimConfig) -> torch.optim.Optimizer:
    """AdamW; matrices get weight decay, vectors (norms, biases) do not (nanoGPT's grouping).

    The fused kernel (one pass over all tensors, ~3x faster than the per-tensor loop on CPU) is used for plain
    tensors; sharded DTensor parameters (FSDP2/TP) keep PyTorch's default implementation.
    """
    from torch.distributed.tensor import DTensor

    params = [p for p in params if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": optim.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    fused = all(not isinstance(p, DTensor) and p.device.type in ("cpu", "cuda") for p in params) or None
    return torch.optim.AdamW(groups, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps, fused=fused)


# ------------------------------------------------------------------------------------------------ data


def epoch_order(rows: int, epoch: int, seed: int, shuffle: bool) -> np.ndarray:
    """Row order of one epoch: a permutation seeded by (seed, epoch), identical on every rank and after resume."""
    if not shuffle:
        return np.arange(rows)
    return np.random.default_rng([seed, epoch]).permutation(rows)


def next_batch(plan: Plan, orders: "_EpochOrders", progress: Progress) -> np.ndarray:
    """Row indices of the next global batch (``<= global_batch`` of them at an epoch's end); moves ``progress`` to
    the next epoch when the current one is used up. The one place that decides which rows the trainer reads."""
    if progress.position >= plan.steps_per_epoch * plan.global_batch:
        progress.epoch, progress.position = progress.epoch + 1, 0  # next epoch, next permutation
    return orders[progress.epoch][progress.position: progress.position + plan.global_batch]


def consumed_rows(plan: Plan, seed: int, shuffle: bool) -> np.ndarray:
    """(rows read over the whole run,) the row indices the trainer reads in ``plan.total_steps`` steps, in order."""
    orders, progress, out = _EpochOrders(plan.rows, seed, shuffle), Progress(), []
    for _ in range(plan.total_steps):
        out.append(next_batch(plan, orders, progress))
        progress.position += plan.global_batch
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def take_rows(rows, index: np.ndarray, size: int) -> dict[str, torch.Tensor]:
    """The (size, T) batch of rows ``index``, topped up with empty rows (labels -100, document -1) when shorter."""
    batch = rows[index.tolist()]
    missing = size - len(index)
    if missing:
        fill = {"input_ids": 0, "labels": -100, "document_ids": -1, "position_ids": 0}
        batch = {k: torch.cat([v, torch.full((missing, v.shape[1]), fill[k], dtype=v.dtype)]) for k, v in batch.items()}
    return batch


def member_exposures(prepared, consumed: np.ndarray, block: int = 4096) -> dict[str, list[int]]:
    """{labelled repetitions r: [fewest, most] times a member labelled r was read}, over the rows ``consumed``.

    A member starts once per copy (its ``position_ids == 0``; see ``goldfish.data.packing.occurrences``).
    """
    members = prepared.members
    labels = np.asarray(members["repetitions"], dtype=np.int64)  # (M,)
    train = prepared.train.with_format("numpy", columns=["document_ids", "position_ids"])
    times = np.bincount(consumed, minlength=len(train))  # (R,) reads of each row
    seen = np.zeros(len(labels), dtype=np.int64)
    for start in range(0, len(train), block):
        part = train[start:start + block]
        docs = np.where(part["document_ids"] < len(labels), part["document_ids"], -1)  # members only
        starts = (part["position_ids"] == 0) & (docs >= 0)
        row, col = np.nonzero(starts)
        np.add.at(seen, docs[row, col], times[start + row])
    return {str(r): [int(seen[labels == r].min()), int(seen[labels == r].max())] for r in np.unique(labels).tolist()}


def goldfish_config(cfg: TrainConfig, prepared) -> GoldfishConfig | None:
    """The Goldfish mask config with the data's special ids (EOS/BOS/pad) added and, for the ``canonical``
    strategy, the fold table of the data's tokenizer; ``None`` for the standard loss."""
    if cfg.loss.type != "goldfish":
        return None
    tokenizer = prepared.manifest["tokenizer"]
    specials = set(cfg.loss.goldfish.special_ids)
    specials |= {int(tokenizer[k]) for k in ("eos_id", "bos_id", "pad_id") if tokenizer.get(k) is not None}
    fold = token_fold(prepared.tokenizer) if cfg.loss.goldfish.strategy == "canonical" else None
    return dataclasses.replace(cfg.loss.goldfish, special_ids=sorted(specials), fold=fold)


def drop_mask(batch: dict[str, torch.Tensor], gcfg: GoldfishConfig | None) -> torch.Tensor:
    """(B, T) bool, True where Goldfish drops the target ``labels[:, t]``."""
    if gcfg is None:
        return torch.zeros_like(batch["labels"], dtype=torch.bool)
    return config_mask(batch["labels"], gcfg, document_ids=batch["document_ids"], position_ids=batch["position_ids"])


def kept_targets(labels: torch.Tensor, dropped: torch.Tensor) -> int:
    """Number of targets the loss trains on (after the causal shift): supervised and not dropped."""
    return int(((labels[:, 1:] != -100) & ~dropped[:, 1:]).sum())


def micro_batches(batch: dict[str, torch.Tensor], dropped: torch.Tensor, plan: Plan,
                  dp_rank: int) -> list[dict[str, torch.Tensor]]:
    """This rank's shard of the global batch, split into micro-batches of ``plan.micro_batch`` rows (model inputs and
    the targets ``labels``/``drop_mask``; see :mod:`goldfish.engines.base`)."""
    per_rank = plan.global_batch // plan.dp_size
    shard = slice(dp_rank * per_rank, (dp_rank + 1) * per_rank)
    out = []
    for start in range(shard.start, shard.stop, plan.micro_batch):
        rows = slice(start, start + plan.micro_batch)
        out.append({"input_ids": batch["input_ids"][rows], "labels": batch["labels"][rows],
                    "position_ids": batch["position_ids"][rows], "drop_mask": dropped[rows]})
    return out


def load_train_data(path: str):
    """The prepared folder (``goldfish.data.load_prepared``), its train split as torch tensors, and the seq_len."""
    from .data import load_prepared

    prepared = load_prepared(path)
    train = prepared.train.with_format("torch", columns=list(BATCH_COLUMNS))
    if len(train) == 0:
        raise UserError(f"prepared data {path} has an empty train split; prepare it again with more documents")
    return prepared, train, len(train[0]["input_ids"])


# ------------------------------------------------------------------------------------------------ the loop


@dataclasses.dataclass
class Progress:
    """Where training stands: saved in every checkpoint, enough to continue exactly."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0  # current epoch index
    position: int = 0  # rows of the current epoch already consumed
    tokens: int = 0  # input tokens seen (global)
    elapsed: float = 0.0  # training wall time over all sessions (s)


def train(cfg: TrainConfig, replace: bool = False) -> Path:
    """Train per ``cfg`` (resuming per ``cfg.checkpoint.resume``) and return the run folder ``cfg.out``.

    The main process holds the folder's lock throughout; a folder owned by anything but a training run is refused.
    ``replace``: the run in ``cfg.out`` (only a training run: its ownership marker) is replaced by a new one, built
    beside it and swapped in at its first checkpoint, so a failure or a kill before then leaves the old run whole."""
    if replace and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UserError("--overwrite replaces the run folder in one process only; under torchrun give a new out= "
                        "folder (or delete the old run) instead")
    prepared, rows, seq_len = load_train_data(cfg.data.path)  # fails fast, before joining any process group
    cfg = resolved(cfg)
    with writing(cfg.out, "train", replace=replace, legacy=_legacy_run, main=is_main_process()) as folder:
        # Goldfish reaches the engine only through the loss function
        engine = get_engine(cfg, EngineLoss(cfg.loss.ce_chunk_tokens))
        try:
            return _run(cfg, engine, prepared, rows, seq_len, folder)
        finally:
            engine.close()


def _legacy_run(folder: Path) -> bool:
    """A run folder written before ownership markers: it has a fingerprint (its fingerprint.json or config.yaml),
    which the run must then match."""
    return saved_train_fingerprint(folder) is not None


def resolved(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with ``precision: auto`` resolved for this machine (:func:`goldfish.precision.resolve_precision`):
    what the run folder's config, fingerprint and summary record. AxoNN runs bf16 only on CUDA."""
    device = default_device()
    bf16_ok = not (cfg.engine == "axonn" and device.type != "cuda")
    return dataclasses.replace(cfg, precision=resolve_precision(cfg.precision, device, bf16_ok=bf16_ok))


def _process_rank() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _run(cfg: TrainConfig, engine: Engine, prepared, rows, seq_len: int, folder: OutputFolder) -> Path:
    out = folder.path  # a staging folder while replacing a run, until the first checkpoint
    tok = prepared.manifest["tokenizer"]
    plan = make_plan(cfg.schedule, cfg.optim, len(rows), seq_len, engine.dp_size)
    rank, world = _process_rank()
    fingerprint = train_fingerprint(cfg, _data_sha256(prepared))
    refuse_mismatch(saved_train_fingerprint(out), fingerprint, f"the run in {out}",
                    "rerun with the config it was made with (its config.yaml), or pass --fresh to start in a new "
                    "folder, or --overwrite to replace it")
    resume = ckpt.find_resume(out, cfg.checkpoint.resume, rank, world)  # validated before anything is built
    if resume is not None:  # also a checkpoint of another folder (checkpoint.resume=<path>)
        refuse_mismatch(resume["trainer"].get("fingerprint"), fingerprint, f"checkpoint {resume['folder']}",
                        "resume it with the config it was made with, or start a new run from its weights with "
                        "model.path=<its run>/model and checkpoint.resume=never")
    shape: dict[str, float] = {}
    data_tokenizer = prepared.tokenizer if cfg.model.path else None  # a fine-tune: the model's must be the same
    engine.setup(lambda: _build(cfg, tok, seq_len, shape, data_tokenizer),
                 lambda params: build_optimizer(params, cfg.optim))
    progress = _restore(engine, resume, plan) if resume is not None else Progress()
    if engine.is_main:
        folder.mark(fingerprint_sha256(fingerprint))
        write_fingerprint(out, fingerprint)
        save_config(cfg, out / "config.yaml")
        _truncate_metrics(out / "metrics.jsonl", progress.step)
    meter = MfuMeter(shape["flops_per_token"], cfg.precision, engine.device, world, enabled=engine.is_main)
    gcfg = goldfish_config(cfg, prepared)
    orders = _EpochOrders(len(rows), cfg.seed, cfg.data.shuffle)
    clock = _LineClock()
    with JsonlLogger(out / "metrics.jsonl", enabled=engine.is_main) as log, _bar(cfg, engine, plan, progress) as bar, \
            Tracker(cfg, engine.is_main, progress.step, out) as tracker:  # TensorBoard / W&B: the same records
        while progress.step < plan.total_steps:
            record = _train_step(cfg, engine, plan, rows, next_batch(plan, orders, progress), gcfg, progress, meter)
            log.log(record)
            tracker.log(record)
            _report(cfg, engine, bar, record, plan, clock)
            if progress.step == plan.total_steps or (cfg.checkpoint.every_steps
                                                     and progress.step % cfg.checkpoint.every_steps == 0):
                _save(cfg, out, engine, plan, progress, rank, world, fingerprint)
                if not cfg.logging.wandb:  # W&B's own process writes its folder by path: then swap in at the end
                    folder.publish()  # a replacement takes the old run's place once it has a checkpoint
                    out = folder.path
    _finish(cfg, out, engine, prepared, plan, progress, shape, meter)
    return folder.final


def _train_step(cfg: TrainConfig, engine: Engine, plan: Plan, rows, index: np.ndarray, gcfg: GoldfishConfig | None,
                progress: Progress, meter: MfuMeter) -> dict[str, Any]:
    """One optimizer step on the global batch of rows ``index``; returns its metrics record."""
    start = time.perf_counter()
    batch = take_rows(rows, index, plan.global_batch)  # dict of (G, T) int64 tensors
    dropped = drop_mask(batch, gcfg)  # (G, T) bool
    normalizer = kept_targets(batch["labels"], dropped)
    stats = engine.forward_backward(micro_batches(batch, dropped, plan, engine.dp_rank), normalizer)
    lr = learning_rate(progress.step, plan, cfg.optim)
    grad_norm = engine.optimizer_step(lr, cfg.optim.max_grad_norm)
    if not math.isfinite(stats.kept_loss) or not math.isfinite(grad_norm):
        raise UserError(f"training diverged at step {progress.step + 1} (loss {stats.kept_loss}, grad norm "
                        f"{grad_norm}); lower optim.lr or set optim.max_grad_norm")
    seconds = time.perf_counter() - start
    progress.step += 1
    progress.position += plan.global_batch
    progress.tokens += plan.tokens_per_step
    progress.elapsed += seconds
    return _record(stats, plan, progress, lr, grad_norm, seconds, meter)


def _record(stats: StepStats, plan: Plan, progress: Progress, lr: float, grad_norm: float, seconds: float,
            meter: MfuMeter) -> dict[str, Any]:
    tokens_per_s = plan.tokens_per_step / seconds
    supervised = stats.kept_count + stats.dropped_count
    return {
        "step": progress.step, "epoch": round(progress.step / plan.steps_per_epoch, 4), "tokens": progress.tokens,
        "loss": stats.kept_loss, "kept_loss": stats.kept_loss,
        "dropped_loss": stats.dropped_loss if stats.dropped_count else None,
        "kept_tokens": stats.kept_count, "dropped_tokens": stats.dropped_count,
        "dropped_frac": stats.dropped_count / supervised if supervised else 0.0,
        "lr": lr, "grad_norm": grad_norm, "step_time": seconds, "tokens_per_s": tokens_per_s,
        "mfu": meter.mfu(tokens_per_s),
    }


# ------------------------------------------------------------------------------------------------ helpers


def _build(cfg: TrainConfig, tok: dict[str, Any], seq_len: int, shape: dict[str, float],
           tokenizer=None) -> torch.nn.Module:
    """Build (or load, checked against the data's ``tokenizer``) the model, give it the data's special ids, and note
    its size before any sharding."""
    model = build_model(cfg.model, int(tok["vocab_size"]), cfg.seed, tokenizer)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and seq_len > limit:
        raise UserError(f"prepared rows have {seq_len} tokens but the model's max_position_embeddings is {limit}; "
                        f"set model.max_position_embeddings={seq_len} or prepare shorter rows")
    for key, name in (("eos_id", "eos_token_id"), ("bos_id", "bos_token_id"), ("pad_id", "pad_token_id")):
        if tok.get(key) is not None:
            setattr(model.config, name, int(tok[key]))
            if model.generation_config is not None:
                setattr(model.generation_config, name, int(tok[key]))
    shape["params"] = count_parameters(model)
    shape["flops_per_token"] = flops_per_token(model, seq_len)
    return model


class _EpochOrders:
    """The row permutation of each epoch, computed once per epoch."""

    def __init__(self, rows: int, seed: int, shuffle: bool):
        self.rows, self.seed, self.shuffle = rows, seed, shuffle
        self._cache: tuple[int, np.ndarray] | None = None

    def __getitem__(self, epoch: int) -> np.ndarray:
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, epoch_order(self.rows, epoch, self.seed, self.shuffle))
        return self._cache[1]


def _bar(cfg: TrainConfig, engine: Engine, plan: Plan, progress: Progress):
    from tqdm.auto import tqdm

    show = cfg.progress and engine.is_main
    return tqdm(total=plan.total_steps, initial=progress.step, desc="train", unit="step", dynamic_ncols=True,
                disable=None if show else True)  # None: shown only on a terminal


LOG_INTERVAL_S = 60.0  # without a terminal a log line comes at least this often, whatever log_every says


class _LineClock:
    """Whether a log line is due by time: only when stdout is no terminal (a log file, an experiment's log)."""

    def __init__(self):
        self.last = time.monotonic()
        self.active = not sys.stdout.isatty()

    def due(self) -> bool:
        if not self.active or time.monotonic() - self.last < LOG_INTERVAL_S:
            return False
        self.last = time.monotonic()
        return True


def _report(cfg: TrainConfig, engine: Engine, bar, record: dict[str, Any], plan: Plan, clock: _LineClock) -> None:
    """Progress bar postfix on a terminal; otherwise one log line every ``log_every`` steps, and without a terminal
    also at least one every ``LOG_INTERVAL_S`` seconds (so a long run in a log file always shows progress)."""
    if not bar.disable:
        bar.set_postfix(loss=f"{record['loss']:.4f}", tok_s=f"{record['tokens_per_s']:.0f}")
    elif engine.is_main and (record["step"] % cfg.log_every == 0 or record["step"] == plan.total_steps
                             or clock.due()):
        print(f"step {record['step']}/{plan.total_steps}  loss {record['loss']:.4f}  lr {record['lr']:.2e}  "
              f"grad_norm {record['grad_norm']:.3f}  tokens/s {record['tokens_per_s']:.0f}  "
              f"mfu {_percent(record['mfu'])}", flush=True)


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _data_sha256(prepared) -> str:
    """sha256 of the training split's data files: the manifest's (checked on load), else hashed now."""
    from .data.prepared import split_sha256

    return prepared.manifest.get("sha256", {}).get("train") or split_sha256(Path(prepared.path) / "train")


def _trainer_state(plan: Plan, progress: Progress, world: int, fingerprint: dict[str, Any]) -> dict[str, Any]:
    return {"step": progress.step, "progress": dataclasses.asdict(progress), "world_size": world,
            "rows": plan.rows, "seq_len": plan.seq_len, "global_batch_size": plan.global_batch,
            "total_steps": plan.total_steps, "fingerprint": fingerprint}


def _save(cfg: TrainConfig, out: Path, engine: Engine, plan: Plan, progress: Progress, rank: int, world: int,
          fingerprint: dict[str, Any]) -> None:
    ckpt.save_checkpoint(out, _trainer_state(plan, progress, world, fingerprint), engine.state_dict(),
                         rank=rank, is_main=engine.is_main, barrier=engine.barrier, keep_last=cfg.checkpoint.keep_last)


def _restore(engine: Engine, resume: dict[str, Any], plan: Plan) -> Progress:
    """Load model, optimizer and RNG states; the data order continues at the saved position."""
    saved = resume["trainer"]
    for key, now in (("rows", plan.rows), ("seq_len", plan.seq_len), ("global_batch_size", plan.global_batch)):
        if saved.get(key) != now:
            raise UserError(f"cannot resume: the checkpoint was trained with {key}={saved.get(key)} but this run "
                            f"has {key}={now} (same data and batch size needed), or use a new out= folder")
    engine.load_state_dict(resume["engine"])
    ckpt.restore_rng(resume)
    return Progress(**saved["progress"])


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines past ``step`` (written after the checkpoint we resume from; they will be recomputed)."""
    if not path.is_file():
        return
    records = read_jsonl(path)
    kept = [r for r in records if r.get("step", 0) <= step]
    if len(kept) != len(records) or path.read_text(encoding="utf-8").count("\n") != len(records):
        import json

        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))


def _finish(cfg: TrainConfig, out: Path, engine: Engine, prepared, plan: Plan, progress: Progress, shape: dict,
            meter: MfuMeter) -> None:
    """Export the model (+ tokenizer) in Hugging Face format and write ``summary.json``."""
    if engine.is_main:
        with atomic_directory(out / "model", overwrite=True) as tmp:
            engine.export_hf(tmp)  # a collective: the other ranks call it below
            for f in (Path(prepared.path) / "tokenizer").iterdir():
                if f.is_file():
                    shutil.copy2(f, tmp / f.name)
    else:
        engine.export_hf(out / "model")
    if not engine.is_main:
        return
    records = read_jsonl(out / "metrics.jsonl")
    last = records[-1] if records else {}
    exposures = member_exposures(prepared, consumed_rows(plan, cfg.seed, cfg.data.shuffle))
    steady = records[1:] or records  # the first step pays for allocations (and compilation)
    summary = {
        "steps": progress.step, "epochs": progress.step / plan.steps_per_epoch, "tokens": progress.tokens,
        "loss_type": cfg.loss.type, "final_loss": last.get("loss"), "final_kept_loss": last.get("kept_loss"),
        "final_dropped_loss": last.get("dropped_loss"),
        "dropped_frac": _mean(records, "dropped_frac"), "wall_time_s": progress.elapsed,  # in steps, all sessions
        "mean_tokens_per_s": _mean(steady, "tokens_per_s"), "mean_mfu": _mean(steady, "mfu"),
        "mfu_peak_flops": meter.peak, "mfu_peak_source": meter.peak_source, "mfu_unavailable": meter.unavailable,
        "precision": cfg.precision, "device": describe(engine.device),
        "params": int(shape["params"]), "flops_per_token": shape["flops_per_token"],
        "global_batch_size": plan.global_batch, "seq_len": plan.seq_len, "world_size": _process_rank()[1],
        "model": str(Path(cfg.out) / "model"), "config": str(Path(cfg.out) / "config.yaml"),  # where they end up
        "exposures": exposures,  # {labelled r: [min, max] times read}: r x epochs when the budget is whole epochs
    }
    write_training_card(out / "model", cfg, summary, prepared.manifest, _data_sha256(prepared))
    atomic_write_json(out / "summary.json", summary)  # last: a run with a summary has its model card


def _mean(records: list[dict], key: str) -> float | None:
    values = [r[key] for r in records if r.get(key) is not None]
    return sum(values) / len(values) if values else None
