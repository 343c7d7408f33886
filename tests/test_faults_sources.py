"""Faults of the source readers (issue 56): hidden folders are skipped like hidden files, and a long JSONL line's
unused fields are skipped without being built.

* A Jupyter ``.ipynb_checkpoints/part-0-checkpoint.jsonl`` beside ``part-0.jsonl`` was read as more background (120
  documents instead of 80, 40 of them twice) although hidden files were skipped.
"""

from __future__ import annotations

import json

from goldfish.data import SourceConfig
from goldfish.data.sources import files_identity, iter_source
from goldfish.eval.inputs import text_files


def _jsonl(path, texts, key="text"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({key: t}) + "\n" for t in texts), encoding="utf-8")


def test_hidden_folders_are_skipped_like_hidden_files(tmp_path):
    data = tmp_path / "shards"
    _jsonl(data / "part-0.jsonl", [f"document {i}" for i in range(4)])
    _jsonl(data / "sub" / "part-1.jsonl", ["document 4"])
    _jsonl(data / ".ipynb_checkpoints" / "part-0-checkpoint.jsonl", [f"document {i}" for i in range(3)])
    _jsonl(data / "sub" / ".cache" / "part-9.jsonl", ["stale"])
    _jsonl(data / ".hidden.jsonl", ["hidden file"])
    docs = [d for _, d in iter_source(SourceConfig(name="local", path=str(data)))]
    assert [(d.id, d.text) for d in docs] == [(f"part-0:{i}", f"document {i}") for i in range(4)] + \
        [("sub/part-1:0", "document 4")]
    assert [row[0] for row in files_identity(data)] == ["part-0.jsonl", "sub/part-1.jsonl"]

    texts = tmp_path / "texts"
    for name in ("a.txt", "sub/b.md", ".ipynb_checkpoints/a-checkpoint.txt", "sub/.git/c.txt", ".d.txt"):
        (texts / name).parent.mkdir(parents=True, exist_ok=True)
        (texts / name).write_text(f"text of {name}", encoding="utf-8")
    docs = [d for _, d in iter_source(SourceConfig(name="local", path=str(texts)))]
    assert [d.id for d in docs] == ["a.txt"]  # prepare's folder of .txt documents
    assert [f.relative_to(texts).as_posix() for f in text_files(texts)] == ["a.txt", "sub/b.md"]  # goldfish eval's
