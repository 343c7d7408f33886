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


# ------------------------------------------------------------------------------------------------ a trained tokenizer


def test_a_bpe_trained_a_piece_at_a_time_is_the_whole_texts_bpe():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from test_faults_bounded import long_text

    from goldfish.data.stream import PIECE_CHARS
    from goldfish.data.tokenizer import EOT, tokenizer_sha256, train_bpe

    texts = [long_text(3 * PIECE_CHARS + 777, seed=8), "a short one", long_text(1000, seed=9)]
    # by hand: the trainer given each text whole (what prepare did before issue 56)
    whole = Tokenizer(models.BPE())
    whole.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    whole.decoder = decoders.ByteLevel()
    whole.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=600, special_tokens=[EOT], show_progress=False,
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    got = train_bpe(texts, vocab_size=600)
    assert tokenizer_sha256(got) == tokenizer_sha256(_wrapped(whole))


def _wrapped(tok):
    from goldfish.data.tokenizer import _wrap

    return _wrap(tok)


def test_a_bpe_prepare_never_parses_a_long_line_whole(tmp_path, monkeypatch):
    """BPE training read the main source whole (every text in memory, a long line parsed whole, each text given to
    the trainer whole): one 30 MB document took prepare from 375 to 3,340 MiB. Now the long line is held once as raw
    bytes and fed in pieces; the prepared folder is the same as when the line is parsed whole."""
    from test_data_stream import files, recipe, texts, write_jsonl
    from test_faults_bounded import long_text

    import goldfish.data.jsontext as jsontext
    import goldfish.data.sources as sources
    from goldfish.config import from_dict
    from goldfish.data import PrepareConfig
    from goldfish.data.prepare import prepare

    rows = [{"id": f"m{i}", "text": t} for i, t in enumerate(texts(60, 120, 2))]
    rows.insert(40, {"id": "long", "text": long_text(150_000, seed=10)})
    write_jsonl(tmp_path / "main.jsonl", rows)
    rec = recipe(tmp_path, tokenizer={"name": "bpe", "vocab_size": 400}, num_members=6, num_nonmembers=6)
    rec.pop("background_source")  # the background is what the split leaves of the main source: the long line too
    cfg = from_dict(PrepareConfig, rec)
    whole = prepare(cfg, tmp_path / "whole", progress=False, num_proc=1)

    parsed: list[int] = []
    parse = sources._parse_line

    def recording(raw, path, lineno):
        parsed.append(len(raw))
        return parse(raw, path, lineno)

    monkeypatch.setattr(sources, "_parse_line", recording)
    monkeypatch.setattr(sources, "LONG_LINE", 4096)
    monkeypatch.setattr(jsontext, "LONG_LINE", 4096)
    read = prepare(cfg, tmp_path / "pieces" / "p", progress=False, num_proc=1)
    assert parsed and max(parsed) < 4096  # every pass: the BPE's texts, the split's scan and fetch, the background
    assert files(read) == files(whole)
