"""Safe loading: formats, run folders, refusing pickles (and never executing one), clear errors, vocab checks."""

from __future__ import annotations

import json
import os
import pickle

import pytest
import torch

from goldfish.eval.loading import check_vocab, load_model, load_model_tokenizer, resolve_model_path
from goldfish.errors import UserError

from eval_fixtures import save_model_folder, tiny_llama, tiny_tokenizer


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tok):
    model = tiny_llama(len(tok), seed=4)
    return save_model_folder(tmp_path_factory.mktemp("m") / "model", model, tok), model


def _logits(model, ids=(5, 6, 7, 8)):
    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits


def test_loads_hf_folder_and_run_folder_identically(saved, tok):
    path, original = saved
    loaded = load_model(path, device="cpu")
    assert not loaded.training
    assert torch.equal(_logits(loaded), _logits(original))
    run_folder = path.parent  # <run>/model is found from <run>
    assert resolve_model_path(run_folder).folder == path
    assert torch.equal(_logits(load_model(run_folder, device="cpu")), _logits(original))
    assert load_model_tokenizer(run_folder)("hello world")["input_ids"] == tok("hello world")["input_ids"]


def test_bfloat16_loading(saved):
    path, _ = saved
    assert next(load_model(path, dtype="bfloat16", device="cpu").parameters()).dtype == torch.bfloat16


def test_gguf_resolution(tmp_path):
    f = tmp_path / "tiny.Q4_1.gguf"
    f.write_bytes(b"GGUF")
    assert resolve_model_path(f).gguf_file == "tiny.Q4_1.gguf"
    assert resolve_model_path(tmp_path).gguf_file == "tiny.Q4_1.gguf"  # a folder with exactly one .gguf
    (tmp_path / "other.gguf").write_bytes(b"GGUF")
    with pytest.raises(UserError, match="2 .gguf files"):
        resolve_model_path(tmp_path)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing", "model path not found"),
        (lambda p: p, "not a model folder"),
        (lambda p: (p / "w.txt").write_text("x") and p / "w.txt", "not a .gguf"),
    ],
)
def test_bad_paths_give_one_line(tmp_path, make, message):
    with pytest.raises(UserError, match=message) as err:
        load_model(make(tmp_path))
    assert "\n" not in str(err.value)


def test_hub_names_are_never_fetched(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="model path not found"):
        load_model("gpt2")


def _pickle_folder(tmp_path, saved, payload=None):
    path, original = saved
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text((path / "config.json").read_text())
    if payload is None:
        torch.save(original.state_dict(), folder / "pytorch_model.bin")
    else:
        (folder / "pytorch_model.bin").write_bytes(payload)
    return folder, original


def test_pickle_weights_refused_unless_allowed(tmp_path, saved):
    folder, original = _pickle_folder(tmp_path, saved)
    with pytest.raises(UserError, match="model.allow_pickle=true"):
        load_model(folder)
    assert torch.equal(_logits(load_model(folder, allow_pickle=True, device="cpu")), _logits(original))


class _Exploit:
    def __reduce__(self):  # unpickling this would create a file
        return (os.makedirs, (os.environ["GOLDFISH_TEST_PWNED"],))


def test_malicious_pickle_is_never_executed(tmp_path, saved, monkeypatch):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("GOLDFISH_TEST_PWNED", str(marker))
    folder, _ = _pickle_folder(tmp_path, saved, payload=pickle.dumps({"x": _Exploit()}))
    with pytest.raises(UserError):
        load_model(folder)
    with pytest.raises(UserError, match="could not load"):
        load_model(folder, allow_pickle=True)  # weights_only=True refuses the payload
    assert not marker.exists()


def test_corrupt_safetensors_is_a_user_error(tmp_path, saved):
    path, _ = saved
    folder = tmp_path / "corrupt"
    folder.mkdir()
    (folder / "config.json").write_text((path / "config.json").read_text())
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(UserError, match="could not load"):
        load_model(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no weights"):
        load_model(folder)


def test_remote_code_is_refused(tmp_path, saved):
    path, _ = saved
    folder = tmp_path / "remote"
    folder.mkdir()
    cfg = json.loads((path / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "evil.EvilModel"}
    cfg["model_type"] = "evil"
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "evil.py").write_text("raise SystemExit('executed remote code')\n")
    (folder / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes())
    with pytest.raises(UserError, match="could not load"):
        load_model(folder)


def test_vocabulary_checks(saved, tok):
    path, model = saved
    check_vocab(model, tok, [[1, 2, len(tok) - 1]])
    small = tiny_llama(vocab_size=64)
    with pytest.raises(UserError, match="tokenizer has 300 tokens but the model's vocabulary has 64"):
        check_vocab(small, tok)
    with pytest.raises(UserError, match="token id 64"):
        check_vocab(small, None, [[1, 2], [64, 3]])
