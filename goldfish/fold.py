"""The case-/whitespace-folding table of a tokenizer's vocabulary, for the ``canonical`` mask strategy.

``token_fold(tokenizer) -> TokenFold``: for every id, the token's raw bytes are folded (casefolded, whitespace
removed) and hashed, and its whitespace is summarised (starts a word, ends with whitespace, whitespace only). See
the ``canonical`` entry of :mod:`goldfish.masks` for how the mask uses it.

Raw bytes: byte-level BPE vocabularies (GPT-2, SmolLM2, Llama 3, ...) spell bytes with GPT-2's printable
byte alphabet, which is mapped back; SentencePiece vocabularies spell a leading space as U+2581 and raw bytes as
``<0xNN>``. A token holding part of a multi-byte UTF-8 character is folded byte-wise (ASCII letters lowercased).
A vocabulary whose tokens carry no whitespace at all (word-level: the decoder puts a space between tokens) makes
every token its own word.
"""

from __future__ import annotations

import re
from functools import lru_cache

import torch

from .masks import FOLD_BASE, TokenFold

_MASK64 = (1 << 64) - 1
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPACE_BYTES = b" \t\n\r\x0b\x0c"


@lru_cache(maxsize=1)
def _byte_alphabet() -> dict[str, int]:
    """GPT-2's ``bytes_to_unicode``, inverted: printable character -> the byte it spells."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def token_bytes(tokenizer) -> list[bytes]:
    """The raw bytes each vocabulary id stands for (index = id), as the tokenizer would decode it in context."""
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    alphabet = _byte_alphabet()
    specials = set(getattr(tokenizer, "all_special_tokens", []))
    ordinary = [p for p in pieces if p is not None and p not in specials]
    if all(c in alphabet for p in ordinary for c in p):  # a byte-level BPE vocabulary
        return [b"" if p is None else bytes(alphabet.get(c, 0x3F) for c in p) for p in pieces]
    out = []
    for p in pieces:
        if p is None:
            out.append(b"")
        elif (m := _BYTE_PIECE.fullmatch(p)) is not None:
            out.append(bytes([int(m.group(1), 16)]))
        else:
            out.append(p.replace("\u2581", " ").encode("utf-8"))
    return out


def fold_bytes(raw: bytes) -> bytes:
    """Casefolded, whitespace removed: the form in which case/whitespace variants of a token agree."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:  # part of a multi-byte character: fold ASCII only
        return bytes(b for b in raw.lower() if b not in _SPACE_BYTES)
    return "".join(text.casefold().split()).encode("utf-8")


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= (1 << 63) else x


def polynomial_hash(data: bytes) -> int:
    """sum (byte+1) * FOLD_BASE**(n-1-i) mod 2**64, as a signed int64 (byte+1: a zero byte still counts)."""
    acc = 0
    for b in data:
        acc = (acc * FOLD_BASE + b + 1) & _MASK64
    return _signed(acc)


def token_fold(tokenizer) -> TokenFold:
    """The :class:`~goldfish.masks.TokenFold` of ``tokenizer``'s whole vocabulary (``len(tokenizer)`` ids)."""
    piece, scale, starts, ends, blank = [], [], [], [], []
    for raw in token_bytes(tokenizer):
        folded = fold_bytes(raw)
        piece.append(polynomial_hash(folded))
        scale.append(_signed(pow(FOLD_BASE, len(folded), 1 << 64)))
        starts.append(raw[:1].isspace())
        ends.append(raw[-1:].isspace())
        blank.append(not folded)
    if not any(starts) and not any(ends):  # word-level vocabulary: the spaces live between tokens
        starts = [True] * len(starts)
    return TokenFold(
        torch.tensor(piece, dtype=torch.int64),
        torch.tensor(scale, dtype=torch.int64),
        torch.tensor(starts),
        torch.tensor(ends),
        torch.tensor(blank),
    )
