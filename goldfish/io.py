"""Atomic file output, crash-safe folder replacement, strict JSON and JSONL metric logs.

Results are never half-written: every file is written to a temporary sibling, fsynced and renamed into place (and the
parent folder fsynced, so the rename itself survives a power cut); an interrupted run leaves either the old file or
the new one, never a torn one. Folders are replaced by an atomic exchange where the OS has one (Linux
``renameat2(RENAME_EXCHANGE)``); elsewhere by two renames whose interrupted state is repaired on the next start
(:func:`recover_directory`). Every folder built or retired beside its target carries a staging record
(:data:`STAGING`): only such folders are ever deleted or put back, so a user's ``.<name>.old`` is never touched.
JSON is strict: NaN and infinities become ``null`` and the file says which ones.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import json
import math
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import UserError

NULL_NOTES = "json_nulls"  # key added to a written JSON object: {"a.b": "nan"} for each non-finite value nulled


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename or creation inside folder ``path`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a folder; the rename is then as durable as they allow
        pass
    finally:
        os.close(fd)


def naming(e: OSError, path: Path, tmp: Path | None = None) -> OSError:
    """``e`` naming the file the user knows: ``path`` when the OS named none (a failed fsync or write), and
    ``path/x`` rather than ``tmp/x`` for a file of the temporary folder being built (deleted by now)."""
    if e.errno is None:
        return e
    name = e.filename
    if name is None:
        name = str(path)
    elif tmp is not None and str(name).startswith(str(tmp)):
        name = str(path) + str(name)[len(str(tmp)) :]
    # OSError(errno, ...) builds the matching subclass again (PermissionError, FileNotFoundError, ...)
    return e if name == e.filename else OSError(e.errno, e.strerror, name)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync, rename, fsync of the folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise naming(e, path) from e
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def to_jsonable(obj: Any, nulled: dict[str, str] | None = None, where: str = "") -> Any:
    """Convert numpy/torch scalars, paths and tuples into plain JSON values; NaN and +-inf become ``None``.

    ``nulled``, when given, receives ``{"dotted.key": "nan" | "inf" | "-inf"}`` for every value made ``None``.
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v, nulled, f"{where}.{k}" if where else str(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v, nulled, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # numpy arrays/scalars, torch tensors
        return to_jsonable(obj.tolist(), nulled, where)
    if isinstance(obj, float) and not math.isfinite(obj):  # NaN/Infinity are not JSON
        if nulled is not None:
            nulled[where or "value"] = repr(obj)
        return None
    return obj


def strict_json(obj: Any, indent: int | None = 2) -> str:
    """``obj`` as strict JSON text; a dict with non-finite values gets a ``json_nulls`` note naming them."""
    nulled: dict[str, str] = {}
    plain = to_jsonable(obj, nulled)
    if nulled and isinstance(plain, dict):
        plain[NULL_NOTES] = nulled
    return json.dumps(plain, indent=indent, sort_keys=False, allow_nan=False)


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    """Write ``obj`` as strict JSON to ``path`` atomically."""
    atomic_write_text(path, strict_json(obj, indent) + "\n")


_NO_DEFAULT: Any = object()


def read_json(
    path: str | os.PathLike,
    default: Any = _NO_DEFAULT,
    *,
    expect: type | None = None,
    fix: str = "delete it to have it written again, or restore it",
) -> Any:
    """The JSON value in ``path`` (UTF-8): the one JSON reader. ``default`` is returned when there is no such file
    (without one, a missing file stays ``FileNotFoundError``, which the CLI reports in one line too); a damaged file,
    or with ``expect`` (e.g. ``dict``) a value of another type, is one :class:`~goldfish.errors.UserError` naming it
    and ``fix``, what to do about it."""
    path = Path(path)
    if default is not _NO_DEFAULT and not path.is_file():
        return default
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is damaged (not JSON: {e}); {fix}") from None
    if expect is not None and not isinstance(value, expect):
        kind = "a JSON object" if expect is dict else f"JSON of type {expect.__name__}"
        raise UserError(f"{path} is damaged (not {kind}); {fix}")
    return value


# ------------------------------------------------------------------------------------------------ folders

_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _renameat2():
    """libc's ``renameat2`` (Linux, glibc >= 2.28), or ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _renameat2()


def exchange(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Atomically swap two existing paths; ``False`` where the OS or file system has no such call (nothing moved)."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):  # kernel or file system lacks it
        return False
    raise OSError(err, os.strerror(err), str(b))


STAGING = ".goldfish-staging.json"  # inside a folder goldfish builds or retires beside ``<name>``: whose it is


def _stamp(folder: Path, target: Path, role: str) -> None:
    """Record inside ``folder`` that goldfish made it beside ``target`` (``role``: ``new``, a replacement being
    built; ``old``, the folder being replaced), and which process: what lets a later run recognise its debris."""
    atomic_write_json(
        folder / STAGING,
        {
            "target": target.name,
            "role": role,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "written_by": "goldfish",
        },
    )


def _unstamp(folder: Path) -> None:
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        os.unlink(folder / STAGING)


def staged_for(folder: Path, target: Path) -> dict | None:
    """The staging record inside ``folder`` when goldfish made it beside ``target`` (a real folder, not a link,
    whose record names ``target``), else ``None``: a folder goldfish did not make, whatever its name."""
    if folder.is_symlink() or not folder.is_dir():
        return None
    try:
        record = json.loads((folder / STAGING).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("target") != target.name or record.get("role") not in ("new", "old"):
        return None
    return record


def _live_elsewhere(record: dict) -> bool:
    """Whether the process that wrote a staging record is another process still running on this machine."""
    pid = record.get("pid")
    if record.get("host") != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, owned by someone else
        return True
    return True


def staging_folders(path: Path) -> list[tuple[Path, dict]]:
    """``.<name>.*.tmp`` and ``.<name>.*.old`` folders beside ``path`` that goldfish made for it (their record)."""
    if not path.parent.is_dir():
        return []
    found = []
    for pattern in (f".{glob.escape(path.name)}.*.tmp", f".{glob.escape(path.name)}.*.old"):
        for candidate in path.parent.glob(pattern):
            record = staged_for(candidate, path)
            if record is not None:
                found.append((candidate, record))
    return found


def recover_directory(path: str | os.PathLike, clean: bool = True, keep: Path | None = None) -> None:
    """Repair what an interrupted replacement of ``path`` left, touching only folders goldfish made for it (their
    staging record inside, :func:`staged_for`): put the old folder (``.<name>.*.old``) back when ``path`` is missing
    (killed between the two renames of the fallback); with ``clean`` (a writer, holding the lock), also delete the
    other debris and a stale staging record inside ``path``. A reader (``clean=False``) deletes nothing and leaves a
    replacement another live process is making alone, and so is ``keep`` (a replacement about to be continued). A
    folder without the record is never touched, whatever its name."""
    path = Path(path)
    debris = [(f, r) for f, r in staging_folders(path) if not _live_elsewhere(r) and f != keep]
    if not path.exists() and not path.is_symlink():
        olds = [(f, r) for f, r in debris if r["role"] == "old" and f.name.endswith(".old")]
        if len(olds) == 1:
            os.replace(olds[0][0], path)
            fsync_dir(path.parent)
            _unstamp(path)  # the folder is back as it was
            debris.remove(olds[0])
    if not clean:
        return
    if staged_for(path, path) is not None:  # killed just before or after a swap: the record is stale
        _unstamp(path)
    for folder, _ in debris:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Build a directory in a temporary sibling and move it to ``path`` only when the block succeeds.

    Without ``overwrite`` an existing ``path`` is refused (``FileExistsError``) before any work is done; with it, the
    old folder is replaced only after the new one is complete: by one atomic exchange where the OS has it, else by
    ``path -> .<name>.<random>.old``, ``tmp -> path`` (a kill between the two is repaired by
    :func:`recover_directory`, which runs first here). The temporary folder is deleted when the block fails.
    """
    path = Path(path)
    recover_directory(path)
    if path.exists() and not overwrite:
        raise FileExistsError(path)
    tmp = new_temp_dir(path)
    try:
        yield tmp
        commit_directory(tmp, path)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise naming(e, path, tmp) from e
        raise


def remove_tree(path: str | os.PathLike) -> None:
    """Delete the folder ``path`` so that a kill half-way never leaves a half-deleted folder under its name: it is
    renamed to ``.<name>.deleting`` first (one atomic step), then deleted; a leftover of an earlier kill goes too."""
    path = Path(path)
    doomed = path.with_name(f".{path.name}.deleting")
    shutil.rmtree(doomed, ignore_errors=True)
    os.replace(path, doomed)
    fsync_dir(path.parent)
    shutil.rmtree(doomed, ignore_errors=True)


def new_temp_dir(path: str | os.PathLike) -> Path:
    """A new empty folder ``.<name>.<random>.tmp`` beside ``path`` (where a replacement of ``path`` is built), with
    a staging record naming ``path`` (the next :func:`recover_directory` of a writer deletes it if it is left
    behind; it is removed when the folder is published)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700
    try:
        _stamp(tmp, path, "new")
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):  # name the folder the user knows
            raise naming(e, path, tmp) from e
        raise
    return tmp


def commit_directory(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """Move the finished folder ``tmp`` to ``path``, replacing what is there (one atomic exchange where the OS has
    it; else two renames that :func:`recover_directory` repairs if killed between them). The folder replaced is
    first given a staging record (role ``old``), so that whatever moment a kill comes, every folder beside ``path``
    says whose it is."""
    tmp, path = Path(tmp), Path(path)
    if not path.exists():
        os.replace(tmp, path)
    else:
        _stamp(path, path, "old")
        try:
            swapped = exchange(tmp, path)  # one atomic step; tmp then holds the old folder
        except BaseException:
            _unstamp(path)
            raise
        if swapped:
            fsync_dir(path.parent)
            _unstamp(path)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            _two_renames(tmp, path)
    _unstamp(path)
    fsync_dir(path.parent)


def _two_renames(tmp: Path, path: Path) -> None:
    """Where there is no atomic exchange: ``path -> .<name>.<random>.old``, ``tmp -> path``; a failure of the second
    rename puts the old folder back (a kill between them is repaired by :func:`recover_directory`)."""
    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
    try:
        os.replace(path, old)  # onto the empty folder just made: a name nobody else holds
    except BaseException:
        os.rmdir(old)
        _unstamp(path)
        raise
    fsync_dir(path.parent)
    try:
        os.replace(tmp, path)
    except Exception:
        os.replace(old, path)
        _unstamp(path)
        raise
    _unstamp(path)
    shutil.rmtree(old, ignore_errors=True)


class JsonlLogger:
    """Append one JSON object per line; flushed after every record so a crash loses at most the current line."""

    def __init__(self, path: str | os.PathLike, enabled: bool = True):
        self.path = Path(path)
        self._f = None
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "a", encoding="utf-8")

    def log(self, record: dict) -> None:
        if self._f is not None:
            try:
                self._f.write(strict_json(record, indent=None) + "\n")
                self._f.flush()
            except OSError as e:  # a full disk: name the log (a torn last line is skipped by read_jsonl)
                raise naming(e, self.path) from e

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> "JsonlLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a JSONL file, ignoring a torn last line (left by a killed writer)."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return records
