"""Members, nonmembers and background: which token sequences are trained on, how often, and which never are.

All randomness comes from one ``numpy.random.default_rng(seed)`` permutation of the eligible documents, so the same
config and seed always give the same split.

* A document is *eligible* when it has >= ``min_tokens`` tokens (``later_chunk``: >= 2 * ``doc_tokens``, so that
  member and nonmember chunks have equal length) and its chunks repeat no other document's chunks (exact
  duplicates would put the same text on both sides of the membership test).
* ``random_split``: like ``held_out``, but only documents with >= ``doc_tokens`` tokens are eligible, so members and
  nonmembers are the same stretch (tokens ``[0, doc_tokens)``) of documents drawn at random from one pool: the two
  sets are exchangeable, and a membership attack can only win by memorisation.
* ``held_out``: nonmembers are the first ``num_nonmembers`` documents of the permutation, members the next
  ``num_members`` (and, with ``num_validation``, the next ones are the validation documents: the same stretch as
  the nonmembers, never trained on, for tuning). ``later_chunk``: members are the first ``num_members``; nonmember *i*
  is tokens ``[doc_tokens, 2*doc_tokens)`` of member *i* (the part of the article the model never sees).
* Member *i* (in permutation order) is repeated ``repetitions[i % len(repetitions)]`` times: strata of equal size.
* :func:`choose` needs only the number of documents, their lengths and their chunks' keys (bytes or digests), so
  ``goldfish prepare`` computes it from a streaming pass (:mod:`goldfish.data.prepare`); :func:`plan_splits` is the
  same split over documents held in memory.
* Background (when ``num_background`` != 0): the main source's remaining documents (streamed in source order by
  ``goldfish prepare``; :func:`background_items` over them in that order is the in-memory equivalent), or
  ``background_source``'s,
  optionally cut into ``background_chunk_tokens`` chunks; documents sharing an id or a text with a member/nonmember
  are skipped, and so (``background_dedup``) are documents holding a near-copy of one (n-gram containment,
  :mod:`goldfish.data.dedup`), counted in ``stats["background_near_duplicates"]``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ..errors import UserError
from .config import PrepareConfig
from .dedup import ShingleIndex
from .sources import Document


@dataclasses.dataclass
class Item:
    """One row of a document split: the source document, the token ids it contributes, and its repetition count."""

    doc: Document
    ids: np.ndarray  # (n,) int64, no BOS/EOS
    repetitions: int
    suffix: str = ""  # appended to doc.id: '#later' for a later chunk, '#chunk3' for a background chunk

    @property
    def id(self) -> str:
        return self.doc.id + self.suffix


@dataclasses.dataclass
class SplitPlan:
    members: list[Item]
    nonmembers: list[Item]
    background: list[Item]
    stats: dict
    pool: list[int]  # indices of unused documents (>= min_tokens), in permutation order: the background pool
    validation: list[Item] = dataclasses.field(default_factory=list)  # held out for tuning, never reported
    canaries: list[Item] = dataclasses.field(default_factory=list)  # random sequences (goldfish.data.canaries)


def _chunks(ids: np.ndarray, cfg: PrepareConfig) -> tuple[np.ndarray, np.ndarray | None]:
    """(member chunk, later chunk or None) of one document."""
    d = cfg.doc_tokens
    if d is None:
        return ids, None
    return ids[:d], (ids[d : 2 * d] if cfg.nonmember_mode == "later_chunk" else None)


def _needed_length(cfg: PrepareConfig) -> int:
    """Fewest tokens an eligible document has: both chunks (later_chunk), one whole chunk (random_split)."""
    if cfg.nonmember_mode == "later_chunk":
        return 2 * cfg.doc_tokens  # type: ignore[operator]
    if cfg.nonmember_mode == "random_split":
        return max(cfg.doc_tokens, cfg.min_tokens)  # type: ignore[type-var]
    return cfg.min_tokens


def _eligible(
    cfg: PrepareConfig,
    lengths: np.ndarray,
    keys: Callable[[int], list[bytes]],
    order: np.ndarray,
    stats: dict,
    dropped: set[int],
) -> list[int]:
    """Indices (in permutation order) of documents long enough and not duplicating another's chunks.

    ``lengths[i]``: document ``i``'s token count (it may be capped at any value >= ``min_tokens`` and the needed
    length: only comparisons with those are made); ``keys(i)``: what identifies its chunks (their bytes, or a
    digest of them). Duplicates are added to ``dropped``: they must not reach the background either (they would
    train a member's or a nonmember's tokens).
    """
    need = _needed_length(cfg)
    stats["below_min_tokens"] = int((lengths < cfg.min_tokens).sum())
    if stats["below_min_tokens"] == len(lengths):
        raise UserError(
            f"all {len(lengths)} documents have fewer than min_tokens={cfg.min_tokens} tokens (longest: "
            f"{int(lengths.max(initial=0))}); lower min_tokens or use longer documents"
        )
    stats["too_short_for_later_chunk"] = int(((lengths >= cfg.min_tokens) & (lengths < need)).sum())
    seen: set[bytes] = set()
    keep, dupes = [], 0
    for i in order:
        if lengths[i] < max(need, cfg.min_tokens):
            continue
        ks = keys(int(i))
        if any(k in seen for k in ks) or len(set(ks)) < len(ks):
            dupes += 1
            dropped.add(int(i))
            continue
        seen.update(ks)
        keep.append(int(i))
    stats["duplicates"] = dupes
    if not keep:
        raise UserError(
            f"no document has the {need} tokens that nonmember_mode={cfg.nonmember_mode} needs "
            f"(doc_tokens={cfg.doc_tokens}); lower doc_tokens"
        )
    return keep


def chunk_keys(cfg: PrepareConfig, ids: np.ndarray) -> list[bytes]:
    """The bytes of a document's member chunk (and later chunk): equal keys = duplicated chunks."""
    first, later = _chunks(ids, cfg)
    return [first.tobytes()] + ([later.tobytes()] if later is not None else [])


def _sizes(cfg: PrepareConfig, n: int) -> tuple[int, int]:
    """(num_members, num_nonmembers) resolved against ``n`` eligible documents (less the ``num_validation`` ones
    held out after them); one clear error when too few."""
    if cfg.num_validation:
        if cfg.num_validation >= n:
            raise UserError(
                f"num_validation={cfg.num_validation} leaves no members among the {n} eligible "
                "documents; lower num_validation"
            )
        n -= cfg.num_validation
    if cfg.nonmember_mode == "later_chunk":
        n_mem = cfg.num_members if cfg.num_members is not None else n
        n_non = n_mem if cfg.num_nonmembers is None else cfg.num_nonmembers
        if n_mem > n:
            raise UserError(
                f"num_members={n_mem} but only {n} documents have 2*doc_tokens={2 * cfg.doc_tokens} "
                "tokens; lower num_members (or doc_tokens)"
            )
        if n_non > n_mem:
            raise UserError(
                f"num_nonmembers={n_non} exceeds num_members={n_mem}: later_chunk takes one later chunk "
                "per member; lower num_nonmembers or use nonmember_mode=held_out"
            )
        return n_mem, n_non
    if cfg.num_nonmembers is not None:
        n_non = cfg.num_nonmembers
    elif cfg.num_members is not None:  # as many as members, or all that is left
        n_non = max(0, min(cfg.num_members, n - cfg.num_members))
    else:
        n_non = n // 2
    if cfg.num_members is None and n_non >= n:
        raise UserError(
            f"num_nonmembers={n_non} leaves no members among the {n} eligible documents; lower "
            "num_nonmembers (or use more documents)"
        )
    n_mem = cfg.num_members if cfg.num_members is not None else n - n_non
    if n_mem < 1 or n_mem + n_non > n:
        raise UserError(
            f"num_members={n_mem} and num_nonmembers={n_non} do not fit the {n} eligible documents "
            f"(need >= 1 member and members + nonmembers <= {n}); lower one of them"
        )
    return n_mem, n_non


@dataclasses.dataclass
class Choice:
    """Which documents (indices into the source's documents after ``min_words`` and ``max_documents``) are members
    (in stratum order), nonmembers and validation documents, which are dropped as duplicates, and the seeded
    permutation they were drawn from: a function of the seed, the number of documents and their lengths and chunk
    keys only, so it can be computed without holding any document's text or tokens."""

    order: np.ndarray
    members: list[int]
    nonmembers: list[int]  # later_chunk: the members whose later chunk is a nonmember
    validation: list[int]
    duplicates: set[int]
    stats: dict


def choose(cfg: PrepareConfig, lengths: np.ndarray, keys: Callable[[int], list[bytes]]) -> Choice:
    """The split over ``len(lengths)`` documents: one ``default_rng(seed)`` permutation of their indices, the
    eligible ones (:func:`_eligible`) in that order, nonmembers first, then members, then validation documents
    (``later_chunk``: members first, nonmember *i* = member *i*'s later chunk)."""
    stats: dict = {"documents": len(lengths)}
    order = np.random.default_rng(cfg.seed).permutation(len(lengths))
    duplicates: set[int] = set()
    keep = _eligible(cfg, np.asarray(lengths, dtype=np.int64), keys, order, stats, duplicates)
    n_mem, n_non = _sizes(cfg, len(keep))
    if cfg.nonmember_mode == "later_chunk":
        members, nonmembers = keep[:n_mem], keep[:n_non]
    else:
        nonmembers, members = keep[:n_non], keep[n_non : n_non + n_mem]
    validation = keep[n_non + n_mem : n_non + n_mem + cfg.num_validation]
    return Choice(order, members, nonmembers, validation, duplicates, stats)


def split_items(
    cfg: PrepareConfig, choice: Choice, doc: Callable[[int], Document], ids: Callable[[int], np.ndarray]
) -> tuple[list[Item], list[Item], list[Item]]:
    """(members, nonmembers, validation) as items, from the chosen documents' texts and token ids."""
    reps = cfg.repetitions
    members = [Item(doc(i), _chunks(ids(i), cfg)[0], reps[j % len(reps)]) for j, i in enumerate(choice.members)]
    if cfg.nonmember_mode == "later_chunk":
        nonmembers = [Item(doc(i), _chunks(ids(i), cfg)[1], 0, "#later") for i in choice.nonmembers]
    else:
        nonmembers = [Item(doc(i), _chunks(ids(i), cfg)[0], 0) for i in choice.nonmembers]
    validation = [Item(doc(i), _chunks(ids(i), cfg)[0], 0) for i in choice.validation]
    return members, nonmembers, validation


def plan_splits(cfg: PrepareConfig, docs: list[Document], tokens: list[np.ndarray]) -> SplitPlan:
    """Choose members (with repetition counts) and nonmembers in memory; the unused documents become the
    background pool. (``goldfish prepare`` computes the same :func:`choose` from a streaming pass instead.)"""
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    choice = choose(cfg, lengths, lambda i: chunk_keys(cfg, tokens[i]))
    members, nonmembers, validation = split_items(cfg, choice, docs.__getitem__, tokens.__getitem__)
    used = set(choice.members) | set(choice.nonmembers) | set(choice.validation) | choice.duplicates
    pool = [int(i) for i in choice.order if int(i) not in used and len(tokens[i]) >= cfg.min_tokens]
    return SplitPlan(members, nonmembers, [], choice.stats, pool, validation)


def background_items(cfg: PrepareConfig, plan: SplitPlan, docs: list[Document], tokens: list[np.ndarray]) -> list[Item]:
    """Background documents (or chunks) from ``docs`` in the given order, skipping member/nonmember ids and texts
    and (``background_dedup``) documents holding a near-copy of a member or nonmember.

    Stops after ``num_background`` items (null = all). Chunks shorter than ``min_tokens`` are dropped.
    """
    if cfg.num_background == 0:
        return []
    targets = plan.members + plan.nonmembers + plan.validation  # evaluated text never trained on as background
    taken = {it.doc.id for it in targets}
    taken_text = {it.doc.text for it in targets}
    index = ShingleIndex([it.ids for it in targets], cfg.background_dedup) if cfg.background_dedup else None
    plan.stats["background_near_duplicates"] = 0
    size = cfg.background_chunk_tokens
    items: list[Item] = []
    for doc, ids in zip(docs, tokens):
        if doc.id in taken or doc.text in taken_text or len(ids) < cfg.min_tokens:
            continue
        if index is not None and index.near_duplicate(ids):
            plan.stats["background_near_duplicates"] += 1
            continue
        pieces = (
            [(ids, "")]
            if size is None
            else [(ids[s : s + size], f"#chunk{s // size}") for s in range(0, len(ids), size)]
        )
        for piece, suffix in pieces:
            if len(piece) >= cfg.min_tokens:
                items.append(Item(doc, piece, 1, suffix))
            if cfg.num_background is not None and len(items) >= cfg.num_background:
                return items
    return items
