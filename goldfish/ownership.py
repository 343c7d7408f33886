"""Who owns an output folder, and who is writing it now: every command's one gate before it writes.

* **Ownership.** Every folder a goldfish command creates holds ``.goldfish-owner.json``: its kind (``prepared``,
  ``train``, ``eval``, ``experiment``) and the sha256 of its fingerprint. A command writes only into a new or empty
  folder, a folder of its own kind, or a folder of its kind written before markers existed (each command names what
  such a folder holds: ``legacy``); the replacing options (``--overwrite``, ``overwrite=true``, ``--rerun-stale``) act
  only on a folder that carries the marker of their own kind. Nothing is ever judged by resemblance alone.
* **Targets.** ``.``, ``..`` (the current folder or one above it), the home folder or one above it, the toolkit's own
  repository, a symbolic link and a file are refused as output folders, in one line.
* **Locks.** ``.<name>.lock`` beside the folder holds an exclusive advisory lock (``flock``) and the holder's PID
  while a command writes: a second writer gets one line naming that PID. The kernel releases the lock of a killed
  process, so a stale lock file is simply taken over. Experiment runs hold their folder's lock *shared*: shards of
  one experiment (``--only``) run side by side, each cell under its own exclusive lock, while any other writer of
  the folder is refused.
* **Replacement.** A replacing writer builds the new folder beside the old one (``.<name>.<random>.tmp``) and
  publishes it by one atomic exchange (:func:`goldfish.io.commit_directory`) when it is complete, so a failure or a
  kill at any moment leaves the old folder whole; the next writer deletes the debris.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from . import __version__
from .errors import UserError
from .io import atomic_write_json, commit_directory, naming, new_temp_dir, recover_directory

MARKER = ".goldfish-owner.json"
KINDS = {"prepared": "prepared data (goldfish prepare)", "train": "a training run (goldfish train)",
         "eval": "an evaluation (goldfish eval)", "experiment": "an experiment (goldfish experiment)"}
_REPOSITORY = Path(__file__).resolve().parents[1]  # the source checkout (or site-packages) holding this package


def fingerprint_sha256(value: Any) -> str:
    """sha256 of ``value`` as canonical JSON (sorted keys): the fingerprint a marker records."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def read_owner(folder: str | Path) -> dict | None:
    """The marker of ``folder`` (``{"kind", "fingerprint", ...}``), or ``None`` without one; a damaged marker is a
    one-line error (it is never guessed at)."""
    path = Path(folder) / MARKER
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        value = None
    if not isinstance(value, dict) or value.get("kind") not in KINDS:
        raise UserError(f"{path} is damaged (not a goldfish ownership marker); restore it, or delete the folder "
                        f"{folder} yourself if it is no longer needed")
    return value


def _protected(p: Path) -> str | None:
    """What makes ``p`` unfit as an output folder (the current folder, home, the repository, ...), or ``None``."""
    here = Path.cwd().resolve()
    home = Path.home().resolve()
    if p == here or p in here.parents:
        return "the current folder or a folder above it"
    if p == home or p in home.parents:
        return "your home folder or a folder above it"
    if p == _REPOSITORY:
        return "the goldfish repository itself"
    return None


def check_target(path: str | Path, option: str = "out") -> Path:
    """``path`` as an output folder, or one :class:`UserError` naming why it cannot be one."""
    if not str(path).strip():
        raise UserError(f"{option} is empty; give the output folder, e.g. {option}=runs/x")
    p = Path(path).expanduser()
    if p.is_symlink():
        raise UserError(f"{option}={path} is a symbolic link (to {os.readlink(p)}); give the folder itself, not a "
                        f"link to it")
    resolved = p.resolve()
    problem = _protected(resolved)
    if problem:
        raise UserError(f"{option}={path} is {problem}; give a folder of its own, e.g. {option}=runs/x")
    if p.exists() and not p.is_dir():
        raise UserError(f"{option}={path} is a file, not a folder; choose another {option}")
    return p


def _has_content(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


def claim(folder: Path, kind: str, legacy: Callable[[Path], bool] | None = None) -> None:
    """Refuse (one line) a folder a ``kind`` writer may not write into: one owned by another kind, or a non-empty
    folder without a marker that ``legacy`` does not recognise as this kind's work from before markers."""
    owner = read_owner(folder)
    if owner is not None:
        if owner["kind"] != kind:
            raise UserError(f"{folder} holds {KINDS[owner['kind']]}, not {KINDS[kind]}; choose another output folder")
        return
    if _has_content(folder) and not (legacy is not None and legacy(folder)):
        raise UserError(f"{folder} already holds files that goldfish did not write there (no {MARKER}); choose a new "
                        f"or empty output folder")


def require_owned(folder: Path, kind: str, option: str) -> None:
    """Refuse (one line) to replace anything but a folder whose marker names ``kind``."""
    owner = read_owner(folder)
    if owner is None or owner["kind"] != kind:
        held = f"it holds {KINDS[owner['kind']]}" if owner else f"it has no {MARKER} (not made by goldfish, or by a " \
                                                                f"version before markers)"
        raise UserError(f"{option} replaces only {KINDS[kind]}, and {folder} is not one: {held}; delete it yourself "
                        f"if you are sure, or choose another output folder")


# ------------------------------------------------------------------------------------------------ locks


def lock_path(folder: Path) -> Path:
    """``.<name>.lock`` beside ``folder`` (beside, not inside: the folder itself may be swapped while locked)."""
    return folder.parent / f".{folder.name}.lock"


class FolderLock:
    """An advisory lock on writing ``folder``; the lock file holds ``<pid> <host>`` of its holder(s) and is removed on
    release by the last one. A lock file whose holder died holds no lock (the kernel drops it) and is taken over.

    ``shared``: several holders at once (the shards of one experiment), every exclusive writer refused meanwhile.
    ``wait``: a held lock is waited for instead of refused; ``on_wait(holder)`` is called once before waiting."""

    def __init__(self, folder: Path, *, shared: bool = False, wait: bool = False,
                 on_wait: Callable[[str], None] | None = None):
        self.folder = Path(folder)
        self.path = lock_path(self.folder)
        self.shared, self.wait, self.on_wait = shared, wait, on_wait
        self._fd: int | None = None

    def __enter__(self) -> "FolderLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        waited = False
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN) and self.wait:
                    if not waited and self.on_wait is not None:
                        self.on_wait(self._holder())
                    waited = True
                    fcntl.flock(fd, mode)  # blocks until the holder releases (or dies)
                else:
                    os.close(fd)
                    if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise UserError(f"{self.folder} is being written by another goldfish process "
                                        f"({self._holder()}); wait for it to finish, or choose another output "
                                        f"folder") from None
                    if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                        raise
                    # a file system without locks (some network mounts): say so, and write unguarded
                    print(f"warning: cannot lock {self.path} ({e.strerror}); a second writer of {self.folder} would "
                          f"not be noticed", file=sys.stderr)
                    return self
            try:  # a releasing holder unlinks the file: the one we locked must still be the one at the path
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        me = f"{os.getpid()} {socket.gethostname()}\n".encode()
        if self.shared:  # the other holders' lines stay: a refused writer is told one of them
            os.lseek(fd, 0, os.SEEK_END)
        else:
            os.ftruncate(fd, 0)
        os.write(fd, me)
        self._fd = fd
        return self

    def _holder(self) -> str:
        try:
            pid, host = (self.path.read_text(encoding="utf-8").split() + ["?", "?"])[:2]
        except OSError:
            return "pid unknown"
        return f"pid {pid} on {host}"

    def __exit__(self, *exc: Any) -> None:
        if self._fd is None:
            return
        last = True
        if self.shared:  # the last holder removes the file: exclusive now, or another holder still has it
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                last = False
        if last:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)  # while still locked: a waiting writer then re-opens a fresh file
        os.close(self._fd)
        self._fd = None


# ------------------------------------------------------------------------------------------------ writing


class OutputFolder:
    """An output folder being written under its lock. ``path``: where to write now (the staging folder while the
    old one is being replaced); ``final``: where it ends up. :meth:`publish` swaps the staging folder in."""

    def __init__(self, final: Path, kind: str, path: Path):
        self.final, self.kind, self.path = final, kind, path

    @property
    def staging(self) -> bool:
        return self.path != self.final

    def mark(self, fingerprint: str) -> None:
        """Write the ownership marker (kind and fingerprint) into the folder being written, unless it says so
        already."""
        try:
            owner = read_owner(self.path)
        except UserError:
            owner = None
        if owner is not None and owner["kind"] == self.kind and owner.get("fingerprint") == fingerprint:
            return
        atomic_write_json(self.path / MARKER, {"kind": self.kind, "fingerprint": fingerprint,
                                               "written_by": f"goldfish {__version__}"})

    def publish(self) -> None:
        """Put the finished (or, for training, checkpointed) staging folder in place of the old one: one atomic
        exchange, then the old folder is deleted. A no-op when writing in place."""
        if self.staging:
            commit_directory(self.path, self.final)
            self.path = self.final

    def discard(self) -> None:
        if self.staging:
            shutil.rmtree(self.path, ignore_errors=True)


@contextlib.contextmanager
def writing(path: str | Path, kind: str, *, replace: bool = False, stage: bool = False, exist_ok: bool = True,
            legacy: Callable[[Path], bool] | None = None, option: str = "--overwrite",
            main: bool = True, shared: bool = False) -> Iterator[OutputFolder]:
    """Lock ``path``, check that a ``kind`` writer may write it, and yield the :class:`OutputFolder` to write.

    ``replace``: the old folder (if it holds anything) must carry this kind's marker, and the new one is built beside
    it and published at the end (or earlier, by :meth:`OutputFolder.publish`). ``stage``: always build beside (also a
    new folder), so that nothing half-written ever appears at ``path``. ``exist_ok=False``: without ``replace``, an
    existing ``path`` is refused (checked under the lock, so two writers cannot both find it absent). Failure or
    interruption deletes the staging folder; the old folder stays whole. ``main=False`` (the other ranks of a
    distributed run): no checks, no lock, write in place (the main rank holds the lock). ``shared``: the lock is shared
    with other ``shared`` writers of the folder, which coordinate among themselves (the shards of an experiment); such
    a folder is written in place and its debris is left to an exclusive writer.
    """
    if shared and (replace or stage):
        raise ValueError("a shared writer writes in place: replace and stage need the exclusive lock")
    final = check_target(path) if main else Path(path)
    if not main:
        yield OutputFolder(final, kind, final)
        return
    with FolderLock(final, shared=shared):
        recover_directory(final, clean=not shared)  # debris of killed replacing writers; only a sole holder deletes it
        if replace and _has_content(final):
            require_owned(final, kind, option)
            stage = True
        elif final.exists() and not exist_ok:
            raise UserError(f"output folder {final} already exists; pass {option} to replace it, or choose another "
                            f"output folder")
        else:
            claim(final, kind, legacy)
        out = OutputFolder(final, kind, new_temp_dir(final) if stage else final)
        try:
            yield out
            out.publish()
        except BaseException as e:
            staged = out.path
            out.discard()
            if isinstance(e, OSError) and out.staging:  # name the folder the user knows, not the staging one
                raise naming(e, final, staged) from e
            raise


def is_main_process() -> bool:
    """Rank 0 of a ``torchrun`` launch (its ``RANK`` variable), or a process launched alone."""
    return os.environ.get("RANK", "0") == "0"
