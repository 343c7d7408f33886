"""Does a smaller model's memorised set predict a larger one's (Biderman et al. 2023, across a size sweep), and does it
beat the trivial predictor? Per arm, each from-scratch size against the largest, on the same targets (each seed's
split: windows matched by document id), pooled over seeds: precision and recall of the smaller size's exact-match
set for the largest's, beside the repetition rule "memorised iff >= t copies" with t fitted on the smaller size's
set (``goldfish.eval.stats.threshold_rule``), both with Wilson intervals (``goldfish.eval.stats.set_prediction``)."""

from __future__ import annotations

import math
from collections import defaultdict

from goldfish.eval.stats import set_prediction, threshold_rule
from goldfish.eval.tables import markdown_section, markdown_table

from ..grid import CONTROL
from ..scaling import SIZE_AXIS, first_prefix_windows
from ..summary import Study
from .size import tuning_only


def _memorised(plan) -> dict:
    """``{document id: (repetitions, exact match)}`` of a cell's member windows at its first prefix length."""
    return {
        w.get("doc_id"): (float(w.get("repetitions") or 0), bool(w.get("exact_match")))
        for w in first_prefix_windows(plan)
    }


def compute(study: Study) -> dict:
    """``size_prediction``: per arm and smaller size, ``{arm, size, largest, splits, model: set_prediction,
    rule: {min_repetitions per split, ...set_prediction}}``; empty without a size axis or two sizes."""
    if SIZE_AXIS not in study.axes:
        return {"size_prediction": []}
    by: dict[str, dict[str, dict[str, tuple]]] = defaultdict(lambda: defaultdict(dict))  # arm -> split -> size
    params: dict[str, int] = {}
    for plan, cell in zip(study.done, study.cells):
        if cell.arm == CONTROL or cell.start_model or not cell.params or tuning_only(cell, study.tune):
            continue
        size = str(cell.values.get(SIZE_AXIS))
        params[size] = cell.params
        by[cell.arm][str(plan.data_dir)][size] = _memorised(plan)
    out = []
    for arm, splits in by.items():
        sizes = sorted({s for per in splits.values() for s in per}, key=lambda s: params[s])
        if len(sizes) < 2:
            continue
        largest = sizes[-1]
        for size in sizes[:-1]:
            predicted, rule, actual, thresholds = [], [], [], []
            for per in splits.values():
                if size not in per or largest not in per:
                    continue
                small, big = per[size], per[largest]
                ids = [i for i in big if i in small]
                t = threshold_rule([small[i][0] for i in ids], [small[i][1] for i in ids])
                thresholds.append(None if math.isinf(t) else t)
                predicted += [small[i][1] for i in ids]
                rule += [small[i][0] >= t for i in ids]
                actual += [big[i][1] for i in ids]
            if actual:
                out.append(
                    {
                        "arm": arm,
                        "size": size,
                        "largest": largest,
                        "splits": len(thresholds),
                        "model": set_prediction(predicted, actual),
                        "rule": {"min_repetitions": thresholds, **set_prediction(rule, actual)},
                    }
                )
    return {"size_prediction": out}


def _rate(r: dict) -> str:
    if r.get("rate") is None:
        return "-"
    return f"{100 * r['rate']:.0f} % [{100 * r['low']:.0f}, {100 * r['high']:.0f}] ({r['k']}/{r['n']})"


def render(results: dict) -> str:
    entries = results.get("size_prediction") or []
    if not entries:
        return ""
    rows = [
        [
            e["arm"],
            f"{e['size']} -> {e['largest']}",
            f"{e['model']['predicted']} / {e['model']['actual']}",
            _rate(e["model"]["precision"]),
            _rate(e["model"]["recall"]),
            ", ".join("none" if t is None else f">= x{t:g}" for t in e["rule"]["min_repetitions"]),
            _rate(e["rule"]["precision"]),
            _rate(e["rule"]["recall"]),
        ]
        for e in entries
    ]
    return markdown_section(
        "Does a smaller model predict what a larger one memorises? (Biderman et al. 2023)",
        markdown_table(
            [
                "arm",
                "size -> largest",
                "memorised: smaller / largest",
                "precision",
                "recall",
                "rule fitted on the smaller (per seed): memorised iff copies",
                "rule precision",
                "rule recall",
            ],
            rows,
        ),
        "The same targets in each seed (windows matched by document id), pooled over seeds; Wilson 95 % intervals. "
        "The rule is the trivial predictor, fitted on the smaller model's own memorised set: the smaller model "
        "predicts the larger one's memorisation beyond the repetition count only where it beats the rule.",
    )
