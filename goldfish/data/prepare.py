"""``prepare(cfg, out)``: corpus -> tokenizer -> members / nonmembers -> background shards -> training layout ->
folder, in three phases that each resume where a kill left them.

1. **Targets** (two streaming passes over the main source; memory: one batch of documents plus ~50 bytes per
   document): pass 1 reads every document, tokenizes its first tokens (those the splits can use) and keeps only its
   source position, token count and a 16-byte digest of its chunk(s); the split (:func:`goldfish.data.splits.choose`:
   one seeded permutation of the document indices, as the in-memory :func:`~goldfish.data.splits.plan_splits`
   draws it) is computed from those; pass 2 reads just the chosen documents. Members (with repetition counts),
   nonmembers, validation documents, canaries and near-duplicate variants; the tokenizer, their Arrow splits and the
   target token shard (``train/targets``, ``train/canaries``) are written, then ``prepare-state.json`` (the recipe's
   fingerprint, what the background must not hold: the targets' ids and texts, and the documents dropped as
   duplicates of their chunks).
2. **Background** (streamed, from ``background_source`` or from the main source itself): shard ``i`` is the source's
   documents at positions ``[i * shard_documents, (i + 1) * shard_documents)``, tokenized in ``num_proc`` worker
   processes, de-duplicated against the targets and chunked as it streams (:mod:`goldfish.data.stream`), each shard
   with its own atomic entry. Independent jobs may write disjoint ranges of shards into one folder
   (``shards=(a, b)``). From the main source, the stream skips the targets (by id and text) and the duplicates, so
   the background is the documents the split left unused, in source order (the first ``num_background`` chunks in
   source order when capped), up to the main source's ``max_documents``. Folders of the same background (the same
   source, tokenizer, chunking, de-duplication and targets) share one copy of its shards (:mod:`goldfish.data.store`).
3. **Merge**: the first ``num_background`` chunks over the finished shards, the training order (members x r,
   background once, canaries, shuffled by seed) and each occurrence's first slot in the packed row stream
   (``train/order.npy``, ``train/starts.npy``; :mod:`goldfish.data.rows`), then ``manifest.json`` last.

A folder without ``manifest.json`` is unfinished: readers refuse it, and ``prepare`` with the same recipe continues
it (a different recipe is refused). Memory is that of the targets plus ~50 bytes per main-source document and ~40
bytes per background chunk at the merge, whatever the number of tokens (a ``bpe`` tokenizer trained on the recipe's
documents holds their texts while it trains). Same recipe and seed -> byte-identical data files, interrupted or not.
``overwrite`` builds a complete new folder beside the old one and swaps it in at the end
(``goldfish.ownership.writing``); it replaces only a folder ``goldfish prepare`` made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import errno
import hashlib
import itertools
import json
import os
import re
import shutil
import time
from array import array
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..config import save_config, to_dict
from ..errors import UserError
from ..io import STAGING, atomic_write_json, fsync_dir, new_temp_dir
from ..ownership import FolderLock, OutputFolder, fingerprint_sha256, writing
from ..provenance import code_version, versions
from .canaries import canary_alphabet, make_canaries
from .config import PrepareConfig, SourceConfig
from .packing import training_order, variant_layout
from .prepared import FORMAT, doc_columns, record_verified, save_table, train_sha256
from .rows import layout_stats, pack_starts, row_starts
from .sources import Document, check_documents_read, iter_source, load_documents, source_identity
from .splits import Item, SplitPlan, choose, chunk_keys, split_items
from .store import background_fingerprint, store_path
from .stream import (BACKGROUND, STATE, Encoder, Progress, ShardSpec, entry_path, read_entry, read_state, run_shards,
                     stem, text_sha256)
from .tokenizer import load_tokenizer, tokenizer_info
from .tokens import TokenShard, file_sha256, token_dtype, write_file, write_shard
from .variants import make_variants

TOKENIZE_BATCH = 64
_WORD_END = re.compile(r"\S\s")  # a non-space character followed by whitespace


def _bar(total: int, desc: str, enabled: bool, unit: str = "doc", position: int = 1):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, leave=False, dynamic_ncols=True,
                position=position)


def tokenize(tok, docs: list[Document], progress: bool = False, desc: str = "tokenize",
             max_tokens: int | None = None, encode: Callable[[list[str]], list[list[int]]] | None = None
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
            texts = [d.text for d in docs[s:s + TOKENIZE_BATCH]]
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
    from tokenizers import pre_tokenizers

    backend = getattr(tok, "backend_tokenizer", None)
    return isinstance(getattr(backend, "pre_tokenizer", None), pre_tokenizers.ByteLevel)


def _prefix(text: str, max_tokens: int) -> str:
    """A prefix of ``text`` ending just before a whitespace that follows a non-space character.

    GPT-2-style pre-tokenization never joins a non-space character with the whitespace after it, so every token of
    this prefix equals the whole text's token at the same index. ~6 characters per needed token is ample for prose;
    the caller falls back to the whole text when the prefix yields too few tokens.
    """
    budget = 6 * max_tokens + 64
    if len(text) <= budget:
        return text
    m = _WORD_END.search(text, budget - 1)
    return text[:m.start() + 1] if m else text


def _libraries(cfg: PrepareConfig) -> list[str]:
    """The libraries the prepared bytes depend on, for the manifest's versions (gensim when Wikipedia is read)."""
    wiki = "wikipedia" in (cfg.source.name, getattr(cfg.background_source, "name", None),
                           getattr(cfg.tokenizer.source, "name", None))
    return ["numpy", "datasets", "pyarrow", "tokenizers", "transformers"] + ["gensim"] * wiki


def _source_label(src: SourceConfig) -> str:
    return src.name + (f":{src.path}" if src.path else "")


def _needed_tokens(cfg: PrepareConfig) -> int | None:
    """How many leading tokens of each main-source document the splits can use (None = all of them)."""
    if cfg.doc_tokens is None:
        return None  # whole documents
    return max(cfg.doc_tokens * (2 if cfg.nonmember_mode == "later_chunk" else 1), cfg.min_tokens)


def streamed(cfg: PrepareConfig) -> bool:
    """Whether the recipe has a background: it always streams, from ``background_source`` or from the main source
    (whose targets and duplicates the stream skips)."""
    return cfg.num_background != 0


def recipe_fingerprint(cfg: PrepareConfig) -> str:
    """What a folder's bytes are a function of: the resolved recipe and the code (an unfinished folder resumes only
    under the same fingerprint)."""
    return fingerprint_sha256({"recipe": to_dict(cfg), "code": code_version()})


# What a prepare holds in memory and writes, per unit (measured on the merge of a 200 M-token background: see
# benchmarks/prepare_scale.py): the merge's layout arrays per background chunk or occurrence, the process itself
# (Python, torch, the tokenizer) and one block of the layout loop; the document splits' Arrow columns per token
# (int64 ids + UTF-8 text).
MERGE_BYTES_PER_OCCURRENCE = 64
PROCESS_BYTES = 600 * 2**20
SPLIT_BYTES_PER_TOKEN = 13
INDEX_BYTES_PER_CHUNK = 16  # a background chunk's offset and source position
LAYOUT_BYTES_PER_OCCURRENCE = 16  # its document and first slot


def estimate_needs(cfg: PrepareConfig, vocab_size: int) -> dict | None:
    """Disk and memory a prepare of ``cfg`` needs, when its lengths are fixed (``doc_tokens``, a numeric
    ``num_background`` and ``background_chunk_tokens``; None otherwise): every background chunk full, the token
    shards at ``token_dtype``'s width for ``vocab_size``, the layout, the document splits; memory at the merge (the
    peak: the targets phase streams the main source, ~50 bytes a document)."""
    if cfg.doc_tokens is None or cfg.num_background is None or (cfg.num_background and
                                                               cfg.background_chunk_tokens is None):
        return None
    itemsize = token_dtype(vocab_size, cfg.token_dtype).itemsize
    reps = list(cfg.repetitions)
    members = cfg.num_members or 0
    copies = sum(reps[i % len(reps)] for i in range(members)) if cfg.train_members else 0
    nonmembers = cfg.num_nonmembers if cfg.num_nonmembers is not None else members
    chunks = cfg.num_background
    background_tokens = chunks * (cfg.background_chunk_tokens or 0)
    target_tokens = members * cfg.doc_tokens
    occurrences = copies + chunks
    disk = ((background_tokens + target_tokens) * itemsize + chunks * INDEX_BYTES_PER_CHUNK
            + occurrences * LAYOUT_BYTES_PER_OCCURRENCE
            + (members + nonmembers + cfg.num_validation) * cfg.doc_tokens * SPLIT_BYTES_PER_TOKEN)
    return {"disk_bytes": disk, "memory_bytes": PROCESS_BYTES + occurrences * MERGE_BYTES_PER_OCCURRENCE,
            "tokens": background_tokens + copies * cfg.doc_tokens, "chunks": chunks, "occurrences": occurrences,
            "dtype": f"uint{8 * itemsize}"}


# ------------------------------------------------------------------------------------------------ entry point


def prepare(cfg: PrepareConfig, out: str | Path | None = None, overwrite: bool = False, progress: bool = True,
            num_proc: int | None = None, shards: tuple[int, int] | None = None, merge_only: bool = False,
            log: Callable[[str], None] | None = None) -> Path:
    """Build (or finish) the prepared folder for ``cfg`` at ``out`` (default ``data/prepared/<name>``); returns its
    path. A finished folder is refused unless ``overwrite``; an unfinished one of the same recipe is continued.

    ``num_proc``: worker processes tokenizing a streamed background (None = the CPUs this process may use).
    ``shards=(a, b)``: only write background shards ``a .. b-1`` (one job of several), no merge. ``merge_only``:
    merge the shards other jobs wrote; a missing one is an error instead of being written here. ``log``: where a
    progress line goes at least once a minute when ``progress`` is off (a log file, not a terminal).
    """
    started = time.perf_counter()
    out = Path(out).expanduser() if out is not None else cfg.default_out()
    if shards is not None and shards[1] * cfg.shard_documents >= 2**62:
        raise UserError(f"--shards {shards[0]}:{shards[1]} reaches document {shards[1] * cfg.shard_documents:,} of "
                        f"the source, past any source's end; give shard numbers below "
                        f"{2**62 // cfg.shard_documents:,}")
    num_proc = worker_count(cfg, num_proc, shards)
    job = _Job(cfg, num_proc, progress, log)
    if overwrite:
        if shards is not None or merge_only:
            raise UserError("--overwrite rebuilds the whole folder in one process; without --shards/--merge")
        with writing(out, "prepared", replace=True, stage=True, exist_ok=True) as folder:
            folder.mark(job.fingerprint)
            files = job.run(folder.path, started)
        record_verified(out, files)  # every file was just hashed: the first load need not read them again
        return out
    with writing(out, "prepared", shared=True):  # shard jobs of one folder run side by side
        if (out / "manifest.json").is_file():
            raise UserError(f"output folder {out} already holds a finished prepare; pass --overwrite to replace it, "
                            f"or choose another output folder")
        if not (out / STATE).is_file():
            _targets_beside(job, out)
        files = job.run(out, started, shards, merge_only)
    if files is not None:
        record_verified(out, files)
    return out


def worker_count(cfg: PrepareConfig, requested: int | None, shards: tuple[int, int] | None) -> int:
    """Worker processes for the background: as many as asked (default: the CPUs this process may use), but never
    more than those CPUs, nor than the shards there are to write (a ``--shards`` range; the shards that
    ``background_source.max_documents`` makes)."""
    cpus = len(os.sched_getaffinity(0))
    n = min(requested or cpus, cpus)
    if shards is not None:
        n = min(n, shards[1] - shards[0])
    docs = cfg.background_source.max_documents if cfg.background_source is not None else None
    if docs is not None:
        n = min(n, -(-docs // cfg.shard_documents))
    return max(1, n)


def _one_source(folder: Path, entries: list[dict], source: SourceConfig) -> None:
    """One line when the shards were read from different states of the background source (a file of it changed
    between shard jobs: documents read twice, others never), naming the shards to write again."""
    if len({json.dumps(e.get("source")) for e in entries}) <= 1:
        return
    now = json.dumps(source_identity(source))
    stale = [stem(e["shard"]) for e in entries if json.dumps(e.get("source")) != now]
    if len(stale) == len(entries):
        stale = [stem(e["shard"]) for e in entries]
    names = ", ".join(stale[:6]) + (f" and {len(stale) - 6} more" if len(stale) > 6 else "")
    raise UserError(f"background source {source.path} changed between shard jobs: shards {names} were read from "
                    f"another state of it than the others (their documents would be read twice, others never); "
                    f"delete {folder / BACKGROUND}/NNNNN.* of those shards and run the same goldfish prepare command "
                    f"again to write them from the source as it is now (or pass --overwrite to start over)")


def _targets_beside(job: "_Job", out: Path) -> None:
    """The targets phase, built in a temporary sibling and renamed to ``out`` when complete, so a failure leaves
    nothing and ``out`` exists only with its state (another job that got there first wins; its state is used)."""
    tmp = new_temp_dir(out)
    try:
        OutputFolder(tmp, "prepared", tmp).mark(job.fingerprint)
        job.state(tmp)
        try:
            os.rename(tmp, out)  # replaces a missing or empty folder only
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        else:
            (out / STAGING).unlink(missing_ok=True)  # published: no longer a staging folder
            fsync_dir(out.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _exclusive(folder: Path) -> Iterator[None]:
    """One process at a time in the targets phase and the merge of ``folder`` (shard jobs wait here)."""
    with FolderLock(folder / "prepare", wait=True):  # the lock file .prepare.lock inside the folder
        yield


class _Job:
    """One ``prepare`` call: the recipe, its fingerprint and how to report progress."""

    def __init__(self, cfg: PrepareConfig, num_proc: int, progress: bool, log: Callable[[str], None] | None):
        self.cfg, self.num_proc, self.progress, self.log = cfg, num_proc, progress, log
        self.fingerprint = recipe_fingerprint(cfg)

    def run(self, folder: Path, started: float, shards: tuple[int, int] | None = None,
            merge_only: bool = False) -> dict[str, str] | None:
        """The phases this call owns; returns the finished folder's files (None: a shard job, or another process
        finished the folder meanwhile)."""
        with _exclusive(folder):
            if (folder / "manifest.json").is_file():  # another process of the same recipe finished it meanwhile
                return None
            state = self.state(folder)
        if streamed(self.cfg):
            cap = self._stream(folder, state, shards, merge_only)
            if cap is None:  # a shard job: its shards are written, the merge is another call's
                return None
            used, entries = cap.used, cap.entries
            _one_source(folder, entries, self.cfg.background_source or self.cfg.source)
        else:
            used, entries = [], []
        with _exclusive(folder):
            if not (folder / "manifest.json").is_file():
                return _merge(self.cfg, folder, state, used, entries, started)
        return None

    # -------------------------------------------------------------------------------------------- phase 1

    def state(self, folder: Path) -> dict:
        path = folder / STATE
        if path.is_file():
            state = read_state(folder)
            if state.get("fingerprint") != self.fingerprint:
                raise UserError(f"{folder} holds an unfinished prepare of another recipe (or of other code); finish "
                                f"it with that recipe, pass --overwrite to replace it, or choose another output folder")
            return state
        state = _targets(self.cfg, folder, self.progress)
        state["fingerprint"] = self.fingerprint
        atomic_write_json(path, state)
        return state

    # -------------------------------------------------------------------------------------------- phase 2

    def _stream(self, folder: Path, state: dict, shards: tuple[int, int] | None, merge_only: bool) -> "_Cap | None":
        """Write the background shards this call owns; returns the shards' entries and how many chunks of each the
        rows use (None for a shard job)."""
        cfg = self.cfg
        source = cfg.background_source or cfg.source
        settings = {"source": to_dict(source), "shard_documents": cfg.shard_documents, "min_tokens": cfg.min_tokens,
                    "chunk_tokens": cfg.background_chunk_tokens, "dtype": state["dtype"],
                    "dedup": to_dict(cfg.background_dedup) if cfg.background_dedup is not None else None}
        shared = background_fingerprint(settings, folder, state, code_version())
        spec = ShardSpec(str(folder), self.fingerprint, source, cfg.shard_documents, cfg.min_tokens,
                         cfg.background_chunk_tokens, state["dtype"], cfg.background_dedup,
                         str(store_path(folder, shared)), shared)
        progress = Progress(self.progress, self.log)
        try:
            if shards is not None:
                run_shards(spec, iter(range(*shards)), self.num_proc,
                           lambda entry: progress.update(entry) or entry["end_of_source"])
                return None
            cap = _Cap(folder, cfg, state.get("source_end"))

            def done(entry: dict) -> bool:
                progress.update(entry)
                return cap.add(entry)

            if merge_only:
                for i in itertools.count():
                    entry = read_entry(folder, i, self.fingerprint)
                    if entry is None:
                        raise UserError(f"background shard {stem(i)} is missing from {folder / BACKGROUND} (its job "
                                        f"did not finish); write it with: goldfish prepare RECIPE --out {folder} "
                                        f"--shards {i}:{i + 1}, or merge without --merge to write it here")
                    if done(entry):
                        break
            else:
                run_shards(spec, itertools.count(), self.num_proc, done)
            return cap
        finally:
            progress.close()


class _Cap:
    """How many chunks of each shard, in shard order, the rows take: the first ``num_background`` chunks cut from
    the source's first ``max_documents`` documents (positions)."""

    def __init__(self, folder: Path, cfg: PrepareConfig, source_end: int | None = None):
        self.folder = folder
        self.items = cfg.num_background if cfg.num_background is not None else float("inf")
        # the main source: the position its max_documents-th document (after min_words) ends at, as the split saw it
        docs = cfg.background_source.max_documents if cfg.background_source is not None else source_end
        self.positions = docs if docs is not None else float("inf")
        self.used: list[int] = []
        self.entries: list[dict] = []

    def add(self, entry: dict) -> bool:
        """Count one more shard (in order); True when no further shard is needed."""
        self.entries.append(entry)
        usable = entry["documents"]
        last = entry["positions"][1]
        if last > self.positions and usable:  # the document cap falls inside this shard: its chunks before it
            tags = np.load(self.folder / BACKGROUND / f"{stem(entry['shard'])}.tag.npy", allow_pickle=False)
            usable = int(np.searchsorted(tags, self.positions, side="left"))
        take = int(min(usable, self.items))
        self.used.append(take)
        self.items -= take
        return self.items <= 0 or last >= self.positions or entry["end_of_source"]


# ------------------------------------------------------------------------------------------------ phase 1: targets


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
        for pos, doc in iter_source(src):
            if src.max_documents is not None and len(positions) + len(batch) >= src.max_documents:
                end = pos
                break
            read += 1
            if len(doc.text.split()) < floor:
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
    return _Scan(np.frombuffer(positions, dtype=np.int64), np.frombuffer(lengths, dtype=np.int64),
                 np.frombuffer(bytes(digests), dtype=np.uint8).reshape(len(positions), k, 16), end,
                 {"read": read, "below_min_words": short})


def _fetch(cfg: PrepareConfig, tok, scan: _Scan, wanted: set[int]) -> tuple[dict[int, Document], dict[int, np.ndarray]]:
    """Pass 2: the documents at indices ``wanted`` (into ``scan``) and their token ids (the same cap as pass 1)."""
    by_pos = {int(scan.positions[i]): i for i in wanted}
    docs: dict[int, Document] = {}
    if by_pos:
        for pos, doc in iter_source(cfg.source, min(by_pos)):
            if pos in by_pos:
                docs[by_pos[pos]] = doc
                if len(docs) == len(by_pos):
                    break
    order = sorted(docs)
    ids = tokenize(tok, [docs[i] for i in order], max_tokens=_needed_tokens(cfg))
    return docs, dict(zip(order, ids))


def _targets(cfg: PrepareConfig, folder: Path, progress: bool) -> dict:
    """Split the main source in two streaming passes (count and digest every document, then read the chosen
    ones); write the tokenizer, the document splits and the target token shards. Returns the prepare state."""
    texts = None
    if cfg.tokenizer.name == "bpe":  # trained on the recipe's own documents: their texts are held for training
        texts = [d.text for d in load_documents(cfg.tokenizer.source or cfg.source)]
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
        copies = make_variants([it.ids for it in plan.members], reps, cfg.near_duplicates, cfg.seed, _decoder(tok),
                               lambda text: _encode(tok, [text])[0])
        variants = [v for vs in copies for v in vs]
        owners = np.concatenate([np.arange(len(reps)), np.repeat(np.arange(len(reps)), [len(vs) for vs in copies])])

    save_config(cfg, folder / "config.yaml")  # an unfinished folder says what it is: shard jobs can use it as recipe
    tok.save_pretrained(str(folder / "tokenizer"))
    text_of = _decoder(tok)
    decode = lambda ids: text_of(ids.tolist())  # noqa: E731 - the text a row holds (the cut chunk)
    splits = {"members": plan.members, "nonmembers": plan.nonmembers, "validation": plan.validation,
              "canaries": plan.canaries}
    sha = {name: save_table(doc_columns(items, name, decode), folder / name)
           for name, items in splits.items() if items or name in ("members", "nonmembers")}
    write_shard(folder / "train", "targets", [it.ids for it in plan.members] + variants, dtype, owners)
    if plan.canaries:
        write_shard(folder / "train", "canaries", [it.ids for it in plan.canaries], dtype)
    targets = plan.members + plan.nonmembers + plan.validation
    dropped = [docs[i].id for i in choice.duplicates]  # their chunks repeat a target's: never background either
    return {
        "dtype": dtype.name, "tokenizer": tokenizer_info(tok, cfg.tokenizer.name), "sha256": sha,
        "counts": {name: len(items) for name, items in splits.items()},
        "tokens": {name: int(sum(len(it.ids) for it in items)) for name, items in splits.items()},
        "repetitions": [int(it.repetitions) for it in plan.members], "member_reps": reps,
        "canary_reps": [it.repetitions if cfg.train_members else 0 for it in plan.canaries],
        "variants": len(variants), "stats": plan.stats,
        "canary_alphabet": len(canary_alphabet(tok)) if plan.canaries else None,
        "source_end": scan.end if cfg.background_source is None else None,
        "exclude": {"ids": sorted({it.doc.id for it in targets} | set(dropped)),
                    "text_sha256": sorted({text_sha256(it.doc.text) for it in targets})},
    }


def _canaries(cfg: PrepareConfig, tok) -> list[Item]:
    """The recipe's canaries as split items (``canary:<c>``, text = their decoded ids); none without them. They are
    kept whole in a row, so one longer than a packed row is refused."""
    if cfg.canaries is None or cfg.canaries.count == 0:
        return []
    if cfg.packing == "pack" and cfg.canaries.tokens + 1 > cfg.seq_len:
        raise UserError(f"canaries.tokens={cfg.canaries.tokens} + EOS does not fit in seq_len={cfg.seq_len}; "
                        "shorten the canaries or lengthen the rows")
    ids, reps = make_canaries(cfg.canaries, canary_alphabet(tok), cfg.repetitions, cfg.seed)
    text = _decoder(tok)
    return [Item(Document(f"canary:{c}", f"canary {c}", text(ids[c].tolist()), "canary"), ids[c], reps[c])
            for c in range(len(ids))]


def _decoder(tok):
    """ids -> the text they spell (no clean-up, special tokens kept): what a row of these ids holds."""
    return lambda ids: tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


# ------------------------------------------------------------------------------------------------ phase 3: merge


def _merge(cfg: PrepareConfig, folder: Path, state: dict, used: list[int], entries: list[dict],
           started: float) -> dict[str, str]:
    """The training layout over the targets and the used background chunks, then the manifest (written last);
    returns the manifest's ``files`` (every file's sha256)."""
    dtype = np.dtype(state["dtype"])
    targets = TokenShard(folder / "train", "targets", dtype)
    stores = [{"path": "train/targets", "documents": len(targets)}]
    lengths = [np.asarray(targets.lengths)]
    background = []
    shard_entries = entries
    for i, n in enumerate(used):
        shard = _checked_shard(folder, shard_entries[i], dtype)
        if n:
            stores.append({"path": f"{BACKGROUND}/{stem(i)}", "documents": n})
            lengths.append(np.asarray(shard.lengths[:n]))
        background.append(n)
    b = int(sum(background))
    canaries = state["counts"]["canaries"]
    if canaries:
        stores.append({"path": "train/canaries", "documents": canaries})
        lengths.append(np.asarray(TokenShard(folder / "train", "canaries", dtype).lengths))
    lengths = np.concatenate(lengths).astype(np.int64)  # (D,) members, variants, background, canaries
    m, v = state["counts"]["members"], state["variants"]
    if v:
        order, _ = variant_layout(state["member_reps"], b, cfg.seed)
    else:
        order = training_order(state["member_reps"], b, cfg.seed, state["canary_reps"])
    whole = np.zeros(len(lengths), dtype=bool)  # members, their variants and canaries are never cut by a row
    whole[:m + v] = True
    whole[len(lengths) - canaries:] = True
    units = lengths[order] + int(cfg.packing == "pack")
    starts = (pack_starts(units, whole[order], cfg.seq_len) if cfg.packing == "pack"
              else row_starts(units, cfg.seq_len))
    row_stats = layout_stats(starts, units, cfg.seq_len)
    _check_copies(order, state, targets.tags, m, v, b)
    layout = {"train/order.npy": write_file(folder / "train" / "order.npy", np.asarray(order, dtype=np.int64)),
              "train/starts.npy": write_file(folder / "train" / "starts.npy", starts)}
    _remove_unused(folder, len(used))
    files = {**_data_files(folder, shard_entries[:len(used)]), **layout}
    atomic_write_json(folder / "manifest.json", _manifest(cfg, state, stores, row_stats, files, entries, b,
                                                          int(lengths[m + v:m + v + b].sum()), started))
    (folder / STATE).unlink()
    _default_permissions(folder)
    return files


def _checked_shard(folder: Path, entry: dict, dtype: np.dtype) -> TokenShard:
    """Background shard ``entry["shard"]``, its files checked against the sha256 its entry recorded."""
    name = stem(entry["shard"])
    for f, sha in entry["sha256"].items():
        path = folder / BACKGROUND / f
        if not path.is_file() or file_sha256(path) != sha:
            raise UserError(f"background shard {name} is damaged ({f} is missing or differs from its entry); delete "
                            f"{folder / BACKGROUND}/{name}.* and run the same goldfish prepare command again to "
                            f"write it anew")
    return TokenShard(folder / BACKGROUND, name, dtype)


def _check_copies(order: np.ndarray, state: dict, owners: np.ndarray | None, m: int, v: int, b: int) -> None:
    """Every member (with its variants) and canary occurs exactly as often as labelled."""
    counts = np.bincount(order, minlength=m + v + b + len(state["canary_reps"]))
    members = counts[:m].copy()
    if v:  # a member's copies are itself and its variants
        members += np.bincount(np.asarray(owners[m:m + v]), weights=counts[m:m + v], minlength=m).astype(np.int64)
    for name, got, want in (("members", members, state["member_reps"]),
                            ("canaries", counts[m + v + b:], state["canary_reps"])):
        if not np.array_equal(got, want):
            raise RuntimeError(f"bug: the training layout holds {name} {got.tolist()} times, labelled {want}")


# the temporary files prepare's own writers leave when killed: a shard writer's ``.<stem>.bin.<pid>.tmp``, a link
# from the shared store's ``.<file>.<pid>.link.tmp`` (store._link) and an atomic write's ``.<name>.<8 random
# characters>.tmp`` (``tempfile.mkstemp``), of the files prepare writes there
_SHARD_TMP = re.compile(r"\.\d{5,}\.(bin\.\d+|(bin|idx\.npy|tag\.npy)\.\d+\.link"
                        r"|(bin|idx\.npy|tag\.npy|json)\.[a-z0-9_]{8})\.tmp")
# a shard's files, renamed into place before its entry: without an entry, a worker's unfinished shard (the pool is
# terminated once the cap is reached, see stream.run_shards)
_SHARD_FILE = re.compile(r"(\d{5,})\.(bin|idx\.npy|tag\.npy)")
_TRAIN_TMP = re.compile(r"\.((targets|canaries)\.(bin\.\d+|(bin|idx\.npy|tag\.npy)\.[a-z0-9_]{8})"
                        r"|(order|starts)\.npy\.[a-z0-9_]{8})\.tmp")


def _remove_unused(folder: Path, shards: int) -> None:
    """Delete background shards past the last one used (written by workers that ran ahead of the cap, finished or
    not) and the temporary files of prepare's own writers that were killed. Only the exact files a shard's entry names
    (and the entry), a shard's own file names past the last one used when it has no entry, and temporary files by the
    exact names prepare's writers give them, in folders of ``folder`` that are not links: a user's ``00042.csv``,
    ``00007.bin.bak`` or notes, and anything a linked folder leads to, stay."""
    background = folder / BACKGROUND
    if background.is_dir() and not background.is_symlink():
        for path in sorted(background.iterdir()):
            head = path.name[:-len(".json")]
            unfinished = _SHARD_FILE.fullmatch(path.name)
            if path.name.endswith(".json") and head.isdigit() and len(head) >= 5 and int(head) >= shards:
                _remove_entry(path, head)
            elif _SHARD_TMP.fullmatch(path.name) or (
                    unfinished and int(unfinished[1]) >= shards
                    and not (background / f"{unfinished[1]}.json").exists()):
                _unlink_file(path)
    train = folder / "train"
    if train.is_dir() and not train.is_symlink():
        for path in sorted(train.iterdir()):
            if _TRAIN_TMP.fullmatch(path.name):
                _unlink_file(path)


def _remove_entry(path: Path, name: str) -> None:
    """An unused shard: the files its entry records (of its own name only), then the entry; an entry that is not
    one prepare wrote (not a JSON object naming this shard's files) is left with everything."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    files = entry.get("sha256") if isinstance(entry, dict) else None
    if not isinstance(files, dict) or entry.get("shard") != int(name):
        return
    own = {f"{name}.bin", f"{name}.idx.npy", f"{name}.tag.npy"}
    for f in files:
        if f in own:
            _unlink_file(path.parent / f)
    _unlink_file(path)


def _unlink_file(path: Path) -> None:
    """Delete ``path`` when it is a regular file (never a link, a folder or what a link leads to)."""
    if path.is_file() and not path.is_symlink():
        path.unlink()


def _data_files(folder: Path, shards: list[dict]) -> dict[str, str]:
    """sha256 of every file of the tokenizer, the target shards and the background shards (what training reads and
    ships); a background shard's come from its entry, checked against its files by :func:`_checked_shard`."""
    out = {}
    for sub in ("tokenizer", "train"):
        for path in sorted((folder / sub).iterdir()):
            if path.is_file():
                out[f"{sub}/{path.name}"] = file_sha256(path)
    for entry in shards:
        out.update({f"{BACKGROUND}/{f}": sha for f, sha in entry["sha256"].items()})
        if entry_path(folder, entry["shard"]).is_file():  # a streamed shard's entry (the main source's have none)
            out[f"{BACKGROUND}/{stem(entry['shard'])}.json"] = file_sha256(entry_path(folder, entry["shard"]))
    return dict(sorted(out.items()))


def _manifest(cfg: PrepareConfig, state: dict, stores: list[dict], row_stats: dict, files: dict, entries: list[dict],
              b: int, b_tokens: int, started: float) -> dict:
    counts = {k: v for k, v in state["counts"].items() if v or k in ("members", "nonmembers")}
    tokens = {k: v for k, v in state["tokens"].items() if k in counts}
    if cfg.num_background != 0:
        counts["background"], tokens["background"] = b, b_tokens
    counts["train"], tokens["train"] = row_stats["rows"], row_stats["tokens"]
    sha = dict(state["sha256"])
    sha["train"] = train_sha256(files, stores)
    strata: dict[str, int] = {}
    for r in state["repetitions"]:
        strata[str(r)] = strata.get(str(r), 0) + 1
    bg = _background_stats(entries)
    stats = {**state["stats"], **row_stats, **bg, "repetition_strata": strata,
             "background_source": _source_label(cfg.background_source or cfg.source),
             "tokenizer_corpus": (_source_label(cfg.tokenizer.source) if cfg.tokenizer.source
                                  else "the recipe's documents"),
             "members_trained": cfg.train_members, "seconds": round(time.perf_counter() - started, 2)}
    if state["variants"]:
        stats["variants"] = state["variants"]
    if state["canary_alphabet"] is not None:
        stats["canary_alphabet"] = state["canary_alphabet"]
    rows = {"dtype": state["dtype"], "seq_len": cfg.seq_len, "packing": cfg.packing,
            "eos_id": state["tokenizer"]["eos_id"], "pad_id": state["tokenizer"]["pad_id"], "rows": row_stats["rows"],
            "tokens": row_stats["tokens"], "occurrences": row_stats["occurrences"], "variants": state["variants"],
            "stores": stores}
    return {
        "format": FORMAT, "name": cfg.name, "source": _source_label(cfg.source), "tokenizer": state["tokenizer"],
        "seed": cfg.seed, "seq_len": cfg.seq_len, "packing": cfg.packing, "counts": counts, "tokens": tokens,
        "sha256": sha, "files": files, "train": rows,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config": to_dict(cfg), "code": code_version(), "versions": versions(_libraries(cfg)), "stats": stats,
    }


def _background_stats(entries: list[dict]) -> dict:
    """Counts over a streamed background's shard entries (a background from the main source counts itself)."""
    total: dict[str, int] = {}
    for entry in entries:
        for k, n in entry["stats"].items():
            total[f"background_{k}"] = total.get(f"background_{k}", 0) + n
    return {**total, "background_shards": len(entries)} if entries else {}


def _default_permissions(folder: Path) -> None:
    """Temp folders are created private (0700); give the result the umask's usual mode instead."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)


# ------------------------------------------------------------------------------------------------ summary


def summary(path: str | Path) -> str:
    """A one-screen description of a prepared folder, from its manifest."""
    m = json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))
    s, t = m["stats"], m["tokenizer"]
    strata = ", ".join(f"{k}x: {v}" for k, v in sorted(s["repetition_strata"].items(), key=lambda kv: int(kv[0])))
    lines = [
        f"prepared '{m['name']}' in {s['seconds']:.1f}s -> {path}",
        f"  source      {m['source']}: {s['read']} read, {s['below_min_words']} below min_words, "
        f"{s['below_min_tokens']} below min_tokens, {s['too_short_for_later_chunk']} too short for the chunks, "
        f"{s['duplicates']} duplicates",
        f"  tokenizer   {t['name']} (vocab {t['vocab_size']}, eos {t['eos_id']}, pad {t['pad_id']})",
        f"  members     {m['counts']['members']} docs, {m['tokens']['members']} tokens; repetitions {strata}",
        f"  nonmembers  {m['counts']['nonmembers']} docs, {m['tokens']['nonmembers']} tokens "
        f"({m['config']['nonmember_mode']})",
    ]
    if "background" in m["counts"]:
        lines.append(f"  background  {m['counts']['background']} docs, {m['tokens']['background']} tokens "
                     f"from {s['background_source']}")
    if "validation" in m["counts"]:
        lines.append(f"  validation  {m['counts']['validation']} docs, {m['tokens']['validation']} tokens (never "
                     "trained on: for tuning)")
    if "canaries" in m["counts"]:
        c = m["config"]["canaries"]
        lines.append(f"  canaries    {m['counts']['canaries']} x {c['tokens']} random tokens (secret: the last "
                     f"{c['secret_tokens']}, from {s['canary_alphabet']} ids)")
    size = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
    lines.append(f"  train       {m['counts']['train']} rows x {m['seq_len']} ({m['packing']}): {m['tokens']['train']} "
                 f"tokens, {s['padding']} padding, {s['split_occurrences']} documents split across rows; "
                 f"{m['train']['dtype']} ids, folder {size / 1e6:.1f} MB")
    if "variants" in s:
        nd = m["config"]["near_duplicates"]
        lines.append(f"  variants    {s['variants']} near-duplicate copies ({nd['edit']}, every {nd['every']}) in place "
                     "of repeated members")
    lines.append(f"  sha256      train {m['sha256']['train'][:16]}, members {m['sha256']['members'][:16]}")
    return "\n".join(lines)
