"""Evaluation split over processes (``torchrun --nproc_per_node N -m goldfish eval ...``, ``accelerate launch``).

Every rank reads the same documents, builds the same windows and the same *batch plan* (generation's length
buckets, scoring's token-budget batches), and computes only its share of the batches: rank r takes batches r, r+N,
r+2N, ... of each plan. After each round of N batches the ranks exchange what they computed
(``all_gather_object``), so every rank holds every result and the next step (metrics, the next pass, membership)
runs on the same inputs everywhere; rank 0 alone writes files. A batch is computed with exactly the composition and
code one process uses, so every number equals one process's (given the same device kind and thread count).

The split is ambient: :func:`splitting` makes a :class:`Shard` current for the evaluation (a ``contextvars``
value), and the batched loops of :mod:`goldfish.eval.generate` and :mod:`goldfish.eval.scoring` consult
:func:`current`; one process (no launcher) is the default ``Shard()``, whose loops are the plain ones.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from typing import Any, Iterator

import torch
import torch.distributed as dist

from goldfish.ownership import launched


@dataclasses.dataclass(frozen=True)
class Shard:
    """This process's rank among ``world`` processes evaluating together."""

    rank: int = 0
    world: int = 1

    @property
    def split(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def rounds(self, n: int) -> Iterator[tuple[int | None, range]]:
        """For a plan of ``n`` batches: per round, (the batch this rank computes or None, the round's batches)."""
        for lo in range(0, n, self.world):
            mine = lo + self.rank
            yield (mine if mine < n else None), range(lo, min(lo + self.world, n))

    def gather(self, part: Any) -> list[Any]:
        """Every rank's ``part``, in rank order (a collective: every rank calls it)."""
        if not self.split:
            return [part]
        parts: list[Any] = [None] * self.world
        torch.distributed.all_gather_object(parts, part)
        return parts

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (a collective)."""
        if not self.split:
            return value
        box = [value if self.main else None]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.split:
            torch.distributed.barrier()


_CURRENT: contextvars.ContextVar[Shard] = contextvars.ContextVar("goldfish_eval_shard", default=Shard())


def current() -> Shard:
    """The split of the evaluation running in this process (``Shard()``: one process)."""
    return _CURRENT.get()


@contextlib.contextmanager
def splitting(shard: Shard) -> Iterator[Shard]:
    """Make ``shard`` the current split for the block."""
    token = _CURRENT.set(shard)
    try:
        yield shard
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def process_group(device: str) -> Iterator[Shard]:
    """Join the launcher's process group for the block (gloo on CPU, NCCL on CUDA) and yield this rank's Shard;
    outside a launcher, yield ``Shard()`` and start nothing."""
    if not launched():
        yield Shard()
        return

    started = not dist.is_initialized()
    cuda = device in ("auto", "cuda") or device.startswith("cuda:")
    if cuda and torch.cuda.is_available():  # this rank's GPU: where the model is loaded and NCCL gathers
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if started:
        dist.init_process_group("nccl" if cuda and torch.cuda.is_available() else "gloo")
    try:
        yield Shard(dist.get_rank(), dist.get_world_size())
    finally:
        if started:
            dist.destroy_process_group()
