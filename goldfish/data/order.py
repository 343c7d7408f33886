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

BATCH_COLUMNS = ("input_ids", "labels", "document_ids", "position_ids")  # what a training step reads of a row
EMPTY = {"input_ids": 0, "labels": -100, "document_ids": -1, "position_ids": 0, "attention_mask": 0}  # a top-up row


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
    return orders[at.epoch][at.position : at.position + plan.global_batch]


def consumed_rows(plan: Any, seed: int, shuffle: bool) -> np.ndarray:
    """(rows read over the whole run,) the row indices the trainer reads in ``plan.total_steps`` steps, in order."""
    orders, at, out = EpochOrders(plan.rows, seed, shuffle), ReadPosition(), []
    for _ in range(plan.total_steps):
        out.append(next_batch(plan, orders, at))
        at.position += plan.global_batch
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def take_rows(rows: Any, index: np.ndarray, size: int) -> dict[str, torch.Tensor]:
    """The (size, T) batch of rows ``index`` of ``rows`` (:class:`goldfish.data.rows.TrainRows`), as int64 tensors
    of the trainer's columns, topped up with empty rows (labels -100, document -1) when shorter."""
    batch = rows.batch(np.asarray(index, dtype=np.int64))
    missing = size - len(index)
    if missing:
        for k, v in batch.items():
            batch[k] = np.concatenate([v, np.full((missing, v.shape[1]), EMPTY[k], dtype=v.dtype)])
    return {k: torch.from_numpy(batch[k]) for k in BATCH_COLUMNS}


def member_exposures(prepared: Any, consumed: np.ndarray) -> dict[str, list[int]]:
    """{labelled repetitions r: [fewest, most] times a member labelled r was read}, over the rows ``consumed``.

    A copy is read when the row holding its first token is (:meth:`goldfish.data.rows.TrainRows.reads`)."""
    labels = np.asarray(prepared.members["repetitions"], dtype=np.int64)  # (M,)
    seen, _ = prepared.train.reads(consumed, len(labels))
    return {str(r): [int(seen[labels == r].min()), int(seen[labels == r].max())] for r in np.unique(labels).tolist()}
