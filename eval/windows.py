"""Extraction windows: a prefix of P tokens given to the model and the true suffix of S tokens after it.

Placements (where in the document a window sits):

* ``end``   -- the window ends at the document's end: suffix = the last S tokens, prefix = the P tokens before them.
* ``start`` -- the prefix starts at token 0: prefix = tokens [0, P), suffix = tokens [P, P+S).
* ``stride``-- every ``stride`` tokens: prefixes start at 0, stride, 2·stride, ... while P+S tokens remain, and
  (without ``max_offset``) one last window ends at the document's end, so with ``stride <= S`` every token after
  the first P is in some window's suffix: the whole document is covered. The default for a JSONL corpus.
* ``offsets`` -- prefixes start at the given offsets (e.g. 0, 100, 200) where P+S tokens remain.

``max_offset`` caps where ``stride`` and ``offsets`` windows may start (a prefix starting later is not made): a
long document then yields the first few windows only, not windows all the way to its end.

``P = -1`` (written ``all`` in configs) means "all but the last S tokens" (the Goldfish paper's setting): one
window per document, prefix = tokens [0, n-S), whatever the placement. A document shorter than P+S gets no window
for that P and is counted in ``skipped``.

**Short documents** (the rule of :func:`short_window`): a document of n tokens too short for every requested
window still gets one, placement ``short``: its suffix is its last S' = min(S, floor(n/2)) tokens and its prefix
every token before them (``prefix_len`` -1, "all but the last S'"), so a 50-token document is answered like a long
one instead of being skipped. Only a document whose S' would be shorter than min(S, :data:`MIN_SHORT_SUFFIX`)
tokens (with the default S = 50: fewer than 16 tokens) has no window (verdict ``too_short``, with its length); if no
window remains at all, :func:`build_windows` raises a :class:`~goldfish.errors.UserError`.

Every window has a ``key``: sha256 of (document, P, S, placement, start). It identifies the window across runs
(resume skips keys already computed) and appears in results as ``sha256``. The document enters as its tokens (8-byte
little-endian) when they take at most :data:`KEY_TOKEN_BYTES` bytes, else as the sha256 of those bytes under the
header ``goldfish-window/2``: a window's key then costs at most that many bytes of hashing whatever the document's
length, and a document's windows are built in time linear in its length (a 1 M-token document in about a second,
``benchmarks/window_keys.py``) -- where hashing the whole document for every window was quadratic.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from typing import Sequence

from goldfish.errors import UserError

PLACEMENTS = ("start", "end", "stride", "offsets")
ALL = -1
SHORT = "short"  # the placement of a short document's one window (never requested: see short_window)
MIN_SHORT_SUFFIX = 8  # a short document's suffix has at least min(S, 8) tokens: under 16 tokens (S >= 8) none
KEY_TOKEN_BYTES = 1 << 16  # a longer document (over 8,192 tokens) enters its windows' keys as its sha256


@dataclasses.dataclass(frozen=True)
class EvalDocument:
    """One document to evaluate: its tokens (no bos/eos) and the metadata carried into the results."""

    id: str
    tokens: tuple[int, ...]
    title: str = ""
    repetitions: int | None = None  # copies in the training data per epoch (0 for nonmembers, None: unknown)
    split: str = "members"
    text: str = ""
    group: str | None = None  # a user-supplied group (data.group_field of a JSONL line), summarised in by_group


@dataclasses.dataclass(frozen=True)
class Window:
    """A (document, P, placement, start) window. ``prefix_len`` is the requested P (-1 = all)."""

    doc: EvalDocument
    prefix_len: int
    suffix_len: int
    placement: str
    start: int
    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    key: str


def document_identity(tokens: Sequence[int]) -> tuple[str, bytes]:
    """(key version, bytes) a document enters its windows' keys as: its tokens packed (8-byte little-endian) when they
    take at most :data:`KEY_TOKEN_BYTES` bytes, else the sha256 of those bytes (computed once per document)."""
    packed = struct.pack(f"<{len(tokens)}q", *tokens)
    if len(packed) <= KEY_TOKEN_BYTES:
        return "goldfish-window/1", packed
    return "goldfish-window/2", hashlib.sha256(packed).digest()


def _key(identity: tuple[str, bytes], prefix_len: int, suffix_len: int, placement: str, start: int) -> str:
    h = hashlib.sha256()
    h.update(f"{identity[0]}|{prefix_len}|{suffix_len}|{placement}|{start}|".encode())
    h.update(identity[1])
    return h.hexdigest()


def window_key(tokens: Sequence[int], prefix_len: int, suffix_len: int, placement: str, start: int) -> str:
    """sha256 hex of the document (:func:`document_identity`) and the window's geometry (stable across runs and
    machines)."""
    return _key(document_identity(tokens), prefix_len, suffix_len, placement, start)


def starts(
    n_tokens: int,
    prefix_len: int,
    suffix_len: int,
    placement: str,
    stride: int,
    offsets: Sequence[int] = (),
    max_offset: int | None = None,
) -> tuple[list[int], int]:
    """Prefix start offsets of a document of ``n_tokens`` -> (starts, resolved P); no starts if too short."""
    if prefix_len == ALL:
        p = n_tokens - suffix_len
        return ([0] if p >= 1 else []), p
    if n_tokens < prefix_len + suffix_len:
        return [], prefix_len
    if placement == "end":
        return [n_tokens - suffix_len - prefix_len], prefix_len
    if placement == "start":
        return [0], prefix_len
    last = n_tokens - prefix_len - suffix_len  # the latest start that still fits a whole window
    last = last if max_offset is None else min(last, max_offset)
    if placement == "stride":
        found = list(range(0, last + 1, stride))
        if max_offset is None and found[-1] < last:  # a last window ending at the document's end: every token
            found.append(last)  # after the first P is in some window's suffix
        return found, prefix_len
    return [o for o in offsets if o <= last], prefix_len


def short_window(n_tokens: int, suffix_len: int) -> tuple[int, int] | None:
    """(prefix tokens, suffix tokens) of the one window of a document too short for every requested window: the
    suffix its last min(S, floor(n/2)) tokens, the prefix every token before them; None when that suffix is shorter
    than min(S, :data:`MIN_SHORT_SUFFIX`) tokens (with S >= 8: a document of fewer than 16 tokens)."""
    suffix = min(suffix_len, n_tokens // 2)
    return (n_tokens - suffix, suffix) if suffix >= min(suffix_len, MIN_SHORT_SUFFIX) else None


def build_windows(
    docs: Sequence[EvalDocument],
    prefix_lens: Sequence[int],
    suffix_len: int,
    placements: Sequence[str] = ("start",),
    stride: int | None = None,
    offsets: Sequence[int] = (),
    max_offset: int | None = None,
) -> tuple[list[Window], int]:
    """All windows of ``docs`` for every P in ``prefix_lens`` and every placement -> (windows, skipped).

    ``skipped`` counts (document, P, placement) combinations with a document too short for the window; a document
    too short for all of them gets its one :func:`short_window` (placement ``short``) where it has 16 tokens or more.
    Order: document, then P, then placement, then start -- deterministic.
    """
    bad = [p for p in placements if p not in PLACEMENTS]
    if bad:
        raise UserError(f"unknown window placement {bad[0]!r}; use one of {', '.join(PLACEMENTS)}")
    stride = stride or suffix_len
    windows: list[Window] = []
    skipped = 0
    for doc in docs:
        toks, identity = doc.tokens, None
        for p_req in prefix_lens:
            for placement in placements:
                offs, p = starts(len(toks), p_req, suffix_len, placement, stride, offsets, max_offset)
                if not offs:
                    skipped += 1
                if offs and identity is None:  # once per document: each key then hashes a bounded length
                    identity = document_identity(toks)
                for s in offs:
                    windows.append(
                        Window(
                            doc,
                            p_req,
                            suffix_len,
                            placement,
                            s,
                            toks[s : s + p],
                            toks[s + p : s + p + suffix_len],
                            _key(identity, p_req, suffix_len, placement, s),
                        )
                    )
        fit = short_window(len(toks), suffix_len) if identity is None else None  # identity None: no window yet
        if fit is not None:
            p, n_suffix = fit
            windows.append(
                Window(
                    doc,
                    ALL,
                    n_suffix,
                    SHORT,
                    0,
                    toks[:p],
                    toks[p:],
                    _key(document_identity(toks), ALL, n_suffix, SHORT, 0),
                )
            )
    if docs and not windows:
        longest = max(len(d.tokens) for d in docs)
        floor = min(suffix_len, MIN_SHORT_SUFFIX)
        raise UserError(
            f"all {len(docs)} documents are too short for any window: a short document's window needs "
            f"{2 * floor} tokens (its last half as the suffix, at least {floor} tokens) but the longest "
            f"document has {longest}; evaluate longer documents"
        )
    return windows, skipped


def windows_sha256(windows: Sequence[Window]) -> str:
    """One hash of all windows' keys, in order: identifies the exact evaluation data."""
    h = hashlib.sha256()
    for w in windows:
        h.update(bytes.fromhex(w.key))
    return h.hexdigest()
