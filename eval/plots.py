"""Plot primitives shared by the per-run report and study comparisons (PNG and SVG, matplotlib Agg).

Figures are built with the object-oriented ``matplotlib.figure.Figure`` API, which renders through Agg without
touching pyplot's global backend state (safe inside other programs and headless machines). Each figure is
rendered in memory and written atomically, so an interrupted run never leaves a torn image: a PNG for the reports
and, beside it, the same figure as SVG (a vector format for papers).

One colour per arm in every figure (:func:`colors_for`): ``standard``, ``goldfish`` and ``control`` (a label's first
word) have fixed colours, any other name a colour chosen from its name, so a series keeps its colour from one figure
to the next whatever else the figure shows.
"""

from __future__ import annotations

import io
import logging
import os
import re
import zlib
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from goldfish.io import atomic_write_bytes

from .stats import loglinear_fit, predict

Series = Mapping[str, tuple[Sequence[float], Sequence[float]]]

# "findfont: Font family [...] not found. Falling back to DejaVu Sans." is matplotlib's fallback working as meant
# on a machine without the TeX/STIX fonts; it is not something a user can act on, so keep it out of run logs
logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)


def short_number(value: float, _pos: object = None) -> str:
    """3 significant digits with an SI suffix: 1530000 -> "1.53M", 7e9 -> "7B", 32 -> "32" (tick labels of sizes,
    repetitions)."""
    for factor, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


# an arm (a label's first word) -> its colour in every figure; grey for the untouched control
ARM_COLORS = {"standard": "C0", "goldfish": "C1", "control": "C7"}
PALETTE = tuple(f"C{i}" for i in (2, 3, 4, 5, 6, 8, 9))  # the colours left for other names
BY_CONSTRUCTION = "by construction"


def _arm(name: str) -> str:
    return re.split(r"[\s:(=,]", str(name).strip().lower(), maxsplit=1)[0]


def colors_for(names: Sequence[str]) -> dict[str, str]:
    """A colour per name: an arm's fixed colour (:data:`ARM_COLORS`), else one picked from the name's crc32 (the same
    in every figure and process), moved to the next free colour only when two names of one figure collide."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        fixed = ARM_COLORS.get(_arm(name))
        if fixed is not None and fixed not in used:
            out[name] = fixed
            used.add(fixed)
    for name in names:
        if name in out:
            continue
        start = zlib.crc32(str(name).encode("utf-8")) % len(PALETTE)
        free = [PALETTE[(start + j) % len(PALETTE)] for j in range(len(PALETTE))]
        out[name] = next((c for c in free if c not in used), free[0])
        used.add(out[name])
    return out


def save_figure(fig: Figure, path: str | os.PathLike) -> Path:
    """Save ``fig`` as PNG to ``path`` and as SVG beside it (``.svg``), each atomically (rendered in memory, then
    :func:`goldfish.io.atomic_write_bytes`); returns the PNG's path."""
    path = Path(path)
    fig.tight_layout()
    for fmt, target in (("png", path), ("svg", path.with_suffix(".svg"))):
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=120, metadata={"Date": None} if fmt == "svg" else None)
        atomic_write_bytes(target, buf.getvalue())
    return path


def bar_chart(
    values: Mapping[str, float],
    title: str,
    ylabel: str,
    path: str | os.PathLike,
    *,
    errors: Mapping[str, tuple[float | None, float | None]] | None = None,
    by_construction: Sequence[str] = (),
    xlabel: str = "arm",
) -> Path:
    """One bar per key (e.g. per arm), value printed on top; ``errors`` maps a key to a (low, high) interval. The y
    axis starts at 0 when no value or interval is negative (all-zero rates do not get a negative axis). A key in
    ``by_construction`` (e.g. the control's AUC of its own reference attack, 0.5 whatever the data) is hatched and
    its value labelled "by construction": not a measurement."""
    names = list(values)
    heights = [float(values[k]) for k in names]
    fig = Figure(figsize=(max(4.0, 1.1 * len(names) + 2), 3.8))
    ax = fig.add_subplot()
    yerr = None
    if errors:
        yerr = np.zeros((2, len(names)))  # (2, n) distances below / above each bar; 0 where no interval is known
        for j, (k, h) in enumerate(zip(names, heights)):
            low, high = errors.get(k, (None, None))
            yerr[:, j] = (h - low if low is not None else 0.0, high - h if high is not None else 0.0)
    colors = colors_for(names)
    bars = ax.bar(names, heights, yerr=yerr, capsize=4 if yerr is not None else 0, color=[colors[k] for k in names])
    for bar, k in zip(bars, names):
        if k in by_construction:
            bar.set_hatch("//")
            bar.set_alpha(0.5)
    ax.bar_label(
        bars,
        labels=[
            f"{h:.3g}" + (f"\n({BY_CONSTRUCTION})" if k in by_construction else "") for k, h in zip(names, heights)
        ],
        padding=2,
        fontsize=8,
    )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.margins(y=0.15)
    top = max([*heights, *([float((yerr[1] + heights).max())] if yerr is not None else [])], default=0.0)
    if min(heights, default=0.0) >= 0:
        ax.set_ylim(0, max(top * 1.15, 0.05))  # all zero: a small positive range, not [-0.05, 0.05]
    if len(names) > 4:
        ax.tick_params(axis="x", labelrotation=30)
    return save_figure(fig, path)


def _positive(xs: Sequence[float], ys: Sequence[float], logx: bool) -> tuple[np.ndarray, np.ndarray]:
    """Finite points (x > 0 on a log axis), sorted by x."""
    x, y = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(y) & ((x > 0) if logx else True)
    order = np.argsort(x[keep], kind="stable")
    return x[keep][order], y[keep][order]


def line_plot(
    series: Series,
    title: str,
    xlabel: str,
    ylabel: str,
    path: str | os.PathLike,
    *,
    logx: bool = True,
    fit: bool = True,
    bands: Series | None = None,
    unit_interval: bool = False,
) -> Path:
    """Metric vs x, one line per series; with ``fit`` a dashed least-squares fit ``y = a + b log10 x`` per series
    (Carlini et al. 2022) whose slope per decade and r^2 go in the legend (skipped for a series with x <= 0 or a
    single x). On a log axis points with x <= 0 are left out. ``bands`` maps a series name to (lows, highs) aligned
    with its points (e.g. Wilson intervals), drawn as a shaded band; ``unit_interval`` fixes y to [0, 1]."""
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    colors = colors_for(list(series))
    for name, (xs, ys) in series.items():
        x, y = _positive(xs, ys, logx)
        if x.size == 0:
            continue
        color = colors[name]
        ax.plot(x, y, marker="o", color=color, label=name)
        if bands and name in bands:
            lows, highs = bands[name]
            bx, low = _positive(xs, [np.nan if v is None else v for v in lows], logx)
            _, high = _positive(xs, [np.nan if v is None else v for v in highs], logx)
            if bx.size == x.size:
                ax.fill_between(bx, low, high, color=color, alpha=0.15, linewidth=0)
        if fit and len(np.unique(x)) >= 2 and x.min() > 0:  # log10(x) needs x > 0, even on a linear axis
            f = loglinear_fit(x, y)
            grid = np.geomspace(x.min(), x.max(), 50)
            r2 = "n/a" if f["r2"] is None else f"{f['r2']:.2f}"
            ax.plot(
                grid,
                predict(f, grid),
                linestyle="--",
                color=color,
                alpha=0.7,
                label=f"{name} fit: {f['slope']:+.3g}/decade, r²={r2}",
            )
    if logx:
        ax.set_xscale("log")
        ticks = sorted({float(v) for xs, _ in series.values() for v in xs if v is not None and v > 0})
        if 0 < len(ticks) <= 8:  # few strata (repetitions 1, 4, 16 or sizes 10M, 100M): label the data values
            ax.set_xticks(ticks)
            ax.xaxis.set_major_formatter(FuncFormatter(short_number))
            ax.xaxis.set_minor_formatter(NullFormatter())
    if unit_interval:
        ax.set_ylim(0, 1.02)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def roc_plot(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float], float | None]], title: str, path: str | os.PathLike
) -> Path:
    """ROC curves (``name -> (fpr, tpr, auc)``) on linear axes and on log-log axes, where the low-FPR regime that
    matters for membership inference (Carlini et al. 2022) is visible. Curves that coincide (two arms both at AUC 1)
    stay visible: each later curve is drawn thinner and in its own dash pattern over the earlier, wider ones."""
    fig = Figure(figsize=(10, 4.4))
    lin, logax = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    floor = 1.0
    styles = ("-", "--", "-.", ":")
    colors = colors_for(list(curves))
    for i, (name, (fpr, tpr, auc)) in enumerate(curves.items()):
        label = name if auc is None else f"{name} (AUC {auc:.3f})"
        fpr, tpr = np.asarray(fpr, dtype=np.float64), np.asarray(tpr, dtype=np.float64)
        width = max(1.0, 3.5 - 0.6 * i)  # (later curves on top, thinner: an identical earlier one shows around it)
        for ax in (lin, logax):
            ax.plot(
                fpr, tpr, color=colors[name], linestyle=styles[i % len(styles)], linewidth=width, label=label, alpha=0.9
            )
        positive = np.concatenate([fpr[fpr > 0], tpr[tpr > 0]])
        if positive.size:
            floor = min(floor, positive.min())
    for ax, scale in ((lin, "linear"), (logax, "log")):
        start = 1e-5 if scale == "log" else 0.0
        ax.plot([start, 1], [start, 1], linestyle=":", color="grey", label="chance")
        ax.set_xscale(scale)
        ax.set_yscale(scale)
        ax.set_xlabel("false positive rate (fraction of nonmembers)")
        ax.set_ylabel("true positive rate (fraction of members)")
        ax.grid(True, alpha=0.3)
    for axis in (logax.xaxis, logax.yaxis):
        axis.set_minor_formatter(NullFormatter())  # minor log labels (2x10^-1, 3x10^-1 ...) collide
    low = min(max(floor, 1e-5) / 2, 1e-2)  # show at least two decades
    logax.set_xlim(low, 1)
    logax.set_ylim(low, 1.05)
    lin.set_title(title)
    logax.set_title(f"{title} (log scale)")
    lin.legend(fontsize=8, loc="lower right")
    return save_figure(fig, path)


def histogram(
    groups: Mapping[str, Sequence[float]],
    title: str,
    xlabel: str,
    path: str | os.PathLike,
    *,
    bins: int = 20,
    value_range: tuple[float, float] | None = (0.0, 1.0),
) -> Path:
    """Overlaid histograms, one per group (e.g. members vs nonmembers), on shared bins."""
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    colors = colors_for(list(groups))
    for name, values in groups.items():
        vals = np.asarray([v for v in values if v is not None], dtype=np.float64)
        if vals.size:
            ax.hist(vals, bins=bins, range=value_range, alpha=0.6, color=colors[name], label=f"{name} (n={vals.size})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("windows (count)")
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def loss_curves(curves: Mapping[str, Sequence[Mapping]], path: str | os.PathLike) -> Path:
    """Training loss on kept vs dropped tokens per run (``name -> metrics.jsonl records``; dropped = measured, never
    trained on), on a log y axis."""
    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    colors = colors_for(list(curves))
    for name, metrics in curves.items():
        color = colors[name]
        kept = [(m["step"], m["kept_loss"]) for m in metrics if m.get("kept_loss") is not None]
        if kept:
            ax.plot(*zip(*kept), color=color, label=f"{name}: kept tokens")
        dropped = [
            (m["step"], m["dropped_loss"])
            for m in metrics
            if m.get("dropped_loss") is not None and (m.get("dropped_tokens") or 0) > 0
        ]
        if dropped:
            ax.plot(*zip(*dropped), color=color, linestyle="--", label=f"{name}: dropped tokens (not trained)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_yscale("log")
    ax.set_title("training loss: kept vs dropped tokens")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
