"""User-facing errors.

A :class:`UserError` is a problem the user can fix (bad config, missing file, wrong k/h ...). The CLI prints its
message as one line (``error: ...``) and exits with status 2 -- no traceback. Everything else is a bug and keeps its
traceback. ``UserError`` subclasses ``ValueError`` so library callers can catch it the usual way. :func:`one_line`
also maps the environment's failures the user fixes (missing file, full disk, no CUDA) to such a line.
"""

from __future__ import annotations

import errno
import sys


class UserError(ValueError):
    """A problem with the user's input; the message names the problem and the fix."""


class ConfigError(UserError):
    """An invalid configuration value or key."""


_OS_FIXES = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}
# a path the user gave that cannot be one: what is wrong with it
_PATH_FIXES = {
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "it is a folder, where a file is needed",
    errno.ELOOP: "it runs into a loop of symbolic links",
    errno.ENAMETOOLONG: "the path or one of its names is too long for the file system",
}


# what torch's CPU and CUDA allocators say when a tensor does not fit
_NO_MEMORY = ("can't allocate memory", "not enough memory", "out of memory")


def _cuda_missing(exc: BaseException) -> bool:
    """A torch failure from asking for CUDA on a machine that has none (torch raises AssertionError or
    RuntimeError with its own wording)."""
    torch = sys.modules.get("torch")
    text = str(exc)
    return (
        torch is not None
        and not torch.cuda.is_available()
        and any(s in text for s in ("compiled with CUDA", "NVIDIA driver", "CUDA driver", "no CUDA GPUs"))
    )


# what gloo and NCCL say on a surviving process when another process of the group died
_PEER_LOST = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "Socket Timeout",
    "Timed out waiting",
    "NCCL communicator was aborted",
    "Connection refused",
)


def peer_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective failing because another process of the process group died: every surviving
    process says so in one line (the main one may be the one that died)."""
    torch = sys.modules.get("torch")
    backend_error = getattr(getattr(torch, "distributed", None), "DistBackendError", None)
    text = str(exc)
    collective = (backend_error is not None and isinstance(exc, backend_error)) or any(
        s in text for s in ("gloo", "NCCL", "c10d", "ProcessGroup")
    )
    return isinstance(exc, RuntimeError) and collective and any(s in text for s in _PEER_LOST)


MAX_LINE = 1500  # characters of an error line: the head (the problem) and the tail (the fix) of a longer one


def one_line(exc: BaseException) -> str | None:
    """The one-line message (without ``error:``) for a failure the user can fix, or ``None`` for a bug.

    User errors carry their own message; missing inputs, full disks, read-only or forbidden folders, exhausted
    memory and a missing CUDA device are named with the file or device and the fix. The message is one line of bounded
    length."""
    message = _message(exc)
    if message is None:
        return None
    message = " ".join(message.splitlines())
    if len(message) > MAX_LINE:
        head, tail = MAX_LINE - 400, 400
        message = f"{message[:head]} [{len(message) - head - tail} characters cut] {message[-tail:]}"
    return message


def _first(exc: BaseException) -> str:
    """The last line of a multi-line message that names something (gloo puts the cause after its source line)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    fallback = lines[0] if lines else type(exc).__name__
    return next((line for line in lines if any(s in line for s in _PEER_LOST)), fallback)


def _message(exc: BaseException) -> str | None:
    if isinstance(exc, UserError):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"file not found: {exc.filename or exc} (check the path)"
    if isinstance(exc, OSError) and exc.errno in _PATH_FIXES:
        return f"{exc.filename or 'a path'}: {_PATH_FIXES[exc.errno]}; check the path"
    if isinstance(exc, OSError) and exc.errno in _OS_FIXES:
        where = f" ({exc.filename})" if exc.filename else ""
        return (
            f"{_OS_FIXES[exc.errno]}{where}; free disk space, or use a folder you can write to (out=/--out); "
            f"earlier results are untouched"
        )
    if isinstance(exc, RuntimeError) and any(s in str(exc) for s in ("inline_container", "file write failed")):
        return (
            f"writing a file failed ({str(exc).splitlines()[0][:100]}); check the free disk space of the output "
            f"folder; earlier results are untouched"
        )
    if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and any(s in str(exc) for s in _NO_MEMORY)):
        return (
            f"out of memory ({(str(exc).splitlines() or [type(exc).__name__])[0][:150]}); use a smaller model, "
            f"batch (schedule.micro_batch_size, decoding.batch_size, membership.token_budget) or sequence length"
        )
    if peer_lost(exc):
        return (
            f"another process of this distributed run stopped ({_first(exc)[:160]}), so this one stops too; see "
            f"that process's own error above (or its log), fix it and run the same command again (files already "
            f"written are kept)"
        )
    if isinstance(exc, (AssertionError, RuntimeError)) and _cuda_missing(exc):
        return (
            f"CUDA was requested but this machine has no usable CUDA device ({str(exc).splitlines()[0][:100]}); "
            f"use model.device=cpu (or model.device=auto)"
        )
    return None
