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

``"canonical"`` (robust to case and whitespace)
    Like ``hash``, but the window is read through a case- and whitespace-folding view of the text, so a text and
    its case/whitespace variants get the same decisions at the same characters. Needs a :class:`TokenFold` of the
    tokenizer (``goldfish.fold.token_fold(tokenizer)``: per vocabulary id, the hash of its casefolded bytes without
    whitespace, and whether it starts a word, ends with whitespace or is whitespace only). Tokens are grouped into
    words (a word starts at a document start, at a token with leading whitespace, or after whitespace); the key of
    a target is its own word's folded prefix up to and including the target plus the h-1 complete words before it
    in the same document (so ``h`` counts *words* here), hashed like ``hash``. Whitespace-only tokens never enter
    a word; their key is the h-1 words before them plus a fixed tag. Re-cased or re-spaced text tokenizes
    differently, but every word-final token (and every token whose folded prefix is unchanged) keeps its decision.

``"hash-preceding"`` (the target outside its own window)
    Like ``hash``, but the window is the h tokens *before* the target (positions ``t-h .. t-1`` in the same
    document), never the target itself, and the hash is salted apart from ``hash``. Why: under ``hash`` the target
    is in its window, so at a position an attacker believes dropped only the tokens whose window hashes to "drop"
    can be the true one (about 1/k of the vocabulary): the mask leaks a hint of each dropped token. Here the
    decision at ``t`` is fixed before the token is known, so it says nothing about which token it is. A document's
    first target has an empty window and is never dropped (otherwise one seed-wide decision would drop every
    document's first token, or none); every later target is dropped at the 1/k rate, with ``hash``'s invariances
    (batch, padding, packing, documents, processes, devices).

``"static"``
    The paper's k-GL baseline: every k-th token of each document (positions k-1, 2k-1, ... counted from the
    document's first token) is dropped, independent of content.

Controls of the leakage audit (docs/goldfish-loss.md), on top of any strategy, keeping its positions
(``GoldfishConfig.base``): ``supervised_fraction`` p trains a share ~p of the dropped positions anyway (a second,
salted ``hash`` decision on the same window; :func:`config_mask` is the effective mask, the base minus that share);
``replace_dropped`` (the no-leak twin) replaces the dropped tokens in the model's input (:func:`twin_input_ids`).
The 64-bit mixing, document segments and window hash they all read are :mod:`goldfish.hashing`.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Literal, Sequence

import torch

from .config import check, check_seed, option, raise_problems, runtime_option, shown
from .errors import ConfigError
from .hashing import (
    as_2d,
    i64,
    initial_state,
    mix64,
    position_in_segment,
    segment_ids,
    shr,
    special_positions,
    window_hash,
)

STRATEGIES = ("hash", "hash-table", "canonical", "hash-preceding", "static")
IGNORE_INDEX = -100

Strategy = Literal["hash", "hash-table", "canonical", "hash-preceding", "static"]

_TABLE_SIZE = 1_000_003
_TABLE_SEED = 2971215073  # the 47th Fibonacci number, a prime; the published seed
_table_cache: torch.Tensor | None = None


@dataclasses.dataclass(frozen=True)
class TokenFold:
    """The case-/whitespace-folding view of a vocabulary that the ``canonical`` strategy hashes; (V,) tensors.

    Built from a tokenizer by ``goldfish.fold.token_fold``; indexed by token id.
    """

    piece: torch.Tensor  # int64: polynomial hash (base FOLD_BASE, mod 2**64) of the token's folded bytes
    scale: torch.Tensor  # int64: FOLD_BASE ** len(folded bytes) mod 2**64, to append the token to a word's hash
    starts: torch.Tensor  # bool: the token begins with whitespace (it starts a new word)
    ends: torch.Tensor  # bool: the token ends with whitespace (the next token starts a new word)
    blank: torch.Tensor  # bool: the token is whitespace only (its folded form is empty)

    @property
    def size(self) -> int:
        return int(self.piece.shape[0])

    def to(self, device: torch.device) -> "TokenFold":
        if self.piece.device == device:
            return self
        return TokenFold(*(t.to(device) for t in (self.piece, self.scale, self.starts, self.ends, self.blank)))


@dataclasses.dataclass
class GoldfishConfig:
    """How Goldfish Loss selects the tokens to drop (the ``goldfish:`` section of a training config)."""

    k: int = option(4, "drop 1 in k target tokens (k >= 2; the paper's default is 4)")
    h: int = option(13, "context width: the number of tokens, ending at the target, whose ids decide (paper: 13)")
    strategy: Strategy = option(
        "hash",
        "hash (default, document-aware) | hash-table (paper-exact) | canonical "
        "(hash over a case/whitespace-folded view of the text) | hash-preceding "
        "(hash of the h tokens before the target, not the target) | static (k-GL)",
    )
    seed: int = option(0, "salt of the 'hash' strategy; a different seed gives an independent mask")
    special_ids: list[int] = option(factory=list, help="token ids never dropped and never hashed (e.g. BOS/EOS/pad)")
    replace_dropped: bool = option(
        False,
        "the leakage audit's no-leak twin: the tokens the mask drops are also "
        "replaced in the model's input by pseudo-random ids, so training sees none "
        "of them, as target or as context (`goldfish train` only)",
    )
    supervised_fraction: float = option(
        0.0,
        "a positive control of the leakage audit: this share (0 <= p < 1) of "
        "the positions the mask drops is trained on anyway, chosen by an "
        "independent hash of the same window; 0: off",
    )
    fold: TokenFold | None = runtime_option(
        "canonical only: the tokenizer's fold table (set by the trainer, the "
        "collator and `goldfish mask` from their tokenizer; never in YAML)"
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        _validate(self.k, self.h, self.strategy, problems)
        check_seed(self.seed, problems)
        _validate_controls(self.replace_dropped, self.supervised_fraction, problems)
        raise_problems(problems)
        self.special_ids = [int(i) for i in self.special_ids]

    @property
    def base(self) -> "GoldfishConfig":
        """This mask without the audit controls (``replace_dropped``, ``supervised_fraction``): the positions the
        leakage audit reads, the same for a Goldfish arm, its no-leak twin and its positive controls."""
        return dataclasses.replace(self, replace_dropped=False, supervised_fraction=0.0)


MAX_K = 2**32  # drop 1 in 4 billion: beyond that no target of any corpus is dropped
MAX_H = 2**20  # a context of a million tokens: longer than any training row


def _validate(k: object, h: object, strategy: object, problems: list[str]) -> None:
    check(
        isinstance(k, int) and not isinstance(k, bool) and 2 <= k <= MAX_K,
        problems,
        f"k={shown(k)} is invalid: k must be an integer >= 2 and <= 2**32 (1 in k target tokens is dropped; the "
        f"paper uses 4)",
    )
    check(
        isinstance(h, int) and not isinstance(h, bool) and 1 <= h <= MAX_H,
        problems,
        f"h={shown(h)} is invalid: h must be an integer >= 1 and <= 2**20 (the hashed context width; the paper "
        f"uses 13)",
    )
    check(
        strategy in STRATEGIES,
        problems,
        f"strategy={shown(strategy)} is unknown; accepted values: {', '.join(STRATEGIES)}",
    )


def _validate_controls(replace_dropped: object, fraction: object, problems: list[str]) -> None:
    """The audit controls: a boolean twin, a share in [0, 1), and not both (one control per arm)."""
    check(
        isinstance(replace_dropped, bool),
        problems,
        f"replace_dropped={shown(replace_dropped)} is invalid: it must be true or false (the no-leak twin)",
    )
    number = isinstance(fraction, (int, float)) and not isinstance(fraction, bool)
    check(
        number and 0 <= fraction < 1,
        problems,
        f"supervised_fraction={shown(fraction)} is invalid: it must be a number >= 0 and < 1 (the share of the "
        f"dropped positions trained on anyway; 0: off)",
    )
    check(
        not (replace_dropped is True and number and fraction > 0),
        problems,
        f"replace_dropped=true and supervised_fraction={shown(fraction)} cannot be combined: the no-leak twin "
        f"trains on none of the dropped positions; a positive control trains on a share of them (one arm each)",
    )


# ------------------------------------------------------------------------------------------------ salts


FOLD_BASE = 0x100000001B3  # the 64-bit FNV prime: base of the folded-bytes polynomial hash of "canonical"
_CANONICAL_TAG = 0x43414E4F4E  # salts "canonical" apart from "hash" ("CANON")
_BLANK_TAG = i64(0xB1A4C5EED0000001)  # the key contribution of a whitespace-only token
_PRECEDING_TAG = 0x5052454345444500  # salts "hash-preceding" apart from "hash" ("PRECEDE")
_SUPERVISED_TAG = 0x5355504552564953  # salts the positive control's choice apart from every mask ("SUPERVIS")
_TWIN_TAG = 0x5457494E00000000  # salts the no-leak twin's replacement ids apart from every mask ("TWIN")


# ------------------------------------------------------------------------------------------------ strategies


def _drops(acc: torch.Tensor, k: int) -> torch.Tensor:
    """The drop decision of a window hash: its top 53 bits below ``2**53 / k`` (exact integer arithmetic)."""
    return shr(acc, 11) < (1 << 53) // k


def _below(acc: torch.Tensor, fraction: float) -> torch.Tensor:
    """A window hash's top 53 bits below ``fraction * 2**53``: True for a share ~``fraction`` of the windows."""
    return shr(acc, 11) < int(fraction * (1 << 53))


def _supervised(ids: torch.Tensor, h: int, seg: torch.Tensor, seed: int, fraction: float) -> torch.Tensor:
    """[B, T] bool: the positive control's choice -- the positions whose ``hash`` window (t-h+1 .. t in t's
    segment), hashed with a salt of its own, falls below ``fraction``: a share ~``fraction`` of any set of positions,
    independent of every mask's own decision on them."""
    acc, _ = window_hash(ids, h, seg, seed, range(h), _SUPERVISED_TAG)
    return _below(acc, fraction)


def _hash_mask(ids: torch.Tensor, k: int, h: int, seg: torch.Tensor, special: torch.Tensor, seed: int) -> torch.Tensor:
    acc, _ = window_hash(ids, h, seg, seed, range(h))
    return _drops(acc, k) & ~special


def _preceding_mask(
    ids: torch.Tensor, k: int, h: int, seg: torch.Tensor, special: torch.Tensor, seed: int
) -> torch.Tensor:
    acc, nonempty = window_hash(ids, h, seg, seed, range(1, h + 1), _PRECEDING_TAG)
    return _drops(acc, k) & nonempty & ~special


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
    mask[:, h - 1 :] = table[index] < 1 / k
    return mask & ~special


def _shift(x: torch.Tensor, d: int, fill: int | bool) -> torch.Tensor:
    """``x`` moved d positions right along the last dim (``out[:, t] = x[:, t-d]``), ``fill`` at the first d."""
    out = torch.full_like(x, fill)
    out[:, d:] = x[:, : x.shape[1] - d]
    return out


def _word_prefix_hashes(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[B, T] int64: ``P[t] = a[t] * P[t-1] + b[t]`` (wrapping), ``P[-1] = 0``, as a log-depth scan.

    Each position is the affine map x -> a*x + b; a Hillis-Steele scan composes the maps of ranges of doubling
    length (``a = 0`` restarts the recurrence: a word start). log2(T) steps of int64 ops, exact on every device.
    """
    d = 1
    while d < a.shape[1]:
        b = a * _shift(b, d, 0) + b
        a = a * _shift(a, d, 1)
        d *= 2
    return b


def _canonical_mask(
    ids: torch.Tensor, k: int, h: int, seg: torch.Tensor, special: torch.Tensor, seed: int, fold: TokenFold | None
) -> torch.Tensor:
    if fold is None:
        raise ConfigError(
            "strategy=canonical needs the tokenizer's fold table: pass fold=token_fold(tokenizer) "
            "(goldfish.fold); the trainer, the collator and `goldfish mask` build it themselves"
        )
    B, T = ids.shape
    safe = torch.where(special, torch.zeros_like(ids), ids).to(torch.int64)  # (B, T) ids usable as table indices
    if int(safe.max()) >= fold.size:
        raise ValueError(
            f"token id {int(safe.max())} is outside the fold table of {fold.size} ids; build the "
            "table from the tokenizer that produced these ids"
        )
    fold = fold.to(ids.device)
    blank = fold.blank[safe] | special  # (B, T): positions that belong to no word
    seg_start = torch.ones_like(special)
    seg_start[:, 1:] = seg[:, 1:] != seg[:, :-1]
    after_space = _shift(fold.ends[safe] | blank, 1, False)
    word_start = ~blank & (seg_start | fold.starts[safe] | after_space)  # (B, T)
    # P[t]: hash of the folded bytes of t's word, from its first token through t
    zero = torch.zeros_like(safe)
    P = _word_prefix_hashes(
        torch.where(word_start | blank, zero, fold.scale[safe]), torch.where(blank, zero, fold.piece[safe])
    )
    next_breaks = torch.ones_like(special)
    next_breaks[:, :-1] = word_start[:, 1:] | blank[:, 1:]
    last = ~blank & next_breaks  # (B, T): the token completing its word
    widx = word_start.long().cumsum(dim=-1) - 1  # (B, T): index of t's word (blank: of the last word before it)
    # complete words by index, per row: WH[b, w] = hash of word w, WS[b, w] = its segment; column T is a sink
    sink = torch.full_like(widx, T)
    slot = torch.where(last, widx, sink)
    WH = torch.zeros(B, T + 1, dtype=torch.int64, device=ids.device).scatter_(1, slot, P)
    WS = torch.full((B, T + 1), -1, dtype=seg.dtype, device=ids.device).scatter_(1, slot, seg)
    prev = widx - (~blank).long()  # (B, T): the last complete word before t's own word
    acc = mix64(torch.full((B, T), initial_state(seed, h, _CANONICAL_TAG), dtype=torch.int64, device=ids.device))
    for j in range(min(h - 1, T) - 1, -1, -1):  # oldest -> newest, like "hash"; a row has < T earlier words
        w = prev - j
        at = w.clamp(min=0)
        valid = (w >= 0) & (WS.gather(1, at) == seg)
        acc = torch.where(valid, mix64(acc ^ WH.gather(1, at)), acc)
    acc = mix64(acc ^ torch.where(blank, torch.full_like(P, _BLANK_TAG), P))
    return _drops(acc, k) & ~special


def _static_mask(k: int, seg: torch.Tensor, special: torch.Tensor) -> torch.Tensor:
    pos = position_in_segment(seg)
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
    fold: TokenFold | None = None,
    supervised_fraction: float = 0.0,
) -> torch.Tensor:
    """Bool tensor shaped like ``input_ids`` ([T] or [B, T]); ``True`` = this target token is dropped from the loss.

    ``document_ids`` / ``position_ids`` (same shape) mark document boundaries inside packed rows for the ``hash``,
    ``hash-preceding``, ``canonical`` and ``static`` strategies. ``fold``: the tokenizer's :class:`TokenFold`, needed by
    ``canonical``. ``supervised_fraction`` (a positive control of the leakage audit): the share of the positions the
    strategy drops that the loss trains on anyway (:func:`_supervised`), left out of the returned mask.
    Computed on the tensor's own device with vectorised integer ops.
    """
    problems: list[str] = []
    _validate(k, h, strategy, problems)
    _validate_controls(False, supervised_fraction, problems)
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
    docs = as_2d(document_ids, ids2, "document_ids")
    pos = as_2d(position_ids, ids2, "position_ids")
    special = special_positions(ids2, special_ids)
    seg = segment_ids(ids2, special, docs, pos)
    if strategy == "hash-table":
        mask = _hash_table_mask(ids2, k, h, special)
    elif strategy == "hash":
        mask = _hash_mask(ids2, k, h, seg, special, seed)
    elif strategy == "hash-preceding":
        mask = _preceding_mask(ids2, k, h, seg, special, seed)
    elif strategy == "canonical":
        mask = _canonical_mask(ids2, k, h, seg, special, seed, fold)
    else:
        mask = _static_mask(k, seg, special)
    if supervised_fraction:
        mask &= ~_supervised(ids2, h, seg, seed, supervised_fraction)
    return mask.squeeze(0) if squeeze else mask


def config_mask(ids: torch.Tensor, config: GoldfishConfig, **boundaries: torch.Tensor | None) -> torch.Tensor:
    """:func:`goldfish_mask` with every setting taken from a :class:`GoldfishConfig`: the positions the loss leaves
    out (a positive control's ``supervised_fraction`` removed). The positions the leakage audit reads are
    ``config_mask(ids, config.base)``."""
    return goldfish_mask(
        ids,
        config.k,
        config.h,
        config.strategy,
        config.special_ids,
        seed=config.seed,
        fold=config.fold,
        supervised_fraction=config.supervised_fraction,
        **boundaries,
    )


def apply_goldfish(
    labels: torch.Tensor,
    config: GoldfishConfig,
    *,
    document_ids: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """A copy of ``labels`` with dropped positions set to ``IGNORE_INDEX`` (-100: every HF loss skips it).

    The mask is computed from the labels themselves: positions already ignored (padding, prompts) count as
    special, so they are never hashed and act as document boundaries.
    """
    labels = torch.as_tensor(labels)
    mask = config_mask(labels, config, document_ids=document_ids, position_ids=position_ids)
    return labels.masked_fill(mask, IGNORE_INDEX)


def twin_input_ids(
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    dropped: torch.Tensor,
    config: GoldfishConfig,
    vocab_size: int,
    *,
    document_ids: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """The no-leak twin's model input: a copy of ``input_ids`` (B, T) with the token at every ``dropped`` position
    (the mask of ``labels``, computed from the original ids) replaced by a pseudo-random id, so the model never sees
    a dropped token, as target or as context.

    The replacement at t is drawn uniformly from the ids in ``[0, vocab_size)`` that are neither special
    (``config.special_ids``) nor the original token, by a hash (salted by ``config.seed``, tagged apart from every
    mask) of t's window of ``config.h`` label ids in t's document with every dropped id blanked: a function of the
    seed, the document's kept tokens and where its drops fall, never of a dropped token beyond excluding it. So a
    document gets the same twin text in every row and every rerun (bit-identical on every device)."""
    labels = torch.as_tensor(labels)
    docs, pos = as_2d(document_ids, labels, "document_ids"), as_2d(position_ids, labels, "position_ids")
    seg = segment_ids(labels, special_positions(labels, config.special_ids), docs, pos)
    acc, _ = window_hash(torch.where(dropped, -1, labels), config.h, seg, config.seed, range(config.h), _TWIN_TAG)
    ids = torch.arange(vocab_size, device=labels.device)
    allowed = ids[~special_positions(ids, config.special_ids)]  # (n,) ascending
    if len(allowed) < 2:
        raise ValueError(f"the no-leak twin needs >= 2 non-special ids to draw from; the vocabulary has {vocab_size}")
    draw = shr(acc, 11) % (len(allowed) - 1)  # (B, T) in [0, n-1): an index into allowed without the original
    skip = (draw >= torch.searchsorted(allowed, input_ids.contiguous())).long()
    return torch.where(dropped, allowed[draw + skip], input_ids)


# ------------------------------------------------------------------------------------------------ the next token


def next_token_drops(context: torch.Tensor, config: GoldfishConfig, vocab_size: int, chunk: int = 2048) -> torch.Tensor:
    """(B, V) bool: True where appending id ``v`` to row ``b`` of ``context`` (B, C) makes that new target dropped.

    Exactly ``config_mask(cat(context[b], [v]))[-1]`` for every ``v`` (tested); negative ids in ``context`` (e.g.
    -1 for left padding) are boundaries like any special id, and for ``hash-table`` a row starts after its last
    negative id (its left padding). What an attacker who knows the mask settings can compute at each decoding
    step: under ``hash``, ``hash-table`` and ``canonical`` the target is in its own window, so the decision differs
    between candidates; under ``hash-preceding`` and ``static`` it is one decision for every non-special candidate.
    ``hash`` and ``hash-table`` are computed from the window state in O(B·V); ``canonical`` masks ``chunk``
    candidate rows at a time (slower).
    """
    ctx = torch.as_tensor(context).to(torch.int64)
    if ctx.dim() != 2:
        raise ValueError(f"context must have shape [B, C], got {tuple(ctx.shape)}")
    B = ctx.shape[0]
    candidates = torch.arange(vocab_size, device=ctx.device)  # (V,)
    special_v = special_positions(candidates, config.special_ids)  # (V,) never dropped
    if config.strategy == "hash-table":
        drops = _next_hash_table(ctx, config.k, config.h, candidates)
    elif config.strategy == "canonical":
        return _next_by_rows(ctx, config, candidates, chunk) & ~special_v
    else:
        if config.strategy in ("hash", "hash-preceding"):
            ctx = ctx[:, -config.h :]  # the window reaches h tokens back at most: the rest cannot change a decision
        placeholder = torch.zeros(B, 1, dtype=torch.int64, device=ctx.device)
        ext = torch.cat([ctx, placeholder], dim=1)  # (B, C + 1): the new position last, never special
        special = special_positions(ext, config.special_ids)
        special[:, -1] = False
        seg = segment_ids(ext, special)
        h, seed = config.h, config.seed
        if config.strategy == "hash":  # the state after the h-1 tokens before the target, then the target
            acc, _ = window_hash(ext, h, seg, seed, range(1, h))
            drops = _drops(mix64(acc[:, -1:] ^ (candidates[None, :] + 1)), config.k)  # (B, V)
        elif config.strategy == "hash-preceding":
            acc, nonempty = window_hash(ext, h, seg, seed, range(1, h + 1), _PRECEDING_TAG)
            drops = (_drops(acc[:, -1:], config.k) & nonempty[:, -1:]).expand(B, vocab_size)
        else:  # static
            drops = ((position_in_segment(seg)[:, -1:] + 1) % config.k == 0).expand(B, vocab_size)
    if config.supervised_fraction:
        drops = drops & ~_next_supervised(ctx, config, candidates)
    return drops & ~special_v


def _next_supervised(ctx: torch.Tensor, config: GoldfishConfig, candidates: torch.Tensor) -> torch.Tensor:
    """(B, V) the positive control's choice (:func:`_supervised`) for a new last target ``v`` after ``ctx``."""
    ctx = ctx[:, -config.h :]  # the window reaches h - 1 tokens back
    ext = torch.cat([ctx, torch.zeros(ctx.shape[0], 1, dtype=torch.int64, device=ctx.device)], dim=1)
    special = special_positions(ext, config.special_ids)
    special[:, -1] = False
    acc, _ = window_hash(ext, config.h, segment_ids(ext, special), config.seed, range(1, config.h), _SUPERVISED_TAG)
    return _below(mix64(acc[:, -1:] ^ (candidates[None, :] + 1)), config.supervised_fraction)


def _next_hash_table(ctx: torch.Tensor, k: int, h: int, candidates: torch.Tensor) -> torch.Tensor:
    """(B, V) hash-table decisions of a new last target: key = product of the h-1 ids before it and the candidate
    (wrapping int64, as in :func:`_hash_table_mask`); never dropped among a row's first h-1 targets."""
    B, C = ctx.shape
    real = (ctx >= 0).long().flip(1).cumprod(1).sum(1)  # (B,) tokens after the row's left padding
    drops = torch.zeros(B, len(candidates), dtype=torch.bool, device=ctx.device)
    table = _reference_table().to(ctx.device)
    for b in torch.nonzero(real >= h - 1).flatten().tolist():
        tail = ctx[b, C - (h - 1) :] if h > 1 else ctx[b, :0]
        key = tail.prod() * candidates  # (V,) wrapping int64, like the row's unfold(...).prod()
        drops[b] = table[torch.remainder(key, _TABLE_SIZE)] < 1 / k
    return drops


def _next_by_rows(ctx: torch.Tensor, config: GoldfishConfig, candidates: torch.Tensor, chunk: int) -> torch.Tensor:
    """(B, V) decisions by masking the row ``context[b] + [v]`` itself, ``chunk`` candidates at a time."""
    B, C = ctx.shape
    out = torch.zeros(B, len(candidates), dtype=torch.bool, device=ctx.device)
    for b in range(B):
        for lo in range(0, len(candidates), chunk):
            v = candidates[lo : lo + chunk]
            rows = torch.cat([ctx[b].expand(len(v), C), v[:, None]], dim=1)  # (chunk, C + 1)
            out[b, lo : lo + len(v)] = config_mask(rows, config)[:, -1]
    return out
