"""The shared background store: prepared folders whose background shards would be the same bytes hold one copy of them
on disk, as hard links.

A background shard's bytes are a function of its *background fingerprint* (:func:`background_fingerprint`): the
source's identity (its config, with a local path resolved and its files' sizes, mtimes, ctimes and inodes), the
shard size, ``min_tokens``, the chunk length, the dtype, the tokenizer's files, the de-duplication settings, what the
background must not hold (the targets' ids and texts, the documents dropped as duplicates, and the target splits'
bytes, from which the n-gram index is built) and the code version. Nothing else of the recipe enters it (not
``num_background``, not ``train_members``), so the arms' folder and a background-trained control's folder of one
experiment -- the same targets, the same background source -- share it; folders whose targets differ never do (the
de-duplication against them is keyed in).

The store is ``<folder's parent>/.goldfish-background/<fingerprint>/``: ``NNNNN.{bin,idx.npy,tag.npy}`` and
``NNNNN.json`` (the shard's entry, written last). A shard job that finds a finished shard there checks its files
against the entry's sha256 and hard-links them into its folder's ``background/`` (then writes the folder's own
entry); one that writes a shard links its files into the store. Every file is written once under a temporary name and
renamed, never changed in place, so a link is as good as a copy: deleting a prepared folder (or ``--overwrite``, or
the merge's clean-up of unused shards) removes its own links only, and deleting the store removes no folder's data.
Where hard links are not possible (another file system, a file system without them), nothing is shared and each
folder writes its own shards, as before. The store is never pruned automatically: ``rm -r .goldfish-background`` is
safe at any time (it costs only a re-tokenization later).

**Trust.** The store is the user's own: its folders are created with the user's ownership and without group or world
write permission, and a store another user owns, or that group or others can write (a ``.goldfish-background/``
pre-created in a shared parent such as /tmp), is refused in one line with the fix (:func:`check_store`) before a
shard is published or linked -- another user could otherwise swap a shard and its entry, and the swapped token ids
would be linked as verified. A store file that is not the user's own, or that group or others can write, is never
linked (the folder tokenizes its own shard).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from ..errors import UserError
from ..io import atomic_write_json
from ..ownership import fingerprint_sha256
from .sources import files_identity
from .tokens import file_sha256

STORE = ".goldfish-background"


def _source_identity(source: dict) -> dict:
    """A source config with a local path made absolute and its files' identity added (:func:`files_identity`)."""
    path = source.get("path")
    if not path or source.get("name") == "hub":
        return source
    p = Path(path).expanduser().resolve()
    return {**source, "path": str(p), "files": files_identity(p) if p.exists() else []}


def background_fingerprint(spec: dict, folder: Path, state: dict, code: str) -> str:
    """The fingerprint of what a background shard's bytes depend on (see the module docstring); ``spec``: the shard
    settings (source config as a dict, shard size, min_tokens, chunk length, dtype, dedup config as a dict)."""
    tokenizer = {f.name: file_sha256(f) for f in sorted((folder / "tokenizer").iterdir()) if f.is_file()}
    targets = {k: v for k, v in state["sha256"].items() if k in ("members", "nonmembers", "validation")}
    return fingerprint_sha256(
        {
            "spec": {**spec, "source": _source_identity(spec["source"])},
            "tokenizer": tokenizer,
            "exclude": state["exclude"],
            "targets": targets,
            "code": code,
        }
    )


def store_path(folder: Path, fingerprint: str) -> Path:
    return Path(folder).resolve().parent / STORE / fingerprint


def _uid() -> int:
    """The user the store must belong to: this process's effective user."""
    return os.geteuid()


def _foreign(path: Path) -> str | None:
    """Why ``path`` (not followed if a link) is not the user's own to trust -- another owner, a link, group or world
    write permission -- or None when it is."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if info.st_uid != _uid():
        return f"belongs to another user (uid {info.st_uid}, not {_uid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "others" if info.st_mode & stat.S_IWOTH else "its group"
        return f"can be written by {who} (mode {info.st_mode & 0o777:o})"
    return None


def check_store(store: Path) -> None:
    """Refuse (one line, with the fix) a shared store -- ``store``'s parent ``.goldfish-background/`` or ``store``
    itself, where they exist -- that another user owns or that group or others can write (see the module docstring)."""
    for folder in (Path(store).parent, Path(store)):
        why = _foreign(folder) if os.path.lexists(folder) else None
        if why:
            raise UserError(
                f"the shared background store {folder} {why}, so another user could put other token ids "
                f"into this folder's background; remove it (rm -r {folder.parent / STORE}) if it is yours, "
                f"or make it your own (chmod go-w), or prepare into a folder whose parent only you can "
                f"write"
            )


def _own_folder(folder: Path) -> None:
    """Create ``folder`` (and the store above it) as the user's own: no group or world write, whatever the umask."""
    for path in (folder.parent, folder):
        try:
            path.mkdir(mode=0o755)
            os.chmod(path, 0o755)
        except FileExistsError:
            pass
    check_store(folder)


def _link(source: Path, target: Path) -> None:
    """``target`` becomes a hard link to ``source``, atomically (a temporary link renamed over it). The temporary
    name never outlives the call: rename(2) of two links to one file does nothing and succeeds, leaving the
    temporary behind (a shard linked again by a second job or a resume), so it is removed after the rename too."""
    tmp = target.parent / f".{target.name}.{os.getpid()}.link.tmp"
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def link_in(store: Path, background: Path, stem: str, fingerprint: str) -> dict | None:
    """Shard ``stem`` from ``store`` into ``background`` (hard links; its files checked against the store's entry),
    with the folder's own entry (recipe ``fingerprint``); None when the store has no intact copy or links fail."""
    try:
        check_store(store)
        entry = json.loads((store / f"{stem}.json").read_text(encoding="utf-8"))
        files = entry["sha256"]
        if any(_foreign(store / f) for f in [*files, f"{stem}.json"]):
            return None  # not the user's own file: tokenized again, never trusted
        if any(file_sha256(store / f) != sha for f, sha in files.items()):
            return None
        for f in files:
            _link(store / f, background / f)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    entry = {**entry, "fingerprint": fingerprint}
    atomic_write_json(background / f"{stem}.json", entry)
    return entry


def publish(store: Path, background: Path, stem: str, entry: dict, fingerprint: str) -> None:
    """Hard-link a finished shard's files into ``store`` and write its store entry (background ``fingerprint``)
    last; nothing when links are not possible (the folder keeps its own files either way)."""
    try:
        store.parent.parent.mkdir(parents=True, exist_ok=True)
        _own_folder(store)
        if (store / f"{stem}.json").is_file():
            return  # another folder published the same bytes
        for f in entry["sha256"]:
            _link(background / f, store / f)
        atomic_write_json(store / f"{stem}.json", {**entry, "fingerprint": fingerprint})
    except OSError:
        return
