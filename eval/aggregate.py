"""Aggregation of per-window extraction results: the ``summary`` section and generic grouping (the intervals are
:mod:`goldfish.eval.stats`'s).

Windows are plain dicts following the results.json schema (see ``eval/run.py``). Every row of the summary has one
column per registered metric (``goldfish.eval.metrics.METRICS``), reduced by the metric's aggregation with its 95 %
interval; a metric missing from a window, or ``None`` there, is left out of that metric's value rather than counted
as zero, so partial results still summarise.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable, Sequence

from goldfish.errors import UserError

from .metrics import METRICS, Metric
from .stats import mean_interval, wilson_interval

# the per-document measures of the "partial memorization" ranking (metric names), best first by the first two
DOCUMENT_METRICS = ("onepass_token_acc", "suffix_logprob", "np_extraction", "token_match", "rouge_l", "exact_match")


def _mean(values: Iterable[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def aggregate_metric(metric: Metric, values: Sequence[Any]) -> tuple[float | None, float | None, float | None]:
    """(value, 95 % low, 95 % high) of one metric over windows (None entries left out): ``rate`` -> the fraction of
    true verdicts with a Wilson interval; ``mean`` -> the mean with a normal interval clipped to ``metric.bounds``."""
    values = [v for v in values if v is not None]
    if metric.aggregation == "rate":
        return (_mean(map(bool, values)), *wilson_interval(sum(map(bool, values)), len(values)))
    return (_mean(values), *mean_interval(values, metric.bounds))


def ci_keys(metric: Metric) -> tuple[str, str]:
    """The summary names of a metric's interval: ``<summary key>_ci_low/_high`` (exact match keeps its original
    ``exact_match_ci_low/_high``)."""
    stem = "exact_match" if metric.name == "exact_match" else metric.summary_key
    return f"{stem}_ci_low", f"{stem}_ci_high"


def summarize_group(windows: Sequence[dict]) -> dict[str, Any]:
    """One row of the summary: every registered metric (:data:`goldfish.eval.metrics.METRICS`; an ``optional`` one
    only where some window carries it) aggregated over one group of windows, with its 95 % interval."""
    out: dict[str, Any] = {"n_windows": len(windows)}
    for metric in METRICS.values():
        values = [w.get(metric.name) for w in windows]
        if metric.optional and all(v is None for v in values):
            continue
        low, high = ci_keys(metric)
        out[metric.summary_key], out[low], out[high] = aggregate_metric(metric, values)
    both = [w for w in windows if w.get("onepass_exact") is not None and w.get("exact_match") is not None]
    # one-pass (teacher-forced argmax) and greedy decoding agree by construction; a disagreement flags a decoding bug
    out["onepass_disagreements"] = sum(bool(w["onepass_exact"]) != bool(w["exact_match"]) for w in both)
    return out


def _sort_key(value: Any) -> tuple:
    """Numbers in numeric order, then strings, then None (unknown) last."""
    if value is None:
        return (2, 0, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value, "")
    return (1, 0, str(value))


def _stratify(windows: Sequence[dict], field: str) -> dict[str, dict]:
    groups: dict[Any, list[dict]] = defaultdict(list)
    for w in windows:
        groups[w.get(field)].append(w)
    return {("unknown" if k is None else str(k)): summarize_group(groups[k]) for k in sorted(groups, key=_sort_key)}


def rank_documents(windows: Sequence[dict]) -> list[dict]:
    """Per document: its windows' mean :data:`DOCUMENT_METRICS`, ranked by one-pass top-1 accuracy, then suffix
    log-prob (best first) -- partial memorisation that exact match (0 or 1 per window) does not show."""
    docs: dict[tuple, list[dict]] = defaultdict(list)
    for w in windows:
        docs[(w.get("split"), w.get("doc_id"))].append(w)
    rows = []
    for (split, doc_id), ws in docs.items():
        row = {
            "doc_id": doc_id,
            "title": ws[0].get("title"),
            "split": split,
            "group": ws[0].get("group"),
            "repetitions": ws[0].get("repetitions"),
            "n_windows": len(ws),
        }
        for name in DOCUMENT_METRICS:
            row[METRICS[name].summary_key] = _mean(w.get(name) for w in ws)
        rows.append(row)
    rows.sort(
        key=lambda r: tuple(_best_first(METRICS[name], r[METRICS[name].summary_key]) for name in DOCUMENT_METRICS[:2])
    )
    return rows


def _best_first(metric: Metric, value: float | None) -> float:
    """Sort key putting the best value of ``metric`` (its direction) first and unknown values last."""
    if value is None:
        return math.inf
    return -value if metric.higher_is_better else value


def metric_directions() -> dict[str, dict[str, Any]]:
    """The ``summary.metrics`` record: per summary key, the metric it aggregates, its aggregation and direction."""
    return {
        m.summary_key: {"metric": m.name, "aggregation": m.aggregation, "higher_is_better": m.higher_is_better}
        for m in METRICS.values()
    }


def summarize(windows: list[dict]) -> dict:
    """The results.json ``summary`` (eval/SCHEMA.md): ``metrics`` (each column's aggregation and direction),
    ``overall`` (all windows pooled), ``by_window`` (one row per placement -- the headlines), ``by_prefix_len``,
    ``by_repetitions`` (None -> ``"unknown"``), ``by_split``, ``by_split_window`` (per split, one row per placement:
    the members' headlines, never pooled with nonmembers'), ``by_group`` (empty when no document has a group) and
    ``documents`` (the partial-memorisation ranking)."""
    splits: dict[str, list[dict]] = defaultdict(list)
    for w in windows:
        splits[w.get("split") or "members"].append(w)
    return {
        "metrics": metric_directions(),
        "overall": summarize_group(windows),
        "by_window": _stratify(windows, "window"),
        "by_prefix_len": _stratify(windows, "prefix_len"),
        "by_repetitions": _stratify(windows, "repetitions"),
        "by_split": _stratify(windows, "split"),
        "by_split_window": {split: _stratify(own, "window") for split, own in splits.items()},
        "by_group": _stratify(windows, "group") if any(w.get("group") is not None for w in windows) else {},
        "documents": rank_documents(windows),
    }


def group_rates(rows: list[dict], by: str | tuple[str, ...], metric: str) -> dict:
    """Mean of ``metric`` (a rate for booleans) per group of ``rows``, rows without the metric left out.

    ``by`` names one field (keys are its values) or several (keys are tuples of values); keys are sorted with
    numbers numerically and ``None`` last. Example: ``group_rates(windows, ("prefix_len", "repetitions"),
    "exact_match") -> {(32, 1): 0.0, (32, 4): 0.25, ...}``.
    """
    fields = (by,) if isinstance(by, str) else tuple(by)
    if not fields:
        raise UserError("group_rates needs at least one field to group by")
    groups: dict[Any, list[float]] = defaultdict(list)
    for row in rows:
        value = row.get(metric)
        if value is None:
            continue
        key = tuple(row.get(f) for f in fields)
        groups[key if len(fields) > 1 else key[0]].append(float(value))
    order = sorted(groups, key=lambda k: tuple(_sort_key(v) for v in (k if len(fields) > 1 else (k,))))
    return {k: sum(groups[k]) / len(groups[k]) for k in order}
