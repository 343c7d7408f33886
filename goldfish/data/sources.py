"""Document sources, read lazily in a deterministic order: :func:`iter_source` (every document from a position on,
what a streamed background reads shard by shard) and :func:`load_documents` (filtered and capped, in memory: the
members' and nonmembers' corpus).

* ``wikipedia`` -- the real articles in the gensim wheel (:mod:`goldfish.data.wikipedia`), offline.
* ``kjv`` -- King James Bible chapters from Debian's ``bible-kjv`` (:mod:`goldfish.data.kjv`).
* ``local`` -- ``path`` is a folder of ``.txt`` files (one document each, sorted by path), a folder of data shards
  (``.jsonl``, ``.jsonl.gz``, ``.json`` or ``.parquet`` files, read in file-name order), one such file or ``.txt``
  file, or a folder written by ``datasets.Dataset.save_to_disk``; ``text_field``/``id_field``/``title_field`` name
  the columns. JSONL is read line by line and parquet one record batch at a time, so a file of any size streams.
* ``hub`` -- ``datasets.load_dataset(path, subset, split=split, streaming=True)``, online only (never in tests).

:func:`load_documents` then drops documents below ``min_words`` and stops after ``max_documents``.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import UserError
from .config import SourceConfig
from .jsontext import LONG_LINE, LongText, read_line, split_long_row
from .kjv import iter_chapters
from .wikipedia import iter_articles


@dataclasses.dataclass(frozen=True)
class Document:
    """One source document: a stable ``id`` (unique within the source), a ``title`` (may be ''), its ``text``."""

    id: str
    title: str
    text: str  # a LongText for a long JSONL line read with iter_source(long_texts=True)
    source: str


def load_documents(source_cfg: SourceConfig, stats: dict | None = None) -> list[Document]:
    """Read, filter (``min_words``) and cap (``max_documents``) the documents of a source, in source order.

    ``stats`` (optional) receives ``read`` and ``below_min_words`` counts. Raises :class:`UserError` when nothing is
    left, naming the source and the filter that removed everything.
    """
    cfg = source_cfg
    floor = cfg.word_floor
    docs: list[Document] = []
    read = short = 0
    for _, doc in iter_source(cfg):
        read += 1
        if len(doc.text.split()) < floor:
            short += 1
            continue
        docs.append(doc)
        if cfg.max_documents is not None and len(docs) >= cfg.max_documents:
            break
    if stats is not None:
        stats.update(read=read, below_min_words=short)
    where = check_documents_read(cfg, read, len(docs), floor)
    ids = [d.id for d in docs]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise UserError(f"source {where} has duplicate document id {dup!r}; choose a unique source.id_field")
    return docs


def iter_source(cfg: SourceConfig, start: int = 0, long_texts: bool = False) -> Iterator[tuple[int, Document]]:
    """``(position, document)`` of every document of a source in source order, read lazily, from position
    ``start`` on (no ``min_words`` filter, no cap: positions count every document the source holds, so a shard of
    positions ``[a, b)`` is the same documents whoever reads it). Skipping to ``start`` does not parse what it skips:
    JSONL lines are counted, parquet row groups and whole files are skipped by their metadata. ``long_texts``: a
    JSONL line longer than :data:`~goldfish.data.jsontext.LONG_LINE` bytes gives a document whose ``text`` is a
    :class:`~goldfish.data.jsontext.LongText` (for readers that take one: the streamed background)."""
    if cfg.name == "wikipedia":
        raw = (
            Document(f"enwiki:{page_id}", title, text, "wikipedia") for page_id, title, text in iter_articles(cfg.path)
        )
        yield from _numbered(raw, start)
    elif cfg.name == "kjv":
        raw = (Document(f"kjv:{cid}", title, text, "kjv") for cid, title, text in iter_chapters(cfg.path))
        yield from _numbered(raw, start)
    elif cfg.name == "local":
        yield from _iter_local(cfg, start, long_texts)
    elif cfg.name == "hub":
        yield from _iter_hub(cfg, start)
    else:  # SourceConfig validation makes this unreachable
        raise UserError(f"unknown source {cfg.name!r}")


def _numbered(docs: Iterable[Document], start: int, first: int = 0) -> Iterator[tuple[int, Document]]:
    for i, doc in enumerate(docs, first):
        if i >= start:
            yield i, doc


# ------------------------------------------------------------------------------------------------ local files

DATA_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".parquet")


def visible_files(folder: Path) -> list[Path]:
    """The files below ``folder`` in path order, hidden ones left out: a name starting with ``.``, or any folder on
    the way to it so named (a Jupyter ``.ipynb_checkpoints/part-0-checkpoint.jsonl`` beside ``part-0.jsonl`` is a
    copy, not more data; ``.git``, ``.cache`` alike)."""
    return sorted(
        p
        for p in folder.rglob("*")
        if not any(part.startswith(".") for part in p.relative_to(folder).parts) and p.is_file()
    )


def _suffix(path: Path) -> str:
    name = path.name.lower()
    return next((s for s in DATA_SUFFIXES if name.endswith(s)), path.suffix.lower())


def _iter_local(cfg: SourceConfig, start: int, long_texts: bool = False) -> Iterator[tuple[int, Document]]:
    path = Path(cfg.path or "").expanduser()
    if not path.exists():
        raise UserError(f"source.path not found: {path} (a .txt folder, .jsonl, .parquet or save_to_disk folder)")
    if path.is_dir() and any((path / f).is_file() for f in ("state.json", "dataset_dict.json", "dataset_info.json")):
        yield from _iter_saved(path, cfg, start)
    elif path.is_dir():
        files = visible_files(path)
        data = [f for f in files if _suffix(f) in DATA_SUFFIXES]
        texts = [f for f in files if f.suffix == ".txt"]
        if data and texts:
            raise UserError(
                f"source.path {path} mixes .txt files with data files ({data[0].name}); point it at a "
                "folder of one kind (one document per .txt file, or .jsonl/.parquet shards)"
            )
        if data:  # a folder of shards: their rows in file-name order
            yield from _iter_files(data, path, cfg, start, long_texts)
        else:
            yield from _numbered((_text_document(f, path) for f in texts[start:]), 0, start)
    elif path.suffix == ".txt":
        yield from _numbered([Document(path.name, path.stem, _read_utf8(path).strip(), "local")], start)
    elif _suffix(path) in DATA_SUFFIXES:
        yield from _iter_files([path], path.parent, cfg, start, long_texts)
    else:
        raise UserError(
            f"source.path {path} has an unsupported type; use a folder of .txt files (or of .jsonl / "
            ".parquet shards), a .txt, .jsonl, .json or .parquet file (.jsonl.gz too), or a datasets "
            "save_to_disk folder"
        )


def _text_document(f: Path, root: Path) -> Document:
    """One ``.txt`` file of a folder as a document, its relative path the id."""
    name = f.relative_to(root).as_posix()
    try:  # the name becomes the document's id and title: text, not the bytes of another encoding
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(
            f"{os.fsencode(f)!r}: the file name is not UTF-8; rename it (e.g. convmv -f latin1 -t utf-8)"
        ) from None
    return Document(name, f.stem, _read_utf8(f).strip(), "local")


def _iter_files(
    files: list[Path], root: Path, cfg: SourceConfig, start: int, long_texts: bool = False
) -> Iterator[tuple[int, Document]]:
    """Rows of data files in order, numbered across files; a file wholly before ``start`` is skipped by its row count
    (parquet metadata, or its non-empty lines counted without parsing)."""
    first = 0  # position of the current file's first row
    for f in files:
        name = f.relative_to(root).as_posix() if len(files) > 1 else f.name
        stem = name[: len(name) - len(_suffix(f))]  # ids: <stem>:<row> (the file name without its data suffix)
        count = _row_count(f) if start > first else None
        if count is not None and first + count <= start:
            first += count
            continue
        n = max(0, start - first)
        for i, row in _file_rows(f, cfg, n, long_texts):
            yield first + i, _document(row, cfg, f, stem, i)
            n = i + 1
        first += max(n, count or 0)


def _row_count(path: Path) -> int:
    if _suffix(path) == ".parquet":
        return _parquet_file(path).metadata.num_rows
    return sum(1 for _ in jsonl_lines(path))


def _file_rows(path: Path, cfg: SourceConfig, skip: int, long_texts: bool = False) -> Iterator[tuple[int, dict]]:
    """``(row index in the file, row)`` from row ``skip`` on."""
    if _suffix(path) == ".parquet":
        yield from _parquet_rows(path, cfg, skip)
    else:
        keep = tuple(f for f in (cfg.id_field, cfg.title_field) if f)  # what a document reads besides its text
        for i, (_, row) in enumerate(jsonl_objects(path, skip, cfg.text_field if long_texts else None, keep), skip):
            yield i, row


def _read_utf8(path: Path) -> str:
    if not path.is_file():  # a FIFO or device would block or never end
        raise UserError(f"{path} is not a regular file; give a file of text (or a folder of .txt files)")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path} is not UTF-8 text (invalid byte at offset {e.start}); re-encode it as UTF-8, e.g. "
            f"iconv -f latin1 -t utf-8"
        ) from None


def _open_binary(path: Path):
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def jsonl_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    r"""``(line number, raw line)`` of each non-blank line of a JSONL file (``.gz`` too), read lazily. Lines end at
    ``\n`` only, as JSON Lines defines them (a raw U+2028 or form feed inside a string is text)."""
    for lineno, box in _boxed_lines(path):
        yield lineno, box.pop()


def _boxed_lines(path: Path) -> Iterator[tuple[int, list]]:
    """:func:`jsonl_lines`, each line handed over in a one-item list that the reader empties: no reference to a line
    stays behind in this generator while the reader parses it (a line of 50 MB is then held once, not twice). A line
    longer than :data:`~goldfish.data.jsontext.LONG_LINE` comes as a ``bytearray`` (:func:`jsontext.read_line`)."""
    if not path.is_file():  # a FIFO or device would block or never end
        raise UserError(f"{path} is not a regular file; give a JSONL file (or a folder of them)")
    try:
        with _open_binary(path) as fh:
            lineno = 0
            while line := read_line(fh):
                lineno += 1
                if not line.isspace():  # non-blank (as line.strip(), without copying the line)
                    box = [line]
                    del line
                    yield lineno, box
    except OSError as e:  # a truncated or damaged .gz
        raise UserError(f"cannot read {path}: {e}") from None


def jsonl_objects(
    path: Path, skip: int = 0, long_field: str | None = None, keep: tuple[str, ...] = ()
) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-empty line of a UTF-8 JSONL file after the first ``skip`` ones (which
    are not parsed); one-line errors for bad lines. A line is held as bytes, then as text, then as the object, each
    freed before the next is complete beyond the one before it (memory: about twice the longest line). With
    ``long_field``: in a line longer than :data:`~goldfish.data.jsontext.LONG_LINE` bytes, that field's string value
    is a :class:`~goldfish.data.jsontext.LongText` (the line held once; its text decoded a piece at a time) and
    its other long values not named in ``keep`` are ``None``, skipped unbuilt (:func:`~goldfish.data.jsontext.
    split_long_row`)."""
    for n, (lineno, box) in enumerate(_boxed_lines(path)):
        raw = box.pop()
        if n < skip:
            continue
        split = (
            split_long_row(raw, long_field, keep, f"{path}:{lineno}")
            if long_field is not None and len(raw) > LONG_LINE
            else None
        )
        if split is None:
            yield lineno, _parse_line(raw, path, lineno)
            continue
        rest, span = split
        row = _parse_line(rest, path, lineno)
        if span is not None:
            row[long_field] = LongText(memoryview(raw)[span[0] : span[1]], f"{path}:{lineno}", span[0] + 1)
        del raw, rest  # the line lives on only in its LongText
        yield lineno, row


def _parse_line(raw: bytes | bytearray, path: Path, lineno: int) -> dict:
    """One JSONL line as its object; one line naming the file and line when it is not one."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path}:{lineno} is not UTF-8 text (invalid byte at column {e.start + 1}); re-encode "
            f"the file as UTF-8, e.g. iconv -f latin1 -t utf-8"
        ) from None
    escaped = b"\\u" in raw
    del raw
    try:
        row = json.loads(line)
        del line
        if escaped:  # an escape may spell a lone surrogate ("\ud800"), which is not text
            json.dumps(row, ensure_ascii=False).encode("utf-8")
    except json.JSONDecodeError as e:
        raise UserError(
            f"{path}:{lineno} is not valid JSON ({e.msg}); the file needs one JSON object per line"
        ) from None
    except RecursionError:
        raise UserError(
            f"{path}:{lineno} nests JSON arrays or objects too deeply to read; the file needs one "
            "flat JSON object per line"
        ) from None
    except UnicodeEncodeError as e:
        raise UserError(
            f"{path}:{lineno} holds a lone UTF-16 surrogate ({e.object[e.start]!a}), which is not "
            "Unicode text; fix the escape in that line"
        ) from None
    except ValueError as e:  # a number beyond what Python converts (an integer of more than 4300 digits)
        raise UserError(f"{path}:{lineno} holds a value that cannot be read ({str(e)[:80]}); fix that line") from None
    if not isinstance(row, dict):
        raise UserError(f"{path}:{lineno} is a JSON {type(row).__name__}, not an object with a text field")
    return row


def _parquet_file(path: Path):
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several unrelated types for a bad file
        raise UserError(f"cannot read parquet file {path}: {e}") from None


def _parquet_rows(path: Path, cfg: SourceConfig, skip: int) -> Iterator[tuple[int, dict]]:
    """``(row index, row)`` of a parquet file from row ``skip`` on, one record batch at a time (only the columns a
    document needs; row groups before ``skip`` are not read)."""
    pf = _parquet_file(path)
    names = set(pf.schema_arrow.names)
    wanted = [c for c in (cfg.text_field, cfg.id_field, cfg.title_field) if c is not None and c in names]
    first = 0
    groups = []
    for g in range(pf.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        if groups or first + n > skip:  # from the first group holding row `skip` on
            groups.append(g)
        else:
            first += n
    if not groups:
        return
    try:
        for batch in pf.iter_batches(batch_size=1024, row_groups=groups, columns=wanted or None):
            for row in batch.to_pylist():
                if first >= skip:
                    yield first, (row if wanted else {})
                first += 1
    except Exception as e:  # a damaged page surfaces while reading
        raise UserError(f"cannot read parquet file {path}: {str(e).splitlines()[0][:160]}") from None


def _iter_saved(path: Path, cfg: SourceConfig, start: int) -> Iterator[tuple[int, Document]]:
    """A datasets ``save_to_disk`` folder (memory-mapped Arrow): rows from ``start`` on, in slices."""
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as e:  # datasets raises FileNotFoundError/ValueError/ArrowInvalid for damaged folders
        raise UserError(f"cannot load the datasets folder {path}: {e}") from None
    if isinstance(ds, datasets.DatasetDict):
        if cfg.split not in ds:
            raise UserError(f"{path} has no split {cfg.split!r}; set source.split to one of: {', '.join(ds)}")
        ds = ds[cfg.split]
    for lo in range(start, len(ds), 1024):
        part = ds[lo : lo + 1024]
        for j in range(len(next(iter(part.values()), []))):
            i = lo + j
            yield i, _document({k: v[j] for k, v in part.items()}, cfg, path, path.name, i)


def _document(row: dict, cfg: SourceConfig, path: Path | str, stem: str, i: int) -> Document:
    if cfg.text_field not in row:
        raise UserError(
            f"row {i} of {path} has no field {cfg.text_field!r}; set source.text_field to one "
            f"of: {', '.join(map(str, row))}"
        )
    text = row[cfg.text_field]
    if not isinstance(text, (str, LongText)):
        raise UserError(f"row {i} of {path}: field {cfg.text_field!r} is {type(text).__name__}, not text")
    doc_id = _field(row, cfg.id_field, path, i)
    title = _field(row, cfg.title_field, path, i)
    return Document(doc_id if doc_id is not None else f"{stem}:{i}", title or "", text.strip(), cfg.name)


def _field(row: dict, name: str | None, path: Path | str, i: int) -> Any:
    if name is None:
        return None
    if name not in row:
        raise UserError(f"row {i} of {path} has no field {name!r}; fields are: {', '.join(map(str, row))}")
    return str(row[name])


def _iter_hub(cfg: SourceConfig, start: int) -> Iterator[tuple[int, Document]]:
    """A Hub dataset in streaming mode (nothing is downloaded whole; ``start`` skips rows as they stream)."""
    import datasets

    try:
        ds = datasets.load_dataset(cfg.path, cfg.subset, split=cfg.split, streaming=True)
    except Exception as e:  # network, missing dataset, bad subset: all the user's to fix
        raise UserError(
            f"datasets.load_dataset({cfg.path!r}, {cfg.subset!r}, split={cfg.split!r}, streaming=True) "
            f"failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        ) from None
    stem = cfg.path.replace("/", "_")
    for i, row in enumerate(ds.skip(start) if start else ds, start):
        yield i, _document(row, cfg, cfg.path, stem, i)


def source_identity(cfg: SourceConfig) -> list | None:
    """What tells a source's local files from a changed copy (:func:`files_identity` of ``path``), or None for a
    source without local files (the Hub). Shards written from different states of the background source are refused
    at the merge (their documents may be read twice, others never), and the shared background store is keyed by it."""
    path = Path(cfg.path).expanduser() if cfg.path else None
    if cfg.name == "hub" or path is None or not path.exists():
        return None
    return files_identity(path)


def files_identity(path: Path) -> list:
    """``[name, size, mtime_ns, ctime_ns, inode]`` of ``path`` (a file) or of each file under it (in name order,
    hidden files and folders left out). The ctime is what no user call sets back: a file rewritten in place with its
    size kept and its mtime restored is told apart, and a replaced one by its inode too."""
    files = visible_files(path) if path.is_dir() else [path]
    out = []
    for f in files:
        st = f.stat()
        out.append(
            [
                f.relative_to(path).as_posix() if path.is_dir() else f.name,
                st.st_size,
                st.st_mtime_ns,
                st.st_ctime_ns,
                st.st_ino,
            ]
        )
    return out


def check_documents_read(cfg: SourceConfig, read: int, kept: int, floor: int) -> str:
    """One line when a source held no documents, or none with at least ``floor`` words (``kept`` of ``read``);
    returns how errors name the source."""
    where = f"{cfg.name}" + (f" ({cfg.path})" if cfg.path else "")
    if read == 0:
        raise UserError(f"source {where} holds no documents (empty corpus); point source.path at some text")
    if not kept:
        raise UserError(
            f"all {read} documents of source {where} have fewer than min_words={floor} words; "
            "lower source.min_words or use longer documents"
        )
    return where
