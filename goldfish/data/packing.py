"""The training order: which document each occurrence in the row stream is, before the layout
(:mod:`goldfish.data.rows`) gives each its slots.

Documents are numbered members first (their near-duplicate variants after them), then the background, then the
canaries; the order repeats a member by its repetition count and shuffles everything by seed.
"""

from __future__ import annotations

import numpy as np


def training_order(
    repetitions: list[int], num_background: int, seed: int, extra: list[int] | tuple[int, ...] = ()
) -> np.ndarray:
    """Document ids to train on: member k repeated ``repetitions[k]`` times, background M+k once, then document
    M+B+c (a canary) repeated ``extra[c]`` times, shuffled by seed (without ``extra``, the order of older data)."""
    m = len(repetitions)
    ids = np.concatenate(
        [
            np.repeat(np.arange(m, dtype=np.int64), np.asarray(repetitions, dtype=np.int64)),
            np.arange(m, m + num_background, dtype=np.int64),
            np.repeat(
                np.arange(m + num_background, m + num_background + len(extra), dtype=np.int64),
                np.asarray(extra, dtype=np.int64),
            ),
        ]
    )
    # A separate stream from the split's permutation, so changing num_background does not reshuffle members.
    return np.random.default_rng([seed, 1]).permutation(ids)


def variant_layout(counts: list[int], num_background: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, owner) for members whose r copies are distinct documents (the member, then its r-1 variants).

    Documents are laid out as: M members, then the variants grouped by member (``counts[i] - 1`` each), then the
    background. Each document is trained once per epoch, shuffled by seed; ``owner`` maps a variant to its member's
    id and background document b to ``M + b``, so ``document_ids`` mean the same as without variants.
    """
    m = len(counts)
    extra = np.asarray(counts, dtype=np.int64) - 1
    owner = np.concatenate([np.arange(m), np.repeat(np.arange(m), extra), m + np.arange(num_background)])
    return training_order([1] * (m + int(extra.sum())), num_background, seed), owner.astype(np.int64)
