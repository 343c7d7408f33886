"""What an eval output folder remembers between runs: a fingerprint of the run and the finished work.

* ``fingerprint.json`` -- what determines the results, flat like every fingerprint (:mod:`goldfish.provenance`): the
  code version, the model (its Hub id and commit, bundled keyword or file name -- never an absolute path -- and
  each weight file's name, size and sha256), the reference model, the documents
  (sha256 of every split's ids and tokens) and the config without the settings that only change speed or
  presentation (:data:`OPERATIONAL`). A run into a folder with a different fingerprint -- also one left by other
  code -- is refused with one line naming the differences before anything is written; ``overwrite=true`` starts
  afresh beside it and replaces the folder when it has finished (``goldfish.ownership.writing``). With
  ``resume=false`` the finished work is ignored (recomputed) but earlier results stay until new ones replace them.
* ``windows.partial.jsonl`` -- one finished extraction window per line, keyed by the window's sha256.
* ``membership.partial.jsonl`` -- one document's reduced membership scores per pass per line (``{"key", "value"}``).

Both partial files are appended and flushed line by line, so a killed run loses at most the batch in flight and a
rerun skips everything already there; a torn last line is ignored and rewritten away.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any, Iterator, MutableMapping, Sequence

from goldfish.config import flatten, to_dict
from goldfish.errors import UserError
from goldfish.io import atomic_write_text, read_jsonl, strict_json
from goldfish.ownership import OutputFolder, fingerprint_sha256
from goldfish.model_source import weights_stamp
from goldfish.provenance import FILE as FINGERPRINT
from goldfish.provenance import as_stored, code_version, differences, write_fingerprint

from .config import EvalConfig
from .loading import resolve_model_path
from .windows import EvalDocument

WINDOWS_PARTIAL = "windows.partial.jsonl"
MEMBERSHIP_PARTIAL = "membership.partial.jsonl"
# config keys that change speed, resources or presentation but not one result value
OPERATIONAL = (
    "out",
    "resume",
    "overwrite",
    "report",
    "log_samples",
    "progress",
    "model.threads",
    "model.device",
    "decoding.batch_size",
    "membership.token_budget",
    "membership.chunk",
    "membership.keep_tokens",
)


def documents_sha256(splits: dict[str, Sequence[EvalDocument]]) -> str:
    """One hash of every split's documents (names, ids, groups and tokens), in order."""
    h = hashlib.sha256()
    for name in sorted(splits):
        for d in splits[name]:
            h.update(f"{name}|{d.id}|{d.group}|{d.repetitions}|{len(d.tokens)}|".encode())
            h.update(struct.pack(f"<{len(d.tokens)}q", *d.tokens))
    return h.hexdigest()


def config_fingerprint(cfg: EvalConfig) -> dict:
    """The settings that determine an evaluation's results: the config without :data:`OPERATIONAL` keys (flat)."""
    config = flatten(to_dict(cfg))
    for key in OPERATIONAL:
        config.pop(key, None)
    return as_stored(config)


def fingerprint(cfg: EvalConfig, splits: dict[str, Sequence[EvalDocument]]) -> dict:
    """What must match for finished work in an out folder to be reused (flat ``{"dotted.key": value}``): the code,
    the model and its weights, the documents and :func:`config_fingerprint` (keys ``config.*``)."""
    config = {f"config.{key}": value for key, value in config_fingerprint(cfg).items()}
    return as_stored(
        {
            "code": code_version(),
            "model": resolve_model_path(cfg.model.path).identity(),
            "weights": weights_stamp(cfg.model.path),
            "reference_weights": weights_stamp(cfg.model.reference),
            "data_sha256": documents_sha256(splits),
            **config,
        }
    )


def claim_folder(folder: OutputFolder, print_: dict) -> None:
    """Refuse (one line, nothing written) a folder holding a different evaluation; then give it its ownership marker
    (the first write: a folder goldfish writes into is never without one) and record ``print_`` (atomic: a full
    disk fails with the folder unchanged)."""
    out = folder.path
    path = out / FINGERPRINT
    old = None
    if path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            old = {}
    elif (out / "results.json").is_file() or (out / WINDOWS_PARTIAL).is_file():
        old = {}  # results without a fingerprint: an older eval wrote them; treat as different
    if old is not None and old != print_:
        diff = differences(old, print_) if old else ["(no fingerprint)"]
        raise UserError(
            f"{out} holds results of a different evaluation (differs in: {'; '.join(diff[:6])}); use "
            f"another out folder, or overwrite=true to replace them"
        )
    folder.mark(fingerprint_sha256(print_))
    write_fingerprint(out, print_)


def read_windows(out: Path, resume: bool = True) -> dict[str, dict]:
    """Finished windows by sha256 (none unless ``resume``), after rewriting the partial file cleanly (appends never
    follow a torn line; atomic, so a failure leaves the old file)."""
    path = out / WINDOWS_PARTIAL
    rows = read_jsonl(path) if resume and path.is_file() else []
    done = {r["sha256"]: r for r in rows if "sha256" in r}
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in done.values()))
    return done


def _line(key: str, value: dict) -> str:
    """One strict JSON line: a NaN score is written as null (read back as NaN by the float columns)."""
    return strict_json({"key": key, "value": value}, indent=None) + "\n"


class JsonlDict(MutableMapping[str, dict]):
    """A dict whose assignments are appended (and flushed) to a JSONL file as ``{"key", "value"}`` lines; opening
    it again reloads them (unless ``resume`` is false: then it starts empty). Used as the membership score cache."""

    def __init__(self, path: Path, resume: bool = True):
        self.path = path
        rows = read_jsonl(path) if resume and path.is_file() else []
        self._data = {r["key"]: r["value"] for r in rows if "key" in r and "value" in r}
        atomic_write_text(path, "".join(_line(k, v) for k, v in self._data.items()))
        self._f = open(path, "a", encoding="utf-8")

    def __getitem__(self, key: str) -> dict:
        return self._data[key]

    def __setitem__(self, key: str, value: dict) -> None:
        self._data[key] = value
        self._f.write(_line(key, value))
        self._f.flush()

    def __delitem__(self, key: str) -> None:
        raise TypeError("finished membership scores are never deleted one by one")

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "JsonlDict":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
