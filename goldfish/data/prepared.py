"""The prepared-folder format (``goldfish-prepared/1``): writing splits and reading them back.

::

    <out>/manifest.json   format, name, source, tokenizer{name, vocab_size, eos_id, bos_id, pad_id}, seed, seq_len,
                          packing, counts{split: rows}, tokens{split: n}, sha256{split: hex of its Arrow data},
                          created, config, versions, stats
    <out>/config.yaml     the resolved PrepareConfig (``goldfish prepare`` it again to rebuild the folder)
    <out>/tokenizer/      save_pretrained of the fast tokenizer (eos and pad set)
    <out>/members/        datasets save_to_disk: id, title, source, text, input_ids, repetitions (>= 1), split
    <out>/nonmembers/     the same columns, repetitions = 0
    <out>/background/     (only when configured) the same columns, repetitions = 1
    <out>/validation/     (only with num_validation) the same columns, repetitions = 0: held out for tuning
    <out>/canaries/       (only with canaries) the same columns, repetitions = copies in the rows (goldfish.data.canaries)
    <out>/train/          input_ids, labels, document_ids, position_ids, attention_mask; one row per sequence
    <out>/.goldfish-owner.json  kind "prepared" and the sha256 of the splits' sha256 (goldfish.ownership)

Arrow files are written without timestamps and with a content-derived fingerprint, so the same config and seed
give byte-identical ``.arrow`` files (their sha256 is in the manifest).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..errors import UserError
from ..io import recover_directory

FORMAT = "goldfish-prepared/1"
OPTIONAL_SPLITS = ("background", "validation", "canaries")  # present when the manifest counts them
DOC_COLUMNS = ("id", "title", "source", "text", "input_ids", "repetitions", "split")
TRAIN_COLUMNS = ("input_ids", "labels", "document_ids", "position_ids", "attention_mask")


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """Silence datasets' own 'Saving the dataset' bars for one block, restoring the caller's setting."""
    import datasets

    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


def _list_array(rows: list[np.ndarray] | np.ndarray):
    """Ragged rows (or a 2-D array) -> an Arrow ``list<int64>`` array without going through Python ints."""
    import pyarrow as pa

    if isinstance(rows, np.ndarray):  # (R, T)
        offsets = np.arange(0, rows.size + 1, rows.shape[1], dtype=np.int64)
        values = rows.reshape(-1).astype(np.int64)
    else:
        offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
        values = np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, dtype=np.int64)
    if values.size < 2**31:  # int32 offsets: the plain Arrow list type that datasets reads as List(Value('int64'))
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))


def save_table(columns: dict[str, Any], path: Path) -> str:
    """Write ``columns`` (name -> Arrow array or Python list) as a datasets folder; returns the sha256 of its data."""
    import datasets
    import pyarrow as pa

    table = pa.table(columns)
    digest = hashlib.sha256()
    for batch in table.to_batches():  # content hash -> deterministic fingerprint in state.json
        for col in batch.columns:
            for buf in col.buffers():
                if buf is not None:
                    digest.update(buf)
    ds = datasets.Dataset(table, fingerprint=digest.hexdigest()[:16])
    with _quiet_datasets():
        ds.save_to_disk(str(path))
    return split_sha256(path)


def split_files(path: Path) -> list[Path]:
    """The Arrow data files of a split folder: those its ``state.json`` lists, in name order (``datasets`` may write
    ``cache-*.arrow`` files beside them, which are not part of the data)."""
    path = Path(path)
    try:
        names = [f["filename"] for f in json.loads((path / "state.json").read_text(encoding="utf-8"))["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError):  # no or damaged state.json: the data files by their name
        names = [f.name for f in path.glob("*.arrow") if not f.name.startswith("cache-")]
    return [path / name for name in sorted(names)]


def split_sha256(path: Path) -> str:
    """sha256 over a split's Arrow data files in name order (the bytes a training run reads)."""
    digest = hashlib.sha256()
    for f in split_files(path):
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def doc_columns(items: list, split: str, decode) -> dict[str, Any]:
    """Columns of a document split from :class:`~goldfish.data.splits.Item` s; ``text`` = decode(input_ids)."""
    import pyarrow as pa

    return {
        "id": pa.array([it.id for it in items], pa.string()),
        "title": pa.array([it.doc.title for it in items], pa.string()),
        "source": pa.array([it.doc.source for it in items], pa.string()),
        "text": pa.array([decode(it.ids) for it in items], pa.string()),
        "input_ids": _list_array([it.ids for it in items]),
        "repetitions": pa.array([int(it.repetitions) for it in items], pa.int64()),
        "split": pa.array([split] * len(items), pa.string()),
    }


def train_columns(rows: dict[str, np.ndarray]) -> dict[str, Any]:
    return {name: _list_array(rows[name]) for name in TRAIN_COLUMNS}


# ------------------------------------------------------------------------------------------------ reading


@dataclasses.dataclass
class Prepared:
    """A prepared folder, loaded: the manifest, each split as a ``datasets.Dataset``, and the tokenizer (lazily)."""

    path: Path
    manifest: dict
    members: Any
    nonmembers: Any
    train: Any
    background: Any = None
    validation: Any = None
    canaries: Any = None
    _tokenizer: Any = dataclasses.field(default=None, init=False, repr=False)

    @property
    def tokenizer(self):
        """The saved tokenizer (loaded on first use; never remote code)."""
        if self._tokenizer is None:
            self._tokenizer = load_saved_tokenizer(self.path / "tokenizer")
        return self._tokenizer

    def copy_tokenizer(self, dest: Path) -> None:
        """Copy the saved tokenizer's files into ``dest`` (a model folder), so the model loads with its tokenizer."""
        for f in (self.path / "tokenizer").iterdir():
            if f.is_file():
                shutil.copy2(f, dest / f.name)

    @property
    def train_sha256(self) -> str:
        """sha256 of the train split's data files: the manifest's (checked on load), else hashed now."""
        return self.manifest.get("sha256", {}).get("train") or split_sha256(self.path / "train")


def _hint(path: Path) -> str:
    return f"rebuild it with: goldfish prepare RECIPE.yaml --out {path} --overwrite"


def load_saved_tokenizer(path: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except Exception as e:  # OSError/ValueError for a missing or damaged folder
        raise UserError(f"cannot load the tokenizer of prepared data {path}: {str(e).splitlines()[0][:160]}; "
                        f"{_hint(path.parent)}") from None


def _read_manifest(path: Path) -> dict:
    recover_directory(path, clean=False)  # a `prepare --overwrite` killed between its two renames left .<name>.old
    if not path.is_dir():
        raise UserError(f"prepared data not found: {path} (create it with: goldfish prepare data/wikipedia_demo.yaml "
                        f"--out {path})")
    mf = path / "manifest.json"
    try:
        manifest = json.loads(mf.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path} is not a prepared folder (no manifest.json); {_hint(path)}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{mf} is corrupt (not JSON); {_hint(path)}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else None
        raise UserError(f"{mf} has format {got!r}, expected {FORMAT!r}; {_hint(path)}")
    return manifest


def _load_split(path: Path, name: str, columns: tuple[str, ...], manifest: dict, verify: bool):
    import datasets

    folder = path / name
    if not folder.is_dir():
        raise UserError(f"prepared data {path} is missing its '{name}' split; {_hint(path)}")
    try:
        ds = datasets.load_from_disk(str(folder))
    except Exception as e:  # truncated/garbled Arrow, missing state.json, ...
        raise UserError(f"split {folder} is corrupt ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                        f"{_hint(path)}") from None
    missing = [c for c in columns if c not in ds.column_names]
    if missing:
        raise UserError(f"split {folder} lacks columns {', '.join(missing)}; {_hint(path)}")
    expected = manifest.get("sha256", {}).get(name)
    if verify and expected and split_sha256(folder) != expected:
        raise UserError(f"split {folder} does not match the sha256 in its manifest (modified or damaged); "
                        f"{_hint(path)}")
    return ds


def load_prepared(path: str | Path, verify: bool = True) -> Prepared:
    """Open a prepared folder; one-line :class:`UserError` if it is missing, not prepared, or a split is damaged.

    ``verify`` (default) re-hashes every split's data files against the manifest's sha256 (reads all data once), so
    a changed or damaged Arrow file is never trained or evaluated on silently; ``verify=False`` skips that.
    """
    path = Path(path).expanduser()
    manifest = _read_manifest(path)
    splits = {name: _load_split(path, name, DOC_COLUMNS, manifest, verify) for name in ("members", "nonmembers")}
    train = _load_split(path, "train", TRAIN_COLUMNS, manifest, verify)
    optional = {name: _load_split(path, name, DOC_COLUMNS, manifest, verify)
                for name in OPTIONAL_SPLITS if name in manifest.get("counts", {})}
    if not (path / "tokenizer").is_dir():
        raise UserError(f"prepared data {path} is missing its tokenizer/ folder; {_hint(path)}")
    return Prepared(path, manifest, splits["members"], splits["nonmembers"], train, **optional)
