"""The prepared-folder format (``goldfish-prepared/2``): writing document splits, and reading a folder back.

::

    <out>/manifest.json   format, name, source, tokenizer{name, vocab_size, eos_id, bos_id, pad_id}, seed, seq_len,
                          packing, counts{split: rows}, tokens{split: n}, sha256{split: hex of its Arrow data; train:
                          hex over the token shards and layout}, files{path: sha256 of every tokenizer and token
                          file}, train{dtype, seq_len, packing, eos_id, pad_id, rows, tokens, occurrences, variants,
                          stores[{path, documents}]}, created, config, code, versions, stats. Written last: a folder
                          without it is an unfinished prepare (see goldfish.data.prepare), which readers refuse
    <out>/config.yaml     the resolved PrepareConfig (``goldfish prepare`` it again to rebuild the folder)
    <out>/tokenizer/      save_pretrained of the fast tokenizer (eos and pad set); every file in ``files``
    <out>/members/        datasets save_to_disk: id, title, source, text, input_ids, repetitions (>= 1), split
    <out>/nonmembers/     the same columns, repetitions = 0
    <out>/validation/     (only with num_validation) the same columns, repetitions = 0: held out for tuning
    <out>/canaries/       (only with canaries) the same columns, repetitions = copies in the rows
                          (goldfish.data.canaries)
    <out>/train/          token shards targets (members + variants), canaries; order.npy + starts.npy: the layout of
                          the rows (goldfish.data.rows: every column of a batch is derived from these)
    <out>/background/     (only when configured) token shards NNNNN.{bin,idx.npy[,tag.npy]} + NNNNN.json, their
                          entries (goldfish.data.stream); the rows use the first ``documents`` of each store
    <out>/.goldfish-owner.json  kind "prepared" and the recipe's fingerprint (goldfish.ownership)

Token ids are stored at the narrowest dtype the vocabulary allows (uint16 below 65,536 ids, else uint32), each
document once (a member read r times is stored once: the layout repeats it). Arrow files are written without
timestamps and with a content-derived fingerprint, so the same recipe and seed give byte-identical data files.

Integrity: the small Arrow splits are re-hashed at every load; the token files, which grow with the corpus, are
hashed once per content and the result recorded in the cache (``$GOLDFISH_CACHE/verified/``, keyed by each file's
path, size, inode, modification and change time), so later loads -- every rank, every restart -- only ``stat`` them.
A file rewritten in place (another size, inode or mtime -- or the same mtime set back: its ctime changed) is hashed
again. The manifest's ``train`` section (stores, document counts) is checked against the rows' recorded sha256 at
every load, and a training run's fingerprint holds every field of it (:attr:`Prepared.train_layout`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..errors import UserError
from ..gguf_cache import cache_root
from ..io import atomic_write_json, recover_directory
from ..ownership import fingerprint_sha256
from .rows import TrainRows
from .tokens import file_sha256

FORMAT = "goldfish-prepared/2"
OPTIONAL_SPLITS = ("validation", "canaries")  # present when the manifest counts them
DOC_COLUMNS = ("id", "title", "source", "text", "input_ids", "repetitions", "split")


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


# ------------------------------------------------------------------------------------------------ reading


@dataclasses.dataclass
class Prepared:
    """A prepared folder, loaded: the manifest, each document split as a ``datasets.Dataset``, the training rows
    (:class:`goldfish.data.rows.TrainRows`), the background documents (:class:`Documents`) and the tokenizer
    (lazily, from the files the manifest vouches for)."""

    path: Path
    manifest: dict
    members: Any
    nonmembers: Any
    train: TrainRows
    background: Any = None
    validation: Any = None
    canaries: Any = None
    _tokenizer: Any = dataclasses.field(default=None, init=False, repr=False)
    _tokenizer_files: dict | None = dataclasses.field(default=None, init=False, repr=False)

    def tokenizer_files(self) -> dict[str, bytes]:
        """``{file name: bytes}`` of the saved tokenizer, read once and checked against the manifest's sha256: what
        a trained model ships, whatever happens to the folder later (a ``prepare --overwrite`` of it meanwhile)."""
        if self._tokenizer_files is None:
            self._tokenizer_files = read_tokenizer_files(self.path, self.manifest)
        return self._tokenizer_files

    @property
    def tokenizer(self):
        """The saved tokenizer (loaded on first use from the verified files; never remote code)."""
        if self._tokenizer is None:
            with tempfile.TemporaryDirectory(prefix="goldfish-tokenizer-") as tmp:
                self.copy_tokenizer(Path(tmp))
                self._tokenizer = load_saved_tokenizer(Path(tmp), self.path / "tokenizer")
        return self._tokenizer

    def copy_tokenizer(self, dest: Path) -> None:
        """Write the verified tokenizer files into ``dest`` (a model folder), and nothing else of the prepared
        folder, so the model loads with the tokenizer its training ids came from."""
        for name, data in self.tokenizer_files().items():
            (Path(dest) / name).write_bytes(data)

    @property
    def train_sha256(self) -> str:
        """The identity of the training rows, from their content (:func:`train_sha256` of the manifest's files and
        stores, which a verified load has checked): the same tokens and layout give the same identity whatever code
        version prepared them -- also in a folder whose manifest recorded the older hash over the entries."""
        return train_sha256(self.manifest["files"], self.manifest["train"]["stores"])

    @property
    def train_layout(self) -> str:
        """Every manifest field that decides what the rows hold beyond their files' sha256 (:attr:`train_sha256`):
        the ``train`` section (stores, rows, ``seq_len``, packing, special ids, dtype) and the top-level ``seq_len``
        and ``packing``, hashed. A training run's fingerprint holds it (``data.layout``), so a run never resumes on
        rows a manifest edited since describes otherwise."""
        m = self.manifest
        return fingerprint_sha256({"train": m.get("train"), "seq_len": m.get("seq_len"), "packing": m.get("packing")})


class Documents:
    """The documents of some token stores (the background's), by memory map: ``len(docs)``, ``docs[i]`` -> ids."""

    def __init__(self, rows: TrainRows, first: int, count: int):
        self.rows, self.first, self.count = rows, first, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < self.count:
            raise IndexError(i)
        return self.rows.document(self.first + i)


def _hint(path: Path) -> str:
    return f"rebuild it with: goldfish prepare RECIPE.yaml --out {path} --overwrite"


def load_saved_tokenizer(path: Path, shown: Path | None = None):
    """The tokenizer saved in folder ``path`` (``shown``: the folder named in errors)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except Exception as e:  # OSError/ValueError for a missing or damaged folder
        where = shown or path
        raise UserError(
            f"cannot load the tokenizer of prepared data {where}: {str(e).splitlines()[0][:160]}; {_hint(where.parent)}"
        ) from None


def read_tokenizer_files(path: Path, manifest: dict) -> dict[str, bytes]:
    """The tokenizer files the manifest lists, each checked against its sha256; a missing, changed, extra-linked or
    unlisted-only folder is one line. Files the manifest does not list (planted later) are never read."""
    listed = {k.split("/", 1)[1]: v for k, v in manifest.get("files", {}).items() if k.startswith("tokenizer/")}
    if not listed:
        raise UserError(f"the manifest of {path} lists no tokenizer files; {_hint(path)}")
    out = {}
    for name, sha in sorted(listed.items()):
        f = path / "tokenizer" / name
        if f.is_symlink() or not f.is_file():
            raise UserError(f"tokenizer file {f} is missing or not a regular file; {_hint(path)}")
        data = f.read_bytes()
        if hashlib.sha256(data).hexdigest() != sha:
            raise UserError(
                f"tokenizer file {f} does not match the sha256 in its manifest (modified or damaged); {_hint(path)}"
            )
        out[name] = data
    return out


def _read_manifest(path: Path) -> dict:
    recover_directory(path, clean=False)  # a `prepare --overwrite` killed between its two renames left .<name>.old
    if not path.is_dir():
        raise UserError(
            f"prepared data not found: {path} (create it with: goldfish prepare RECIPE.yaml --out {path}, "
            f"the recipe it is made from, e.g. data/wikipedia_demo.yaml)"
        )
    mf = path / "manifest.json"
    try:
        manifest = json.loads(mf.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if (path / "prepare-state.json").is_file() or (path / "background").is_dir():
            raise UserError(
                f"{path} is an unfinished prepare (no manifest.json yet); finish it by running the same "
                f"goldfish prepare command again (it resumes), or {_hint(path)}"
            ) from None
        raise UserError(f"{path} is not a prepared folder (no manifest.json); {_hint(path)}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{mf} is corrupt (not JSON); {_hint(path)}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else None
        old = " (training rows as five int64 columns, from an older goldfish)" if got == "goldfish-prepared/1" else ""
        raise UserError(f"{mf} has format {got!r}{old}, expected {FORMAT!r}; {_hint(path)}")
    return manifest


def _load_split(path: Path, name: str, columns: tuple[str, ...], manifest: dict, verify: bool):
    import datasets

    folder = path / name
    if not folder.is_dir():
        raise UserError(f"prepared data {path} is missing its '{name}' split; {_hint(path)}")
    try:
        ds = datasets.load_from_disk(str(folder))
    except Exception as e:  # truncated/garbled Arrow, missing state.json, ...
        raise UserError(
            f"split {folder} is corrupt ({type(e).__name__}: {str(e).splitlines()[0][:120]}); {_hint(path)}"
        ) from None
    missing = [c for c in columns if c not in ds.column_names]
    if missing:
        raise UserError(f"split {folder} lacks columns {', '.join(missing)}; {_hint(path)}")
    expected = manifest.get("sha256", {}).get(name)
    if verify and expected and split_sha256(folder) != expected:
        raise UserError(
            f"split {folder} does not match the sha256 in its manifest (modified or damaged); {_hint(path)}"
        )
    return ds


def train_sha256(files: dict[str, str], stores: list[dict], entries: bool = False) -> str:
    """One sha256 over what the rows are made of -- the used token stores' files (ids, offsets, source tags), the
    layout (``order.npy``, ``starts.npy``) and the documents used of each store: the training data's identity, which
    a training run's fingerprint records. Content only: a streamed shard's entry (``background/NNNNN.json``) is left
    out, as its recipe fingerprint holds the preparing code's version (``entries``: the hash manifests recorded
    before 2026-12-06, which counted it, so a folder prepared then still loads)."""
    used = tuple(s["path"] + "." for s in stores) + ("train/order.npy", "train/starts.npy")
    return fingerprint_sha256(
        {
            "documents": [s["documents"] for s in stores],
            "files": {k: v for k, v in files.items() if k.startswith(used) and (entries or not k.endswith(".json"))},
        }
    )


_STORE = re.compile(r"train/(targets|canaries)|background/\d{5,}")


def check_train_section(path: Path, manifest: dict) -> None:
    """One line when the manifest's ``train`` section is not the one prepare wrote: a store outside the folder or of
    a name prepare does not give, a store whose files the manifest does not vouch for, or stores and document counts
    that no longer give the rows' recorded sha256 (an edited manifest)."""
    mf = path / "manifest.json"
    try:
        train, files = manifest["train"], manifest["files"]
        stores = train["stores"]
        recorded = manifest["sha256"]["train"]
        for s in stores:
            store = s["path"]
            if not isinstance(store, str) or not _STORE.fullmatch(store):
                raise UserError(
                    f"{mf} names the token store {store!r}, which is not one of its folder's "
                    f"(train/targets, train/canaries, background/NNNNN): the manifest was edited or "
                    f"damaged; {_hint(path)}"
                )
            if f"{store}.bin" not in files or f"{store}.idx.npy" not in files:
                raise UserError(
                    f"{mf} names the token store {store} but not its files' sha256: the manifest was "
                    f"edited or damaged; {_hint(path)}"
                )
            if not isinstance(s["documents"], int) or s["documents"] < 0:
                raise UserError(
                    f"{mf} gives the store {store} {s['documents']!r} documents: the manifest was edited "
                    f"or damaged; {_hint(path)}"
                )
        if recorded not in (train_sha256(files, stores), train_sha256(files, stores, entries=True)):
            raise UserError(
                f"{mf}'s token stores or document counts no longer give the training rows' recorded "
                f"sha256 (the manifest was edited); {_hint(path)}"
            )
        for key in ("rows", "seq_len"):
            if not isinstance(train[key], int) or train[key] < 1:
                raise UserError(
                    f"{mf} gives train.{key}={train[key]!r}: the manifest was edited or damaged; {_hint(path)}"
                )
    except (KeyError, TypeError, AttributeError) as e:
        raise UserError(
            f"{mf} lacks or garbles its training section ({type(e).__name__}: {e}); {_hint(path)}"
        ) from None


def _record_path(path: Path) -> Path:
    return cache_root() / "verified" / f"{hashlib.sha256(str(path.resolve()).encode()).hexdigest()}.json"


def _stat_key(st: os.stat_result, sha: str) -> list:
    """What tells a file from the one verified: its size, inode, mtime and ctime (a file edited in place with its
    mtime set back has a new ctime, which no user call sets back)."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, sha]


def verify_files(path: Path, files: dict[str, str]) -> None:
    """Check every listed file against its sha256, hashing only files not verified before with the same path, size,
    inode, mtime and ctime (the record lives in ``$GOLDFISH_CACHE/verified/``); one line naming the first bad file."""
    try:
        record = json.loads(_record_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    fresh = {}
    for rel, sha in sorted(files.items()):
        f = path / rel
        try:
            st = f.lstat()
        except FileNotFoundError:
            raise UserError(f"prepared data {path} is missing {rel}; {_hint(path)}") from None
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{f} is not a regular file (a link or a folder); {_hint(path)}")
        key = _stat_key(st, sha)
        if record.get(rel) != key and file_sha256(f) != sha:
            raise UserError(f"{f} does not match the sha256 in its manifest (modified or damaged); {_hint(path)}")
        fresh[rel] = key
    if fresh != record:
        _write_record(path, fresh)


def record_verified(path: Path, files: dict[str, str]) -> None:
    """Record ``files`` (``{relative path: sha256}``, just hashed by the writer) as verified in their current state."""
    _write_record(path, {rel: _stat_key((path / rel).lstat(), sha) for rel, sha in files.items()})


def _write_record(path: Path, record: dict) -> None:
    with contextlib.suppress(OSError):  # a read-only cache only costs the next load a re-hash
        atomic_write_json(_record_path(path), record, indent=None)


def load_prepared(path: str | Path, verify: bool = True) -> Prepared:
    """Open a prepared folder; one-line :class:`UserError` if it is missing, unfinished, not prepared, or damaged.

    ``verify`` (default) checks the document splits and every token and tokenizer file against the manifest (the
    token files only where they changed since they were last verified: see the module docstring), so a changed or
    damaged file is never trained or evaluated on silently; ``verify=False`` skips that (the tokenizer files are
    checked whenever they are read).
    """
    path = Path(path).expanduser()
    manifest = _read_manifest(path)
    splits = {name: _load_split(path, name, DOC_COLUMNS, manifest, verify) for name in ("members", "nonmembers")}
    optional = {
        name: _load_split(path, name, DOC_COLUMNS, manifest, verify)
        for name in OPTIONAL_SPLITS
        if name in manifest.get("counts", {})
    }
    if not (path / "tokenizer").is_dir():
        raise UserError(f"prepared data {path} is missing its tokenizer/ folder; {_hint(path)}")
    files = {k: v for k, v in manifest.get("files", {}).items() if not k.startswith("tokenizer/")}
    if verify:
        check_train_section(path, manifest)
        verify_files(
            path, {**files, **{k: v for k, v in manifest.get("files", {}).items() if k.startswith("tokenizer/")}}
        )
    try:
        train = TrainRows(path, manifest["train"])
    except (OSError, ValueError, KeyError) as e:
        raise UserError(
            f"the training rows of {path} cannot be read ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:120] if str(e) else ''}); {_hint(path)}"
        ) from None
    problems = train.layout_problems(manifest["train"])  # an edited train.rows or train.seq_len: before any step
    if problems:
        raise UserError(
            f"{path / 'manifest.json'} does not describe its training rows ({'; '.join(problems)}): the "
            f"manifest was edited or damaged; {_hint(path)}"
        )
    background = None
    if "background" in manifest.get("counts", {}):
        targets = manifest["train"]["stores"][0]["documents"]
        background = Documents(train, targets, int(manifest["counts"]["background"]))
    return Prepared(path, manifest, splits["members"], splits["nonmembers"], train, background=background, **optional)
