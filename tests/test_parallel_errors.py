"""Layout validation: every factor of a failed product is named, all problems come in one ConfigError."""

from __future__ import annotations

import pytest
from torch import nn

from dist_utils import tiny_config
from goldfish.engines.parallelize import StageModule, parallel_dims, stage_layers
from goldfish.errors import ConfigError


def test_auto_dp_fills_the_world():
    dims = parallel_dims(pp=2, dp=0, tp=2, world_size=8, model_config=tiny_config())
    assert (dims.pp, dims.dp, dims.tp, dims.world_size) == (2, 2, 2, 8)


def test_world_mismatch_names_every_factor():
    with pytest.raises(ConfigError, match=r"pp\(2\)·dp\(2\)·tp\(2\)=8 ≠ world size 4"):
        parallel_dims(pp=2, dp=2, tp=2, world_size=4)


def test_auto_dp_needs_a_divisor_of_the_world():
    with pytest.raises(ConfigError, match=r"pp\(1\)·tp\(3\)=3 does not divide world size 4"):
        parallel_dims(pp=1, dp=0, tp=3, world_size=4)


def test_tp_must_divide_heads_kv_heads_and_mlp():
    cfg = tiny_config()  # 4 heads, 2 KV heads, intermediate 64
    with pytest.raises(ConfigError) as err:
        parallel_dims(pp=1, dp=1, tp=4, world_size=4, model_config=cfg)
    message = str(err.value)
    assert "num_key_value_heads (2)" in message and "num_attention_heads" not in message
    with pytest.raises(ConfigError, match=r"tp=3 must divide the model's num_attention_heads \(4\)"):
        parallel_dims(pp=1, dp=1, tp=3, world_size=3, model_config=cfg)


def test_pp_beyond_layers_and_world_mismatch_reported_together():
    with pytest.raises(ConfigError) as err:
        parallel_dims(pp=3, dp=2, tp=1, world_size=4, model_config=tiny_config(layers=2))
    message = str(err.value)
    assert "pp(3)·dp(2)·tp(1)=6 ≠ world size 4" in message
    assert "parallel.pp=3 exceeds the model's 2 decoder layers" in message


def test_pipeline_chunks_must_divide_the_micro_batch():
    with pytest.raises(ConfigError, match=r"pp_microbatches=2 must divide schedule.micro_batch_size=5"):
        parallel_dims(pp=2, dp=1, tp=1, world_size=2, microbatches=2, micro_batch_rows=5)
    assert parallel_dims(pp=2, dp=1, tp=1, world_size=2, microbatches=5, micro_batch_rows=5).pp == 2


def test_1f1b_needs_a_microbatch_per_stage():
    with pytest.raises(ConfigError, match=r"pp_microbatches=2 must be >= parallel.pp=4 for the 1f1b"):
        parallel_dims(pp=4, dp=1, tp=1, world_size=4, schedule="1f1b", microbatches=2)
    assert parallel_dims(pp=4, dp=1, tp=1, world_size=4, schedule="gpipe", microbatches=2).pp == 4


@pytest.mark.parametrize(
    "layers,pp,expected",
    [
        (4, 2, [[0, 1], [2, 3]]),
        (5, 2, [[0, 1, 2], [3, 4]]),
        (3, 3, [[0], [1], [2]]),
        (7, 3, [[0, 1, 2], [3, 4], [5, 6]]),
    ],
)
def test_stage_layers_cover_every_layer_once(layers, pp, expected):
    assert [list(stage_layers(layers, pp, s)) for s in range(pp)] == expected


def test_stage_module_keeps_hf_names():
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(tiny_config(layers=3))
    last = StageModule(model, stage_layers(3, 2, 1), first=False, last=True)
    names = {n for n, _ in last.named_parameters()}
    assert "lm_head.weight" in names and "model.norm.weight" in names and "model.embed_tokens.weight" not in names
    assert {n.split(".")[2] for n in names if n.startswith("model.layers.")} == {"2"}
    assert set(model.state_dict()) >= names and isinstance(last.model.layers["2"], nn.Module)
