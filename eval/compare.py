"""Study comparisons of several results dicts (e.g. standard vs goldfish arms): bars, ROC per arm, sweeps with fits."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from goldfish.io import atomic_write_text

from .aggregate import loglinear_fit
from .plots import bar_chart, line_plot, roc_plot
from .report import attacks_of, fmt_auc, fmt_exact, fmt_num, fmt_pct, markdown_table, strata_series, summary_of


def comparison_plots(arms: Mapping[str, Mapping], out_dir: str | os.PathLike, *, attack: str = "loss") -> list[Path]:
    """Compare several results dicts (``arm name -> results``, e.g. standard vs goldfish): bars of exact-match
    rate (Wilson 95 % CI) and ROUGE-L per arm, the ``attack``'s ROC per arm, and exact match vs repetitions per arm
    (log-x, log-linear fit) when the arms hold several repetition strata."""
    out, paths = Path(out_dir), []
    overall = {name: summary_of(r).get("overall") or {} for name, r in arms.items()}
    exact = {k: o["exact_match_rate"] for k, o in overall.items() if o.get("exact_match_rate") is not None}
    if exact:
        ci = {k: (overall[k].get("exact_match_ci_low"), overall[k].get("exact_match_ci_high")) for k in exact}
        paths.append(bar_chart(exact, "exact-match rate per arm", "exact-match rate", out / "exact_match_by_arm.png",
                               errors=ci))
    rouge = {k: o["rouge_l"] for k, o in overall.items() if o.get("rouge_l") is not None}
    if rouge:
        paths.append(bar_chart(rouge, "ROUGE-L per arm", "ROUGE-L F1", out / "rouge_l_by_arm.png"))
    curves = {k: (a["roc_fpr"], a["roc_tpr"], a.get("auc")) for k, r in arms.items()
              if (a := attacks_of(r).get(attack)) and a.get("roc_fpr")}
    if curves:
        paths.append(roc_plot(curves, f"{attack} attack per arm", out / f"roc_{attack}_by_arm.png"))
    series = {k: xy for k, r in arms.items()
              if (xy := strata_series(summary_of(r).get("by_repetitions") or {}, positive=True).get("exact match"))}
    if series:
        paths.append(line_plot(series, "exact match vs repetitions", "repetitions in training (log)",
                               "exact-match rate", out / "exact_match_vs_repetitions_by_arm.png"))
    return paths


def _sweep_section(arms: Mapping[str, Mapping], x: Mapping[str, float], x_label: str,
                   groups: Mapping[str, str] | None, out: Path) -> tuple[list[str], list[Path]]:
    """Exact match and ROUGE-L vs a numeric per-arm ``x`` (e.g. parameters), one series per group, log-linear fits."""
    lines, paths = [f"## Memorisation vs {x_label}", ""], []
    rows = []
    for metric, label in (("exact_match_rate", "exact-match rate"), ("rouge_l", "ROUGE-L")):
        series: dict[str, tuple[list, list]] = {}
        for name, r in arms.items():
            value = (summary_of(r).get("overall") or {}).get(metric)
            if name in x and value is not None:
                xs, ys = series.setdefault((groups or {}).get(name, "all"), ([], []))
                xs.append(float(x[name]))
                ys.append(value)
        fittable = {g: xy for g, xy in series.items() if len(set(xy[0])) >= 2 and min(xy[0]) > 0}
        if not fittable:
            continue
        paths.append(line_plot(fittable, f"{label} vs {x_label}", x_label, label, out / f"{metric}_vs_x.png"))
        for g, (xs, ys) in fittable.items():
            f = loglinear_fit(xs, ys)
            rows.append([label, g, fmt_num(f["slope"], 4), fmt_num(f["intercept"], 4), fmt_num(f["r2"]), f["n"]])
    if not rows:
        return [], []
    lines += ["Least-squares fit y = intercept + slope · log10(x) (Carlini et al. 2022).", "",
              markdown_table(["metric", "series", "slope per decade", "intercept", "r²", "n"], rows), ""]
    return lines, paths


def write_comparison_report(arms: Mapping[str, Mapping], out_dir: str | os.PathLike, *, title: str = "Comparison",
                            attack: str = "loss", x: Mapping[str, float] | None = None, x_label: str = "x",
                            groups: Mapping[str, str] | None = None) -> list[Path]:
    """``report.md`` comparing arms side by side (+ :func:`comparison_plots`). With ``x`` (arm -> number, e.g.
    parameter count) it adds memorisation-vs-x plots with log-linear fits, one series per ``groups[arm]`` (e.g.
    "standard"/"goldfish"). Returns the paths written, report.md first."""
    out = Path(out_dir)
    rows = []
    for name, r in arms.items():
        o = summary_of(r).get("overall") or {}
        a = attacks_of(r).get(attack) or {}
        rows.append([name, fmt_num(o.get("n_windows")), fmt_exact(o), fmt_num(o.get("token_match")),
                     fmt_num(o.get("rouge_l")),
                     fmt_auc(a) if a else "–", fmt_pct(a.get("tpr_at_1pct_fpr")) if a else "–"])
    lines = [f"# {title}", "", markdown_table(["arm", "windows", "exact match [95 % CI]", "token match", "ROUGE-L",
                                               f"{attack} AUC [95 % CI]", "TPR @ 1 % FPR"], rows), ""]
    paths = comparison_plots(arms, out, attack=attack)
    if x:
        sweep_lines, sweep_paths = _sweep_section(arms, x, x_label, groups, out)
        lines += sweep_lines
        paths += sweep_paths
    if paths:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in paths] + [""]
    atomic_write_text(out / "report.md", "\n".join(lines))
    return [out / "report.md", *paths]
