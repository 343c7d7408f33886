"""The native engine: plain PyTorch on one process, or data parallel over ``torchrun`` (DDP or FSDP2).

One process: the model runs as is. Several processes (``WORLD_SIZE > 1``): the engine joins the process group
(gloo on CPU, nccl on CUDA) and either wraps the model in ``DistributedDataParallel`` or shards it with FSDP2
``fully_shard`` (``parallel.fsdp=true``: one group per decoder layer, then the root).

Loss normalisation: every micro-batch backpropagates ``kept_sum / normalizer`` where ``normalizer`` is the number of
kept targets in the *global* batch; gradients are *summed* over data-parallel ranks (DDP's mean is undone by scaling
the loss by ``dp_size``; FSDP2's divide factor is set to 1), so data parallelism and gradient accumulation give the
same gradients as one process taking the whole batch.
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
from ..loss import goldfish_loss
from .base import Engine, StepStats


def _is_dtensor(t: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def _local(t: Any) -> Any:
    """A DTensor's local shard (plain tensors pass through), detached, for per-rank checkpoint files."""
    if isinstance(t, torch.Tensor):
        return (t.to_local() if _is_dtensor(t) else t).detach()
    if isinstance(t, dict):
        return {k: _local(v) for k, v in t.items()}
    if isinstance(t, (list, tuple)):
        return type(t)(_local(v) for v in t)
    return t


class NativeEngine(Engine):
    """Single-process or data-parallel (DDP / FSDP2) training of a plain Hugging Face causal LM."""

    name = "native"

    def __init__(self, cfg):
        self.cfg = cfg
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
        self._check_mesh()
        self._owns_group = False
        if self.world_size > 1 and not dist.is_initialized():
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            dist.init_process_group(backend="nccl" if self.device.type == "cuda" else "gloo")
            self._owns_group = True
        self.autocast_dtype = torch.bfloat16 if cfg.precision == "bf16" else None
        self.model: nn.Module | None = None  # the wrapped model (DDP / FSDP / plain)
        self.optimizer: torch.optim.Optimizer | None = None

    def _check_mesh(self) -> None:
        p = self.cfg.parallel
        if p.tp > 1 or p.pp > 1:
            raise UserError(f"parallel.tp={p.tp}, parallel.pp={p.pp}: this native engine runs data parallelism only "
                            f"(DDP or FSDP2); set parallel.tp=1 parallel.pp=1")
        dp = p.dp or self.world_size // (p.tp * p.pp)
        if dp * p.tp * p.pp != self.world_size:
            raise UserError(f"parallel mesh dp({dp})·tp({p.tp})·pp({p.pp})={dp * p.tp * p.pp} ≠ world size "
                            f"{self.world_size}; set parallel.dp=0 to derive dp from the world size")
        self._dp = dp

    # ------------------------------------------------------------------------------------------ topology

    @property
    def dp_rank(self) -> int:
        return self.rank

    @property
    def dp_size(self) -> int:
        return self._dp

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def fsdp(self) -> bool:
        return self.cfg.parallel.fsdp and self.world_size > 1

    @property
    def unwrapped(self) -> nn.Module:
        """The Hugging Face model inside any DDP wrapper (FSDP2 shards in place, so it is the model itself)."""
        return self.model.module if isinstance(self.model, nn.parallel.DistributedDataParallel) else self.model

    # ------------------------------------------------------------------------------------------ setup

    def setup(self, build_model: Callable[[], nn.Module],
              build_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]) -> None:
        model = build_model().to(self.device)
        model.train()
        if self.fsdp:
            from torch.distributed.fsdp import FSDPModule, fully_shard

            for layer in model.model.layers:
                fully_shard(layer)
            fully_shard(model)
            for module in model.modules():
                if isinstance(module, FSDPModule):
                    module.set_gradient_divide_factor(1.0)  # sum, not mean: the loss is already globally normalised
                    module.set_force_sum_reduction_for_comms(True)  # plain SUM (gloo has no PREMUL_SUM)
        elif self.world_size > 1:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            model = nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
        self.model = model
        self.optimizer = build_optimizer(model.parameters())

    # ------------------------------------------------------------------------------------------ step

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def forward_backward(self, micro_batches: list[dict[str, torch.Tensor]], normalizer: int) -> StepStats:
        # DDP averages gradients over ranks; scaling by dp_size turns that mean into the sum we want.
        scale = float(self.dp_size) if isinstance(self.model, nn.parallel.DistributedDataParallel) else 1.0
        totals = torch.zeros(4, dtype=torch.float64, device=self.device)  # kept_sum, kept_n, dropped_sum, dropped_n
        for i, mb in enumerate(micro_batches):
            mb = {k: v.to(self.device, non_blocking=True) for k, v in mb.items()}
            last = i == len(micro_batches) - 1
            sync = self.model.no_sync() if scale != 1.0 and not last else contextlib.nullcontext()
            with sync:
                with self._autocast():
                    logits = self.model(input_ids=mb["input_ids"], position_ids=mb.get("position_ids"),
                                        attention_mask=mb.get("attention_mask"), use_cache=False).logits  # (B, T, V)
                out = goldfish_loss(logits, mb["labels"], drop_mask=mb["drop_mask"])
                (out.kept_sum * (scale / max(normalizer, 1))).backward()
            totals += torch.stack([out.kept_sum.detach().double(), out.kept_count.double(),
                                   out.dropped_sum.double(), out.dropped_count.double()])
        if self.world_size > 1:
            dist.all_reduce(totals)
        kept_sum, kept_count, dropped_sum, dropped_count = totals.tolist()
        return StepStats(kept_sum, int(kept_count), dropped_sum, int(dropped_count))

    def optimizer_step(self, lr: float, max_grad_norm: float | None) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        # max_norm=inf measures the norm without changing any gradient (the clip coefficient clamps to 1).
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_grad_norm or float("inf"))
        if _is_dtensor(norm):
            norm = norm.full_tensor()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    # ------------------------------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        return {"model": _local(self.unwrapped.state_dict()), "optimizer": _local(self.optimizer.state_dict())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        model_state = self.unwrapped.state_dict()
        missing = sorted(set(model_state) - set(state["model"]))
        if missing:
            raise UserError(f"checkpoint does not match the model: missing {len(missing)} tensors, e.g. {missing[0]}")
        with torch.no_grad():
            for name, tensor in model_state.items():
                target = tensor.to_local() if _is_dtensor(tensor) else tensor
                if target.shape != state["model"][name].shape:
                    raise UserError(f"checkpoint tensor {name} has shape {tuple(state['model'][name].shape)} but "
                                    f"the model expects {tuple(target.shape)} (different model or parallel layout)")
                target.copy_(state["model"][name])
        self.optimizer.load_state_dict(self._as_param_layout(state["optimizer"]))

    def _as_param_layout(self, opt_state: dict[str, Any]) -> dict[str, Any]:
        """Re-wrap per-rank optimizer shards as DTensors shaped like their (FSDP2-sharded) parameters."""
        if not self.fsdp:
            return opt_state
        from torch.distributed.tensor import DTensor

        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        state = {}
        for index, entries in opt_state["state"].items():
            p = params[int(index)]
            state[index] = {
                k: DTensor.from_local(v.to(self.device), p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
                if isinstance(v, torch.Tensor) and v.shape == p.to_local().shape and v.dim() > 0 else v
                for k, v in entries.items()
            }
        return {"state": state, "param_groups": opt_state["param_groups"]}

    def export_hf(self, out_dir: Path) -> None:
        state = self.unwrapped.state_dict()
        if self.fsdp:  # gather full tensors (a collective: every rank takes part)
            state = {k: v.full_tensor() if _is_dtensor(v) else v for k, v in state.items()}
        if self.is_main:
            full = {k: v.detach().cpu() for k, v in state.items()}
            self.unwrapped.save_pretrained(str(out_dir), state_dict=full, safe_serialization=True)
        self.barrier()

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def close(self) -> None:
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_group = False
