"""Phase 1 of ``prepare`` (:mod:`goldfish.data.prepare`), the targets: two streaming passes over the main source
(count, tokenize the first tokens of and digest every document, then read the chosen ones), the split, and the
tokenizer, document splits, target token shards and state they leave in the folder. Also how prepare tokenizes a
document (:func:`tokenize`)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from array import array
from pathlib import Path
from typing import Callable

import numpy as np
from tokenizers import pre_tokenizers
from tqdm.auto import tqdm

from ..config import save_config
from ..errors import UserError
from .canaries import canary_alphabet, make_canaries
from .config import PrepareConfig
from .prepared import doc_columns, save_table
from .jsontext import LongText
from .sources import Document, check_documents_read, iter_source
from .splits import Item, SplitPlan, choose, chunk_keys, split_items
from .stream import Encoder, has_words, pieces, text_sha256
from .tokenizer import load_tokenizer, tokenizer_info
from .tokens import token_dtype, write_shard
from .variants import make_variants

TOKENIZE_BATCH = 64
_WORD_END = re.compile(r"\S\s")  # a non-space character followed by whitespace


def _bar(total: int, desc: str, enabled: bool, unit: str = "doc", position: int = 1):
    return tqdm(
        total=total, desc=desc, unit=unit, disable=not enabled, leave=False, dynamic_ncols=True, position=position
    )


def tokenize(
    tok,
    docs: list[Document],
    progress: bool = False,
    desc: str = "tokenize",
    max_tokens: int | None = None,
    encode: Callable[[list[str]], list[list[int]]] | None = None,
) -> list[np.ndarray]:
    """Token ids of each document (no BOS/EOS); literal special-token text is split, never turned into EOS.

    ``encode``: texts -> ids (default: the tokenizer's call; the split pass passes the background's
    :class:`~goldfish.data.stream.Encoder`, its Rust backend checked against that call). ``max_tokens``: only the
    first ``max_tokens`` ids are needed, so a byte-level tokenizer reads just a prefix of each long text (see
    :func:`_prefix`); the ids returned are identical to the whole text's ids, cut.
    """
    cut = max_tokens is not None and _is_byte_level(tok)
    encode = encode or (lambda texts: _encode(tok, texts))
    out: list[np.ndarray] = []
    with _bar(len(docs), desc, progress) as bar:
        for s in range(0, len(docs), TOKENIZE_BATCH):
            texts = [d.text for d in docs[s : s + TOKENIZE_BATCH]]
            heads = [_prefix(t, max_tokens) for t in texts] if cut else texts
            enc = encode(heads)
            for i, ids in enumerate(enc):
                if len(heads[i]) < len(texts[i]) and len(ids) < max_tokens:  # prefix too short: whole text
                    enc[i] = encode([texts[i]])[0]
            out.extend(np.asarray(ids[:max_tokens] if max_tokens else ids, dtype=np.int64) for ids in enc)
            bar.update(len(texts))
    return out


def _encode(tok, texts: list[str]) -> list[list[int]]:
    return tok(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def _is_byte_level(tok) -> bool:
    backend = getattr(tok, "backend_tokenizer", None)
    return isinstance(getattr(backend, "pre_tokenizer", None), pre_tokenizers.ByteLevel)


def _prefix(text: str | LongText, max_tokens: int) -> str:
    """A prefix of ``text`` ending just before a whitespace that follows a non-space character.

    GPT-2-style pre-tokenization never joins a non-space character with the whitespace after it, so every token of
    this prefix equals the whole text's token at the same index. ~6 characters per needed token is ample for prose;
    the caller falls back to the whole text when the prefix yields too few tokens.
    """
    budget = 6 * max_tokens + 64
    if len(text) <= budget:
        return text if isinstance(text, str) else "".join(text.chunks())
    if isinstance(text, LongText):  # its first piece of at least the budget, decoded a chunk at a time
        return next(pieces(text, 2 * budget))
    m = _WORD_END.search(text, budget - 1)
    return text[: m.start() + 1] if m else text


def _needed_tokens(cfg: PrepareConfig) -> int | None:
    """How many leading tokens of each main-source document the splits can use (None = all of them)."""
    if cfg.doc_tokens is None:
        return None  # whole documents
    return max(cfg.doc_tokens * (2 if cfg.nonmember_mode == "later_chunk" else 1), cfg.min_tokens)


SCAN_BATCH = 256  # documents tokenized at a time by the split pass


@dataclasses.dataclass
class _Scan:
    """What the split pass keeps of the main source's documents (after ``min_words``, up to ``max_documents``):
    per document its source position, token count (capped) and a 16-byte digest of each chunk -- ~50 bytes a
    document, never its text or tokens."""

    positions: np.ndarray  # (N,) int64
    lengths: np.ndarray  # (N,) int64
    digests: np.ndarray  # (N, K, 16) uint8: K = 2 for later_chunk, else 1
    end: int | None  # the first position not read (max_documents reached), None = the whole source
    stats: dict


def _digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


def _scan(cfg: PrepareConfig, tok, progress: bool) -> _Scan:
    """Pass 1 over the main source: count its documents and keep what :func:`goldfish.data.splits.choose` needs,
    tokenizing each document's first ``_needed_tokens`` tokens a batch at a time (memory: one batch)."""
    src = cfg.source
    floor, cap = src.word_floor, _needed_tokens(cfg)
    encoder = Encoder(tok)
    positions, lengths, digests = array("q"), array("q"), bytearray()
    id_hashes = array("Q")
    read = short = 0
    end = None
    batch: list[tuple[int, Document]] = []

    def flush() -> None:
        for (pos, doc), ids in zip(batch, tokenize(tok, [d for _, d in batch], max_tokens=cap, encode=encoder)):
            positions.append(pos)
            lengths.append(len(ids))
            for key in chunk_keys(cfg, ids):
                digests.extend(_digest(key))
            id_hashes.append(int.from_bytes(_digest(doc.id.encode("utf-8"))[:8], "little"))
        batch.clear()

    with _bar(src.max_documents or 0, "split pass", progress) as bar:
        for pos, doc in iter_source(src, long_texts=True):  # a long line's text read a piece at a time
            if src.max_documents is not None and len(positions) + len(batch) >= src.max_documents:
                end = pos
                break
            read += 1
            if floor > 0 and not has_words(doc.text, floor):  # as len(text.split()) < floor, without the split
                short += 1
                continue
            batch.append((pos, doc))
            bar.update(1)
            if len(batch) >= SCAN_BATCH:
                flush()
        flush()
    where = check_documents_read(src, read, len(positions), floor)
    hashes = np.frombuffer(id_hashes, dtype=np.uint64)
    uniq, counts = np.unique(hashes, return_counts=True)
    if (counts > 1).any():
        dup = uniq[counts > 1][0]
        first = int(np.flatnonzero(hashes == dup)[0])
        doc = next(d for p, d in iter_source(src, int(positions[first])))
        raise UserError(f"source {where} has duplicate document id {doc.id!r}; choose a unique source.id_field")
    k = 2 if cfg.nonmember_mode == "later_chunk" and cfg.doc_tokens is not None else 1
    return _Scan(
        np.frombuffer(positions, dtype=np.int64),
        np.frombuffer(lengths, dtype=np.int64),
        np.frombuffer(bytes(digests), dtype=np.uint8).reshape(len(positions), k, 16),
        end,
        {"read": read, "below_min_words": short},
    )


def _fetch(cfg: PrepareConfig, tok, scan: _Scan, wanted: set[int]) -> tuple[dict[int, Document], dict[int, np.ndarray]]:
    """Pass 2: the documents at indices ``wanted`` (into ``scan``) and their token ids (the same cap as pass 1)."""
    by_pos = {int(scan.positions[i]): i for i in wanted}
    docs: dict[int, Document] = {}
    if by_pos:
        for pos, doc in iter_source(cfg.source, min(by_pos), long_texts=True):  # a long line is skipped unparsed
            if pos in by_pos:
                text = doc.text if isinstance(doc.text, str) else "".join(doc.text.chunks())
                docs[by_pos[pos]] = dataclasses.replace(doc, text=text)
                if len(docs) == len(by_pos):
                    break
    order = sorted(docs)
    ids = tokenize(tok, [docs[i] for i in order], max_tokens=_needed_tokens(cfg))
    return docs, dict(zip(order, ids))


def _bpe_texts(src) -> list:
    """The texts a ``bpe`` tokenizer is trained on: the source's documents with at least ``min_words`` words, up to
    ``max_documents``; a long JSONL line's text held as its raw bytes (a LongText, fed to the trainer a piece at a
    time), never parsed or split whole."""
    texts: list = []
    read = 0
    for _, doc in iter_source(src, long_texts=True):
        if src.max_documents is not None and len(texts) >= src.max_documents:
            break
        read += 1
        if src.word_floor <= 0 or has_words(doc.text, src.word_floor):
            texts.append(doc.text)
    check_documents_read(src, read, len(texts), src.word_floor)
    return texts


def write_targets(cfg: PrepareConfig, folder: Path, progress: bool) -> dict:
    """Split the main source in two streaming passes (count and digest every document, then read the chosen
    ones); write the tokenizer, the document splits and the target token shards. Returns the prepare state."""
    texts = None
    if cfg.tokenizer.name == "bpe":  # trained on the recipe's own documents: their texts are held for training
        texts = _bpe_texts(cfg.tokenizer.source or cfg.source)
    tok = load_tokenizer(cfg.tokenizer.name, texts, cfg.tokenizer.vocab_size, cfg.seed)
    del texts
    if tok.eos_token_id is None or tok.pad_token_id is None:
        raise UserError(f"tokenizer {cfg.tokenizer.name} has no EOS/pad id; set eos_token in its config")
    dtype = token_dtype(len(tok), cfg.token_dtype)
    scan = _scan(cfg, tok, progress)
    choice = choose(cfg, scan.lengths, lambda i: [row.tobytes() for row in scan.digests[i]])
    wanted = set(choice.members) | set(choice.nonmembers) | set(choice.validation) | choice.duplicates
    docs, tokens = _fetch(cfg, tok, scan, wanted)
    members, nonmembers, validation = split_items(cfg, choice, docs.__getitem__, tokens.__getitem__)
    plan = SplitPlan(members, nonmembers, [], {**choice.stats, **scan.stats}, [], validation)
    plan.canaries = _canaries(cfg, tok)
    reps = [it.repetitions if cfg.train_members else 0 for it in plan.members]
    variants: list[np.ndarray] = []
    owners = None
    if cfg.near_duplicates is not None and cfg.train_members:
        copies = make_variants(
            [it.ids for it in plan.members],
            reps,
            cfg.near_duplicates,
            cfg.seed,
            _decoder(tok),
            lambda text: _encode(tok, [text])[0],
        )
        variants = [v for vs in copies for v in vs]
        owners = np.concatenate([np.arange(len(reps)), np.repeat(np.arange(len(reps)), [len(vs) for vs in copies])])

    save_config(cfg, folder / "config.yaml")  # an unfinished folder says what it is: shard jobs can use it as recipe
    tok.save_pretrained(str(folder / "tokenizer"))
    text_of = _decoder(tok)
    decode = lambda ids: text_of(ids.tolist())  # noqa: E731 - the text a row holds (the cut chunk)
    splits = {
        "members": plan.members,
        "nonmembers": plan.nonmembers,
        "validation": plan.validation,
        "canaries": plan.canaries,
    }
    sha = {
        name: save_table(doc_columns(items, name, decode), folder / name)
        for name, items in splits.items()
        if items or name in ("members", "nonmembers")
    }
    write_shard(folder / "train", "targets", [it.ids for it in plan.members] + variants, dtype, owners)
    if plan.canaries:
        write_shard(folder / "train", "canaries", [it.ids for it in plan.canaries], dtype)
    targets = plan.members + plan.nonmembers + plan.validation
    dropped = [docs[i].id for i in choice.duplicates]  # their chunks repeat a target's: never background either
    return {
        "dtype": dtype.name,
        "tokenizer": tokenizer_info(tok, cfg.tokenizer.name),
        "sha256": sha,
        "counts": {name: len(items) for name, items in splits.items()},
        "tokens": {name: int(sum(len(it.ids) for it in items)) for name, items in splits.items()},
        "repetitions": [int(it.repetitions) for it in plan.members],
        "member_reps": reps,
        "canary_reps": [it.repetitions if cfg.train_members else 0 for it in plan.canaries],
        "variants": len(variants),
        "stats": plan.stats,
        "canary_alphabet": len(canary_alphabet(tok)) if plan.canaries else None,
        "source_end": scan.end if cfg.background_source is None else None,
        "exclude": {
            "ids": sorted({it.doc.id for it in targets} | set(dropped)),
            "text_sha256": sorted({text_sha256(it.doc.text) for it in targets}),
        },
    }


def _canaries(cfg: PrepareConfig, tok) -> list[Item]:
    """The recipe's canaries as split items (``canary:<c>``, text = their decoded ids); none without them. They are
    kept whole in a row, so one longer than a packed row is refused."""
    if cfg.canaries is None or cfg.canaries.count == 0:
        return []
    if cfg.packing == "pack" and cfg.canaries.tokens + 1 > cfg.seq_len:
        raise UserError(
            f"canaries.tokens={cfg.canaries.tokens} + EOS does not fit in seq_len={cfg.seq_len}; "
            "shorten the canaries or lengthen the rows"
        )
    ids, reps = make_canaries(cfg.canaries, canary_alphabet(tok), cfg.repetitions, cfg.seed)
    text = _decoder(tok)
    return [
        Item(Document(f"canary:{c}", f"canary {c}", text(ids[c].tolist()), "canary"), ids[c], reps[c])
        for c in range(len(ids))
    ]


def _decoder(tok):
    """ids -> the text they spell (no clean-up, special tokens kept): what a row of these ids holds."""
    return lambda ids: tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
