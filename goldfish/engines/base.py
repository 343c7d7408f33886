"""The engine seam: the trainer talks to every distributed engine through this small interface.

An engine owns *how* the model is distributed (process groups, parallelising a plain Hugging Face model, gradient
sync, sharded state); the trainer owns *what* happens (data order, Goldfish masks, schedule, logging, checkpoint
files). Like torchtitan's, an engine is built from its own config section (``parallel`` or ``axonn``), the precision
and an injected **loss function** (:data:`LossFn`); it knows nothing of Goldfish (it imports neither
:mod:`goldfish.masks` nor :mod:`goldfish.loss`; ``tests/test_architecture.py`` checks this).

Micro-batches. Each is a dict of (B, T) tensors: the model inputs :data:`MODEL_INPUTS` (``input_ids``, optional
``position_ids``/``attention_mask``) and *targets*, every other key (the trainer sends ``labels`` and
``drop_mask``). The engine moves targets to its device (and, under pipelining, to the last stage) and hands them,
untouched, to the loss function together with the logits.

The loss function. ``loss_fn(logits, targets) -> parts``: ``logits`` (B, T, V) of the micro-batch (``logits[:, t]``
predicts position ``t + 1``: the causal shift is the loss function's job), ``targets`` the dict above; ``parts`` has
``kept_sum`` (a differentiable scalar: summed per-token loss over the targets trained on), ``kept_count``,
``dropped_sum`` (detached: summed loss over targets measured but not trained on) and ``dropped_count``
(:class:`LossParts`). The trainer passes :class:`goldfish.loss.EngineLoss`.
A loss that never materialises the (B, T, V) logits (chunked cross-entropy, ``loss.ce_chunk_tokens``) says so with
``wants_hidden = True``: the native engine then stops its last stage at the final norm and calls
``loss_fn(hidden (B, T, H), targets, head=lm_head)`` (:class:`goldfish.engines.parallelize.StageLoss`); AxoNN refuses
such a loss.

Loss normalisation (torchtitan's ``global_valid_tokens``): the trainer computes, from the *global* batch, the number
of kept supervised target tokens ``normalizer`` (same value on every rank) and the engine backpropagates
``kept_sum / normalizer`` for each micro-batch, so gradient accumulation, data-parallel sharding, tensor and pipeline
splits never change the loss or the gradients.

:class:`Engine` owns what every engine shares: the device, joining (and leaving) the process group, autocast and
shape-checked loading of this rank's tensors. Each engine class also answers, without building anything, how it would
lay a model out on ``world_size`` devices (:meth:`Engine.layout_for` -> :class:`Layout`), which both validates the
layout and feeds the memory estimate of ``--dry-run`` (:mod:`goldfish.estimate`).

Adding an engine = adding one module in ``goldfish/engines/`` with a subclass registered in ``ENGINES``.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from ..errors import UserError

MODEL_INPUTS = ("input_ids", "position_ids", "attention_mask")


class LossParts(Protocol):
    """What a loss function returns for one micro-batch (0-d tensors)."""

    kept_sum: torch.Tensor  # differentiable: summed per-token loss over the targets trained on
    kept_count: torch.Tensor
    dropped_sum: torch.Tensor  # detached: summed per-token loss over targets measured but not trained on
    dropped_count: torch.Tensor


# (logits (B, T, V), targets {name: (B, T)}) -> LossParts
LossFn = Callable[[torch.Tensor, dict[str, torch.Tensor]], LossParts]


def split_targets(micro_batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The targets of a micro-batch: every tensor that is not a model input."""
    return {k: v for k, v in micro_batch.items() if k not in MODEL_INPUTS}


def stats_vector(parts: LossParts) -> torch.Tensor:
    """(4,) float64, detached: kept_sum, kept_count, dropped_sum, dropped_count (summed over micro-batches/ranks)."""
    return torch.stack(
        [
            parts.kept_sum.detach().double(),
            parts.kept_count.double(),
            parts.dropped_sum.double(),
            parts.dropped_count.double(),
        ]
    )


@dataclasses.dataclass
class StepStats:
    """Global (all-reduced over data-parallel ranks, summed over micro-batches) loss statistics of one step."""

    kept_sum: float  # sum of CE over kept tokens
    kept_count: int
    dropped_sum: float  # sum of CE over dropped tokens (measured, not trained)
    dropped_count: int

    @classmethod
    def from_vector(cls, totals: torch.Tensor) -> "StepStats":
        """From the (4,) vector of :func:`stats_vector` sums."""
        kept_sum, kept_count, dropped_sum, dropped_count = totals.tolist()
        return cls(kept_sum, int(kept_count), dropped_sum, int(dropped_count))

    @property
    def kept_loss(self) -> float:
        return self.kept_sum / max(self.kept_count, 1)

    @property
    def dropped_loss(self) -> float:
        return self.dropped_sum / self.dropped_count if self.dropped_count else float("nan")


@dataclasses.dataclass(frozen=True)
class Layout:
    """How an engine lays one model out over ``world`` devices: what the memory estimate needs, and a description.

    The divisors apply to the most loaded device: ``weight_shard`` divides every transformer-layer matrix,
    ``head_shard`` an untied output head, ``activation_shard`` the per-layer activations, ``logits_shard`` the
    logits, ``state_shard`` the weights, gradients and optimizer state (FSDP). ``activation_fraction`` is the share of
    a micro-batch whose activations a pipeline stage holds at once."""

    world: int
    dp: int  # data-parallel shards of each global batch (trainer: global_batch % (micro_batch * dp) == 0)
    pp: int = 1
    weight_shard: int = 1
    head_shard: int = 1
    activation_shard: int = 1
    logits_shard: int = 1
    state_shard: int = 1
    activation_fraction: float = 1.0
    description: str = ""


def current_world_size() -> int:
    """Processes of this run: the joined group's size, else torchrun's ``WORLD_SIZE`` (1 without torchrun)."""
    return dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))


class Engine(abc.ABC):
    """A distributed (or single-process) way to run forward/backward/step for a plain HF causal LM.

    Every engine has ``device`` (where its tensors live: ``cuda:LOCAL_RANK`` or cpu), ``rank`` and ``world_size``
    (global), ``loss_fn`` and ``autocast_dtype``. Subclasses set ``name`` and ``section`` (the ``TrainConfig`` field
    they read) and call ``super().__init__``."""

    name: str = "base"
    section: str = ""

    def __init__(self, precision: str, loss_fn: LossFn):
        self.loss_fn = loss_fn
        self.world_size = current_world_size()
        self.rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
        self.autocast_dtype = torch.bfloat16 if precision == "bf16" else None
        self._owns_group = False

    # ------------------------------------------------------------------------------------------ layout

    @classmethod
    @abc.abstractmethod
    def layout_for(
        cls, section: Any, world_size: int, model_config: Any = None, micro_batch_size: int | None = None
    ) -> Layout:
        """Validate the layout of ``section`` on ``world_size`` devices (against the model's shape when
        ``model_config`` -- HF ``LlamaConfig`` attribute names -- is given, and the micro-batch when given) and
        describe it; raises one :class:`UserError` naming every factor. Builds nothing."""

    # ------------------------------------------------------------------------------------------ shared plumbing

    def join_process_group(self, always: bool = False) -> None:
        """Join the torchrun process group (nccl on CUDA, gloo on CPU) unless one exists; one process joins only
        when ``always`` (a private in-memory group when there is no torchrun rendezvous)."""
        if not dist.is_initialized() and (self.world_size > 1 or always):
            backend = "nccl" if self.device.type == "cuda" else "gloo"
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            if self.world_size == 1 and "MASTER_ADDR" not in os.environ:
                dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
            else:
                dist.init_process_group(backend)
            self._owns_group = True
        if dist.is_initialized():
            self.rank = dist.get_rank()

    def autocast(self):
        """bf16 autocast on this engine's device (fp32 master weights), or nothing for fp32."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    @staticmethod
    def load_model_state(model: nn.Module, saved: dict[str, torch.Tensor]) -> None:
        """Copy this rank's saved tensors into ``model`` (DTensors: into their local shard), checking names and
        shapes first; a mismatch is one :class:`UserError` (another model or layout wrote the checkpoint)."""
        current = model.state_dict()
        missing = sorted(set(current) - set(saved))
        if missing:
            raise UserError(
                f"checkpoint does not match this rank's model: missing {len(missing)} tensors, e.g. "
                f"{missing[0]} (different model or parallel layout)"
            )
        with torch.no_grad():
            for name, tensor in current.items():
                target = tensor.to_local() if isinstance(tensor, DTensor) else tensor
                if target.shape != saved[name].shape:
                    raise UserError(
                        f"checkpoint tensor {name} has shape {tuple(saved[name].shape)} but this rank "
                        f"expects {tuple(target.shape)} (different model or parallel layout)"
                    )
                target.copy_(saved[name])

    # ------------------------------------------------------------------------------------------ topology

    @property
    @abc.abstractmethod
    def dp_rank(self) -> int:
        """This process's data-parallel rank: which shard of each global batch it reads."""

    @property
    @abc.abstractmethod
    def dp_size(self) -> int:
        """Number of data-parallel replicas (the global batch is split into this many shards)."""

    @property
    def is_main(self) -> bool:
        """True on the one process that prints, logs metrics and writes shared files (global rank 0)."""
        return self.rank == 0

    # ------------------------------------------------------------------------------------------ training

    @abc.abstractmethod
    def setup(
        self,
        build_model: Callable[[], nn.Module],
        build_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer],
    ) -> None:
        """Build the model (same initial weights as a single process with the same seed), parallelise it, and
        create the optimizer over this rank's (possibly sharded) parameters."""

    @abc.abstractmethod
    def forward_backward(self, micro_batches: list[dict[str, torch.Tensor]], normalizer: int) -> StepStats:
        """Accumulate gradients of ``sum(kept_sum) / normalizer`` over this rank's micro-batches.

        Each micro-batch holds the model inputs and the targets (see the module docstring); tensors are on CPU, the
        engine moves them. Returns global statistics (identical on every rank)."""

    @abc.abstractmethod
    def optimizer_step(self, lr: float, max_grad_norm: float | None) -> float:
        """Clip gradients to ``max_grad_norm`` (global norm), set the learning rate, step, zero grads.
        Returns the global gradient norm before clipping."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Model + optimizer state *of this rank* (plain tensors; saved per rank with safetensors/torch.save)."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned on this same rank and layout."""

    @abc.abstractmethod
    def export_hf(self, out_dir: Path) -> None:
        """Gather full weights and write a Hugging Face model folder (``save_pretrained``, safetensors) on the
        main process; all ranks must call it."""

    def barrier(self) -> None:
        """Wait for every rank (no-op without a process group)."""
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()

    def close(self) -> None:
        """Leave the process group if this engine joined it."""
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_group = False
