"""The background as a stream: read lazily, tokenized in worker processes, de-duplicated against the targets as it
streams, cut into chunks and written as token shards, one atomic entry per finished shard.

Shard ``i`` holds what the source's documents at positions ``[i * S, (i + 1) * S)`` give (``S`` =
``shard_documents``; positions count every document the source holds, see
:func:`goldfish.data.sources.iter_source`), so a shard is the same bytes whoever writes it, in any order, in any
process or job. A shard is ``background/NNNNN.{bin,idx.npy,tag.npy}`` (:mod:`goldfish.data.tokens`; the tag of a
chunk is the source position of the document it was cut from) and its entry ``background/NNNNN.json``,
written last and atomically: a shard with an entry is finished, one without is redone. The entry records the
recipe's fingerprint, so shards of another recipe are refused, and its files' sha256.

Per document: fewer than ``min_words`` words -> skipped; the same id or text as a member, nonmember or validation
document -> skipped; holding a near-copy of one (``background_dedup``: n-gram containment,
:mod:`goldfish.data.dedup`) -> skipped; otherwise cut into ``background_chunk_tokens`` chunks, each kept when it has
``min_tokens`` tokens. Memory: one batch of documents per worker.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import multiprocessing
import os
import re
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from tqdm.auto import tqdm

from ..errors import UserError
from ..io import atomic_write_json
from .config import SourceConfig
from .dedup import DedupConfig, ShingleIndex
from .prepared import load_saved_tokenizer
from .jsontext import LongText
from .sources import Document, iter_source, source_identity
from .store import link_in, publish
from .tokens import ShardWriter

BACKGROUND = "background"
STATE = "prepare-state.json"  # what the targets phase wrote: the recipe fingerprint, the exclusions, its counts
ENCODE_BATCH = 256  # documents per tokenizer call


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    """Everything a worker needs to write one background shard (picklable: sent to worker processes)."""

    folder: str  # the prepared folder being written
    fingerprint: str  # the recipe's, recorded in every entry
    source: SourceConfig
    shard_documents: int
    min_tokens: int
    chunk_tokens: int | None
    dtype: str
    dedup: DedupConfig | None
    store: str | None = None  # the shared background store of these shards (goldfish.data.store), None = none
    store_fingerprint: str | None = None  # its background fingerprint


def stem(i: int) -> str:
    return f"{i:05d}"


def entry_path(folder: Path, i: int) -> Path:
    return Path(folder) / BACKGROUND / f"{stem(i)}.json"


def read_entry(folder: Path, i: int, fingerprint: str) -> dict | None:
    """The entry of shard ``i`` if it is finished (``None`` if not); one line if it belongs to another recipe."""
    path = entry_path(folder, i)
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        raise UserError(
            f"{path} is damaged (not JSON); delete {path.parent / stem(i)}.* and prepare again to redo that shard"
        ) from None
    if not isinstance(entry, dict) or entry.get("fingerprint") != fingerprint:
        raise UserError(
            f"background shard {path} was prepared from another recipe (or by other code) than the one "
            f"being prepared into {folder}; prepare into another folder, or pass --overwrite to replace "
            f"this one"
        )
    if not _well_formed(entry, i):
        raise UserError(
            f"{path} is damaged (its fields are not those of a shard entry); delete "
            f"{path.parent / stem(i)}.* and prepare again to redo that shard"
        )
    held = _shard_holds(path.parent, stem(i))
    if held != (entry["documents"], entry["tokens"]):
        what = f"{held[0]} documents of {held[1]} tokens" if held else "no readable index"
        raise UserError(
            f"{path} records {entry['documents']} documents of {entry['tokens']} tokens but its shard "
            f"holds {what}: the entry or the shard was edited or damaged; delete "
            f"{path.parent / stem(i)}.* and prepare again to redo that shard"
        )
    return entry


def _shard_holds(folder: Path, name: str) -> tuple[int, int] | None:
    """(documents, tokens) shard ``name``'s index describes (its ``.idx.npy``: n + 1 offsets; the header and the
    last offset only), or None when it cannot be read."""
    try:
        offsets = np.load(folder / f"{name}.idx.npy", mmap_mode="r", allow_pickle=False)
        return (len(offsets) - 1, int(offsets[-1])) if offsets.ndim == 1 and len(offsets) else None
    except (OSError, ValueError, IndexError):
        return None


def _well_formed(entry: dict, i: int) -> bool:
    """Whether a shard entry has the fields, of the types, that the merge reads."""

    def count(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and x >= 0

    positions, sha, stats = entry.get("positions"), entry.get("sha256"), entry.get("stats")
    return (
        entry.get("shard") == i
        and count(entry.get("documents"))
        and count(entry.get("tokens"))
        and isinstance(entry.get("end_of_source"), bool)
        and isinstance(positions, list)
        and len(positions) == 2
        and all(count(p) for p in positions)
        and isinstance(sha, dict)
        and {f"{stem(i)}.bin", f"{stem(i)}.idx.npy"} <= set(sha)
        and set(sha) <= {f"{stem(i)}.bin", f"{stem(i)}.idx.npy", f"{stem(i)}.tag.npy"}
        and all(isinstance(v, str) for v in sha.values())
        and isinstance(stats, dict)
        and all(count(v) for v in stats.values())
    )


def read_state(folder: Path) -> dict:
    """The targets phase's ``prepare-state.json`` of ``folder``; one line when it is damaged."""
    path = Path(folder) / STATE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        state = None
    if not isinstance(state, dict) or not isinstance(state.get("fingerprint"), str):
        raise UserError(
            f"{path} is damaged (not the JSON a prepare wrote); delete the unfinished folder {folder} and "
            f"run the same goldfish prepare command again (or pass --overwrite)"
        )
    return state


# ------------------------------------------------------------------------------------------------ one shard


class _Exclusions:
    """The targets' ids, texts and n-grams, which the background must not hold (loaded once per process from the
    prepare state and the members' / nonmembers' / validation documents' Arrow splits)."""

    def __init__(self, folder: Path, dedup: DedupConfig | None):
        import datasets

        state = read_state(folder)
        self.ids = set(state["exclude"]["ids"])
        self.texts = set(state["exclude"]["text_sha256"])
        self.index = None
        if dedup is not None:
            targets = []
            for split in ("members", "nonmembers", "validation"):
                if (folder / split).is_dir():
                    targets += [
                        np.asarray(x, dtype=np.int64) for x in datasets.load_from_disk(str(folder / split))["input_ids"]
                    ]
            self.index = ShingleIndex(targets, dedup)

    def exact(self, doc: Document) -> bool:
        """The same id or text as a target (no tokens needed)."""
        return doc.id in self.ids or text_sha256(doc.text) in self.texts

    def reason(self, doc: Document, ids: np.ndarray) -> str | None:
        if self.exact(doc):
            return "exact_duplicates"
        if self.index is not None and self.index.near_duplicate(ids):
            return "near_duplicates"
        return None


def text_sha256(text: str | LongText) -> str:
    """sha256 of ``text``'s UTF-8 bytes, encoded a piece at a time (a long document is not copied whole)."""
    digest = hashlib.sha256()
    for chunk in _chunks(text):
        for s in range(0, len(chunk), PIECE_CHARS):
            digest.update(chunk[s : s + PIECE_CHARS].encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _chunks(text: str | LongText) -> Iterator[str]:
    """A text as consecutive strings: itself, or a LongText's decoded pieces."""
    return text.chunks() if isinstance(text, LongText) else iter((text,))


PIECE_CHARS = 1 << 16  # a document longer than this is tokenized a piece of at most this many characters at a time
PIECES_PER_CALL = 4  # pieces per call of the tokenizer: what it holds at once is bounded, whatever the document
_WORD_END = re.compile(r"\S\s")  # a non-space character followed by whitespace
_WORD_START = re.compile(r"(?<!\S)\S")  # a non-space character after whitespace or at the start


def pieces(text: str | LongText, size: int = PIECE_CHARS) -> Iterator[str]:
    """``text`` in consecutive pieces of at most ``size`` characters, each cut just after a non-space character that
    whitespace (a space, a newline) follows, at or after half the size: GPT-2-style (byte-level) pre-tokenization
    never joins such a character with the whitespace after it, so the pieces' ids, concatenated, equal the whole
    text's. A stretch of ``size`` characters with no such place (one huge "word") is cut at ``size``: there, and
    for tokenizers whose pre-tokenization does join across whitespace, ids may differ next to a cut. A LongText is
    read a chunk at a time, with the same cuts."""
    buf, start = "", 0
    for chunk in _chunks(text):
        buf, start = buf[start:] + chunk, 0  # buf[0:] + chunk is chunk itself when buf is empty: no copy
        while len(buf) - start > size:
            m = _WORD_END.search(buf, start + size // 2, start + size)
            cut = m.start() + 1 if m else start + size
            yield buf[start:cut]
            start = cut
    yield buf[start:]


def has_words(text: str | LongText, floor: int) -> bool:
    """Whether ``text`` holds at least ``floor`` whitespace-separated words (counted without splitting it)."""
    if isinstance(text, str):
        if floor <= 1:
            return bool(text.strip())
        return next(itertools.islice(re.finditer(r"\S+", text), floor - 1, None), None) is not None
    words, after_space = 0, True
    for chunk in text.chunks():  # a word starts at a non-space character after whitespace (or the start)
        words += sum(1 for _ in _WORD_START.finditer(chunk)) - (not after_space and not chunk[0].isspace())
        after_space = chunk[-1].isspace()
        if words >= max(floor, 1):
            return True
    return False


class Encoder:
    """Batch tokenization through the tokenizer's Rust backend (what ``tokenizer(texts)`` calls, without building a
    ``BatchEncoding``), literal special-token text kept as text as in ``goldfish prepare``; the first batch is
    checked against ``tokenizer(texts, add_special_tokens=False, split_special_tokens=True)`` and the slow path
    used if a tokenizer's Python side changes anything."""

    def __init__(self, tokenizer, dtype: np.dtype | str = "int64"):

        self.tokenizer, self.dtype = tokenizer, np.dtype(dtype)
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.backend = copy.deepcopy(backend) if backend is not None else None
        if self.backend is not None:
            self.backend.encode_special_tokens = True
        self.checked = self.backend is None

    def _slow(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def __call__(self, texts: list[str]) -> list:
        """The ids of each text: a list for a text of at most :data:`PIECE_CHARS` characters, an array of
        ``dtype`` for a longer one, tokenized in :func:`pieces` (memory bounded by the pieces, not the document)."""
        out: list = [None] * len(texts)
        short = [i for i, t in enumerate(texts) if isinstance(t, str) and len(t) <= PIECE_CHARS]
        for i, ids in zip(short, self._encode([texts[i] for i in short])):
            out[i] = ids
        for i, text in enumerate(texts):
            if out[i] is None:
                out[i] = self._long(text)
        return out

    def stream(self, text: str | LongText) -> Iterator[np.ndarray]:
        """The ids of a text in consecutive parts of ``dtype``, :data:`PIECES_PER_CALL` of its :func:`pieces` at a
        time: together exactly its ids (for the tokenizers :func:`pieces` describes)."""
        group: list[str] = []
        for piece in itertools.chain(pieces(text), [None]):
            if piece is not None:
                group.append(piece)
            if group and (piece is None or len(group) == PIECES_PER_CALL):
                yield from (np.asarray(ids, dtype=self.dtype) for ids in self._encode(group))
                group = []

    def _long(self, text: str | LongText) -> np.ndarray:
        """The ids of a long text, written into one array as they come (:meth:`stream`): sized for a token per byte
        of its UTF-8 text (what byte-level BPE gives at most; grown if a tokenizer gives more), of which only the
        pages the ids fill are ever touched -- the ids are held once, not as parts and then joined."""
        bound = text.nbytes if isinstance(text, LongText) else len(text) * (1 if text.isascii() else 4)
        out, n = np.empty(bound + 1, dtype=self.dtype), 0
        for ids in self.stream(text):
            if n + len(ids) > len(out):
                out = np.concatenate([out[:n], np.empty(max(len(out), len(ids)), dtype=self.dtype)])
            out[n : n + len(ids)] = ids
            n += len(ids)
        return out[:n]

    def _encode(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        if self.backend is None:
            return self._slow(texts)
        fast = [e.ids for e in self.backend.encode_batch(texts, add_special_tokens=False)]
        if not self.checked:
            self.checked = True
            if fast != self._slow(texts):
                self.backend = None
        return fast


_CACHE: dict[str, Any] = {}


def _context(spec: ShardSpec) -> tuple[Encoder, _Exclusions]:
    """The tokenizer and the exclusions of ``spec.folder``, built once per process."""
    if _CACHE.get("folder") != spec.folder:
        folder = Path(spec.folder)
        _CACHE.update(
            folder=spec.folder,
            encoder=Encoder(load_saved_tokenizer(folder / "tokenizer"), spec.dtype),
            exclusions=_Exclusions(folder, spec.dedup),
        )
    return _CACHE["encoder"], _CACHE["exclusions"]


def make_shard(spec: ShardSpec, i: int) -> dict:
    """Read, tokenize, filter and write background shard ``i``; returns (and writes) its entry. With a store: the
    store's copy hard-linked in when it has one, else the shard written and then linked into the store."""
    folder = Path(spec.folder)
    if spec.store is not None:
        (folder / BACKGROUND).mkdir(parents=True, exist_ok=True)
        shared = link_in(Path(spec.store), folder / BACKGROUND, stem(i), spec.fingerprint)
        if shared is not None:
            return shared
    encoder, exclusions = _context(spec)
    floor = spec.source.word_floor
    stats = {
        "read": 0,
        "below_min_words": 0,
        "exact_duplicates": 0,
        "near_duplicates": 0,
        "accepted": 0,
        "chunks_below_min_tokens": 0,
    }
    source = source_identity(spec.source)  # the source as this shard reads it (before the first document)
    writer = ShardWriter(folder / BACKGROUND, stem(i), np.dtype(spec.dtype))
    start = i * spec.shard_documents
    docs = itertools.islice(iter_source(spec.source, start, long_texts=True), spec.shard_documents)
    try:
        while True:
            batch = list(itertools.islice(docs, ENCODE_BATCH))
            if not batch:
                break
            stats["read"] += len(batch)
            kept = [(pos, d) for pos, d in batch if (d.text if floor <= 1 else has_words(d.text, floor))]
            stats["below_min_words"] += len(batch) - len(kept)
            short = [d.text for _, d in kept if not _long(d.text)]
            for (pos, doc), ids in zip(kept, _in_place(kept, encoder(short))):
                if ids is None:  # a long document: its ids written as they come, never held whole
                    _write_long(spec, writer, encoder, exclusions, pos, doc, stats)
                    continue
                ids = ids if isinstance(ids, np.ndarray) else np.asarray(ids, dtype=np.int64)
                why = exclusions.reason(doc, ids)
                if why is not None:
                    stats[why] += 1
                    continue
                stats["accepted"] += 1
                for piece in chunks(ids, spec.chunk_tokens):
                    if len(piece) >= spec.min_tokens:
                        writer.add(piece, tag=pos)
                    else:
                        stats["chunks_below_min_tokens"] += 1
    except BaseException:
        writer.abort()
        raise
    entry = {
        "shard": i,
        "fingerprint": spec.fingerprint,
        "positions": [start, start + stats["read"]],
        "end_of_source": stats["read"] < spec.shard_documents,
        **writer.close(),
        "stats": stats,
        "source": source,
    }
    atomic_write_json(entry_path(folder, i), entry)
    if spec.store is not None:
        publish(Path(spec.store), folder / BACKGROUND, stem(i), entry, spec.store_fingerprint)
    return entry


def _long(text: str | LongText) -> bool:
    return isinstance(text, LongText) or len(text) > PIECE_CHARS


def _in_place(kept: list[tuple[int, Document]], short_ids: list) -> Iterator[Any]:
    """The short documents' ids where they belong among ``kept``, None for a long one."""
    ids = iter(short_ids)
    return (None if _long(d.text) else next(ids) for _, d in kept)


def _write_long(
    spec: ShardSpec,
    writer: ShardWriter,
    encoder: Encoder,
    exclusions: _Exclusions,
    pos: int,
    doc: Document,
    stats: dict,
) -> None:
    """A long document, as the short ones are (the same checks, chunks, bytes and counts), its ids tokenized and
    written a part at a time; a near-duplicate of a target, known only at its end, is then rolled back."""
    if exclusions.exact(doc):
        stats["exact_duplicates"] += 1
        return
    mark, below, carry, length, started = writer.mark(), 0, np.zeros(0, dtype=encoder.dtype), 0, False
    scan = exclusions.index.scan() if exclusions.index is not None else None
    for part in encoder.stream(doc.text):
        if scan is not None:
            scan.add(part)
        if spec.chunk_tokens is None:  # the document whole, one entry
            writer.extend(part) if started else writer.add(part, tag=pos)
            length, started = length + len(part), True
            continue
        buf = np.concatenate([carry, part]) if len(carry) else part
        full = len(buf) - len(buf) % spec.chunk_tokens
        for s in range(0, full, spec.chunk_tokens):
            if spec.chunk_tokens >= spec.min_tokens:
                writer.add(buf[s : s + spec.chunk_tokens], tag=pos)
            else:
                below += 1
        carry = buf[full:]
    if scan is not None and scan.near_duplicate():
        writer.rollback(mark)
        stats["near_duplicates"] += 1
        return
    stats["accepted"] += 1
    if spec.chunk_tokens is None and length < spec.min_tokens:
        writer.rollback(mark)
        below += 1
    elif len(carry) and len(carry) >= spec.min_tokens:
        writer.add(carry, tag=pos)
    elif len(carry):
        below += 1
    stats["chunks_below_min_tokens"] += below


def chunks(ids: np.ndarray, size: int | None) -> Iterator[np.ndarray]:
    """``ids`` cut into pieces of ``size`` tokens (the last one shorter), or whole when ``size`` is None."""
    if size is None:
        yield ids
        return
    for s in range(0, len(ids), size):
        yield ids[s : s + size]


def _worker(job: tuple[ShardSpec, int]) -> dict:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker: the workers are the parallelism
    return make_shard(*job)


# ------------------------------------------------------------------------------------------------ many shards


def run_shards(spec: ShardSpec, shards: Iterator[int], num_proc: int, done: Callable[[dict], bool]) -> None:
    """Write the shards ``shards`` (in order) that have no entry yet, ``num_proc`` at a time; ``done(entry)`` is
    called with each entry in shard order (finished ones included) and returns True when no more are needed (the
    cap is reached or the source ended). Workers are forked processes (one tokenizer thread each); with
    ``num_proc=1`` everything runs in this process."""
    folder = Path(spec.folder)
    if num_proc <= 1:
        for i in shards:
            entry = read_entry(folder, i, spec.fingerprint) or make_shard(spec, i)
            if done(entry):
                return
        return
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(num_proc, maxtasksperchild=None) as pool:
        pending: deque = deque()  # (shard, entry or AsyncResult), in shard order
        stop = False
        while not stop:
            while len(pending) < 2 * num_proc:  # keep every worker busy, with a bounded queue
                i = next(shards, None)
                if i is None:
                    break
                entry = read_entry(folder, i, spec.fingerprint)
                pending.append((i, entry if entry is not None else pool.apply_async(_worker, ((spec, i),))))
            if not pending:
                break
            _, result = pending.popleft()
            entry = result if isinstance(result, dict) else result.get()
            stop = done(entry)
        pool.terminate()  # shards past the end are not needed; their unfinished files are removed by the merge


class Progress:
    """Tokens and shards written, on a terminal as a bar, else as a log line at least once a minute."""

    def __init__(self, enabled: bool, log: Callable[[str], None] | None = None, every: float = 60.0):
        self.bar = tqdm(
            desc="background", unit="tok", unit_scale=True, disable=not enabled, leave=False, dynamic_ncols=True
        )
        self.log, self.every = log, every
        self.tokens = self.shards = 0
        self.started = self.last = time.monotonic()

    def update(self, entry: dict) -> None:
        self.tokens += entry["tokens"]
        self.shards += 1
        self.bar.update(entry["tokens"])
        now = time.monotonic()
        if self.log is not None and now - self.last >= self.every:
            self.last = now
            rate = self.tokens / max(now - self.started, 1e-9)
            self.log(f"background: {self.shards} shards, {self.tokens:,} tokens ({rate:,.0f} tokens/s)")

    def close(self) -> None:
        self.bar.close()
