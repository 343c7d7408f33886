"""Run fingerprints: what determines a run's result, stored beside it so that a resume or rerun never mixes two.

A fingerprint is a flat ``{"dotted.key": value}`` dict: the prepared training data's sha256, the data order, the
model, the loss, the optimizer, the schedule, the precision, the seed and the code version. Knobs that change *how*
a run computes but not *what* (micro-batch size, engine and parallel layout, compilation, checkpointing, logging,
the run folder) are left out. ``train`` writes it to ``<out>/fingerprint.json`` and into every checkpoint; a later
run into the same folder, or from one of its checkpoints, must match it key for key or is refused with one line
naming every difference -- before anything is written.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from .config import load_config, to_dict
from .errors import ConfigError, UserError
from .io import atomic_write_json
from .train_config import TrainConfig

FILE = "fingerprint.json"
# ScheduleConfig keys that set the result (micro_batch_size only splits a step into passes of equal total)
_SCHEDULE_KEYS = ("epochs", "max_steps", "max_tokens", "global_batch_size")
_PACKAGE = Path(__file__).resolve().parent


def _git_commit() -> str | None:
    """The commit of the git checkout holding this package's sources, or ``None`` (installed wheel, no git)."""
    try:
        top, commit = subprocess.run(["git", "-C", str(_PACKAGE), "rev-parse", "--show-toplevel", "HEAD"],
                                     capture_output=True, text=True, timeout=10, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    # only this project's own checkout counts (not a repository that merely contains a site-packages folder)
    return commit if (Path(top) / "goldfish").resolve() == _PACKAGE else None


def _source_sha256() -> str:
    """sha256 over the package's Python sources (path and bytes, in path order)."""
    digest = hashlib.sha256()
    for f in sorted(_PACKAGE.rglob("*.py")):
        digest.update(str(f.relative_to(_PACKAGE)).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


@functools.cache
def code_version() -> str:
    """``<version>+git.<commit>`` for a git checkout, else ``<version>+src.<sha256 of the sources>`` (12 digits)."""
    from . import __version__

    commit = _git_commit()
    return f"{__version__}+git.{commit[:12]}" if commit else f"{__version__}+src.{_source_sha256()[:12]}"


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}", out)
    else:
        out[prefix] = value


def train_fingerprint(cfg: TrainConfig, data_sha256: str | None) -> dict[str, Any]:
    """The fingerprint of a ``TrainConfig`` on data whose train split hashes to ``data_sha256`` (``None``: leave the
    data out, for a check made before the data exists). ``loss.goldfish.*`` counts only for the Goldfish loss."""
    flat: dict[str, Any] = {"code": code_version()}
    if data_sha256 is not None:
        flat["data.sha256"] = data_sha256
    flat["data.shuffle"] = cfg.data.shuffle
    _flatten(to_dict(cfg.model), "model", flat)
    flat["loss.type"] = cfg.loss.type
    if cfg.loss.type == "goldfish":
        _flatten(to_dict(cfg.loss.goldfish), "loss.goldfish", flat)
    _flatten(to_dict(cfg.optim), "optim", flat)
    schedule = to_dict(cfg.schedule)
    for key in _SCHEDULE_KEYS:
        flat[f"schedule.{key}"] = schedule[key]
    flat["precision"] = cfg.precision
    flat["seed"] = cfg.seed
    # JSON round trip: tuples become lists, so a fingerprint compares equal to the one read back from disk
    return json.loads(json.dumps(flat))


_OPTIONAL = ("data.sha256", "code")  # unknown (not different) where one side lacks them


def differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: saved -> current`` for every key with different values; keys both hold come first (a key only one
    side holds follows from another difference, e.g. loss.goldfish.* from loss.type). ``data.sha256`` and ``code``
    missing on one side are not differences: checks made before the data is prepared leave the data out, and a run
    folder from before fingerprints existed knows neither."""
    both, one = [], []
    for key in sorted(set(saved) | set(current)):
        if key in _OPTIONAL and (key not in saved or key not in current):
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
    path = Path(folder) / FILE
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{path} is corrupt (not JSON); restore it or delete the run folder {folder}") from None
    if not isinstance(value, dict):
        raise UserError(f"{path} is not a fingerprint (a JSON object); restore it or delete the run folder {folder}")
    return value


def saved_train_fingerprint(out: str | Path) -> dict[str, Any] | None:
    """The fingerprint of the run in ``out``: its ``fingerprint.json``, or for a run folder written before
    fingerprints existed, the one its ``config.yaml`` implies (without data and code); ``None`` for a new folder."""
    saved = read_fingerprint(out)
    legacy = Path(out) / "config.yaml"
    if saved is not None or not legacy.is_file():
        return saved
    try:
        implied = train_fingerprint(load_config(TrainConfig, legacy), None)
    except ConfigError as e:
        raise UserError(f"{out} holds a run whose {legacy.name} this version cannot read ({e}); pass --fresh to train "
                        f"in a new folder or --overwrite to replace it") from None
    del implied["code"]  # unknown: the code that trained it is not recorded
    return implied


def write_fingerprint(folder: str | Path, fingerprint: dict[str, Any]) -> None:
    atomic_write_json(Path(folder) / FILE, fingerprint)


def refuse_mismatch(saved: dict[str, Any] | None, current: dict[str, Any], what: str, fix: str) -> None:
    """One-line :class:`UserError` if ``saved`` (``None``: nothing saved) differs from ``current``."""
    if saved is None:
        return
    diff = differences(saved, current)
    if diff:
        shown = "; ".join(diff[:6]) + (f"; and {len(diff) - 6} more" if len(diff) > 6 else "")
        raise UserError(f"{what} was made with a different configuration ({shown}); {fix}")
