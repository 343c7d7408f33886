"""Goldfish masks: which target tokens are left out of the loss.

Pure functions on integer id tensors ([T] or [B, T]); the mask knows nothing of models. ``True`` means *dropped*.
Positions follow the Hugging Face label convention: ``mask[..., t]`` refers to token ``input_ids[..., t]`` as a
*target* (the token predicted from everything before it), i.e. to ``labels[..., t]`` before the model's shift.

Strategies
----------
``"hash"`` (default)
    The decision for the target at position ``t`` is a function of its **window** only: the token ids at positions
    ``t-h+1 .. t`` (the target itself and the h-1 tokens before it) that belong to the same document as ``t`` and
    are not special. A document begins at the start of a row, at every special token (BOS/EOS/pad, ``special_ids``,
    any negative id such as the ignore index -100), where ``document_ids`` changes, and where ``position_ids`` does
    not continue by +1. So near the start of a document the window is just the document's own first tokens, and
    the same document gets the same mask in any row, at any offset, next to any neighbours, with any padding.
    The window is hashed oldest -> newest with the splitmix64 finaliser (``acc = mix(acc XOR (id + 1))``), so
    permuting the window changes the hash; the top 53 bits are compared with ``2**53 / k`` in integer arithmetic.
    Only int64 tensor ops are used: bit-identical on CPU and GPU and in every process. Special tokens are never
    dropped and never enter a hash. ``seed`` salts the hash (different seeds, independent masks).

``"hash-table"`` (reference-exact)
    Bit-exact with the published Goldfish implementation (Hans et al. 2024, ``lit_gpt/utils.py``) and Megatron-LM's
    port, so results compare with the paper: key = product of the h ids ending at (and including) the target in
    wrapping int64; index = key mod 1,000,003; drop where ``table[index] < 1/k`` with ``table = torch.rand(1_000_003)``
    from a CPU generator seeded with 2971215073; the first h-1 targets of every row are never dropped.
    Known weaknesses, kept on purpose for exactness: the key is a product, so it is blind to the order of the window;
    any window containing id 0 has key 0 (all such windows share one decision, so they are dropped all-or-none);
    windows span document boundaries and padding; and the original drew its table on the GPU, whose generator gives
    a different table than the CPU one used here. Special ids are still never dropped.

``"static"``
    The paper's k-GL baseline: every k-th token of each document (positions k-1, 2k-1, ... counted from the
    document's first token) is dropped, independent of content.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Literal, Sequence

import torch

from .config import check, option, raise_problems
from .errors import ConfigError

STRATEGIES = ("hash", "hash-table", "static")
IGNORE_INDEX = -100

Strategy = Literal["hash", "hash-table", "static"]

_TABLE_SIZE = 1_000_003
_TABLE_SEED = 2971215073  # the 47th Fibonacci number, a prime; the published seed
_table_cache: torch.Tensor | None = None


@dataclasses.dataclass
class GoldfishConfig:
    """How Goldfish Loss selects the tokens to drop (the ``goldfish:`` section of a training config)."""

    k: int = option(4, "drop 1 in k target tokens (k >= 2; the paper's default is 4)")
    h: int = option(13, "context width: the number of tokens, ending at the target, whose ids decide (paper: 13)")
    strategy: Strategy = option("hash", "hash (default, document-aware) | hash-table (paper-exact) | static (k-GL)")
    seed: int = option(0, "salt of the 'hash' strategy; a different seed gives an independent mask")
    special_ids: list[int] = option(factory=list, help="token ids never dropped and never hashed (e.g. BOS/EOS/pad)")
    ignore_index: int = option(IGNORE_INDEX, "label value that tells the loss to skip a position")

    def __post_init__(self) -> None:
        problems: list[str] = []
        _validate(self.k, self.h, self.strategy, problems)
        raise_problems(problems)
        self.special_ids = [int(i) for i in self.special_ids]


def _validate(k: object, h: object, strategy: object, problems: list[str]) -> None:
    check(isinstance(k, int) and not isinstance(k, bool) and k >= 2, problems,
          f"k={k!r} is invalid: k must be an integer >= 2 (1 in k target tokens is dropped; the paper uses 4)")
    check(isinstance(h, int) and not isinstance(h, bool) and h >= 1, problems,
          f"h={h!r} is invalid: h must be an integer >= 1 (the hashed context width; the paper uses 13)")
    check(strategy in STRATEGIES, problems,
          f"strategy={strategy!r} is unknown; accepted values: {', '.join(STRATEGIES)}")


# ------------------------------------------------------------------------------------------------ 64-bit mixing


def _i64(c: int) -> int:
    """An unsigned 64-bit constant as the signed int64 with the same bits."""
    return c - (1 << 64) if c >= (1 << 63) else c


_M1 = _i64(0xBF58476D1CE4E5B9)
_M2 = _i64(0x94D049BB133111EB)
_GOLDEN = _i64(0x9E3779B97F4A7C15)


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic on signed ints)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (wrapping multiply), a bijection with full avalanche."""
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    return x ^ _shr(x, 31)


# ------------------------------------------------------------------------------------------------ documents


def _as_2d(t: torch.Tensor | None, like: torch.Tensor, name: str) -> torch.Tensor | None:
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


def segment_ids(ids: torch.Tensor, special: torch.Tensor, document_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """[B, T] int64: positions with equal values belong to the same document segment (see module docstring)."""
    new = torch.zeros_like(special)
    new[:, 0] = True
    new[:, 1:] = special[:, 1:] | special[:, :-1]
    if document_ids is not None:
        new[:, 1:] |= document_ids[:, 1:] != document_ids[:, :-1]
    if position_ids is not None:
        new[:, 1:] |= position_ids[:, 1:] != position_ids[:, :-1] + 1
    return new.long().cumsum(dim=-1)


def _position_in_segment(seg: torch.Tensor) -> torch.Tensor:
    """[B, T]: index of each token inside its segment (0 at the segment's first token)."""
    t = torch.arange(seg.shape[-1], device=seg.device).expand_as(seg)
    starts = torch.zeros_like(seg, dtype=torch.bool)
    starts[:, 0] = True
    starts[:, 1:] = seg[:, 1:] != seg[:, :-1]
    first = torch.where(starts, t, torch.zeros_like(t)).cummax(dim=-1).values
    return t - first


# ------------------------------------------------------------------------------------------------ strategies


def _hash_mask(ids: torch.Tensor, k: int, h: int, seg: torch.Tensor, special: torch.Tensor, seed: int) -> torch.Tensor:
    B, T = ids.shape
    acc = mix64(torch.full((B, T), _i64((seed * _GOLDEN) % (1 << 64)) ^ h, dtype=torch.int64, device=ids.device))
    tokens = ids.to(torch.int64) + 1  # +1 so id 0 is not the XOR identity
    for j in range(min(h, T) - 1, -1, -1):  # oldest -> newest: order-sensitive
        # window member at offset j for every position t: token t-j, valid if in the same segment.
        x = torch.zeros_like(tokens)
        same = torch.zeros_like(special)
        x[:, j:] = tokens[:, : T - j]
        same[:, j:] = seg[:, j:] == seg[:, : T - j]
        acc = torch.where(same, mix64(acc ^ x), acc)
    threshold = (1 << 53) // k
    return (_shr(acc, 11) < threshold) & ~special


def _reference_table() -> torch.Tensor:
    global _table_cache
    if _table_cache is None:
        rng = torch.Generator(device="cpu")
        rng.manual_seed(_TABLE_SEED)
        _table_cache = torch.rand(_TABLE_SIZE, generator=rng)
    return _table_cache


def _hash_table_mask(ids: torch.Tensor, k: int, h: int, special: torch.Tensor) -> torch.Tensor:
    B, T = ids.shape
    mask = torch.zeros_like(special)
    if T < h:
        return mask
    keys = ids.to(torch.int64).unfold(1, h, 1).prod(dim=-1)  # (B, T-h+1), wrapping int64 product
    index = torch.remainder(keys, _TABLE_SIZE)  # non-negative, like the reference's `%`
    table = _reference_table().to(ids.device)
    mask[:, h - 1:] = table[index] < 1 / k
    return mask & ~special


def _static_mask(k: int, seg: torch.Tensor, special: torch.Tensor) -> torch.Tensor:
    pos = _position_in_segment(seg)
    return ((pos + 1) % k == 0) & ~special


def goldfish_mask(
    input_ids: torch.Tensor | Sequence[int] | Sequence[Sequence[int]],
    k: int = 4,
    h: int = 13,
    strategy: str = "hash",
    special_ids: Iterable[int] = (),
    *,
    document_ids: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    seed: int = 0,
) -> torch.Tensor:
    """Bool tensor shaped like ``input_ids`` ([T] or [B, T]); ``True`` = this target token is dropped from the loss.

    ``document_ids`` / ``position_ids`` (same shape) mark document boundaries inside packed rows for the ``hash``
    and ``static`` strategies. Computed on the tensor's own device with vectorised integer ops.
    """
    problems: list[str] = []
    _validate(k, h, strategy, problems)
    if problems:
        raise ConfigError("; ".join(problems))
    ids = torch.as_tensor(input_ids)
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise ValueError(f"input_ids must be an integer tensor of token ids, got dtype {ids.dtype}")
    if ids.dim() not in (1, 2):
        raise ValueError(f"input_ids must have shape [T] or [B, T], got {tuple(ids.shape)}")
    squeeze = ids.dim() == 1
    ids2 = ids.unsqueeze(0) if squeeze else ids
    if ids2.numel() == 0:
        return torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
    docs = _as_2d(document_ids, ids2, "document_ids")
    pos = _as_2d(position_ids, ids2, "position_ids")
    special = special_positions(ids2, special_ids)
    if strategy == "hash-table":
        mask = _hash_table_mask(ids2, k, h, special)
    else:
        seg = segment_ids(ids2, special, docs, pos)
        mask = _hash_mask(ids2, k, h, seg, special, seed) if strategy == "hash" else _static_mask(k, seg, special)
    return mask.squeeze(0) if squeeze else mask


def config_mask(ids: torch.Tensor, config: GoldfishConfig, **boundaries: torch.Tensor | None) -> torch.Tensor:
    """:func:`goldfish_mask` with every setting taken from a :class:`GoldfishConfig`."""
    return goldfish_mask(ids, config.k, config.h, config.strategy, config.special_ids, seed=config.seed, **boundaries)


def apply_goldfish(
    labels: torch.Tensor,
    config: GoldfishConfig,
    *,
    document_ids: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """A copy of ``labels`` with dropped positions set to ``config.ignore_index`` (-100: every HF loss skips it).

    The mask is computed from the labels themselves: positions already ignored (padding, prompts) count as
    special, so they are never hashed and act as document boundaries.
    """
    labels = torch.as_tensor(labels)
    mask = config_mask(labels, config, document_ids=document_ids, position_ids=position_ids)
    return labels.masked_fill(mask, config.ignore_index)
