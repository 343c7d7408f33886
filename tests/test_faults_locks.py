"""Fault family 2 (issue 33): ``.<out>.lock`` beside an output folder is goldfish's only when goldfish wrote it.

A lock file starts with goldfish's header line. Anything else at that path -- a symbolic link (to a user's file, or
dangling), a user's file (empty or not), a folder, a FIFO -- is one error line naming it, and stays exactly as it
was: never written through, truncated, deleted, and nothing is created where a link points.
"""

from __future__ import annotations

import os

import pytest
from test_faults import _corpus, _eval_argv, _prepare_argv, assert_one_error, cli, hashes, train_argv

from goldfish.ownership import LOCK_HEADER, FolderLock


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread, as the rest of the fault suite."""


def _plant(kind: str, lock, tmp_path):
    """Put a user's ``kind`` at the lock's path; returns the paths that must stay byte-identical."""
    mine = tmp_path / "secret.txt"
    mine.write_text("the user's own file\n")
    if kind == "symlink_to_a_users_file":
        lock.symlink_to(mine)
    elif kind == "dangling_symlink":
        lock.symlink_to(tmp_path / "nowhere" / "made")
    elif kind == "users_file":
        lock.write_text("12345 my-host\nimportant\n")
    elif kind == "empty_users_file":
        lock.write_text("")
    elif kind == "folder":
        lock.mkdir()
        (lock / "notes.txt").write_text("keep")
    else:
        os.mkfifo(lock)
    return [lock, mine]


def _state(paths) -> list:
    """What each path is: link target, file bytes, folder contents or 'fifo'; 'absent' when missing."""
    out = []
    for p in paths:
        if p.is_symlink():
            out.append(("link", os.readlink(p)))
        elif p.is_dir():
            out.append(("dir", hashes(p)))
        elif p.is_file():
            out.append(("file", p.read_bytes()))
        else:
            out.append("fifo" if p.exists() else "absent")
    return out


KINDS = ["symlink_to_a_users_file", "dangling_symlink", "users_file", "empty_users_file", "folder", "fifo"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_lock_path_goldfish_did_not_write_is_refused_and_left_alone(data, tmp_path, capsys, kind):
    out = tmp_path / "run"
    lock = tmp_path / ".run.lock"
    guarded = _plant(kind, lock, tmp_path)
    before = _state(guarded)
    assert_one_error(*cli(train_argv(data, out), capsys), str(lock), "leaves it untouched")
    assert _state(guarded) == before
    assert not out.exists() and not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("command", ["prepare", "eval"])
def test_other_writers_refuse_a_symlink_lock_too(data, tmp_path, capsys, command):
    if command == "eval":
        assert cli(train_argv(data, tmp_path / "run"), capsys)[0] == 0
        out, argv = tmp_path / "ev", _eval_argv(tmp_path / "run" / "model", data, tmp_path / "ev")
    else:
        out = tmp_path / "prep"
        argv = _prepare_argv(_corpus(tmp_path / "corpus.jsonl", docs=30), out)
    guarded = _plant("symlink_to_a_users_file", out.parent / f".{out.name}.lock", tmp_path)
    before = _state(guarded)
    assert_one_error(*cli(argv, capsys), str(guarded[0]))
    assert _state(guarded) == before and not out.exists()


def test_a_goldfish_lock_file_is_recognisable_at_every_moment(tmp_path):
    """While held the file is the header and the holder's line; released, it is gone; two shared holders both
    appear; the header is there from the file's first moment."""
    out = tmp_path / "run"
    with FolderLock(out):
        text = (tmp_path / ".run.lock").read_bytes()
        assert text.startswith(LOCK_HEADER) and text[len(LOCK_HEADER) :].split()[0] == str(os.getpid()).encode()
    assert not (tmp_path / ".run.lock").exists()
    with FolderLock(out, shared=True), FolderLock(out, shared=True):
        lines = (tmp_path / ".run.lock").read_bytes()[len(LOCK_HEADER) :].decode().splitlines()
        assert [line.split()[0] for line in lines] == [str(os.getpid())] * 2
    assert not (tmp_path / ".run.lock").exists() and sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_lock_file_without_the_header_is_not_taken_over(data, tmp_path, capsys):
    """A file that reads like an old lock (a dead pid and a host) but lacks goldfish's header is not goldfish's: it
    is refused, not taken over (taking over a stale goldfish lock: tests/test_faults.py)."""
    text = f"{2**22 + 7} {os.uname().nodename}\n".encode()
    (tmp_path / ".run.lock").write_bytes(text)
    assert_one_error(*cli(train_argv(data, tmp_path / "run"), capsys), "a file goldfish did not write")
    assert (tmp_path / ".run.lock").read_bytes() == text and not (tmp_path / "run").exists()
