"""The native engine: PyTorch-native tensor x pipeline x data parallelism of a plain Hugging Face Llama causal LM.

One process: the model runs as is. Under ``torchrun`` the engine joins the process group (nccl on CUDA, gloo on CPU),
builds a ``DeviceMesh`` ``(pp, dp, tp)`` from ``parallel.*`` and applies, in this order (see
:mod:`goldfish.engines.parallelize`, one function per dimension):

* TP (``parallel.tp``): DTensor ``parallelize_module`` -- column-wise q/k/v/gate/up, row-wise o/down;
* PP (``parallel.pp``): this rank keeps one stage of decoder layers and runs ``ScheduleGPipe``/``Schedule1F1B``
  (``parallel.pp_schedule``), each trainer micro-batch split into ``parallel.pp_microbatches`` pipeline chunks;
  the injected loss function runs on the last stage only;
* DP (the rest of the world): FSDP2 ``fully_shard`` (``parallel.fsdp=true``), else replicated weights: DDP when
  DP is the only dimension, otherwise one bucketed all-reduce of the gradients before the optimizer step.

Loss normalisation: every micro-batch backpropagates ``kept_sum / normalizer`` with ``normalizer`` the number of kept
targets in the *global* batch, and gradients are *summed* over data-parallel ranks, so every layout and any gradient
accumulation give the gradients of one process taking the whole batch.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from ..errors import UserError
from ..train_config import ParallelConfig
from . import parallelize as par
from .base import Engine, Layout, LossFn, StepStats, split_targets


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
    section = "parallel"

    def __init__(
        self,
        parallel: ParallelConfig,
        precision: str,
        loss_fn: LossFn,
        *,
        compile: bool = False,
        activation_checkpointing: bool = False,
    ):
        super().__init__(precision, loss_fn)
        self.parallel = p = parallel
        self.pp_microbatches = p.pp_microbatches or p.pp
        if compile and p.tp > 1:
            # compiled layers on DTensor shards fail in backward (DTensor redistribute gets a plain gradient,
            # torch 2.13); FSDP2, DDP and pipeline stages compile fine
            raise UserError(
                "compile=true with parallel.tp>1 is not supported (compiled tensor-parallel layers fail "
                "in backward); drop compile or use parallel.tp=1 with fsdp/pp"
            )
        if p.fsdp_mixed_precision and (precision != "bf16" or not p.fsdp):
            raise UserError(
                "parallel.fsdp_mixed_precision=true needs parallel.fsdp=true and precision=bf16; set both or drop it"
            )
        self.compile, self.activation_checkpointing = compile, activation_checkpointing
        self.dims = par.parallel_dims(
            p.pp, p.dp, p.tp, self.world_size, schedule=p.pp_schedule, microbatches=self.pp_microbatches
        )
        self.mesh = None
        if self.world_size > 1:
            self.join_process_group()
            self.mesh = par.build_mesh(self.dims, self.device.type)
        self.model: nn.Module | None = None  # this rank's stage (the whole model when pp=1), HF parameter names
        self._forward: nn.Module | None = None  # what runs the forward: the stage, or its DDP wrapper
        self.optimizer: torch.optim.Optimizer | None = None
        self.stage_loss = par.StageLoss(loss_fn)  # rebuilt in setup with the last stage's lm_head
        self._pipe: Any = None
        self._pipe_key: tuple | None = None

    @classmethod
    def layout_for(
        cls, section: ParallelConfig, world_size: int, model_config: Any = None, micro_batch_size: int | None = None
    ) -> Layout:
        """The (pp, dp, tp) mesh: TP shards layer matrices and activations (embedding and untied head stay
        replicated), FSDP shards all state over dp, pipeline stages hold a share of the layers and of the chunks."""
        p = section
        chunks = p.pp_microbatches or p.pp
        dims = par.parallel_dims(p.pp, p.dp, p.tp, world_size, model_config, p.pp_schedule, chunks, micro_batch_size)
        in_flight = (min(dims.pp, chunks) if p.pp_schedule == "1f1b" else chunks) / chunks if dims.pp > 1 else 1.0
        return Layout(
            world=world_size,
            dp=dims.dp,
            pp=dims.pp,
            weight_shard=dims.tp,
            activation_shard=dims.tp,
            state_shard=dims.dp if p.fsdp else 1,
            activation_fraction=in_flight,
            description=f"native tp={dims.tp} pp={dims.pp} dp={dims.dp}" + (" fsdp" if p.fsdp else ""),
        )

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
    def is_first_stage(self) -> bool:
        return self._coord("pp") == 0

    @property
    def is_last_stage(self) -> bool:
        return self._coord("pp") == self.dims.pp - 1

    @property
    def _ddp(self) -> bool:
        """Replicated DP through DDP: only when DP is the sole dimension (DDP takes no DTensors or PP stages)."""
        return self.dims.dp > 1 and not self.parallel.fsdp and self.dims.tp == 1 and self.dims.pp == 1

    # ------------------------------------------------------------------------------------------ setup

    def setup(
        self,
        build_model: Callable[[], nn.Module],
        build_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer],
    ) -> None:
        model = build_model()  # same seed on every rank -> the same initial weights everywhere
        p = self.parallel
        par.parallel_dims(p.pp, p.dp, p.tp, self.world_size, model.config, p.pp_schedule, self.pp_microbatches)
        self.model_class, self.model_config = type(model), model.config
        model.to(self.device).train()
        if self.dims.tp > 1:  # 1. tensor parallel
            par.apply_tp(model, self.mesh["tp"])
        stage = par.split_stage(model, self.mesh["pp"] if self.dims.pp > 1 else None)  # 2. pipeline stage
        stage.checkpoint_layers = self.activation_checkpointing
        if self.compile:
            par.compile_layers(stage)
        # a loss asking for hidden states (chunked CE) gets the last stage's final-norm output and its lm_head
        self.stage_loss = par.StageLoss(self.loss_fn, stage.lm_head)
        stage.hidden_out = self.stage_loss.head is not None
        self._forward = stage
        if self.dims.dp > 1 and p.fsdp:  # 3. data parallel
            par.apply_fsdp(stage, self.mesh["dp"], self._fsdp_mp_policy())
        elif self.dims.dp > 1 and self._ddp:
            self._forward = par.apply_ddp(stage, self.mesh["dp"], self.device)
        elif self.dims.dp > 1:
            par.log_main(
                "applied replicated data parallelism (dp=%d): gradients all-reduced (sum) after backward", self.dims.dp
            )
        # a weight tied across the first and last stage: two copies whose gradients are summed every step
        self._tied_group = par.tied_weight_group(self.mesh) if stage.split_tie else None
        self.model = stage
        self.optimizer = build_optimizer(stage.parameters())

    def _fsdp_mp_policy(self) -> Any:
        """bf16 all-gathers and fp32 reduce-scatters with ``parallel.fsdp_mixed_precision``, else FSDP2's default."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        if not self.parallel.fsdp_mixed_precision:
            return None
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)

    # ------------------------------------------------------------------------------------------ step

    def _model_kwargs(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``position_ids`` (B, T) and ``attention_mask`` (B, T) when the batch has them (packed or padded rows)."""
        kwargs = {}
        if mb.get("position_ids") is not None:
            kwargs["position_ids"] = mb["position_ids"].expand_as(mb["input_ids"]).contiguous()
        if mb.get("attention_mask") is not None:
            kwargs["attention_mask"] = mb["attention_mask"]
        return kwargs

    def forward_backward(self, micro_batches: list[dict[str, torch.Tensor]], normalizer: int) -> StepStats:
        self.stage_loss.reset(max(normalizer, 1))
        fsdp = self.dims.dp > 1 and self.parallel.fsdp
        for i, mb in enumerate(micro_batches):
            mb = {k: v.to(self.device, non_blocking=True) for k, v in mb.items() if v is not None}
            target = self.stage_loss.pack(split_targets(mb))  # (B, T, K): labels, drop_mask, ...
            if self.dims.pp > 1:
                self._pipeline_step(mb, target)
                continue
            last = i == len(micro_batches) - 1
            if fsdp:  # reduce-scatter once, after the last micro-batch
                self.model.set_requires_gradient_sync(last)
            sync = self._forward.no_sync() if self._ddp and not last else contextlib.nullcontext()
            with sync:
                with self.autocast():
                    logits = self._forward(mb["input_ids"], **self._model_kwargs(mb))  # (B, T, V)
                self.stage_loss(logits, target).backward()
        per_step = len(micro_batches) * (self.pp_microbatches if self.dims.pp > 1 else 1)
        totals = self.stage_loss.stats(per_step).to(self.device)  # zeros except on the last stage
        for dim in ("pp", "dp"):
            if (group := self._group(dim)) is not None:
                dist.all_reduce(totals, group=group)
        return StepStats.from_vector(totals)

    def _pipeline_step(self, mb: dict[str, torch.Tensor], target: torch.Tensor) -> None:
        """One schedule step over ``pp_microbatches`` chunks of this micro-batch (a new pipeline when shapes change,
        since stages infer their send/receive shapes on the first step)."""
        rows, n = mb["input_ids"].shape[0], self.pp_microbatches
        if rows % n:
            raise UserError(
                f"parallel.pp_microbatches={n} must divide the rows of each micro-batch ({rows}); "
                f"set schedule.micro_batch_size to a multiple of {n} or change parallel.pp_microbatches"
            )
        kwargs = self._model_kwargs(mb)
        key = (tuple(mb["input_ids"].shape), tuple(sorted(kwargs)))
        if key != self._pipe_key:
            self._pipe = par.build_pipeline(
                self.model, self.mesh["pp"], self.parallel.pp_schedule, n, self.stage_loss, self.device
            )
            self._pipe_key = key
        args = (mb["input_ids"],) if self.is_first_stage else ()
        with self.autocast():
            self._pipe.step(*args, target=target if self.is_last_stage else None, return_outputs=False, **kwargs)

    def optimizer_step(self, lr: float, max_grad_norm: float | None) -> float:
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        if self.dims.dp > 1 and not self.parallel.fsdp and not self._ddp:
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
        self.load_model_state(self.model, state["model"])
        self.optimizer.load_state_dict(self._as_param_layout(state["optimizer"]))

    def _as_param_layout(self, opt_state: dict[str, Any]) -> dict[str, Any]:
        """Re-wrap per-rank optimizer tensors as DTensors laid out like their (TP/FSDP) parameters."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        state = {}
        for index, entries in opt_state["state"].items():
            p = params[int(index)]
            state[index] = {
                k: DTensor.from_local(v.to(self.device), p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
                if isinstance(p, DTensor) and isinstance(v, torch.Tensor) and v.dim() > 0
                else v
                for k, v in entries.items()
            }
        return {"state": state, "param_groups": opt_state["param_groups"]}

    def export_hf(self, out_dir: Path) -> None:
        # full tensors of this stage: a collective over the tp and dp ranks that share it
        state = {
            k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu()
            for k, v in self.model.state_dict().items()
        }
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
