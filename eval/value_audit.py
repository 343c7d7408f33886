"""The exchangeable-value leak test: does a Goldfish model know the token at a position it never trained on?

The leakage audit on real text (``goldfish.experiment.analyses.attacks``) compares accuracy on dropped positions
with held-out text or with a no-leak twin, and both nulls differ from the Goldfish model in what else it learned.
Random canaries (:mod:`goldfish.data.canaries`) give an exact null instead. Each canary token is drawn uniformly
from the alphabet, independently of everything else. Under the cell's mask (a hash of the h tokens ending at the
target, so the decision reads the token itself), a dropped position's token is, given its context and given that it
was dropped, uniform over C_t: the alphabet ids that would have been dropped after that context
(:func:`goldfish.masks.next_token_drops`). A kept position's token is uniform over the other ids. So for each target
the model is read teacher-forced on the canary's true context and the true token is ranked among C_t by the model's
logit:

    rank_t = (#{v in C_t: logit_v < logit_true} + 0.5 · #{v in C_t, v != true: logit_v = logit_true}) / (|C_t| - 1)

If the model's prediction at t carries no information about the token at t (no leak), the true token is one
uniform draw from C_t, independent of the logits: ``E[rank_t] = 0.5`` exactly, for any model and any context. A
leak of the dropped token through its later positions' inputs moves the mean above 0.5. A position the loss trained
on (standard loss, kept positions, a positive control's supervised share) moves it towards 1 as the canary is
memorised. The null is the Goldfish model itself on the positions it never trained on, so it is matched to Goldfish
on everything else by construction: no twin, no held-out text.

One caveat is stated, not hidden. The mask decisions of the h - 1 positions after t also read the token at t, so
which of them were trained depends on it. A model would have to learn the hash to use that; the test counts it as
part of the leak it measures.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from goldfish.masks import GoldfishConfig, next_token_drops

from .adversary import true_contexts
from .scoring import token_statistics

NULL_RANK = 0.5  # E[rank_t] under no leak, exactly


def value_ranks(
    model: Any,
    seqs: Sequence[Sequence[int]],
    gcfg: GoldfishConfig,
    alphabet: Sequence[int],
    *,
    token_budget: int = 4096,
    chunk: int = 512,
) -> list[dict[str, np.ndarray]]:
    """Per sequence (a canary), per target t = 1..L-1: ``rank`` (float64: the true token's rank among its exchangeable
    set C_t, module docstring), ``dropped`` (bool: the mask ``gcfg`` drops t) and ``size`` (int64: |C_t|).
    ``alphabet``: the ids the tokens were drawn from (:func:`goldfish.data.canaries.canary_alphabet`)."""
    docs = [list(map(int, s)) for s in seqs]

    def ranks(i: int, positions: torch.Tensor, logits: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
        vocab = logits.shape[-1]
        allowed = torch.zeros(vocab, dtype=torch.bool, device=logits.device)
        allowed[torch.as_tensor(list(alphabet), device=logits.device)] = True
        contexts = true_contexts(torch.as_tensor(docs[i], device=logits.device), positions)
        drops = next_token_drops(contexts, gcfg, vocab) & allowed  # (t, V)
        dropped = drops.gather(-1, truth[:, None]).squeeze(-1)  # (t,) the mask's decision at each target
        same = torch.where(dropped[:, None], drops, allowed & ~drops)  # (t, V) C_t
        own = logits.gather(-1, truth[:, None])
        below = ((logits < own) & same).sum(-1)
        tied = ((logits == own) & same).sum(-1) - 1  # the true token ties with itself
        size = same.sum(-1)
        rank = (below + 0.5 * tied).double() / (size - 1).clamp(min=1).double()
        return torch.stack([rank, dropped.double(), size.double()], dim=1)

    stats = token_statistics(
        model, docs, want_rank=False, token_budget=token_budget, chunk=chunk, extra=ranks, progress=False
    )
    return [
        {
            "rank": st.extra[:, 0].astype(np.float64),
            "dropped": st.extra[:, 1].astype(bool),
            "size": st.extra[:, 2].astype(np.int64),
        }
        for st in stats
    ]


def mean_ranks(per_seq: Sequence[dict[str, np.ndarray]], labels: Sequence[int] | None = None) -> dict[str, Any]:
    """``{"dropped": {mean_rank, positions}, "kept": {...}}`` over all sequences, and ``by_label`` (the canaries'
    repetition labels) the same per label."""

    def part(rows: Sequence[dict[str, np.ndarray]]) -> dict[str, Any]:
        out = {}
        for name, want in (("dropped", True), ("kept", False)):
            values = np.concatenate([r["rank"][r["dropped"] == want] for r in rows]) if rows else np.zeros(0)
            out[name] = {"mean_rank": float(values.mean()) if len(values) else None, "positions": int(len(values))}
        return out

    result = part(per_seq)
    if labels is not None:
        result["by_label"] = {
            str(label): part([r for r, lab in zip(per_seq, labels) if lab == label]) for label in sorted(set(labels))
        }
    return result
