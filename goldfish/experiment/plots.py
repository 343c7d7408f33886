"""Study plots: adapters from cell summaries to the drawing primitives of :mod:`goldfish.eval.plots`.

Nothing is drawn here: every figure (bars, ROC, metric-vs-x with its log-linear fit, loss curves) is a primitive of
``goldfish.eval.plots``, so the look lives in one place; this module only picks the values (and their intervals,
from :mod:`goldfish.eval.stats`) and skips empty plots.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from goldfish.eval import plots
from goldfish.eval.metrics import METRICS
from goldfish.eval.stats import cluster_bootstrap_mean

from .inference import rate_interval
from .summary import CellSummary

N_BOOTSTRAP = 1000


def bar_chart(
    values: dict[str, float | None],
    title: str,
    ylabel: str,
    path: Path,
    errors: dict[str, tuple[float | None, float | None]] | None = None,
    by_construction: tuple[str, ...] = (),
) -> Path | None:
    """One bar per arm/cell (cells without a value are left out); ``errors``: optional (low, high) per bar;
    ``by_construction``: the bars whose value is fixed by the method, not measured (marked in the figure)."""
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return None
    return plots.bar_chart(
        values,
        title=title,
        ylabel=ylabel,
        path=path,
        errors=errors,
        by_construction=by_construction,
        xlabel="arm / cell",
    )


def roc_curves(curves: dict[str, dict], attack: str, path: Path) -> Path | None:
    """ROC of the headline membership attack (named by ``attack``), one curve per arm/cell (``{"fpr", "tpr",
    "auc"}`` each)."""
    curves = {k: v for k, v in curves.items() if v.get("fpr")}
    if not curves:
        return None
    plots.roc_plot(
        {k: (v["fpr"], v["tpr"], v.get("auc")) for k, v in curves.items()},
        title=f"membership inference ({attack} attack)",
        path=path,
    )
    return Path(path)


def loss_curves(curves: dict[str, list[dict]], path: Path) -> Path | None:
    """Training loss on kept vs dropped tokens per arm (runs without metrics are left out)."""
    curves = {k: v for k, v in curves.items() if v}
    return plots.loss_curves(curves, path) if curves else None


WindowPoint = tuple[str, float, float, Any]  # (series, x, the window's value, its cluster: cell and document)


def _series(points: list[WindowPoint], rate: bool) -> tuple[dict, dict]:
    """Window-level points -> per series sorted x, the mean at each x (pooled over cells, e.g. seeds) and its 95 %
    interval resampling documents (``goldfish.eval.stats.cluster_bootstrap_mean``; for a rate of 0 or 1, where that
    degenerates, Wilson's over documents: ``goldfish.experiment.inference.rate_interval``) as ``(series, bands)``."""
    acc: dict[str, dict[float, tuple[list, list]]] = defaultdict(lambda: defaultdict(lambda: ([], [])))
    for name, x, y, cluster in points:
        if x is not None and y is not None:
            acc[name][x][0].append(float(y))
            acc[name][x][1].append(cluster)
    series, bands = {}, {}
    for name, by_x in acc.items():
        xs = sorted(by_x)
        found = [cluster_bootstrap_mean(by_x[x][0], by_x[x][1], N_BOOTSTRAP, 0) for x in xs]
        if rate:
            found = [{**f, **rate_interval(f)} for f in found]
        series[name] = (xs, [f["mean"] for f in found])
        bands[name] = ([f["ci_low"] for f in found], [f["ci_high"] for f in found])
    return series, bands


def metric_vs_x(
    cells: list[CellSummary], windows: list[list[dict]], metric: str, metric_name: str, out: Path
) -> list[Path]:
    """Memorisation vs model size (overall and of repetition-1 documents), vs repetitions and vs prefix length, each
    point the mean over the member windows of the cells it pools (``windows[i]``: cell i's) with a 95 % interval
    band over documents.

    The size plots draw no fit line: a fit over sizes on the floor says nothing, so the size effect lives in the
    report (the joint model of :mod:`goldfish.experiment.scaling`)."""
    key = next(m.name for m in METRICS.values() if m.summary_key == metric)  # the window's field
    rate = METRICS[key].aggregation == "rate"
    label = f"{metric_name} (95 % CI over documents)"
    paths = []
    sizes = {c.params for c in cells if c.params}

    def points(name_of, x_of) -> list[WindowPoint]:
        return [
            (name_of(c), x_of(c, w), w[key], (c.cell, w.get("doc_id")))
            for c, ws in zip(cells, windows)
            for w in ws
            if w.get(key) is not None and x_of(c, w) is not None
        ]

    if len(sizes) > 1:
        series, bands = _series(points(lambda c: c.arm, lambda c, w: c.params), rate)
        paths.append(
            plots.line_plot(
                series,
                title=f"{metric_name} vs model size",
                xlabel="parameters",
                ylabel=label,
                path=out / f"{metric}_vs_size.png",
                logx=True,
                fit=False,
                bands=bands,
            )
        )
        reps = {w.get("repetitions") for ws in windows for w in ws}
        if 1 in reps and len(reps) > 1:
            series, bands = _series(
                points(lambda c: c.arm, lambda c, w: c.params if w.get("repetitions") == 1 else None), rate
            )
            paths.append(
                plots.line_plot(
                    series,
                    title=f"{metric_name} of repetition-1 documents vs model size",
                    xlabel="parameters",
                    ylabel=label,
                    path=out / f"{metric}_rep1_vs_size.png",
                    logx=True,
                    fit=False,
                    bands=bands,
                )
            )
    for by, xlabel, logx in (("repetitions", "repetitions in training", True), ("prefix_len", "prefix length", False)):
        # positive values only: prefix length -1 ("all") is a placement, not a length; repetitions 0 are nonmembers
        values = {w.get(by) for ws in windows for w in ws if (w.get(by) or 0) > 0}
        if len(values) < 2:
            continue
        series, bands = _series(
            points(
                lambda c: c.arm if not c.params or len(sizes) < 2 else f"{c.arm} {c.params / 1e6:.1f}M",
                lambda c, w: w.get(by) if (w.get(by) or 0) > 0 else None,
            ),
            rate,
        )
        paths.append(
            plots.line_plot(
                series,
                title=f"{metric_name} vs {xlabel}",
                xlabel=xlabel,
                ylabel=label,
                path=out / f"{metric}_vs_{by}.png",
                logx=logx,
                fit=logx,
                bands=bands,
            )
        )
    return [Path(p) for p in paths if p is not None]


def _log2(value: float | None) -> float | None:
    return None if value is None or value <= 0 else math.log2(value)


def threshold_plots(results: dict, out: Path) -> list[Path]:
    """E50 vs parameters (log2 of the E50 the joint model implies per size, per arm, with its cluster-bootstrap band)
    and canary exposure vs repetitions (one line per arm and size, bootstrap band over canaries), from the
    ``scaling`` block (``goldfish.experiment.scaling``); empty without them."""
    scaling = results.get("scaling") or {}
    rows = scaling.get("rows") or []
    paths = []
    series: dict[str, tuple[list[float], list[float]]] = {}
    bands: dict[str, tuple[list, list]] = {}
    for model in scaling.get("size_model") or []:
        if "why_not" in model:
            continue
        sizes = sorted(model["sizes"].items(), key=lambda kv: kv[1])
        found = [model["derived"].get(f"e50_{s}") or {} for s, _ in sizes]
        series[model["arm"]] = ([p for _, p in sizes], [_log2(f.get("value")) for f in found])
        bands[model["arm"]] = ([_log2(f.get("ci_low")) for f in found], [_log2(f.get("ci_high")) for f in found])
    if series:
        paths.append(
            plots.line_plot(
                series,
                title="exposure threshold E50 vs model size (the joint model)",
                xlabel="parameters",
                ylabel="log2 E50 (95 % cluster-bootstrap band)",
                path=out / "e50_vs_size.png",
                logx=True,
                fit=False,
                bands=bands,
            )
        )
    canary_rows = [r for r in rows if r.get("canaries")]
    if canary_rows:
        series, bands = {}, {}
        for r in canary_rows:
            strata = sorted(r["canaries"]["strata"].items(), key=lambda kv: int(kv[0]))
            name = f"{r['arm']} {r['size']}"
            series[name] = ([int(k) for k, _ in strata], [v["mean"] for _, v in strata])
            bands[name] = ([v["low"] for _, v in strata], [v["high"] for _, v in strata])
        paths.append(
            plots.line_plot(
                series,
                title="canary exposure vs repetitions",
                xlabel="repetitions in training",
                ylabel="exposure (bits)",
                path=out / "canary_exposure.png",
                logx=True,
                fit=False,
                bands=bands,
            )
        )
    return [Path(p) for p in paths]
