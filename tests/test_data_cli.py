"""``goldfish prepare`` from the command line: a run on a local corpus, and one clear line for each bad input."""

from __future__ import annotations

import json
from pathlib import Path

from goldfish.cli import main

WORDS = "amber basin cedar delta ember fjord grove harbor inlet juniper kestrel lagoon meadow".split()


def corpus(root: Path, n: int = 12, words: int = 40) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        text = " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(words)) + f" document {i}."
        (root / f"doc{i:02d}.txt").write_text(text, encoding="utf-8")
    return root


def recipe(tmp_path: Path, **extra) -> Path:
    body = {
        "source": {"name": "local", "path": str(tmp_path / "corpus")},
        "tokenizer": {"name": "bpe", "vocab_size": 300},
        "seq_len": 32,
        "packing": "pack",
        "min_tokens": 4,
        "doc_tokens": 24,
        "num_members": 4,
        "repetitions": [1, 3],
        "nonmember_mode": "held_out",
        "num_nonmembers": 4,
    }
    body.update(extra)
    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps(body), encoding="utf-8")  # JSON is valid YAML
    return path


def one_error_line(capsys, argv: list[str], match: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert match in err, err


def test_prepare_command_runs_and_summarises(tmp_path, capsys):
    corpus(tmp_path / "corpus")
    out = tmp_path / "out"
    assert main(["prepare", str(recipe(tmp_path)), "--out", str(out), "seed=3"]) == 0
    text = capsys.readouterr().out
    assert "prepared 'tiny'" in text and str(out) in text and "repetitions 1x: 2, 3x: 2" in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["name"] == "tiny" and manifest["seed"] == 3 and manifest["counts"]["members"] == 4
    assert manifest["config"]["repetitions"] == [1, 3]
    assert (out / "config.yaml").is_file() and (out / "tokenizer" / "tokenizer.json").is_file()


def test_existing_folder_is_left_untouched(tmp_path, capsys):
    corpus(tmp_path / "corpus")
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    one_error_line(capsys, ["prepare", str(recipe(tmp_path)), "--out", str(out)], "goldfish did not write there")
    assert [p.name for p in out.iterdir()] == ["precious.txt"] and (out / "precious.txt").read_text() == "keep me"
    # --overwrite replaces only a folder `goldfish prepare` made (its ownership marker), never the user's own
    one_error_line(
        capsys,
        ["prepare", str(recipe(tmp_path)), "--out", str(out), "--overwrite"],
        "--overwrite replaces only prepared data",
    )
    assert [p.name for p in out.iterdir()] == ["precious.txt"] and (out / "precious.txt").read_text() == "keep me"
    (out / "precious.txt").unlink()
    assert main(["prepare", str(recipe(tmp_path)), "--out", str(out), "--overwrite", "--quiet"]) == 0  # empty: fine
    assert main(["prepare", str(recipe(tmp_path)), "--out", str(out), "--overwrite", "--quiet", "seed=1"]) == 0
    assert json.loads((out / "manifest.json").read_text())["seed"] == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp folders, no lock left


def test_empty_corpus(tmp_path, capsys):
    (tmp_path / "corpus").mkdir()
    one_error_line(capsys, ["prepare", str(recipe(tmp_path)), "--out", str(tmp_path / "o")], "empty corpus")
    assert not (tmp_path / "o").exists()


def test_all_documents_too_short(tmp_path, capsys):
    corpus(tmp_path / "corpus", words=3)
    one_error_line(
        capsys,
        ["prepare", str(recipe(tmp_path)), "--out", str(tmp_path / "o"), "min_tokens=24"],
        "have fewer than min_tokens=24 tokens",
    )


def test_non_utf8_file(tmp_path, capsys):
    corpus(tmp_path / "corpus")
    (tmp_path / "corpus" / "old.txt").write_bytes("na\xefve r\xe9sum\xe9".encode("latin-1"))
    one_error_line(
        capsys,
        ["prepare", str(recipe(tmp_path)), "--out", str(tmp_path / "o")],
        f"{tmp_path / 'corpus' / 'old.txt'} is not UTF-8",
    )


def test_unknown_key_and_bad_values(tmp_path, capsys):
    corpus(tmp_path / "corpus")
    one_error_line(
        capsys,
        ["prepare", str(recipe(tmp_path, num_member=3)), "--out", str(tmp_path / "o")],
        "unknown config key 'num_member'",
    )
    one_error_line(
        capsys,
        ["prepare", str(recipe(tmp_path)), "packing=zigzag", "repetitions=[0]"],
        "packing='zigzag' is not one of",
    )
    one_error_line(
        capsys,
        ["prepare", str(recipe(tmp_path)), "nonmember_mode=later_chunk", "doc_tokens=null"],
        "later_chunk needs doc_tokens",
    )
    one_error_line(capsys, ["prepare", str(tmp_path / "missing.yaml")], "config file not found")
