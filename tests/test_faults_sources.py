"""Faults of the source readers (issue 56): hidden folders are skipped like hidden files, and a long JSONL line's
unused fields are skipped without being built.

* A Jupyter ``.ipynb_checkpoints/part-0-checkpoint.jsonl`` beside ``part-0.jsonl`` was read as more background (120
  documents instead of 80, 40 of them twice) although hidden files were skipped.
"""

from __future__ import annotations

import json

import pytest

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
    assert [(d.id, d.text) for d in docs] == [(f"part-0:{i}", f"document {i}") for i in range(4)] + [
        ("sub/part-1:0", "document 4")
    ]
    assert [row[0] for row in files_identity(data)] == ["part-0.jsonl", "sub/part-1.jsonl"]

    texts = tmp_path / "texts"
    for name in ("a.txt", "sub/b.md", ".ipynb_checkpoints/a-checkpoint.txt", "sub/.git/c.txt", ".d.txt"):
        (texts / name).parent.mkdir(parents=True, exist_ok=True)
        (texts / name).write_text(f"text of {name}", encoding="utf-8")
    docs = [d for _, d in iter_source(SourceConfig(name="local", path=str(texts)))]
    assert [d.id for d in docs] == ["a.txt"]  # prepare's folder of .txt documents
    assert [f.relative_to(texts).as_posix() for f in text_files(texts)] == ["a.txt", "sub/b.md"]  # goldfish eval's


# ------------------------------------------------------------------------------------------------ a trained tokenizer


@pytest.mark.integration  # trains a tokenizer
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
    whole.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=600,
            special_tokens=[EOT],
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    got = train_bpe(texts, vocab_size=600)
    assert tokenizer_sha256(got) == tokenizer_sha256(_wrapped(whole))


def _wrapped(tok):
    from goldfish.data.tokenizer import _wrap

    return _wrap(tok)


@pytest.mark.integration  # two prepares
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


# ------------------------------------------------------------------------------------------------ long JSONL lines


def _recording_parses(monkeypatch) -> list[int]:
    """The length of every line (or rest of a line) ``sources._parse_line`` parses, as it parses them."""
    import goldfish.data.sources as sources

    parsed: list[int] = []
    parse = sources._parse_line

    def recording(raw, path, lineno):
        parsed.append(len(raw))
        return parse(raw, path, lineno)

    monkeypatch.setattr(sources, "_parse_line", recording)
    monkeypatch.setattr(sources, "LONG_LINE", 1024)
    return parsed


def test_a_long_lines_unused_fields_are_skipped_without_being_built(tmp_path, monkeypatch):
    """A short text beside a 100 MB metadata field took prepare from 406 to 787 MB, and an unused field of 5 M empty
    arrays cost 26 bytes per byte of line: the rest of a long line was parsed whole."""
    from goldfish.data.jsontext import LongText
    from goldfish.data.sources import jsonl_objects

    parsed = _recording_parses(monkeypatch)
    row = {
        "id": "d7",
        "title": "T",
        "meta": "x" * 20_000,
        "text": '  a short text \\ "quoted" ',
        "arrays": [[]] * 5000,
        "nested": {"k": ["]", '}"', {"a": [1, 2.5e3, None, True]}] * 300},
        "n": -1.5e-3,
        "tail": [1],
    }
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"text": "first", "title": ""}) + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    (_, first), (lineno, got) = list(jsonl_objects(path, long_field="text", keep=("title",)))
    assert first == {"text": "first", "title": ""} and lineno == 2
    assert isinstance(got["text"], LongText) and "".join(got["text"].chunks()) == row["text"]
    # every long value unused by the reader is skipped (None); short ones and the kept title are read
    assert {k: v for k, v in got.items() if k != "text"} == {
        "id": "d7",
        "title": "T",
        "meta": None,
        "arrays": None,
        "nested": None,
        "n": -1.5e-3,
        "tail": [1],
    }
    assert max(parsed) < 200  # the first line, then the rest of the long one without its long values

    cfg = SourceConfig(name="local", path=str(path), title_field="title")
    (_, short), (_, long) = list(iter_source(cfg, long_texts=True))
    assert (long.id, long.title, "".join(long.text.chunks())) == ("one:1", "T", row["text"].strip())


def test_a_text_field_of_the_wrong_type_is_refused_before_the_line_is_parsed(tmp_path, monkeypatch):
    from goldfish.errors import UserError

    parsed = _recording_parses(monkeypatch)
    path = tmp_path / "bad.jsonl"
    for value, kind in (([f"part {i}" for i in range(3000)], "array"), ({"body": "y" * 5000}, "object")):
        path.write_text(
            json.dumps({"id": "a", "text": "fine"}) + "\n" + json.dumps({"id": "b", "text": value}) + "\n",
            encoding="utf-8",
        )
        parsed.clear()
        with pytest.raises(UserError) as e:
            list(iter_source(SourceConfig(name="local", path=str(path), id_field="id"), long_texts=True))
        assert str(e.value) == f"{path}:2: field 'text' is a JSON {kind}, not text; give each line's 'text' a string"
        assert max(parsed) < 100  # the first line only


def test_skipped_values_end_where_json_says(monkeypatch):
    """split_long_row against json.loads: random lines of nested values (strings holding brackets, quotes and
    escapes), cut into tiny bracket-counting pieces; each unused value over the bound is null, the others as parsed."""
    import random

    import goldfish.data.jsontext as jsontext

    monkeypatch.setattr(jsontext, "SCAN_BYTES", 5)
    monkeypatch.setattr(jsontext, "SKIP_BYTES", 30)
    rng = random.Random(11)
    atoms = ["]", "[", "}", "{", '"', "\\", "a", " ", "é", '\\"]', ","]

    def value(depth: int):
        r = rng.random()
        if depth > 3 or r < 0.3:
            text = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 9)))
            return rng.choice([1, -2.5e-7, None, True, False, text])
        if r < 0.65:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        return {f"k{rng.randint(0, 9)}{rng.choice(atoms)}": value(depth + 1) for _ in range(rng.randint(0, 4))}

    for _ in range(300):
        row = {f"f{i}": value(0) for i in range(rng.randint(0, 5))}
        row["id"] = value(0)
        row["text"] = "t" * rng.randint(0, 40)
        style = {"ensure_ascii": rng.random() < 0.5, "separators": rng.choice([(",", ":"), (", ", ": ")])}
        line = json.dumps(dict(rng.sample(sorted(row.items()), len(row))), **style)
        rest, (lo, hi) = jsontext.split_long_row(line.encode(), "text", keep=("id",))
        loaded = json.loads(line)
        # a value's raw bytes in the line are its own dump in the line's style
        want = {k: (v if k == "id" or len(json.dumps(v, **style).encode()) <= 30 else None) for k, v in loaded.items()}
        want["text"] = ""
        assert json.loads(rest) == want, line
        assert line.encode()[lo:hi].decode() == loaded["text"]
