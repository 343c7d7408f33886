"""Tensor x pipeline x data parallelism for a plain Hugging Face Llama causal LM, one function per dimension.

The recipe follows torchtitan's ``parallelize.py``: the model stays an unmodified ``LlamaForCausalLM`` built by the
caller, and each dimension is applied to it in this order (each logs what it applied on the main rank):

1. :func:`parallel_dims` / :func:`build_mesh` -- a ``DeviceMesh`` with dims ``("pp", "dp", "tp")``.
2. :func:`apply_tp` -- DTensor ``parallelize_module``: column-wise q/k/v/gate/up, row-wise o/down, vocab-parallel
   embedding and ``lm_head`` (replicated when tied), norms as replicated DTensors.
3. :func:`split_stage` + :func:`build_pipeline` -- ``torch.distributed.pipelining``: this rank keeps a contiguous slice
   of decoder layers in a :class:`StageModule` (embedding on the first stage, final norm + ``lm_head`` on the last)
   and runs it with ``ScheduleGPipe`` or ``Schedule1F1B``; the injected loss function runs on the last stage only.
4. :func:`apply_fsdp` (FSDP2 ``fully_shard`` over ``dp``), or replicated weights: :func:`apply_ddp` for a plain
   model, :func:`allreduce_gradients` after backward when TP or PP is on (DDP takes neither DTensor parameters nor
   a module driven by a pipeline schedule).

Gradients are *summed* over data-parallel ranks, never averaged: the loss of every micro-batch is already divided by
the global count of kept tokens (see :mod:`goldfish.engines.base`), so a sum gives exactly the one-process gradient.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel, parallelize_module
from torch.utils.checkpoint import checkpoint

from ..config import check, raise_problems
from .base import LossFn, stats_vector

log = logging.getLogger("goldfish.engines")

PP_SCHEDULES = ("gpipe", "1f1b")


def log_main(message: str, *args: Any) -> None:
    """Print ``parallel: <message>`` on global rank 0 only (every rank applies the same plan; one line is enough).

    Printed like the trainer's step lines (the CLI configures no logging handlers); also sent to the
    ``goldfish.engines`` logger for applications that do."""
    if not dist.is_initialized() or dist.get_rank() == 0:
        print("parallel: " + message % args, flush=True)
        log.info(message, *args)


# --------------------------------------------------------------------------------------------- layout + mesh


@dataclasses.dataclass(frozen=True)
class ParallelDims:
    """Degrees of each parallel dimension; ``pp * dp * tp == world_size``."""

    pp: int
    dp: int
    tp: int

    @property
    def world_size(self) -> int:
        return self.pp * self.dp * self.tp


def parallel_dims(
    pp: int,
    dp: int,
    tp: int,
    world_size: int,
    model_config: Any = None,
    schedule: str = "gpipe",
    microbatches: int | None = None,
    micro_batch_rows: int | None = None,
) -> ParallelDims:
    """Resolve ``dp=0`` (auto: ``world / (pp*tp)``) and validate the layout against the world, the model (when
    given) and the pipeline schedule (``microbatches`` pipeline chunks per micro-batch of ``micro_batch_rows``
    rows; None: pp chunks, rows unchecked).

    Raises one :class:`ConfigError` naming every problem, with every factor of a failed product."""
    problems: list[str] = []
    for name, value in (("pp", pp), ("tp", tp)):
        check(value >= 1, problems, f"parallel.{name}={value} must be >= 1")
    check(dp >= 0, problems, f"parallel.dp={dp} must be >= 1, or 0 for auto (world size / (pp*tp))")
    raise_problems(problems)
    check(
        schedule in PP_SCHEDULES, problems, f"parallel.pp_schedule={schedule!r} is not one of {', '.join(PP_SCHEDULES)}"
    )
    microbatches = microbatches or pp
    check(
        not (pp > 1 and schedule == "1f1b" and microbatches < pp),
        problems,
        f"parallel.pp_microbatches={microbatches} must be >= parallel.pp={pp} for the 1f1b schedule; "
        f"raise it or use parallel.pp_schedule=gpipe",
    )
    check(
        not (pp > 1 and micro_batch_rows and micro_batch_rows % microbatches),
        problems,
        f"parallel.pp_microbatches={microbatches} must divide schedule.micro_batch_size={micro_batch_rows} (each "
        f"micro-batch is split into that many pipeline chunks); change one of them",
    )
    if dp == 0:
        check(
            world_size % (pp * tp) == 0,
            problems,
            f"pp({pp})·tp({tp})={pp * tp} does not divide world size {world_size}; "
            f"set parallel.pp/parallel.tp so their product divides the number of processes",
        )
        dp = max(world_size // (pp * tp), 1)
    else:
        check(
            pp * dp * tp == world_size,
            problems,
            f"pp({pp})·dp({dp})·tp({tp})={pp * dp * tp} ≠ world size {world_size}; "
            f"launch {pp * dp * tp} processes or set parallel.dp=0 (auto)",
        )
    if model_config is not None:
        heads, kv_heads = (
            model_config.num_attention_heads,
            model_config.num_key_value_heads or model_config.num_attention_heads,
        )
        for what, n in (
            ("num_attention_heads", heads),
            ("num_key_value_heads", kv_heads),
            ("intermediate_size", model_config.intermediate_size),
        ):
            check(n % tp == 0, problems, f"parallel.tp={tp} must divide the model's {what} ({n})")
        layers = model_config.num_hidden_layers
        check(
            pp <= layers,
            problems,
            f"parallel.pp={pp} exceeds the model's {layers} decoder layers; use parallel.pp <= {layers}",
        )
    raise_problems(problems)
    return ParallelDims(pp=pp, dp=dp, tp=tp)


def build_mesh(dims: ParallelDims, device_type: str) -> DeviceMesh:
    """A 3-D ``DeviceMesh`` ``(pp, dp, tp)``; tp is innermost so tensor-parallel peers are neighbouring ranks."""
    mesh = init_device_mesh(device_type, (dims.pp, dims.dp, dims.tp), mesh_dim_names=("pp", "dp", "tp"))
    log_main("device mesh (pp=%d, dp=%d, tp=%d) on %s", dims.pp, dims.dp, dims.tp, device_type)
    return mesh


# --------------------------------------------------------------------------------------------- tensor parallel


class ReplicateParallel(ParallelStyle):
    """Keep a module whole on every tensor-parallel rank, as ``Replicate`` DTensors.

    Converting the replicated parameters (norms, tied embeddings) to DTensors keeps every parameter of the model the
    same kind, so one optimizer (foreach AdamW), FSDP2 and the global gradient norm treat them uniformly. Inputs
    become ``Replicate`` DTensors and outputs plain tensors again, so the module's neighbours are unaffected.
    Parameters that are already DTensors (a tied weight distributed earlier) are left as they are."""

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        def partition(_name: str, mod: nn.Module, mesh: DeviceMesh) -> None:
            for pname, param in list(mod.named_parameters(recurse=False)):
                if not isinstance(param, DTensor):
                    dparam = nn.Parameter(distribute_tensor(param.data, mesh, [Replicate()]), param.requires_grad)
                    mod.register_parameter(pname, dparam)

        def to_dtensor(_mod: nn.Module, inputs: tuple, mesh: DeviceMesh) -> tuple:
            return tuple(
                DTensor.from_local(x, mesh, [Replicate()], run_check=False)
                if isinstance(x, torch.Tensor) and not isinstance(x, DTensor)
                else x
                for x in inputs
            )

        def to_local(_mod: nn.Module, output: Any, _mesh: DeviceMesh) -> Any:
            return output.to_local() if isinstance(output, DTensor) else output

        return distribute_module(module, device_mesh, partition, to_dtensor, to_local)


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh) -> None:
    """Megatron-style tensor parallelism on a HF Llama model, in place.

    Attention reshapes with ``view(..., -1, head_dim)`` and ``num_key_value_groups`` is a ratio, so HF attention runs
    unchanged on the local ``num_heads / tp`` heads. Activations between blocks stay replicated (no sequence
    parallelism), so the plain residual stream and the rotary embedding need no change."""
    block_plan = {
        "self_attn.q_proj": ColwiseParallel(),
        "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(),
        "mlp.gate_proj": ColwiseParallel(),
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(),
        "input_layernorm": ReplicateParallel(),
        "post_attention_layernorm": ReplicateParallel(),
    }
    for block in model.model.layers:
        parallelize_module(block, tp_mesh, block_plan)
    if model.config.tie_word_embeddings:
        # one weight for both ends: replicate it once, then re-tie lm_head to the distributed parameter
        parallelize_module(model, tp_mesh, {"model.embed_tokens": ReplicateParallel()})
        model.lm_head.weight = model.model.embed_tokens.weight
        edge_plan: dict[str, ParallelStyle] = {"lm_head": ReplicateParallel()}
    else:
        edge_plan = {
            "model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),  # vocab-parallel lookup
            "lm_head": ColwiseParallel(output_layouts=Replicate()),
        }  # vocab-parallel, logits gathered
    parallelize_module(model, tp_mesh, {**edge_plan, "model.norm": ReplicateParallel()})
    log_main(
        "applied tensor parallelism (tp=%d): column-wise q/k/v/gate/up, row-wise o/down, %s embedding/lm_head",
        tp_mesh.size(),
        "replicated tied" if model.config.tie_word_embeddings else "vocab-parallel",
    )


# --------------------------------------------------------------------------------------------- pipeline parallel


def stage_layers(num_layers: int, pp: int, stage: int) -> range:
    """Decoder layers of ``stage``: contiguous, sizes differ by at most one (earlier stages take the extra)."""
    base, extra = divmod(num_layers, pp)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (stage < extra))


def causal_mask(
    config: Any, hidden: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor
) -> Any:
    """Hugging Face's attention mask for a cache-free forward of ``hidden`` (B, T, H), on every supported release.

    ``create_causal_mask`` changed its parameters: 4.56 takes ``input_embeds``, ``past_key_values`` and a required
    ``cache_position`` (T,); 5.17 ``inputs_embeds`` and ``past_key_values``; 5.24 ``inputs_embeds`` and ``cache``.
    The first two are passed by position, the rest by the names this release accepts (``inspect.signature``)."""
    from transformers.masking_utils import create_causal_mask

    params = _mask_params()
    kwargs: dict[str, Any] = {
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "cache" if "cache" in params else "past_key_values": None,
    }
    if "cache_position" in params:
        kwargs["cache_position"] = torch.arange(hidden.shape[1], device=hidden.device)
    return create_causal_mask(config, hidden, **kwargs)


@functools.lru_cache(maxsize=1)
def _mask_params() -> frozenset[str]:
    from transformers.masking_utils import create_causal_mask

    return frozenset(inspect.signature(create_causal_mask).parameters)


class StageModule(nn.Module):
    """A contiguous slice of a HF Llama causal LM that runs on its own (one pipeline stage, or the whole model).

    Submodules keep their HF names (``model.layers.3...``, ``lm_head``) so per-stage state dicts merge back into a
    ``save_pretrained`` folder. ``forward(x)`` takes token ids (B, T) on the first stage and hidden states (B, T, H)
    elsewhere; it returns logits (B, T, V) on the last stage and hidden states otherwise. ``position_ids`` and
    ``attention_mask`` reach every stage as keyword arguments, so rotary embeddings and masks match the full model."""

    def __init__(self, model: nn.Module, layers: Sequence[int], first: bool, last: bool):
        super().__init__()
        self.config = model.config
        self.model = nn.Module()
        self.model.embed_tokens = model.model.embed_tokens if first else None
        self.model.layers = nn.ModuleDict({str(i): model.model.layers[i] for i in layers})
        self.model.norm = model.model.norm if last else None
        self.model.rotary_emb = model.model.rotary_emb
        self.lm_head = model.lm_head if last else None
        self.split_tie = bool(model.config.tie_word_embeddings) and not (first and last)
        self.hidden_out = False  # last stage returns final-norm hidden states (B, T, H): the loss applies lm_head
        self.checkpoint_layers = False  # recompute each decoder layer in backward (activation checkpointing)

    @property
    def tied_weight(self) -> nn.Parameter | None:
        """This stage's copy of a weight tied across stages (None when the tie stays inside one module)."""
        if not self.split_tie:
            return None
        return (
            self.model.embed_tokens.weight
            if self.model.embed_tokens is not None
            else self.lm_head.weight
            if self.lm_head is not None
            else None
        )

    @property
    def norm_duplicate(self) -> nn.Parameter | None:
        """The last stage's tied copy: its gradient is counted in the global norm by the first stage already."""
        return self.tied_weight if self.split_tie and self.model.embed_tokens is None else None

    def forward(
        self, x: torch.Tensor, position_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        hidden = self.model.embed_tokens(x) if self.model.embed_tokens is not None else x  # (B, T, H)
        if position_ids is None:
            position_ids = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)  # (1, T)
        mask = causal_mask(self.config, hidden, attention_mask, position_ids)
        rotary = self.model.rotary_emb(hidden, position_ids=position_ids)  # (cos, sin), each (B, T, head_dim)
        for layer in self.model.layers.values():
            if self.checkpoint_layers:
                hidden = checkpoint(
                    layer,
                    hidden,
                    attention_mask=mask,
                    position_ids=position_ids,
                    position_embeddings=rotary,
                    use_reentrant=False,
                )
            else:
                hidden = layer(hidden, attention_mask=mask, position_ids=position_ids, position_embeddings=rotary)
        if self.model.norm is not None:
            hidden = self.model.norm(hidden)
            if not self.hidden_out:
                hidden = self.lm_head(hidden)  # (B, T, V)
        return hidden


def split_stage(model: nn.Module, pp_mesh: DeviceMesh | None) -> StageModule:
    """This rank's pipeline stage (the whole model when ``pp_mesh`` is None or has size 1)."""
    pp, stage = (pp_mesh.size(), pp_mesh.get_local_rank()) if pp_mesh is not None else (1, 0)
    layers = stage_layers(model.config.num_hidden_layers, pp, stage)
    module = StageModule(model, layers, first=stage == 0, last=stage == pp - 1)
    if pp > 1:
        log_main(
            "applied pipeline parallelism (pp=%d): layers %s",
            pp,
            ", ".join(f"stage {s}: {list(stage_layers(model.config.num_hidden_layers, pp, s))}" for s in range(pp)),
        )
    return module


def compile_layers(stage_module: StageModule) -> None:
    """``torch.compile`` each decoder layer in place (lazily, at its first call): RMSNorm, rotary embedding, SwiGLU
    and their backward become fused kernels. Applied after TP (the compiled code runs on DTensor shards) and before
    FSDP2 (whose per-layer hooks stay outside the compiled code, as in torchtitan); names and parameters are
    unchanged, so checkpoints are too."""
    for layer in stage_module.model.layers.values():
        layer.compile()
    log_main("compiled %d decoder layers (torch.compile, on first call)", len(stage_module.model.layers))


def tied_weight_group(mesh: DeviceMesh) -> dist.ProcessGroup | None:
    """The (first stage, last stage) pair of this rank's dp/tp coordinates, or None on middle stages.

    With ``tie_word_embeddings`` and pp > 1, the first stage's embedding and the last stage's ``lm_head`` are two
    copies of one weight (identical at init, same seed): :func:`sync_tied_gradients` sums their gradients over this
    pair so both receive the one-process gradient and AdamW keeps them identical. Every rank creates every pair
    (``new_group`` is collective)."""
    ranks = mesh.mesh  # (pp, dp, tp) global ranks
    mine = None
    for d in range(ranks.shape[1]):
        for t in range(ranks.shape[2]):
            pair = [int(ranks[0, d, t]), int(ranks[-1, d, t])]
            group = dist.new_group(pair)
            if dist.get_rank() in pair:
                mine = group
    return mine


def sync_tied_gradients(weight: nn.Parameter | None, group: dist.ProcessGroup | None) -> None:
    """Sum the gradient of a tied weight's two stage copies (no-op without a copy or a group)."""
    if weight is not None and group is not None and weight.grad is not None:
        dist.all_reduce(local_tensor(weight.grad), op=dist.ReduceOp.SUM, group=group)


class StageLoss:
    """The injected loss function as a pipeline ``loss_fn``: ``kept_sum / normalizer`` of each micro-batch.

    A pipeline schedule splits one ``target`` tensor along with the inputs, so :meth:`pack` stacks the micro-batch's
    (B, T) targets into (B, T, K) int64 and ``__call__`` unpacks them (same names, same dtypes) before calling the
    loss function. It also records the (detached) kept/dropped sums and counts of each call, since dropped-token
    loss is measured but never backpropagated and the schedule only hands back the loss. The schedule's first step
    calls the loss once more on placeholder tensors (shape inference), so :meth:`stats` sums only the last
    ``n_microbatches`` calls."""

    def __init__(self, loss_fn: LossFn, head: nn.Module | None = None) -> None:
        self.loss_fn = loss_fn
        # a loss that asks for hidden states (chunked cross-entropy): the last stage hands over its final-norm hidden
        # states (B, T, H) and the loss applies ``head`` (lm_head) itself, never holding the whole logits
        self.head = head if getattr(loss_fn, "wants_hidden", False) else None
        self.keys: tuple[str, ...] = ()
        self.dtypes: tuple[torch.dtype, ...] = ()
        self.reset()

    def reset(self, normalizer: float = 1.0) -> None:
        """Start a step whose losses are divided by ``normalizer`` (the global kept-token count)."""
        self.normalizer = float(normalizer)
        self.records: list[torch.Tensor] = []

    def pack(self, targets: dict[str, torch.Tensor]) -> torch.Tensor:
        """{name: (B, T)} -> (B, T, K) int64 in sorted name order (the single tensor a schedule splits)."""
        self.keys = tuple(sorted(targets))
        self.dtypes = tuple(targets[k].dtype for k in self.keys)
        return torch.stack([targets[k].long() for k in self.keys], dim=-1)

    def __call__(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        targets = {k: target[..., i].to(dtype) for i, (k, dtype) in enumerate(zip(self.keys, self.dtypes))}
        if self.head is not None:
            parts = self.loss_fn(logits, targets, head=self.head)  # logits: final hidden states (B, T, H)
        else:
            parts = self.loss_fn(logits, targets)
        self.records.append(stats_vector(parts).cpu())
        return parts.kept_sum / self.normalizer

    def stats(self, n_microbatches: int | None = None) -> torch.Tensor:
        """(4,) float64: kept_sum, kept_count, dropped_sum, dropped_count over the step's last micro-batches."""
        records = self.records[-n_microbatches:] if n_microbatches else self.records
        return torch.stack(records).sum(0) if records else torch.zeros(4, dtype=torch.float64)


def build_pipeline(
    stage_module: nn.Module,
    pp_mesh: DeviceMesh,
    schedule: str,
    n_microbatches: int,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: torch.device,
) -> Any:
    """A ``PipelineStage`` for this rank wrapped in a GPipe or 1F1B schedule.

    ``scale_grads=False``: the loss is already normalised by the global kept-token count, so the schedule must not
    divide gradients by the number of micro-batches again. Shapes are inferred on the first step, so build a new
    pipeline when the batch shape changes."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    stage = PipelineStage(stage_module, pp_mesh.get_local_rank(), pp_mesh.size(), device, group=pp_mesh.get_group())
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    return cls(stage, n_microbatches=n_microbatches, loss_fn=loss_fn, scale_grads=False)


# --------------------------------------------------------------------------------------------- data parallel


def apply_fsdp(
    stage_module: StageModule, dp_mesh: DeviceMesh, mp_policy: Any = None, reshard_after_forward: bool = True
) -> None:
    """FSDP2 ``fully_shard`` over the ``dp`` mesh: one unit per decoder layer plus the stage root.

    Every unit's gradient divide factor is 1, so reduce-scatter *sums* gradients over data-parallel ranks (the loss
    is already divided by the global kept-token count). Parameters that TP made DTensors become 2-D (dp, tp)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs = {
        "mesh": dp_mesh,
        "mp_policy": mp_policy or MixedPrecisionPolicy(),
        "reshard_after_forward": reshard_after_forward,
    }
    units = [fully_shard(layer, **kwargs) for layer in stage_module.model.layers.values()]
    # the root unit (embedding, final norm, lm_head) stays unsharded from forward to backward, FSDP2's own heuristic
    # for a root (its weights are all-gathered again at once for backward); the chunked CE also runs lm_head after
    # the stage's forward, so its weight must still be whole then
    units.append(fully_shard(stage_module, **{**kwargs, "reshard_after_forward": False}))
    for unit in units:
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)  # plain SUM: gloo has no PREMUL_SUM; factor 1 = no scaling
    log_main("applied FSDP2 (dp=%d): %d units, gradients summed over data-parallel ranks", dp_mesh.size(), len(units))


def _allreduce_sum_hook(group, bucket):  # unannotated: DDP rejects string annotations (postponed evaluation)
    """DDP communication hook: SUM each gradient bucket (a ``dist.GradBucket``; DDP's default hook averages)."""
    work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def apply_ddp(module: nn.Module, dp_mesh: DeviceMesh, device: torch.device) -> nn.Module:
    """``DistributedDataParallel`` over the ``dp`` mesh (bucketed all-reduce overlapped with backward), summing
    gradients. Only for plain modules: DTensor (TP) parameters and pipeline stages use :func:`allreduce_gradients`."""
    group = dp_mesh.get_group()
    ddp = nn.parallel.DistributedDataParallel(
        module, device_ids=[device.index] if device.type == "cuda" else None, process_group=group
    )
    ddp.register_comm_hook(group, _allreduce_sum_hook)
    log_main("applied DDP (dp=%d): gradients summed over data-parallel ranks", dp_mesh.size())
    return ddp


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor (the tensor itself otherwise)."""
    return t.to_local() if isinstance(t, DTensor) else t


def allreduce_gradients(params: Sequence[nn.Parameter], group: dist.ProcessGroup) -> None:
    """Replicated data parallelism: sum every gradient over ``group`` (one flat bucket per dtype)."""

    grads = [local_tensor(p.grad) for p in params if p.grad is not None]
    for dtype in sorted({g.dtype for g in grads}, key=str):
        bucket = [g for g in grads if g.dtype == dtype]
        flat = _flatten_dense_tensors(bucket)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
        for g, synced in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
            g.copy_(synced)


# --------------------------------------------------------------------------------------------- optimisation


def clip_grad_norm_(
    params: Sequence[nn.Parameter],
    max_norm: float | None,
    pp_group: dist.ProcessGroup | None = None,
    duplicate: nn.Parameter | None = None,
) -> float:
    """Global L2 norm of all gradients across TP/FSDP shards and pipeline stages; scale them to ``max_norm``.

    DTensor norms reduce over their own mesh (sharded dims are summed, replicated ones counted once); the squared
    norms of the stages are then summed over ``pp_group``; ``duplicate`` (a tied weight's second copy) is scaled but
    not counted. Same clip rule as ``torch.nn.utils.clip_grad_norm_``."""
    grads = [p.grad for p in params if p.grad is not None]
    device = local_tensor(grads[0]).device if grads else torch.device("cpu")
    squared = torch.zeros((), dtype=torch.float64, device=device)
    # CPU fp32 norms of large tensors drift by ~1e-5 relative (one 4096x128 embedding: 4e-5), enough to make shards
    # and the whole tensor disagree; accumulate in float64 there. GPU reductions are tree-shaped: fp32 suffices.
    acc = torch.float64 if device.type == "cpu" else torch.float32
    for g in (p.grad for p in params if p.grad is not None and p is not duplicate):
        norm = torch.linalg.vector_norm(g, dtype=acc)
        squared += (norm.full_tensor() if isinstance(norm, DTensor) else norm).double() ** 2
    if pp_group is not None and dist.get_world_size(pp_group) > 1:
        dist.all_reduce(squared, op=dist.ReduceOp.SUM, group=pp_group)
    total = float(squared.sqrt())
    if max_norm is not None and max_norm > 0:
        coef = min(max_norm / (total + 1e-6), 1.0)
        if coef < 1.0:
            for g in grads:
                g.mul_(coef)
    return total
