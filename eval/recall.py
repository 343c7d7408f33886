"""ReCaLL (Xie et al. 2024), the ``recall`` membership attack: LL(x | P) / LL(x), a document's average
log-likelihood after a nonmember prefix P over its unconditional one (:mod:`goldfish.eval.membership` registers it).

Both likelihoods are over the same targets, tokens 1 .. n-1 of the document's first n tokens (n = scoring window -
len(P)). Each costs at most one pass over the document's tokens: the unconditional one is the target pass's own
mean NLL wherever the document fits n tokens (the same targets, already scored: ``nll``), and P is read once per
model, its keys/values reused for every batch (``context`` of :func:`goldfish.eval.scoring.iter_token_statistics`).
"""

from __future__ import annotations

from typing import Any, MutableMapping, Sequence

import numpy as np

from goldfish.errors import UserError

from .scoring import document_key, iter_token_statistics


def recall_score(ll_conditional: float, ll_unconditional: float) -> float:
    """ReCaLL (Xie et al. 2024): LL(x | P) / LL(x) of two average log-likelihoods (natural log, both < 0); larger
    for members."""
    return float(ll_conditional / ll_unconditional) if ll_unconditional != 0 else float("nan")


def mean_ll_pass(
    model: Any,
    docs: Sequence[Sequence[int]],
    first: Sequence[int],
    name: str,
    cache: MutableMapping[str, dict] | None,
    loop: dict,
    context: Sequence[int] = (),
) -> np.ndarray:
    """Mean log-likelihood of each document's targets from ``first[i]`` on, read after ``context`` (its keys/values
    computed once), one cached pass; cached as ``context + document`` with targets from ``len(context) + first``."""
    cache, context = ({} if cache is None else cache), list(context)
    keys = [
        document_key(context + list(d), f"{name}|{len(context) + f}|{loop.get('window')}") for d, f in zip(docs, first)
    ]
    todo = [i for i, k in enumerate(keys) if k not in cache]
    stats = iter_token_statistics(
        model,
        [docs[i] for i in todo],
        first=[first[i] for i in todo],
        want_rank=False,
        desc=name,
        context=context or None,
        **loop,
    )
    for j, st in stats:
        cache[keys[todo[j]]] = {"ll": float(st.logp.mean())}
    return np.array([cache[k]["ll"] for k in keys], dtype=np.float64)


def recall_scores(
    model: Any,
    docs: Sequence[Sequence[int]],
    prefix: Sequence[int],
    *,
    skip: Sequence[int] = (),
    cache: MutableMapping[str, dict] | None = None,
    loop: dict,
    nll: Any = None,
) -> np.ndarray:
    """ReCaLL of each document (:func:`recall_score`) given the nonmember ``prefix`` (read once); NaN for the
    documents in ``skip`` (the prefix's own). Both likelihoods are over tokens 1 .. n-1 of the document's first n
    tokens, n = scoring window - len(prefix); ``nll`` (the target pass's, same window): a document of at most n
    tokens takes its unconditional one from there (the same targets) instead of a second pass."""
    window = loop.get("window") or (len(prefix) + max(len(d) for d in docs))
    n = window - len(prefix)
    if n < 2:
        raise UserError(
            f"the ReCaLL prefix of {len(prefix)} tokens leaves {n} of the scoring window's {window} for "
            f"the document; set a smaller membership.recall_prefix_tokens"
        )
    heads = [list(d[:n]) for d in docs]
    cut = [i for i, d in enumerate(docs) if nll is None or len(d) > n]  # the others: scored whole by the target pass
    plain = -np.asarray(nll if nll is not None else np.full(len(docs), np.nan), dtype=np.float64)
    plain[cut] = mean_ll_pass(model, [heads[i] for i in cut], [1] * len(cut), "recall_plain", cache, loop)
    conditional = mean_ll_pass(model, heads, [1] * len(heads), "recall_prefixed", cache, loop, context=prefix)
    out = np.array([recall_score(c, u) for c, u in zip(conditional, plain)], dtype=np.float64)
    out[list(skip)] = np.nan
    return out
