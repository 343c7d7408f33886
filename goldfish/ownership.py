"""Who owns an output folder, and who is writing it now: every command's one gate before it writes.

* **Ownership.** Every folder a goldfish command creates holds ``.goldfish-owner.json``: its kind (``prepared``,
  ``train``, ``eval``, ``experiment``) and the sha256 of its fingerprint, written before anything else. A command
  writes only into a new or empty folder or a folder whose marker names its own kind; a folder without a marker is
  never adopted, whatever it holds (a train ``config.yaml``, an ``experiment.yaml``: resemblance proves nothing), and
  the replacing options (``--overwrite``, ``overwrite=true``, ``--rerun-stale``) act only on a folder that carries
  the marker of their own kind.
* **Targets.** ``.``, ``..`` (the current folder or one above it), the home folder or one above it, the toolkit's own
  repository, a symbolic link and a file are refused as output folders, in one line.
* **Locks.** ``.<name>.lock`` beside the folder holds an exclusive advisory lock (``flock``) and the holder's PID
  while a command writes: a second writer gets one line naming that PID. The kernel releases the lock of a killed
  process, so a stale lock file is simply taken over -- only one goldfish wrote (its header line); a symbolic link,
  folder or file of someone else's at that path is refused and left untouched. Experiment runs hold their folder's
  lock *shared*: shards of one experiment (``--only``) run side by side, each cell under its own exclusive lock,
  while any other writer of the folder is refused.
* **Replacement.** A replacing writer builds the new folder beside the old one (``.<name>.<random>.tmp``) and
  publishes it by one atomic exchange (:func:`goldfish.io.commit_directory`) when it is complete, so a failure or a
  kill at any moment leaves the old folder whole; the next writer deletes the debris -- only folders whose staging
  record (written inside them when goldfish made them) names this folder; anything else beside it, whatever its
  name, is left alone.
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
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from . import __version__
from .errors import UserError
from .io import atomic_write_json, commit_directory, naming, new_temp_dir, recover_directory, staging_folders

MARKER = ".goldfish-owner.json"
KINDS = {
    "prepared": "prepared data (goldfish prepare)",
    "train": "a training run (goldfish train)",
    "eval": "an evaluation (goldfish eval)",
    "experiment": "an experiment (goldfish experiment)",
}
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
        raise UserError(
            f"{path} is damaged (not a goldfish ownership marker); restore it, or delete the folder "
            f"{folder} yourself if it is no longer needed"
        )
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


def component_problem(name: object) -> str | None:
    """Why ``name`` cannot be one folder name inside an output folder (a series label, an experiment's arm), or
    ``None``: it must be non-empty text naming one entry of that folder -- not ``.`` or ``..``, without ``/``, NUL or
    a line break, and at most 255 bytes -- so that what is written under it stays inside the output folder."""
    if not isinstance(name, str) or not name.strip():
        return "is empty"
    if name in (".", ".."):
        return "would name the folder itself or the one above it"
    if any(c in name for c in "/\0\n\r"):
        return "holds '/', a NUL character or a line break (it must be one folder name, not a path)"
    if len(os.fsencode(name)) > 255:
        return f"is {len(os.fsencode(name))} bytes long, more than a folder name may be (255)"
    return None


def check_target(path: str | Path, option: str = "out") -> Path:
    """``path`` as an output folder, or one :class:`UserError` naming why it cannot be one."""
    if not str(path).strip():
        raise UserError(f"{option} is empty; give the output folder, e.g. {option}=runs/x")
    p = Path(path).expanduser()
    if p.is_symlink():
        raise UserError(
            f"{option}={path} is a symbolic link (to {os.readlink(p)}); give the folder itself, not a link to it"
        )
    try:
        resolved = p.resolve()
    except (RuntimeError, OSError):  # Python 3.11 raises RuntimeError for a loop of links
        raise UserError(f"{option}={path} runs into a loop of symbolic links; give a real folder") from None
    above = next((a for a in p.absolute().parents if a.exists() or a.is_symlink()), None)
    if above is not None and not above.is_dir():
        raise UserError(f"{option}={path} lies under {above}, which is a file, not a folder; choose another {option}")
    problem = _protected(resolved)
    if problem:
        raise UserError(f"{option}={path} is {problem}; give a folder of its own, e.g. {option}=runs/x")
    if p.exists() and not p.is_dir():
        raise UserError(f"{option}={path} is a file, not a folder; choose another {option}")
    return p


def _has_content(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


def claim(folder: Path, kind: str) -> None:
    """Refuse (one line) a folder a ``kind`` writer may not write into: one owned by another kind, or a non-empty
    folder without a marker (never adopted, whatever it holds)."""
    owner = read_owner(folder)
    if owner is not None:
        if owner["kind"] != kind:
            raise UserError(f"{folder} holds {KINDS[owner['kind']]}, not {KINDS[kind]}; choose another output folder")
        return
    if _has_content(folder):
        raise UserError(
            f"{folder} already holds files that goldfish did not write there (no {MARKER}); goldfish "
            f"writes only into a new or empty folder or one it made, so choose another output folder"
        )


def require_owned(folder: Path, kind: str, option: str) -> None:
    """Refuse (one line) to replace anything but a folder whose marker names ``kind``."""
    owner = read_owner(folder)
    if owner is None or owner["kind"] != kind:
        held = (
            f"it holds {KINDS[owner['kind']]}"
            if owner
            else f"it has no {MARKER} (not made by goldfish, or by a version before markers)"
        )
        raise UserError(
            f"{option} replaces only {KINDS[kind]}, and {folder} is not one: {held}; delete it yourself "
            f"if you are sure, or choose another output folder"
        )


# ------------------------------------------------------------------------------------------------ locks


def lock_path(folder: Path) -> Path:
    """``.<name>.lock`` beside ``folder`` (beside, not inside: the folder itself may be swapped while locked)."""
    return folder.parent / f".{folder.name}.lock"


LOCK_HEADER = b"goldfish folder lock\n"  # the first line of every lock file goldfish writes: how it knows its own


class FolderLock:
    """An advisory lock on writing ``folder``; the lock file holds :data:`LOCK_HEADER`, then ``<pid> <host>`` of its
    holder(s), and is removed on release by the last one. A lock file whose holder died holds no lock (the kernel
    drops it) and is taken over. A file at the lock's path that goldfish did not write (a symbolic link, a folder,
    a file without the header) is refused in one line and left as it is: it is never written through, truncated or
    deleted.

    ``shared``: several holders at once (the shards of one experiment), every exclusive writer refused meanwhile.
    ``wait``: a held lock is waited for instead of refused; ``on_wait(holder)`` is called once before waiting."""

    def __init__(
        self, folder: Path, *, shared: bool = False, wait: bool = False, on_wait: Callable[[str], None] | None = None
    ):
        self.folder = Path(folder)
        self.path = lock_path(self.folder)
        self.shared, self.wait, self.on_wait = shared, wait, on_wait
        self._fd: int | None = None

    def __enter__(self) -> "FolderLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        waited = False
        while True:
            fd = self._open()
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
                        raise UserError(
                            f"{self.folder} is being written by another goldfish process "
                            f"({self._holder()}); wait for it to finish, or choose another output "
                            f"folder"
                        ) from None
                    if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                        raise
                    # a file system without locks (some network mounts): say so, and write unguarded
                    print(
                        f"warning: cannot lock {self.path} ({e.strerror}); a second writer of {self.folder} would "
                        f"not be noticed",
                        file=sys.stderr,
                    )
                    return self
            if self._still_at_path(fd):  # a releasing holder unlinks the file: ours must still be the one there
                break
            os.close(fd)
        me = f"{os.getpid()} {socket.gethostname()}\n".encode()
        if self.shared:  # the other holders' lines stay: a refused writer is told one of them
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, me)
        else:  # the header stays at the start at every moment: the file is always recognisably a lock
            os.pwrite(fd, LOCK_HEADER + me, 0)
            os.ftruncate(fd, len(LOCK_HEADER + me))
        self._fd = fd
        return self

    def _open(self) -> int:
        """A descriptor of the lock file, created (with its header) if there is none; one line for a path that is
        not a goldfish lock file."""
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK
        while True:
            try:
                fd = os.open(self.path, flags)
                break
            except FileNotFoundError:
                if self._create():
                    continue
            except OSError as e:
                if e.errno == errno.ELOOP:  # O_NOFOLLOW: the path is a symbolic link
                    raise self._foreign("a symbolic link") from None
                if e.errno == errno.EISDIR:
                    raise self._foreign("a folder") from None
                raise
        try:
            status = os.fstat(fd)
            header = os.pread(fd, len(LOCK_HEADER), 0) if stat.S_ISREG(status.st_mode) else b""
        except BaseException:
            os.close(fd)
            raise
        if header != LOCK_HEADER:
            os.close(fd)
            raise self._foreign(
                "a file goldfish did not write" if stat.S_ISREG(status.st_mode) else "not a regular file"
            )
        return fd

    def _create(self) -> bool:
        """Put a new lock file (the header only) at the path in one step (a hard link of a finished file), so that
        no reader ever sees it empty; False where something else appeared there first."""
        fd, tmp = tempfile.mkstemp(prefix=f"{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            os.write(fd, LOCK_HEADER)
            os.fchmod(fd, 0o644)
            os.close(fd)
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                return False
            except OSError as e:  # a file system without hard links: create exclusively, then write the header
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
                    raise
                try:
                    created = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                except FileExistsError:
                    return False
                os.write(created, LOCK_HEADER)
                os.close(created)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _foreign(self, what: str) -> UserError:
        return UserError(
            f"{self.path} (the lock file of {self.folder}) is {what}; goldfish leaves it untouched: "
            f"move it away if it is yours, or choose another output folder"
        )

    def _still_at_path(self, fd: int) -> bool:
        try:
            return os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def _holder(self) -> str:
        try:
            lines = self.path.read_bytes()[len(LOCK_HEADER) :].decode("utf-8", "replace").split()
        except OSError:
            return "pid unknown"
        pid, host = (lines + ["?", "?"])[:2]
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
        if last and self._still_at_path(self._fd):
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
        atomic_write_json(
            self.path / MARKER, {"kind": self.kind, "fingerprint": fingerprint, "written_by": f"goldfish {__version__}"}
        )

    def publish(self) -> None:
        """Put the finished staging folder in place of the old one: one atomic exchange, then the old folder is
        deleted. A no-op when writing in place."""
        if self.staging:
            commit_directory(self.path, self.final)
            self.path = self.final

    def discard(self) -> None:
        if self.staging:
            shutil.rmtree(self.path, ignore_errors=True)


@contextlib.contextmanager
def writing(
    path: str | Path,
    kind: str,
    *,
    replace: bool = False,
    stage: bool = False,
    exist_ok: bool = True,
    option: str = "--overwrite",
    main: bool = True,
    shared: bool = False,
    resume: str | None = None,
) -> Iterator[OutputFolder]:
    """Lock ``path``, check that a ``kind`` writer may write it, and yield the :class:`OutputFolder` to write.

    ``replace``: the old folder (if it holds anything) must carry this kind's marker, and the new one is built beside
    it and published when the block has succeeded. ``stage``: always build beside (also a new folder), so that nothing
    half-written ever appears at ``path``. ``exist_ok=False``: without ``replace``, an existing ``path`` is refused
    (checked under the lock, so two writers cannot both find it absent). A failure deletes the staging folder; the old
    folder stays whole. ``resume``: the sha256 of the new folder's fingerprint; a staging folder that a killed or
    interrupted replacement with this kind and fingerprint left is continued instead of started afresh (and an
    interrupted one is kept for that). ``main=False`` (the other ranks of a
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
        earlier = _continued(final, kind, resume) if replace and not shared else None
        recover_directory(final, clean=not shared, keep=earlier)  # debris of killed writers; only a sole holder cleans
        if replace and _has_content(final):
            require_owned(final, kind, option)
            stage = True
        elif final.exists() and not exist_ok:
            raise UserError(
                f"output folder {final} already exists; pass {option} to replace it, or choose another output folder"
            )
        else:
            claim(final, kind)
        if earlier is not None:
            out = OutputFolder(final, kind, earlier)
        else:
            out = OutputFolder(final, kind, new_temp_dir(final) if stage else final)
        try:
            yield out
            out.publish()
        except BaseException as e:
            staged = out.path
            if resume is None or isinstance(e, Exception):  # an interruption of a resumable one is kept for resuming
                out.discard()
            if isinstance(e, OSError) and out.staging:  # name the folder the user knows, not the staging one
                raise naming(e, final, staged) from e
            raise


def _continued(final: Path, kind: str, resume: str | None) -> Path | None:
    """The staging folder a killed replacement of ``final`` left with ``kind``'s marker and fingerprint ``resume``."""
    if resume is None:
        return None
    for folder, record in staging_folders(final):
        try:
            owner = read_owner(folder)
        except UserError:
            continue
        if (
            record["role"] == "new"
            and owner is not None
            and owner["kind"] == kind
            and owner.get("fingerprint") == resume
        ):
            return folder
    return None


def launched() -> bool:
    """Whether this process was started by ``torchrun`` / ``accelerate launch`` with more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def is_main_process() -> bool:
    """Rank 0 of a ``torchrun`` launch (its ``RANK`` variable), or a process launched alone."""
    return os.environ.get("RANK", "0") == "0"
