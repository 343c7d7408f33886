"""Study plots: adapters from cell summaries to the drawing primitives of :mod:`goldfish.eval.plots`.

Nothing is drawn here: every figure (bars, ROC, metric-vs-x with its log-linear fit, loss curves) is a primitive of
``goldfish.eval.plots``, so the look lives in one place; this module only picks the values and skips empty plots.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from goldfish.eval import plots

from .summary import CellSummary


def bar_chart(values: dict[str, float | None], title: str, ylabel: str, path: Path,
              errors: dict[str, tuple[float | None, float | None]] | None = None) -> Path | None:
    """One bar per arm/cell (cells without a value are left out); ``errors``: optional (low, high) per bar."""
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return None
    return plots.bar_chart(values, title=title, ylabel=ylabel, path=path, errors=errors)


def roc_curves(curves: dict[str, dict], attack: str, path: Path) -> Path | None:
    """ROC of the headline membership attack (named by ``attack``), one curve per arm/cell (``{"fpr", "tpr",
    "auc"}`` each)."""
    curves = {k: v for k, v in curves.items() if v.get("fpr")}
    if not curves:
        return None
    plots.roc_plot({k: (v["fpr"], v["tpr"], v.get("auc")) for k, v in curves.items()},
                   title=f"membership inference ({attack} attack)", path=path)
    return Path(path)


def loss_curves(curves: dict[str, list[dict]], path: Path) -> Path | None:
    """Training loss on kept vs dropped tokens per arm (runs without metrics are left out)."""
    curves = {k: v for k, v in curves.items() if v}
    return plots.loss_curves(curves, path) if curves else None


def _series(points: list[tuple[str, float, float]]) -> dict[str, tuple[list[float], list[float]]]:
    """(series, x, y) points -> per series sorted x and the mean y at each x (e.g. averaged over seeds)."""
    acc: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for name, x, y in points:
        if x is not None and y is not None:
            acc[name][x].append(y)
    return {name: (sorted(xs), [sum(xs[x]) / len(xs[x]) for x in sorted(xs)]) for name, xs in acc.items()}


def _stratum_mean(strata: list[dict], by: str, metric: str) -> dict[Any, float]:
    acc: dict[Any, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for s in strata:
        if s.get(metric) is not None and s[by] is not None:
            acc[s[by]][0] += s["n_windows"] * s[metric]
            acc[s[by]][1] += s["n_windows"]
    return {k: v[0] / v[1] for k, v in acc.items() if v[1]}


def metric_vs_x(cells: list[CellSummary], metric: str, metric_name: str, out: Path) -> list[Path]:
    """Memorisation vs model size (overall and of repetition-1 documents), vs repetitions and vs prefix length.

    The size plots draw no fit line: a fit over sizes on the floor says nothing, so the log-linear fit lives in the
    report's size table, over the sizes off the floor only (:mod:`goldfish.experiment.scaling`)."""
    paths = []
    sizes = {c.params for c in cells if c.params}
    if len(sizes) > 1:
        series = _series([(c.arm, c.params, getattr(c, metric)) for c in cells])
        paths.append(plots.line_plot(series, title=f"{metric_name} vs model size", xlabel="parameters",
                                     ylabel=metric_name, path=out / f"{metric}_vs_size.png", logx=True, fit=False))
        reps = {s["repetitions"] for c in cells for s in c.strata}
        if 1 in reps and len(reps) > 1:
            single = _series([(c.arm, c.params, _stratum_mean(c.strata, "repetitions", metric).get(1))
                              for c in cells])
            paths.append(plots.line_plot(single, title=f"{metric_name} of repetition-1 documents vs model size",
                                         xlabel="parameters", ylabel=metric_name,
                                         path=out / f"{metric}_rep1_vs_size.png", logx=True, fit=False))
    for by, xlabel, logx in (("repetitions", "repetitions in training", True), ("prefix_len", "prefix length", False)):
        # positive values only: prefix length -1 ("all") is a placement, not a length; repetitions 0 are nonmembers
        values = {s[by] for c in cells for s in c.strata if s[by] is not None and s[by] > 0}
        if len(values) < 2:
            continue
        points = []
        for c in cells:
            name = c.arm if not c.params or len(sizes) < 2 else f"{c.arm} {c.params / 1e6:.1f}M"
            points += [(name, x, y) for x, y in _stratum_mean(c.strata, by, metric).items() if x > 0]
        paths.append(plots.line_plot(_series(points), title=f"{metric_name} vs {xlabel}", xlabel=xlabel,
                                     ylabel=metric_name, path=out / f"{metric}_vs_{by}.png", logx=logx, fit=logx))
    return [Path(p) for p in paths if p is not None]


def _log2(value: float | None) -> float | None:
    return None if value is None or value <= 0 else math.log2(value)


def threshold_plots(results: dict, out: Path) -> list[Path]:
    """E50 vs parameters (log2 E50 per arm, interior estimates, CI band) and canary exposure vs repetitions (one
    line per arm and size), from the ``scaling`` block (``goldfish.experiment.scaling``); empty without them."""
    rows = (results.get("scaling") or {}).get("rows") or []
    paths = []
    e50 = [r for r in rows if (r.get("e50") or {}).get("status") == "interior" and r.get("params")]
    if e50:
        series: dict[str, tuple[list[float], list[float]]] = {}
        bands: dict[str, tuple[list, list]] = {}
        for r in sorted(e50, key=lambda r: r["params"]):
            name = r["arm"] + (" (pretrained)" if r.get("pretrained") else "")
            xs, ys = series.setdefault(name, ([], []))
            lows, highs = bands.setdefault(name, ([], []))
            xs.append(r["params"])
            ys.append(_log2(r["e50"]["e50"]))
            lows.append(_log2(r["e50"]["low"]))
            highs.append(_log2(r["e50"]["high"]))
        paths.append(plots.line_plot(series, title="exposure threshold E50 vs model size", xlabel="parameters",
                                     ylabel="log2 E50 (exposures to extract half)", path=out / "e50_vs_size.png",
                                     logx=True, fit=False, bands=bands))
    canary_rows = [r for r in rows if r.get("canaries")]
    if canary_rows:
        series, bands = {}, {}
        for r in canary_rows:
            strata = sorted(r["canaries"]["strata"].items(), key=lambda kv: int(kv[0]))
            name = f"{r['arm']} {r['size']}"
            series[name] = ([int(k) for k, _ in strata], [v["mean"] for _, v in strata])
            bands[name] = ([v["low"] for _, v in strata], [v["high"] for _, v in strata])
        paths.append(plots.line_plot(series, title="canary exposure vs repetitions", xlabel="repetitions in "
                                     "training", ylabel="exposure (bits)", path=out / "canary_exposure.png",
                                     logx=True, fit=False, bands=bands))
    return [Path(p) for p in paths]
