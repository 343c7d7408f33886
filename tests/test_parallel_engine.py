"""``NativeEngine`` through the trainer's interface: tp / pp / FSDP layouts train like one process, resume exactly
from per-rank state, and export a Hugging Face folder with the one-process weights (gloo, CPU, fp32)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from dist_utils import (
    LR,
    MAX_NORM,
    ROWS,
    STEPS,
    adamw,
    assert_stats_close,
    build_model,
    global_batches,
    kept_count,
    parity_tolerance,
    reference_run,
    run_distributed,
    tiny_config,
)

MICRO_ROWS = 2


def _engine(layout: dict):
    from goldfish.engines.native import NativeEngine
    from goldfish.loss import EngineLoss
    from goldfish.train_config import ParallelConfig, TrainConfig

    # "train": further TrainConfig fields (performance options), applied on top of fp32
    cfg = TrainConfig(parallel=ParallelConfig(**layout["parallel"]), **{"precision": "fp32", **layout.get("train", {})})
    model_cfg = tiny_config(layers=layout.get("layers", 2), tied=layout.get("tied", False))
    engine = NativeEngine(
        cfg.parallel,
        cfg.precision,
        EngineLoss(cfg.loss.ce_chunk_tokens),
        compile=cfg.compile,
        activation_checkpointing=cfg.activation_checkpointing,
    )
    engine.setup(lambda: build_model(model_cfg), adamw)
    return engine


def _step(engine, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, float]:
    rows = ROWS // engine.dp_size
    mine = {k: v[engine.dp_rank * rows : (engine.dp_rank + 1) * rows] for k, v in batch.items()}
    micro = [{k: v[s : s + MICRO_ROWS] for k, v in mine.items()} for s in range(0, rows, MICRO_ROWS)]
    stats = engine.forward_backward(micro, kept_count(batch))
    norm = engine.optimizer_step(LR, MAX_NORM)
    return torch.tensor(
        [stats.kept_sum, stats.kept_count, stats.dropped_sum, stats.dropped_count], dtype=torch.float64
    ), norm


def _clone(state):
    if isinstance(state, torch.Tensor):
        return state.clone()
    if isinstance(state, dict):
        return {k: _clone(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_clone(v) for v in state)
    return state


def _local_weights(engine) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in engine.state_dict()["model"].items()}


def _engine_worker(rank: int, world: int, layouts: list[dict], folder: str) -> list[dict]:
    results = []
    for i, layout in enumerate(layouts):
        batches = global_batches(packed=layout.get("packed", False))
        engine = _engine(layout)
        stats, norms = [], []
        for step, batch in enumerate(batches):
            if step == STEPS - 1:
                checkpoint = _clone(engine.state_dict())  # per-rank local shards + optimizer state (live tensors)
            s, n = _step(engine, batch)
            stats.append(s)
            norms.append(n)
        engine.export_hf(Path(folder) / f"layout{i}")
        # resume: a fresh engine loads the checkpoint and repeats the last step bit for bit
        resumed = _engine(layout)
        resumed.load_state_dict(checkpoint)
        _step(resumed, batches[-1])
        diff = max(
            float((a - b).abs().max())
            for a, b in zip(_local_weights(engine).values(), _local_weights(resumed).values())
        )
        results.append(
            {
                "stats": torch.stack(stats),
                "norms": torch.tensor(norms, dtype=torch.float64),
                "resume_diff": diff,
                "dp": (engine.dp_rank, engine.dp_size),
                "main": engine.is_main,
            }
        )
    return results


def _check(results: list[dict], layout: dict, export: Path) -> None:
    from transformers import LlamaForCausalLM

    ref = reference_run(
        tiny_config(layers=layout.get("layers", 2), tied=layout.get("tied", False)), packed=layout.get("packed", False)
    )
    precision = layout.get("train", {}).get("precision", "fp32")
    tol = parity_tolerance(ref, layout.get("layers", 2), precision)
    for res in results:
        assert_stats_close(res["stats"], ref["stats"], tol)
        torch.testing.assert_close(res["norms"], ref["norms"], rtol=tol.norm, atol=0)
        assert res["resume_diff"] == 0.0
    assert [r["main"] for r in results].count(True) == 1
    exported = LlamaForCausalLM.from_pretrained(export).state_dict()
    assert sorted(exported) == sorted(ref["weights"])
    if precision == "bf16":
        return  # no bound for 8-bit operands falls below AdamW's largest move (dist_utils.parity_tolerance)
    for name, w in ref["weights"].items():
        torch.testing.assert_close(exported[name], w, atol=tol.weight[name], rtol=0, msg=name)


def _run_layouts(world: int, layouts: dict[str, dict]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        per_rank = run_distributed(_engine_worker, world, list(layouts.values()), folder)
        for i, (name, layout) in enumerate(layouts.items()):
            results = [per_rank[r][i] for r in range(world)]
            if "dp" in layout:
                assert sorted(r["dp"] for r in results) == layout["dp"], name
            _check(results, layout, Path(folder) / f"layout{i}")


@pytest.mark.dist
def test_engine_tp_pp_fsdp_match_one_process():
    _run_layouts(
        2,
        {
            "tp2": {"parallel": {"tp": 2}, "dp": [(0, 1), (0, 1)]},
            "pp2-1f1b-packed-tied": {"parallel": {"pp": 2, "pp_schedule": "1f1b"}, "packed": True, "tied": True},
            "dp2-fsdp": {"parallel": {"fsdp": True}, "dp": [(0, 2), (1, 2)]},
            "dp2-ddp": {"parallel": {"fsdp": False}, "packed": True, "tied": True, "dp": [(0, 2), (1, 2)]},
        },
    )


@pytest.mark.slow
@pytest.mark.dist
def test_engine_3d_mesh_matches_one_process():
    """pp(2)·dp(2)·tp(2) = 8 gloo processes: TP -> PP (GPipe and 1F1B) -> FSDP2 or replicated DP together."""
    _run_layouts(
        8,
        {
            "3d-1f1b-fsdp": {
                "parallel": {"pp": 2, "tp": 2, "fsdp": True, "pp_schedule": "1f1b"},
                "layers": 3,
                "packed": True,
                "dp": [(0, 2)] * 4 + [(1, 2)] * 4,
            },
            "3d-gpipe-replicate-tied": {"parallel": {"pp": 2, "tp": 2, "pp_schedule": "gpipe"}, "tied": True},
        },
    )


def _single_process_run(precision: str, tmp_path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    from goldfish.engines.native import NativeEngine
    from goldfish.loss import EngineLoss
    from goldfish.train_config import ParallelConfig

    model_cfg = tiny_config(tied=True)
    engine = NativeEngine(ParallelConfig(), precision, EngineLoss())
    engine.setup(lambda: build_model(model_cfg), adamw)
    assert (engine.dp_rank, engine.dp_size, engine.is_main) == (0, 1, True)
    stats, norms = zip(*(_step(engine, batch) for batch in global_batches(packed=True)))
    engine.export_hf(tmp_path / precision)
    return torch.stack(stats), torch.tensor(norms, dtype=torch.float64)


def test_single_process_engine_matches_reference_and_bf16_stays_close(tmp_path):
    """World size 1: the stage wrapper runs the whole HF model exactly; bf16 autocast stays near fp32."""
    from transformers import LlamaForCausalLM

    ref = reference_run(tiny_config(tied=True), packed=True)
    stats, norms = _single_process_run("fp32", tmp_path)
    tol = parity_tolerance(ref)
    assert_stats_close(stats, ref["stats"], tol)
    torch.testing.assert_close(norms, ref["norms"], rtol=tol.norm, atol=0)
    exported = LlamaForCausalLM.from_pretrained(tmp_path / "fp32")
    assert exported.config.tie_word_embeddings and exported.lm_head.weight is exported.model.embed_tokens.weight
    name = "model.embed_tokens.weight"
    torch.testing.assert_close(exported.model.embed_tokens.weight, ref["weights"][name], atol=tol.weight[name], rtol=0)
    bf16_stats, bf16_norms = _single_process_run("bf16", tmp_path)
    bf16 = parity_tolerance(ref, precision="bf16")
    assert_stats_close(bf16_stats, ref["stats"], bf16)
    torch.testing.assert_close(bf16_norms, ref["norms"], rtol=bf16.norm, atol=0)
    # autocast really ran: 8-bit operands move a gradient norm by more than fp32 rounding could (8e-4 vs <= 1.7e-4)
    assert ((bf16_norms - ref["norms"]).abs() / ref["norms"]).max() > tol.norm


def _perf(**fields):
    """TrainConfig fields of the engine's performance options."""
    from goldfish.train_config import LossConfig

    chunk = fields.pop("ce_chunk_tokens", 0)
    return {"loss": LossConfig(ce_chunk_tokens=chunk), **fields}


@pytest.mark.dist
def test_chunked_ce_and_activation_checkpointing_train_like_one_process():
    """loss.ce_chunk_tokens (7: ragged chunks across rows) and activation_checkpointing change memory, not math:
    one process, TP (vocab-parallel lm_head), a pipeline's last stage and FSDP2 all match the reference."""
    _run_layouts(
        1,
        {
            "one-chunked-ac": {
                "parallel": {},
                "train": _perf(ce_chunk_tokens=7, activation_checkpointing=True),
                "packed": True,
                "tied": True,
            }
        },
    )
    _run_layouts(
        2,
        {
            "tp2-chunked": {"parallel": {"tp": 2}, "train": _perf(ce_chunk_tokens=7)},
            "pp2-chunked-ac-tied": {
                "parallel": {"pp": 2, "pp_schedule": "1f1b"},
                "tied": True,
                "train": _perf(ce_chunk_tokens=7, activation_checkpointing=True),
            },
            "dp2-fsdp-chunked-ac": {
                "parallel": {"fsdp": True},
                "packed": True,
                "train": _perf(ce_chunk_tokens=7, activation_checkpointing=True),
            },
        },
    )


@pytest.mark.dist
def test_fsdp_mixed_precision_stays_close_to_fp32():
    """parallel.fsdp_mixed_precision: bf16 all-gathers/compute, fp32 reduce-scatter; close to fp32 like autocast."""
    _run_layouts(
        2,
        {
            "dp2-fsdp-bf16-params": {
                "parallel": {"fsdp": True, "fsdp_mixed_precision": True},
                "train": {"precision": "bf16"},
            }
        },
    )


@pytest.mark.slow
@pytest.mark.dist
def test_compile_under_torchrun_with_fsdp_ddp_and_pipeline():
    """compile=true under a process group (2 gloo ranks): compiled layers inside FSDP2 units, under DDP, and in a
    pipeline stage (with the chunked CE) train like the eager one-process reference (fused kernels only reorder float
    operations: the same rounding bounds) and resume bit for bit."""
    _run_layouts(
        2,
        {
            "dp2-fsdp-compiled": {"parallel": {"fsdp": True}, "train": _perf(compile=True)},
            "dp2-ddp-compiled": {"parallel": {"fsdp": False}, "packed": True, "train": _perf(compile=True)},
            "pp2-compiled-chunked": {
                "parallel": {"pp": 2, "pp_schedule": "1f1b"},
                "train": _perf(compile=True, ce_chunk_tokens=7),
            },
        },
    )


def test_option_conflicts_are_one_line_errors():
    from goldfish.engines.native import NativeEngine
    from goldfish.errors import UserError
    from goldfish.loss import EngineLoss
    from goldfish.train_config import ParallelConfig

    with pytest.raises(UserError, match=r"compile=true with parallel.tp>1"):
        NativeEngine(ParallelConfig(tp=2), "fp32", EngineLoss(), compile=True)
    with pytest.raises(UserError, match=r"fsdp_mixed_precision=true needs parallel.fsdp=true and precision=bf16"):
        NativeEngine(ParallelConfig(fsdp=True, fsdp_mixed_precision=True), "fp32", EngineLoss())


def test_axonn_refuses_native_only_options():
    pytest.importorskip("axonn")
    from goldfish.engines.axonn import AxonnEngine
    from goldfish.errors import UserError
    from goldfish.loss import EngineLoss
    from goldfish.train_config import AxonnConfig

    with pytest.raises(UserError, match=r"^compile, activation_checkpointing: native-engine options"):
        AxonnEngine(AxonnConfig(), "fp32", EngineLoss(), compile=True, activation_checkpointing=True)
