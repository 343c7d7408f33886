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

Where the knowledge sits: the same ranking of a dropped token in *another* canary's context at the same position
(``foreign``: the next canary's, among the ids that context's mask treats as it treats that token) is 0.5 under no
knowledge of the token at all, and above it when the model favours tokens it has seen anywhere (a token read as
input moves its embedding, which a tied output head reads everywhere). The own-context rank above the foreign one is
knowledge of the token at its own position.

One caveat is stated, not hidden. The mask decisions of the h - 1 positions after t also read the token at t, so
which of them were trained depends on it. A model would have to learn the hash to use that; the test counts it as
part of the leak it measures.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from goldfish.masks import GoldfishConfig, config_mask, next_token_drops

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
    set C_t, module docstring), ``dropped`` (bool: the mask ``gcfg`` drops t), ``size`` (int64: |C_t|) and
    ``foreign`` (float64: the next sequence's token at t ranked in this one's context among the ids its mask treats
    as it treats that token; NaN where that token was kept in its own sequence or the sequence is shorter).
    ``alphabet``: the ids the tokens were drawn from (:func:`goldfish.data.canaries.canary_alphabet`)."""
    docs = [list(map(int, s)) for s in seqs]
    own_dropped = [config_mask(torch.as_tensor([d]), gcfg)[0].tolist() for d in docs]  # (L,) per sequence

    def rank_among(logits: torch.Tensor, token: torch.Tensor, drops: torch.Tensor, allowed: torch.Tensor):
        """(t,) rank of ``token`` among the ids its row's mask treats alike, and whether that class is "dropped"."""
        dropped = drops.gather(-1, token[:, None]).squeeze(-1)  # (t,)
        same = torch.where(dropped[:, None], drops, allowed & ~drops)  # (t, V) C_t
        own = logits.gather(-1, token[:, None])
        below = ((logits < own) & same).sum(-1)
        tied = ((logits == own) & same).sum(-1) - 1  # the token ties with itself
        size = same.sum(-1)
        return (below + 0.5 * tied).double() / (size - 1).clamp(min=1).double(), dropped, size

    def ranks(i: int, positions: torch.Tensor, logits: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
        vocab = logits.shape[-1]
        allowed = torch.zeros(vocab, dtype=torch.bool, device=logits.device)
        allowed[torch.as_tensor(list(alphabet), device=logits.device)] = True
        contexts = true_contexts(torch.as_tensor(docs[i], device=logits.device), positions)
        drops = next_token_drops(contexts, gcfg, vocab) & allowed  # (t, V)
        rank, dropped, size = rank_among(logits, truth, drops, allowed)
        other = docs[(i + 1) % len(docs)]
        at = [p if p < len(other) else 0 for p in positions.tolist()]
        usable = torch.tensor(
            [
                p < len(other) and bool(own_dropped[(i + 1) % len(docs)][p]) and len(docs) > 1
                for p in positions.tolist()
            ],
            device=logits.device,
        )
        foreign, _, _ = rank_among(
            logits, torch.as_tensor([other[p] for p in at], device=logits.device), drops, allowed
        )
        foreign = torch.where(usable, foreign, torch.full_like(foreign, float("nan")))
        return torch.stack([rank, dropped.double(), size.double(), foreign], dim=1)

    stats = token_statistics(
        model, docs, want_rank=False, token_budget=token_budget, chunk=chunk, extra=ranks, progress=False
    )
    return [
        {
            "rank": st.extra[:, 0].astype(np.float64),
            "dropped": st.extra[:, 1].astype(bool),
            "size": st.extra[:, 2].astype(np.int64),
            "foreign": st.extra[:, 3].astype(np.float64),
        }
        for st in stats
    ]


def mean_ranks(per_seq: Sequence[dict[str, np.ndarray]], labels: Sequence[int] | None = None) -> dict[str, Any]:
    """``{"dropped": {mean_rank, positions}, "kept": {...}, "foreign_dropped": {...}}`` over all sequences (the last:
    dropped tokens ranked in the next sequence's context), and ``by_label`` (the canaries' repetition labels) the
    dropped and kept ranks per label."""

    def part(rows: Sequence[dict[str, np.ndarray]]) -> dict[str, Any]:
        out = {}
        for name, want in (("dropped", True), ("kept", False)):
            values = np.concatenate([r["rank"][r["dropped"] == want] for r in rows]) if rows else np.zeros(0)
            out[name] = {"mean_rank": float(values.mean()) if len(values) else None, "positions": int(len(values))}
        return out

    result = part(per_seq)
    foreign = np.concatenate([r["foreign"][~np.isnan(r["foreign"])] for r in per_seq]) if per_seq else np.zeros(0)
    result["foreign_dropped"] = {
        "mean_rank": float(foreign.mean()) if len(foreign) else None,
        "positions": int(len(foreign)),
    }
    if labels is not None:
        result["by_label"] = {
            str(label): part([r for r, lab in zip(per_seq, labels) if lab == label]) for label in sorted(set(labels))
        }
    return result
