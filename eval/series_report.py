"""``report.md`` and plots of a series evaluation (:mod:`goldfish.eval.series_analysis`): the per-model table,
memorisation vs training step or vs parameters, per stratum onsets, trajectories and Biderman et al.'s prediction."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from goldfish.io import atomic_write_text

from . import plots
from .tables import markdown_table


def _pct(v: dict) -> str:
    if v.get("rate") is None:
        return "-"
    return f"{100 * v['rate']:.1f} % [{100 * v['low']:.1f}, {100 * v['high']:.1f}] ({v['k']}/{v['n']})"


def _num(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def model_table(analysis: dict) -> str:
    rows = analysis["rows"]
    strata = list(dict.fromkeys(k for r in rows for k in r["by_repetitions"]))
    body = [
        [
            r["label"],
            _num(r["step"], "d") if r["step"] is not None else "-",
            "-" if r["params"] is None else f"{r['params'] / 1e6:.2f} M",
            _pct(r["exact_match"]),
            str(r["memorized"]),
            _num(r["token_match"]),
            _num(r["rouge_l"]),
            _num(r["heldout_loss"]),
            _num(r["mia_auc"]),
        ]
        + [_pct(r["by_repetitions"].get(s) or {}) for s in strata]
        for r in rows
    ]
    return markdown_table(
        [
            "model",
            "step",
            "params",
            "exact match [95 % CI]",
            "memorised",
            "token match",
            "ROUGE-L",
            "held-out loss",
            "MIA AUC (loss)",
        ]
        + [f"exact x{s}" for s in strata],
        body,
    )


def _rule_text(rule: dict | None) -> str:
    if not rule:
        return "-"
    t = rule["min_repetitions"]
    return "none" if t is None else f">= x{t:g}"


def prediction_table(analysis: dict) -> str:
    """Each earlier model's memorised set as a predictor of the last model's, beside the repetition rule fitted on
    the same model (Biderman et al. 2023 against the trivial baseline)."""
    body = [
        [
            p["label"],
            str(p["memorized"]),
            str(p["final_memorized"]),
            str(p["both"]),
            _pct(p["precision"]),
            _pct(p["recall"]),
            _rule_text(p.get("rule")),
            _pct((p.get("rule") or {}).get("precision") or {}),
            _pct((p.get("rule") or {}).get("recall") or {}),
        ]
        for p in analysis["prediction"]
    ]
    return markdown_table(
        [
            "model",
            "memorised",
            "memorised by the last",
            "both",
            "precision",
            "recall",
            "rule fitted on the model: memorised iff copies",
            "rule precision",
            "rule recall",
        ],
        body,
    )


def trajectory_lines(analysis: dict) -> list[str]:
    """How many windows each model memorises first, how many stay memorised, and reads at first memorisation."""
    traj = analysis["trajectories"]
    first = Counter(t["first"] for t in traj if t["first"] is not None)
    stays = sum(bool(t["stays"]) for t in traj if t["first"] is not None)
    lines = [
        f"{len(traj)} member windows; memorised by some model: {sum(first.values())} (and by every later one: "
        f"{stays}); never: {sum(t['first'] is None for t in traj)}."
    ]
    body = [[r["label"], str(first.get(r["label"], 0))] for r in analysis["rows"]]
    reads = [t["reads_at_first"] for t in traj if t.get("reads_at_first") is not None]
    if reads:
        lines.append(
            f"Copies of the target read when it was first memorised: median {sorted(reads)[len(reads) // 2]}"
            f", range {min(reads)}-{max(reads)} (counted from the rows training consumed)."
        )
    return lines + [
        "",
        markdown_table(["model", "windows first memorised here"], body),
        "",
        "Every window's trajectory: trajectories.csv (memorised flags in series order).",
    ]


def series_plots(analysis: dict, out: Path) -> list[Path]:
    """Exact match vs step (a run's checkpoints) or vs parameters (a size family), overall and per stratum."""
    rows, x = analysis["rows"], analysis["x"]
    xs = [r["step"] if x == "step" else r["params"] for r in rows]
    if any(v is None for v in xs) or len(set(xs)) < 2:
        return []
    series = {"all members": (xs, [r["exact_match"]["rate"] for r in rows])}
    bands = {"all members": ([r["exact_match"]["low"] for r in rows], [r["exact_match"]["high"] for r in rows])}
    for s in dict.fromkeys(k for r in rows for k in r["by_repetitions"]):
        vals = [r["by_repetitions"].get(s) or {} for r in rows]
        series[f"x{s}"] = (xs, [v.get("rate") for v in vals])
        bands[f"x{s}"] = ([v.get("low") for v in vals], [v.get("high") for v in vals])
    xlabel = "training step" if x == "step" else "parameters"
    return [
        plots.line_plot(
            series,
            title=f"exact match vs {xlabel}",
            xlabel=xlabel,
            ylabel="exact-match rate",
            path=out / f"memorization_vs_{x}.png",
            logx=x == "params",
            fit=False,
            bands=bands,
            unit_interval=True,
        )
    ]


def write_series_report(analysis: dict, out: Path) -> Path:
    onsets = [[s, v["first_exact"] or "never", v["half_exact"] or "never"] for s, v in analysis["strata"].items()]
    lines = [
        "# Series evaluation",
        "",
        f"{len(analysis['rows'])} models on the same data, ordered by {analysis['x']}; a window is memorised "
        f"at token match >= {analysis['memorized_threshold']} (1.0 = exact match).",
        "",
        model_table(analysis),
        "",
        "## When each repetition stratum becomes extractable",
        "",
        markdown_table(["stratum", "first model with an exact window", "first with >= half exact"], onsets),
        "",
        "## Trajectories",
        "",
        *trajectory_lines(analysis),
        "",
    ]
    if analysis["prediction"]:
        lines += [
            "## Does an earlier / smaller model's memorised set predict the last model's?",
            "",
            "After Biderman et al. (2023): precision = share of the model's memorised windows the last model "
            "memorises too; recall = share of the last model's memorised windows this model already "
            "memorises. Wilson 95 % intervals. Beside it the trivial predictor: 'memorised iff the target has "
            ">= t copies', t fitted on the same model's memorised set (the most windows right; 'none' = "
            "predict nothing); the model's set predicts beyond the repetition count only where it beats the "
            "rule.",
            "",
            prediction_table(analysis),
            "",
        ]
    figures = series_plots(analysis, out)
    lines += [f"![{p.stem}]({p.name})" for p in figures]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
