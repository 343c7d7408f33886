"""Whether one set of items predicts another (e.g. the targets a smaller model memorised, for a larger model's).

* :func:`set_prediction` -- precision and recall of a predicted set (e.g. the targets a smaller model memorised) for
  the actual one (the larger model's), with Wilson intervals (Biderman et al. 2023); :func:`threshold_rule` -- the
  trivial predictor beside it: "memorised iff read >= t times", t fitted on the predicting model's set.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .intervals import wilson_interval


def set_prediction(predicted: Sequence[bool], actual: Sequence[bool]) -> dict[str, Any]:
    """How well one set predicts another over the same items (Biderman et al. 2023): ``predicted`` / ``actual``
    (n,) bool. Returns ``n``, ``predicted``, ``actual``, ``both`` (counts) and ``precision`` = both / predicted,
    ``recall`` = both / actual, each ``{k, n, rate, low, high}`` with Wilson's 95 % interval."""
    p, a = np.asarray(predicted, dtype=bool).reshape(-1), np.asarray(actual, dtype=bool).reshape(-1)
    if p.shape != a.shape:
        raise ValueError(f"predicted and actual sets over different items: {len(p)} and {len(a)}")
    both = int((p & a).sum())

    def rate(k: int, n: int) -> dict[str, Any]:
        low, high = wilson_interval(k, n)
        return {"k": k, "n": n, "rate": k / n if n else None, "low": low, "high": high}

    return {
        "n": int(len(p)),
        "predicted": int(p.sum()),
        "actual": int(a.sum()),
        "both": both,
        "precision": rate(both, int(p.sum())),
        "recall": rate(both, int(a.sum())),
    }


def threshold_rule(counts: Sequence[float], labels: Sequence[bool]) -> float:
    """The threshold t of the rule "label iff count >= t" that best reproduces ``labels`` (most items right; ties:
    the smallest t), over t in the counts' values and +inf (the rule that predicts nothing): e.g. "memorised iff read
    >= 16 times", fitted on one model's memorised set to predict another's -- the baseline a predictor of
    memorisation must beat."""
    c, y = np.asarray(counts, dtype=np.float64).reshape(-1), np.asarray(labels, dtype=bool).reshape(-1)
    if c.shape != y.shape:
        raise ValueError(f"{len(c)} counts for {len(y)} labels")
    best, best_right = math.inf, int((~y).sum())  # t = inf: nothing predicted
    for t in np.unique(c):
        right = int(((c >= t) == y).sum())
        if right > best_right:
            best, best_right = float(t), right
    return best
