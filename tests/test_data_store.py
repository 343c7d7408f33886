"""The shared background store: two prepared folders that differ only in what they train on (an experiment's arms and
its background-trained control) hold one copy of the background shards (the same inodes), each folder works after the
other is deleted, folders with other targets do not share, and a damaged store copy is not linked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from train_helpers import WORDS

from goldfish.config import from_dict
from goldfish.data import PrepareConfig, load_prepared, prepare
from goldfish.data.store import STORE
from goldfish.io import remove_tree


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("store") / "main.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "text": " ".join(rng.choice(WORDS, int(rng.integers(20, 200))))}) + "\n"
            for i in range(80)
        ),
        encoding="utf-8",
    )
    return path


def recipe(corpus: Path, **over) -> PrepareConfig:
    base = {
        "name": "s",
        "source": {"name": "local", "path": str(corpus), "id_field": "id"},
        "tokenizer": {"name": "gpt2"},
        "seq_len": 64,
        "packing": "pack",
        "min_tokens": 16,
        "doc_tokens": 24,
        "num_members": 10,
        "repetitions": [1, 3],
        "num_nonmembers": 8,
        "num_background": 30,
        "background_chunk_tokens": 63,
        "shard_documents": 16,
        "background_dedup": {"ngram": 8, "overlap": 0.2},
    }
    return from_dict(PrepareConfig, {**base, **over})


def shard_files(folder: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted((folder / "background").glob("*")) if p.suffix in (".bin", ".npy")}


def test_arms_and_control_share_one_background_copy(corpus, tmp_path):
    root = tmp_path / "prepared"
    arms = prepare(recipe(corpus), root / "arms", progress=False, num_proc=1)
    control = prepare(
        recipe(corpus, train_members=False, num_background=40), root / "control", progress=False, num_proc=1
    )
    a, c = shard_files(arms), shard_files(control)
    common = sorted(set(a) & set(c))
    assert common and set(a) <= set(c)  # the control uses more chunks: it has the arms' shards and more
    for name in common:
        assert a[name].read_bytes() == c[name].read_bytes()
        assert a[name].stat().st_ino == c[name].stat().st_ino  # one copy on disk
    stores = list((root / STORE).iterdir())
    assert len(stores) == 1
    # an independent expectation: the control's background equals one prepared with no store to share
    alone = prepare(
        recipe(corpus, train_members=False, num_background=40),
        tmp_path / "alone" / "control",
        progress=False,
        num_proc=1,
    )
    assert {n: p.read_bytes() for n, p in shard_files(alone).items()} == {n: p.read_bytes() for n, p in c.items()}
    assert all(p.stat().st_ino != c[n].stat().st_ino for n, p in shard_files(alone).items())
    want = [load_prepared(control).background[i].tolist() for i in range(40)]
    # deleting one folder keeps the other whole and loadable (verified against its manifest's sha256)
    remove_tree(arms)
    data = load_prepared(control, verify=True)
    assert [data.background[i].tolist() for i in range(40)] == want
    # ... and so does deleting the store
    shutil.rmtree(root / STORE)
    data = load_prepared(control, verify=True)
    assert [data.background[i].tolist() for i in range(40)] == want


def test_other_targets_never_share(corpus, tmp_path):
    root = tmp_path / "prepared"
    one = prepare(recipe(corpus), root / "one", progress=False, num_proc=1)
    other = prepare(recipe(corpus, seed=1), root / "other", progress=False, num_proc=1)  # another split
    assert len(list((root / STORE).iterdir())) == 2
    inodes = {p.stat().st_ino for p in shard_files(one).values()}
    assert not inodes & {p.stat().st_ino for p in shard_files(other).values()}


def test_a_damaged_store_copy_is_not_linked(corpus, tmp_path):
    root = tmp_path / "prepared"
    first = prepare(recipe(corpus), root / "first", progress=False, num_proc=1)
    store = next((root / STORE).iterdir())
    damaged = store / "00000.bin"
    damaged.unlink()  # a new inode: the first folder's copy is untouched
    damaged.write_bytes(b"\0" * 8)
    second = prepare(recipe(corpus, train_members=False), root / "second", progress=False, num_proc=1)
    assert (second / "background" / "00000.bin").read_bytes() == (first / "background" / "00000.bin").read_bytes()
    load_prepared(second, verify=True)
