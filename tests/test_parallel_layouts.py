"""Each parallel dimension of ``goldfish.engines.parallelize`` trains exactly like one process (gloo, CPU, fp32).

A small step loop (independent of the trainer) applies TP -> PP -> FSDP/replicate with the library functions, runs
a few AdamW steps with the Goldfish loss on a tiny Llama, and must reproduce the one-process reference of the plain
HF model: per-step loss statistics, gradient norms and final weights within what rounding in another order allows
(``dist_utils.parity_tolerance``).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from dist_utils import (
    MAX_NORM,
    ROWS,
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
from goldfish.engines import parallelize as par
from goldfish.loss import EngineLoss

pytestmark = pytest.mark.dist  # every test here runs in gloo processes (dist_utils.run_distributed)


def _full_weights(stage: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
        for name, p in stage.named_parameters()
    }


def _train(world: int, layout: dict) -> dict:
    """Train one layout on this rank with the parallelize functions; returns global stats and this stage's weights."""
    cfg = tiny_config(layers=layout.get("layers", 2), tied=layout.get("tied", False))
    dims = par.parallel_dims(layout.get("pp", 1), 0, layout.get("tp", 1), world, cfg)
    mesh = par.build_mesh(dims, "cpu")
    model = build_model(cfg)
    if dims.tp > 1:
        par.apply_tp(model, mesh["tp"])
    stage = par.split_stage(model, mesh["pp"])
    if dims.dp > 1 and layout.get("fsdp"):
        par.apply_fsdp(stage, mesh["dp"])
    params = list(stage.parameters())
    tied_group = par.tied_weight_group(mesh) if dims.pp > 1 and cfg.tie_word_embeddings else None
    opt = adamw(params)
    dp_rank, rows = mesh["dp"].get_local_rank(), ROWS // dims.dp
    loss_fn = par.StageLoss(EngineLoss())
    pipe = (
        par.build_pipeline(stage, mesh["pp"], layout.get("schedule", "gpipe"), 2, loss_fn, torch.device("cpu"))
        if dims.pp > 1
        else None
    )
    all_stats, norms = [], []
    for batch in global_batches():
        normalizer = kept_count(batch)
        mine = {k: v[dp_rank * rows : (dp_rank + 1) * rows] for k, v in batch.items()}
        loss_fn.reset(normalizer)
        if pipe is not None:
            target = loss_fn.pack({"labels": mine["labels"], "drop_mask": mine["drop_mask"]})
            first = mesh["pp"].get_local_rank() == 0
            pipe.step(mine["input_ids"] if first else None, target=target)
        else:
            for start in range(0, rows, 2):
                mb = {k: v[start : start + 2] for k, v in mine.items()}
                target = loss_fn.pack({"labels": mb["labels"], "drop_mask": mb["drop_mask"]})
                loss_fn(stage(mb["input_ids"]), target).backward()
        if dims.dp > 1 and not layout.get("fsdp"):
            par.allreduce_gradients(params, mesh["dp"].get_group())
        par.sync_tied_gradients(stage.tied_weight, tied_group)
        norms.append(par.clip_grad_norm_(params, MAX_NORM, mesh["pp"].get_group(), stage.norm_duplicate))
        opt.step()
        opt.zero_grad()
        stats = loss_fn.stats(2 if pipe is not None else None)
        for dim in ("pp", "dp"):
            dist.all_reduce(stats, group=mesh[dim].get_group())
        all_stats.append(stats)
    return {
        "stats": torch.stack(all_stats),
        "norms": torch.tensor(norms, dtype=torch.float64),
        "weights": _full_weights(stage),
    }


def _worker(rank: int, world: int, layouts: list[dict]) -> list[dict]:
    results = []
    for layout in layouts:
        results.append(_train(world, layout))
        dist.barrier()
    return results


LAYOUTS_2 = {  # everything the engine tests do not already run at world size 2
    "tp2-tied": {"tp": 2, "tied": True},
    "pp2-gpipe": {"pp": 2, "schedule": "gpipe", "layers": 3},
}
SLOW_LAYOUTS_2 = {
    "tp2": {"tp": 2},
    "dp2-fsdp": {"fsdp": True},
    "dp2-replicate": {"fsdp": False},
    "pp2-1f1b": {"pp": 2, "schedule": "1f1b", "layers": 3},
    "pp2-tied": {"pp": 2, "tied": True},
}


def _run(layouts: dict[str, dict]) -> dict[str, list[dict]]:
    per_rank = run_distributed(_worker, 2, list(layouts.values()))
    return {name: [per_rank[r][i] for r in range(2)] for i, name in enumerate(layouts)}


@pytest.fixture(scope="module")
def world2_results() -> dict[str, list[dict]]:
    return _run(LAYOUTS_2)


@pytest.fixture(scope="module")
def slow_world2_results() -> dict[str, list[dict]]:
    return _run(SLOW_LAYOUTS_2)


def _assert_matches_reference(results: list[dict], layout: dict) -> None:
    ref = reference_run(tiny_config(layers=layout.get("layers", 2), tied=layout.get("tied", False)))
    tol = parity_tolerance(ref, layout.get("layers", 2))
    merged: dict[str, torch.Tensor] = {}
    for res in results:
        assert_stats_close(res["stats"], ref["stats"], tol)
        torch.testing.assert_close(res["norms"], ref["norms"], rtol=tol.norm, atol=0)
        merged.update(res["weights"])
    expected = {k: v for k, v in ref["weights"].items() if k in merged or "lm_head" not in k}
    assert sorted(merged) == sorted(expected)
    for name, w in expected.items():
        torch.testing.assert_close(merged[name], w, atol=tol.weight[name], rtol=0, msg=name)
    assert float(ref["stats"][:, 3].sum()) > 0  # Goldfish dropped some targets: the drop path is exercised
    assert float(ref["norms"].min()) > MAX_NORM  # clipping was active on every step


@pytest.mark.parametrize("name", list(LAYOUTS_2))
def test_layout_matches_one_process(world2_results, name):
    _assert_matches_reference(world2_results[name], LAYOUTS_2[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW_LAYOUTS_2))
def test_more_layouts_match_one_process(slow_world2_results, name):
    _assert_matches_reference(slow_world2_results[name], SLOW_LAYOUTS_2[name])
