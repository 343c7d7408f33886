"""Atomic checkpoints with exact resume.

Layout::

    <out>/checkpoints/step_000123/
        model_rank00000.safetensors       every flat {name: tensor} entry of engine.state_dict(), per rank
        optimizer_rank00000.pt            everything else (torch.save; read back with weights_only=True)
        rng_rank00000.safetensors         torch CPU (and CUDA) generator states of that rank
        rng_rank00000.json                Python and NumPy generator states of that rank
        trainer_state.json                step, epoch, position in the epoch, tokens seen, world size
        COMPLETE                          written last
        WEIGHTS_ONLY                      in a finished run's checkpoints: the optimizer state was removed

A finished run keeps its model, not its optimizer state (:func:`finish_checkpoints`, unless
``checkpoint.keep_optimizer``): the final step is not checkpointed (``model/`` holds those weights), and the
checkpoints before it keep their weights (for a checkpoint series) without the optimizer state -- 2/3 of a checkpoint
with AdamW.

A checkpoint is assembled in ``.step_000123.tmp`` and renamed into place only after every rank has written its files
and ``COMPLETE`` exists, so a kill at any moment leaves either no new checkpoint or a complete one; older checkpoints
are never modified (pruning renames a folder away before deleting it). Loading never unpickles code: tensors come
from safetensors, the rest from ``torch.load(weights_only=True)`` and JSON.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM

from .errors import UserError
from .io import atomic_directory, atomic_write_json, atomic_write_text, fsync_dir, remove_tree
from .models import check_claimed_size
from .run_folder import TrainRun

# what a full disk or a failing device raises while writing: the OS, torch.save's zip writer
# ("[enforce fail at inline_container.cc] ... file write failed"), safetensors (its own error type)
_WRITE_ERRORS = (OSError, RuntimeError, SafetensorError)

COMPLETE = "COMPLETE"
WEIGHTS_ONLY = "WEIGHTS_ONLY"
STATE_FILE = "trainer_state.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")


class BrokenCheckpoint(UserError):
    """A checkpoint that is incomplete or damaged (``resume: auto`` skips it and falls back to an older one)."""


def checkpoints_root(out: str | Path) -> Path:
    return TrainRun(out).checkpoints


def checkpoint_path(out: str | Path, step: int) -> Path:
    """``<out>/checkpoints/step_000123``."""
    return checkpoints_root(out) / f"step_{step:06d}"


def list_checkpoints(out: str | Path) -> list[Path]:
    """Checkpoint folders (complete or not), oldest step first."""
    root = checkpoints_root(out)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))]
    return [p for _, p in sorted(found)]


# ------------------------------------------------------------------------------------------------ RNG state


def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """This process's generator states: torch (as tensors) and Python/NumPy (as JSON values)."""
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["torch_cuda"] = torch.cuda.get_rng_state()
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    plain = {"python": [version, list(internal), gauss], "numpy": [name, keys.tolist(), pos, has_gauss, cached]}
    return tensors, plain


def set_rng_state(tensors: dict[str, torch.Tensor], plain: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(tensors["torch_cpu"])
    if "torch_cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["torch_cuda"])
    version, internal, gauss = plain["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = plain["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


# ------------------------------------------------------------------------------------------------ save


def _is_tensor_map(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())
    )


def _unshared(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous CPU copies safetensors accepts: tensors sharing storage (tied weights) are cloned apart."""
    seen: set[tuple[int, int]] = set()
    out = {}
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        out[name] = t.clone() if key in seen else t
        seen.add(key)
    return out


def write_rank_files(folder: Path, rank: int, engine_state: dict[str, Any]) -> None:
    """Write one rank's engine state and RNG states into ``folder`` (which the caller created)."""

    for key, value in engine_state.items():
        stem = folder / f"{key}_rank{rank:05d}"
        if _is_tensor_map(value):
            save_file(_unshared(value), str(stem) + ".safetensors")
        else:
            torch.save(value, str(stem) + ".pt")
    tensors, plain = rng_state()
    save_file(_unshared(tensors), str(folder / f"rng_rank{rank:05d}.safetensors"))
    atomic_write_json(folder / f"rng_rank{rank:05d}.json", plain, indent=None)
    for f in folder.glob(f"*_rank{rank:05d}.*"):  # durability before COMPLETE is written
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())


def save_checkpoint(
    out: str | Path,
    trainer_state: dict[str, Any],
    engine_state: dict[str, Any],
    *,
    rank: int,
    is_main: bool,
    barrier: Callable[[], None],
    keep_last: int = 0,
) -> Path:
    """Write a checkpoint of step ``trainer_state['step']`` atomically; all ranks call it (it synchronises)."""
    final = checkpoint_path(out, trainer_state["step"])
    tmp = final.with_name(f".{final.name}.tmp")
    if is_main:
        shutil.rmtree(tmp, ignore_errors=True)  # debris of a run killed while saving
        tmp.mkdir(parents=True)
    barrier()
    try:
        write_rank_files(tmp, rank, engine_state)
        barrier()
        if is_main:
            atomic_write_json(tmp / STATE_FILE, trainer_state)
            atomic_write_text(tmp / COMPLETE, f"step {trainer_state['step']}\n")
    except _WRITE_ERRORS as e:
        if is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(
            f"could not write checkpoint {final} ({_reason(e)}); free disk space (or choose another "
            f"out=) and rerun to resume: the earlier checkpoints are intact"
        ) from None
    if is_main:
        if final.exists():  # same step written again (a run restarted with resume=never): swap, then delete
            remove_tree(final)
        os.replace(tmp, final)
        fsync_dir(final.parent)  # the rename is what publishes the checkpoint: make it durable
        prune(out, keep_last)
    barrier()
    return final


def _reason(e: BaseException) -> str:
    """What went wrong writing, in a few words: the OS's reason, or the first line of a library's message."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e).splitlines()[0][:120] if str(e) else type(e).__name__


def finish_checkpoints(out: str | Path, keep_last: int) -> None:
    """A finished run's checkpoints without their optimizer state: its final ``model/`` counts as the newest of the
    ``keep_last`` kept (0: all), so the ``keep_last - 1`` newest complete checkpoints before it keep their weights and
    lose the optimizer state (marked ``WEIGHTS_ONLY`` first, so a kill half-way leaves a checkpoint that says what it
    is) and older ones are deleted."""
    complete = [p for p in list_checkpoints(out) if (p / COMPLETE).is_file()]
    kept = complete if keep_last <= 0 else complete[len(complete) - keep_last + 1 :] if keep_last > 1 else []
    for folder in complete:
        if folder not in kept:
            remove_tree(folder)
    for folder in kept:
        atomic_write_text(
            folder / WEIGHTS_ONLY,
            "the run finished: model weights kept, optimizer state removed (checkpoint.keep_optimizer=false)\n",
        )
        for f in folder.glob("optimizer_rank*.pt"):
            f.unlink()
        fsync_dir(folder)


def prune(out: str | Path, keep_last: int) -> None:
    """Keep the newest ``keep_last`` complete checkpoints (0: keep all); incomplete folders are left for inspection."""
    if keep_last <= 0:
        return
    complete = [p for p in list_checkpoints(out) if (p / COMPLETE).is_file()]
    for folder in complete[:-keep_last]:
        remove_tree(folder)


# ------------------------------------------------------------------------------------------------ load


def _read_rank_files(folder: Path, rank: int) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, Any]]:

    engine_state: dict[str, Any] = {}
    rng_tensors: dict[str, torch.Tensor] = {}
    suffix = f"_rank{rank:05d}"
    files = sorted(folder.glob(f"*{suffix}.*"))
    if not files:
        raise BrokenCheckpoint(f"checkpoint {folder} has no files for rank {rank}; resume from an earlier one")
    for f in files:
        key = f.name[: f.name.index(suffix)]
        try:
            if f.suffix == ".safetensors":
                value = load_file(str(f))
            elif f.suffix == ".pt":
                value = torch.load(str(f), map_location="cpu", weights_only=True)
            else:
                continue
        except Exception as e:  # truncated / garbled files: safetensors and torch raise various types
            raise BrokenCheckpoint(
                f"checkpoint file {f} is corrupt ({type(e).__name__}); delete {folder} or "
                f"resume from another checkpoint"
            ) from None
        if key == "rng":
            rng_tensors = value
        else:
            engine_state[key] = value
    rng_plain = _read_json(folder / f"rng{suffix}.json")
    _check_rng(folder / f"rng{suffix}.json", rng_tensors, rng_plain)
    return engine_state, rng_tensors, rng_plain


def _check_rng(path: Path, tensors: dict[str, torch.Tensor], plain: dict[str, Any]) -> None:
    """Refuse generator states that would fail only when restored (after the model was loaded): each is set on a
    scratch generator here."""
    try:
        version, internal, gauss = plain["python"]
        random.Random().setstate((version, tuple(internal), gauss))
        name, keys, pos, has_gauss, cached = plain["numpy"]
        np.random.RandomState().set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
        torch.Generator().set_state(tensors["torch_cpu"])
    except Exception as e:  # wrong shapes, types or lengths: KeyError, TypeError, ValueError, RuntimeError...
        raise BrokenCheckpoint(
            f"checkpoint file {path} is damaged (its generator states do not load: {type(e).__name__})"
        ) from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BrokenCheckpoint(f"checkpoint file {path} is missing; the checkpoint is incomplete") from None
    except (ValueError, UnicodeDecodeError):
        raise BrokenCheckpoint(f"checkpoint file {path} is corrupt (not JSON)") from None
    if not isinstance(value, dict):
        raise BrokenCheckpoint(f"checkpoint file {path} is corrupt (not a JSON object)")
    return value


def _check_trainer_state(folder: Path, state: dict[str, Any]) -> None:
    """Refuse a trainer state whose step or progress is not what a checkpoint of that step records."""
    progress = state.get("progress")
    numbers = isinstance(progress, dict) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in progress.values()
    )
    step = state.get("step")
    if (
        not numbers
        or not isinstance(step, int)
        or progress.get("step") != step
        or _STEP_DIR.match(folder.name)
        and int(_STEP_DIR.match(folder.name).group(1)) != step
    ):
        raise BrokenCheckpoint(
            f"checkpoint file {folder / STATE_FILE} is damaged (its step and progress are not a "
            f"checkpoint's of {folder.name})"
        )


def read_checkpoint(folder: str | Path, rank: int, world_size: int) -> dict[str, Any]:
    """Read and validate one rank's view of a checkpoint: ``{"trainer", "engine", "rng_tensors", "rng_plain",
    "folder"}``.

    Raises a one-line :class:`UserError` for a missing, incomplete, corrupt or incompatible checkpoint; nothing is
    applied to the model yet, so a failure here leaves the run untouched.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(
            f"checkpoint {folder} does not exist (checkpoint.resume takes auto, never or a checkpoint "
            f"folder such as runs/x/checkpoints/step_000100)"
        )
    if not (folder / COMPLETE).is_file():
        raise BrokenCheckpoint(f"checkpoint {folder} is incomplete (no {COMPLETE} marker); resume from an earlier one")
    if (folder / WEIGHTS_ONLY).is_file():
        raise UserError(
            f"checkpoint {folder} holds model weights only (its run finished and dropped the optimizer "
            f"state; checkpoint.keep_optimizer=true keeps it): it cannot be resumed; start a new run from "
            f"its weights (model.path=<its run>/model)"
        )
    trainer = _read_json(folder / STATE_FILE)
    _check_trainer_state(folder, trainer)
    if trainer.get("world_size") != world_size:
        raise UserError(
            f"checkpoint {folder} was written by {trainer.get('world_size')} processes but this run has "
            f"{world_size}; resume with the same number of processes"
        )
    engine, rng_tensors, rng_plain = _read_rank_files(folder, rank)
    return {"trainer": trainer, "engine": engine, "rng_tensors": rng_tensors, "rng_plain": rng_plain, "folder": folder}


def all_ranks(ok: bool) -> bool:
    """True only if ``ok`` holds on every rank (so all ranks fall back to the same checkpoint)."""

    if not (dist.is_available() and dist.is_initialized()):
        return ok
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    flag = torch.tensor([1 if ok else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def find_resume(out: str | Path, resume: str, rank: int, world_size: int) -> dict[str, Any] | None:
    """The checkpoint to resume from per ``checkpoint.resume``, read and validated, or ``None`` to start fresh.

    ``auto``: the newest checkpoint that every rank can read; broken ones are skipped with a warning, and an error
    is raised if checkpoints exist but none is readable (rather than silently starting over).
    ``never``: start fresh (refused if ``out`` already holds checkpoints, so nothing is overwritten).
    A path: exactly that checkpoint; any problem is an error.
    """
    existing = list_checkpoints(out)
    if resume == "never":
        if existing:
            raise UserError(
                f"{checkpoints_root(out)} already holds checkpoints; use checkpoint.resume=auto to "
                f"continue that run, or choose a new out= folder"
            )
        return None
    if resume != "auto":
        return read_checkpoint(resume, rank, world_size)
    for folder in reversed(existing):
        try:
            found, problem = read_checkpoint(folder, rank, world_size), None
        except BrokenCheckpoint as e:
            found, problem = None, str(e)
        if all_ranks(found is not None):
            return found
        if rank == 0:
            print(f"warning: skipping checkpoint {folder}: {problem or 'unreadable on another rank'}", file=sys.stderr)
    if existing:
        raise UserError(
            f"no readable checkpoint in {checkpoints_root(out)}; pass --overwrite to train the run again "
            f"from the start (the old folder stays until the new run has finished), or delete the broken "
            f"checkpoints, or choose a new out= folder"
        )
    return None


def restore_rng(checkpoint: dict[str, Any]) -> None:
    """Put back the generator states saved with the checkpoint."""
    set_rng_state(checkpoint["rng_tensors"], checkpoint["rng_plain"])


# ------------------------------------------------------------------------------------------------ export

# module-path pieces that wrappers insert into state-dict keys (torch.compile, activation checkpointing, FSDP)
_WRAPPER_PARTS = ("_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")


def checkpoint_weights(folder: str | Path) -> dict[str, torch.Tensor]:
    """The model tensors of a complete one-process checkpoint (``model_rank00000.safetensors``), with wrapper
    prefixes removed from their names; a sharded or incomplete checkpoint is one :class:`UserError`."""

    folder = Path(folder)
    if not (folder / COMPLETE).is_file():
        raise BrokenCheckpoint(f"checkpoint {folder} is incomplete (no {COMPLETE} marker); use a complete one")
    world = _read_json(folder / STATE_FILE).get("world_size")
    if world != 1:
        raise UserError(
            f"checkpoint {folder} holds {world} processes' shards; exporting it needs a one-process "
            "checkpoint (or evaluate the run's final model/)"
        )
    try:
        tensors = load_file(str(folder / "model_rank00000.safetensors"))
    except Exception as e:  # missing, truncated or garbled: safetensors raises various types
        raise BrokenCheckpoint(f"checkpoint model file in {folder} is unreadable ({type(e).__name__})") from None
    out = {}
    for name, tensor in tensors.items():
        for part in _WRAPPER_PARTS:
            name = name.replace(part, "")
        out[name] = tensor
    return out


def export_checkpoint(folder: str | Path, model_dir: str | Path, out: str | Path) -> Path:
    """Write the weights of checkpoint ``folder`` as a Hugging Face folder ``out`` (safetensors), with the config,
    generation config and tokenizer of ``model_dir`` (the run's exported ``model/``, same shape). Tensors are
    loaded by name into the architecture that config names (strict: every tensor must match), never unpickled."""

    model_dir, out = Path(model_dir), Path(out)
    if not (model_dir / "config.json").is_file():
        raise UserError(
            f"{model_dir} has no config.json: a checkpoint is exported with the shape of its run's final "
            "model/, which an unfinished run does not have yet"
        )
    config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True, trust_remote_code=False)
    state = checkpoint_weights(folder)
    check_claimed_size(config, sum(t.numel() for t in state.values()), f"{model_dir} (with checkpoint {folder})")
    with torch.random.fork_rng(devices=[]):  # the skeleton's random init is overwritten; keep the caller's RNG
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    missing = sorted(set(model.state_dict()) - set(state))
    if missing:
        raise UserError(
            f"checkpoint {folder} does not match the model of {model_dir}: {len(missing)} tensors "
            f"missing, e.g. {missing[0]}"
        )
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise UserError(
            f"checkpoint {folder} does not match the model of {model_dir}: {str(e).splitlines()[0][:200]}"
        ) from None
    with atomic_directory(out, overwrite=True) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        for f in model_dir.iterdir():  # tokenizer files (and the generation config the run saved)
            weights = ("config.json", "model.safetensors.index.json")
            if f.is_file() and f.suffix != ".safetensors" and f.name not in weights:
                shutil.copy2(f, tmp / f.name)
    return out
