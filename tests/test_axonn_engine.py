"""``engine: axonn`` trains exactly like one process, for every row x column x depth x data layout (gloo, CPU, fp32).

A small step loop (independent of the trainer) drives :class:`AxonnEngine` through the ``Engine`` seam on a tiny
Llama with the Goldfish loss, global kept-token normalisation, clipping and AdamW, and must reproduce the
one-process reference of the plain Hugging Face model (:func:`dist_utils.reference_run`): per-step loss
statistics, gradient norms and the final full weights within what rounding in another order allows
(:func:`dist_utils.parity_tolerance`). The same run also checks that a checkpoint taken
after step 1 and loaded into a fresh engine (built from a *different* seed) continues identically, and that the
exported Hugging Face folder reloads to the trained weights.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest
import torch

from dist_utils import (
    LR,
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
from goldfish.engines.axonn import AxonnEngine
from goldfish.loss import EngineLoss
from goldfish.train_config import AxonnConfig

pytestmark = pytest.mark.dist  # every test here runs in gloo processes (dist_utils.run_distributed)

MICRO_ROWS = 1  # rows per micro-batch: gradient accumulation on every layout (the reference uses 2)


def _engine(layout: dict, seed: int, tied: bool) -> AxonnEngine:
    section = AxonnConfig(
        row=layout.get("row", 1),
        col=layout.get("col", 1),
        depth=layout.get("depth", 1),
        overlap_communication=layout.get("overlap", False),
    )
    engine = AxonnEngine(section, "fp32", EngineLoss())
    engine.setup(lambda: build_model(tiny_config(tied=tied), seed=seed), adamw)
    return engine


def _step(engine: AxonnEngine, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, float]:
    """One optimizer step on this rank's rows of the global batch."""
    rows = ROWS // engine.dp_size
    mine = {k: v[engine.dp_rank * rows : (engine.dp_rank + 1) * rows] for k, v in batch.items()}
    micro = [{k: v[s : s + MICRO_ROWS] for k, v in mine.items()} for s in range(0, rows, MICRO_ROWS)]
    st = engine.forward_backward(micro, kept_count(batch))
    stats = torch.tensor([st.kept_sum, st.kept_count, st.dropped_sum, st.dropped_count], dtype=torch.float64)
    return stats, engine.optimizer_step(LR, MAX_NORM)


def _roundtrip(state: dict, folder: str, rank: int) -> dict:
    """Through a per-rank file, loaded without unpickling code (what the trainer's checkpoints do)."""
    path = Path(folder) / f"rank{rank}.pt"
    torch.save(state, path)
    return torch.load(path, weights_only=True)


def _worker(rank: int, world: int, layout: dict, folder: str) -> dict:
    tied = layout.get("tied", False)
    batches = global_batches()
    engine = _engine(layout, seed=0, tied=tied)
    stats, norms, checkpoint = [], [], None
    for i, batch in enumerate(batches):
        s, n = _step(engine, batch)
        stats.append(s)
        norms.append(n)
        if i == 0:
            checkpoint = _roundtrip(engine.state_dict(), folder, rank)
    weights = engine.full_state_dict()
    export = Path(folder) / "hf"
    engine.export_hf(export)

    resumed = _engine(layout, seed=123, tied=tied)  # different init: only the checkpoint can make it match
    resumed.load_state_dict(checkpoint)
    resumed_stats = [_step(resumed, batch)[0] for batch in batches[1:]]
    out = {
        "stats": torch.stack(stats),
        "norms": torch.tensor(norms, dtype=torch.float64),
        "resumed_stats": torch.stack(resumed_stats),
        "dp_size": engine.dp_size,
    }
    if rank == 0:
        from transformers import LlamaForCausalLM

        exported = LlamaForCausalLM.from_pretrained(export, local_files_only=True)
        out["weights"] = weights
        out["resumed_weights"] = resumed.full_state_dict()
        out["exported"] = {k: v.detach().clone() for k, v in exported.state_dict().items()}
    else:
        resumed.full_state_dict()  # a collective: every rank takes part
    return out


def _worker_all(rank: int, world: int, layouts: list[dict], folder: str) -> list[dict]:
    """Every layout in one set of processes (starting processes costs far more than these tiny runs)."""
    results = []
    for i, layout in enumerate(layouts):
        sub = Path(folder) / str(i)
        if rank == 0:
            sub.mkdir()
        torch.distributed.barrier()
        results.append(_worker(rank, world, layout, str(sub)))
    return results


def _run_layouts(layouts: dict[str, dict], world: int) -> dict[str, list[dict]]:
    with tempfile.TemporaryDirectory(prefix="goldfish-axonn-") as folder:
        per_rank = run_distributed(_worker_all, world, list(layouts.values()), folder)
    return {name: [r[i] for r in per_rank] for i, name in enumerate(layouts)}


@functools.cache
def _reference(tied: bool) -> dict:
    return reference_run(tiny_config(tied=tied))


def _check(results: list[dict], layout: dict, world: int) -> None:
    ref = _reference(layout.get("tied", False))
    tol = parity_tolerance(ref)
    assert all(r["dp_size"] == world for r in results)  # easy mode: every rank reads its own rows
    for r in results:  # statistics and norms are global: identical on every rank
        assert_stats_close(r["stats"], ref["stats"], tol)
        torch.testing.assert_close(r["norms"], ref["norms"], rtol=tol.norm, atol=0)
        assert_stats_close(r["resumed_stats"], ref["stats"][1:], tol)
    main = results[0]
    assert set(main["weights"]) == set(ref["weights"])
    for name, expected in ref["weights"].items():
        torch.testing.assert_close(main["weights"][name], expected, atol=tol.weight[name], rtol=0, msg=name)
        torch.testing.assert_close(main["resumed_weights"][name], expected, atol=tol.weight[name], rtol=0, msg=name)
        torch.testing.assert_close(main["exported"][name], main["weights"][name], rtol=0, atol=0, msg=name)
    # parity_tolerance checked that every weight moved further than its tolerance: a run that silently skipped the
    # update would not pass the checks above by accident


LAYOUTS_2 = {
    "R2": {"row": 2},
    "C2": {"col": 2},
    "D2-tied": {"depth": 2, "tied": True},
    "R2-overlap": {"row": 2, "overlap": True},
}
LAYOUTS_4 = {
    "R2xdata2": {"row": 2},
    "D2xdata2": {"depth": 2},
    "R2xC2": {"row": 2, "col": 2},
    "R2xC2-tied": {"row": 2, "col": 2, "tied": True},
}


@pytest.fixture(scope="module")
def world2() -> dict[str, list[dict]]:
    return _run_layouts(LAYOUTS_2, 2)


@pytest.fixture(scope="module")
def world4() -> dict[str, list[dict]]:
    return _run_layouts(LAYOUTS_4, 4)


@pytest.mark.parametrize("name", LAYOUTS_2)
def test_world2_layouts_match_one_process(world2: dict, name: str) -> None:
    _check(world2[name], LAYOUTS_2[name], 2)


@pytest.mark.slow
@pytest.mark.parametrize("name", LAYOUTS_4)
def test_world4_layouts_match_one_process(world4: dict, name: str) -> None:
    _check(world4[name], LAYOUTS_4[name], 4)
