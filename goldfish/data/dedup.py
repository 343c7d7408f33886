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
from typing import Iterator, Sequence

import numpy as np

from ..config import check, option, raise_problems

_BASE = np.uint64(0x100000001B3)  # the 64-bit FNV prime as the polynomial base
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
FILTER_BITS = 22


@dataclasses.dataclass
class DedupConfig:
    """Near-duplicate removal of members and nonmembers from the background (``background_dedup:`` of a recipe)."""

    ngram: int = option(13, "shingle length in tokens (GPT-3's contamination n-gram is 13)")
    overlap: float = option(
        0.2,
        "a background document holding at least this fraction of a target's distinct "
        "n-grams is left out (0 < overlap <= 1; 1 = only copies holding every n-gram)",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(
            isinstance(self.ngram, int) and self.ngram >= 1, problems, f"ngram={self.ngram!r} must be an integer >= 1"
        )
        check(0 < self.overlap <= 1, problems, f"overlap={self.overlap} must be in (0, 1]")
        raise_problems(problems)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _inverse(b: int) -> int:
    """The inverse of an odd ``b`` modulo 2**64 (Newton's iteration doubles the correct bits each step)."""
    x = b
    for _ in range(6):
        x = (x * (2 - b * x)) % 2**64
    return x


_BINV = np.uint64(_inverse(int(_BASE)))
_POWERS: dict[str, np.ndarray] = {"up": np.ones(1, dtype=np.uint64), "down": np.ones(1, dtype=np.uint64)}


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(B**i, B**-i) modulo 2**64 for i < n, from a table grown on demand (wrapping uint64 products)."""
    if len(_POWERS["up"]) < n:
        size = max(n, 2 * len(_POWERS["up"]))
        for key, base in (("up", _BASE), ("down", _BINV)):
            table = np.full(size, base, dtype=np.uint64)
            table[0] = 1
            _POWERS[key] = np.cumprod(table, dtype=np.uint64)
    return _POWERS["up"][:n], _POWERS["down"][:n]


def window_keys(ids: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """(L - w + 1,) uint64 hash of every n-gram of ``ids`` in order (w = min(n, L); one key, the whole sequence, when
    shorter than n), not deduplicated.

    The key of the window starting at i is ``mix(sum_j (ids[i+j] + 1) * B**(w-1-j) ^ w)`` modulo 2**64; it is
    computed for all windows at once from prefix sums: with ``P[k] = sum_{j<k} (ids[j] + 1) * B**-j``, the window's
    sum is ``B**(i+w-1) * (P[i+w] - P[i])`` (B is odd, so invertible modulo 2**64): a few vector operations per
    token instead of w multiply-adds."""
    arr = np.asarray(ids, dtype=np.int64).astype(np.uint64) + np.uint64(1)  # +1: id 0 is not the zero of the sum
    if len(arr) == 0:
        return np.zeros(0, dtype=np.uint64)
    width = min(n, len(arr))
    up, down = _powers(len(arr) + 1)
    prefix = np.zeros(len(arr) + 1, dtype=np.uint64)
    np.cumsum(arr * down[: len(arr)], dtype=np.uint64, out=prefix[1:])
    sums = up[width - 1 : len(arr)] * (prefix[width:] - prefix[: len(arr) - width + 1])
    return _mix(sums ^ np.uint64(width))


BLOCK_TOKENS = 1 << 16  # a long document's n-grams are hashed this many windows at a time (memory bounded)


def block_keys(ids: Sequence[int] | np.ndarray, n: int) -> Iterator[np.ndarray]:
    """:func:`window_keys` of ``ids`` in consecutive blocks of at most :data:`BLOCK_TOKENS` windows (each block reads
    its windows' ``n - 1`` following ids too): together exactly the keys of the whole, in order."""
    ids = np.asarray(ids)
    if len(ids) <= BLOCK_TOKENS + n - 1:
        yield window_keys(ids, n)
        return
    for s in range(0, len(ids) - n + 1, BLOCK_TOKENS):
        yield window_keys(ids[s : s + BLOCK_TOKENS + n - 1], n)


def shingles(ids: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """(S,) sorted distinct uint64 hashes of the n-grams of ``ids`` (the whole sequence when shorter than n)."""
    return np.unique(window_keys(ids, n))


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
        # a 4 MiB filter on the top 22 bits: a document's n-grams are looked up only where some target has one
        self.filter = np.zeros(1 << FILTER_BITS, dtype=bool)
        self.filter[self.hashes >> np.uint64(64 - FILTER_BITS)] = True

    def contained(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """(T,) fraction of each target's shingles that occur in ``ids``."""
        # the document's distinct n-grams that some target has (the others count for no target), a block at a time
        return self._fractions(
            np.unique(np.concatenate([self._known(keys) for keys in block_keys(ids, self.config.ngram)]))
        )

    def _fractions(self, doc: np.ndarray) -> np.ndarray:
        """(T,) fraction of each target's shingles among ``doc`` (distinct keys some target has)."""
        found = np.zeros(len(self.sizes), dtype=np.int64)
        if len(doc) and len(self.hashes):
            left = np.searchsorted(self.hashes, doc, side="left")
            right = np.searchsorted(self.hashes, doc, side="right")
            hit = right > left
            if hit.any():
                starts, counts = left[hit], (right - left)[hit]
                rows = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
                found = np.bincount(self.owners[rows], minlength=len(self.sizes))
        return found / np.maximum(self.sizes, 1)

    def any_shared(self, ids: Sequence[int] | np.ndarray) -> bool:
        """Whether ``ids`` shares at least one n-gram with some target: the cheap test (no sort of the document's
        n-grams) that lets almost every background document skip :meth:`contained`."""
        if not len(self.hashes):
            return False
        return any(len(self._known(keys)) for keys in block_keys(ids, self.config.ngram))

    def _known(self, keys: np.ndarray) -> np.ndarray:
        """The keys of ``keys`` that some target has."""
        if not len(self.hashes):
            return keys[:0]
        keys = keys[self.filter[keys >> np.uint64(64 - FILTER_BITS)]]
        if not len(keys):
            return keys
        at = np.minimum(np.searchsorted(self.hashes, keys), len(self.hashes) - 1)
        return keys[self.hashes[at] == keys]

    def near_duplicate(self, ids: Sequence[int] | np.ndarray) -> bool:
        """Whether ``ids`` holds at least ``overlap`` of some target's shingles."""
        if not self.any_shared(ids):
            return False
        return bool((self.contained(ids) >= self.config.overlap - 1e-12).any())

    def scan(self) -> "ShingleScan":
        """A near-duplicate check of a document fed a part of its ids at a time (:class:`ShingleScan`)."""
        return ShingleScan(self)


class ShingleScan:
    """:meth:`ShingleIndex.near_duplicate` of a document whose ids come in consecutive parts (a long document
    tokenized a piece at a time): each part's n-grams, with the windows that straddle the previous part (its last
    ``n - 1`` ids kept), are looked up as they come; only the keys some target has are kept."""

    def __init__(self, index: ShingleIndex):
        self.index, self.n = index, index.config.ngram
        self.tail = np.zeros(0, dtype=np.int64)
        self.found: list[np.ndarray] = []
        self.windows = False  # whether any n-gram has been looked up (a document shorter than n is one key, itself)

    def add(self, ids: np.ndarray) -> None:
        buf = np.concatenate([self.tail, np.asarray(ids, dtype=np.int64)])
        if len(buf) < self.n:
            self.tail = buf
            return
        self.found += [self.index._known(keys) for keys in block_keys(buf, self.n)]
        self.tail, self.windows = buf[len(buf) - self.n + 1 :], True

    def near_duplicate(self) -> bool:
        found = self.found if self.windows else [self.index._known(window_keys(self.tail, self.n))]
        doc = np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.uint64)
        if not len(doc):
            return False
        return bool((self.index._fractions(doc) >= self.index.config.overlap - 1e-12).any())
