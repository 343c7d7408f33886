"""A long JSONL line's text field (goldfish.data.jsontext): held as its raw bytes and decoded a piece at a time, it
reads as exactly what ``json.loads`` gives for the whole line, fails with the whole line's one-line errors, and a
prepare that reads long lines this way writes the same background bytes as one that parses them whole."""

from __future__ import annotations

import json
import random

import pytest
from test_data_stream import corpus, files, recipe, texts, write_jsonl  # noqa: F401 - the module-scoped corpus

import goldfish.data.jsontext as jsontext
import goldfish.data.sources as sources
from goldfish.config import from_dict
from goldfish.data import PrepareConfig
from goldfish.data.jsontext import LongText, split_long_row
from goldfish.data.prepare import prepare
from goldfish.data.sources import jsonl_objects
from goldfish.data.stream import has_words, pieces, text_sha256
from goldfish.errors import UserError

# characters that stress the cuts: multi-byte UTF-8, an astral character (a surrogate pair when escaped), quotes,
# backslashes, whitespace that JSON escapes, a line separator, text that looks like an escape
ALPHABET = ["a", "b", " ", "\n", "\t", "é", "日", "😀", '"', "\\", "\u2028", "\\u", "d83d", "\x0b"]


def _long(text: str, ascii_only: bool, **extra) -> tuple[bytes, LongText]:
    line = json.dumps({"id": 3, **extra, "text": text, "x": [1, {"text": "no"}]}, ensure_ascii=ascii_only).encode()
    rest, (lo, hi) = split_long_row(line, "text")
    assert json.loads(rest) == {"id": 3, **extra, "text": "", "x": [1, {"text": "no"}]}
    return line, LongText(memoryview(line)[lo:hi], "f.jsonl:1", lo + 1)


@pytest.mark.parametrize("chunk", [1, 16, 17, 19, 23, 64])
def test_a_long_text_decoded_in_pieces_is_the_whole_strings_text(chunk, monkeypatch):
    monkeypatch.setattr(jsontext, "CHUNK_BYTES", chunk)  # tiny pieces: every kind of cut is met
    rng = random.Random(chunk)
    for _ in range(400):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 70)))
        _, long = _long(text, ascii_only=rng.random() < 0.5)
        assert "".join(long.chunks()) == text and len(long) == len(text)
        stripped = long.strip()
        assert "".join(stripped.chunks()) == text.strip() and len(stripped) == len(text.strip())
        assert bool(stripped) == bool(text.strip())
        assert text_sha256(long) == text_sha256(text)
        assert list(pieces(long, 8)) == list(pieces(text, 8))  # the same cuts as the whole text's
        for floor in (1, 2, 5):
            assert has_words(long, floor) == has_words(text, floor)


def test_the_text_field_is_found_at_the_top_level_only_and_the_last_one_wins():
    line = (
        b'{"meta": {"text": "inner"}, "list": ["text", {"text": "x"}], "te\\u0078t": "first", "n": 1.5, '
        b'"text" : "second", "tail": null}'
    )
    rest, (lo, hi) = split_long_row(line, "text")
    assert line[lo:hi] == b"second" and json.loads(rest)["meta"] == {"text": "inner"}
    assert json.loads(rest)["text"] == ""
    rest, span = split_long_row(b'{"text": 12, "other": "a"}', "text")  # not a string: left for the reader to name
    assert span is None and json.loads(rest) == {"text": 12, "other": "a"}
    assert split_long_row(b'{"title": "text", "body": "a"}', "text")[1] is None
    assert split_long_row(b'{"text": "never closed', "text") is None


@pytest.mark.parametrize(
    "bad, message",
    [
        (b"caf\xc3", "is not UTF-8 text"),  # a truncated character
        (b"a \\x b", "is not valid JSON"),  # no such escape
        (b"a \x01 b", "is not valid JSON"),  # a raw control character
        (b"lone \\ud800 surrogate", "lone UTF-16 surrogate"),
    ],
)
def test_a_bad_long_line_fails_with_the_whole_lines_one_line_error(bad, message, tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "LONG_LINE", 64)
    monkeypatch.setattr(jsontext, "CHUNK_BYTES", 16)
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"id": "d", "text": "' + b"padding " * 20 + bad + b" " * 40 + b'"}\n')
    errors = []
    for field in ("text", None):  # read as LongText, then as the whole line
        with pytest.raises(UserError) as e:
            list(jsonl_objects(path, long_field=field))
        errors.append(str(e.value))
    assert all(f"{path}:2 " in m and message in m for m in errors), errors


def test_a_prepare_that_reads_long_lines_in_pieces_writes_the_same_bytes(corpus, tmp_path, monkeypatch):  # noqa: F811
    rng = random.Random(7)
    bg = tmp_path / "bg"
    bg.mkdir()
    docs = [{"text": "  " + t + " \n", "id": f"b{i}"} for i, t in enumerate(texts(40, 300, 5))]
    docs[3]["text"] = "word " * 30_000 + "".join(rng.choice(ALPHABET[:8]) for _ in range(20_000))  # over 64 Ki chars
    write_jsonl(bg / "part.jsonl", docs)
    cfg = from_dict(PrepareConfig, recipe(corpus, background_source={"name": "local", "path": str(bg)}))
    whole = prepare(cfg, tmp_path / "whole", progress=False, num_proc=1)  # every line parsed whole (1 MiB bound)
    monkeypatch.setattr(sources, "LONG_LINE", 512)  # now every background line is read as a LongText
    monkeypatch.setattr(jsontext, "LONG_LINE", 512)
    monkeypatch.setattr(jsontext, "CHUNK_BYTES", 100)
    read = list(sources.iter_source(cfg.background_source, 0, long_texts=True))
    assert all(isinstance(d.text, LongText) for _, d in read)
    assert ["".join(d.text.chunks()) for _, d in read] == [d["text"].strip() for d in docs]
    pieces_read = prepare(cfg, tmp_path / "pieces" / "p", progress=False, num_proc=1)
    assert files(pieces_read) == files(whole)


@pytest.mark.parametrize("chunk", [63, None])
def test_long_documents_written_as_they_are_tokenized_are_the_whole_documents_chunks(chunk, corpus, tmp_path):  # noqa: F811
    from goldfish.data import load_prepared
    from goldfish.data.stream import PIECE_CHARS

    rng = random.Random(11)
    main = [json.loads(line)["text"] for line in (corpus / "main.jsonl").read_text().splitlines()]
    long = [
        "word " * (PIECE_CHARS // 3) + "".join(rng.choice(ALPHABET[:8]) for _ in range(PIECE_CHARS)),
        " ".join(main) + " tail " * 9_000,  # holds every target: a near-duplicate, rolled back once written
        "x" * (PIECE_CHARS + 7) + " end",
    ]  # one huge word: cut blind, as pieces() does
    docs = texts(12, 300, 8)
    docs = docs[:3] + [long[0]] + docs[3:6] + [long[1]] + docs[6:9] + [long[2]] + docs[9:]
    bg = tmp_path / "bg"
    bg.mkdir()
    write_jsonl(bg / "part.jsonl", [{"text": t} for t in docs])
    rec = recipe(
        corpus,
        background_source={"name": "local", "path": str(bg)},
        background_chunk_tokens=chunk,
        background_dedup={"ngram": 13, "overlap": 0.2},
        shard_documents=64,
    )
    data = load_prepared(prepare(from_dict(PrepareConfig, rec), tmp_path / "p", progress=False, num_proc=1))
    tok = data.tokenizer
    want = []
    for t in docs:  # independently: each text tokenized whole, cut, filtered; the near-duplicate dropped
        if t is long[1]:
            continue
        ids = tok(t.strip(), add_special_tokens=False, split_special_tokens=True)["input_ids"]
        cuts = [ids] if chunk is None else [ids[s : s + chunk] for s in range(0, len(ids), chunk)]
        want += [c for c in cuts if len(c) >= 16]
    assert [data.background[i].tolist() for i in range(len(data.background))] == want
    assert data.manifest["stats"]["background_near_duplicates"] == 1
