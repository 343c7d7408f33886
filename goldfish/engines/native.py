"""The native engine: PyTorch-native tensor x pipeline x data parallelism of a plain Hugging Face Llama causal LM.

One process: the model runs as is. Under ``torchrun`` the engine joins the process group (nccl on CUDA, gloo on CPU),
builds a ``DeviceMesh`` ``(pp, dp, tp)`` from ``parallel.*`` and applies, in this order (see
:mod:`goldfish.engines.parallelize`, one function per dimension):

* TP (``parallel.tp``): DTensor ``parallelize_module`` -- column-wise q/k/v/gate/up, row-wise o/down;
* PP (``parallel.pp``): this rank keeps one stage of decoder layers and runs ``ScheduleGPipe``/``Schedule1F1B``
  (``parallel.pp_schedule``), each trainer micro-batch split into ``parallel.pp_microbatches`` pipeline chunks;
  the Goldfish loss is computed on the last stage only;
* DP (the rest of the world): FSDP2 ``fully_shard`` (``parallel.fsdp=true``), else replicated weights: DDP when
  DP is the only dimension, otherwise one bucketed all-reduce of the gradients before the optimizer step.

Loss normalisation: every micro-batch backpropagates ``kept_sum / normalizer`` with ``normalizer`` the number of kept
targets in the *global* batch, and gradients are *summed* over data-parallel ranks, so every layout and any gradient
accumulation give the gradients of one process taking the whole batch.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
import torch.distributed as dist
from torch import nn

from ..errors import UserError
from . import parallelize as par
from .base import Engine, StepStats


def _local(t: Any) -> Any:
    """Plain tensors of this rank (DTensor -> local shard), detached, for per-rank checkpoint files."""
    if isinstance(t, torch.Tensor):
        return par.local_tensor(t).detach()
    if isinstance(t, dict):
        return {k: _local(v) for k, v in t.items()}
    if isinstance(t, (list, tuple)):
        return type(t)(_local(v) for v in t)
    return t


class NativeEngine(Engine):
    """Single-process, or any (pp, dp, tp) mesh of processes, training a plain Hugging Face causal LM."""

    name = "native"

    def __init__(self, cfg):
        self.cfg = cfg
        p = cfg.parallel
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
        self.pp_microbatches = p.pp_microbatches or p.pp
        self.micro_batch_rows = getattr(getattr(cfg, "schedule", None), "micro_batch_size", None)
        if cfg.compile and p.tp > 1:
            # compiled layers on DTensor shards fail in backward (DTensor redistribute gets a plain gradient,
            # torch 2.13); FSDP2, DDP and pipeline stages compile fine
            raise UserError("compile=true with parallel.tp>1 is not supported (compiled tensor-parallel layers fail "
                            "in backward); drop compile or use parallel.tp=1 with fsdp/pp")
        if p.fsdp_mixed_precision and (cfg.precision != "bf16" or not p.fsdp):
            raise UserError("parallel.fsdp_mixed_precision=true needs parallel.fsdp=true and precision=bf16; set "
                            "both or drop it")
        self.dims = par.check_layout(p.pp, p.dp, p.tp, self.world_size, schedule=p.pp_schedule,
                                     microbatches=self.pp_microbatches, micro_batch_rows=self.micro_batch_rows)
        self._owns_group = False
        self.mesh = None
        if self.world_size > 1:
            if not dist.is_initialized():
                if self.device.type == "cuda":
                    torch.cuda.set_device(self.device)
                dist.init_process_group(backend="nccl" if self.device.type == "cuda" else "gloo")
                self._owns_group = True
            self.mesh = par.build_mesh(self.dims, self.device.type)
        self.autocast_dtype = torch.bfloat16 if cfg.precision == "bf16" else None
        self.model: nn.Module | None = None  # this rank's stage (the whole model when pp=1), HF parameter names
        self._forward: nn.Module | None = None  # what runs the forward: the stage, or its DDP wrapper
        self.optimizer: torch.optim.Optimizer | None = None
        self.loss_fn = par.GoldfishStageLoss()
        self._pipe: Any = None
        self._pipe_key: tuple | None = None

    # ------------------------------------------------------------------------------------------ topology

    def _coord(self, dim: str) -> int:
        return self.mesh[dim].get_local_rank() if self.mesh is not None else 0

    def _group(self, dim: str) -> dist.ProcessGroup | None:
        """Process group of one mesh dimension, or None when that dimension has a single rank."""
        size = getattr(self.dims, dim)
        return self.mesh[dim].get_group() if self.mesh is not None and size > 1 else None

    @property
    def dp_rank(self) -> int:
        return self._coord("dp")

    @property
    def dp_size(self) -> int:
        return self.dims.dp

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_first_stage(self) -> bool:
        return self._coord("pp") == 0

    @property
    def is_last_stage(self) -> bool:
        return self._coord("pp") == self.dims.pp - 1

    @property
    def _ddp(self) -> bool:
        """Replicated DP through DDP: only when DP is the sole dimension (DDP takes no DTensors or PP stages)."""
        return self.dims.dp > 1 and not self.cfg.parallel.fsdp and self.dims.tp == 1 and self.dims.pp == 1

    @property
    def unwrapped(self) -> nn.Module:
        """This rank's module (a :class:`~goldfish.engines.parallelize.StageModule` with HF parameter names)."""
        return self.model

    # ------------------------------------------------------------------------------------------ setup

    def setup(self, build_model: Callable[[], nn.Module],
              build_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]) -> None:
        model = build_model()  # same seed on every rank -> the same initial weights everywhere
        p = self.cfg.parallel
        par.check_layout(p.pp, p.dp, p.tp, self.world_size, model.config, p.pp_schedule, self.pp_microbatches,
                         self.micro_batch_rows)
        self.model_class, self.model_config = type(model), model.config
        model.to(self.device).train()
        if self.dims.tp > 1:  # 1. tensor parallel
            par.apply_tp(model, self.mesh["tp"])
        stage = par.split_stage(model, self.mesh["pp"] if self.dims.pp > 1 else None)  # 2. pipeline stage
        stage.checkpoint_layers = self.cfg.activation_checkpointing
        if self.cfg.compile:
            par.compile_layers(stage)
        chunk = self.cfg.loss.ce_chunk_tokens
        stage.hidden_out = chunk > 0 and stage.lm_head is not None
        self.loss_fn = par.GoldfishStageLoss(stage.lm_head, chunk)
        self._forward = stage
        if self.dims.dp > 1 and p.fsdp:  # 3. data parallel
            par.apply_fsdp(stage, self.mesh["dp"], self._fsdp_mp_policy())
        elif self.dims.dp > 1 and self._ddp:
            self._forward = par.apply_ddp(stage, self.mesh["dp"], self.device)
        elif self.dims.dp > 1:
            par.log_main("applied replicated data parallelism (dp=%d): gradients all-reduced (sum) after backward",
                         self.dims.dp)
        # a weight tied across the first and last stage: two copies whose gradients are summed every step
        self._tied_group = par.tied_weight_group(self.mesh) if stage.split_tie else None
        self.model = stage
        self.optimizer = build_optimizer(stage.parameters())

    def _fsdp_mp_policy(self) -> Any:
        """bf16 all-gathers and fp32 reduce-scatters with ``parallel.fsdp_mixed_precision``, else FSDP2's default."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        if not self.cfg.parallel.fsdp_mixed_precision:
            return None
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)

    # ------------------------------------------------------------------------------------------ step

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def _model_kwargs(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``position_ids`` (B, T) and ``attention_mask`` (B, T) when the batch has them (packed or padded rows)."""
        kwargs = {}
        if mb.get("position_ids") is not None:
            kwargs["position_ids"] = mb["position_ids"].expand_as(mb["input_ids"]).contiguous()
        if mb.get("attention_mask") is not None:
            kwargs["attention_mask"] = mb["attention_mask"]
        return kwargs

    def forward_backward(self, micro_batches: list[dict[str, torch.Tensor]], normalizer: int) -> StepStats:
        self.loss_fn.reset(max(normalizer, 1))
        fsdp = self.dims.dp > 1 and self.cfg.parallel.fsdp
        for i, mb in enumerate(micro_batches):
            mb = {k: v.to(self.device, non_blocking=True) for k, v in mb.items() if v is not None}
            target = par.pack_targets(mb["labels"], mb["drop_mask"])  # (B, T, 2)
            if self.dims.pp > 1:
                self._pipeline_step(mb, target)
                continue
            last = i == len(micro_batches) - 1
            if fsdp:  # reduce-scatter once, after the last micro-batch
                self.model.set_requires_gradient_sync(last)
            sync = self._forward.no_sync() if self._ddp and not last else contextlib.nullcontext()
            with sync:
                with self._autocast():
                    logits = self._forward(mb["input_ids"], **self._model_kwargs(mb))  # (B, T, V)
                self.loss_fn(logits, target).backward()
        per_step = len(micro_batches) * (self.pp_microbatches if self.dims.pp > 1 else 1)
        totals = self.loss_fn.stats(per_step).to(self.device)  # zeros except on the last stage
        for dim in ("pp", "dp"):
            if (group := self._group(dim)) is not None:
                dist.all_reduce(totals, group=group)
        kept_sum, kept_count, dropped_sum, dropped_count = totals.tolist()
        return StepStats(kept_sum, int(kept_count), dropped_sum, int(dropped_count))

    def _pipeline_step(self, mb: dict[str, torch.Tensor], target: torch.Tensor) -> None:
        """One schedule step over ``pp_microbatches`` chunks of this micro-batch (a new pipeline when shapes change,
        since stages infer their send/receive shapes on the first step)."""
        rows, n = mb["input_ids"].shape[0], self.pp_microbatches
        if rows % n:
            raise UserError(f"parallel.pp_microbatches={n} must divide the rows of each micro-batch ({rows}); "
                            f"set schedule.micro_batch_size to a multiple of {n} or change parallel.pp_microbatches")
        kwargs = self._model_kwargs(mb)
        key = (tuple(mb["input_ids"].shape), tuple(sorted(kwargs)))
        if key != self._pipe_key:
            self._pipe = par.build_pipeline(self.model, self.mesh["pp"], self.cfg.parallel.pp_schedule, n,
                                            self.loss_fn, self.device)
            self._pipe_key = key
        args = (mb["input_ids"],) if self.is_first_stage else ()
        with self._autocast():
            self._pipe.step(*args, target=target if self.is_last_stage else None, return_outputs=False, **kwargs)

    def optimizer_step(self, lr: float, max_grad_norm: float | None) -> float:
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        if self.dims.dp > 1 and not self.cfg.parallel.fsdp and not self._ddp:
            par.allreduce_gradients(params, self._group("dp"))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        par.sync_tied_gradients(self.model.tied_weight, self._tied_group)
        norm = par.clip_grad_norm_(params, max_grad_norm, self._group("pp"), self.model.norm_duplicate)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    # ------------------------------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        return {"model": _local(self.model.state_dict()), "optimizer": _local(self.optimizer.state_dict())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        model_state = self.model.state_dict()
        missing = sorted(set(model_state) - set(state["model"]))
        if missing:
            raise UserError(f"checkpoint does not match this rank's model: missing {len(missing)} tensors, e.g. "
                            f"{missing[0]} (different model or parallel layout)")
        with torch.no_grad():
            for name, tensor in model_state.items():
                target, saved = par.local_tensor(tensor), state["model"][name]
                if target.shape != saved.shape:
                    raise UserError(f"checkpoint tensor {name} has shape {tuple(saved.shape)} but this rank expects "
                                    f"{tuple(target.shape)} (different model or parallel layout)")
                target.copy_(saved)
        self.optimizer.load_state_dict(self._as_param_layout(state["optimizer"]))

    def _as_param_layout(self, opt_state: dict[str, Any]) -> dict[str, Any]:
        """Re-wrap per-rank optimizer tensors as DTensors laid out like their (TP/FSDP) parameters."""
        from torch.distributed.tensor import DTensor

        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        state = {}
        for index, entries in opt_state["state"].items():
            p = params[int(index)]
            state[index] = {
                k: DTensor.from_local(v.to(self.device), p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
                if isinstance(p, DTensor) and isinstance(v, torch.Tensor) and v.dim() > 0 else v
                for k, v in entries.items()
            }
        return {"state": state, "param_groups": opt_state["param_groups"]}

    def export_hf(self, out_dir: Path) -> None:
        from torch.distributed.tensor import DTensor

        # full tensors of this stage: a collective over the tp and dp ranks that share it
        state = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu()
                 for k, v in self.model.state_dict().items()}
        if self.dims.pp > 1 and self._coord("dp") == 0 and self._coord("tp") == 0:
            stages: list[Any] | None = [None] * self.dims.pp if self.is_main else None
            dist.gather_object(state, stages, dst=0, group=self._group("pp"))  # global rank 0 = stage 0
            state = {k: v for s in stages for k, v in s.items()} if self.is_main else {}
        if self.is_main:
            with torch.random.fork_rng(devices=[]):  # a fresh HF skeleton, without moving the training RNG
                model = self.model_class(self.model_config)
            model.load_state_dict(state, strict=True)
            model.save_pretrained(str(out_dir), safe_serialization=True)
        self.barrier()

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def close(self) -> None:
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_group = False
