"""Document sources: ``load_documents(SourceConfig) -> list[Document]``, always in a deterministic order.

* ``wikipedia`` -- the real articles in the gensim wheel (:mod:`goldfish.data.wikipedia`), offline.
* ``kjv`` -- King James Bible chapters from Debian's ``bible-kjv`` (:mod:`goldfish.data.kjv`).
* ``local`` -- ``path`` is a folder of ``.txt`` files (one document each, sorted by path), a ``.txt`` file, a
  ``.jsonl``/``.json`` file (one object per line), a ``.parquet`` file, or a folder written by
  ``datasets.Dataset.save_to_disk``; ``text_field``/``id_field``/``title_field`` name the columns.
* ``hub`` -- ``datasets.load_dataset(path, subset, split=split)`` for online users (never used in tests).

Every source then drops documents below ``min_words`` and stops after ``max_documents``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import UserError
from .config import SourceConfig
from .kjv import iter_chapters
from .wikipedia import iter_articles


@dataclasses.dataclass(frozen=True)
class Document:
    """One source document: a stable ``id`` (unique within the source), a ``title`` (may be ''), its ``text``."""

    id: str
    title: str
    text: str
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
    for doc in _iter_raw(cfg):
        read += 1
        if len(doc.text.split()) < floor:
            short += 1
            continue
        docs.append(doc)
        if cfg.max_documents is not None and len(docs) >= cfg.max_documents:
            break
    if stats is not None:
        stats.update(read=read, below_min_words=short)
    where = f"{cfg.name}" + (f" ({cfg.path})" if cfg.path else "")
    if read == 0:
        raise UserError(f"source {where} holds no documents (empty corpus); point source.path at some text")
    if not docs:
        raise UserError(f"all {read} documents of source {where} have fewer than min_words={floor} words; "
                        "lower source.min_words or use longer documents")
    ids = [d.id for d in docs]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise UserError(f"source {where} has duplicate document id {dup!r}; choose a unique source.id_field")
    return docs


def _iter_raw(cfg: SourceConfig) -> Iterator[Document]:
    if cfg.name == "wikipedia":
        for page_id, title, text in iter_articles(cfg.path):
            yield Document(f"enwiki:{page_id}", title, text, "wikipedia")
    elif cfg.name == "kjv":
        for chapter_id, title, text in iter_chapters(cfg.path):
            yield Document(f"kjv:{chapter_id}", title, text, "kjv")
    elif cfg.name == "local":
        yield from _iter_local(cfg)
    elif cfg.name == "hub":
        yield from _iter_hub(cfg)
    else:  # SourceConfig validation makes this unreachable
        raise UserError(f"unknown source {cfg.name!r}")


# ------------------------------------------------------------------------------------------------ local files


def _iter_local(cfg: SourceConfig) -> Iterator[Document]:
    path = Path(cfg.path or "").expanduser()
    if not path.exists():
        raise UserError(f"source.path not found: {path} (a .txt folder, .jsonl, .parquet or save_to_disk folder)")
    if path.is_dir() and any((path / f).is_file() for f in ("state.json", "dataset_dict.json", "dataset_info.json")):
        yield from _iter_rows(_load_saved(path, cfg.split), cfg, path.name)
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        for f in files:
            name = f.relative_to(path).as_posix()
            try:  # the name becomes the document's id and title: text, not the bytes of another encoding
                name.encode("utf-8")
            except UnicodeEncodeError:
                raise UserError(f"{os.fsencode(f)!r}: the file name is not UTF-8; rename it (e.g. convmv -f latin1 "
                                f"-t utf-8)") from None
            yield Document(name, f.stem, _read_utf8(f).strip(), "local")
    elif path.suffix == ".txt":
        yield Document(path.name, path.stem, _read_utf8(path).strip(), "local")
    elif path.suffix in (".jsonl", ".json"):
        yield from _iter_rows((row for _, row in jsonl_objects(path)), cfg, path.stem)
    elif path.suffix == ".parquet":
        yield from _iter_rows(_parquet_rows(path), cfg, path.stem)
    else:
        raise UserError(f"source.path {path} has an unsupported type; use a folder of .txt files, a .txt, .jsonl, "
                        ".json or .parquet file, or a datasets save_to_disk folder")


def _read_utf8(path: Path) -> str:
    if not path.is_file():  # a FIFO or device would block or never end
        raise UserError(f"{path} is not a regular file; give a file of text (or a folder of .txt files)")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text (invalid byte at offset {e.start}); re-encode it as UTF-8, e.g. "
                        f"iconv -f latin1 -t utf-8") from None


def jsonl_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-empty line of a UTF-8 JSONL file; one-line errors for bad lines.

    Lines end at ``\n`` only, as JSON Lines defines them (a raw U+2028 or form feed inside a string is text)."""
    text = _read_utf8(path)
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            json.dumps(row, ensure_ascii=False).encode("utf-8")  # a "\ud800" escape: a lone surrogate, not text
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{lineno} is not valid JSON ({e.msg}); the file needs one JSON object per "
                            "line") from None
        except RecursionError:
            raise UserError(f"{path}:{lineno} nests JSON arrays or objects too deeply to read; the file needs one "
                            "flat JSON object per line") from None
        except UnicodeEncodeError as e:
            raise UserError(f"{path}:{lineno} holds a lone UTF-16 surrogate ({e.object[e.start]!a}), which is not "
                            "Unicode text; fix the escape in that line") from None
        except ValueError as e:  # a number beyond what Python converts (an integer of more than 4300 digits)
            raise UserError(f"{path}:{lineno} holds a value that cannot be read ({str(e)[:80]}); fix that "
                            "line") from None
        if not isinstance(row, dict):
            raise UserError(f"{path}:{lineno} is a JSON {type(row).__name__}, not an object with a text field")
        yield lineno, row


def _parquet_rows(path: Path) -> Iterator[dict]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several unrelated types for a bad file
        raise UserError(f"cannot read parquet file {path}: {e}") from None
    yield from table.to_pylist()


def _load_saved(path: Path, split: str) -> Iterable[dict]:
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as e:  # datasets raises FileNotFoundError/ValueError/ArrowInvalid for damaged folders
        raise UserError(f"cannot load the datasets folder {path}: {e}") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise UserError(f"{path} has no split {split!r}; set source.split to one of: {', '.join(ds)}")
        ds = ds[split]
    return ds


def _iter_rows(rows: Iterable[dict], cfg: SourceConfig, stem: str) -> Iterator[Document]:
    for i, row in enumerate(rows):
        if cfg.text_field not in row:
            raise UserError(f"row {i} of {cfg.path} has no field {cfg.text_field!r}; set source.text_field to one "
                            f"of: {', '.join(map(str, row))}")
        text = row[cfg.text_field]
        if not isinstance(text, str):
            raise UserError(f"row {i} of {cfg.path}: field {cfg.text_field!r} is {type(text).__name__}, not text")
        doc_id = _field(row, cfg.id_field, cfg, i)
        title = _field(row, cfg.title_field, cfg, i)
        yield Document(doc_id if doc_id is not None else f"{stem}:{i}", title or "", text.strip(), cfg.name)


def _field(row: dict, name: str | None, cfg: SourceConfig, i: int) -> Any:
    if name is None:
        return None
    if name not in row:
        raise UserError(f"row {i} of {cfg.path} has no field {name!r}; fields are: {', '.join(map(str, row))}")
    return str(row[name])


def _iter_hub(cfg: SourceConfig) -> Iterator[Document]:
    import datasets

    try:
        ds = datasets.load_dataset(cfg.path, cfg.subset, split=cfg.split)
    except Exception as e:  # network, missing dataset, bad subset: all the user's to fix
        raise UserError(f"datasets.load_dataset({cfg.path!r}, {cfg.subset!r}, split={cfg.split!r}) failed: "
                        f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    yield from _iter_rows(ds, cfg, cfg.path.replace("/", "_"))
