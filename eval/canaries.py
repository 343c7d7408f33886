"""Secret-Sharer exposure of canaries (Carlini et al. 2019, "The Secret Sharer", USENIX Security).

A canary (``goldfish.data.canaries``) is a random prefix followed by a random secret ``s`` of m tokens drawn
uniformly from an alphabet of A ids; the randomness space is ``R = alphabet^m``. The model ranks every candidate
secret ``r`` in R by its log-perplexity after the canary's prefix, ``Px(r) = -log2 P(r | prefix)``; with
``rank(s)`` the canary's 1-based position in that order,

    exposure(s) = log2 |R| - log2 rank(s),

0 bits for the least likely secret, log2|R| bits for a canary ranked first. An untrained model ranks the canary
uniformly at random: E[exposure] = 1 / ln 2 ~ 1.44 bits. Exposure does not floor where exact extraction does: a
canary a model has merely become more familiar with climbs the ranking long before greedy decoding reproduces it.

The rank is estimated as the paper does (Section 4.3):

* ``full`` (when |R| <= ``max_full``): every candidate of R is scored; the rank is exact.
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
from scipy import stats

from goldfish.data.canaries import canary_alphabet
from goldfish.errors import UserError

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
    size = 2.0 ** bits
    rank = 1.0 + below if full else 1.0 + (size - 1.0) * below / values.size
    ranked = bits - math.log2(rank)
    if full:
        return {"exposure": ranked, "rank": rank, "sampled_exposure": ranked, "saturated": False,
                "extrapolated": ranked}
    saturated = below == 0
    extrapolated = skewnorm_exposure(canary, values, bits)
    exposure = max(extrapolated, math.log2(values.size)) if saturated else ranked
    return {"exposure": exposure, "rank": rank, "sampled_exposure": ranked, "saturated": saturated,
            "extrapolated": extrapolated}


def skewnorm_exposure(canary: float, candidates: np.ndarray, bits: float) -> float:
    """-log2 P(Px <= canary) under a skew-normal fitted to the candidates' log-perplexities, in [0, bits]."""
    shape, loc, scale = stats.skewnorm.fit(candidates)
    log_cdf = float(stats.skewnorm.logcdf(canary, shape, loc, scale))  # natural log, stable in the far tail
    return float(min(max(-log_cdf / math.log(2.0), 0.0), bits))


def candidate_secrets(alphabet: np.ndarray, secret_tokens: int, n: int, rng: np.random.Generator,
                      max_full: int = MAX_FULL) -> tuple[np.ndarray, bool]:
    """(secrets (N, m) int64, full): all of R when |R| <= ``max_full`` (the full space), else n uniform draws."""
    size = len(alphabet) ** secret_tokens
    if size <= max_full:
        grids = np.meshgrid(*([alphabet] * secret_tokens), indexing="ij")
        return np.stack([g.reshape(-1) for g in grids], axis=1).astype(np.int64), True
    return rng.choice(alphabet, size=(n, secret_tokens), replace=True).astype(np.int64), False


def secret_perplexities(model: Any, prefix: Sequence[int], secrets: np.ndarray, **scoring: Any) -> np.ndarray:
    """(N,) ``-log2 P(secret | prefix)`` of each secret row (N, m) after the same prefix (teacher-forced)."""
    m = secrets.shape[1]
    docs = [list(prefix) + row.tolist() for row in secrets]
    stats_ = token_statistics(model, docs, want_pp=False, progress=False, **scoring)
    return np.array([-float(np.sum(st.logp[-m:])) for st in stats_]) / math.log(2.0)


def canary_exposures(model: Any, canaries: Sequence[Sequence[int]], repetitions: Sequence[int],
                     secret_tokens: int, alphabet: np.ndarray, n_candidates: int, seed: int = 0,
                     max_full: int = MAX_FULL, **scoring: Any) -> dict[str, Any]:
    """Exposure of every canary (the last ``secret_tokens`` ids of each are its secret) -> the ``canaries``
    section of results.json: per canary ``{index, repetitions, exposure, rank, sampled_exposure, saturated,
    extrapolated}`` and per
    repetition count the mean exposure; ``method`` says whether the space was enumerated or sampled."""
    bits = space_bits(len(alphabet), secret_tokens)
    rng = np.random.default_rng([seed, 4])
    rows = []
    for c, (ids, reps) in enumerate(zip(canaries, repetitions)):
        ids = list(ids)
        prefix, secret = ids[:-secret_tokens], np.asarray([ids[-secret_tokens:]], dtype=np.int64)
        candidates, full = candidate_secrets(alphabet, secret_tokens, n_candidates, rng, max_full)
        if full:  # the canary's own secret is one of the enumerated candidates: leave it out of the others
            candidates = candidates[np.any(candidates != secret, axis=1)]
        ppl = secret_perplexities(model, prefix, np.concatenate([secret, candidates]), **scoring)
        rows.append({"index": c, "repetitions": int(reps), **rank_exposure(ppl[0], ppl[1:], bits, full)})
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(str(r["repetitions"]), []).append(r["exposure"])
    return {"method": "full" if rows and full else "sampled", "space_bits": bits, "alphabet": int(len(alphabet)),
            "secret_tokens": secret_tokens, "n_candidates": int(len(candidates)) if rows else 0,
            "resolution_bits": math.log2(len(candidates) + 1) if rows else None, "canaries": rows,
            "by_repetitions": {r: {"n": len(v), "mean_exposure": float(np.mean(v))} for r, v in
                               sorted(by.items(), key=lambda kv: int(kv[0]))}}


def check_task(tasks: Sequence[str], splits: dict) -> None:
    """Refuse, before any work, the ``canaries`` task on data without canaries."""
    if "canaries" in tasks and not splits.get("canaries"):
        raise UserError("tasks has canaries but the data has no canaries split; prepare it with canaries.count=N "
                        "(a prepared folder, see data/README.md), or leave canaries out of tasks")


def canaries_section(model: Any, splits: dict, cfg: Any, prep: Any) -> dict[str, Any] | None:
    """The ``canaries`` section of results.json for ``goldfish eval`` (None unless the task is asked for): the
    prepared folder's canaries scored against candidates from the alphabet their tokens were drawn from."""
    if "canaries" not in cfg.tasks:
        return None

    alphabet = canary_alphabet(prep.tokenizer)
    recorded = prep.manifest["stats"].get("canary_alphabet")
    if recorded != len(alphabet):
        raise UserError(f"the prepared tokenizer has {len(alphabet)} canary ids but the canaries were drawn from "
                        f"{recorded}; prepare the data again")
    docs = splits["canaries"]
    m = cfg.membership
    return canary_exposures(model, [d.tokens for d in docs], [d.repetitions for d in docs],
                            int(prep.manifest["config"]["canaries"]["secret_tokens"]), alphabet,
                            cfg.canaries.n_candidates, cfg.seed, cfg.canaries.max_full,
                            token_budget=m.token_budget, chunk=m.chunk)
