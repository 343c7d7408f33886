"""Back-of-the-envelope memory and time per device for a training config -- what ``--dry-run`` prints.

Nothing is allocated: the model shape comes from the size table (:func:`goldfish.models.llama_config`); the layout
comes from the engine itself (:meth:`goldfish.engines.base.Engine.layout_for`: the same validation training runs,
and the engine's sharding divisors) and the batch rule from the trainer (:func:`goldfish.train_config.check_batch`).

Memory per device (bytes), for the most loaded device (the pipeline stage holding the embedding or the head):

* **weights** 4 B/param (fp32 master weights; bf16 autocast casts on the fly), **grads** 4 B/param, **AdamW** 8 B/param
  (two fp32 moments). The engine's :class:`~goldfish.engines.base.Layout` says how they are divided: transformer-layer
  matrices by ``weight_shard`` (native: ``tp``; AxoNN: ``row·col·depth``), an untied output head by ``head_shard``
  (native: replicated; AxoNN: like the layers, it is an ``nn.Linear``), all state by ``state_shard`` (FSDP: ``dp``).
  Pipeline stages hold ``ceil(L/pp)`` layers. The token embedding is treated as replicated across tensor-parallel
  ranks (the conservative choice). Norm weights are replicated.
* **activations** saved for backward, per token per layer: ``4·H`` replicated (two norm inputs and outputs) plus
  ``(2·H + 2·kv·d + 4·I)/t`` sharded (q, k, v, attention output; gate, up, act(gate), gate·up), with fused
  (flash/SDPA) attention, i.e. no ``s×s`` score matrix; ``t`` = the layout's ``activation_shard``. Element size:
  2 B under bf16 autocast, 4 B in fp32. Multiplied by the tokens in flight on the stage: the micro-batch times the
  layout's ``activation_fraction`` (pipelining, 1F1B: ``min(pp, m)`` of ``m`` chunks; GPipe: all ``m``).
* **logits** on the last stage: ``b·s·V·(e + 4) / logits_shard`` (the logits and their fp32 copy inside the
  cross-entropy).

Time: training FLOPs per token ``6·N + 12·L·H·s`` (:func:`goldfish.perf.model_flops_per_token`; N = matmul weights:
every parameter except an untied input embedding), divided by ``world · peak · mfu``. CUDA context, allocator
fragmentation and communication buffers are not counted: keep the estimate under ~90 % of the device memory.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
from pathlib import Path
from typing import Any

from transformers import AutoConfig

from .engines import engine_layout
from .engines.base import Layout
from .errors import ConfigError, UserError
from .hardware import GPUS
from .models import llama_config
from .perf import model_flops_per_token
from .train_config import ModelConfig, TrainConfig, check_batch

GIB = 1024**3

# device kind (hardware.gpu) -> (dense bf16 peak TFLOP/s, memory GiB), from the one table of goldfish.hardware
DEVICES: dict[str, tuple[float | None, float]] = {"cpu": (None, 0.0), **{g.kind: (g.bf16, g.memory_gib) for g in GPUS}}


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """A Llama shape: enough to count parameters, FLOPs and activations."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    tied: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def layer_matrix_params(self) -> int:
        """Weights of one block's linear layers: q, o (H·H each), k, v (H·kv·d each), gate, up, down (H·I each)."""
        h = self.hidden
        return 2 * h * h + 2 * h * self.kv_heads * self.head_dim + 3 * h * self.intermediate

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters, tied embeddings counted once (two RMSNorm weights per block + the final norm)."""
        heads = 1 if self.tied else 2
        return heads * self.embedding_params + self.layers * (self.layer_matrix_params + 2 * self.hidden) + self.hidden

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (:func:`goldfish.perf.model_flops_per_token`), N = every parameter except an
        untied input embedding (a lookup, no FLOPs)."""
        n = self.params - (0 if self.tied else self.embedding_params)
        return model_flops_per_token(n, self.layers, self.hidden, seq_len)


def shape_of(model_cfg: ModelConfig, vocab_size: int) -> ModelShape:
    """The shape of a ``ModelConfig`` (named size + overrides, or a local HF folder's config.json)."""
    if model_cfg.path:
        path = Path(model_cfg.path).expanduser().resolve()
        read = path / "config.json" if path.is_dir() else path
        stat = read.stat() if read.is_file() else None  # a missing file: transformers' own error, nothing cached
        config = _pretrained_config(str(path), stat.st_mtime_ns if stat else 0, stat.st_size if stat else -1)
        vocab_size = config.vocab_size
    else:
        config = llama_config(model_cfg, vocab_size)
    heads = config.num_attention_heads
    return ModelShape(
        vocab=vocab_size,
        hidden=config.hidden_size,
        layers=config.num_hidden_layers,
        heads=heads,
        kv_heads=config.num_key_value_heads or heads,
        intermediate=config.intermediate_size,
        tied=bool(config.tie_word_embeddings),
    )


@functools.lru_cache(maxsize=8)
def _pretrained_config(path: str, mtime_ns: int, size: int) -> Any:
    """A local model's config, read once per file version (a GGUF's is parsed from its metadata, ~5 s for SmolLM2's
    49 k-entry vocabulary; a dry run asks once per cell). Keyed by the file's mtime and size, so an edit is re-read."""
    where = Path(path)
    gguf = dict(gguf_file=where.name) if where.suffix == ".gguf" else {}  # a GGUF holds its config
    return AutoConfig.from_pretrained(
        str(where.parent if gguf else where), local_files_only=True, trust_remote_code=False, **gguf
    )


def _hf_like(shape: ModelShape) -> Any:
    """The LlamaConfig attributes the engines' layout checks read."""
    return types.SimpleNamespace(
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        hidden_size=shape.hidden,
        tie_word_embeddings=shape.tied,
    )


def layout_of(train_cfg: TrainConfig, shape: ModelShape, world: int) -> Layout:
    """The layout ``train_cfg``'s engine would use on ``world`` devices, or one ConfigError naming every problem.

    The engine validates its own layout (``Engine.layout_for``) and the trainer its batch rule
    (:func:`goldfish.train_config.check_batch`), so a dry run refuses exactly what training would refuse."""
    problems: list[str] = []
    layout = None
    try:
        layout = engine_layout(train_cfg, world, _hf_like(shape))
        check_batch(train_cfg.schedule, layout.dp)
    except UserError as e:
        problems.append(str(e))
    if problems or layout is None:
        raise ConfigError("; ".join(problems))
    return layout


@dataclasses.dataclass
class MemoryEstimate:
    """Bytes per device (the most loaded one); see the module docstring for what each term counts."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    logits: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.logits

    def as_gib(self) -> dict[str, float]:
        d = {k: v / GIB for k, v in dataclasses.asdict(self).items()}
        d["total"] = self.total / GIB
        return d


def stage_params(shape: ModelShape, layout: Layout) -> float:
    """Parameters held by the most loaded device (before data-parallel sharding)."""
    layers = math.ceil(shape.layers / layout.pp)
    per_layer = shape.layer_matrix_params / layout.weight_shard + 2 * shape.hidden
    embed = shape.embedding_params
    head = 0.0 if shape.tied else shape.embedding_params / layout.head_shard
    ends = embed + head if layout.pp == 1 else max(embed, head)
    return layers * per_layer + ends + shape.hidden  # + final norm


def estimate_memory(
    shape: ModelShape, layout: Layout, micro_batch: int, seq_len: int, precision: str = "bf16"
) -> MemoryEstimate:
    """Per-device memory of training ``shape`` on ``layout`` (see the module docstring)."""
    local = stage_params(shape, layout) / layout.state_shard
    e = 2 if precision == "bf16" else 4
    per_token_layer = (
        4 * shape.hidden
        + (2 * shape.hidden + 2 * shape.kv_heads * shape.head_dim + 4 * shape.intermediate) / layout.activation_shard
    )
    layers = math.ceil(shape.layers / layout.pp)
    tokens = micro_batch * seq_len
    activations = tokens * layout.activation_fraction * layers * per_token_layer * e
    logits = tokens * shape.vocab * (e + 4) / layout.logits_shard
    return MemoryEstimate(
        weights=4 * local, grads=4 * local, optimizer=8 * local, activations=activations, logits=logits
    )


def estimate_time(
    total_tokens: float | None, flops_per_token: float, world: int, device: str, mfu: float
) -> float | None:
    """Seconds of training at ``mfu`` of the device's dense bf16 peak (None for CPU or an unknown budget)."""
    peak = DEVICES.get(device, (None, 0.0))[0]
    if peak is None or not total_tokens:
        return None
    return total_tokens * flops_per_token / (world * peak * 1e12 * mfu)


def device_memory_gib(device: str, memory_gb: float) -> float:
    """The configured memory per device, else the device kind's usual size (0 when unknown)."""
    return memory_gb or DEVICES.get(device, (None, 0.0))[1]
