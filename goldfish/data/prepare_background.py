"""Phase 2 of ``prepare`` (:mod:`goldfish.data.prepare`), the background: the shards a call owns streamed from
``background_source`` or the main source (:mod:`goldfish.data.stream`), and how many chunks of each the rows take
(:class:`Cap`: the first ``num_background`` chunks of the source's first ``max_documents`` documents)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Callable

import numpy as np

from ..config import to_dict
from ..errors import UserError
from ..provenance import code_version
from .config import PrepareConfig, SourceConfig
from .store import background_fingerprint, check_store, store_path
from .sources import source_identity
from .stream import BACKGROUND, Progress, ShardSpec, read_entry, run_shards, stem


def stream_background(
    cfg: PrepareConfig,
    folder: Path,
    state: dict,
    fingerprint: str,
    *,
    shards: tuple[int, int] | None,
    merge_only: bool,
    num_proc: int,
    progress: bool,
    log: Callable[[str], None] | None,
) -> Cap | None:
    """Write the background shards this call owns (``num_proc`` workers; ``progress`` and ``log`` as
    :class:`~goldfish.data.stream.Progress` takes them); returns the shards' entries and how many chunks of each the
    rows use (None for a shard job), once the shards are known to come from one state of the source."""
    source = cfg.background_source or cfg.source
    settings = {
        "source": to_dict(source),
        "shard_documents": cfg.shard_documents,
        "min_tokens": cfg.min_tokens,
        "chunk_tokens": cfg.background_chunk_tokens,
        "dtype": state["dtype"],
        "dedup": to_dict(cfg.background_dedup) if cfg.background_dedup is not None else None,
    }
    shared = background_fingerprint(settings, folder, state, code_version())
    check_store(store_path(folder, shared))  # another user's store is refused before anything is shared with it
    spec = ShardSpec(
        str(folder),
        fingerprint,
        source,
        cfg.shard_documents,
        cfg.min_tokens,
        cfg.background_chunk_tokens,
        state["dtype"],
        cfg.background_dedup,
        str(store_path(folder, shared)),
        shared,
    )
    bar = Progress(progress, log)
    try:
        if shards is not None:
            run_shards(spec, iter(range(*shards)), num_proc, lambda entry: bar.update(entry) or entry["end_of_source"])
            return None
        cap = Cap(folder, cfg, state.get("source_end"))

        def done(entry: dict) -> bool:
            bar.update(entry)
            return cap.add(entry)

        if merge_only:
            for i in itertools.count():
                entry = read_entry(folder, i, fingerprint)
                if entry is None:
                    raise UserError(
                        f"background shard {stem(i)} is missing from {folder / BACKGROUND} (its job did "
                        f"not finish); write it with: goldfish prepare RECIPE --out {folder} --shards "
                        f"{i}:{i + 1}, or merge without --merge to write it here"
                    )
                if done(entry):
                    break
        else:
            run_shards(spec, itertools.count(), num_proc, done)
    finally:
        bar.close()
    _one_source(folder, cap.entries, source)
    return cap


class Cap:
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
    raise UserError(
        f"background source {source.path} changed between shard jobs: shards {names} were read from "
        f"another state of it than the others (their documents would be read twice, others never); "
        f"delete {folder / BACKGROUND}/NNNNN.* of those shards and run the same goldfish prepare command "
        f"again to write them from the source as it is now (or pass --overwrite to start over)"
    )
