"""``prepare(cfg, out)``: corpus -> tokenizer -> members / nonmembers -> background shards -> training layout ->
folder, in three phases that each resume where a kill left them, one module each (this one runs them):

1. **Targets** (:mod:`~goldfish.data.prepare_targets`; two streaming passes over the main source; memory: one batch of
   documents plus ~50 bytes per document): pass 1 reads every document, tokenizes its first tokens (those the splits can
   use) and keeps only its source position, token count and a 16-byte digest of its chunk(s); the split
   (:func:`goldfish.data.splits.choose`: one seeded permutation of the document indices, as the in-memory
   :func:`~goldfish.data.splits.plan_splits` draws it) is computed from those; pass 2 reads just the chosen documents.
   Members (with repetition counts), nonmembers, validation documents, canaries and near-duplicate variants; the
   tokenizer, their Arrow splits and the target token shard (``train/targets``, ``train/canaries``) are written, then
   ``prepare-state.json`` (the recipe's fingerprint, what the background must not hold: the targets' ids and texts, and
   the documents dropped as duplicates of their chunks).
2. **Background** (:mod:`~goldfish.data.prepare_background`; streamed, from ``background_source`` or from the main
   source itself): shard ``i`` is the source's documents at positions
   ``[i * shard_documents, (i + 1) * shard_documents)``, tokenized in ``num_proc`` worker processes, de-duplicated
   against the targets and chunked as it streams (:mod:`goldfish.data.stream`), each shard with its own atomic entry.
   Independent jobs may write disjoint ranges of shards into one folder (``shards=(a, b)``). From the main source, the
   stream skips the targets (by id and text) and the duplicates, so the background is the documents the split left
   unused, in source order (the first ``num_background`` chunks in source order when capped), up to the main source's
   ``max_documents``. Folders of the same background (the same source, tokenizer, chunking, de-duplication and targets)
   share one copy of its shards (:mod:`goldfish.data.store`).
3. **Merge** (:mod:`~goldfish.data.prepare_merge`): the first ``num_background`` chunks over the finished shards, the
   training order (members x r, background once, canaries, shuffled by seed) and each occurrence's first slot in the
   packed row stream (``train/order.npy``, ``train/starts.npy``; :mod:`goldfish.data.rows`), then ``manifest.json``
   last.

A folder without ``manifest.json`` is unfinished: readers refuse it, and ``prepare`` with the same recipe continues
it (a different recipe is refused). Memory is that of the targets plus ~50 bytes per main-source document and ~40
bytes per background chunk at the merge, whatever the number of tokens (a ``bpe`` tokenizer trained on the recipe's
documents holds their texts while it trains). Same recipe and seed -> byte-identical data files, interrupted or not.
``overwrite`` builds a complete new folder beside the old one and swaps it in at the end
(``goldfish.ownership.writing``); it replaces only a folder ``goldfish prepare`` made.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Iterator

from ..config import to_dict
from ..errors import UserError
from ..io import STAGING, atomic_write_json, fsync_dir, new_temp_dir
from ..ownership import FolderLock, OutputFolder, fingerprint_sha256, writing
from ..provenance import code_version
from .config import PrepareConfig
from .prepare_background import stream_background
from .prepare_merge import merge
from .prepare_targets import write_targets
from .prepared import record_verified
from .stream import STATE, read_state
from .tokens import token_dtype


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
    if (
        cfg.doc_tokens is None
        or cfg.num_background is None
        or (cfg.num_background and cfg.background_chunk_tokens is None)
    ):
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
    disk = (
        (background_tokens + target_tokens) * itemsize
        + chunks * INDEX_BYTES_PER_CHUNK
        + occurrences * LAYOUT_BYTES_PER_OCCURRENCE
        + (members + nonmembers + cfg.num_validation) * cfg.doc_tokens * SPLIT_BYTES_PER_TOKEN
    )
    return {
        "disk_bytes": disk,
        "memory_bytes": PROCESS_BYTES + occurrences * MERGE_BYTES_PER_OCCURRENCE,
        "tokens": background_tokens + copies * cfg.doc_tokens,
        "chunks": chunks,
        "occurrences": occurrences,
        "dtype": f"uint{8 * itemsize}",
    }


# ------------------------------------------------------------------------------------------------ entry point


def prepare(
    cfg: PrepareConfig,
    out: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
    num_proc: int | None = None,
    shards: tuple[int, int] | None = None,
    merge_only: bool = False,
    log: Callable[[str], None] | None = None,
) -> Path:
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
        raise UserError(
            f"--shards {shards[0]}:{shards[1]} reaches document {shards[1] * cfg.shard_documents:,} of "
            f"the source, past any source's end; give shard numbers below "
            f"{2**62 // cfg.shard_documents:,}"
        )
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
            raise UserError(
                f"output folder {out} already holds a finished prepare; pass --overwrite to replace it, "
                f"or choose another output folder"
            )
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

    def run(
        self, folder: Path, started: float, shards: tuple[int, int] | None = None, merge_only: bool = False
    ) -> dict[str, str] | None:
        """The phases this call owns; returns the finished folder's files (None: a shard job, or another process
        finished the folder meanwhile)."""
        with _exclusive(folder):
            if (folder / "manifest.json").is_file():  # another process of the same recipe finished it meanwhile
                return None
            state = self.state(folder)
        if streamed(self.cfg):
            cap = stream_background(
                self.cfg,
                folder,
                state,
                self.fingerprint,
                shards=shards,
                merge_only=merge_only,
                num_proc=self.num_proc,
                progress=self.progress,
                log=self.log,
            )
            if cap is None:  # a shard job: its shards are written, the merge is another call's
                return None
            used, entries = cap.used, cap.entries
        else:
            used, entries = [], []
        with _exclusive(folder):
            if not (folder / "manifest.json").is_file():
                return merge(self.cfg, folder, state, used, entries, started)
        return None

    def state(self, folder: Path) -> dict:
        path = folder / STATE
        if path.is_file():
            state = read_state(folder)
            if state.get("fingerprint") != self.fingerprint:
                raise UserError(
                    f"{folder} holds an unfinished prepare of another recipe (or of other code); finish "
                    f"it with that recipe, pass --overwrite to replace it, or choose another output folder"
                )
            return state
        state = write_targets(self.cfg, folder, self.progress)
        state["fingerprint"] = self.fingerprint
        atomic_write_json(path, state)
        return state


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
        lines.append(
            f"  background  {m['counts']['background']} docs, {m['tokens']['background']} tokens "
            f"from {s['background_source']}"
        )
    if "validation" in m["counts"]:
        lines.append(
            f"  validation  {m['counts']['validation']} docs, {m['tokens']['validation']} tokens (never "
            "trained on: for tuning)"
        )
    if "canaries" in m["counts"]:
        c = m["config"]["canaries"]
        lines.append(
            f"  canaries    {m['counts']['canaries']} x {c['tokens']} random tokens (secret: the last "
            f"{c['secret_tokens']}, from {s['canary_alphabet']} ids)"
        )
    size = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
    lines.append(
        f"  train       {m['counts']['train']} rows x {m['seq_len']} ({m['packing']}): {m['tokens']['train']} "
        f"tokens, {s['padding']} padding, {s['split_occurrences']} documents split across rows; "
        f"{m['train']['dtype']} ids, folder {size / 1e6:.1f} MB"
    )
    if "variants" in s:
        nd = m["config"]["near_duplicates"]
        lines.append(
            f"  variants    {s['variants']} near-duplicate copies ({nd['edit']}, every {nd['every']}) "
            "in place of repeated members"
        )
    lines.append(f"  sha256      train {m['sha256']['train'][:16]}, members {m['sha256']['members'][:16]}")
    return "\n".join(lines)
