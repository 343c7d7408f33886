"""Near-duplicate removal of the targets from the background: n-gram containment, not only exact matches.

A background document that holds a target (a member or a nonmember) with small edits -- a web mirror of a Wikipedia
article, a quote with its punctuation changed -- trains the model on that target outside the experiment's control:
members get more reads than labelled, nonmembers stop being unseen. Exact id/text matches miss these.

The rule (the containment form of shingling, Broder 1997): the *shingles* of a token sequence are its distinct
n-grams of token ids (``n = background_dedup.ngram``, default 13: GPT-3's contamination n-gram, Brown et al. 2020,
app. C). A background document is a near-duplicate of a target when it contains at least
``background_dedup.overlap`` (default 0.2) of that target's shingles. A target of fewer than n tokens has one
shingle, itself. Containment rather than Jaccard: a background document is usually much longer than a target, and
what matters is how much of the target it holds. An edit changes the n shingles that cover it, so a copy with one
substituted token in every 26 keeps about (1 - 13/26) = 50 % of the target's 13-grams; unrelated text shares almost
none (an accidental 13-token match is rare outside boilerplate).

Shingles are hashed to 64 bits (a polynomial over the ids, then splitmix64's finaliser; a collision is ~n^2/2^64 for
n shingles) and looked up in one sorted array of (hash, target) pairs, so checking a background document costs
O(L log S) for L tokens and S target shingles.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from ..config import check, option, raise_problems

_BASE = np.uint64(0x100000001B3)  # the 64-bit FNV prime as the polynomial base
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


@dataclasses.dataclass
class DedupConfig:
    """Near-duplicate removal of members and nonmembers from the background (``background_dedup:`` of a recipe)."""

    ngram: int = option(13, "shingle length in tokens (GPT-3's contamination n-gram is 13)")
    overlap: float = option(0.2, "a background document holding at least this fraction of a target's distinct "
                                 "n-grams is left out (0 < overlap <= 1; 1 = only copies holding every n-gram)")

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(isinstance(self.ngram, int) and self.ngram >= 1, problems, f"ngram={self.ngram!r} must be an integer >= 1")
        check(0 < self.overlap <= 1, problems, f"overlap={self.overlap} must be in (0, 1]")
        raise_problems(problems)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def shingles(ids: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """(S,) sorted distinct uint64 hashes of the n-grams of ``ids`` (the whole sequence when shorter than n)."""
    arr = np.asarray(ids, dtype=np.int64).astype(np.uint64) + np.uint64(1)  # +1: id 0 is not the zero of the sum
    if len(arr) == 0:
        return np.zeros(0, dtype=np.uint64)
    width = min(n, len(arr))
    windows = np.lib.stride_tricks.sliding_window_view(arr, width)  # (L - width + 1, width)
    powers = _BASE ** np.arange(width - 1, -1, -1, dtype=np.uint64)  # (width,) wrapping powers
    with np.errstate(over="ignore"):
        keys = (windows * powers).sum(axis=1, dtype=np.uint64) ^ np.uint64(width)
        return np.unique(_mix(keys))


class ShingleIndex:
    """The shingles of every target, to find the targets a document holds a near-copy of."""

    def __init__(self, targets: Sequence[Sequence[int] | np.ndarray], config: DedupConfig):
        self.config = config
        per_target = [shingles(t, config.ngram) for t in targets]
        self.sizes = np.array([len(s) for s in per_target], dtype=np.int64)  # (T,) distinct shingles per target
        owners = np.repeat(np.arange(len(per_target), dtype=np.int64), self.sizes)
        hashes = np.concatenate(per_target) if per_target else np.zeros(0, dtype=np.uint64)
        order = np.argsort(hashes, kind="stable")
        self.hashes, self.owners = hashes[order], owners[order]  # (S,) sorted, (S,) target of each

    def contained(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """(T,) fraction of each target's shingles that occur in ``ids``."""
        found = np.zeros(len(self.sizes), dtype=np.int64)
        doc = shingles(ids, self.config.ngram)
        if len(doc) and len(self.hashes):
            left = np.searchsorted(self.hashes, doc, side="left")
            right = np.searchsorted(self.hashes, doc, side="right")
            hit = right > left
            if hit.any():
                starts, counts = left[hit], (right - left)[hit]
                rows = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
                found = np.bincount(self.owners[rows], minlength=len(self.sizes))
        return found / np.maximum(self.sizes, 1)

    def near_duplicate(self, ids: Sequence[int] | np.ndarray) -> bool:
        """Whether ``ids`` holds at least ``overlap`` of some target's shingles."""
        return bool(len(self.sizes)) and bool((self.contained(ids) >= self.config.overlap - 1e-12).any())
