"""Fault injection, round VI (issue 56): the shared background store (``.goldfish-background/``) is the user's own.

Another user who can write the store could swap a shard and its entry, and the swapped token ids would be linked into
the next prepared folder as verified. The store is created without group or world write, a store another user owns
or others can write is refused in one line, and a store file others can write is never linked. "Another user" is
simulated by the store's uid source (``goldfish.data.store._uid``): these tests run as any user, root included.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from test_data_store import recipe
from test_faults import assert_one_error, cli, train_argv
from train_helpers import WORDS, make_prepared

from goldfish.data import load_prepared, prepare
from goldfish.data import store as store_module
from goldfish.data.store import STORE
from goldfish.data.tokens import file_sha256
from goldfish.errors import UserError


@pytest.fixture
def corpus(tmp_path) -> Path:
    """test_data_store's corpus (80 documents), per test."""
    rng = np.random.default_rng(0)
    path = tmp_path / "main.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "text": " ".join(rng.choice(WORDS, int(rng.integers(20, 200))))}) + "\n"
            for i in range(80)
        ),
        encoding="utf-8",
    )
    return path


def prepare_one(corpus: Path, folder: Path, **over) -> Path:
    return prepare(recipe(corpus, **over), folder, progress=False, num_proc=1)


def only_store(root: Path) -> Path:
    """The one fingerprint folder of the store under ``root``."""
    (fingerprint,) = list((root / STORE).iterdir())
    return fingerprint


def test_the_store_is_created_as_the_users_own_whatever_the_umask(corpus, tmp_path):
    old = os.umask(0o000)  # a umask that would leave every new folder world-writable
    try:
        prepare_one(corpus, tmp_path / "prepared" / "arms")
    finally:
        os.umask(old)
    for folder in (tmp_path / "prepared" / STORE, only_store(tmp_path / "prepared")):
        info = folder.stat()
        assert info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH), oct(info.st_mode)


def test_a_store_another_user_made_is_refused_before_anything_is_shared(corpus, tmp_path, monkeypatch):
    root = tmp_path / "prepared"
    (root / STORE).mkdir(parents=True)  # pre-created by "another user", as in a world-writable parent like /tmp
    os.chmod(root / STORE, 0o755)
    monkeypatch.setattr(store_module, "_uid", lambda: os.geteuid() + 1)  # this process is someone else
    with pytest.raises(UserError, match="belongs to another user") as e:
        prepare_one(corpus, root / "arms")
    assert str(root / STORE) in str(e.value) and "rm -r" in str(e.value)
    assert list((root / STORE).iterdir()) == []  # nothing published into it


@pytest.mark.parametrize("where", ["store", "fingerprint"])
def test_a_store_others_can_write_is_refused(corpus, tmp_path, where):
    root = tmp_path / "prepared"
    prepare_one(corpus, root / "arms")
    os.chmod(root / STORE if where == "store" else only_store(root), 0o777)
    with pytest.raises(UserError, match="can be written by others") as e:
        prepare_one(corpus, root / "control", train_members=False, num_background=40)
    assert "chmod go-w" in str(e.value)


def poison(shard: Path, entry: Path, value: int) -> None:
    """Swap store shard ``shard`` (a new file, as another user would) for one of the same size whose token ids are all
    ``value``, and make its entry ``entry`` vouch for it."""
    dtype = np.uint16  # GPT-2's ids (the recipe's tokenizer)
    count = shard.stat().st_size // np.dtype(dtype).itemsize
    shard.unlink()  # the folders' hard links keep the original bytes
    np.full(count, value, dtype=dtype).tofile(shard)
    record = json.loads(entry.read_text())
    record["sha256"][shard.name] = file_sha256(shard)
    entry.unlink()
    entry.write_text(json.dumps(record))


def test_a_swapped_store_shard_others_can_write_is_never_linked(corpus, tmp_path):
    """The issue's poisoning: a shard swapped in the store with a matching entry. A file others can write is not the
    user's own: the sibling folder tokenizes its own shard instead of linking it."""
    root = tmp_path / "prepared"
    arms = prepare_one(corpus, root / "arms")
    store = only_store(root)
    poison(store / "00000.bin", store / "00000.json", 7)
    os.chmod(store / "00000.bin", 0o666)
    control = prepare_one(corpus, root / "control", train_members=False, num_background=40)
    ids = np.fromfile(control / "background" / "00000.bin", dtype=np.uint16)
    assert not np.all(ids[:40] == 7)  # the issue saw 40 of the first 40 token ids be 7
    assert (control / "background" / "00000.bin").read_bytes() == (arms / "background" / "00000.bin").read_bytes()
    assert (control / "background" / "00000.bin").stat().st_ino != (store / "00000.bin").stat().st_ino
    load_prepared(control)  # and the folder verifies


def test_a_store_file_of_another_owner_is_never_linked(corpus, tmp_path, monkeypatch):
    root = tmp_path / "prepared"
    prepare_one(corpus, root / "arms")
    store = only_store(root)
    real = os.geteuid()
    poisoned = store / "00000.bin"
    poison(poisoned, store / "00000.json", 7)
    owner = poisoned.stat().st_ino

    def lstat(path, _original=Path.lstat):
        info = _original(path)
        if info.st_ino != owner:
            return info
        fields = list(info)
        fields[stat.ST_UID] = real + 1  # this one file belongs to someone else
        return os.stat_result(fields)

    monkeypatch.setattr(Path, "lstat", lstat)
    control = prepare_one(corpus, root / "control", train_members=False, num_background=40)
    assert not np.all(np.fromfile(control / "background" / "00000.bin", dtype=np.uint16)[:40] == 7)


# ------------------------------------------------------------------------------------------------ what a folder records


def test_an_edited_shard_entry_document_count_is_one_line_at_merge(corpus, tmp_path):
    folder = tmp_path / "prepared" / "p"
    cfg = recipe(corpus)
    prepare(cfg, folder, progress=False, num_proc=1, shards=(0, 8))
    entry_file = folder / "background" / "00000.json"
    entry = json.loads(entry_file.read_text())
    entry["documents"] += 9  # the issue: an IndexError inside the merge's layout
    entry_file.write_text(json.dumps(entry))
    with pytest.raises(
        UserError,
        match=f"records {entry['documents']} documents .* but its shard holds {entry['documents'] - 9} documents",
    ) as e:
        prepare(cfg, folder, progress=False, num_proc=1, merge_only=True)
    assert str(entry_file) in str(e.value) and "prepare again" in str(e.value)


@pytest.mark.parametrize(
    "key, value", [("rows", 17), ("rows", 12), ("seq_len", 64), ("seq_len", 16), ("occurrences", 3)]
)
def test_an_edited_manifest_train_field_is_one_line_before_training(tmp_path, capsys, key, value):
    data = make_prepared(tmp_path / "prepared", rows=16, seq_len=32, vocab=64)
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["train"][key] = value
    (data / "manifest.json").write_text(json.dumps(manifest))
    line = assert_one_error(
        *cli(train_argv(data, tmp_path / "run"), capsys),
        "manifest.json",
        f"train.{key if key != 'seq_len' else 'rows'}=",
    )
    assert "does not describe its training rows" in line and "IndexError" not in line
    assert not (tmp_path / "run" / "model").exists()
