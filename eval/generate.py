"""Batched, KV-cached decoding that gives exactly what batch-1 ``model.generate`` gives.

Why our own loop instead of ``model.generate`` on a batch: the loop is a dozen lines we control (no stopping
criteria, no logits processors), and it computes logits only for the last position (``logits_to_keep=1``), so a
batch of 64 long prefixes does not build a (B, T, V) tensor it never reads.

EOS: by default a continuation is always ``max_new_tokens`` long, eos or not -- the same as batch-1
``model.generate(..., min_new_tokens=S)`` with the model's eos unset (:func:`eos_disabled`): memorisation is judged
on the whole suffix. With ``eos_id`` (``decoding.stop_at_eos``), a continuation ends after its first eos, exactly as
plain batch-1 ``model.generate`` stops there (the batch still decodes S steps -- no per-step host sync to test for
eos -- and each row is cut after its first eos).

Padding is on the LEFT so that every row's next token sits in the last column. Left padding is only invisible to
the model if (a) the attention mask hides the pads and (b) positions restart at the first real token, so we pass
``position_ids = cumsum(mask) - 1`` explicitly, also at every decoding step. Models whose ``forward`` takes no
``position_ids`` get batches of equal-length prefixes only (no padding at all).

Batches are formed by **length bucketing** (windows sorted by length) to keep padding small; the outputs come
back in the input order. ``batch_size="auto"`` picks a size from a memory estimate on CUDA and halves it on
out-of-memory; on CPU it uses :data:`CPU_AUTO_BATCH`.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from typing import Callable, Iterator, Sequence

import torch
from tqdm.auto import tqdm

from .shard import current

log = logging.getLogger(__name__)

CPU_AUTO_BATCH = 32
MAX_AUTO_BATCH = 512

# pick(logits (B, V) fp32) -> next ids (B,)
Picker = Callable[[torch.Tensor], torch.Tensor]


def greedy_pick(logits: torch.Tensor) -> torch.Tensor:
    """Argmax (first index on ties, like ``model.generate``)."""
    return logits.argmax(dim=-1)


def sampling_pick(temperature: float, generator: torch.Generator) -> Picker:
    """Ancestral sampling at ``temperature`` from a seeded generator (same seed -> same samples)."""

    def pick(logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits / temperature, dim=-1)
        return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(logits.device)

    return pick


@functools.lru_cache(maxsize=None)
def _forward_params(model_cls: type) -> frozenset[str]:
    return frozenset(inspect.signature(model_cls.forward).parameters)


def accepts(model: torch.nn.Module, name: str) -> bool:
    """Whether ``model.forward`` takes keyword ``name`` (``position_ids``, ``logits_to_keep``)."""
    return name in _forward_params(type(model))


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Left-pad token lists -> ``input_ids`` (B, T), ``attention_mask`` (B, T), ``position_ids`` (B, T)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if len(seq):
            ids[row, width - len(seq) :] = torch.as_tensor(list(seq), dtype=torch.long)
            mask[row, width - len(seq) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


def forward(model, ids, mask, positions, past=None, keep: int = 1, use_cache: bool = True, cache_position=None):
    """One forward pass -> (logits of the last ``keep`` positions as fp32 (B, keep, V), KV cache or None).

    ``cache_position`` (T,): the cache slots this pass writes, for models whose ``forward`` takes it (transformers
    4.x needs it with a static cache; 5.x tracks it in the cache)."""
    kwargs = {"attention_mask": mask, "use_cache": use_cache}
    if past is not None:
        kwargs["cache" if accepts(model, "cache") else "past_key_values"] = past
    if cache_position is not None and accepts(model, "cache_position"):
        kwargs["cache_position"] = cache_position
    if accepts(model, "position_ids"):
        kwargs["position_ids"] = positions
    if accepts(model, "logits_to_keep"):
        kwargs["logits_to_keep"] = keep
    out = model(input_ids=ids, **kwargs)
    cache = None
    if use_cache:  # transformers >= 5.2x renamed past_key_values -> cache
        cache = out.get("cache") if out.get("cache") is not None else out.get("past_key_values")
    return out.logits[:, -keep:].float(), cache


def static_kv_cache(model, max_len: int):
    """A Hugging Face ``StaticCache`` of ``max_len`` positions (allocated at the first forward, for its batch):
    fixed shapes at every decoding step, no reallocation as the sequence grows (what CUDA graphs and
    ``torch.compile`` need)."""
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=max_len)


@torch.inference_mode()
def decode_batch(
    model,
    prefixes: Sequence[Sequence[int]],
    max_new_tokens: int,
    pad_id: int,
    pick: Picker = greedy_pick,
    static_cache: bool = False,
) -> torch.Tensor:
    """Decode ``max_new_tokens`` tokens after each prefix (no early stop at eos) -> ids (B, max_new_tokens).

    Every step reads views of tensors allocated once -- the attention mask (B, P + S), the cache positions (P + S,)
    and the output ids (B, S) -- so the loop allocates nothing that grows and never waits for the device (the ids
    are copied to the host once, at the end). ``static_cache``: a preallocated :func:`static_kv_cache` instead of
    the growing dynamic one."""
    ids, mask, positions = left_pad(prefixes, pad_id, model_device(model))
    rows, width = ids.shape
    full_mask = torch.cat([mask, mask.new_ones((rows, max_new_tokens))], dim=1)  # (B, P + S)
    slots = torch.arange(width + max_new_tokens, device=ids.device)  # (P + S,) cache positions
    past = static_kv_cache(model, width + max_new_tokens) if static_cache else None
    logits, past = forward(model, ids, mask, positions, past, cache_position=slots[:width])
    out = torch.empty((rows, max_new_tokens), dtype=torch.long, device=ids.device)
    out[:, 0] = pick(logits[:, -1])
    last_pos = positions[:, -1:]  # (B, 1)
    for step in range(1, max_new_tokens):
        last_pos = last_pos + 1
        cur = width + step  # tokens in the sequence once this step's input is appended
        logits, past = forward(
            model, out[:, step - 1 : step], full_mask[:, :cur], last_pos, past, cache_position=slots[cur - 1 : cur]
        )
        out[:, step] = pick(logits[:, -1])
    return out.cpu()


def cut_at_eos(ids: list[int], eos_id: int | None) -> list[int]:
    """``ids`` up to and including the first ``eos_id`` (all of them when absent or ``eos_id`` is None)."""
    if eos_id is None or eos_id not in ids:
        return ids
    return ids[: ids.index(eos_id) + 1]


def buckets(lengths: Sequence[int], batch_size: int, exact: bool = False) -> Iterator[list[int]]:
    """Indices grouped into batches of similar (``exact``: equal) length, longest first (OOM shows up at once)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batch: list[int] = []
    for i in order:
        if batch and (len(batch) == batch_size or exact and lengths[batch[0]] != lengths[i]):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def auto_batch_size(model, max_len: int, n: int) -> int:
    """A batch size that fits: on CUDA from free memory and the KV-cache + logits size per row; on CPU a constant."""
    device = model_device(model)
    if device.type != "cuda":
        return max(1, min(CPU_AUTO_BATCH, n))
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    layers = getattr(cfg, "num_hidden_layers", 24)
    hidden = getattr(cfg, "hidden_size", 4096)
    heads = getattr(cfg, "num_attention_heads", 32) or 32
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    elem = next(model.parameters()).element_size()
    kv = 2 * layers * max_len * kv_heads * (hidden // heads) * elem  # K and V of every layer, one row
    acts = 8 * max_len * hidden * elem + 4 * max_len * getattr(cfg, "intermediate_size", 4 * hidden) * elem
    logits = 4 * (max_len + 1) * getattr(cfg, "vocab_size", 50_000)  # teacher-forced pass keeps the suffix logits
    free, _ = torch.cuda.mem_get_info(device)
    size = int(0.6 * free // (kv + acts + logits))
    return max(1, min(size, MAX_AUTO_BATCH, n))


def run_batched(
    fn: Callable[[list[int]], list],
    lengths: Sequence[int],
    batch_size: int | str,
    model,
    exact: bool = False,
    desc: str = "",
    progress: bool = True,
    on_batch: Callable[[int], None] | None = None,
) -> list:
    """Apply ``fn(indices) -> per-index results`` over length buckets; halve the batch on CUDA out-of-memory.
    ``on_batch(n)`` is told each finished batch's size (a caller's progress count).

    Returns results in input order. ``batch_size`` may be ``"auto"``. Under a split evaluation
    (:mod:`goldfish.eval.shard`) each rank computes its share of the same buckets and every rank returns all results
    (an out-of-memory batch is then an error: lower the batch size).
    """
    n = len(lengths)
    size = auto_batch_size(model, max(lengths, default=1), n) if batch_size == "auto" else int(batch_size)
    results: list = [None] * n
    done = 0
    shard = current()
    bar = tqdm(total=n, desc=desc, disable=None if progress and shard.main else True, leave=False, unit="win")
    if shard.split:  # the same buckets as one process; this rank computes its share, every rank gets all
        plan = list(buckets(lengths, size, exact))
        for mine, batches in shard.rounds(len(plan)):
            part = dict(zip(plan[mine], fn(plan[mine]))) if mine is not None else {}
            for got in shard.gather(part):
                for i, value in got.items():
                    results[i] = value
            bar.update(sum(len(plan[b]) for b in batches))
            if on_batch is not None:
                on_batch(sum(len(plan[b]) for b in batches))
        bar.close()
        return results
    while done < n:
        pending = [i for i in range(n) if results[i] is None]
        try:
            for batch in buckets([lengths[i] for i in pending], size, exact):
                idx = [pending[j] for j in batch]
                for i, value in zip(idx, fn(idx)):
                    results[i] = value
                done += len(idx)
                bar.update(len(idx))
                if on_batch is not None:
                    on_batch(len(idx))
        except torch.cuda.OutOfMemoryError:
            if size == 1:
                raise
            size //= 2
            torch.cuda.empty_cache()
            log.warning("out of memory: retrying with batch size %d", size)
    bar.close()
    return results


def generate(
    model,
    prefixes: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    pad_id: int = 0,
    batch_size: int | str = 32,
    pick: Picker = greedy_pick,
    progress: bool = True,
    desc: str = "generate",
    static_cache: bool | None = None,
    eos_id: int | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[list[int]]:
    """``max_new_tokens`` tokens after every prefix, greedy by default -> one id list per prefix.

    Without ``eos_id``: exactly ``max_new_tokens`` tokens, token-identical to batch-1 ``model.generate(prefix,
    do_sample=False, max_new_tokens=S, min_new_tokens=S)`` with eos unset. With ``eos_id``: each list ends after its
    first eos, token-identical to batch-1 ``model.generate(prefix, do_sample=False, max_new_tokens=S)`` with that
    eos (tested on Llama, GPT-2 and GPT-NeoX in fp32, with either cache). ``static_cache``: preallocated KV cache
    (None: on CUDA only, where fixed shapes spare the allocator).
    """
    if max_new_tokens < 1:
        return [[] for _ in prefixes]
    exact = not accepts(model, "position_ids")
    static = model_device(model).type == "cuda" if static_cache is None else static_cache

    def run(idx: list[int]) -> list[list[int]]:
        rows = decode_batch(model, [prefixes[i] for i in idx], max_new_tokens, pad_id, pick, static).tolist()
        return [cut_at_eos(r, eos_id) for r in rows]

    return run_batched(run, [len(p) for p in prefixes], batch_size, model, exact, desc, progress, on_batch)


@contextlib.contextmanager
def eos_disabled(model):
    """Temporarily unset the model's eos so ``model.generate`` neither stops at eos nor (via ``min_new_tokens``)
    bans it: decoding then matches plain argmax/beam continuation over the whole vocabulary, like our loop."""
    gen_cfg = getattr(model, "generation_config", None)
    saved = getattr(gen_cfg, "eos_token_id", None)
    if gen_cfg is not None:
        gen_cfg.eos_token_id = None
    try:
        yield
    finally:
        if gen_cfg is not None:
            gen_cfg.eos_token_id = saved


@torch.inference_mode()
def beam_generate(
    model,
    prefixes: Sequence[Sequence[int]],
    max_new_tokens: int,
    num_beams: int,
    *,
    pad_id: int = 0,
    batch_size: int | str = 8,
    progress: bool = True,
) -> list[list[int]]:
    """Beam search continuation of exactly ``max_new_tokens`` tokens (``model.generate(num_beams=...)``, eos off)."""
    from transformers import GenerationConfig

    gen_cfg = GenerationConfig(
        do_sample=False,
        num_beams=num_beams,
        max_new_tokens=max_new_tokens,
        min_new_tokens=max_new_tokens,
        pad_token_id=pad_id,
    )

    def run(idx: list[int]) -> list[list[int]]:
        ids, mask, _ = left_pad([prefixes[i] for i in idx], pad_id, model_device(model))
        with eos_disabled(model):
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen_cfg)
        return out[:, ids.shape[1] :].cpu().tolist()

    return run_batched(run, [len(p) for p in prefixes], batch_size, model, False, "beam search", progress)
