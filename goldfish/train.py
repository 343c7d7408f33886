"""The training loop: ``train(cfg) -> run folder``. One readable loop for every engine and loss.

Each step (see :func:`_train_step`):

1. take the global batch: rows ``order[position : position + global_batch_size]`` of a seeded permutation of the
   epoch (every rank computes the same global batch and reads its data-parallel shard); an epoch reads every row
   once, its last batch topped up with empty rows (:mod:`goldfish.data.order`);
2. compute the Goldfish drop mask of the whole global batch (all-False for the standard loss) and the normaliser:
   the number of kept supervised targets in the global batch, so the loss does not depend on how it is split (the
   no-leak twin of the leakage audit also replaces the dropped tokens in the model's input: :func:`step_batch`);
3. split this rank's shard into micro-batches; the engine accumulates ``kept_sum / normaliser`` over them;
4. set the warmup + cosine learning rate and take the optimizer step (gradient clipping inside the engine);
5. log one JSON line to ``<out>/metrics.jsonl``; checkpoint every ``checkpoint.every_steps`` steps and at the end.

Goldfish reaches the engine only through the loss function (``goldfish.loss.EngineLoss``) and the ``drop_mask``
target; the mask is resolved once (``goldfish.train_config.goldfish_config``) and recorded in ``<out>/mask.json``.

Packed rows: ``position_ids`` restart at each document and are passed to the model without an attention mask,
which Hugging Face Llama turns into block-diagonal (per-document) causal attention.

Outputs in ``<out>``: ``config.yaml`` (resolved), ``fingerprint.json``, ``mask.json``, ``metrics.jsonl``,
``checkpoints/``, ``model/`` (Hugging Face format with the tokenizer), ``summary.json``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from tqdm.auto import tqdm

from . import checkpoint as ckpt
from .config import save_config
from .engines import get_engine
from .engines.base import Engine, StepStats
from .errors import UserError
from .data import load_prepared
from .data.order import EpochOrders, consumed_rows, member_exposures, next_batch, take_rows
from .hardware import apply_threads, default_device, describe
from .io import JsonlLogger, atomic_directory, atomic_write_json, atomic_write_text, read_jsonl
from .loss import EngineLoss
from .masks import GoldfishConfig, config_mask, twin_input_ids
from .modelcard import write_training_card
from .models import build_model, count_parameters, flops_per_token, set_special_ids, transformers_bars
from .ownership import OutputFolder, fingerprint_sha256, is_main_process, writing
from .perf import MfuMeter
from .precision import announce, resolve_precision
from .provenance import refuse_mismatch, write_fingerprint
from .run_folder import TrainRun
from .tracking import Tracker
from .train_config import (
    TRAIN_OPTIONAL,
    OptimConfig,
    Plan,
    TrainConfig,
    goldfish_config,
    learning_rate,
    make_plan,
    saved_train_fingerprint,
    train_fingerprint,
    write_mask_settings,
)

# ------------------------------------------------------------------------------------------------ optimizer


def build_optimizer(params, optim: OptimConfig) -> torch.optim.Optimizer:
    """AdamW; matrices get weight decay, vectors (norms, biases) do not (nanoGPT's grouping).

    The fused kernel (one pass over all tensors, ~3x faster than the per-tensor loop on CPU) is used for plain
    tensors; sharded DTensor parameters (FSDP2/TP) keep PyTorch's default implementation.
    """

    params = [p for p in params if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": optim.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = all(not isinstance(p, DTensor) and p.device.type in ("cpu", "cuda") for p in params) or None
    return torch.optim.AdamW(groups, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps, fused=fused)


# ------------------------------------------------------------------------------------------------ data


def drop_mask(batch: dict[str, torch.Tensor], gcfg: GoldfishConfig | None) -> torch.Tensor:
    """(B, T) bool, True where Goldfish drops the target ``labels[:, t]``."""
    if gcfg is None:
        return torch.zeros_like(batch["labels"], dtype=torch.bool)
    return config_mask(batch["labels"], gcfg, document_ids=batch["document_ids"], position_ids=batch["position_ids"])


def step_batch(
    batch: dict[str, torch.Tensor], gcfg: GoldfishConfig | None, vocab_size: int | None
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The global batch as the model trains on it, and its drop mask (:func:`drop_mask`, from the original ids). For
    the no-leak twin (``goldfish.replace_dropped``) the dropped tokens are replaced in ``input_ids`` as well
    (:func:`goldfish.masks.twin_input_ids`): the model sees none of them; ``labels`` keep them, ignored by the loss
    (the drop mask), so the logged dropped loss is still the loss on the original tokens."""
    dropped = drop_mask(batch, gcfg)
    if gcfg is None or not gcfg.replace_dropped:
        return batch, dropped
    if vocab_size is None:
        raise UserError(
            "goldfish.replace_dropped needs the tokenizer's vocabulary size to draw replacement ids "
            "from; these training rows do not record it"
        )
    twin = twin_input_ids(
        batch["input_ids"],
        batch["labels"],
        dropped,
        gcfg,
        vocab_size,
        document_ids=batch["document_ids"],
        position_ids=batch["position_ids"],
    )
    return {**batch, "input_ids": twin}, dropped


def kept_targets(labels: torch.Tensor, dropped: torch.Tensor) -> int:
    """Number of targets the loss trains on (after the causal shift): supervised and not dropped."""
    return int(((labels[:, 1:] != -100) & ~dropped[:, 1:]).sum())


def micro_batches(
    batch: dict[str, torch.Tensor], dropped: torch.Tensor, plan: Plan, dp_rank: int
) -> list[dict[str, torch.Tensor]]:
    """This rank's shard of the global batch, split into micro-batches of ``plan.micro_batch`` rows (model inputs and
    the targets ``labels``/``drop_mask``; see :mod:`goldfish.engines.base`)."""
    per_rank = plan.global_batch // plan.dp_size
    shard = slice(dp_rank * per_rank, (dp_rank + 1) * per_rank)
    out = []
    for start in range(shard.start, shard.stop, plan.micro_batch):
        rows = slice(start, start + plan.micro_batch)
        out.append(
            {
                "input_ids": batch["input_ids"][rows],
                "labels": batch["labels"][rows],
                "position_ids": batch["position_ids"][rows],
                "drop_mask": dropped[rows],
            }
        )
    return out


def load_train_data(path: str):
    """The prepared folder (``goldfish.data.load_prepared``), its training rows (memory-mapped,
    :class:`goldfish.data.rows.TrainRows`) and the seq_len."""
    prepared = load_prepared(path)
    prepared.tokenizer_files()  # read and checked now: the tokenizer the model ships, whatever the folder becomes
    if len(prepared.train) == 0:
        raise UserError(f"prepared data {path} has an empty train split; prepare it again with more documents")
    prepared.train.vocab_size = int(prepared.manifest["tokenizer"]["vocab_size"])  # every batch's ids are checked
    return prepared, prepared.train, prepared.train.seq_len


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
    beside it and swapped in only when it has finished (model exported, summary written), so a failure or a kill at
    any moment leaves the old run whole; the same command after a kill continues the new run from its last
    checkpoint."""
    if replace and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UserError(
            "--overwrite replaces the run folder in one process only; under torchrun give a new out= "
            "folder (or delete the old run) instead"
        )
    started = time.perf_counter()
    if cfg.threads is not None:  # the command applies the default (goldfish.commands.train); a library call keeps
        apply_threads(cfg.threads)  # its process's setting unless the config names one
    prepared, rows, seq_len = load_train_data(cfg.data.path)  # fails fast, before joining any process group
    setting, cfg = cfg.precision, resolved(cfg)
    # a killed replacement continues
    staged = fingerprint_sha256(train_fingerprint(cfg, prepared.train_sha256, prepared.train_layout))
    with writing(cfg.out, "train", replace=replace, main=is_main_process(), resume=staged) as folder:
        # Goldfish reaches the engine only through the loss function
        engine = get_engine(cfg, EngineLoss(cfg.loss.ce_chunk_tokens))
        try:
            _same_precision_everywhere(cfg.precision)
            return _run(cfg, engine, prepared, rows, seq_len, folder, started, setting)
        finally:
            engine.close()


def resolved(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with ``precision: auto`` resolved for this machine (:func:`goldfish.precision.resolve_precision`):
    what the run folder's config, fingerprint and summary record. AxoNN runs bf16 only on CUDA."""
    device = default_device()
    return dataclasses.replace(cfg, precision=resolve_precision(cfg.precision, device, bf16_ok=_bf16_ok(cfg, device)))


def _same_precision_everywhere(precision: str) -> None:
    """Refuse a launch whose processes resolved ``precision: auto`` differently (nodes of different device classes):
    one launch computes in one precision (every rank would otherwise record a run it did not compute)."""

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, precision)
    if len(set(everyone)) > 1:
        ranks = {p: [r for r, q in enumerate(everyone) if q == p] for p in sorted(set(everyone))}
        raise UserError(
            "the processes of this launch resolved precision differently ("
            + ", ".join(f"{p} on ranks {r}" for p, r in ranks.items())
            + "): their devices are of different classes; set precision=fp32 or precision=bf16"
        )


def _bf16_ok(cfg: TrainConfig, device: torch.device) -> bool:
    """Whether the engine can compute in bf16 on ``device`` (AxoNN runs bf16 only on CUDA)."""
    return not (cfg.engine == "axonn" and device.type != "cuda")


def _process_rank() -> tuple[int, int]:

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _run(
    cfg: TrainConfig, engine: Engine, prepared, rows, seq_len: int, folder: OutputFolder, started: float, setting: str
) -> Path:
    out = folder.path  # a staging folder while replacing a run, until it has finished
    run = TrainRun(out)
    tok = prepared.manifest["tokenizer"]
    plan = make_plan(cfg.schedule, cfg.optim, len(rows), seq_len, engine.dp_size)
    rank, world = _process_rank()
    fingerprint = train_fingerprint(cfg, prepared.train_sha256, prepared.train_layout)
    refuse_mismatch(
        saved_train_fingerprint(out),
        fingerprint,
        f"the run in {out}",
        "rerun with the config it was made with (its config.yaml), or pass --fresh to start in a new "
        "folder, or --overwrite to replace it",
        TRAIN_OPTIONAL,
    )
    if run.finished():  # this run, finished
        if cfg.checkpoint.resume == "never":
            raise UserError(
                f"{out} already holds this run, finished; choose a new out= folder, or pass --overwrite "
                f"to train it again"
            )
        if engine.is_main:
            print(
                f"{folder.final} already holds this run, finished: nothing to train (--overwrite trains it again)",
                file=sys.stderr,
            )
        return folder.final
    resume = ckpt.find_resume(out, cfg.checkpoint.resume, rank, world)  # validated before anything is built
    if resume is not None:  # also a checkpoint of another folder (checkpoint.resume=<path>)
        refuse_mismatch(
            resume["trainer"].get("fingerprint"),
            fingerprint,
            f"checkpoint {resume['folder']}",
            "resume it with the config it was made with, or start a new run from its weights with "
            "model.path=<its run>/model and checkpoint.resume=never",
            TRAIN_OPTIONAL,
        )
    shape: dict[str, float] = {}
    data_tokenizer = prepared.tokenizer if cfg.model.path else None  # a fine-tune: the model's must be the same
    engine.setup(
        lambda: _build(cfg, tok, seq_len, shape, data_tokenizer), lambda params: build_optimizer(params, cfg.optim)
    )
    progress = _restore(engine, resume, plan) if resume is not None else Progress()
    announce(setting, engine.device, bf16_ok=_bf16_ok(cfg, engine.device))  # once the run is about to compute
    gcfg = goldfish_config(cfg, prepared)
    if engine.is_main:
        folder.mark(fingerprint_sha256(fingerprint))
        write_fingerprint(out, fingerprint)
        save_config(cfg, run.config)
        write_mask_settings(out, gcfg)
        _truncate_metrics(run.metrics, progress.step)
    meter = MfuMeter(shape["flops_per_token"], cfg.precision, engine.device, world, enabled=engine.is_main)
    orders = EpochOrders(len(rows), cfg.seed, cfg.data.shuffle)
    clock = _LineClock()
    with (
        JsonlLogger(run.metrics, enabled=engine.is_main) as log,
        _bar(cfg, engine, plan, progress) as bar,
        Tracker(cfg, engine.is_main, progress.step, out) as tracker,
    ):  # TensorBoard / W&B: the same records
        while progress.step < plan.total_steps:
            record = _train_step(cfg, engine, plan, rows, next_batch(plan, orders, progress), gcfg, progress, meter)
            log.log(record)
            tracker.log(record)
            _report(cfg, engine, bar, record, plan, clock)
            # the last step's weights are model/'s: checkpointed only to keep the optimizer
            last = progress.step == plan.total_steps
            if (last and cfg.checkpoint.keep_optimizer) or (
                not last and cfg.checkpoint.every_steps and progress.step % cfg.checkpoint.every_steps == 0
            ):
                _save(cfg, out, engine, plan, progress, rank, world, fingerprint)
            elif last:  # not checkpointed, but model/ exports these weights: the same check
                _check_finite(engine.state_dict(), progress)
    _finish(cfg, out, engine, prepared, plan, progress, shape, meter, started)
    if engine.is_main and not cfg.checkpoint.keep_optimizer:
        ckpt.finish_checkpoints(out, cfg.checkpoint.keep_last)
    return folder.final  # a replacement takes the old run's place when `writing` ends: after success only


def _check_ids(ids, vocab: int | None, folder) -> None:
    """One line when a row holds a token id outside the tokenizer's vocabulary (a damaged shard, or one written for
    another tokenizer): the embedding would fail with a device assertion or an index error instead."""
    if vocab is None or ids.numel() == 0:
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab:
        bad = high if high >= vocab else low
        raise UserError(
            f"the training rows of {folder} hold token id {bad}, outside the tokenizer's vocabulary of "
            f"{vocab} ids: a token shard is damaged or was written for another tokenizer; prepare the "
            f"data again (goldfish prepare ... --overwrite)"
        )


def _train_step(
    cfg: TrainConfig,
    engine: Engine,
    plan: Plan,
    rows,
    index: np.ndarray,
    gcfg: GoldfishConfig | None,
    progress: Progress,
    meter: MfuMeter,
) -> dict[str, Any]:
    """One optimizer step on the global batch of rows ``index``; returns its metrics record."""
    start = time.perf_counter()
    batch = take_rows(rows, index, plan.global_batch)  # dict of (G, T) int64 tensors
    _check_ids(batch["input_ids"], getattr(rows, "vocab_size", None), getattr(rows, "folder", "the prepared data"))
    batch, dropped = step_batch(batch, gcfg, getattr(rows, "vocab_size", None))  # dropped: (G, T) bool
    normalizer = kept_targets(batch["labels"], dropped)
    stats = engine.forward_backward(micro_batches(batch, dropped, plan, engine.dp_rank), normalizer)
    lr = learning_rate(progress.step, plan, cfg.optim)
    grad_norm = engine.optimizer_step(lr, cfg.optim.max_grad_norm)
    if not math.isfinite(stats.kept_loss) or not math.isfinite(grad_norm):
        raise UserError(
            f"training diverged at step {progress.step + 1} (loss {stats.kept_loss}, grad norm "
            f"{grad_norm}); lower optim.lr or set optim.max_grad_norm"
        )
    seconds = time.perf_counter() - start
    progress.step += 1
    progress.position += plan.global_batch
    progress.tokens += plan.tokens_per_step
    progress.elapsed += seconds
    return _record(stats, plan, progress, lr, grad_norm, seconds, meter)


def _record(
    stats: StepStats, plan: Plan, progress: Progress, lr: float, grad_norm: float, seconds: float, meter: MfuMeter
) -> dict[str, Any]:
    tokens_per_s = plan.tokens_per_step / seconds
    supervised = stats.kept_count + stats.dropped_count
    return {
        "step": progress.step,
        "epoch": round(progress.step / plan.steps_per_epoch, 4),
        "tokens": progress.tokens,
        # "loss" is the objective the step minimised, which is the loss on the kept targets: equal to kept_loss for
        # both losses (the standard loss keeps every target); the loss on all targets is not what was trained
        "loss": stats.kept_loss,
        "kept_loss": stats.kept_loss,
        "dropped_loss": stats.dropped_loss if stats.dropped_count else None,
        "kept_tokens": stats.kept_count,
        "dropped_tokens": stats.dropped_count,
        "dropped_frac": stats.dropped_count / supervised if supervised else 0.0,
        "lr": lr,
        "grad_norm": grad_norm,
        "step_time": seconds,
        "tokens_per_s": tokens_per_s,
        "mfu": meter.mfu(tokens_per_s),
    }


# ------------------------------------------------------------------------------------------------ helpers


def _build(
    cfg: TrainConfig, tok: dict[str, Any], seq_len: int, shape: dict[str, float], tokenizer=None
) -> torch.nn.Module:
    """Build (or load, checked against the data's ``tokenizer``) the model, give it the data's special ids, and note
    its size before any sharding."""
    model = set_special_ids(build_model(cfg.model, int(tok["vocab_size"]), cfg.seed, tokenizer), tok)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and seq_len > limit:
        raise UserError(
            f"prepared rows have {seq_len} tokens but the model's max_position_embeddings is {limit}; "
            f"set model.max_position_embeddings={seq_len} or prepare shorter rows"
        )
    shape["params"] = count_parameters(model)
    shape["flops_per_token"] = flops_per_token(model, seq_len)
    return model


def _bar(cfg: TrainConfig, engine: Engine, plan: Plan, progress: Progress):

    show = cfg.progress and engine.is_main
    return tqdm(
        total=plan.total_steps,
        initial=progress.step,
        desc="train",
        unit="step",
        dynamic_ncols=True,
        disable=None if show else True,
    )  # None: shown only on a terminal


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
    elif engine.is_main and (record["step"] % cfg.log_every == 0 or record["step"] == plan.total_steps or clock.due()):
        print(
            f"step {record['step']}/{plan.total_steps}  loss {record['loss']:.4f}  lr {record['lr']:.2e}  "
            f"grad_norm {record['grad_norm']:.3f}  tokens/s {record['tokens_per_s']:.0f}  "
            f"mfu {_percent(record['mfu'])}",
            flush=True,
        )


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _trainer_state(plan: Plan, progress: Progress, world: int, fingerprint: dict[str, Any]) -> dict[str, Any]:
    return {
        "step": progress.step,
        "progress": dataclasses.asdict(progress),
        "world_size": world,
        "rows": plan.rows,
        "seq_len": plan.seq_len,
        "global_batch_size": plan.global_batch,
        "total_steps": plan.total_steps,
        "fingerprint": fingerprint,
    }


def _save(
    cfg: TrainConfig,
    out: Path,
    engine: Engine,
    plan: Plan,
    progress: Progress,
    rank: int,
    world: int,
    fingerprint: dict[str, Any],
) -> None:
    """Checkpoint the step just taken, unless its weights are no longer finite: a step can turn them NaN or
    infinite with a finite loss (a learning rate far too large), and such weights are never saved, resumed from or
    exported."""
    state = engine.state_dict()
    _check_finite(state, progress)
    ckpt.save_checkpoint(
        out,
        _trainer_state(plan, progress, world, fingerprint),
        state,
        rank=rank,
        is_main=engine.is_main,
        barrier=engine.barrier,
        keep_last=cfg.checkpoint.keep_last,
    )


def _check_finite(state: dict[str, Any], progress: Progress) -> None:
    """One line when the weights are no longer finite (every rank agrees, so all stop together)."""
    if not ckpt.all_ranks(
        all(
            bool(torch.isfinite(t).all())
            for t in state["model"].values()
            if isinstance(t, torch.Tensor) and t.is_floating_point()
        )
    ):
        raise UserError(
            f"training diverged at step {progress.step}: the weights are no longer finite (NaN or "
            f"infinite) although the loss was; lower optim.lr or set optim.max_grad_norm"
        )


def _restore(engine: Engine, resume: dict[str, Any], plan: Plan) -> Progress:
    """Load model, optimizer and RNG states; the data order continues at the saved position."""
    saved = resume["trainer"]
    for key, now in (("rows", plan.rows), ("seq_len", plan.seq_len), ("global_batch_size", plan.global_batch)):
        if saved.get(key) != now:
            raise UserError(
                f"cannot resume: the checkpoint was trained with {key}={saved.get(key)} but this run "
                f"has {key}={now} (same data and batch size needed), or use a new out= folder"
            )
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
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))


def _finish(
    cfg: TrainConfig,
    out: Path,
    engine: Engine,
    prepared,
    plan: Plan,
    progress: Progress,
    shape: dict,
    meter: MfuMeter,
    started: float,
) -> None:
    """Export the model (+ tokenizer) in Hugging Face format and write ``summary.json``."""
    run = TrainRun(out)  # a staging folder while replacing a run
    final = TrainRun(cfg.out)  # where its files end up
    if engine.is_main:
        with (
            atomic_directory(run.model, overwrite=True) as tmp,
            transformers_bars(cfg.progress and sys.stderr.isatty()),
        ):  # bars on a terminal only, as ours
            engine.export_hf(tmp)  # a collective: the other ranks call it below
            prepared.copy_tokenizer(tmp)
    else:
        with transformers_bars(False):
            engine.export_hf(run.model)
    if not engine.is_main:
        return
    records = read_jsonl(run.metrics)
    last = records[-1] if records else {}
    exposures = member_exposures(prepared, consumed_rows(plan, cfg.seed, cfg.data.shuffle))
    steady = records[1:] or records  # the first step pays for allocations (and compilation)
    summary = {
        "steps": progress.step,
        "epochs": progress.step / plan.steps_per_epoch,
        "tokens": progress.tokens,
        "loss_type": cfg.loss.type,
        "final_kept_loss": last.get("kept_loss"),
        "final_dropped_loss": last.get("dropped_loss"),
        "dropped_frac": _mean(records, "dropped_frac"),
        "train_time_s": progress.elapsed,  # seconds inside optimizer steps, summed over every session of the run
        "wall_time_s": time.perf_counter() - started,  # this session, start to summary (loading, export included)
        "mean_tokens_per_s": _mean(steady, "tokens_per_s"),
        "mean_mfu": _mean(steady, "mfu"),
        "mfu_peak_flops": meter.peak,
        "mfu_peak_source": meter.peak_source,
        "mfu_unavailable": meter.unavailable,
        "precision": cfg.precision,
        "device": describe(engine.device),
        "params": int(shape["params"]),
        "flops_per_token": shape["flops_per_token"],
        "global_batch_size": plan.global_batch,
        "seq_len": plan.seq_len,
        "world_size": _process_rank()[1],
        "model": str(final.model),
        "config": str(final.config),  # where they end up
        "exposures": exposures,  # {labelled r: [min, max] times read}: r x epochs when the budget is whole epochs
    }
    write_training_card(run.model, cfg, summary, prepared.manifest, prepared.train_sha256)
    atomic_write_json(run.summary, summary)  # last: a run with a summary has its model card


def _mean(records: list[dict], key: str) -> float | None:
    values = [r[key] for r in records if r.get(key) is not None]
    return sum(values) / len(values) if values else None
