"""Goldfish loss: cross-entropy over kept target tokens, plus statistics on the dropped ones.

The loss knows nothing of engines. For data/tensor/pipeline parallel training, use the *sums* and *counts*
(``kept_sum``, ``kept_count``) and divide by the global count of supervised tokens, all-reduced across data-parallel
ranks, so that sharding never changes the loss.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .masks import IGNORE_INDEX, GoldfishConfig, config_mask


@dataclasses.dataclass
class GoldfishLossOutput:
    """``loss`` is what to backpropagate; the rest is for logging (detached)."""

    loss: torch.Tensor  # mean CE over kept tokens (the Goldfish loss); standard loss when no config is given
    kept_sum: torch.Tensor  # sum of CE over kept tokens (differentiable; for global normalisation)
    kept_count: torch.Tensor  # number of kept supervised tokens
    dropped_sum: torch.Tensor  # sum of CE over dropped tokens (detached)
    dropped_count: torch.Tensor  # number of dropped tokens

    @property
    def kept_loss(self) -> torch.Tensor:
        """Mean CE on kept tokens (detached)."""
        return (self.kept_sum.detach() / self.kept_count.clamp(min=1)).float()

    @property
    def dropped_loss(self) -> torch.Tensor:
        """Mean CE on dropped tokens (NaN when nothing was dropped)."""
        if int(self.dropped_count) == 0:
            return torch.tensor(float("nan"))
        return (self.dropped_sum / self.dropped_count).float()


def token_losses(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Per-token CE, 0 where ``targets == ignore_index``. ``logits`` (B, T, V), already aligned with ``targets``
    (B, T)."""
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=ignore_index, reduction="none"
    ).view(targets.shape)


def chunked_token_losses(
    hidden: torch.Tensor,
    head: nn.Module,
    targets: torch.Tensor,
    *,
    chunk_tokens: int = 1024,
    ignore_index: int = IGNORE_INDEX,
) -> torch.Tensor:
    """Per-token CE of ``head(hidden)`` (B, T, V) against ``targets`` (B, T), without ever holding the whole logits.

    ``hidden`` (B, T, H) are the final-norm hidden states and ``head`` the output projection (``lm_head``). The
    (B*T) tokens are processed in chunks of ``chunk_tokens``; each chunk's logits (chunk, V) and their fp32 copy are
    freed once its CE is known and recomputed in backward (activation checkpointing of the head + CE), so forward and
    backward hold one chunk of logits instead of (B*T, V) in the compute dtype plus (B*T, V) fp32 log-probabilities.
    The cost is one more head matmul (~2·H·V FLOPs/token) and, in backward, a transient (V, H) weight gradient per
    chunk, so it saves memory when a micro-batch has many more tokens than H (benchmarks/ce_memory.py: 8192 tokens,
    vocab 49152: peak 4979 -> 1746 MiB). Same ops per token as :func:`token_losses` on
    ``head(hidden)``, so the losses and gradients equal it to rounding. Returns (B, T) fp32, 0 where ignored."""
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])  # (N, H)
    flat_targets = targets.reshape(-1)  # (N,)

    def chunk_ce(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(head(h).float(), t, ignore_index=ignore_index, reduction="none")  # (chunk,)

    losses = [
        checkpoint(
            chunk_ce,
            flat_hidden[start : start + chunk_tokens],
            flat_targets[start : start + chunk_tokens],
            use_reentrant=False,
        )
        if torch.is_grad_enabled()
        else chunk_ce(flat_hidden[start : start + chunk_tokens], flat_targets[start : start + chunk_tokens])
        for start in range(0, flat_targets.numel(), chunk_tokens)
    ]
    return torch.cat(losses).view(targets.shape)


def goldfish_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    config: GoldfishConfig | None = None,
    *,
    drop_mask: torch.Tensor | None = None,
    document_ids: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    shift: bool = True,
    ignore_index: int = IGNORE_INDEX,
    head: nn.Module | None = None,
    chunk_tokens: int = 1024,
) -> GoldfishLossOutput:
    """Goldfish loss of causal-LM ``logits`` (B, T, V) against unshifted HF ``labels`` (B, T).

    The drop mask is ``drop_mask`` if given, else computed from ``labels`` with ``config`` (``config=None`` and no
    mask: standard loss, nothing dropped). With ``shift`` (the HF convention), ``logits[:, t]`` predicts
    ``labels[:, t+1]``. Dropped tokens get no gradient; their CE is still measured for logging.

    With ``head`` (the output projection), ``logits`` are instead the final hidden states (B, T, H) and the CE is
    computed by :func:`chunked_token_losses` in chunks of ``chunk_tokens`` tokens (the full logits never exist).
    """
    if drop_mask is None:
        drop_mask = (
            config_mask(labels, config, document_ids=document_ids, position_ids=position_ids)
            if config is not None
            else torch.zeros_like(labels, dtype=torch.bool)
        )
    if shift:
        # shift the (B, T) targets left instead of slicing the (B, T, V) logits: a slice of the logits would be
        # copied (and its gradient filled and copied back); the padded last position is ignored
        labels = F.pad(labels[:, 1:], (0, 1), value=ignore_index)
        drop_mask = F.pad(drop_mask[:, 1:], (0, 1), value=False)
    supervised = labels != ignore_index
    kept = supervised & ~drop_mask
    dropped = supervised & drop_mask
    if head is None:
        ce = token_losses(logits, labels, ignore_index)  # (B, T)
    else:
        ce = chunked_token_losses(logits, head, labels, chunk_tokens=chunk_tokens, ignore_index=ignore_index)
    kept_sum = (ce * kept).sum()
    kept_count = kept.sum()
    dropped_sum = (ce.detach() * dropped).sum()
    return GoldfishLossOutput(
        loss=kept_sum / kept_count.clamp(min=1),
        kept_sum=kept_sum,
        kept_count=kept_count,
        dropped_sum=dropped_sum,
        dropped_count=dropped.sum(),
    )


class EngineLoss:
    """The trainer's loss function for the engines (:data:`goldfish.engines.base.LossFn`): Goldfish CE of the
    model's output against ``targets["labels"]`` (B, T) unshifted HF labels (-100: not supervised) with
    ``targets["drop_mask"]`` (B, T) bool, True where Goldfish drops the target (all False: the standard loss).

    The mask comes precomputed from the trainer (it needs the global batch's document ids), so the engines never see a
    Goldfish setting. With ``chunk_tokens > 0`` (``loss.ce_chunk_tokens``) the loss asks for hidden states
    (``wants_hidden``): the engine passes the final-norm hidden states (B, T, H) and ``head=`` its output projection,
    and the CE is computed in chunks (:func:`chunked_token_losses`) without the whole logits."""

    def __init__(self, chunk_tokens: int = 0):
        self.chunk_tokens = chunk_tokens

    @property
    def wants_hidden(self) -> bool:
        return self.chunk_tokens > 0

    def __call__(
        self, outputs: torch.Tensor, targets: dict[str, torch.Tensor], head: nn.Module | None = None
    ) -> GoldfishLossOutput:
        if head is None:  # outputs: logits (B, T, V)
            return goldfish_loss(outputs, targets["labels"], drop_mask=targets["drop_mask"], shift=True)
        return goldfish_loss(
            outputs,
            targets["labels"],
            drop_mask=targets["drop_mask"],
            shift=True,
            head=head,
            chunk_tokens=self.chunk_tokens,
        )
