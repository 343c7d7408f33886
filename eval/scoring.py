"""Teacher-forced per-token scores of token sequences in bounded memory: the one scoring pass of the toolkit.

Every measure that reads a model's next-token distributions on true text comes from here: extraction's one-pass
verdicts (``goldfish.eval.extraction.onepass``), the k baseline (``goldfish.eval.baseline``), a cell's
``attacks.json`` (``goldfish.experiment.analyses.attacks``) and every membership attack (``goldfish.eval.membership``).

A document of L tokens yields, for each target t = first..L-1 (``first`` = 1 by default: every token but the first):

* ``logp[t]``: ``log p(x_t | x_<t)`` (fp32 log-softmax, stored as float64);
* ``rank[t]``: how many vocabulary ids come before ``x_t`` when the next-token logits are sorted in descending order,
  ties broken by the lower id -- the order greedy decoding picks in (``argmax`` takes the first maximum). ``rank == 0``
  is top-1 correctness: a greedy decoder given the true prefix emits ``x_t``; a beam of width b can only keep
  ``x_t`` among its candidates from that prefix when ``rank < b``;
* ``z[t]`` (``want_pp``, for Min-K%++): the log-prob standardised by the mean and std of log p under the model's own
  next-token distribution;
* ``extra[t]`` (with an ``extra`` hook): whatever a caller computes from the (t, V) next-token logits of a chunk of
  targets, e.g. the mask-consistent attacker's restricted argmax (``goldfish.eval.adversary``).

Three things keep memory bounded whatever the document length:

* **Windows of the model's context.** A document longer than ``window`` tokens is cut into overlapping segments
  ``[k·stride, k·stride + window)``; each segment scores only the tokens the previous one did not, so every token
  is scored exactly once, with at least ``window - stride`` tokens of context (the sliding-window perplexity of the
  Hugging Face guide). A document within the window is one segment, scored exactly as the model sees it whole.
* **Token-budget batches.** Segments are sorted by length and packed while ``rows × longest ≤ token_budget``
  (right padding + attention mask, so a row's log-probs equal those of the segment alone); one long segment is a
  batch of its own.
* **Chunked logits.** The model body runs once per batch -> hidden states (B, T, H); the output head and the fp32
  log-softmax then run ``chunk`` positions at a time, so at most (chunk, V) logits exist, never (B, T, V).

:func:`iter_token_statistics` yields each document as soon as its last segment is done, so callers can store
results incrementally (see :mod:`goldfish.eval.membership`, which makes scoring resumable). Segments that hold no
target at or after ``first`` are never computed, so scoring only a document's last tokens costs only their windows;
the scores of the targets that are computed equal those of scoring the whole document.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import hashlib
import os
import struct
import time
import weakref
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from goldfish.errors import UserError

from .generate import accepts, auto_batch_size
from .shard import current

DEFAULT_CHUNK = 512  # positions per fp32 log-softmax chunk: at most chunk × V × 4 bytes of logits at a time
DEFAULT_TOKEN_BUDGET = 4096  # padded tokens per forward pass
# membership's scoring window: the context a long document is scored with, whatever the model's (capped by it). Chosen
# with benchmarks/long_scoring.py: beyond it the cost per token stays constant (linear in document length); see
# docs/evaluation.md, "what a long-document eval costs on a CPU"
DEFAULT_WINDOW = 2048


@dataclasses.dataclass
class TokenStats:
    """One document's scores of targets t = first..L-1, each (L - first,)."""

    logp: np.ndarray  # float64: log p(x_t | x_<t)
    rank: np.ndarray | None  # int64: ids ranked before x_t (higher logit, or equal logit and lower id); 0 = top-1
    z: np.ndarray | None = None  # float64 Min-K%++ z-scores (want_pp), else None
    extra: np.ndarray | None = None  # (L - first, m) columns of the ``extra`` hook, else None

    @property
    def correct(self) -> np.ndarray:
        """(L - first,) bool: the target is the argmax (what greedy decoding emits given the true prefix)."""
        if self.rank is None:
            raise ValueError("these scores were computed without ranks (want_rank=False)")
        return self.rank == 0


@dataclasses.dataclass(frozen=True)
class Segment:
    """Tokens ``[begin, end)`` of document ``doc`` go through the model; targets ``first..end-1`` are scored."""

    doc: int
    begin: int
    end: int
    first: int

    @property
    def length(self) -> int:
        return self.end - self.begin


def context_length(model: Any) -> int | None:
    """The longest sequence the model was built for (``max_position_embeddings`` / ``n_positions``), if known."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def segments(doc: int, n_tokens: int, window: int | None, stride: int | None, first: int = 1) -> list[Segment]:
    """The segments scoring tokens first..n_tokens-1 of one document (one segment when it fits in ``window``): the
    segments of scoring all of it, less those that end before ``first``, so a token's score never depends on
    ``first``."""
    if window is None or n_tokens <= window:
        return [Segment(doc, 0, n_tokens, first)]
    stride = stride or default_stride(window)
    out, scored_to, begin = [], 1, 0
    while scored_to < n_tokens:
        end = min(begin + window, n_tokens)
        if end > first:
            out.append(Segment(doc, begin, end, max(scored_to, first)))
        scored_to, begin = end, begin + stride
    return out


def default_stride(window: int) -> int:
    """Three quarters of the window: each token keeps at least a quarter window of context, and a long document costs
    4/3 of one pass over its tokens (half the window would cost 2)."""
    return max(1, window - window // 4)


def window_budget(model: Any, lengths: Sequence[int], batch_size: int | str) -> int:
    """The token budget of scoring extraction windows (``lengths``) in batches of at most ``batch_size`` rows of the
    longest one (``"auto"``: as decoding sizes its batches, :func:`goldfish.eval.generate.auto_batch_size`)."""
    longest = max(lengths, default=1)
    rows = auto_batch_size(model, longest, len(lengths)) if batch_size == "auto" else int(batch_size)
    return max(1, rows) * longest


def scoring_window(window: int | None, *models: Any) -> int | None:
    """``window`` (None: :data:`DEFAULT_WINDOW`) capped by the shortest context of ``models`` (a window longer than
    a model's positions cannot be scored)."""
    limits = [c for c in (context_length(m) for m in models if m is not None) if c]
    return min([window or DEFAULT_WINDOW] + limits)


def document_key(tokens: Sequence[int], what: str) -> str:
    """sha256 hex of a document's tokens and what was computed on them (pass name and scoring geometry)."""
    h = hashlib.sha256(f"goldfish-membership/1|{what}|".encode())
    h.update(struct.pack(f"<{len(tokens)}q", *tokens))
    return h.hexdigest()


def plan_batches(segs: Sequence[Segment], token_budget: int) -> list[list[Segment]]:
    """Longest first (memory trouble shows at once), packed while rows × longest <= ``token_budget``."""
    batches: list[list[Segment]] = []
    for seg in sorted(segs, key=lambda s: (-s.length, s.doc, s.begin)):
        if batches and (len(batches[-1]) + 1) * batches[-1][0].length <= token_budget:
            batches[-1].append(seg)
        else:
            batches.append([seg])
    return batches


# ----------------------------------------------------------------------------------------------- memory estimate


def _text_config(model: Any) -> Any:
    cfg = getattr(model, "config", None)
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def batch_bytes(model: Any, rows: int, length: int, chunk: int) -> int:
    """Transient bytes of one forward pass over (rows, length) tokens beyond the weights: the activations of one
    layer (hidden, MLP and attention scores; padded batches take the attention path that materialises
    rows × heads × length² scores) plus the (chunk, V) fp32 logits with their log-softmax and products."""
    cfg = _text_config(model)
    hidden = getattr(cfg, "hidden_size", 1024)
    inter = getattr(cfg, "intermediate_size", None) or 4 * hidden
    heads = getattr(cfg, "num_attention_heads", 16) or 16
    vocab = getattr(cfg, "vocab_size", 50_000)
    elem = max(4, next(model.parameters()).element_size())  # CPU matmuls of bf16 upcast in places: count fp32
    tokens = rows * length
    acts = tokens * (6 * hidden + 3 * inter) * elem + tokens * hidden * 4  # one layer + the kept hidden states
    scores = 3 * rows * heads * length * length * 4 if rows > 1 else 0  # one row: no mask, memory-efficient kernel
    logits = 5 * chunk * vocab * 4
    return acts + scores + logits


def available_bytes(device: torch.device) -> int | None:
    """Free memory where the scores are computed: CUDA free memory, or the host's MemAvailable (Linux)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(
    model: Any, batches: Sequence[Sequence[Segment]], chunk: int, token_budget: int, fix: str | None = None
) -> int:
    """Raise one UserError naming the settings that make it fit (``fix``, default: the ``membership`` section's)
    when the largest batch would not fit in free memory; returns the estimated peak transient bytes of the plan."""
    if not batches:
        return 0
    need = max(batch_bytes(model, len(b), b[0].length, chunk) for b in batches)
    free = available_bytes(next(model.parameters()).device)
    if free is not None and need > 0.9 * free:
        window = max(64, max(b[0].length for b in batches) // 2)
        fix = fix or (
            f"set membership.token_budget={max(1, token_budget // 2)} and membership.window={window} (long "
            f"documents in shorter windows), or membership.chunk={max(1, chunk // 2)}"
        )
        raise UserError(
            f"teacher-forced scoring needs about {need / 2**30:.1f} GiB per batch but only "
            f"{free / 2**30:.1f} GiB are free; {fix}"
        )
    return need


# ------------------------------------------------------------------------------------------------- the pass


def _head(model: Any):
    """(body, head, postprocess) for chunked logits, or None when the model does not expose them."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    body = getattr(model, "base_model", None)
    if head is None or body is None or body is model:
        return None
    cfg = _text_config(model)
    cap = getattr(cfg, "final_logit_softcapping", None)
    scale = getattr(cfg, "logit_scale", None)

    def post(logits: torch.Tensor) -> torch.Tensor:
        if scale is not None:
            logits = logits * scale
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits

    return body, head, post


def _ranks(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(t, V) logits, (t,) targets -> (t,) ids ranked before each target: a higher logit, or an equal one at a lower
    id (``argmax`` returns the first maximum, so ``rank == 0`` exactly when the argmax is the target)."""
    own = logits.gather(-1, targets[:, None])  # (t, 1)
    rank = _count(logits > own)
    tied = _count(logits == own) > 1  # the target always equals itself; rare in fp32
    if tied.any():
        before = torch.arange(logits.shape[-1], device=logits.device) < targets[tied, None]  # (n_tied, V)
        rank[tied] += _count((logits[tied] == own[tied]) & before)
    return rank


def _count(flags: torch.Tensor) -> torch.Tensor:
    """(t, V) bool -> (t,) int32 count of True per row. Summed as bytes into int32 (exact for any vocabulary under
    2^31), several times faster on a CPU than ``flags.sum(-1)``, which widens every flag to int64 first."""
    return flags.view(torch.uint8).sum(-1, dtype=torch.int32)


# extra(doc index, target positions in the document (t,), fp32 logits (t, V), targets (t,)) -> (t, m) columns
ExtraHook = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


Columns = dict[str, torch.Tensor]  # a segment's scores: "logp", "rank", "z", "extra" (those asked for), each (t, ...)


def _chunk_stats(
    logits: torch.Tensor,
    targets: torch.Tensor,
    want_pp: bool,
    extra: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    want_rank: bool = True,
) -> Columns:
    """(t, V) logits and (t,) targets -> ``logp``: log p of the targets (t,); with ``want_rank`` their ranks (t,),
    with ``want_pp`` the Min-K%++ z-scores (t,) and with ``extra`` its (t, m) columns."""
    logits = logits.float()  # (t, V) fp32: the order greedy decoding sees, and the log-softmax
    lp = logits.log_softmax(-1)  # (t, V)
    token_lp = lp.gather(-1, targets[:, None]).squeeze(-1)  # (t,)
    cols = {"logp": token_lp}
    if want_rank:
        cols["rank"] = _ranks(logits, targets)
    if want_pp:
        p = lp.exp()
        mu = (p * lp).sum(-1)  # (t,) E_{z~p}[log p(z)]  (= minus the entropy)
        # (t,) Var_{z~p}[log p(z)], centred: E[lp^2] - mu^2 cancels catastrophically in fp32 for flat p
        var = (p * (lp - mu[:, None]).square()).sum(-1)
        cols["z"] = (token_lp - mu) / var.clamp(min=1e-12).sqrt()
    if extra is not None:
        cols["extra"] = extra(logits, targets)
    return cols


@dataclasses.dataclass(frozen=True)
class Context:
    """Tokens put before every document (``context`` of :func:`iter_token_statistics`), never scored: the model
    reads them once, and every batch reuses their keys/values (``past``: a cache of batch 1, expanded per batch)."""

    length: int
    past: Any

    def expanded(self, rows: int) -> Any:
        """A copy of the cache for a batch of ``rows`` (the model appends the documents' keys/values to it)."""
        past = copy.deepcopy(self.past)
        past.batch_repeat_interleave(rows)
        return past


def _context(model: Any, tokens: Sequence[int], device: torch.device) -> Context:
    """One forward pass over ``tokens`` (1, P) keeping its keys/values."""
    ids = torch.as_tensor([list(tokens)], dtype=torch.long, device=device)  # (1, P)
    parts = _head(model)
    out = (parts[0] if parts is not None else model)(input_ids=ids, use_cache=True)
    past = out.get("cache") if out.get("cache") is not None else out.get("past_key_values")  # transformers 5.2x: cache
    if not hasattr(past, "batch_repeat_interleave"):
        raise UserError(
            f"{type(model).__name__} returns no key-value cache that can be copied per row, which a "
            f"shared context (ReCaLL's prefix) needs; score with a Hugging Face causal LM"
        )
    return Context(len(tokens), past)


def _score_batch(
    model,
    batch: Sequence[Segment],
    docs: Sequence[Sequence[int]],
    chunk: int,
    want_pp: bool,
    device: torch.device,
    extra: ExtraHook | None = None,
    context: Context | None = None,
    want_rank: bool = True,
) -> list[Columns]:
    """Log-probs, ranks (and z-scores) of each segment's targets ``first..end-1``, one :data:`Columns` per segment;
    with ``context``, each segment is read after the context's tokens (their keys/values reused, not recomputed)."""
    width = batch[0].length
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, s in enumerate(batch):
        ids[r, : s.length] = torch.as_tensor(list(docs[s.doc][s.begin : s.end]), dtype=torch.long)
        mask[r, : s.length] = 1
    ids, mask = ids.to(device), mask.to(device)
    kw: dict[str, Any] = {"use_cache": False}
    parts = _head(model)
    if context is not None:  # positions continue after the context's P tokens, which every row attends to
        net = parts[0] if parts is not None else model
        positions = torch.arange(context.length, context.length + width, device=device).expand(len(batch), width)
        kw = {
            "cache" if accepts(net, "cache") else "past_key_values": context.expanded(len(batch)),
            "use_cache": True,
            "position_ids": positions,
        }
        mask = torch.cat([torch.ones(len(batch), context.length, dtype=mask.dtype, device=device), mask], 1)
    if parts is not None:
        body, head, post = parts
        hidden = body(input_ids=ids, attention_mask=mask, **kw).last_hidden_state  # (B, T, H)
        logits_of = lambda r, a, b: post(head(hidden[r, a:b]))  # noqa: E731  (b - a, V)
    else:  # no separable head: full logits of this batch (bounded by the token budget)
        full = model(input_ids=ids, attention_mask=mask, **kw).logits  # (B, T, V)
        logits_of = lambda r, a, b: full[r, a:b]  # noqa: E731
    out = []
    for r, s in enumerate(batch):
        # position j of the segment predicts token begin + j + 1; targets first..end-1 sit at j = first-begin-1 ...
        lo, hi = s.first - s.begin - 1, s.length - 1
        pieces = []
        for a in range(lo, hi, chunk):
            b = min(a + chunk, hi)
            # the hook sees the chunk's targets by their position in the document: begin + a + 1 .. begin + b
            hook = (
                None
                if extra is None
                else functools.partial(extra, s.doc, torch.arange(s.begin + a + 1, s.begin + b + 1, device=ids.device))
            )
            pieces.append(_chunk_stats(logits_of(r, a, b), ids[r, a + 1 : b + 1], want_pp, hook, want_rank))
        out.append({name: torch.cat([c[name] for c in pieces]) for name in pieces[0]})
    return out


class ScoreMemo:
    """The per-target scores of the segments one model has already scored, so a segment scored twice in one
    evaluation goes through the model once: an experiment cell's extraction one-pass, membership target pass and
    mask baseline all score the members' windows, which for whole-document windows (``prefix_lens: [all]``) are the
    same token sequences. A segment's scores are a function of its tokens alone (right padding and the attention
    mask make a row's log-probs those of the segment alone), so the memo is keyed by the tokens and holds what was
    computed: the targets from the first one asked for, their ranks (always: a byte count per target) and the
    z-scores when asked for. A later request is answered when those cover it (its first target at or after the
    stored one, z-scores there if it wants them), as a slice; otherwise the segment is scored again and the wider
    scores kept. Bound to one model (a second one is refused: its scores would be another model's) whose weights
    must not change while the memo lives (:class:`goldfish.eval.loading.SharedModel` holds one per loaded model);
    at most ``max_targets`` targets are kept, on the host, the least recently used dropped first."""

    def __init__(self, max_targets: int = 16_000_000) -> None:
        self.max_targets = max_targets
        self._model: Any = None
        self._rows: collections.OrderedDict[bytes, tuple[int, Columns]] = collections.OrderedDict()
        self._held = 0
        self.hits = 0  # segments answered from the memo (tests and logs read it)

    def bind(self, model: Any) -> None:
        if self._model is None:
            self._model = weakref.ref(model)
        elif self._model() is not model:
            raise ValueError("a ScoreMemo holds one model's scores; this is another model")

    @staticmethod
    def key(tokens: Sequence[int]) -> bytes:
        return hashlib.sha256(struct.pack(f"<{len(tokens)}q", *tokens)).digest()

    def get(self, key: bytes, seg: Segment, want_pp: bool) -> Columns | None:
        """The columns of ``seg``'s targets ``seg.first..`` when the memo's cover them, else None."""
        found = self._rows.get(key)
        if found is None:
            return None
        offset, cols = found  # the segment's targets from position ``offset`` in it on
        lo = seg.first - seg.begin - 1
        if lo < offset or (want_pp and "z" not in cols):
            return None
        self._rows.move_to_end(key)
        return {name: col[lo - offset :] for name, col in cols.items() if name != "z" or want_pp}

    def put(self, key: bytes, seg: Segment, cols: Columns) -> None:
        """Keep ``seg``'s computed columns (targets ``seg.first..``) unless the memo already covers them."""
        offset = seg.first - seg.begin - 1
        held = self._rows.get(key)
        if held is not None:
            if held[0] <= offset and ("z" in held[1] or "z" not in cols):
                return
            self._held -= len(self._rows.pop(key)[1]["logp"])
        self._rows[key] = (offset, {name: col.cpu() for name, col in cols.items()})
        self._held += len(cols["logp"])
        while self._held > self.max_targets and len(self._rows) > 1:
            _, (_, dropped) = self._rows.popitem(last=False)
            self._held -= len(dropped["logp"])


@torch.inference_mode()
def iter_token_statistics(
    model: Any,
    docs: Sequence[Sequence[int]],
    *,
    first: Sequence[int] | None = None,
    window: int | None = None,
    stride: int | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    chunk: int = DEFAULT_CHUNK,
    want_pp: bool = False,
    want_rank: bool = True,
    desc: str = "token scores",
    progress: bool = True,
    logger: Any = None,
    check: bool = True,
    fix: str | None = None,
    extra: ExtraHook | None = None,
    context: Sequence[int] | None = None,
    memo: ScoreMemo | None = None,
) -> Iterator[tuple[int, TokenStats]]:
    """Yield ``(index, TokenStats)`` per document as soon as all its segments are scored (any order).

    ``first[i]``: the first target of document i to score (default 1: all but the first token). ``window`` defaults
    to no windowing (membership passes :func:`scoring_window`); ``stride`` to :func:`default_stride`. ``want_pp``
    adds the Min-K%++ z-scores; ``want_rank=False`` leaves the ranks out (a pass that reads log-probs alone: they
    cost a comparison over the vocabulary per target); ``extra`` (:data:`ExtraHook`) adds its columns. ``check``
    refuses, before any work, a plan whose largest batch would not fit in free memory (``fix``: the settings that
    error names). ``logger`` (e.g. ``goldfish.io.JsonlLogger``) receives ``{"event": "scoring_batch", "pass", "docs",
    "tokens", "seconds"}`` per batch. ``context``: tokens read before every document and never scored (ReCaLL's
    prefix): computed once, their keys/values reused by every batch, so each document is scored as ``context +
    document`` in one segment (``window`` then bounds the context and the document together). ``memo``
    (:class:`ScoreMemo`, without ``context`` or ``extra``): segments whose scores it holds are read from it, the others
    scored (with ranks) and added to it.
    """
    if token_budget < 1 or chunk < 1:
        raise UserError(f"token_budget={token_budget} and chunk={chunk} must be >= 1")
    first = [1] * len(docs) if first is None else [int(f) for f in first]
    for i, (doc, f) in enumerate(zip(docs, first)):
        if len(doc) < 2 or not 1 <= f < len(doc):
            raise UserError(
                f"document {i} has {len(doc)} token(s) and its first scored target is {f}; scoring needs "
                f"at least one target after the first token (drop empty documents)"
            )
    if (
        context is not None
        and window is not None
        and (too := [i for i, d in enumerate(docs) if len(context) + len(d) > window])
    ):
        raise UserError(
            f"document {too[0]} ({len(docs[too[0]])} tokens) does not fit the scoring window of {window} "
            f"after its context of {len(context)} tokens; score its first {window - len(context)}"
        )
    segs = [
        s
        for i, d in enumerate(docs)
        for s in segments(i, len(d), None if context is not None else window, stride, first[i])
    ]
    if memo is not None and (context or extra is not None):
        memo = None  # a context or a hook makes the scores more than a function of the segment's tokens
    if memo is not None:
        memo.bind(model)
    keys = {s: ScoreMemo.key(docs[s.doc][s.begin : s.end]) for s in segs} if memo is not None else {}
    known = {s: found for s in segs if memo is not None and (found := memo.get(keys[s], s, want_pp)) is not None}
    todo = [s for s in segs if s not in known]
    asked = {(s.doc, s.begin): s for s in segs}
    ranks = want_rank or memo is not None  # what the memo keeps: ranks for any later request (a byte count each)
    batches = plan_batches(todo, token_budget)
    if check:
        check_memory(model, batches, chunk, token_budget, fix)
    device = next(model.parameters()).device
    remaining = np.bincount([s.doc for s in segs], minlength=len(docs))
    pieces: dict[int, list[tuple[int, Columns]]] = {}
    was_training = model.training
    model.eval()
    shard = current()

    def finish(seg: Segment, cols: Columns) -> Iterator[tuple[int, TokenStats]]:
        """One requested segment's scores in; its document out once all of the document's segments are in."""
        if memo is not None:
            if seg in known:
                memo.hits += 1
            else:
                memo.put(keys[seg], seg, cols)
            if not want_rank:
                cols = {name: col for name, col in cols.items() if name != "rank"}
        pieces.setdefault(seg.doc, []).append((seg.first, cols))
        remaining[seg.doc] -= 1
        if remaining[seg.doc] == 0:
            ordered = [c for _, c in sorted(pieces.pop(seg.doc), key=lambda p: p[0])]
            yield seg.doc, _collect(ordered)

    try:
        for seg, cols in known.items():
            yield from finish(seg, cols)
        ctx = _context(model, context, device) if context and todo else None
        if shard.split:  # the same batches as one process; this rank scores its share, every rank gets all
            bar = tqdm(total=len(batches), desc=desc, disable=None if progress and shard.main else True, unit="batch")
            for mine, round_ in shard.rounds(len(batches)):
                part = []
                if mine is not None:
                    batch = batches[mine]
                    scored = _score_batch(model, batch, docs, chunk, want_pp, device, extra, ctx, ranks)
                    part = [(s.doc, s.begin, {k: t.cpu() for k, t in cols.items()}) for s, cols in zip(batch, scored)]
                for got in shard.gather(part):
                    for doc, begin, cols in got:
                        yield from finish(asked[doc, begin], cols)
                bar.update(len(round_))
            bar.close()
            return
        for batch in tqdm(batches, desc=desc, disable=None if progress else True, unit="batch"):
            t0 = time.perf_counter()
            for s, cols in zip(batch, _score_batch(model, batch, docs, chunk, want_pp, device, extra, ctx, ranks)):
                yield from finish(asked[s.doc, s.begin], cols)
            if logger is not None:
                logger.log(
                    {
                        "event": "scoring_batch",
                        "pass": desc,
                        "docs": len({s.doc for s in batch}),
                        "tokens": sum(s.length for s in batch),
                        "seconds": round(time.perf_counter() - t0, 4),
                    }
                )
    finally:
        model.train(was_training)


def _collect(pieces: list[Columns]) -> TokenStats:
    """A document's segment outputs, in order -> its :class:`TokenStats` on the host."""
    cols = {name: torch.cat([p[name] for p in pieces]).cpu().numpy() for name in pieces[0]}
    return TokenStats(
        cols["logp"].astype(np.float64),
        cols["rank"].astype(np.int64) if "rank" in cols else None,
        cols["z"].astype(np.float64) if "z" in cols else None,
        cols.get("extra"),
    )


def token_statistics(model: Any, docs: Sequence[Sequence[int]], **kwargs: Any) -> list[TokenStats]:
    """:func:`iter_token_statistics` collected in input order: one :class:`TokenStats` per document."""
    out: list[TokenStats] = [None] * len(docs)  # type: ignore[list-item]
    for i, stats in iter_token_statistics(model, docs, **kwargs):
        out[i] = stats
    return out
