"""Faults of issue 39 (families 1, 2 and 6): what goldfish writes or deletes inside folders it made, and in folders
it did not make.

* A prepare's clean-up of unused background shards deletes only the exact files a shard's entry names (and the
  temporary files of its own writers, by their exact names), in folders that are not links: a user's ``00042.csv``,
  ``00007.bin.bak``, notes in ``train/``, and whatever a linked ``background/`` leads to, stay.
* ``goldfish eval --update-card`` never writes into the Hugging Face cache (a Hub id, or a cached snapshot given as a
  folder): the card goes to ``<eval out>/model_card/README.md``; a card or model folder that is a link is refused.
* The model card never holds a local path: not the data source's absolute path either.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard, constants
from test_data_stream import corpus, recipe  # noqa: F401 - the module-scoped corpus fixture
from train_helpers import make_prepared, overrides_of, tiny_config

from test_eval_conventions import fake_hub_cache
from train_helpers import one_error
from goldfish.cli import main
from goldfish.model_source import hub_snapshot

from eval_fixtures import TEXTS, save_model_folder, tiny_llama, tiny_tokenizer, write_jsonl


def snapshot_of(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` -> sha256 of a file, a link's target, or ``dir`` (links are not followed)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# ------------------------------------------------------------------------------------------------ 1 clean-up


USERS = {
    "00042.csv": "a,b\n1,2\n",
    "00007.bin.bak": "my backup\n",
    "00009.json.orig": "{}\n",
    ".00003.bin.mine.tmp": "mine\n",
    ".notes.tmp": "mine\n",
    "99999": "a file named by a number\n",
    "README": "what these shards are\n",
}


def _capped_shards(corpus: Path, tmp_path: Path, name: str = "p") -> tuple[Path, Path]:  # noqa: F811
    """Eight background shards written by one job, of a recipe whose cap (37 chunks) the merge reaches before the
    last shards: the merge then deletes the shards it does not use."""
    rec = tmp_path / f"{name}.json"
    rec.write_text(json.dumps(recipe(corpus, num_background=37)))
    out = tmp_path / name
    assert main(["prepare", str(rec), "--out", str(out), "--shards", "0:8", "--quiet"]) == 0
    return rec, out


def test_the_merge_deletes_only_the_unused_shards_entries_files(corpus, tmp_path):  # noqa: F811
    rec, out = _capped_shards(corpus, tmp_path)
    background, train = out / "background", out / "train"
    written = {p.name for p in background.iterdir()}
    for name, text in USERS.items():
        (background / name).write_text(text)
    (train / "notes.txt").write_text("keep\n")
    (train / ".scratch.tmp").write_text("keep\n")
    (train / "00001.bin").write_text("keep\n")
    stale = background / ".00007.bin.12345.tmp"  # a killed shard writer's file, by the name ShardWriter gives it
    stale.write_bytes(b"\x00" * 8)
    linked = background / ".00002.idx.npy.12345.link.tmp"  # a kill inside store._link (the name it gives)
    linked.write_bytes(b"\x00" * 8)
    unfinished = [background / "00011.bin", background / "00011.idx.npy"]  # a terminated worker's, before its entry
    for p in unfinished:
        p.write_bytes(b"")
    assert main(["prepare", str(rec), "--out", str(out), "--merge", "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    used = {Path(s["path"]).name for s in manifest["train"]["stores"] if s["path"].startswith("background/")}
    assert 0 < len(used) < 8
    for name, text in USERS.items():
        assert (background / name).read_text() == text, name
    assert (train / "notes.txt").read_text() == (train / ".scratch.tmp").read_text() == "keep\n"
    assert (train / "00001.bin").read_text() == "keep\n"
    assert not stale.exists() and not linked.exists() and not any(p.exists() for p in unfinished)
    kept = {p.name for p in background.iterdir()} - set(USERS)
    assert kept == {f for f in written if f.split(".")[0] in used}  # every file of an unused shard's entry went


def test_a_linked_background_folder_is_read_but_nothing_behind_it_is_deleted(corpus, tmp_path):  # noqa: F811
    rec, out = _capped_shards(corpus, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(out / "background", elsewhere)  # the shards kept on another disk, linked back
    (out / "background").symlink_to(elsewhere)
    (elsewhere / "00042.csv").write_text("mine\n")
    before = snapshot_of(elsewhere)
    assert main(["prepare", str(rec), "--out", str(out), "--merge", "--quiet"]) == 0
    assert snapshot_of(elsewhere) == before
    assert (out / "background").is_symlink() and (out / "manifest.json").is_file()


def test_an_entry_naming_files_of_another_shard_deletes_none_of_them(corpus, tmp_path):  # noqa: F811
    """An unused shard's entry is trusted for its own files only: one edited to name shard 00000's (or a file of
    the user's) does not delete them."""
    rec, out = _capped_shards(corpus, tmp_path)
    entry_path = out / "background" / "00007.json"
    entry = json.loads(entry_path.read_text())
    entry["sha256"] = {**entry["sha256"], "00000.bin": "x", "00042.csv": "x", "../config.yaml": "x"}
    entry_path.write_text(json.dumps(entry))
    (out / "background" / "00042.csv").write_text("mine\n")
    config = (out / "config.yaml").read_bytes()
    assert main(["prepare", str(rec), "--out", str(out), "--merge", "--quiet"]) == 0
    assert (out / "background" / "00000.bin").is_file() and (out / "background" / "00042.csv").is_file()
    assert (out / "config.yaml").read_bytes() == config
    assert not (out / "background" / "00007.bin").exists() and not entry_path.exists()


# ------------------------------------------------------------------------------------------------ 2 the HF cache


@pytest.fixture
def cached_model(tmp_path, monkeypatch):
    """A tiny model with an upstream card, in an offline Hugging Face cache of this test's own."""
    tok = tiny_tokenizer()
    model = save_model_folder(tmp_path / "upstream", tiny_llama(len(tok), seed=5), tok)
    # a card made where the weights were trained records their identity there (other file times than the cache's)
    (model / "README.md").write_text(
        "---\nlicense: apache-2.0\ngoldfish_weights: 0123456789abcdef\n---\n\n# Upstream model\n\nThe authors' card.\n"
    )
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub_snapshot.cache_clear()
    snapshot = fake_hub_cache(cache, "acme/upstream", model)
    yield cache, snapshot, write_jsonl(tmp_path / "docs.jsonl", TEXTS)
    hub_snapshot.cache_clear()


EVAL = ["data.prefix_lens=[8]", "data.suffix_len=6", "report=false", "tasks=[extraction]", "progress=false"]


def test_update_card_of_a_hub_id_writes_the_card_into_the_eval_folder_not_the_cache(cached_model, tmp_path, capsys):
    cache, snapshot, docs = cached_model
    before = snapshot_of(cache)
    out = tmp_path / "ev"
    assert (
        main(["eval", "--model", "acme/upstream", "--data", str(docs), "--out", str(out), "--update-card", *EVAL]) == 0
    ), capsys.readouterr().err
    assert snapshot_of(cache) == before  # not one byte, link or name of the cache changed
    card = ModelCard.load(out / "model_card" / "README.md")
    assert card.data.license == "apache-2.0" and "The authors' card." in card.text  # the upstream card, extended
    assert card.data.eval_results and "## Evaluation" in card.text
    assert "Hugging Face cache" in capsys.readouterr().out


def test_update_card_of_a_cached_snapshot_given_as_a_folder_or_a_link_to_it_leaves_the_cache(
    cached_model, tmp_path, capsys
):
    cache, snapshot, docs = cached_model
    before = snapshot_of(cache)
    link = tmp_path / "mymodel"
    link.symlink_to(snapshot)  # a user's link to the cached snapshot
    for i, model in enumerate((snapshot, link)):
        out = tmp_path / f"ev{i}"
        assert (
            main(["eval", "--model", str(model), "--data", str(docs), "--out", str(out), "--update-card", *EVAL]) == 0
        ), capsys.readouterr().err
        assert snapshot_of(cache) == before
        assert ModelCard.load(out / "model_card" / "README.md").data.eval_results
    assert link.is_symlink() and os.readlink(link) == str(snapshot)


def test_update_card_through_a_linked_card_is_refused_before_the_work(tmp_path, capsys):
    tok = tiny_tokenizer()
    model = save_model_folder(tmp_path / "model", tiny_llama(len(tok), seed=6), tok)
    theirs = tmp_path / "shared" / "CARD.md"
    theirs.parent.mkdir()
    theirs.write_text("# a card kept elsewhere\n")
    (model / "README.md").symlink_to(theirs)
    docs = write_jsonl(tmp_path / "docs.jsonl", TEXTS)
    assert (
        main(
            ["eval", "--model", str(model), "--data", str(docs), "--out", str(tmp_path / "ev"), "--update-card", *EVAL]
        )
        == 2
    )
    one_error(capsys, "README.md is a symbolic link", "--update-card")
    assert theirs.read_text() == "# a card kept elsewhere\n" and (model / "README.md").is_symlink()
    assert not (tmp_path / "ev").exists()


# ------------------------------------------------------------------------------------------------ 6 the card


def test_the_model_card_names_the_data_source_without_its_local_path(tmp_path):
    data = make_prepared(tmp_path / "data")
    manifest = json.loads((data / "manifest.json").read_text())
    source = tmp_path / "private" / "corpus-of-my-lab.jsonl"
    manifest["source"] = f"local_jsonl:{source}"  # what prepare records for a local file
    manifest["tokenizer"]["name"] = str(tmp_path / "private" / "tokenizer")
    (data / "manifest.json").write_text(json.dumps(manifest))
    torch.set_num_threads(1)
    cfg = tiny_config(data, tmp_path / "run", schedule={"max_steps": 2})
    assert main(["train", *overrides_of(cfg)]) == 0
    text = (tmp_path / "run" / "model" / "README.md").read_text()
    assert "private" not in text and str(tmp_path) not in text
    assert "`local_jsonl:corpus-of-my-lab.jsonl`" in text and "`tokenizer`" in text
