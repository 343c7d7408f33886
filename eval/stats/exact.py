"""Exact tests of counts: McNemar's on paired verdicts, its document-level sign test, and the Poisson-binomial
distribution of a count of unequal chances.

* :func:`mcnemar_exact` -- two arms' exact-match verdicts on the same windows: the exact two-sided binomial test on
  the discordant pairs (McNemar 1947; statsmodels' ``mcnemar(exact=True)``).
* :func:`document_mcnemar` -- the same comparison where a document contributes several windows (placements, prefix
  lengths): windows of one document are not independent, so the test counts *documents* -- the exact two-sided sign
  test of each document's difference in verbatim windows (McNemar's exact test when each document has one window).
* :func:`poisson_binomial` -- the exact distribution of a count of independent events with unequal probabilities
  (a baseline's per-window exact-match chances), and the two-sided p-value of an observed count under it.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy.stats import binomtest

from .bootstrap import cluster_index


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> dict[str, Any]:
    """Exact McNemar test of two arms' paired binary outcomes (e.g. exact match on the same windows).

    ``a_only``: items where only ``a`` succeeds, ``b_only``: only ``b``; the two-sided p-value is the binomial
    test of ``a_only`` successes in ``a_only + b_only`` trials at 1/2 (1.0 without discordant pairs). Returns
    ``n``, ``a_rate``, ``b_rate``, ``diff`` (a - b), ``a_only``, ``b_only``, ``p_value``.
    """
    x, y = np.asarray(a, dtype=bool).reshape(-1), np.asarray(b, dtype=bool).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"paired outcomes of different lengths: {len(x)} and {len(y)}")
    a_only, b_only = int((x & ~y).sum()), int((~x & y).sum())
    discordant = a_only + b_only
    p = float(binomtest(a_only, discordant, 0.5).pvalue) if discordant else 1.0
    n = len(x)
    return {
        "n": n,
        "a_rate": float(x.mean()) if n else None,
        "b_rate": float(y.mean()) if n else None,
        "diff": float(x.mean() - y.mean()) if n else None,
        "a_only": a_only,
        "b_only": b_only,
        "p_value": p,
    }


def document_mcnemar(a: Sequence[bool], b: Sequence[bool], clusters: Sequence[Any] | None = None) -> dict[str, Any]:
    """Two arms' paired binary outcomes (exact match on the same windows) tested at the level of documents.

    Windows of one document (several placements or prefix lengths) are not independent, so counting discordant
    *windows* overstates the evidence (4 discordant documents with 2 windows each are not 8 independent pairs). Per
    document c, ``d_c`` = a's verbatim windows minus b's; under the null that the arms are exchangeable within a
    document, ``d_c`` is symmetric about 0, and the exact two-sided sign test of the documents with ``d_c != 0``
    (binomial at 1/2) is the test. With one window per document it is McNemar's exact test (:func:`mcnemar_exact`).
    ``clusters[i]``: the document of window i (None: one window per document).

    Returns :func:`mcnemar_exact`'s fields (``a_only`` / ``b_only`` count *windows*), ``n_documents``,
    ``a_only_documents`` / ``b_only_documents`` (documents whose difference is > 0 / < 0), ``p_value`` (of the
    documents) and ``test`` (``McNemar exact`` | ``document sign test``)."""
    x, y = np.asarray(a, dtype=bool).reshape(-1), np.asarray(b, dtype=bool).reshape(-1)
    windows = mcnemar_exact(x, y)
    index = cluster_index(clusters, len(x))
    n_docs = int(index.max()) + 1 if len(index) else 0
    d = np.bincount(index, x.astype(np.float64) - y.astype(np.float64), minlength=n_docs)  # (D,) per document
    a_docs, b_docs = int((d > 0).sum()), int((d < 0).sum())
    p = float(binomtest(a_docs, a_docs + b_docs, 0.5).pvalue) if a_docs + b_docs else 1.0
    return {
        **windows,
        "n_documents": n_docs,
        "a_only_documents": a_docs,
        "b_only_documents": b_docs,
        "p_value": p,
        "test": "McNemar exact" if n_docs == len(x) else "document sign test",
    }


def poisson_binomial(probs: Sequence[float], observed: int | None = None) -> dict[str, Any]:
    """The count of independent events with probabilities ``probs`` (a Poisson-binomial variable, e.g. how many
    windows a baseline expects verbatim, each with its own chance): ``n``, ``expected``, ``sd`` and, given an
    ``observed`` count, ``p_at_most`` = P(X <= observed), ``p_at_least`` = P(X >= observed) and the two-sided
    ``p_value`` = min(1, 2 min of the two), from the exact distribution (a convolution of the events)."""
    p = np.clip(np.asarray(probs, dtype=np.float64).reshape(-1), 0.0, 1.0)
    pmf = np.ones(1)
    for q in p:  # (n + 1,) after every event: P(X = j)
        pmf = np.convolve(pmf, [1.0 - q, q])
    out: dict[str, Any] = {
        "n": int(len(p)),
        "expected": float(p.sum()),
        "sd": float(math.sqrt(float((p * (1 - p)).sum()))),
        "observed": observed,
        "p_at_most": None,
        "p_at_least": None,
        "p_value": None,
    }
    if observed is not None:
        at_most, at_least = float(pmf[: observed + 1].sum()), float(pmf[observed:].sum())
        out.update(
            p_at_most=min(1.0, at_most), p_at_least=min(1.0, at_least), p_value=min(1.0, 2.0 * min(at_most, at_least))
        )
    return out


def exact_trend(events: Sequence[int], trials: Sequence[int]) -> dict[str, Any]:
    """The exact (conditional) Cochran-Armitage trend test of rare events across ordered groups (e.g. model sizes,
    smallest first): ``events[i]`` of ``trials[i]`` in group i, scored 0, 1, ..., G-1.

    Given the total K of events, the counts are multivariate hypergeometric under "no trend" (every trial equally
    likely to be an event); the statistic is T = sum_i i * events_i and its exact distribution is built group by
    group (a dynamic programme over (events so far, T so far), weights C(n_i, k_i) / C(N, K)). Unlike a penalised
    logistic slope it needs no events in every group: 0/0/2/3/5 of 280 each is an ordinary input. Returns
    ``statistic`` (T), ``expected`` (its mean under no trend), ``p_greater`` (P(T >= t): a rising trend),
    ``p_less``, ``p_value`` (two-sided: P(|T - E T| >= |t - E T|)), ``events``, ``trials`` and the ``rates``.
    """
    k = [int(x) for x in events]
    n = [int(x) for x in trials]
    if len(k) != len(n) or len(k) < 2 or any(not 0 <= a <= b for a, b in zip(k, n)):
        raise ValueError(f"exact_trend needs >= 2 groups with 0 <= events <= trials: {k} of {n}")
    total, groups = sum(k), len(k)
    t_max = total * (groups - 1)
    # dist[j, t]: the weight of j events so far with statistic t (log-space weights normalised at the end)
    dist = np.full((total + 1, t_max + 1), -np.inf)
    dist[0, 0] = 0.0
    for score, size in enumerate(n):
        new = np.full_like(dist, -np.inf)
        for j in range(min(size, total) + 1):
            logw = math.lgamma(size + 1) - math.lgamma(j + 1) - math.lgamma(size - j + 1)
            shift = score * j
            src = dist[: total + 1 - j, : t_max + 1 - shift] + logw
            dst = new[j:, shift:]
            np.logaddexp(dst, src, out=dst)
        dist = new
    row = dist[total]
    probs = np.exp(row - np.logaddexp.reduce(row[np.isfinite(row)]))
    t_values = np.arange(t_max + 1)
    t_obs = sum(i * x for i, x in enumerate(k))
    expected = float((probs * t_values).sum())
    tol = 1e-9 * max(1.0, expected)
    far = np.abs(t_values - expected) >= abs(t_obs - expected) - tol
    return {
        "statistic": t_obs,
        "expected": expected,
        "p_greater": float(min(1.0, probs[t_values >= t_obs].sum())),
        "p_less": float(min(1.0, probs[t_values <= t_obs].sum())),
        "p_value": float(min(1.0, probs[far].sum())),
        "events": k,
        "trials": n,
        "rates": [a / b if b else None for a, b in zip(k, n)],
    }
