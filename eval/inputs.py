"""Reading the documents to evaluate: a prepared folder (``goldfish prepare``) or a JSONL file.

* Prepared folder (has ``manifest.json``): documents come already tokenised (``input_ids``, no bos/eos) with
  ``id``, ``title`` and ``repetitions`` (copies per epoch in the training data; 0 for nonmembers). ``members`` are
  extracted; the ``nonmembers`` split, when present, feeds membership inference.
* JSONL file: one ``{"id": ..., "text": ...}`` object per line (the text under ``data.text_field``, default
  ``text``); or a folder of text files (``*.txt``, ``*.md``, below it): one document per file, its id the file's
  path in the folder (optional ``title``, ``repetitions`` -- a whole
  number >= 0 -- and a group under ``group_field``, default ``group``), tokenised here with the model's tokenizer
  as ``goldfish prepare`` tokenises: no special tokens added, and text that spells one (``<|endoftext|>``) stays
  text.

This is the only place ``eval`` touches the training package (``goldfish.data.load_prepared``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from goldfish.config import shown
from goldfish.data import load_prepared
from goldfish.data.sources import jsonl_objects, visible_files
from goldfish.errors import UserError

from .windows import EvalDocument


def is_prepared(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "manifest.json").is_file()


def _check_path(path: str | Path, flag: str) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"{flag} path not found: {p} (pass a prepared folder from `goldfish prepare` or a JSONL file)")
    if p.is_dir() and not is_prepared(p) and not text_files(p):
        raise UserError(
            f"{p} is a folder with neither manifest.json (a prepared dataset: `goldfish prepare`) nor "
            f"text files ({', '.join('*' + x for x in TEXT_SUFFIXES)}); pass one of those or a JSONL file "
            f'with one {{"id", "text"}} object per line'
        )
    return p


TEXT_SUFFIXES = (".txt", ".md")


def text_files(folder: Path) -> list[Path]:
    """The documents of a folder of text files: every ``*.txt`` / ``*.md`` below it, in path order; hidden files and
    the files of hidden folders left out (``goldfish.data.sources.visible_files``)."""
    return [f for f in visible_files(Path(folder)) if f.suffix in TEXT_SUFFIXES]


def _folder_rows(folder: Path, max_docs: int | None) -> Iterator[tuple[str, dict]]:
    """(where, row) per text file: ``{"id": its path under the folder, "text": its UTF-8 text}``."""
    for i, f in enumerate(text_files(folder)):
        if max_docs is not None and i >= max_docs:
            return
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise UserError(
                f"{f} is not UTF-8 text (invalid byte at offset {e.start}); re-encode it as UTF-8, e.g. "
                f"iconv -f latin1 -t utf-8"
            ) from None
        yield str(f), {"id": f.relative_to(folder).as_posix(), "text": text}


def _optional_int(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _group(value) -> str | None:
    return None if value is None or value == "" else str(value)


def documents_from_dataset(
    ds, split: str, max_docs: int | None = None, group_field: str = "group"
) -> list[EvalDocument]:
    """``datasets.Dataset`` rows with id/title/text/input_ids/repetitions -> :class:`EvalDocument` list."""
    if max_docs is not None:
        ds = ds.select(range(min(max_docs, len(ds))))
    cols = set(ds.column_names)
    docs = []
    for i, row in enumerate(ds):
        docs.append(
            EvalDocument(
                id=str(row["id"]) if "id" in cols else str(i),
                tokens=tuple(int(t) for t in row["input_ids"]),
                title=str(row.get("title") or ""),
                repetitions=_optional_int(row.get("repetitions")) if "repetitions" in cols else None,
                split=split,
                text=str(row.get("text") or ""),
                group=_group(row.get(group_field)) if group_field in cols else None,
            )
        )
    return docs


def read_prepared(path: str | Path, splits: Sequence[str], max_docs: int | None = None, group_field: str = "group"):
    """Documents of the named splits of a prepared folder -> ({split: [EvalDocument]}, prepared object)."""
    prep = load_prepared(path)
    out = {}
    for split in splits:
        ds = getattr(prep, split, None)
        if ds is not None and len(ds):
            out[split] = documents_from_dataset(ds, split, max_docs, group_field)
    return out, prep


def _missing_text(path: Path, n: int, row: dict, field: str) -> UserError:
    """The error for a line without a ``field`` string: it names the line's fields and, where one field holds a
    string, the setting that reads it."""
    strings = [k for k, v in row.items() if isinstance(v, str) and k not in ("id", "title")]
    fields = ", ".join(map(repr, list(row)[:8])) or "none"
    fix = (
        f"set data.text_field={strings[0]}"
        if len(strings) == 1
        else "set data.text_field=<the field holding the text>"
        if strings
        else f'give each line a "{field}" string'
    )
    return UserError(f'{path} line {n} has no "{field}" string (its fields: {fields}); {fix}')


def tokenize_jsonl(
    path: str | Path,
    tokenizer,
    split: str = "members",
    max_docs: int | None = None,
    group_field: str = "group",
    text_field: str = "text",
) -> list[EvalDocument]:
    """One ``{"id", "text"}`` object per line -> documents tokenised with ``tokenizer`` (no special tokens); the
    text is read from ``text_field`` (``data.text_field``) and the value under ``group_field`` (any JSON scalar)
    becomes the document's group."""
    path = Path(path)
    if path.is_dir():  # a folder of text files: one document per file, its text under text_field
        source: Iterable[tuple[object, dict]] = (
            (where, {**({k: v for k, v in row.items() if k != "text"}), text_field: row["text"]})
            for where, row in _folder_rows(path, max_docs)
        )
    else:
        source = jsonl_objects(path)

    rows, lines = [], {}
    for n, row in source:
        if not isinstance(row.get(text_field), str):
            raise _missing_text(path, n, row, text_field)
        doc_id = str(row.get("id", len(rows)))
        if doc_id in lines:  # two verdicts under one name could not be told apart
            raise UserError(
                f"{path} lines {lines[doc_id]} and {n} both have id {shown(doc_id)}; give each document "
                f"its own id (a repeated text may stay, under another id)"
            )
        lines[doc_id] = n
        count = row.get("repetitions")
        if isinstance(count, float) and math.isfinite(count) and count.is_integer():  # 2.0 from a float column
            count = row["repetitions"] = int(count)
        if count is not None and not (isinstance(count, int) and not isinstance(count, bool) and 0 <= count < 2**63):
            raise UserError(
                f"{path} line {n}: repetitions={str(count)[:40]} is not a whole number >= 0 (copies of the "
                f"document in the training data); fix or remove it"
            )
        rows.append(row)
        if max_docs is not None and len(rows) >= max_docs:
            break
    if not rows:
        raise UserError(f'{path} holds no documents; expected one {{"id", "text"}} object per line')
    if tokenizer is None:
        raise UserError(f"{path} is raw text but the model folder has no tokenizer; save the tokenizer with the model")
    # as prepare tokenises (goldfish.data.prepare): text spelling a special token is that text, not its id
    encoded = tokenizer([r[text_field] for r in rows], add_special_tokens=False, split_special_tokens=True)["input_ids"]
    return [
        EvalDocument(
            id=str(r.get("id", i)),
            tokens=tuple(ids),
            title=str(r.get("title") or ""),
            repetitions=_optional_int(r.get("repetitions", 0 if split == "nonmembers" else None)),
            split=split,
            text=r[text_field],
            group=_group(r.get(group_field)),
        )
        for i, (r, ids) in enumerate(zip(rows, encoded))
    ]


def load_eval_documents(
    data: str | Path,
    nonmembers: str | Path | None,
    tokenizer,
    max_docs: int | None = None,
    group_field: str = "group",
    text_field: str = "text",
) -> tuple[dict[str, list[EvalDocument]], object | None]:
    """Members (and nonmembers, when available) -> ({"members": [...], "nonmembers": [...]}, prepared or None);
    a prepared folder's canaries too (``"canaries"``: scored by the canaries task, never extracted unless asked).

    ``nonmembers`` overrides the data folder's own nonmembers split. A prepared folder given as ``nonmembers``
    contributes its ``nonmembers`` split.
    """
    data_path = _check_path(data, "--data")
    prep = None
    if is_prepared(data_path):
        splits, prep = read_prepared(data_path, ["members", "nonmembers", "canaries"], max_docs, group_field)
    else:
        splits = {"members": tokenize_jsonl(data_path, tokenizer, "members", max_docs, group_field, text_field)}
    if not splits.get("members"):
        raise UserError(f"{data_path} has no member documents to evaluate (its members split is empty)")
    if nonmembers is not None:
        nm_path = _check_path(nonmembers, "--nonmembers")
        if is_prepared(nm_path):
            nm, _ = read_prepared(nm_path, ["nonmembers"], max_docs, group_field)
            if not nm.get("nonmembers"):
                raise UserError(f"{nm_path} has no nonmembers split; pass a JSONL file or a prepared folder with one")
            splits["nonmembers"] = nm["nonmembers"]
        else:
            splits["nonmembers"] = tokenize_jsonl(nm_path, tokenizer, "nonmembers", max_docs, group_field, text_field)
    return splits, prep
