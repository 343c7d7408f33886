"""Secret-Sharer exposure of canaries (Carlini et al. 2019, "The Secret Sharer", USENIX Security).

A canary (``goldfish.data.canaries``) is a random prefix followed by a random secret ``s`` of m tokens drawn
uniformly from an alphabet of A ids; the randomness space is ``R = alphabet^m``. The model ranks every candidate
secret ``r`` in R by its log-perplexity after the canary's prefix, ``Px(r) = -log2 P(r | prefix)``; with
``rank(s)`` the canary's 1-based position in that order,

    exposure(s) = log2 |R| - log2 rank(s),

0 bits for the least likely secret, log2|R| bits for a canary ranked first. An untrained model ranks the canary
uniformly at random: E[exposure] = 1 / ln 2 ~ 1.44 bits. Exposure does not floor where exact extraction does: a
canary a model has merely become more familiar with climbs the ranking long before greedy decoding reproduces it.

The rank is computed or estimated as the paper does (Section 4.3):

* ``full`` (when |R| <= ``max_full``): every candidate of R is scored and the rank is exact -- by the chain rule,
  ``log P(r | prefix) = sum_j log P(r_j | prefix, r_<j)``: for every partial secret of length j < m, one next-token
  distribution over the alphabet, the prefix's key-value cache reused for all of them
  (:func:`enumerated_perplexities`), so a space of A^2 secrets costs A forward tokens after the prefix, not A^2
  sequences (a 2-token secret over a 4,095-id vocabulary: |R| = 16.8 M, 24 bits, ranked exactly);
* ``sampled`` (otherwise): n candidates drawn uniformly from R; the rank is estimated as
  ``1 + (|R| - 1) * f`` with ``f`` the fraction of the sample below the canary (ties count half), which resolves
  exposures up to about log2 n bits. A canary no sampled candidate beats is ``saturated``: the sample only says its
  exposure is at least ~log2 n. Beyond the sample, the paper's "distribution modeling": a skew-normal fitted to the
  sampled log-perplexities gives ``extrapolated = -log2 CDF(Px(s))`` (capped at log2|R|). The reported
  ``exposure`` combines the two as the paper does: the sampled rank while it resolves the canary, the extrapolation
  (at least log2 n) once it is saturated; ``sampled_exposure`` keeps the rank estimate alone (log2|R| when
  saturated).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch
from scipy import stats

from goldfish.data.canaries import canary_alphabet
from goldfish.errors import UserError

from .generate import forward, left_pad, model_device
from .scoring import token_statistics

MAX_FULL = 4096  # score the whole randomness space when it has at most this many secrets


def space_bits(alphabet_size: int, secret_tokens: int) -> float:
    """log2 |R| = secret_tokens * log2(alphabet_size)."""
    return secret_tokens * math.log2(alphabet_size)


def rank_exposure(canary: float, candidates: Sequence[float], bits: float, full: bool) -> dict[str, Any]:
    """The exposure of one canary from its log-perplexity ``canary`` and its candidates' (any monotone unit).

    ``full``: ``candidates`` are every *other* secret of R (|R| - 1 values), the rank is exact; else a uniform
    sample of R, the rank is estimated (module docstring).
    -> {exposure, rank, sampled_exposure, saturated, extrapolated}."""
    values = np.asarray(candidates, dtype=np.float64)
    if values.size == 0:
        raise UserError("rank exposure needs at least one candidate secret")
    below = float(np.sum(values < canary) + 0.5 * np.sum(values == canary))
    size = 2.0**bits
    rank = 1.0 + below if full else 1.0 + (size - 1.0) * below / values.size
    ranked = bits - math.log2(rank)
    if full:
        return {
            "exposure": ranked,
            "rank": rank,
            "sampled_exposure": ranked,
            "saturated": False,
            "extrapolated": ranked,
        }
    saturated = below == 0
    extrapolated = skewnorm_exposure(canary, values, bits)
    exposure = max(extrapolated, math.log2(values.size)) if saturated else ranked
    return {
        "exposure": exposure,
        "rank": rank,
        "sampled_exposure": ranked,
        "saturated": saturated,
        "extrapolated": extrapolated,
    }


def skewnorm_exposure(canary: float, candidates: np.ndarray, bits: float) -> float:
    """-log2 P(Px <= canary) under a skew-normal fitted to the candidates' log-perplexities, in [0, bits]."""
    shape, loc, scale = stats.skewnorm.fit(candidates)
    log_cdf = float(stats.skewnorm.logcdf(canary, shape, loc, scale))  # natural log, stable in the far tail
    return float(min(max(-log_cdf / math.log(2.0), 0.0), bits))


def sampled_secrets(alphabet: np.ndarray, secret_tokens: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, m) int64 secrets drawn uniformly from R = alphabet^m (with replacement)."""
    return rng.choice(alphabet, size=(n, secret_tokens), replace=True).astype(np.int64)


ENUMERATE_ROWS = 512  # partial secrets per forward pass of the enumeration (their copies of the prefix's cache)


@torch.inference_mode()
def _next_log2_probs(model: Any, prefix: Sequence[int], partials: np.ndarray, alphabet: np.ndarray) -> np.ndarray:
    """(N, A) log2 P(a | prefix, partial) of every alphabet id a after each partial secret (N, j): one forward of
    the prefix with its cache, copied for the N rows, then one of the partials' j tokens (j = 0: the prefix's own
    next-token distribution)."""
    device = model_device(model)
    rows, j = partials.shape
    ids, mask, positions = left_pad([list(prefix)], 0, device)  # (1, P)
    if j == 0:
        logits, _ = forward(model, ids, mask, positions, use_cache=False)
    else:
        _, cache = forward(model, ids, mask, positions, use_cache=True)
        if not hasattr(cache, "batch_repeat_interleave"):
            raise UserError(
                f"{type(model).__name__} returns no key-value cache that can be copied per row; enumerate "
                f"canary secrets with a Hugging Face causal LM, or set canaries.max_full below |R| to "
                f"sample candidates"
            )
        cache.batch_repeat_interleave(rows)
        new = torch.as_tensor(partials, dtype=torch.long, device=device)  # (N, j)
        width = len(prefix) + j
        logits, _ = forward(
            model,
            new,
            torch.ones((rows, width), dtype=torch.long, device=device),
            torch.arange(len(prefix), width, device=device).expand(rows, j),
            cache,
            use_cache=False,
        )
    lp = logits[:, -1].log_softmax(-1)[:, torch.as_tensor(alphabet, device=device)]  # (N, A) natural log
    return lp.double().cpu().numpy() / math.log(2.0)


def enumerated_perplexities(
    model: Any, prefix: Sequence[int], alphabet: np.ndarray, secret_tokens: int, rows: int = ENUMERATE_ROWS
) -> np.ndarray:
    """(A^m,) ``-log2 P(r | prefix)`` of every secret r of R = alphabet^m, r = alphabet[i_1], ..., alphabet[i_m] at
    index ``sum_j i_j A^(m-j)`` (row-major), by the chain rule over partial secrets (module docstring)."""
    a = len(alphabet)
    total = np.zeros(1)  # (A^j,) -log2 P of every partial secret of length j
    for j in range(secret_tokens):
        partials = np.stack(np.unravel_index(np.arange(a**j), (a,) * j), axis=1) if j else np.zeros((1, 0), int)
        step = np.empty((a**j, a))  # (A^j, A) log2 P of the next id after each partial
        for start in range(0, a**j, rows):
            chunk = alphabet[partials[start : start + rows]]  # (n, j) ids
            step[start : start + rows] = _next_log2_probs(model, prefix, chunk, alphabet)
        total = (total[:, None] - step).reshape(-1)
    return total


def secret_perplexities(model: Any, prefix: Sequence[int], secrets: np.ndarray, **scoring: Any) -> np.ndarray:
    """(N,) ``-log2 P(secret | prefix)`` of each secret row (N, m) after the same prefix (teacher-forced)."""
    m = secrets.shape[1]
    docs = [list(prefix) + row.tolist() for row in secrets]
    stats_ = token_statistics(model, docs, want_pp=False, progress=False, **scoring)
    return np.array([-float(np.sum(st.logp[-m:])) for st in stats_]) / math.log(2.0)


def canary_exposures(
    model: Any,
    canaries: Sequence[Sequence[int]],
    repetitions: Sequence[int],
    secret_tokens: int,
    alphabet: np.ndarray,
    n_candidates: int,
    seed: int = 0,
    max_full: int = MAX_FULL,
    **scoring: Any,
) -> dict[str, Any]:
    """Exposure of every canary (the last ``secret_tokens`` ids of each are its secret) -> the ``canaries``
    section of results.json: per canary ``{index, repetitions, exposure, rank, sampled_exposure, saturated,
    extrapolated}`` and per
    repetition count the mean exposure; ``method`` says whether the space was enumerated or sampled."""
    bits = space_bits(len(alphabet), secret_tokens)
    full = len(alphabet) ** secret_tokens <= max_full
    rng = np.random.default_rng([seed, 4])
    rows, n_others = [], 0
    for c, (ids, reps) in enumerate(zip(canaries, repetitions)):
        ids = list(ids)
        prefix, secret = ids[:-secret_tokens], np.asarray(ids[-secret_tokens:], dtype=np.int64)
        if full:  # every secret scored; the canary's own is one of them, left out of the others
            ppl = enumerated_perplexities(model, prefix, alphabet, secret_tokens)
            own = int(np.ravel_multi_index(tuple(np.searchsorted(alphabet, secret)), (len(alphabet),) * secret_tokens))
            mine, others = ppl[own], np.delete(ppl, own)
        else:
            ppl = secret_perplexities(
                model,
                prefix,
                np.concatenate([secret[None, :], sampled_secrets(alphabet, secret_tokens, n_candidates, rng)]),
                **scoring,
            )
            mine, others = ppl[0], ppl[1:]
        n_others = len(others)
        rows.append({"index": c, "repetitions": int(reps), **rank_exposure(mine, others, bits, full)})
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(str(r["repetitions"]), []).append(r["exposure"])
    return {
        "method": "full" if rows and full else "sampled",
        "space_bits": bits,
        "alphabet": int(len(alphabet)),
        "secret_tokens": secret_tokens,
        "n_candidates": n_others if rows else 0,
        "resolution_bits": math.log2(n_others + 1) if rows else None,
        "canaries": rows,
        "by_repetitions": {
            r: {"n": len(v), "mean_exposure": float(np.mean(v))}
            for r, v in sorted(by.items(), key=lambda kv: int(kv[0]))
        },
    }


def check_task(tasks: Sequence[str], splits: dict) -> None:
    """Refuse, before any work, the ``canaries`` task on data without canaries."""
    if "canaries" in tasks and not splits.get("canaries"):
        raise UserError(
            "tasks has canaries but the data has no canaries split; prepare it with canaries.count=N "
            "(a prepared folder, see data/README.md), or leave canaries out of tasks"
        )


def canaries_section(model: Any, splits: dict, cfg: Any, prep: Any) -> dict[str, Any] | None:
    """The ``canaries`` section of results.json for ``goldfish eval`` (None unless the task is asked for): the
    prepared folder's canaries scored against candidates from the alphabet their tokens were drawn from."""
    if "canaries" not in cfg.tasks:
        return None

    alphabet = canary_alphabet(prep.tokenizer)
    recorded = prep.manifest["stats"].get("canary_alphabet")
    if recorded != len(alphabet):
        raise UserError(
            f"the prepared tokenizer has {len(alphabet)} canary ids but the canaries were drawn from "
            f"{recorded}; prepare the data again"
        )
    docs = splits["canaries"]
    m = cfg.membership
    return canary_exposures(
        model,
        [d.tokens for d in docs],
        [d.repetitions for d in docs],
        int(prep.manifest["config"]["canaries"]["secret_tokens"]),
        alphabet,
        cfg.canaries.n_candidates,
        cfg.seed,
        cfg.canaries.max_full,
        token_budget=m.token_budget,
        chunk=m.chunk,
    )
