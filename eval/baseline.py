"""The mask-arithmetic baseline of a Goldfish run: how much exact match the drop rate alone allows.

Greedy extraction of an S-token suffix is exact iff every suffix token is the argmax given the true prefix. Under
Goldfish each target is dropped with probability 1/k; suppose the model predicts every kept token and misses a
dropped one with probability g. Then

    P(exact) = (1 - g/k) ** S

``g`` is measured, teacher-forced, on the evaluated member windows: the fraction of suffix positions that the
run's own mask dropped where the argmax is wrong. Exact match well below the baseline means the model misses kept
tokens too (under-trained); at the baseline, the mask arithmetic explains the result; above it, the misses are not
independent across positions (or g is small). Comparing the two separates the model's contribution from the mask's.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from goldfish.masks import GoldfishConfig, config_mask

from .scoring import token_statistics


def k_baseline(k: float, suffix_len: int, g: float) -> float:
    """(1 - g/k) ** S: the exact-match rate of a model that misses a dropped token with probability g and no other."""
    if not (k >= 1 and suffix_len >= 0 and 0.0 <= g <= 1.0):
        raise ValueError(f"k_baseline needs k >= 1, suffix_len >= 0 and 0 <= g <= 1 (got k={k}, S={suffix_len}, "
                         f"g={g})")
    return (1.0 - g / k) ** suffix_len


def dropped_miss_rate(hits: np.ndarray, dropped: np.ndarray) -> float | None:
    """g: the fraction of dropped positions whose teacher-forced argmax is wrong; None when nothing was dropped.

    ``hits``, ``dropped``: (N, S) bool, argmax correct / position dropped by the training mask."""
    hits, dropped = np.asarray(hits, dtype=bool), np.asarray(dropped, dtype=bool)
    n = int(dropped.sum())
    return None if n == 0 else float((dropped & ~hits).sum() / n)


def window_predictions(model, docs: Sequence[Sequence[int]], prefix_len: int, suffix_len: int,
                       goldfish: GoldfishConfig, **scoring: Any) -> tuple[np.ndarray, np.ndarray]:
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
    stats = token_statistics(model, windows, first=[prefix_len] * len(windows), desc="k baseline", progress=False,
                             **scoring)
    hits = np.stack([st.correct for st in stats])  # (N, S)
    dropped = config_mask(torch.tensor(windows, dtype=torch.long), goldfish)[:, prefix_len:]  # (N, S)
    return hits, dropped.numpy()


def baseline_rows(model, docs: Sequence[Sequence[int]], prefix_lens: Sequence[int], suffix_len: int,
                  goldfish: GoldfishConfig, **scoring: Any) -> list[dict]:
    """Per prefix length: windows, dropped positions, g, the kept-token accuracy, teacher-forced exact match and
    the baseline (1 - g/k)^S. A prefix length <= 0 (``all``) means all but the last ``suffix_len`` tokens of each
    document, as extraction with ``prefix_lens: [all]`` uses it."""
    rows = []
    for p in prefix_lens:
        if p > 0:
            hits, dropped = window_predictions(model, docs, p, suffix_len, goldfish, **scoring)
        else:  # documents of equal length share one prefix length
            lengths = sorted({len(d) for d in docs if len(d) > suffix_len})
            parts = [window_predictions(model, [d for d in docs if len(d) == n], n - suffix_len, suffix_len, goldfish,
                                        **scoring) for n in lengths]
            hits = np.concatenate([h for h, _ in parts]) if parts else np.zeros((0, suffix_len), bool)
            dropped = np.concatenate([d for _, d in parts]) if parts else np.zeros((0, suffix_len), bool)
        g = dropped_miss_rate(hits, dropped)
        kept = ~dropped
        rows.append({
            "prefix_len": p, "n_windows": int(len(hits)), "n_dropped": int(dropped.sum()), "g": g,
            "kept_acc": float(hits[kept].mean()) if kept.any() else None,
            "onepass_exact_rate": float(hits.all(axis=1).mean()) if len(hits) else None,
            "baseline": None if g is None else k_baseline(goldfish.k, suffix_len, g),
        })
    return rows
