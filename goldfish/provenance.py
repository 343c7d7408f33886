"""Where a result came from, and whether an earlier result may be reused: one module for every command.

* **Code version** (:func:`code_version`): ``<package version>+git.<commit>`` for this project's own git checkout
  (:func:`git_commit` checks that the repository holding the sources *is* this project, not a repository that merely
  contains a site-packages folder), else ``<package version>+src.<sha256 of the package's sources>``.
* **Library versions** (:func:`versions`): the package versions a result depends on, read from the installed
  distributions (nothing is imported).
* **Fingerprints**: a flat ``{"dotted.key": value}`` dict (``goldfish.config.flatten``) of everything that determines a
  result -- data hashes, the settings that change a value, the code version -- stored as ``<folder>/fingerprint.json``
  (:func:`write_fingerprint`). A later run into the same folder compares its own fingerprint key by key
  (:func:`differences`) and is refused in one line naming every difference (:func:`refuse_mismatch`) before it
  writes anything. What goes into a fingerprint is decided by each command: ``goldfish.train_config``
  (``train_fingerprint``) and ``goldfish.eval.state`` (``fingerprint``); ``goldfish prepare`` records the code and
  versions in its manifest.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import platform
import subprocess
from pathlib import Path
from typing import Any, Iterable

from . import __version__
from .errors import UserError
from .io import atomic_write_json, read_json

FILE = "fingerprint.json"
_PACKAGE = Path(__file__).resolve().parent


def git_commit() -> str | None:
    """The commit of the git checkout holding this package's sources, or ``None`` (installed wheel, no git)."""
    try:
        top, commit = subprocess.run(
            ["git", "-C", str(_PACKAGE), "rev-parse", "--show-toplevel", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    # only this project's own checkout counts (not a repository that merely contains a site-packages folder)
    return commit if (Path(top) / "goldfish").resolve() == _PACKAGE else None


def _source_sha256() -> str:
    """sha256 over the package's Python sources (path and bytes, in path order; ``goldfish.eval`` included)."""
    digest = hashlib.sha256()
    checkout = (_PACKAGE.parent / "pyproject.toml").is_file()  # a source tree: goldfish.eval lives in ../eval
    roots = [_PACKAGE] + ([_PACKAGE.parent / "eval"] if checkout else [])
    for root in roots:
        for f in sorted(root.rglob("*.py")):
            digest.update(f"{root.name}/{f.relative_to(root)}".encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


@functools.cache
def code_version() -> str:
    """``<version>+git.<commit>`` for a git checkout, else ``<version>+src.<sha256 of the sources>`` (12 digits)."""
    commit = git_commit()
    return f"{__version__}+git.{commit[:12]}" if commit else f"{__version__}+src.{_source_sha256()[:12]}"


def versions(packages: Iterable[str] = ()) -> dict[str, str | None]:
    """``{"goldfish", "python", <each package>: version}``; a package that is not installed maps to None."""
    out: dict[str, str | None] = {"goldfish": __version__, "python": platform.python_version()}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def differences(saved: dict[str, Any], current: dict[str, Any], optional: Iterable[str] = ()) -> list[str]:
    """``key: saved -> current`` for every key of two flat dicts whose values differ; keys both hold come first (a key
    only one side holds usually follows from another difference, e.g. ``loss.goldfish.*`` from ``loss.type``). A key
    in ``optional`` that one side lacks is unknown there, not different."""
    optional = set(optional)
    both, one = [], []
    for key in sorted(set(saved) | set(current)):
        if key in optional and (key not in saved or key not in current):
            continue
        old, new = saved.get(key, "<absent>"), current.get(key, "<absent>")
        if old != new:
            (both if key in saved and key in current else one).append(f"{key}: {_show(old)} -> {_show(new)}")
    return both + one


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 24 else text[:12] + "…"


def read_fingerprint(folder: str | Path) -> dict[str, Any] | None:
    """``<folder>/fingerprint.json``, or ``None`` if there is none; a damaged file is a one-line error."""
    return read_json(Path(folder) / FILE, None, expect=dict, fix=f"restore it or delete the folder {folder}")


def write_fingerprint(folder: str | Path, fingerprint: dict[str, Any]) -> None:
    """Write ``<folder>/fingerprint.json`` atomically (a full disk leaves the old one)."""
    atomic_write_json(Path(folder) / FILE, fingerprint)


def as_stored(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint as it reads back from disk (tuples become lists), so a fresh one compares equal to it."""
    return json.loads(json.dumps(fingerprint))


def refuse_mismatch(
    saved: dict[str, Any] | None, current: dict[str, Any], what: str, fix: str, optional: Iterable[str] = ()
) -> None:
    """One-line :class:`UserError` if ``saved`` (``None``: nothing saved) differs from ``current``."""
    if saved is None:
        return
    diff = differences(saved, current, optional)
    if diff:
        shown = "; ".join(diff[:6]) + (f"; and {len(diff) - 6} more" if len(diff) > 6 else "")
        raise UserError(f"{what} was made with a different configuration ({shown}); {fix}")
