"""Which training rows each optimizer step reads, and how many times each member is read over a run.

An epoch is a seeded permutation of the rows (identical on every rank and after a resume); a step reads the next
``global_batch`` rows of it; an epoch's last step takes the rows that are left and is topped up with empty rows
(:func:`take_rows`), so every row is read exactly once per epoch. The trainer (``goldfish.train``) drives this with
its step plan; :func:`consumed_rows` replays the same order without training, for the members' exposure counts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch


def epoch_order(rows: int, epoch: int, seed: int, shuffle: bool) -> np.ndarray:
    """Row order of one epoch: a permutation seeded by (seed, epoch), identical on every rank and after resume."""
    if not shuffle:
        return np.arange(rows)
    return np.random.default_rng([seed, epoch]).permutation(rows)


class EpochOrders:
    """The row permutation of each epoch, computed once per epoch."""

    def __init__(self, rows: int, seed: int, shuffle: bool):
        self.rows, self.seed, self.shuffle = rows, seed, shuffle
        self._cache: tuple[int, np.ndarray] | None = None

    def __getitem__(self, epoch: int) -> np.ndarray:
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, epoch_order(self.rows, epoch, self.seed, self.shuffle))
        return self._cache[1]


@dataclasses.dataclass
class ReadPosition:
    """Where reading stands: the epoch and the rows of it already read (the trainer's ``Progress`` has both)."""

    epoch: int = 0
    position: int = 0


def next_batch(plan: Any, orders: EpochOrders, at: Any) -> np.ndarray:
    """Row indices of the next global batch (``<= plan.global_batch`` of them at an epoch's end); moves ``at`` (a
    :class:`ReadPosition` or anything with ``epoch`` and ``position``) to the next epoch when the current one is used
    up. ``plan``: ``steps_per_epoch`` and ``global_batch``. The one place that decides which rows the trainer reads."""
    if at.position >= plan.steps_per_epoch * plan.global_batch:
        at.epoch, at.position = at.epoch + 1, 0  # next epoch, next permutation
    return orders[at.epoch][at.position: at.position + plan.global_batch]


def consumed_rows(plan: Any, seed: int, shuffle: bool) -> np.ndarray:
    """(rows read over the whole run,) the row indices the trainer reads in ``plan.total_steps`` steps, in order."""
    orders, at, out = EpochOrders(plan.rows, seed, shuffle), ReadPosition(), []
    for _ in range(plan.total_steps):
        out.append(next_batch(plan, orders, at))
        at.position += plan.global_batch
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
