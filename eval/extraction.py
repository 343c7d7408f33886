"""One-pass extraction measures: everything greedy extraction can tell, from ONE teacher-forced forward pass.

Feed ``prefix + suffix[:-1]`` and read the S next-token distributions that predict the true suffix. Then:

* ``onepass_exact`` -- the argmax equals the true token at every suffix position. Greedy decoding reproduces the
  suffix iff this holds: while greedy is still correct its inputs *are* the teacher-forced inputs, so the first
  position where they could differ is the first argmax miss. The two verdicts disagree only where floating point
  differs between the full-sequence and the KV-cached computation on a near-tie (counted as
  ``onepass_disagreements``).
* ``extraction_strength`` -- (length of the correct argmax run from the first suffix token) / S, i.e. the fraction
  of the suffix greedy decoding reproduces before its first mistake (= ``longest_match_prefix / S`` of greedy up
  to the same float caveat). 1.0 iff ``onepass_exact``.
* ``onepass_token_acc`` -- fraction of suffix positions whose argmax is right given the true context.
* ``suffix_logprob`` -- sum of log p(true suffix token) (natural log, fp32 log-softmax); ``p_suffix`` = its exp:
  the chance one temperature-1 sample reproduces the whole suffix.
* ``np_extraction`` -- the (n, p)-extraction chance 1 - (1 - p_suffix)^n: the probability that at least one of n
  independent samples reproduces the suffix (Hayes et al. 2024, "(n, p)-discoverable extraction").

The sampled counterpart (:func:`sample_hits`) draws n samples per prefix and counts exact reproductions.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from .generate import forward, generate, left_pad, model_device, run_batched, sampling_pick


@torch.inference_mode()
def onepass_batch(model, prefixes: Sequence[Sequence[int]], suffixes: Sequence[Sequence[int]],
                  pad_id: int = 0) -> list[dict]:
    """Teacher-forced measures for a batch of windows with equal suffix length S -> one dict per window."""
    s = len(suffixes[0])
    seqs = [list(p) + list(x[:-1]) for p, x in zip(prefixes, suffixes)]
    ids, mask, positions = left_pad(seqs, pad_id, model_device(model))
    logits, _ = forward(model, ids, mask, positions, keep=s, use_cache=False)  # (B, S, V) fp32, left-padded
    truth = torch.as_tensor([list(x) for x in suffixes], device=logits.device)  # (B, S)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, truth[..., None]).squeeze(-1)  # (B, S)
    hit = logits.argmax(dim=-1) == truth  # (B, S)
    run = hit.long().cumprod(dim=-1).sum(dim=-1)  # (B,) correct run from the first suffix token
    lp = logp.double().sum(dim=-1)
    return [
        {
            "onepass_exact": bool(r == s),
            "extraction_strength": float(r) / s,
            "onepass_token_acc": float(h.float().mean()),
            "suffix_logprob": float(v),
            "p_suffix": math.exp(float(v)),
        }
        for r, h, v in zip(run.tolist(), hit.cpu(), lp.cpu())
    ]


def onepass(model, prefixes: Sequence[Sequence[int]], suffixes: Sequence[Sequence[int]], *, pad_id: int = 0,
            batch_size: int | str = 32, progress: bool = True) -> list[dict]:
    """:func:`onepass_batch` over length buckets (input order kept); windows must share one suffix length."""
    if len({len(x) for x in suffixes}) > 1:
        raise ValueError("onepass needs windows of one suffix length; call it once per suffix length")

    def run(idx: list[int]) -> list[dict]:
        return onepass_batch(model, [prefixes[i] for i in idx], [suffixes[i] for i in idx], pad_id)

    lengths = [len(p) + len(x) for p, x in zip(prefixes, suffixes)]
    return run_batched(run, lengths, batch_size, model, False, "one-pass", progress)


def np_extraction(p_suffix: float | np.ndarray, n: int) -> float | np.ndarray:
    """1 - (1 - p)^n, computed as -expm1(n·log1p(-p)) so tiny p does not round to 0."""
    p = np.clip(np.asarray(p_suffix, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        out = -np.expm1(n * np.log1p(-p))
    return float(out) if out.ndim == 0 else out


def sample_hits(model, prefixes: Sequence[Sequence[int]], suffixes: Sequence[Sequence[int]], n: int, *,
                temperature: float = 1.0, seed: int = 0, pad_id: int = 0, batch_size: int | str = 32,
                progress: bool = True) -> list[int]:
    """Sampled extraction: for each window, how many of ``n`` samples (at ``temperature``) equal the true suffix.

    All ``n`` copies of a prefix are decoded in one batch stream from a generator seeded with ``seed``, so the
    counts are reproducible for a given batch size and device.
    """
    s = len(suffixes[0]) if suffixes else 0
    gen = torch.Generator().manual_seed(seed)
    flat = [p for p in prefixes for _ in range(n)]
    outs = generate(model, flat, s, pad_id=pad_id, batch_size=batch_size,
                    pick=sampling_pick(temperature, gen), progress=progress, desc="sampling")
    truth = [list(x) for x in suffixes for _ in range(n)]
    hits = np.array([o == t for o, t in zip(outs, truth)], dtype=np.int64).reshape(len(prefixes), n)
    return hits.sum(axis=1).tolist()
