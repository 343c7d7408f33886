"""The AxoNN engine: Agarwal's 3D tensor-parallel matmul (row x column x depth) plus data parallelism.

AxoNN (``axonn==0.2.0``, the framework of the SC24 Gordon Bell finalist run) is used through its own API:
``axonn.axonn.init(G_data, G_inter=1, G_intra_r=row, G_intra_c=col, G_intra_d=depth)`` builds the process groups,
``axonn.intra_layer.auto_parallelize`` turns every ``nn.Linear`` built inside it into an AxoNN ``Linear`` (the weight
split over rows (out features) x columns (in features), each block flattened and split again over depth, so every
rank holds a distinct 1-D shard), ``sync_gradients`` reduces gradients and ``clip_grad_norm_`` clips by the global
norm. On a CPU-only torch, :mod:`goldfish.engines.axonn_compat` makes those calls run on gloo.

How a batch is split. This is AxoNN's "easy mode": outside its Linear layers the model is purely data parallel, and
*every* rank -- including the ranks of one row/column/depth grid -- reads a different shard of the batch. Each Linear
all-to-alls the activations of its grid, multiplies by the local weight block and sends the results back. So
``dp_size`` is the world size and ``dp_rank`` the global rank (ranks are laid out as
``rank = data * (R*C*D) + depth * (R*C) + row * C + col``).

Gradients are *sums*: each micro-batch backpropagates ``kept_sum / normalizer`` (the global kept-token count), a
weight shard's gradient already sums the whole grid's rows (all-to-all + reduce-scatter over depth), and
``sync_gradients(mean=False)`` sums it over the data group; every other parameter (norms, embeddings, tied or
indivisible heads) is all-reduced (summed) over the world. The result equals one process taking the whole batch.

Known limits of AxoNN 0.2.0 that this engine guards against: tensor-parallel biases get wrong gradients in easy mode
when row*col > 1 (refused with an error; Llama has none), Hugging Face initialisation skips AxoNN layers (every rank
builds the plain model and loads the shards of its weights, so initial weights equal a one-process run), its
checkpoint loader reads another path than its saver writes (not used: state is this rank's plain tensors), and
``axonn.models.transformers`` fails to import on transformers 5 (not used).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.distributed as dist
from torch import nn

from ..errors import UserError
from ..train_config import AxonnConfig
from . import axonn_compat, axonn_fastpath
from .base import Engine, Layout, LossFn, StepStats, split_targets, stats_vector

log = logging.getLogger("goldfish.engines")

# AxoNN is an optional extra (pip install -e '.[axonn]'): it is imported inside the functions that use it, so this
# module -- and the layout check ``--dry-run`` asks it for -- imports without it.


@dataclasses.dataclass(frozen=True)
class AxonnLayout:
    """AxoNN's grid: ``row * col * depth`` tensor-parallel ranks, ``data`` copies of the grid fill the world."""

    row: int
    col: int
    depth: int
    data: int

    @property
    def grid(self) -> int:
        return self.row * self.col * self.depth

    @property
    def world_size(self) -> int:
        return self.grid * self.data

    @classmethod
    def for_world(cls, row: int, col: int, depth: int, world_size: int) -> "AxonnLayout":
        """The layout for ``world_size`` processes; a one-line :class:`UserError` naming every factor otherwise."""
        grid = row * col * depth
        if world_size % grid:
            raise UserError(
                f"axonn grid row({row})·col({col})·depth({depth})={grid} does not divide world size "
                f"{world_size}; choose axonn.row/col/depth whose product divides the number of processes"
            )
        return cls(row, col, depth, world_size // grid)

    def coordinates(self, rank: int) -> dict[str, int]:
        """AxoNN's placement of global ``rank`` in the grid (see ``axonn.communication.communication_handle``)."""
        grid_rank = rank % self.grid
        return {
            "data": rank // self.grid,
            "depth": grid_rank // (self.row * self.col),
            "row": (grid_rank // self.col) % self.row,
            "col": grid_rank % self.col,
        }

    def describe(self) -> str:
        return f"row({self.row})·col({self.col})·depth({self.depth})·data({self.data})"


def axonn_linears(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) of every AxoNN tensor-parallel ``Linear`` in ``model``."""
    from axonn.intra_layer import Linear

    return [(name, m) for name, m in model.named_modules() if isinstance(m, Linear)]


class AxonnEngine(Engine):
    """Row x column x depth tensor parallelism (AxoNN) x data parallelism for a plain Hugging Face causal LM."""

    name = "axonn"

    section = "axonn"

    def __init__(
        self,
        axonn: AxonnConfig,
        precision: str,
        loss_fn: LossFn,
        *,
        compile: bool = False,
        activation_checkpointing: bool = False,
    ):
        super().__init__(precision, loss_fn)
        axonn_compat.check_installed()
        native_only = [
            name
            for name, on in (
                ("compile", compile),
                ("activation_checkpointing", activation_checkpointing),
                ("loss.ce_chunk_tokens", getattr(loss_fn, "wants_hidden", False)),
            )
            if on
        ]
        if native_only:
            raise UserError(
                f"{', '.join(native_only)}: native-engine options that engine=axonn does not apply; "
                f"drop them or use engine=native"
            )
        if precision == "bf16" and self.device.type != "cuda":
            raise UserError(
                "precision=bf16 with engine=axonn needs a CUDA GPU (AxoNN's Linear re-enters autocast "
                "only on CUDA in backward); use precision=fp32 on CPU"
            )
        a = axonn
        self.layout = AxonnLayout.for_world(a.row, a.col, a.depth, self.world_size)
        self.join_process_group(always=True)  # AxoNN needs a process group even for one process
        self.compat_active = axonn_compat.enable()  # no-op when CUDA is present
        axonn_fastpath.enable()  # grid dimensions of one rank: no collectives, copies or host syncs
        from axonn import axonn as ax

        gpus_per_node = torch.cuda.device_count() if self.device.type == "cuda" else None
        ax.init(
            G_data=self.layout.data,
            G_inter=1,
            G_intra_r=a.row,
            G_intra_c=a.col,
            G_intra_d=a.depth,
            gpus_per_node=gpus_per_node,
        )
        # AxoNN folds overlapped reduce-scatters into .grad after they complete, which on gloo rests on the compat
        # layer's wait (see axonn_compat); there is no compute stream to overlap with on CPU, so only CUDA uses it.
        self.overlap = {
            "overlap_all_reduce": a.overlap_communication,
            "overlap_reduce_scatter": a.overlap_communication and self.device.type == "cuda",
        }
        self.model: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        if self.is_main:
            log.info(
                "axonn: %s on %d processes (%s%s)",
                self.layout.describe(),
                self.world_size,
                self.device.type,
                ", CPU/gloo compatibility layer" if self.compat_active else "",
            )

    @classmethod
    def layout_for(
        cls, section: AxonnConfig, world_size: int, model_config: Any = None, micro_batch_size: int | None = None
    ) -> Layout:
        """AxoNN's easy mode: every rank is a data-parallel rank; the grid shards layer matrices and an untied head
        over row·col·depth, activations and logits over row·col (see the module docstring)."""
        a = section
        grid = AxonnLayout.for_world(a.row, a.col, a.depth, world_size)
        if model_config is not None:
            heads = model_config.num_attention_heads
            widths = {
                "hidden_size": model_config.hidden_size,
                "intermediate_size": model_config.intermediate_size,
                "kv_width": (model_config.num_key_value_heads or heads) * (model_config.hidden_size // heads),
            }
            bad = [
                f"axonn.{name}={n} does not divide {what}={size}"
                for name, n in (("row", a.row), ("col", a.col))
                for what, size in widths.items()
                if size % n
            ]
            if bad:
                raise UserError("; ".join(bad))
        return Layout(
            world=world_size,
            dp=world_size,
            weight_shard=grid.grid,
            head_shard=grid.grid,
            activation_shard=a.row * a.col,
            logits_shard=a.row * a.col,
            description=f"axonn row={a.row} col={a.col} depth={a.depth} data={grid.data}",
        )

    # ------------------------------------------------------------------------------------------ topology

    @property
    def dp_rank(self) -> int:
        return self.rank

    @property
    def dp_size(self) -> int:
        return self.layout.world_size

    # ------------------------------------------------------------------------------------------ setup

    def setup(
        self,
        build_model: Callable[[], nn.Module],
        build_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer],
    ) -> None:
        plain = build_model()  # the one-process model: its weights are the reference every shard is cut from
        self.model = self._parallelize(plain).to(self.device)
        self.model.train()
        self.optimizer = _optimizer_over_shards(build_optimizer, plain, self.model)

    def _parallelize(self, plain: nn.Module) -> nn.Module:
        """An AxoNN copy of ``plain`` holding exactly this rank's shards of ``plain``'s weights."""
        from axonn.intra_layer import auto_parallelize

        # Building consumes random numbers (AxoNN initialises every full weight); fork so the caller's stream is
        # the same as in a one-process run.
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            with auto_parallelize():
                model = type(plain)(plain.config)
        _untie_shared_outputs(model)
        _refuse_biases(model)
        # AxoNN's Linear accepts a full (out, in) weight in load_state_dict and keeps this rank's shard.
        model.load_state_dict(plain.state_dict(), strict=True)
        linears = axonn_linears(model)
        total = sum(isinstance(m, nn.Linear) for m in model.modules()) + len(linears)
        if self.is_main:
            log.info(
                "axonn: %d of %d linear layers tensor-parallel (the rest are replicated: dimensions not "
                "divisible by the grid, or tied to the embedding)",
                len(linears),
                total,
            )
        return model

    # ------------------------------------------------------------------------------------------ step

    def forward_backward(self, micro_batches: list[dict[str, torch.Tensor]], normalizer: int) -> StepStats:
        from axonn.intra_layer import optimize_communication, sync_gradients

        totals = torch.zeros(4, dtype=torch.float64, device=self.device)  # kept_sum, kept_n, dropped_sum, dropped_n
        for mb in micro_batches:
            mb = {k: v.to(self.device, non_blocking=True) for k, v in mb.items()}
            # The context's exit waits for async collectives and folds deferred weight gradients into .grad.
            with optimize_communication(**self.overlap):
                with self.autocast():
                    logits = self.model(
                        input_ids=mb["input_ids"],
                        position_ids=mb.get("position_ids"),
                        attention_mask=mb.get("attention_mask"),
                        use_cache=False,
                    ).logits  # (B, T, V)
                parts = self.loss_fn(logits, split_targets(mb))
                (parts.kept_sum / max(normalizer, 1)).backward()
            totals += stats_vector(parts)
        sync_gradients(self.model, mean=False)  # sums: data group for shards, world for replicated parameters
        dist.all_reduce(totals)
        return StepStats.from_vector(totals)

    def optimizer_step(self, lr: float, max_grad_norm: float | None) -> float:
        from axonn.intra_layer import clip_grad_norm_

        for group in self.optimizer.param_groups:
            group["lr"] = lr
        # Shards' squared norms are summed over the grid; max_norm=inf only measures (the coefficient clamps to 1).
        norm = clip_grad_norm_(self.model.parameters(), max_grad_norm or float("inf"))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    # ------------------------------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """This rank's shards and optimizer state, plus the grid they belong to (checked on load)."""
        layout = dataclasses.asdict(self.layout) | {"rank": self.rank}
        return {
            "model": {k: v.detach() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "axonn_layout": layout,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("axonn_layout")
        here = dataclasses.asdict(self.layout) | {"rank": self.rank}
        if saved is not None and dict(saved) != here:
            raise UserError(
                f"checkpoint shard was written by rank {saved.get('rank')} of axonn layout "
                f"row({saved.get('row')})·col({saved.get('col')})·depth({saved.get('depth')})·"
                f"data({saved.get('data')}) but this is rank {self.rank} of {self.layout.describe()}; "
                f"resume with the same axonn.row/col/depth and world size"
            )
        self.load_model_state(self.model, state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every weight at full size on CPU (a collective: all ranks must call it; all ranks get the result)."""
        return dict(self._full_tensors())

    def _full_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, full CPU tensor) in state-dict order, gathering one AxoNN weight at a time."""
        shards = {f"{name}.weight": m for name, m in axonn_linears(self.model)}
        for key, tensor in self.model.state_dict().items():
            yield key, (gather_full_weight(shards[key]) if key in shards else tensor).detach().cpu()

    def export_hf(self, out_dir: Path) -> None:
        # every rank takes part in each gather; only the main rank keeps the full tensors
        full = {key: tensor for key, tensor in self._full_tensors() if self.is_main}
        if self.is_main:
            with torch.device("meta"):  # a plain skeleton for save_pretrained; weights come from `full`
                skeleton = type(self.model)(self.model.config)
            skeleton.save_pretrained(str(out_dir), state_dict=full, safe_serialization=True)
        self.barrier()


# ---------------------------------------------------------------------------------------------- model surgery


def _optimizer_over_shards(
    build_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer], plain: nn.Module, model: nn.Module
) -> torch.optim.Optimizer:
    """The optimizer ``build_optimizer`` makes for the *plain* model, holding this rank's parameters instead.

    Parameter groups are often chosen by shape (weight decay on matrices, not on vectors), and AxoNN's shards are
    1-D: grouping the plain parameters keeps every weight in the group it has in a one-process run. Before the first
    step an optimizer holds no state, so swapping each parameter for its namesake in ``model`` is all it takes."""
    names = {id(p): name for name, p in plain.named_parameters()}
    optimizer = build_optimizer(plain.parameters())
    for group in optimizer.param_groups:
        group["params"] = [model.get_parameter(names[id(p)]) for p in group["params"]]
    return optimizer


def _untie_shared_outputs(model: nn.Module) -> None:
    """Turn AxoNN Linears whose weight Hugging Face tied to another parameter (a tied ``lm_head``) back into plain
    ``nn.Linear`` sharing that parameter: a 2-D full weight cannot live in AxoNN's 1-D sharded layer."""
    for name, module in axonn_linears(model):
        if getattr(module.weight, "is_tensor_parallel", False):
            continue
        plain = nn.Linear(module.in_features, module.out_features, bias=False, device="meta")
        plain.weight = module.weight
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, plain)


def _refuse_biases(model: nn.Module) -> None:
    """AxoNN 0.2.0 reduces tensor-parallel bias gradients over data and depth only, missing the row x column grid
    (its own test skips the case); refuse instead of training silently wrong."""
    from axonn import axonn as ax

    biased = [name for name, m in axonn_linears(model) if m.bias is not None]
    if biased and ax.config.G_intra_r * ax.config.G_intra_c > 1:
        raise UserError(
            f"engine=axonn cannot train tensor-parallel linear layers with biases when "
            f"axonn.row·axonn.col > 1 (AxoNN 0.2.0 computes their gradients wrongly), e.g. {biased[0]}; "
            f"use a model without linear biases (Llama: attention_bias=false, mlp_bias=false) or "
            f"axonn.row=1 axonn.col=1"
        )


@torch.no_grad()
def gather_full_weight(module: nn.Module) -> torch.Tensor:
    """The full (out, in) weight of an AxoNN ``Linear`` from its 1-D shards (a collective over its grid).

    AxoNN cuts the full weight into (out/R, in/C) blocks -- rows over the outer group, columns over the inner group --
    and splits each flattened block into ``depth`` pieces; this undoes the three steps in reverse order."""
    piece = module.weight.detach().contiguous()  # (out/R * in/C / D,)
    block = _all_gather_cat(piece, module.depth_group, dim=0)  # (out/R * in/C,)
    block = block.view(module.local_out_features, module.local_in_features)
    rows = _all_gather_cat(block, module.inner_group, dim=1)  # (out/R, in)
    return _all_gather_cat(rows, module.outer_group, dim=0)  # (out, in)


def _all_gather_cat(tensor: torch.Tensor, group: Any, dim: int) -> torch.Tensor:
    size = dist.get_world_size(group)
    if size == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(size)]
    dist.all_gather(parts, tensor.contiguous(), group=group)
    return torch.cat(parts, dim=dim)
