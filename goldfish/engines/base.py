"""The engine seam: the trainer talks to every distributed engine through this small interface.

An engine owns *how* the model is distributed (process groups, parallelising a plain Hugging Face model, gradient
sync, sharded state); the trainer owns *what* happens (data order, Goldfish masks, schedule, logging, checkpoint
files). The engine knows nothing of Goldfish: it receives ``labels`` and a boolean ``drop_mask`` per micro-batch
and computes :func:`goldfish.loss.goldfish_loss` with ``drop_mask=``.

Loss normalisation (torchtitan's ``global_valid_tokens``): the trainer computes, from the *global* batch, the number
of kept supervised target tokens ``normalizer`` (same value on every rank) and the engine backpropagates
``kept_sum / normalizer`` for each micro-batch, so gradient accumulation, data-parallel sharding, tensor and pipeline
splits never change the loss or the gradients.

Adding an engine = adding one module in ``goldfish/engines/`` with a subclass registered in ``ENGINES``.
"""

from __future__ import annotations

import abc
import dataclasses
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from torch import nn


@dataclasses.dataclass
class StepStats:
    """Global (all-reduced over data-parallel ranks, summed over micro-batches) loss statistics of one step."""

    kept_sum: float  # sum of CE over kept tokens
    kept_count: int
    dropped_sum: float  # sum of CE over dropped tokens (measured, not trained)
    dropped_count: int

    @property
    def kept_loss(self) -> float:
        return self.kept_sum / max(self.kept_count, 1)

    @property
    def dropped_loss(self) -> float:
        return self.dropped_sum / self.dropped_count if self.dropped_count else float("nan")


class Engine(abc.ABC):
    """A distributed (or single-process) way to run forward/backward/step for a plain HF causal LM."""

    name: str = "base"

    @property
    @abc.abstractmethod
    def dp_rank(self) -> int:
        """This process's data-parallel rank: which shard of each global batch it reads."""

    @property
    @abc.abstractmethod
    def dp_size(self) -> int:
        """Number of data-parallel replicas (the global batch is split into this many shards)."""

    @property
    @abc.abstractmethod
    def is_main(self) -> bool:
        """True on the one process that prints, logs metrics and writes shared files."""

    @abc.abstractmethod
    def setup(self, build_model: Callable[[], nn.Module],
              build_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]) -> None:
        """Build the model (same initial weights as a single process with the same seed), parallelise it, and
        create the optimizer over this rank's (possibly sharded) parameters."""

    @abc.abstractmethod
    def forward_backward(self, micro_batches: list[dict[str, torch.Tensor]], normalizer: int) -> StepStats:
        """Accumulate gradients of ``sum(kept_sum) / normalizer`` over this rank's micro-batches.

        Each micro-batch holds ``input_ids``, ``labels`` (-100 = not supervised), ``drop_mask`` (bool, True = Goldfish
        drops this target) and optionally ``position_ids``/``attention_mask``; tensors are on CPU, the engine moves
        them. Returns global statistics (identical on every rank)."""

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
        """Wait for every rank (no-op in one process)."""

    def close(self) -> None:
        """Tear down process groups."""
