"""Document sources: the real Wikipedia articles in the gensim wheel, KJV parsing, and local files."""

from __future__ import annotations

import json
import shutil

import pytest

from goldfish.data import SourceConfig, load_documents
from goldfish.data.kjv import parse_verses
from goldfish.data.wikipedia import clean_wikitext
from goldfish.errors import UserError


@pytest.fixture(scope="module")
def wiki():
    return load_documents(SourceConfig(name="wikipedia"))


def test_wikipedia_is_real_prose(wiki):
    titles = [d.title for d in wiki]
    assert len(wiki) >= 100
    assert {"Anarchism", "Aristotle", "Alabama", "Apollo 11"} <= set(titles)
    assert titles[0] == "Anarchism"  # dump order: the first non-redirect page
    assert len(set(d.id for d in wiki)) == len(wiki)
    by_title = {d.title: d.text for d in wiki}
    assert by_title["Anarchism"].startswith("Anarchism is a political philosophy that advocates self-governed")
    assert "Aristotle" in by_title["Aristotle"][:200] and "philosopher" in by_title["Aristotle"][:400]
    for d in wiki:
        assert len(d.text.split()) >= 50 and d.source == "wikipedia"
        for markup in ("[[", "]]", "{{", "}}", "'''", "<ref", "==", "#REDIRECT"):
            assert markup not in d.text, (d.title, markup)
    words = sum(len(d.text.split()) for d in wiki)
    assert words > 300_000  # ~106 full articles, not stubs


def test_wikipedia_min_words_and_cap():
    few = load_documents(SourceConfig(name="wikipedia", max_documents=5, min_words=2000))
    assert len(few) == 5 and all(len(d.text.split()) >= 2000 for d in few)


def test_clean_wikitext_by_hand():
    raw = (
        "'''Foo''' is a ''bar'' ([[baz|qux]]) of {{cite web|x=y}} the [[city]].\n\n== History ==\nIt was "
        "founded early.\n* \n* A list item with words\n\n== References ==\n* Some book, 1999."
    )
    want = "Foo is a bar (qux) of the city.\n\nHistory\nIt was founded early.\nA list item with words"
    assert clean_wikitext(raw) == want


def test_kjv_parse_by_hand():
    lines = [
        "Ge1:1 In the beginning God created the heaven and the earth.",
        "Ge1:2 And the earth was void.",
        "Ge2:1 Thus the heavens were finished.",
        "Exo1:1 Now these are the names.",
        "noise line",
        "Rev22:21 The grace of our Lord.",
    ]
    got = list(parse_verses(lines))
    assert got == [
        ("Genesis.1", "Genesis 1", "In the beginning God created the heaven and the earth. And the earth was void."),
        ("Genesis.2", "Genesis 2", "Thus the heavens were finished."),
        ("Exodus.1", "Exodus 1", "Now these are the names."),
        ("Leviticus.22", "Leviticus 22", "The grace of our Lord."),  # third abbreviation seen = third book
    ]


@pytest.mark.skipif(shutil.which("bible") is None, reason="Debian bible-kjv is not installed")
def test_kjv_chapters():
    docs = load_documents(SourceConfig(name="kjv", min_words=0))
    assert len(docs) == 1189
    assert docs[0].title == "Genesis 1" and docs[0].text.startswith("In the beginning God created the heaven")
    assert docs[-1].title == "Revelation 22" and docs[-1].text.endswith("be with you all. Amen.")


def test_kjv_missing_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("goldfish.data.kjv.BIBLE_PROGRAM", str(tmp_path / "bible"))
    with pytest.raises(UserError, match="apt-get install bible-kjv"):
        load_documents(SourceConfig(name="kjv"))


def test_local_txt_folder(tmp_path):
    (tmp_path / "b.txt").write_text("second document here\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("first document", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("   \n", encoding="utf-8")
    stats: dict = {}
    docs = load_documents(SourceConfig(name="local", path=str(tmp_path)), stats)
    assert [(d.id, d.title, d.text) for d in docs] == [
        ("b.txt", "b", "second document here"),
        ("sub/a.txt", "a", "first document"),
    ]
    assert stats == {"read": 3, "below_min_words": 1}


def test_local_jsonl_parquet_and_saved(tmp_path):
    import datasets

    rows = [{"key": f"k{i}", "name": f"T{i}", "body": f"text number {i}"} for i in range(3)]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    ds = datasets.Dataset.from_list(rows)
    ds.to_parquet(str(tmp_path / "c.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"))
    for path in (jsonl, tmp_path / "c.parquet", tmp_path / "saved"):
        cfg = SourceConfig(name="local", path=str(path), text_field="body", id_field="key", title_field="name")
        docs = load_documents(cfg)
        assert [(d.id, d.title, d.text) for d in docs] == [(f"k{i}", f"T{i}", f"text number {i}") for i in range(3)]
    plain = load_documents(SourceConfig(name="local", path=str(jsonl), text_field="body"))
    assert [d.id for d in plain] == ["c:0", "c:1", "c:2"]
    with pytest.raises(UserError, match="no field 'text'.*key, name, body"):
        load_documents(SourceConfig(name="local", path=str(jsonl)))


def test_local_errors(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 au lait".encode("latin-1"))
    with pytest.raises(UserError, match=r"latin1\.txt is not UTF-8"):
        load_documents(SourceConfig(name="local", path=str(tmp_path)))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no documents"):
        load_documents(SourceConfig(name="local", path=str(empty)))
    with pytest.raises(UserError, match="not found"):
        load_documents(SourceConfig(name="local", path=str(tmp_path / "nope.jsonl")))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "ok"}\n{oops\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"broken\.jsonl:2 is not valid JSON"):
        load_documents(SourceConfig(name="local", path=str(broken)))
