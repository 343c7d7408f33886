"""Batched KV-cached decoding == batch-1 ``model.generate`` (token for token), on several architectures."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    GenerationConfig,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
)

from goldfish.eval.generate import beam_generate, buckets, eos_disabled, generate, left_pad, run_batched, sampling_pick

V = 96
S = 10


def _llama():
    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=V,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            initializer_range=0.3,
            bos_token_id=1,
            eos_token_id=2,
        )
    )


def _gpt2():
    return GPT2LMHeadModel(
        GPT2Config(
            vocab_size=V,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=128,
            initializer_range=0.3,
            bos_token_id=1,
            eos_token_id=2,
        )
    )


def _neox():  # Pythia's architecture (rotary on part of each head, parallel residual)
    return GPTNeoXForCausalLM(
        GPTNeoXConfig(
            vocab_size=V,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            initializer_range=0.3,
            bos_token_id=1,
            eos_token_id=2,
        )
    )


ARCHS = {"llama": _llama, "gpt2": _gpt2, "gpt_neox": _neox}


def _model(arch: str, seed: int = 0):
    torch.manual_seed(seed)
    return ARCHS[arch]().eval()


def _prefixes(n: int = 7, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = [1, 3, 17, 5, 12, 9, 2, 20, 6, 14][:n]  # ragged: lots of left padding in every batch
    return [torch.randint(3, V, (n_,), generator=g).tolist() for n_ in lengths]


def hf_reference(model, prefix: list[int], s: int, **kw) -> list[int]:
    """Batch-1 ``model.generate``: greedy (or beam), exactly ``s`` new tokens, eos neither stopping nor banned."""
    cfg = GenerationConfig(do_sample=False, max_new_tokens=s, min_new_tokens=s, pad_token_id=0, **kw)
    with eos_disabled(model), torch.no_grad():
        out = model.generate(
            torch.tensor([prefix]), attention_mask=torch.ones(1, len(prefix), dtype=torch.long), generation_config=cfg
        )
    return out[0, len(prefix) :].tolist()


@pytest.mark.parametrize("static_cache", [False, True], ids=["dynamic-cache", "static-cache"])
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_batched_greedy_equals_batch1_generate(arch, static_cache):
    model = _model(arch)
    prefixes = _prefixes()
    ours = generate(model, prefixes, S, pad_id=0, batch_size=3, progress=False, static_cache=static_cache)
    ref = [hf_reference(model, p, S) for p in prefixes]
    assert ours == ref
    assert all(len(o) == S for o in ours)
    assert len({tuple(o) for o in ours}) >= 3, "degenerate model: the comparison would prove little"


def test_batch_size_does_not_change_tokens():
    model = _model("llama", seed=3)
    prefixes = _prefixes(10, seed=4)
    outs = [
        generate(model, prefixes, S, pad_id=pad, batch_size=bs, progress=False)
        for bs, pad in ((1, 0), (4, 0), (10, 7), ("auto", 0))
    ]
    assert all(o == outs[0] for o in outs[1:])


def test_eos_neither_stops_nor_is_banned():
    model = _model("llama")
    prefix = _prefixes(1)[0]
    free = generate(model, [prefix], S, progress=False)[0]
    # make the model's eos the token greedy decoding emits third: plain generate would stop there
    model.generation_config.eos_token_id = free[2]
    model.config.eos_token_id = free[2]
    assert generate(model, [prefix], S, progress=False)[0] == free
    stopped = model.generate(torch.tensor([prefix]), do_sample=False, max_new_tokens=S, pad_token_id=0)
    assert stopped.shape[1] - len(prefix) == 3  # what we avoid: eos ends decoding early
    banned = model.generate(
        torch.tensor([prefix]), do_sample=False, max_new_tokens=S, min_new_tokens=S, pad_token_id=0
    )[0, len(prefix) :].tolist()
    assert banned[:2] == free[:2] and banned[2] != free[2]  # and min_new_tokens alone changes the argmax
    assert model.generation_config.eos_token_id == free[2]  # eos_disabled restored the user's setting


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_stop_at_eos_matches_plain_generate_both_ways(arch):
    """eos_id given: each continuation ends after its first eos, as batch-1 ``model.generate`` (eos on, no
    min_new_tokens) stops; not given: the full S tokens of ``generate`` with eos unset -- on the same model."""
    model = _model(arch)
    prefixes = _prefixes()
    free = generate(model, prefixes, S, batch_size=3, progress=False)
    eos = free[0][3]  # a token greedy decoding really emits: plain generate stops there for at least one prefix
    model.generation_config.eos_token_id = eos
    model.config.eos_token_id = eos
    stopped = generate(model, prefixes, S, batch_size=3, progress=False, eos_id=eos)
    for prefix, ours, full in zip(prefixes, stopped, free):
        with torch.no_grad():
            ref = model.generate(
                torch.tensor([prefix]),
                attention_mask=torch.ones(1, len(prefix), dtype=torch.long),
                do_sample=False,
                max_new_tokens=S,
                pad_token_id=0,
            )[0, len(prefix) :].tolist()
        assert ours == ref
        assert ours == (full[: full.index(eos) + 1] if eos in full else full)
    assert len(stopped[0]) == free[0].index(eos) + 1 <= 4  # it did stop early
    assert generate(model, prefixes, S, batch_size=3, progress=False) == [hf_reference(model, p, S) for p in prefixes]


def test_left_pad_positions_restart_at_each_row():
    ids, mask, pos = left_pad([[5, 6, 7], [8]], pad_id=0, device=torch.device("cpu"))
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert pos.tolist() == [[0, 1, 2], [0, 0, 0]]


def test_buckets_cover_every_index_once_and_group_lengths():
    lengths = [5, 1, 9, 5, 3, 9, 1, 7]
    batches = list(buckets(lengths, 3))
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) <= 3 for b in batches)
    assert [lengths[i] for i in batches[0]] == [9, 9, 7]  # longest first: an OOM shows up in the first batch
    exact = list(buckets(lengths, 8, exact=True))
    assert all(len({lengths[i] for i in b}) == 1 for b in exact)


def test_run_batched_halves_on_out_of_memory_and_keeps_order():
    model = _model("llama")
    seen = []

    def fn(idx):
        seen.append(len(idx))
        if len(idx) > 2:
            raise torch.cuda.OutOfMemoryError("simulated")
        return [i * 10 for i in idx]

    out = run_batched(fn, [3, 1, 4, 1, 5, 9, 2], 8, model, progress=False)
    assert out == [0, 10, 20, 30, 40, 50, 60]
    assert seen[:3] == [7, 4, 2]


def test_sampling_is_seeded_and_low_temperature_is_greedy():
    model = _model("gpt2")
    prefixes = _prefixes(4)
    a = generate(model, prefixes, S, pick=sampling_pick(1.0, torch.Generator().manual_seed(5)), progress=False)
    b = generate(model, prefixes, S, pick=sampling_pick(1.0, torch.Generator().manual_seed(5)), progress=False)
    c = generate(model, prefixes, S, pick=sampling_pick(1.0, torch.Generator().manual_seed(6)), progress=False)
    assert a == b and a != c
    cold = generate(model, prefixes, S, pick=sampling_pick(1e-4, torch.Generator().manual_seed(5)), progress=False)
    assert cold == generate(model, prefixes, S, progress=False)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_beam_search_equals_batch1_generate(arch):
    model = _model(arch, seed=2)
    prefixes = _prefixes(4, seed=2)
    ours = beam_generate(model, prefixes, S, 3, pad_id=0, batch_size=4, progress=False)
    assert ours == [hf_reference(model, p, S, num_beams=3) for p in prefixes]
    assert all(len(o) == S for o in ours)
