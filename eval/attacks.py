"""Membership attacks and controls built from per-document texts or per-token log-probs (no model inside).

Scores follow :mod:`goldfish.eval.membership`'s convention: **members score higher**, so one ROC serves all.

* :func:`blind_scores` -- a *model-free* baseline (Das et al. 2024, "Blind Baselines Beat Membership Inference
  Attacks"): the text's zlib compression ratio alone. On members and nonmembers drawn from one pool its AUC is
  about 0.5; far from 0.5 means the two sets differ in kind (a distribution shift), and then a model-based AUC
  says little about memorisation (Duan et al. 2024, MIMIR).
* :func:`kept_scores` -- the hash-aware attack on a Goldfish model: the Goldfish hash is public, so an attacker
  can score only the tokens the loss kept (``mean log p`` over kept targets), where a Goldfish model was trained.
* :func:`calibrated` -- the reference attack from per-token log-probs: target minus reference (e.g. the starting
  model of a fine-tune), averaged over the chosen positions.
* :func:`teacher_forced_accuracy` -- top-1 accuracy of the next token given the true prefix, on kept vs dropped
  positions: does a Goldfish model fill the dropped tokens back in?

The statistics over such scores (intervals, paired differences of two models) are :mod:`goldfish.eval.stats`'s.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .membership import zlib_length


def blind_scores(texts: Sequence[str]) -> np.ndarray:
    """(n,) model-free scores: minus the zlib compression ratio (compressed bytes / UTF-8 bytes) of each text.

    Oriented like the attacks (higher = "member"); only an AUC far from 0.5 in either direction matters.
    """
    return np.array([-zlib_length(t) / max(1, len(t.encode("utf-8"))) for t in texts], dtype=np.float64)


def _masked_mean(values: np.ndarray, keep: np.ndarray) -> float:
    return float(values[keep].mean()) if keep.any() else float("nan")


def kept_scores(logprobs: Sequence[np.ndarray], kept: Sequence[np.ndarray]) -> np.ndarray:
    """(n,) mean log p of the kept targets of each document.

    ``logprobs[i]``: (L_i - 1,) log p(token t | tokens < t) for t = 1..L_i-1; ``kept[i]``: (L_i - 1,) bool, True
    where the Goldfish mask kept target t. A document with no kept target scores NaN (dropped by the ROC code).
    """
    return np.array([_masked_mean(np.asarray(lp), np.asarray(k, dtype=bool)) for lp, k in zip(logprobs, kept)])


def calibrated(
    logprobs: Sequence[np.ndarray], reference: Sequence[np.ndarray], positions: Sequence[np.ndarray] | None = None
) -> np.ndarray:
    """(n,) mean of ``log p_target - log p_reference`` over ``positions`` (all targets when None).

    Equals ``membership``'s ``reference`` score (reference NLL minus target NLL) when every position is used.
    """
    out = []
    for i, (lp, ref) in enumerate(zip(logprobs, reference)):
        diff = np.asarray(lp, dtype=np.float64) - np.asarray(ref, dtype=np.float64)
        keep = np.ones(len(diff), bool) if positions is None else np.asarray(positions[i], dtype=bool)
        out.append(_masked_mean(diff, keep))
    return np.array(out, dtype=np.float64)


def teacher_forced_accuracy(correct: Sequence[np.ndarray], dropped: Sequence[np.ndarray]) -> dict[str, float | int]:
    """Top-1 next-token accuracy over all targets, the kept ones and the dropped ones (token-weighted).

    ``correct[i]`` / ``dropped[i]``: (L_i - 1,) bool per target t = 1..L_i-1.
    """
    c = np.concatenate([np.asarray(x, dtype=bool) for x in correct]) if correct else np.zeros(0, bool)
    d = np.concatenate([np.asarray(x, dtype=bool) for x in dropped]) if dropped else np.zeros(0, bool)
    return {
        "accuracy": float(c.mean()) if len(c) else float("nan"),
        "kept_accuracy": float(c[~d].mean()) if (~d).any() else float("nan"),
        "dropped_accuracy": float(c[d].mean()) if d.any() else float("nan"),
        "n_kept": int((~d).sum()),
        "n_dropped": int(d.sum()),
    }
