"""Fault family 1 (issue 33): clean-up and recovery act only on what goldfish made.

Beside an output folder ``out`` goldfish leaves, when killed, ``.<out>.<random>.tmp`` (a replacement being built) and
``.<out>.<random>.old`` (the old folder between the two renames where the OS has no atomic exchange); each carries a
staging record naming ``out``. A user's folders with those names -- ``.<out>.old``, ``.<out>.mine.tmp``, files, links
-- are never deleted, renamed into place or written, by a writer (train, prepare, eval) or a reader (a missing data
path), whether the command succeeds or fails.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from test_faults import _corpus, _eval_argv, _prepare_argv, assert_one_error, cli, hashes, leftovers, train_argv

from goldfish import io as gio


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread, as the rest of the fault suite."""


def look_alikes(out: Path) -> dict[str, str]:
    """The user's entries named like debris of ``out`` (folders, a file, a link to a folder of theirs); returns
    {relative path: sha256} of everything under their parent that is not ``out``."""
    parent = out.parent
    for name in (f".{out.name}.old", f".{out.name}.mine.tmp", f".{out.name}.k2j4.old"):
        (parent / name).mkdir(parents=True)
        (parent / name / "notes.txt").write_text(f"{name}: keep me")
    (parent / "elsewhere").mkdir()
    (parent / "elsewhere" / "data.csv").write_text("a,b\n")
    (parent / f".{out.name}.x.tmp").symlink_to(parent / "elsewhere")
    (parent / f".{out.name}.f.old").write_text("a file of mine")
    return snapshot(out)


def snapshot(out: Path) -> dict[str, str]:
    """sha256 of every file beside ``out`` (not under it), links as their targets, folders as ``dir``."""
    found = {}
    for p in sorted(out.parent.rglob("*")):
        rel = p.relative_to(out.parent)
        if rel.parts[0] in (out.name, f".{out.name}.lock"):
            continue
        found[str(rel)] = (
            "-> " + os.readlink(p)
            if p.is_symlink()
            else "dir"
            if p.is_dir()
            else hashlib.sha256(p.read_bytes()).hexdigest()
        )
    return found


@pytest.mark.parametrize("outcome", ["fails_at_once", "succeeds", "overwrites"])
def test_train_leaves_folders_named_like_its_debris(data, tmp_path, capsys, outcome):
    out = tmp_path / "run"
    if outcome == "overwrites":
        assert cli(train_argv(data, out), capsys)[0] == 0
    before = look_alikes(out)
    if outcome == "fails_at_once":
        assert_one_error(*cli(train_argv(tmp_path / "typo", out), capsys), "prepared data not found")
    else:
        argv = train_argv(data, out, optim__lr=0.005)
        assert cli([*argv, "--overwrite"] if outcome == "overwrites" else argv, capsys)[0] == 0
        assert json.loads((out / "fingerprint.json").read_text())["optim.lr"] == 0.005
    assert snapshot(out) == before


def test_prepare_into_a_missing_folder_does_not_rename_a_users_old_into_place(tmp_path, capsys):
    out = tmp_path / "prep"
    corpus = _corpus(tmp_path / "corpus.jsonl", docs=30)
    before = look_alikes(out)
    assert cli(_prepare_argv(corpus, out), capsys)[0] == 0
    assert snapshot(out) == before
    assert not (out / "notes.txt").exists() and (out / "manifest.json").is_file()


@pytest.mark.parametrize("reader", ["train", "eval"])
def test_a_reader_of_a_missing_path_does_not_rename_a_users_old_into_place(data, tmp_path, capsys, reader):
    missing = tmp_path / "data"
    (tmp_path / ".data.old").mkdir()
    (tmp_path / ".data.old" / "manifest.json").write_text("{}")  # even one that looks like prepared data
    before = hashes(tmp_path)
    if reader == "train":
        assert_one_error(*cli(train_argv(missing, tmp_path / "run"), capsys), "prepared data not found")
    else:
        assert cli(train_argv(data, tmp_path / "run"), capsys)[0] == 0
        before = {k: v for k, v in hashes(tmp_path).items() if not k.startswith("run")}
        assert_one_error(*cli(_eval_argv(tmp_path / "run" / "model", missing, tmp_path / "ev"), capsys), "not found")
    assert {k: v for k, v in hashes(tmp_path).items() if not k.startswith("run")} == before
    assert not missing.exists()


def test_eval_leaves_folders_named_like_its_debris(data, tmp_path, capsys):
    assert cli(train_argv(data, tmp_path / "run"), capsys)[0] == 0
    out = tmp_path / "ev"
    before = look_alikes(out)
    assert cli(_eval_argv(tmp_path / "run" / "model", data, out), capsys)[0] == 0
    assert cli(_eval_argv(tmp_path / "run" / "model", data, out, "overwrite=true"), capsys)[0] == 0
    assert snapshot(out) == before


def test_a_staging_record_naming_another_output_is_not_this_writers_debris(tmp_path):
    target = tmp_path / "run"
    other = tmp_path / ".run.a1b2.tmp"
    other.mkdir()
    (other / gio.STAGING).write_text(
        json.dumps({"target": "other", "role": "new", "pid": 1, "host": "h", "written_by": "goldfish"})
    )
    gio.recover_directory(target)
    assert other.is_dir() and gio.staged_for(other, target) is None


def test_goldfish_removes_its_own_debris_and_nothing_else(tmp_path):
    """The positive control: staging folders goldfish made for ``run`` (a killed build, an old folder retired by an
    exchange) are deleted by the next writer; a live process's build is left to it."""
    target = tmp_path / "run"
    target.mkdir()
    built = gio.new_temp_dir(target)
    retired = gio.new_temp_dir(target)
    (retired / gio.STAGING).write_text(json.dumps({**json.loads((retired / gio.STAGING).read_text()), "role": "old"}))
    live = gio.new_temp_dir(target)
    holder = json.loads((live / gio.STAGING).read_text())
    (live / gio.STAGING).write_text(json.dumps({**holder, "pid": os.getppid()}))  # a live process of this machine
    mine = tmp_path / ".run.mine.tmp"
    mine.mkdir()
    gio.recover_directory(target)
    assert not built.exists() and not retired.exists() and live.is_dir() and mine.is_dir() and target.is_dir()


def test_a_published_folder_carries_no_staging_record(data, tmp_path, capsys):
    """The record lives only while a folder is staged: a finished run, its model and a replaced run hold none."""
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    assert cli([*train_argv(data, run, optim__lr=0.005), "--overwrite"], capsys)[0] == 0
    assert not list(tmp_path.rglob(gio.STAGING)) and leftovers(tmp_path) == []
