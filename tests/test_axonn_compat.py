"""The AxoNN CPU/gloo compatibility layer and the engine's guards.

In-process unit tests cover the version check, activation only without CUDA, exact restoration by ``disable()``,
patch 6 (async handles are waited on), the mesh error message and the refusals (bf16 on CPU). One gloo run checks
the all-to-all patches with *different* row counts on the two ranks of a row-parallel grid (different sequence
lengths) against one-process gradients, that optimizer groups follow the plain model's shapes (AxoNN's shards are
1-D), and that biased tensor-parallel layers and checkpoint shards of another grid are refused.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from dist_utils import SEQ, VOCAB, build_model, global_batches, kept_count, run_distributed, tiny_config
from tolerances import llama_terms, rounding, scaled
from goldfish.engines import axonn_compat
from goldfish.engines.axonn import AxonnEngine, AxonnLayout
from goldfish.errors import UserError
from goldfish.loss import EngineLoss, goldfish_loss
from goldfish.train_config import AxonnConfig


def _patched_targets() -> list[tuple[object, str]]:
    from axonn import communication
    from axonn.intra_layer import asym_communication, communication as ic, fully_connected, overlap_communication

    return [
        (communication.communication_handle, "__init__"),
        (fully_connected, "initialize_params"),
        (asym_communication, "gather_batch_sizes"),
        (fully_connected, "gather_batch_sizes"),
        (asym_communication, "_allgatherv"),
        (asym_communication, "_gather_batch_scatter_channels"),
        (asym_communication, "_gather_channels_scatter_batch"),
        (ic, "_reduce_scatter"),
        (fully_connected, "_reduce_scatter"),
        (overlap_communication, "clear_handles"),
    ]


def test_enable_patches_each_target_and_disable_restores_the_originals() -> None:
    before = [getattr(owner, name) for owner, name in _patched_targets()]
    assert axonn_compat.enable() is True  # this machine has no CUDA
    try:
        assert axonn_compat.enable() is True  # idempotent
        after = [getattr(owner, name) for owner, name in _patched_targets()]
        assert all(a is not b for a, b in zip(after, before))
    finally:
        axonn_compat.disable()
    assert [getattr(owner, name) for owner, name in _patched_targets()] == before
    assert not axonn_compat.is_enabled()


def test_enable_does_nothing_when_cuda_is_present(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    before = [getattr(owner, name) for owner, name in _patched_targets()]
    assert axonn_compat.enable() is False
    assert [getattr(owner, name) for owner, name in _patched_targets()] == before


def test_other_axonn_versions_are_refused_on_cpu_and_warned_about_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(axonn_compat, "axonn_version", lambda: "0.3.0")
    with pytest.raises(UserError, match=r"axonn 0\.3\.0 is installed .* axonn==0\.2\.0"):
        axonn_compat.enable()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.warns(UserWarning, match=r"tested with axonn 0\.2\.0, not the installed 0\.3\.0"):
        axonn_compat.check_installed()
    monkeypatch.setattr(axonn_compat, "axonn_version", lambda: None)
    with pytest.raises(UserError, match=r"pip install axonn==0\.2\.0 \(the toolkit's 'axonn' extra\)"):
        axonn_compat.check_installed()
    assert not axonn_compat.is_enabled()


def test_clear_handles_waits_for_every_async_collective() -> None:
    """Patch 6: AxoNN's exit from optimize_communication must not fold a reduce-scatter that is still in flight."""
    from axonn.intra_layer import overlap_communication as oc

    class Handle:
        waited = 0

        def wait(self) -> None:
            Handle.waited += 1

    oc.handles = [Handle(), None, Handle()]
    axonn_compat._clear_handles()
    assert Handle.waited == 2 and oc.handles == []


def test_mesh_error_names_every_factor() -> None:
    with pytest.raises(UserError, match=r"row\(2\)·col\(2\)·depth\(2\)=8 does not divide world size 6"):
        AxonnLayout.for_world(2, 2, 2, 6)
    layout = AxonnLayout.for_world(2, 1, 2, 8)
    assert (layout.data, layout.world_size) == (2, 8)
    # rank = data*(R*C*D) + depth*(R*C) + row*C + col (AxoNN's placement)
    assert AxonnLayout.for_world(2, 2, 2, 16).coordinates(13) == {"data": 1, "depth": 1, "row": 0, "col": 1}


def test_bf16_on_cpu_is_refused_before_joining_any_group() -> None:
    with pytest.raises(UserError, match="precision=bf16 with engine=axonn needs a CUDA GPU"):
        AxonnEngine(AxonnConfig(), "bf16", EngineLoss())


# ------------------------------------------------------------------------------------------------ gloo


def _uneven_worker(rank: int, world: int) -> dict:
    """Row-parallel grid whose two ranks hold 3x16 and 1x11 tokens: AxoNN's all-to-alls see unequal row counts."""
    engine = AxonnEngine(AxonnConfig(row=2), "fp32", EngineLoss())
    # SGD with lr=1 and no clipping: new weights = old weights - gradient, so full weights expose full gradients
    engine.setup(lambda: build_model(tiny_config()), _sgd_matrices_first)
    names = {id(p): name for name, p in engine.model.named_parameters()}
    groups = [sorted(names[id(p)] for p in g["params"]) for g in engine.optimizer.param_groups]
    parts = _uneven_parts()
    stats = engine.forward_backward([parts[rank]], sum(kept_count(p) for p in parts))
    norm = engine.optimizer_step(1.0, None)
    coords = engine.layout.coordinates(rank)
    from axonn import axonn as ax

    placed = {
        "data": ax.config.data_parallel_rank,
        "depth": ax.config.intra_layer_depth_parallel_rank,
        "row": ax.config.intra_layer_row_parallel_rank,
        "col": ax.config.intra_layer_column_parallel_rank,
    }
    out = {
        "weights": engine.full_state_dict(),
        "norm": norm,
        "kept_sum": stats.kept_sum,
        "coords_ok": coords == placed,
        "groups": groups,
    }
    foreign = engine.state_dict()
    foreign["axonn_layout"] = dict(foreign["axonn_layout"], row=1, col=2)  # a shard of another grid
    try:
        engine.load_state_dict(foreign)
        out["layout_error"] = ""
    except UserError as e:
        out["layout_error"] = str(e)
    biased = tiny_config()
    biased.attention_bias = True
    engine2 = AxonnEngine(AxonnConfig(row=2), "fp32", EngineLoss())
    try:
        engine2.setup(lambda: LlamaForCausalLM(biased), lambda params: torch.optim.SGD(params, lr=1.0))
        out["bias_error"] = ""
    except UserError as e:
        out["bias_error"] = str(e)
    return out


def _sgd_matrices_first(params) -> torch.optim.Optimizer:
    """Groups chosen by shape, as the trainer's weight-decay grouping does (AxoNN's shards are 1-D)."""
    params = list(params)
    return torch.optim.SGD(
        [{"params": [p for p in params if p.dim() >= 2]}, {"params": [p for p in params if p.dim() < 2]}], lr=1.0
    )


def _uneven_parts() -> list[dict[str, torch.Tensor]]:
    batch = global_batches(steps=1)[0]
    return [{k: v[0:3] for k, v in batch.items()}, {k: v[3:4, :11] for k, v in batch.items()}]


@pytest.mark.dist
def test_uneven_rows_match_one_process_and_biases_and_foreign_shards_are_refused() -> None:
    results = run_distributed(_uneven_worker, 2)
    model = build_model(tiny_config())
    parts = _uneven_parts()
    normalizer = sum(kept_count(p) for p in parts)
    kept_sum = 0.0
    for part in parts:
        out = goldfish_loss(model(input_ids=part["input_ids"]).logits, part["labels"], drop_mask=part["drop_mask"])
        (out.kept_sum / normalizer).backward()
        kept_sum += float(out.kept_sum.detach())
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
    # the same sums split over two ranks: a CE is one target's forward path, a gradient component each target's
    # path forward and backward summed over the 3·16 + 11 targets, the norm a sum of squares over every parameter
    forward = llama_terms(hidden=32, intermediate=64, layers=2, head_dim=8, seq=SEQ, vocab=VOCAB)
    targets, params = 3 * SEQ + 11, sum(p.numel() for p in model.parameters())
    grad_terms = 2 * forward + targets
    for r in results:
        assert r["coords_ok"]
        assert r["norm"] == pytest.approx(norm, rel=rounding(grad_terms) + rounding(params), abs=0)
        assert r["kept_sum"] == pytest.approx(kept_sum, rel=rounding(forward + targets), abs=0)
        assert r["groups"] == [
            sorted(n for n, p in model.named_parameters() if p.dim() >= 2),
            sorted(n for n, p in model.named_parameters() if p.dim() < 2),
        ]
        assert "biases when axonn.row·axonn.col > 1" in r["bias_error"]
        assert "row(1)·col(2)·depth(1)·data(1) but this is rank" in r["layout_error"]
    for name, p in model.named_parameters():  # one SGD step of lr 1: the gradient's rounding, then w - g's own
        torch.testing.assert_close(
            results[0]["weights"][name],
            (p - p.grad).detach(),
            rtol=0,
            atol=scaled(p.grad, grad_terms) + scaled(p.detach(), 1),
            msg=name,
        )
