"""Percentile bootstraps of means and paired differences, resampling items or their clusters (documents), and the
two-sided bootstrap p-value every bootstrap test of the package reports.

* :func:`cluster_bootstrap_mean` -- a mean over pooled items (e.g. the windows of several prefix lengths of one
  document) with a 95 % interval that resamples *clusters* (documents), not items: windows of one document are not
  independent.
* :func:`paired_bootstrap` -- two arms' per-item values (e.g. ROUGE-L) on the same items: the mean difference with
  a bootstrap interval that resamples items (or their clusters) with the same indices for both arms.
* :func:`paired_difference` -- two models' per-token measure (e.g. top-1 correct, -log p) on the same positions of
  the same documents: token-weighted means and their difference with an interval resampling documents.
* :func:`difference_in_differences` -- the leakage audit: (arm - control) on the dropped member positions minus
  (arm - control) on held-out text, token-weighted, with an interval that resamples member and held-out documents.
  Training on anything also moves a model on text it never saw; only the excess on the dropped positions is
  leakage.

Every bootstrap interval of the package is a 95 % percentile bootstrap from ``numpy.random.default_rng(seed)`` (same
seed, same interval); every bootstrap p-value is two-sided, :func:`bootstrap_p`: ``min(1, 2 * min(P*(d <= 0),
P*(d >= 0)))`` over the resamples (Efron and Tibshirani 1993, sec. 16.4), so it cannot be smaller than
``2 / n_bootstrap`` unless every resample agrees.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .intervals import percentiles


def bootstrap_p(samples: np.ndarray) -> float:
    """Two-sided bootstrap p-value of ``samples`` (resampled differences) against 0."""
    below, above = float(np.mean(samples <= 0)), float(np.mean(samples >= 0))
    return min(1.0, 2.0 * min(below, above))


def cluster_index(clusters: Sequence[Any] | None, n: int) -> np.ndarray:
    """(n,) int cluster of each item: ``clusters`` mapped to 0..C-1 in order of appearance, or one per item."""
    if clusters is None:
        return np.arange(n)
    if len(clusters) != n:
        raise ValueError(f"{len(clusters)} cluster labels for {n} items")
    codes: dict[Any, int] = {}
    return np.array([codes.setdefault(c, len(codes)) for c in clusters], dtype=np.int64)


def cluster_sums(values: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(C,) sums and (C,) counts of ``values`` per cluster."""
    size = int(index.max()) + 1 if len(index) else 0
    return np.bincount(index, values, size), np.bincount(index, minlength=size).astype(np.float64)


def resampled_ratio(sums: np.ndarray, counts: np.ndarray, n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """(n_bootstrap,) ratios sum/count over resamples of the clusters (rows of (B, C) indices)."""
    idx = rng.integers(0, len(sums), size=(n_bootstrap, len(sums)))  # (B, C)
    return sums[idx].sum(1) / counts[idx].sum(1)


def cluster_bootstrap_mean(
    values: Any, clusters: Sequence[Any] | None = None, n_bootstrap: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Item-weighted mean of ``values`` (booleans: a rate) with a 95 % interval resampling whole clusters.

    ``clusters[i]``: the document of item i (None: every item its own cluster, the ordinary bootstrap). Returns
    ``mean``, ``ci_low``, ``ci_high`` (None with ``n_bootstrap=0`` or no items), ``n_items``, ``n_clusters``.
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    index = cluster_index(clusters, len(v))
    out: dict[str, Any] = {
        "mean": None,
        "ci_low": None,
        "ci_high": None,
        "n_items": int(len(v)),
        "n_clusters": int(len(np.unique(index))),
    }
    if not len(v):
        return out
    out["mean"] = float(v.mean())
    if n_bootstrap > 0:
        sums, counts = cluster_sums(v, index)
        keep = counts > 0
        samples = resampled_ratio(sums[keep], counts[keep], n_bootstrap, np.random.default_rng(seed))
        out["ci_low"], out["ci_high"] = percentiles(samples)
    return out


def paired_bootstrap(
    a: Any, b: Any, clusters: Sequence[Any] | None = None, n_bootstrap: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Mean of ``a - b`` over paired items (two arms on the same windows) with a 95 % interval and a two-sided
    bootstrap p-value; ``clusters`` (the document of each item) resamples documents instead of items.

    Returns ``a``, ``b``, ``diff``, ``ci_low``, ``ci_high``, ``p_value`` (None with ``n_bootstrap=0``), ``n_items``,
    ``n_clusters``.
    """
    x, y = np.asarray(a, dtype=np.float64).reshape(-1), np.asarray(b, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"paired values of different lengths: {len(x)} and {len(y)}")
    d = cluster_bootstrap_mean(x - y, clusters, n_bootstrap, seed)
    out = {
        "a": float(x.mean()) if len(x) else None,
        "b": float(y.mean()) if len(y) else None,
        "diff": d["mean"],
        "ci_low": d["ci_low"],
        "ci_high": d["ci_high"],
        "p_value": None,
        "n_items": d["n_items"],
        "n_clusters": d["n_clusters"],
    }
    if n_bootstrap > 0 and len(x):
        sums, counts = cluster_sums(x - y, cluster_index(clusters, len(x)))
        keep = counts > 0
        out["p_value"] = bootstrap_p(
            resampled_ratio(sums[keep], counts[keep], n_bootstrap, np.random.default_rng(seed))
        )
    return out


def paired_difference(
    arm: Sequence[Any], control: Sequence[Any], positions: Sequence[Any], n_bootstrap: int = 1000, seed: int = 0
) -> dict[str, float | int | None]:
    """Token-weighted mean of a per-token measure of two models over the same ``positions`` of the same documents,
    and arm - control with a 95 % bootstrap CI that resamples documents (a document's tokens stay together).

    ``arm[i]`` / ``control[i]`` / ``positions[i]``: (L_i - 1,) per target t = 1..L_i-1 (e.g. top-1 correct, or
    -log p); documents without a chosen position are left out. Returns ``arm``, ``control``, ``diff``,
    ``diff_ci_low``, ``diff_ci_high`` (None without positions or with ``n_bootstrap=0``), ``n_documents`` and
    ``n_positions``.
    """
    a, n = document_sums(arm, positions)  # (D,) per-document sums and position counts
    c, _ = document_sums(control, positions)
    some = n > 0
    a, c, n = a[some], c[some], n[some]
    out: dict[str, float | int | None] = {
        "arm": None,
        "control": None,
        "diff": None,
        "diff_ci_low": None,
        "diff_ci_high": None,
        "n_documents": int(len(n)),
        "n_positions": int(n.sum()),
    }
    if not len(n):
        return out
    out.update(arm=float(a.sum() / n.sum()), control=float(c.sum() / n.sum()), diff=float((a - c).sum() / n.sum()))
    if n_bootstrap > 0:
        samples = resampled_ratio(a - c, n, n_bootstrap, np.random.default_rng(seed))
        out["diff_ci_low"], out["diff_ci_high"] = percentiles(samples)
    return out


def document_sums(values: Sequence[Any], positions: Sequence[Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per document, the sum of a per-token measure over the chosen positions and their count: ((D,), (D,)).

    ``values[i]`` / ``positions[i]``: (L_i,) per token of document i (``positions`` bool; None = every token).
    """
    sums, counts = [], []
    for i, v in enumerate(values):
        v = np.asarray(v, dtype=np.float64).reshape(-1)
        keep = np.ones(len(v), bool) if positions is None else np.asarray(positions[i], dtype=bool).reshape(-1)
        sums.append(float(v[keep].sum()))
        counts.append(float(keep.sum()))
    return np.array(sums, dtype=np.float64), np.array(counts, dtype=np.float64)


def difference_in_differences(
    arm_members: Sequence[Any],
    control_members: Sequence[Any],
    member_positions: Sequence[Any],
    arm_heldout: Sequence[Any],
    control_heldout: Sequence[Any],
    heldout_positions: Sequence[Any] | None = None,
    n_bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """(arm - control) on the chosen member positions minus (arm - control) on held-out text.

    Per-token measures (e.g. top-1 correct, or -log p) of an arm and of the control on the same documents:
    ``arm_members[i]`` / ``control_members[i]`` / ``member_positions[i]`` (L_i,) for member document i (positions:
    e.g. where the Goldfish mask drops), ``arm_heldout[j]`` / ``control_heldout[j]`` (L_j,) for held-out document
    j (``heldout_positions``: None = every token). Each difference is token-weighted over its documents; the
    95 % interval and the two-sided bootstrap p-value resample member documents and held-out documents
    separately. Returns ``member_diff``, ``heldout_diff``, ``did`` (their difference), ``ci_low``, ``ci_high``,
    ``p_value``, ``n_member_documents``, ``n_member_positions``, ``n_heldout_documents``, ``n_heldout_positions``.
    """
    a_m, n_m = document_sums(arm_members, member_positions)
    c_m, _ = document_sums(control_members, member_positions)
    a_h, n_h = document_sums(arm_heldout, heldout_positions)
    c_h, _ = document_sums(control_heldout, heldout_positions)
    dm, dh = (a_m - c_m)[n_m > 0], (a_h - c_h)[n_h > 0]
    n_m, n_h = n_m[n_m > 0], n_h[n_h > 0]
    out: dict[str, Any] = {
        "member_diff": None,
        "heldout_diff": None,
        "did": None,
        "ci_low": None,
        "ci_high": None,
        "p_value": None,
        "n_member_documents": int(len(n_m)),
        "n_member_positions": int(n_m.sum()),
        "n_heldout_documents": int(len(n_h)),
        "n_heldout_positions": int(n_h.sum()),
    }
    if not len(n_m) or not len(n_h):
        return out
    member_diff, heldout_diff = float(dm.sum() / n_m.sum()), float(dh.sum() / n_h.sum())
    out.update(member_diff=member_diff, heldout_diff=heldout_diff, did=member_diff - heldout_diff)
    if n_bootstrap > 0:
        rng = np.random.default_rng(seed)
        samples = resampled_ratio(dm, n_m, n_bootstrap, rng) - resampled_ratio(dh, n_h, n_bootstrap, rng)
        out["ci_low"], out["ci_high"] = percentiles(samples)
        out["p_value"] = bootstrap_p(samples)
    return out
