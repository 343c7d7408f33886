"""The mask-arithmetic baseline of a Goldfish run: how much exact match the drop rate alone allows.

Greedy extraction of an S-token suffix is exact iff every suffix token is the argmax given the true prefix. Suppose
the model predicts every kept token and misses a dropped one with probability g, independently. A window w whose
suffix holds d_w dropped targets (counted with the run's own mask) is then exact with probability (1 - g) ** d_w, so
the baseline of a set of windows is

    mean over windows of (1 - g) ** d_w                (``baseline_windows``: the actual counts)

The nominal form treats every suffix target as dropped with probability 1/k:

    (1 - g/k) ** S                                      (``baseline_nominal``)

The nominal value is the expectation of the per-window one when every target is dropped independently with
probability 1/k (d_w ~ Binomial(S, 1/k): E[(1 - g) ** d_w] = (1 - g/k) ** S); on the evaluated windows the mask's
actual counts decide, and on a few windows they can be far from S/k (with S = 50 and k = 32 many suffixes hold no
dropped target at all and are exact whenever the kept tokens are).

``g`` is measured, teacher-forced, on the evaluated member windows: the fraction of suffix positions that the run's
own mask dropped where the argmax is wrong. Exact match well below the baseline means the model misses kept
tokens too (under-trained); at the baseline, the mask arithmetic explains the result; above it, the misses are not
independent across positions (or g is small). Comparing the two separates the model's contribution from the mask's.

Both forms assume the kept tokens are *known* (kept-token accuracy a = 1). Where the model also misses kept tokens,
the same independence model gives

    mean over windows of a ** (S - d_w) * (1 - g) ** d_w          (``baseline_kept``: a measured too)

and the observed count of verbatim windows is tested against the exact distribution of that many independent
windows with these chances (``test``: a Poisson-binomial, ``goldfish.eval.stats.poisson_binomial``), so "below its
baseline" is a test, not a comparison of two numbers. Every quantity is given over all windows of a prefix length
and per repetition stratum (``repetitions``: ``all`` or the stratum): strata differ in g and a (a target read 256
times is not one read 4 times), so a pooled baseline says little about any of them.

A ``g`` measured on the windows it judges moves with any leak it is meant to detect: a model that did learn some
dropped tokens has a smaller g there, hence a higher baseline, and its excess verbatim count shrinks. Given held-out
documents of the same distribution (the nonmembers), every row also carries ``nonmember_g``: g measured by the same
model on the nonmembers' windows, the same prefix length and the same mask (positions it never trained on, so no
leak can lower it), and the baselines and test recomputed with it (the member windows' own d_w and a). The two gs
bracket the question: with no leak the member g is at least the nonmember one, up to what the memorised context
teaches about the dropped positions (``goldfish.experiment.analyses.attacks``'s leakage audit measures that excess).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from goldfish.masks import GoldfishConfig, config_mask

from .scoring import token_statistics
from .stats import poisson_binomial


def k_baseline(k: float, suffix_len: int, g: float) -> float:
    """(1 - g/k) ** S: the exact-match rate of a model that misses a dropped token with probability g and no other."""
    if not (k >= 1 and suffix_len >= 0 and 0.0 <= g <= 1.0):
        raise ValueError(f"k_baseline needs k >= 1, suffix_len >= 0 and 0 <= g <= 1 (got k={k}, S={suffix_len}, g={g})")
    return (1.0 - g / k) ** suffix_len


def window_baseline(g: float, dropped_counts: Sequence[int]) -> float | None:
    """mean over windows of (1 - g) ** d_w: the exact-match rate of a model that misses each of window w's d_w
    dropped targets with probability g and nothing else; None without windows."""
    if not 0.0 <= g <= 1.0:
        raise ValueError(f"window_baseline needs 0 <= g <= 1 (got g={g})")
    d = np.asarray(dropped_counts, dtype=np.float64).reshape(-1)
    return float(np.mean((1.0 - g) ** d)) if len(d) else None


def dropped_miss_rate(hits: np.ndarray, dropped: np.ndarray) -> float | None:
    """g: the fraction of dropped positions whose teacher-forced argmax is wrong; None when nothing was dropped.

    ``hits``, ``dropped``: (N, S) bool, argmax correct / position dropped by the training mask."""
    hits, dropped = np.asarray(hits, dtype=bool), np.asarray(dropped, dtype=bool)
    n = int(dropped.sum())
    return None if n == 0 else float((dropped & ~hits).sum() / n)


def window_predictions(
    model, docs: Sequence[Sequence[int]], prefix_len: int, suffix_len: int, goldfish: GoldfishConfig, **scoring: Any
) -> tuple[np.ndarray, np.ndarray]:
    """(hits, dropped), each (N, S) bool, for the window [0, P+S) of every document at least P+S tokens long.

    ``hits``: the suffix targets' top-1 correctness, teacher-forced (:mod:`goldfish.eval.scoring`; ``scoring``
    passes its options, e.g. ``token_budget``). ``dropped`` is the run's mask of the window's suffix targets, computed
    on the window from the document's start (where every document-aware strategy gives the mask the document had in
    training).
    """
    n = prefix_len + suffix_len
    windows = [list(d[:n]) for d in docs if len(d) >= n]
    if not windows:
        return np.zeros((0, suffix_len), bool), np.zeros((0, suffix_len), bool)
    stats = token_statistics(
        model, windows, first=[prefix_len] * len(windows), desc="k baseline", progress=False, **scoring
    )
    hits = np.stack([st.correct for st in stats])  # (N, S)
    dropped = config_mask(torch.tensor(windows, dtype=torch.long), goldfish)[:, prefix_len:]  # (N, S)
    return hits, dropped.numpy()


def kept_baseline(a: float, g: float, dropped_counts: Sequence[int], suffix_len: int) -> np.ndarray:
    """(N,) each window's chance of being verbatim when the model hits a kept target with probability ``a`` and a
    dropped one with probability 1 - ``g``, independently: a^(S - d_w) (1 - g)^d_w."""
    d = np.asarray(dropped_counts, dtype=np.float64).reshape(-1)
    return a ** (suffix_len - d) * (1.0 - g) ** d


def _against(g: float | None, a: float | None, counts: np.ndarray, exact: int, k: float, suffix_len: int) -> dict:
    """The baselines of a set of windows (their dropped counts ``counts``, ``exact`` of them verbatim) for a miss rate
    g and kept-token accuracy a: ``baseline_windows``, ``baseline_nominal`` (a = 1), ``baseline_kept`` (a measured)
    and ``test``, the verbatim count against the independent windows of ``baseline_kept``."""
    chances = None if g is None or a is None else kept_baseline(a, g, counts, suffix_len)
    return {
        "baseline_windows": None if g is None else window_baseline(g, counts),
        "baseline_nominal": None if g is None else k_baseline(k, suffix_len, g),
        "baseline_kept": None if chances is None else float(chances.mean()),
        "test": None if chances is None else poisson_binomial(chances, exact),
    }


def stratum_row(
    hits: np.ndarray,
    dropped: np.ndarray,
    k: float,
    suffix_len: int,
    reference: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict:
    """One row of :func:`baseline_rows` from a set of windows' (N, S) teacher-forced hits and dropped positions:
    windows, dropped positions, windows without a dropped suffix target, g, kept-token accuracy a, teacher-forced
    exact matches, the baselines (a = 1: ``baseline_windows``, ``baseline_nominal``; a measured: ``baseline_kept``)
    and ``test``, the exact count of verbatim windows against the independent windows of ``baseline_kept``.

    ``reference``: the (hits, dropped) of held-out windows (the nonmembers'), from which ``nonmember_g`` takes g
    (``{g, n_windows, n_dropped}`` and the baselines and test above with that g: a g no leak on these windows can
    move)."""
    g = dropped_miss_rate(hits, dropped)
    kept = ~dropped
    a = float(hits[kept].mean()) if kept.any() else None
    exact = int(hits.all(axis=1).sum()) if len(hits) else 0
    counts = dropped.sum(axis=1)
    row = {
        "n_windows": int(len(hits)),
        "n_dropped": int(dropped.sum()),
        "n_windows_no_drop": int((counts == 0).sum()),
        "g": g,
        "kept_acc": a,
        "onepass_exact": exact,
        "onepass_exact_rate": exact / len(hits) if len(hits) else None,
        **_against(g, a, counts, exact, k, suffix_len),
    }
    if reference is not None:
        g_ref = dropped_miss_rate(*reference)
        against = _against(g_ref, a, counts, exact, k, suffix_len)
        row["nonmember_g"] = {
            "g": g_ref,
            "n_windows": int(len(reference[0])),
            "n_dropped": int(reference[1].sum()),
            **{key: against[key] for key in ("baseline_windows", "baseline_kept", "test")},
        }
    return row


def _prefix_windows(
    model, docs: Sequence[Sequence[int]], prefix_len: int, suffix_len: int, goldfish: GoldfishConfig, **scoring: Any
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(order, hits, dropped) of every document's window at one prefix length (:func:`window_predictions`), ``order``
    the documents the windows come from. A prefix length <= 0 (``all``) means all but the last ``suffix_len`` tokens
    of each document (documents of equal length share one prefix length)."""
    if prefix_len > 0:
        order = [i for i, d in enumerate(docs) if len(d) >= prefix_len + suffix_len]
        return (order, *window_predictions(model, docs, prefix_len, suffix_len, goldfish, **scoring))
    lengths = sorted({len(d) for d in docs if len(d) > suffix_len})
    groups = [[i for i, d in enumerate(docs) if len(d) == n] for n in lengths]
    parts = [
        window_predictions(model, [docs[i] for i in g], n - suffix_len, suffix_len, goldfish, **scoring)
        for g, n in zip(groups, lengths)
    ]
    order = [i for g in groups for i in g]
    hits = np.concatenate([h for h, _ in parts]) if parts else np.zeros((0, suffix_len), bool)
    dropped = np.concatenate([d for _, d in parts]) if parts else np.zeros((0, suffix_len), bool)
    return order, hits, dropped


def baseline_rows(
    model,
    docs: Sequence[Sequence[int]],
    prefix_lens: Sequence[int],
    suffix_len: int,
    goldfish: GoldfishConfig,
    repetitions: Sequence[int] | None = None,
    heldout: Sequence[Sequence[int]] | None = None,
    **scoring: Any,
) -> list[dict]:
    """Per prefix length, over all windows (``repetitions: "all"``) and, given the documents' ``repetitions``, per
    stratum: :func:`stratum_row`. A prefix length <= 0 (``all``) means all but the last ``suffix_len`` tokens of
    each document, as extraction with ``prefix_lens: [all]`` uses it. ``heldout``: documents of the same
    distribution the model never trained on (the nonmembers): their windows at the same prefix length give every
    row's ``nonmember_g`` (one g per prefix length: held-out text has no repetition strata)."""
    reps = np.asarray(repetitions if repetitions is not None else [0] * len(docs))
    rows = []
    for p in prefix_lens:
        order, hits, dropped = _prefix_windows(model, docs, p, suffix_len, goldfish, **scoring)
        reference = _prefix_windows(model, heldout, p, suffix_len, goldfish, **scoring)[1:] if heldout else None
        rows.append(
            {"prefix_len": p, "repetitions": "all", **stratum_row(hits, dropped, goldfish.k, suffix_len, reference)}
        )
        window_reps = reps[order] if order else np.zeros(0, dtype=reps.dtype)  # (N,) each window's stratum
        if repetitions is not None:
            for r in sorted(set(window_reps.tolist())):
                chosen = window_reps == r
                rows.append(
                    {
                        "prefix_len": p,
                        "repetitions": int(r),
                        **stratum_row(hits[chosen], dropped[chosen], goldfish.k, suffix_len, reference),
                    }
                )
    return rows
