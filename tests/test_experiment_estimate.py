"""Dry-run estimates (goldfish/estimate.py) against published parameter counts and hand calculations."""

from __future__ import annotations

import pytest
from tolerances import U64, rounding

from goldfish.config import from_dict
from goldfish.errors import ConfigError
from goldfish.engines.axonn import AxonnEngine
from goldfish.engines.native import NativeEngine
from goldfish.estimate import GIB, ModelShape, estimate_memory, estimate_time, layout_of, shape_of
from goldfish.train_config import AxonnConfig, ModelConfig, ParallelConfig, TrainConfig


def shape(name: str, vocab: int) -> ModelShape:
    return shape_of(ModelConfig(name=name), vocab)


@pytest.mark.parametrize(
    "name, vocab, published",
    [
        ("llama2-7B", 32000, 6_738_415_616),  # meta-llama/Llama-2-7b-hf
        ("llama2-13B", 32000, 13_015_864_320),  # meta-llama/Llama-2-13b-hf
        ("llama2-70B", 32000, 68_976_648_192),  # meta-llama/Llama-2-70b-hf
        ("llama3.1-405B", 128256, 405_853_388_800),  # meta-llama/Llama-3.1-405B
        ("tinyllama-1.1B", 32000, 1_100_048_384),  # TinyLlama/TinyLlama-1.1B
    ],
)
def test_parameter_counts_match_the_published_models(name, vocab, published):
    assert shape(name, vocab).params == published


def test_demo_shape_by_hand():
    s = shape("llama-demo", 4096)
    # per block: q,o 2·128² + k,v 2·128·128 + gate,up,down 3·128·320 = 188416, + 2 norms 256
    assert s.layer_matrix_params == 188_416
    assert s.params == 4096 * 128 + 2 * (188_416 + 256) + 128 == 901_760  # tied: embedding counted once


def test_shape_and_flops_agree_with_a_built_model():
    """A second implementation: count the weights of a real (tiny) HF model and use the trainer's FLOP formula."""
    from goldfish.models import build_model, count_parameters, flops_per_token

    for cfg in (
        ModelConfig(name="llama-demo"),
        ModelConfig(name="llama-40M", hidden_size=64, num_layers=2, num_heads=4, intermediate_size=96),
    ):
        model = build_model(cfg, vocab_size=300, seed=0)
        s = shape_of(cfg, 300)
        assert s.params == count_parameters(model)
        assert s.flops_per_token(128) == flops_per_token(model, 128)  # integer arithmetic on both sides


def train_cfg(**sections) -> TrainConfig:
    return from_dict(TrainConfig, sections)


def test_memory_of_llama2_7b_on_tp2_by_hand():
    s = shape("llama2-7B", 32000)
    cfg = train_cfg(parallel={"tp": 2}, schedule={"global_batch_size": 4, "micro_batch_size": 1}, precision="bf16")
    layout = layout_of(cfg, s, world=8)
    assert (layout.weight_shard, layout.pp, layout.dp, layout.description) == (2, 1, 4, "native tp=2 pp=1 dp=4")
    mem = estimate_memory(s, layout, micro_batch=1, seq_len=4096, precision="bf16")
    # params on a device: 32 blocks x (202,375,168 / 2 + 8192 norms) + embedding + head (replicated) + final norm
    params = 32 * (202_375_168 // 2 + 8192) + 2 * 32000 * 4096 + 4096
    assert params == 3_500_412_928
    assert mem.weights == 4 * params and mem.grads == 4 * params and mem.optimizer == 8 * params
    # activations: per token per block 4·4096 + (2·4096 + 2·4096 + 4·11008) / 2 = 46,592 elements, bf16
    assert mem.activations == 4096 * 32 * 46_592 * 2
    assert mem.logits == 4096 * 32000 * (2 + 4)
    assert mem.total / GIB == (16 * params + 4096 * 32 * 46_592 * 2 + 4096 * 32000 * 6) / 2**30  # integers / 2^30


def test_fsdp_shards_state_over_data_ranks_and_pipeline_holds_fewer_layers():
    s = shape("llama2-7B", 32000)
    plain = estimate_memory(s, NativeEngine.layout_for(ParallelConfig(), 8), 1, 4096)
    fsdp = estimate_memory(s, NativeEngine.layout_for(ParallelConfig(fsdp=True), 8), 1, 4096)
    assert fsdp.optimizer == plain.optimizer / 8  # a division by a power of two is exact
    piped = estimate_memory(s, NativeEngine.layout_for(ParallelConfig(pp=4), 4), 1, 4096)
    # the busiest stage: 8 of 32 blocks and the larger of embedding / head (equal here)
    assert piped.weights == 4 * (8 * (202_375_168 + 8192) + 32000 * 4096 + 4096)
    # 1F1B with 8 chunks keeps min(pp, 8) = 4 of 8 chunks in flight: half the micro-batch's activations
    one_f = estimate_memory(s, NativeEngine.layout_for(ParallelConfig(pp=4, pp_microbatches=8), 4), 1, 4096)
    gpipe = estimate_memory(
        s, NativeEngine.layout_for(ParallelConfig(pp=4, pp_microbatches=8, pp_schedule="gpipe"), 4), 1, 4096
    )
    assert one_f.activations == gpipe.activations / 2


def test_axonn_shards_layer_matrices_and_head_over_the_3d_grid():
    s = shape("llama2-70B", 32000)
    layout = AxonnEngine.layout_for(AxonnConfig(row=2, col=2, depth=2), 64)
    assert layout.description == "axonn row=2 col=2 depth=2 data=8"
    mem = estimate_memory(s, layout, 1, 4096)
    params = 80 * (855_638_016 / 8 + 2 * 8192) + 32000 * 8192 + 32000 * 8192 / 8 + 8192
    assert mem.weights == pytest.approx(4 * params, rel=rounding(6, U64), abs=0)  # float64 sum of 6 products


def test_layout_errors_print_every_factor():
    s = shape("llama2-7B", 32000)
    with pytest.raises(ConfigError, match=r"pp\(2\)·dp\(2\)·tp\(2\)=8 ≠ world size 4"):
        layout_of(train_cfg(parallel={"tp": 2, "pp": 2, "dp": 2}), s, world=4)
    with pytest.raises(ConfigError, match=r"parallel.tp=3 must divide the model's num_attention_heads \(32\)"):
        layout_of(train_cfg(parallel={"tp": 3}), s, world=3)
    with pytest.raises(ConfigError, match=r"row\(2\)·col\(2\)·depth\(2\)=8 does not divide world size 6"):
        layout_of(train_cfg(engine="axonn", axonn={"row": 2, "col": 2, "depth": 2}), s, world=6)
    with pytest.raises(ConfigError, match=r"axonn.row=3 does not divide hidden_size=4096"):
        layout_of(train_cfg(engine="axonn", axonn={"row": 3}), s, world=3)
    with pytest.raises(ConfigError, match=r"global_batch_size=6 is not divisible by micro_batch_size\(1\)·dp\(4\)=4"):
        layout_of(train_cfg(schedule={"global_batch_size": 6, "micro_batch_size": 1}), s, world=4)


def test_time_estimate_by_hand():
    s = shape("tinyllama-1.1B", 32000)
    flops = s.flops_per_token(2048)
    # 6 N (N without the untied input embedding) + 12 L H s
    assert flops == 6 * (1_100_048_384 - 32000 * 2048) + 12 * 22 * 2048 * 2048
    seconds = estimate_time(1e9, flops, world=8, device="h100", mfu=0.5)
    assert seconds == pytest.approx(1e9 * flops / (8 * 989e12 * 0.5), rel=rounding(4, U64), abs=0)  # 4 float64 ops
    assert estimate_time(1e9, flops, world=8, device="cpu", mfu=0.5) is None


def test_expected_rows_of_one_epoch_before_preparation():
    """--dry-run's token budget for `epochs` before the data exists: members x copies + background chunks."""
    from goldfish.data.config import PrepareConfig
    from goldfish.experiment.dryrun import expected_rows

    def cfg(**kw) -> PrepareConfig:
        base = dict(
            seq_len=2048,
            min_tokens=256,
            doc_tokens=256,
            num_members=1000,
            repetitions=[1],
            num_background=20000,
            background_chunk_tokens=2048,
            packing="pack",
        )
        return PrepareConfig(**{**base, **kw})

    assert expected_rows(cfg()) == -(-(1000 * 257 + 20000 * 2049) // 2048)  # 20,136: each document + EOS
    assert expected_rows(cfg(packing="one_per_row")) == 1000 + 20000  # one row per document
    assert expected_rows(cfg(repetitions=[1, 2], num_background=0, packing="one_per_row")) == 1500
    assert expected_rows(cfg(min_tokens=32, nonmember_mode="held_out")) is None  # member lengths open: no estimate
    # random_split and later_chunk only take documents with >= doc_tokens: every member is exactly doc_tokens
    assert expected_rows(cfg(min_tokens=32, nonmember_mode="random_split")) == expected_rows(cfg())
    assert expected_rows(cfg(num_background=None)) is None


def _budget_experiment(tmp_path, **top):
    from goldfish.config import from_dict
    from goldfish.experiment import ExperimentConfig

    data = {
        "name": "bud",
        "tokenizer": {"name": "gpt2"},
        "seq_len": 256,
        "packing": "pack",
        "min_tokens": 255,
        "doc_tokens": 255,
        "num_members": 100,
        "repetitions": [2, 4],
        "nonmember_mode": "random_split",
        "num_background": 900,
        "background_chunk_tokens": 255,
    }
    base = {
        "name": "bud",
        "out": str(tmp_path / "exp"),
        "data": data,
        "control_mode": "background",
        "train": {
            "model": {"name": "llama-demo"},
            "schedule": {"epochs": 3, "global_batch_size": 8, "micro_batch_size": 8},
        },
        "arms": {"standard": {"train.loss.type": "standard"}},
    }
    return from_dict(ExperimentConfig, {**base, **top})


def test_dry_run_prints_the_targets_share_and_reads_and_refuses_a_cycling_background(tmp_path, capsys):
    """Hand values: 100 members of 255 tokens + EOS (= one 256-token row each), 50 with 2 copies and 50 with 4
    (300 rows), 900 background chunks of 255 + EOS (900 rows): targets 300 / 1200 = 25 % of the tokens. Three
    epochs read the background 3 times and the targets 6 and 12 times: refused unless allowed."""
    from goldfish.cli import main
    from goldfish.experiment.dryrun import dry_run, format_estimates
    from goldfish.experiment.pipeline import default_pipeline
    from goldfish.experiment.plan import plan_cells

    cfg = _budget_experiment(tmp_path)
    plans = plan_cells(cfg, default_pipeline())
    rows, problems = dry_run(cfg, plans)
    arm = next(r for r in rows if r["cell"] == "standard")["budget"]
    # 300·256 / (1200·256): integers below 2^53 summed exactly, one correctly rounded division (= 1/4 exactly)
    assert arm.share == 0.25 and arm.reads == [6.0, 12.0] and arm.passes == 3.0
    assert arm.rows == 1200
    control = next(r for r in rows if r["cell"] == "control")["budget"]  # the background-trained control
    assert control.share == 0.0 and control.reads == [] and control.passes == 3.0
    table = format_estimates(rows)
    assert "targets" in table and "25.00%" in table and "6/12" in table
    assert len(problems) == 2 and all("reads its background 3.00 times" in p for p in problems)
    assert "its targets 6, 12 times" in problems[1] and "allow_background_cycles: true" in problems[1]
    # allowed on purpose
    allowed = _budget_experiment(tmp_path, allow_background_cycles=True)
    assert dry_run(allowed, plan_cells(allowed, default_pipeline()))[1] == []
    # one epoch reads the background once: no problem; a token budget of half an epoch halves every read
    once = _budget_experiment(
        tmp_path,
        train={
            "model": {"name": "llama-demo"},
            "schedule": {"epochs": 1, "global_batch_size": 8, "micro_batch_size": 8},
        },
    )
    rows, problems = dry_run(once, plan_cells(once, default_pipeline()))
    assert problems == [] and rows[1]["budget"].reads == [2.0, 4.0]
    half = _budget_experiment(
        tmp_path,
        train={
            "model": {"name": "llama-demo"},
            "schedule": {"max_tokens": 600 * 256, "global_batch_size": 8, "micro_batch_size": 8},
        },
    )
    assert dry_run(half, plan_cells(half, default_pipeline()))[0][1]["budget"].passes == 0.5  # 75 of 150 steps
    # the command line: one error line, exit 2
    import yaml

    from goldfish.config import to_dict

    path = tmp_path / "bud.yaml"
    path.write_text(yaml.safe_dump(to_dict(cfg)))
    capsys.readouterr()
    assert main(["experiment", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "reads its background 3.00 times" in err[0]
