"""``goldfish mask`` on the offline GPT-2 tokenizer: marks exactly the tokens goldfish_mask drops."""

from __future__ import annotations

import json

import torch

from goldfish import goldfish_mask
from goldfish.cli import main

TEXT = "Hello world. " * 20


def test_mask_command_json_matches_library(capsys):
    assert main(["mask", "--text", TEXT, "--k", "3", "--h", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"][:2] == [15496, 995]  # GPT-2 BPE, independent published ids
    expected = goldfish_mask(torch.tensor(out["tokens"]), 3, 5, special_ids=[50256]).tolist()
    assert out["dropped"] == expected
    assert out["drop_fraction"] == sum(expected) / len(expected)  # a count over a count: one rounded division
    # the same text repeated: once the window is full, the mask repeats with the text's period (3 tokens)
    d = out["dropped"]
    assert d[10:40] == d[13:43]


def test_mask_command_marks_dropped_tokens(capsys):
    assert main(["mask", "--text", TEXT, "--k", "2"]) == 0
    text, summary = capsys.readouterr().out.rsplit("\n\n", 1)
    assert "[" in text and text.replace("[", "").replace("]", "") == TEXT
    assert "tokens dropped" in summary


def test_mask_command_user_errors(capsys, tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9".encode("latin-1"))
    for argv in (
        ["--text", "x", "--k", "1"],
        ["--text", "x", "--strategy", "nope"],
        ["--file", str(bad)],
        ["--text", "   "],
    ):
        assert main(["mask", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ")
