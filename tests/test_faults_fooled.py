"""Faults of issue 39, family 3: the verification cache, the manifest and a shard job's source cannot be fooled.

* A token file edited in place with its size, inode and mtime set back is hashed again (the verification record
  holds its ctime, which no user call sets back) and refused.
* Every manifest field that decides what a run trains on (``train.rows``, ``seq_len``, a store's path or document
  count) is in the training fingerprint or checked against the rows' sha256: a killed run never resumes on data its
  fingerprint does not name, and a store outside the folder is refused.
* ``prepare --merge`` refuses shards written from different states of the background source, naming the shards to
  write again.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from test_data_stream import corpus, recipe, write_jsonl, texts  # noqa: F401 - the module-scoped corpus fixture
from train_helpers import make_prepared, overrides_of, tiny_config

from train_helpers import one_error
from goldfish.cli import main
from goldfish.data import load_prepared
from goldfish.errors import UserError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GOLDFISH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_token_file_edited_in_place_with_its_mtime_set_back_is_refused(tmp_path, cache):
    data = make_prepared(tmp_path / "data")
    load_prepared(data)  # verified once: the record now holds the file's state
    assert list((cache / "verified").iterdir())
    shard = data / "train" / "targets.bin"
    st = shard.stat()
    with open(shard, "r+b") as fh:  # the same inode and size
        fh.seek(6)
        byte = fh.read(1)
        fh.seek(6)
        fh.write(bytes([byte[0] ^ 0x01]))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back
    assert shard.stat().st_size == st.st_size and shard.stat().st_ino == st.st_ino
    assert shard.stat().st_mtime_ns == st.st_mtime_ns
    with pytest.raises(UserError, match="targets.bin does not match the sha256 in its manifest"):
        load_prepared(data)


def _edit_manifest(data: Path, edit) -> None:
    manifest = json.loads((data / "manifest.json").read_text())
    edit(manifest)
    (data / "manifest.json").write_text(json.dumps(manifest))


def _killed_after_step_2(tmp_path: Path, data: Path) -> dict:
    """A run of 4 steps with a checkpoint at step 2, then left as a kill after that checkpoint leaves it."""
    torch.set_num_threads(1)
    cfg = tiny_config(
        data,
        tmp_path / "run",
        schedule={"max_steps": 4},
        checkpoint={"every_steps": 2, "keep_optimizer": True, "keep_last": 0},
    )
    assert main(["train", *overrides_of(cfg)]) == 0
    run = tmp_path / "run"
    shutil.rmtree(run / "model")
    (run / "summary.json").unlink()
    for step in sorted((run / "checkpoints").iterdir())[1:]:
        shutil.rmtree(step)
    return cfg


@pytest.mark.parametrize("field, value", [("rows", 8), ("seq_len_top", 16)])
def test_a_killed_run_does_not_resume_on_rows_an_edited_manifest_describes(tmp_path, capsys, cache, field, value):
    data = make_prepared(tmp_path / "data")
    cfg = _killed_after_step_2(tmp_path, data)
    control = tmp_path / "control"
    shutil.copytree(tmp_path / "run", control)
    if field == "rows":
        _edit_manifest(data, lambda m: m["train"].update(rows=value))
    else:
        _edit_manifest(data, lambda m: m.update(seq_len=value))
    capsys.readouterr()
    assert main(["train", *overrides_of(cfg)]) == 2
    # an edited row count is refused when the folder loads (its layout and shards give another); an edited sequence
    # length by the resume's fingerprint (data.layout)
    one_error(capsys, "does not describe its training rows" if field == "rows" else "data.layout", "--overwrite")
    assert not (tmp_path / "run" / "model").exists()
    # the same resume on the data as it was continues (the refusal is the edit's doing)
    _edit_manifest(data, lambda m: (m["train"].update(rows=16), m.update(seq_len=32)))
    assert main(["train", *overrides_of({**cfg, "out": str(control)})]) == 0
    assert (control / "model" / "config.json").is_file()


def test_a_store_outside_the_folder_or_another_count_is_refused_at_load(tmp_path, cache):
    data = make_prepared(tmp_path / "data")
    outside = make_prepared(tmp_path / "outside", seed=3)
    _edit_manifest(data, lambda m: m["train"]["stores"][0].update(path="../outside/train/targets"))
    with pytest.raises(UserError, match="names the token store '../outside/train/targets'"):
        load_prepared(data)
    data = make_prepared(tmp_path / "data2")
    _edit_manifest(data, lambda m: m["train"]["stores"][0].update(documents=m["train"]["stores"][0]["documents"] - 1))
    with pytest.raises(UserError, match="no longer give the training rows' recorded sha256"):
        load_prepared(data)
    assert outside.is_dir()


def test_merge_refuses_shards_written_while_the_source_changed_between_jobs(corpus, tmp_path, capsys):  # noqa: F811
    bg = tmp_path / "bg"
    shutil.copytree(corpus / "bg", bg)
    rec = tmp_path / "r.json"
    rec.write_text(json.dumps(recipe(corpus, background_source={"name": "local", "path": str(bg)})))
    out = tmp_path / "p"
    assert main(["prepare", str(rec), "--out", str(out), "--shards", "0:3", "--quiet"]) == 0
    # the source gains documents at its front between the jobs: positions now name other documents
    first = bg / "part-0.jsonl"
    write_jsonl(
        first, [{"text": t} for t in texts(5, 300, 9)] + [json.loads(line) for line in first.read_text().splitlines()]
    )
    assert main(["prepare", str(rec), "--out", str(out), "--shards", "3:12", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["prepare", str(rec), "--out", str(out), "--merge"]) == 2
    line = one_error(capsys, "changed between shard jobs", "00000, 00001, 00002", "NNNNN.*")
    assert "00003" not in line and not (out / "manifest.json").exists()
    for i in range(3):  # the fix the line names
        for f in (out / "background").glob(f"{i:05d}.*"):
            f.unlink()
    assert main(["prepare", str(rec), "--out", str(out), "--quiet"]) == 0
    assert (out / "manifest.json").is_file()


def test_a_source_rewritten_in_place_with_its_size_and_mtime_kept_is_another_source(corpus, tmp_path, capsys):  # noqa: F811
    bg = tmp_path / "bg"
    shutil.copytree(corpus / "bg", bg)
    rec = tmp_path / "r.json"
    rec.write_text(json.dumps(recipe(corpus, background_source={"name": "local", "path": str(bg)})))
    first = tmp_path / "first"
    assert main(["prepare", str(rec), "--out", str(first), "--quiet"]) == 0  # publishes to the shared store
    out = tmp_path / "p"
    assert main(["prepare", str(rec), "--out", str(out), "--shards", "0:3", "--quiet"]) == 0
    # between the jobs: part-0's lines in reverse order (the same bytes, so the same size), its mtime set back
    part = bg / "part-0.jsonl"
    st = part.stat()
    lines = part.read_text().splitlines()
    with open(part, "r+") as fh:  # in place: the same inode
        fh.write("\n".join(reversed(lines)) + "\n")
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (part.stat().st_size, part.stat().st_mtime_ns, part.stat().st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    assert main(["prepare", str(rec), "--out", str(out), "--shards", "3:12", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["prepare", str(rec), "--out", str(out), "--merge"]) == 2
    one_error(capsys, "changed between shard jobs", "00000, 00001, 00002", "NNNNN.*")
    # a new folder beside the first is not served the first's shards from the store: its shard 0 is the new order's
    again = tmp_path / "again"
    assert main(["prepare", str(rec), "--out", str(again), "--quiet"]) == 0
    a, b = (first / "background" / "00000.bin"), (again / "background" / "00000.bin")
    assert a.stat().st_ino != b.stat().st_ino and a.read_bytes() != b.read_bytes()
    alone = tmp_path / "alone" / "p"  # the new source prepared where no store holds anything
    assert main(["prepare", str(rec), "--out", str(alone), "--quiet"]) == 0
    assert (alone / "background" / "00000.bin").read_bytes() == b.read_bytes()
