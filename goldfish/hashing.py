"""The hashing the Goldfish masks (:mod:`goldfish.masks`) decide by: 64-bit mixing, document segments and the hash of
each position's window of context. Pure int64 tensor ops: bit-identical on CPU and GPU and in every process."""

from __future__ import annotations

from typing import Iterable

import torch


def i64(c: int) -> int:
    """An unsigned 64-bit constant as the signed int64 with the same bits."""
    return c - (1 << 64) if c >= (1 << 63) else c


_M1 = i64(0xBF58476D1CE4E5B9)
_M2 = i64(0x94D049BB133111EB)
_GOLDEN = i64(0x9E3779B97F4A7C15)


def shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic on signed ints)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (wrapping multiply), a bijection with full avalanche."""
    x = (x ^ shr(x, 30)) * _M1
    x = (x ^ shr(x, 27)) * _M2
    return x ^ shr(x, 31)


# ------------------------------------------------------------------------------------------------ documents


def as_2d(t: torch.Tensor | None, like: torch.Tensor, name: str) -> torch.Tensor | None:
    """``t`` (document or position ids, [T] or [B, T]) as a [B, T] tensor on ``like``'s device; one line naming
    ``name`` when its shape differs from ``like``'s."""
    if t is None:
        return None
    t = torch.as_tensor(t, device=like.device)
    if t.dim() == 1:
        t = t.unsqueeze(0)
    if t.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)} but input_ids has shape {tuple(like.shape)}")
    return t


def special_positions(ids: torch.Tensor, special_ids: Iterable[int] = ()) -> torch.Tensor:
    """Bool tensor: positions holding a special id, or any negative id (ignore index, padding labels)."""
    special = ids < 0
    special_ids = list(special_ids)
    if special_ids:
        special |= torch.isin(ids, torch.tensor(special_ids, dtype=ids.dtype, device=ids.device))
    return special


def segment_ids(
    ids: torch.Tensor,
    special: torch.Tensor,
    document_ids: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """[B, T] int64: positions with equal values belong to the same document segment (the boundaries:
    :mod:`goldfish.masks`)."""
    new = torch.zeros_like(special)
    new[:, 0] = True
    new[:, 1:] = special[:, 1:] | special[:, :-1]
    if document_ids is not None:
        new[:, 1:] |= document_ids[:, 1:] != document_ids[:, :-1]
    if position_ids is not None:
        new[:, 1:] |= position_ids[:, 1:] != position_ids[:, :-1] + 1
    return new.long().cumsum(dim=-1)


def position_in_segment(seg: torch.Tensor) -> torch.Tensor:
    """[B, T]: index of each token inside its segment (0 at the segment's first token)."""
    t = torch.arange(seg.shape[-1], device=seg.device).expand_as(seg)
    starts = torch.zeros_like(seg, dtype=torch.bool)
    starts[:, 0] = True
    starts[:, 1:] = seg[:, 1:] != seg[:, :-1]
    first = torch.where(starts, t, torch.zeros_like(t)).cummax(dim=-1).values
    return t - first


# ------------------------------------------------------------------------------------------------ windows


def initial_state(seed: int, h: int, tag: int) -> int:
    """The hash state before the first window token: the seed, h and the strategy's tag, as one int64."""
    return i64((seed * _GOLDEN) % (1 << 64)) ^ h ^ tag


def window_hash(
    ids: torch.Tensor, h: int, seg: torch.Tensor, seed: int, offsets: range, tag: int = 0
) -> tuple[torch.Tensor, ...]:
    """[B, T] int64 hash of each position's window and [B, T] bool "the window is not empty".

    The window of position t: tokens ``t - j`` for j in ``offsets`` (oldest first) that lie in t's segment.
    """
    B, T = ids.shape
    acc = mix64(torch.full((B, T), initial_state(seed, h, tag), dtype=torch.int64, device=ids.device))
    tokens = ids.to(torch.int64) + 1  # +1 so id 0 is not the XOR identity
    nonempty = torch.zeros(B, T, dtype=torch.bool, device=ids.device)
    for j in sorted((j for j in offsets if j < T), reverse=True):  # oldest -> newest: order-sensitive
        # window member at offset j for every position t: token t-j, valid if in the same segment.
        x = torch.zeros_like(tokens)
        same = torch.zeros_like(nonempty)
        x[:, j:] = tokens[:, : T - j]
        same[:, j:] = seg[:, j:] == seg[:, : T - j]
        acc = torch.where(same, mix64(acc ^ x), acc)
        nonempty |= same
    return acc, nonempty
