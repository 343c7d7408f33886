"""Near-duplicates: each member's r training copies are its own text once plus r-1 *variants* with small edits.

The adversary of the Goldfish paper's open question: a text repeated with small edits gets a different ``hash``
mask in every copy near each edit, so the tokens one copy hides another may train on. The evaluated member is
always the unedited text (``members/``); only the training stream holds the variants.

Edits (``near_duplicates.edit``; ``every`` = e, one edit per block of e units, placed uniformly in the block):

* ``substitute`` -- one token in every e tokens replaced by another token of the same document (a different id).
* ``case`` -- one word in every e words re-cased (lower / UPPER / Title, whichever changes it).
* ``whitespace`` -- one word gap in every e gaps replaced by a double space, a newline, a blank line or a tab.
* ``insert`` -- one sentence of another member inserted after a sentence end (or at the start).

Text edits (case, whitespace, insert) decode the member's ids, edit the text and tokenize it again, so a variant
may have a few more or fewer tokens than the member.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Literal

import numpy as np

from ..config import check, option, raise_problems
from ..errors import UserError

Edit = Literal["substitute", "case", "whitespace", "insert"]
EDITS = ("substitute", "case", "whitespace", "insert")
GAPS = ("  ", "\n", "\n\n", "\t")
_SENTENCE_END = re.compile(r"(?<=[.!?]) ")


@dataclasses.dataclass
class NearDuplicateConfig:
    """How a member's repeated copies differ (the ``near_duplicates:`` section of a recipe)."""

    edit: Edit = option(
        "substitute",
        "substitute (one token in every `every`) | case (one word in every `every` "
        "re-cased) | whitespace (one word gap in every `every` changed) | insert "
        "(one sentence of another member inserted)",
    )
    every: int = option(13, "edit rate: one edited token / word / gap per block of this many (>= 1); ignored by insert")

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(self.edit in EDITS, problems, f"edit={self.edit!r} is unknown; choose one of: {', '.join(EDITS)}")
        check(
            isinstance(self.every, int) and self.every >= 1,
            problems,
            f"every={self.every!r} must be an integer >= 1 (one edit per block of that many tokens/words)",
        )
        raise_problems(problems)


def edit_positions(n: int, every: int, rng: np.random.Generator) -> np.ndarray:
    """(ceil(n / every),) sorted indices in [0, n): exactly one per block ``[b*every, (b+1)*every)``."""
    starts = np.arange(0, n, every)
    sizes = np.minimum(every, n - starts)
    return starts + (rng.random(len(starts)) * sizes).astype(np.int64)


def substitute(ids: np.ndarray, every: int, rng: np.random.Generator) -> np.ndarray:
    """A copy of ``ids`` with one token per block of ``every`` replaced by a different id drawn from ``ids``."""
    out = ids.copy()
    pool = np.unique(ids)
    if len(pool) < 2:
        raise UserError("near_duplicates.edit=substitute needs a document with at least two distinct tokens")
    for p in edit_positions(len(ids), every, rng).tolist():
        others = pool[pool != ids[p]]
        out[p] = others[rng.integers(len(others))]
    return out


def recase(text: str, every: int, rng: np.random.Generator) -> str:
    """``text`` with one word per block of ``every`` words re-cased; the words stay in place with their spacing."""
    parts = re.split(r"(\s+)", text)  # words at even indices, the whitespace between them at odd ones
    words = [i for i in range(0, len(parts), 2) if parts[i]]
    for w in edit_positions(len(words), every, rng).tolist():
        word = parts[words[w]]
        options = [c for c in (word.lower(), word.upper(), word.title()) if c != word]
        if options:  # digits and punctuation have no case to change
            parts[words[w]] = options[int(rng.integers(len(options)))]
    return "".join(parts)


def respace(text: str, every: int, rng: np.random.Generator) -> str:
    """``text`` with one single-space word gap per block of ``every`` gaps replaced by other whitespace."""
    parts = text.split(" ")
    gaps = [" "] * (len(parts) - 1)
    for g in edit_positions(len(gaps), every, rng).tolist():
        gaps[g] = GAPS[int(rng.integers(len(GAPS)))]
    return parts[0] + "".join(g + p for g, p in zip(gaps, parts[1:]))


def insert_sentence(text: str, sentence: str, rng: np.random.Generator) -> str:
    """``text`` with ``sentence`` (ending in a space) inserted after one of its sentence ends, or at the start."""
    cuts = [0] + [m.end() for m in _SENTENCE_END.finditer(text)]
    at = cuts[int(rng.integers(len(cuts)))]
    return text[:at] + sentence + text[at:]


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text) if len(s.split()) >= 4]


def make_variants(
    members: list[np.ndarray],
    counts: list[int],
    cfg: NearDuplicateConfig,
    seed: int,
    decode: Callable[[list[int]], str],
    encode: Callable[[str], list[int]],
) -> list[list[np.ndarray]]:
    """For member i, ``counts[i] - 1`` variants (int64 id arrays), each different from the member's ids.

    Every variant draws its edits from its own stream ``default_rng([seed, 3, i, j])``, so adding members or
    copies never changes the others. ``insert`` takes its sentences from the other members' texts.
    """
    texts = [decode(m.tolist()) for m in members] if cfg.edit != "substitute" else []
    out: list[list[np.ndarray]] = []
    for i, (ids, count) in enumerate(zip(members, counts)):
        copies = []
        for j in range(1, count):
            rng = np.random.default_rng([seed, 3, i, j])
            if cfg.edit == "substitute":
                copies.append(substitute(ids, cfg.every, rng))
                continue
            if cfg.edit == "case":
                text = recase(texts[i], cfg.every, rng)
            elif cfg.edit == "whitespace":
                text = respace(texts[i], cfg.every, rng)
            else:
                donor = (i + 1 + int(rng.integers(max(1, len(members) - 1)))) % len(members)
                pool = _sentences(texts[donor]) or [texts[donor]]
                text = insert_sentence(texts[i], pool[int(rng.integers(len(pool)))].strip() + " ", rng)
            variant = np.asarray(encode(text), dtype=np.int64)
            if np.array_equal(variant, ids):  # e.g. a text without any cased word: nothing could be edited
                raise UserError(
                    f"member {i} has no {cfg.edit} edit that changes it; choose another "
                    "near_duplicates.edit or other documents"
                )
            copies.append(variant)
        out.append(copies)
    return out
