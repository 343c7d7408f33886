"""Phase 3 of ``prepare`` (:mod:`goldfish.data.prepare`), the merge: the first ``num_background`` chunks over the
finished background shards, the training order and each occurrence's first slot in the packed row stream, the
removal of what killed writers and workers past the cap left, then ``manifest.json`` last."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import time
from pathlib import Path

import numpy as np

from ..config import to_dict
from ..errors import UserError
from ..io import atomic_write_json
from ..provenance import code_version, versions
from .config import PrepareConfig, SourceConfig
from .packing import training_order, variant_layout
from .prepared import FORMAT, train_sha256
from .rows import layout_stats, pack_starts, row_starts
from .stream import BACKGROUND, STATE, entry_path, stem
from .tokens import TokenShard, file_sha256, write_file


def merge(
    cfg: PrepareConfig, folder: Path, state: dict, used: list[int], entries: list[dict], started: float
) -> dict[str, str]:
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
    whole[: m + v] = True
    whole[len(lengths) - canaries :] = True
    units = lengths[order] + int(cfg.packing == "pack")
    starts = pack_starts(units, whole[order], cfg.seq_len) if cfg.packing == "pack" else row_starts(units, cfg.seq_len)
    row_stats = layout_stats(starts, units, cfg.seq_len)
    _check_copies(order, state, targets.tags, m, v, b)
    layout = {
        "train/order.npy": write_file(folder / "train" / "order.npy", np.asarray(order, dtype=np.int64)),
        "train/starts.npy": write_file(folder / "train" / "starts.npy", starts),
    }
    _remove_unused(folder, len(used))
    files = {**_data_files(folder, shard_entries[: len(used)]), **layout}
    atomic_write_json(
        folder / "manifest.json",
        _manifest(cfg, state, stores, row_stats, files, entries, b, int(lengths[m + v : m + v + b].sum()), started),
    )
    (folder / STATE).unlink()
    _default_permissions(folder)
    return files


def _checked_shard(folder: Path, entry: dict, dtype: np.dtype) -> TokenShard:
    """Background shard ``entry["shard"]``, its files checked against the sha256 its entry recorded."""
    name = stem(entry["shard"])
    for f, sha in entry["sha256"].items():
        path = folder / BACKGROUND / f
        if not path.is_file() or file_sha256(path) != sha:
            raise UserError(
                f"background shard {name} is damaged ({f} is missing or differs from its entry); delete "
                f"{folder / BACKGROUND}/{name}.* and run the same goldfish prepare command again to "
                f"write it anew"
            )
    return TokenShard(folder / BACKGROUND, name, dtype)


def _check_copies(order: np.ndarray, state: dict, owners: np.ndarray | None, m: int, v: int, b: int) -> None:
    """Every member (with its variants) and canary occurs exactly as often as labelled."""
    counts = np.bincount(order, minlength=m + v + b + len(state["canary_reps"]))
    members = counts[:m].copy()
    if v:  # a member's copies are itself and its variants
        members += np.bincount(np.asarray(owners[m : m + v]), weights=counts[m : m + v], minlength=m).astype(np.int64)
    for name, got, want in (
        ("members", members, state["member_reps"]),
        ("canaries", counts[m + v + b :], state["canary_reps"]),
    ):
        if not np.array_equal(got, want):
            raise RuntimeError(f"bug: the training layout holds {name} {got.tolist()} times, labelled {want}")


# the temporary files prepare's own writers leave when killed: a shard writer's ``.<stem>.bin.<pid>.tmp``, a link
# from the shared store's ``.<file>.<pid>.link.tmp`` (store._link) and an atomic write's ``.<name>.<8 random
# characters>.tmp`` (``tempfile.mkstemp``), of the files prepare writes there
_SHARD_TMP = re.compile(
    r"\.\d{5,}\.(bin\.\d+|(bin|idx\.npy|tag\.npy)\.\d+\.link"
    r"|(bin|idx\.npy|tag\.npy|json)\.[a-z0-9_]{8})\.tmp"
)
# a shard's files, renamed into place before its entry: without an entry, a worker's unfinished shard (the pool is
# terminated once the cap is reached, see stream.run_shards)
_SHARD_FILE = re.compile(r"(\d{5,})\.(bin|idx\.npy|tag\.npy)")
_TRAIN_TMP = re.compile(
    r"\.((targets|canaries)\.(bin\.\d+|(bin|idx\.npy|tag\.npy)\.[a-z0-9_]{8})"
    r"|(order|starts)\.npy\.[a-z0-9_]{8})\.tmp"
)


def _remove_unused(folder: Path, shards: int) -> None:
    """Delete background shards past the last one used (written by workers that ran ahead of the cap, finished or
    not) and the temporary files of prepare's own writers that were killed. Only the exact files a shard's entry names
    (and the entry), a shard's own file names past the last one used when it has no entry, and temporary files by the
    exact names prepare's writers give them, in folders of ``folder`` that are not links: a user's ``00042.csv``,
    ``00007.bin.bak`` or notes, and anything a linked folder leads to, stay."""
    background = folder / BACKGROUND
    if background.is_dir() and not background.is_symlink():
        for path in sorted(background.iterdir()):
            head = path.name[: -len(".json")]
            unfinished = _SHARD_FILE.fullmatch(path.name)
            if path.name.endswith(".json") and head.isdigit() and len(head) >= 5 and int(head) >= shards:
                _remove_entry(path, head)
            elif _SHARD_TMP.fullmatch(path.name) or (
                unfinished and int(unfinished[1]) >= shards and not (background / f"{unfinished[1]}.json").exists()
            ):
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


def _manifest(
    cfg: PrepareConfig,
    state: dict,
    stores: list[dict],
    row_stats: dict,
    files: dict,
    entries: list[dict],
    b: int,
    b_tokens: int,
    started: float,
) -> dict:
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
    stats = {
        **state["stats"],
        **row_stats,
        **bg,
        "repetition_strata": strata,
        "background_source": _source_label(cfg.background_source or cfg.source),
        "tokenizer_corpus": (_source_label(cfg.tokenizer.source) if cfg.tokenizer.source else "the recipe's documents"),
        "members_trained": cfg.train_members,
        "seconds": round(time.perf_counter() - started, 2),
    }
    if state["variants"]:
        stats["variants"] = state["variants"]
    if state["canary_alphabet"] is not None:
        stats["canary_alphabet"] = state["canary_alphabet"]
    rows = {
        "dtype": state["dtype"],
        "seq_len": cfg.seq_len,
        "packing": cfg.packing,
        "eos_id": state["tokenizer"]["eos_id"],
        "pad_id": state["tokenizer"]["pad_id"],
        "rows": row_stats["rows"],
        "tokens": row_stats["tokens"],
        "occurrences": row_stats["occurrences"],
        "variants": state["variants"],
        "stores": stores,
    }
    return {
        "format": FORMAT,
        "name": cfg.name,
        "source": _source_label(cfg.source),
        "tokenizer": state["tokenizer"],
        "seed": cfg.seed,
        "seq_len": cfg.seq_len,
        "packing": cfg.packing,
        "counts": counts,
        "tokens": tokens,
        "sha256": sha,
        "files": files,
        "train": rows,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config": to_dict(cfg),
        "code": code_version(),
        "versions": versions(_libraries(cfg)),
        "stats": stats,
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


def _libraries(cfg: PrepareConfig) -> list[str]:
    """The libraries the prepared bytes depend on, for the manifest's versions (gensim when Wikipedia is read)."""
    wiki = "wikipedia" in (
        cfg.source.name,
        getattr(cfg.background_source, "name", None),
        getattr(cfg.tokenizer.source, "name", None),
    )
    return ["numpy", "datasets", "pyarrow", "tokenizers", "transformers"] + ["gensim"] * wiki


def _source_label(src: SourceConfig) -> str:
    return src.name + (f":{src.path}" if src.path else "")
