"""One-pass extraction measures: everything greedy extraction can tell, from ONE teacher-forced forward pass.

Score ``prefix + suffix`` teacher-forced (:mod:`goldfish.eval.scoring`, the toolkit's one scoring pass) and read the
S next-token distributions that predict the true suffix. Then:

* ``onepass_exact`` -- the argmax equals the true token at every suffix position. Greedy decoding reproduces the
  suffix iff this holds: while greedy is still correct its inputs *are* the teacher-forced inputs, so the first
  position where they could differ is the first argmax miss. The two verdicts disagree only where floating point
  differs between the full-sequence and the KV-cached computation on a near-tie (counted as
  ``onepass_disagreements``).
* ``extraction_strength`` -- (length of the correct argmax run from the first suffix token) / S, i.e. the fraction
  of the suffix greedy decoding reproduces before its first mistake (= ``longest_match_prefix / S`` of greedy up
  to the same float caveat). 1.0 iff ``onepass_exact``.
* ``onepass_token_acc`` -- fraction of suffix positions whose argmax is right given the true context;
  ``onepass_hits`` the same per position, a string of ``1`` (right) and ``0`` (report.html draws it along the document:
  a locally memorised passage shows where the window's mean hides it).
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

from .generate import generate, sampling_pick
from .scoring import ScoreMemo, TokenStats, token_statistics, window_budget


def onepass(
    model,
    prefixes: Sequence[Sequence[int]],
    suffixes: Sequence[Sequence[int]],
    *,
    batch_size: int | str = 32,
    progress: bool = True,
    memo: ScoreMemo | None = None,
) -> list[dict]:
    """Teacher-forced measures of each window (input order): one dict per window. Windows are scored in
    length-bucketed batches of at most ``batch_size`` rows of the longest window (``"auto"``: as decoding sizes
    them); only the suffix targets go through the output head. ``memo`` (the model's
    :class:`goldfish.eval.scoring.ScoreMemo`): a window membership's target pass has scored (a whole document) is read
    from it."""
    docs = [list(p) + list(x) for p, x in zip(prefixes, suffixes)]
    if not docs:
        return []
    budget = window_budget(model, [len(d) for d in docs], batch_size)
    stats = token_statistics(
        model,
        docs,
        first=[len(p) for p in prefixes],
        token_budget=budget,
        desc="one-pass",
        progress=progress,
        fix="set a smaller decoding.batch_size",
        memo=memo,
    )
    return [_onepass_record(st) for st in stats]


def _onepass_record(st: TokenStats) -> dict:
    """The one-pass measures of one window from the scores of its S suffix targets."""
    hit = st.correct  # (S,)
    run = int(np.cumprod(hit).sum()) if len(hit) else 0  # correct run from the first suffix token
    lp = float(st.logp.sum())
    return {
        "onepass_exact": bool(hit.all()),
        "extraction_strength": run / len(hit),
        "onepass_token_acc": float(hit.mean()),
        "onepass_hits": "".join("1" if h else "0" for h in hit),
        "suffix_logprob": lp,
        "p_suffix": math.exp(lp),
    }


def np_extraction(p_suffix: float | np.ndarray, n: int) -> float | np.ndarray:
    """1 - (1 - p)^n, computed as -expm1(n·log1p(-p)) so tiny p does not round to 0."""
    p = np.clip(np.asarray(p_suffix, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        out = -np.expm1(n * np.log1p(-p))
    return float(out) if out.ndim == 0 else out


def sample_hits(
    model,
    prefixes: Sequence[Sequence[int]],
    suffixes: Sequence[Sequence[int]],
    n: int,
    *,
    temperature: float = 1.0,
    seed: int = 0,
    pad_id: int = 0,
    batch_size: int | str = 32,
    progress: bool = True,
) -> list[int]:
    """Sampled extraction: for each window, how many of ``n`` samples (at ``temperature``) equal the true suffix.

    All ``n`` copies of a prefix are decoded in one batch stream from a generator seeded with ``seed``, so the
    counts are reproducible for a given batch size and device.
    """
    s = len(suffixes[0]) if suffixes else 0
    gen = torch.Generator().manual_seed(seed)
    flat = [p for p in prefixes for _ in range(n)]
    outs = generate(
        model,
        flat,
        s,
        pad_id=pad_id,
        batch_size=batch_size,
        pick=sampling_pick(temperature, gen),
        progress=progress,
        desc="sampling",
    )
    truth = [list(x) for x in suffixes for _ in range(n)]
    hits = np.array([o == t for o, t in zip(outs, truth)], dtype=np.int64).reshape(len(prefixes), n)
    return hits.sum(axis=1).tolist()
