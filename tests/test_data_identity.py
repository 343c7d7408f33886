"""The identity a run records for its training data (``Prepared.train_sha256``) comes from the tokens and the layout,
never from the code version: two commits that change no preparing code give the same identity for the same folder,
although the streamed background's entries (whose recipe fingerprint holds the code version) differ."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
from train_helpers import WORDS

from goldfish.config import from_dict
from goldfish.data import PrepareConfig, load_prepared, prepare
from goldfish.data.prepared import train_sha256
from goldfish.errors import UserError

pytestmark = pytest.mark.integration  # prepares real corpora (the gpt2 tokenizer)


def _jsonl(path: Path, texts: list[str], ids: bool) -> None:
    path.write_text(
        "".join(json.dumps({"id": f"m{i}", "text": t} if ids else {"text": t}) + "\n" for i, t in enumerate(texts))
    )


def _recipe(root: Path) -> dict:
    """A main source of 30 documents and a streamed background of 60 in two files, written into ``root``."""
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, int(rng.integers(40, 80)))) for _ in range(90)]
    _jsonl(root / "main.jsonl", texts[:30], ids=True)
    (root / "bg").mkdir()
    _jsonl(root / "bg" / "a.jsonl", texts[30:60], ids=False)
    _jsonl(root / "bg" / "b.jsonl", texts[60:], ids=False)
    return {
        "name": "identity",
        "source": {"name": "local", "path": str(root / "main.jsonl"), "id_field": "id"},
        "tokenizer": {"name": "gpt2"},
        "seq_len": 64,
        "packing": "pack",
        "min_tokens": 16,
        "doc_tokens": 24,
        "num_members": 8,
        "repetitions": [1, 3],
        "nonmember_mode": "random_split",
        "num_nonmembers": 8,
        "num_background": None,
        "background_chunk_tokens": 63,
        "background_source": {"name": "local", "path": str(root / "bg")},
        "shard_documents": 16,
    }


def _prepare_at(version: str, recipe: dict, out: Path, monkeypatch) -> Path:
    """Prepare ``recipe`` into ``out`` as the code version ``version`` would (every preparing module asks it)."""
    for name in ("prepare", "prepare_background", "prepare_merge"):
        monkeypatch.setattr(importlib.import_module(f"goldfish.data.{name}"), "code_version", lambda: version)
    prepare(from_dict(PrepareConfig, recipe), out, progress=False, num_proc=1)
    return out


def test_two_code_versions_that_change_no_preparing_code_give_the_same_training_data_identity(tmp_path, monkeypatch):
    recipe = _recipe(tmp_path)
    monkeypatch.setenv("GOLDFISH_CACHE", str(tmp_path / "cache"))  # the background store of each version apart
    a = load_prepared(_prepare_at("0.1.0+git.aaaaaaaaaaaa", recipe, tmp_path / "a", monkeypatch))
    b = load_prepared(_prepare_at("0.1.0+git.bbbbbbbbbbbb", recipe, tmp_path / "b", monkeypatch))
    entries = sorted(f for f in a.manifest["files"] if f.startswith("background/") and f.endswith(".json"))
    assert entries, "the recipe streams its background: its shards have entries"
    assert {f: a.manifest["files"][f] for f in entries} != {f: b.manifest["files"][f] for f in entries}  # versions
    tokens = {f: v for f, v in a.manifest["files"].items() if not f.endswith(".json")}
    assert tokens == {f: v for f, v in b.manifest["files"].items() if not f.endswith(".json")}  # the same tokens
    assert a.train_sha256 == b.train_sha256 == a.manifest["sha256"]["train"] == b.manifest["sha256"]["train"]
    # a second implementation: the hash of every token file and layout file the rows use, and the stores' counts
    stores = a.manifest["train"]["stores"]
    assert a.train_sha256 == train_sha256(
        {f: v for f, v in tokens.items() if f.startswith(("background/", "train/"))}, stores
    )


def test_a_folder_whose_manifest_recorded_the_old_hash_loads_with_the_content_identity(tmp_path, monkeypatch):
    """The migration: a manifest written before the identity left the entries out (its recorded hash counted them)
    still loads, and the run records the content identity; an edited store is still refused."""
    monkeypatch.setenv("GOLDFISH_CACHE", str(tmp_path / "cache"))
    folder = _prepare_at("0.1.0+git.cccccccccccc", _recipe(tmp_path), tmp_path / "old", monkeypatch)
    manifest = json.loads((folder / "manifest.json").read_text())
    content = manifest["sha256"]["train"]
    manifest["sha256"]["train"] = old = train_sha256(manifest["files"], manifest["train"]["stores"], entries=True)
    assert old != content
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert load_prepared(folder).train_sha256 == content
    manifest["train"]["stores"][-1]["documents"] -= 1
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="no longer give the training rows' recorded sha256"):
        load_prepared(folder)
