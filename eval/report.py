"""Human-readable views of results.json: a terminal table, ``report.md`` with PNG plots, and study comparisons.

Everything here reads the results dict only (see the schema in ``eval/run.py``) and copes with missing sections: no
membership (no nonmembers), a single prefix length or repetition stratum, windows without metrics. Files are written
atomically (``goldfish.io.atomic_write_text``; PNGs via :func:`goldfish.eval.plots.save_figure`).

The plot primitives :func:`bar_chart`, :func:`line_plot` and :func:`roc_plot` are re-exported here for study code.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from goldfish.errors import UserError
from goldfish.io import atomic_write_text

from .aggregate import loglinear_fit, summarize
from .plots import bar_chart, histogram, line_plot, roc_plot

__all__ = [
    "bar_chart", "line_plot", "roc_plot", "format_summary_table", "highlight_differences", "write_report",
    "comparison_plots", "write_comparison_report", "markdown_table", "load_results", "rewrite_report",
]

N_EXAMPLES = 3  # best- and worst-memorised windows shown in report.md
_MD_SPECIAL = set("\\`*_[]<>|~#")


# ------------------------------------------------------------------------------------------------ formatting


def _pct(v: Any) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def _num(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    return str(v) if isinstance(v, int) else f"{v:.{digits}f}"


def _auc(a: Mapping) -> str:
    if a.get("auc_ci_low") is None:
        return _num(a.get("auc"))
    return f"{a['auc']:.3f} [{a['auc_ci_low']:.3f}, {a['auc_ci_high']:.3f}]"


def _exact(row: Mapping) -> str:
    if row.get("exact_match_ci_low") is None:
        return _pct(row.get("exact_match_rate"))
    return f"{_pct(row.get('exact_match_rate'))} [{100 * row['exact_match_ci_low']:.1f}, " \
           f"{100 * row['exact_match_ci_high']:.1f}]"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table (cells are str()-ed, pipes escaped)."""
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, headers)) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines)


def _summary(results: Mapping) -> dict:
    """The summary section, recomputed from the windows when a results dict lacks it."""
    return results.get("summary") or summarize(results.get("windows") or [])


def _attacks(results: Mapping) -> dict:
    return ((results.get("membership") or {}).get("attacks")) or {}


STRATUM_COLUMNS = ["n", "exact match [95 % CI]", "token match", "ROUGE-L", "ROUGE-L (words)", "longest prefix run"]


def _stratum_row(label: str, row: Mapping) -> list[str]:
    return [label, _num(row.get("n_windows")), _exact(row), _num(row.get("token_match")), _num(row.get("rouge_l")),
            _num(row.get("rouge_l_words")), _num(row.get("longest_match_prefix"), 1)]


def format_summary_table(results: Mapping) -> str:
    """A compact fixed-width table for the terminal: overall, per prefix length, per repetition stratum, then the
    membership attacks with their AUC confidence intervals."""
    s = _summary(results)
    rows = [("overall", s.get("overall") or {})]
    rows += [(f"prefix {p}", r) for p, r in (s.get("by_prefix_len") or {}).items()]
    rows += [(f"repetitions {k}", r) for k, r in (s.get("by_repetitions") or {}).items()]
    table = [["", "n", "exact %", "token", "ROUGE-L"]]
    table += [[label, _num(r.get("n_windows")), _pct(r.get("exact_match_rate")), _num(r.get("token_match")),
               _num(r.get("rouge_l"))] for label, r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in table]
    attacks = _attacks(results)
    if attacks:
        width = max(len(k) for k in attacks)
        lines.append("")
        lines += [f"MIA {name.ljust(width)}  AUC {_auc(a)}  TPR@1%FPR {_num(a.get('tpr_at_1pct_fpr'))}"
                  for name, a in attacks.items()]
    return "\n".join(lines)


def _escape(word: str) -> str:
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in word)


def highlight_differences(generation: str, truth: str) -> tuple[str, str]:
    """Markdown versions of ``generation`` and ``truth`` with the words that differ in **bold**.

    Words are whitespace-separated and aligned with a longest-matching-block diff (``difflib``, no junk
    heuristic), so one wrong word does not mark the rest of the line; runs of differing words share one bold span.
    Whitespace is collapsed to single spaces and Markdown characters are escaped.
    """
    gen, ref = generation.split(), truth.split()
    out_gen: list[str] = []
    out_ref: list[str] = []
    matcher = difflib.SequenceMatcher(None, gen, ref, autojunk=False)
    for op, g0, g1, r0, r1 in matcher.get_opcodes():
        g = " ".join(_escape(w) for w in gen[g0:g1])
        r = " ".join(_escape(w) for w in ref[r0:r1])
        if op == "equal":
            out_gen.append(g)
            out_ref.append(r)
            continue
        if g:
            out_gen.append(f"**{g}**")
        if r:
            out_ref.append(f"**{r}**")
    return " ".join(out_gen), " ".join(out_ref)


# --------------------------------------------------------------------------------------------------- report.md


def _header(results: Mapping) -> list[str]:
    model, data = results.get("model") or {}, results.get("data") or {}
    lines = ["# Memorisation evaluation", ""]
    if model:
        params = model.get("num_parameters")
        lines.append(f"- model: `{model.get('path')}`" + (f", {params / 1e6:.2f} M parameters" if params else "")
                     + (f", {model.get('dtype')}" if model.get("dtype") else ""))
    if data:
        lines.append(f"- data: `{data.get('path')}`: {data.get('members', '?')} member and "
                     f"{data.get('nonmembers', 0) or 0} nonmember documents"
                     + (f", {data['skipped_short']} skipped as too short" if data.get("skipped_short") else ""))
    stamp = ", ".join(f"{k} {results[k]}" for k in ("created", "git") if results.get(k))
    if stamp:
        lines.append(f"- {stamp}")
    return lines + [""]


def _headline(s: Mapping, attacks: Mapping) -> list[str]:
    o = s.get("overall") or {}
    headers = ["windows", "exact match [95 % CI]", "token match", "ROUGE-L", "ROUGE-L (words)", "edit distance",
               "one-pass disagreements"]
    row = [_num(o.get("n_windows")), _exact(o), _num(o.get("token_match")), _num(o.get("rouge_l")),
           _num(o.get("rouge_l_words")), _num(o.get("edit_distance")), _num(o.get("onepass_disagreements"))]
    if "loss" in attacks:
        headers.append("LOSS-attack AUC [95 % CI]")
        row.append(_auc(attacks["loss"]))
    return ["## Headline", "", markdown_table(headers, [row]), ""]


def _strata(s: Mapping) -> list[str]:
    lines = []
    for key, title, label in (("by_prefix_len", "By prefix length", "prefix length"),
                              ("by_repetitions", "By repetition count", "repetitions")):
        strata = s.get(key) or {}
        if strata:
            rows = [_stratum_row(k, r) for k, r in strata.items()]
            lines += [f"## {title}", "", markdown_table([label] + STRATUM_COLUMNS, rows), ""]
    if s.get("by_repetitions"):
        lines += ["Repetitions 0 are nonmembers (never trained on): their rates are the floor of chance matches.", ""]
    return lines


def _membership(results: Mapping) -> list[str]:
    attacks = _attacks(results)
    if not attacks:
        return ["## Membership inference", "", "Not run (no nonmember documents).", ""]
    m = results["membership"]
    rows = [[name, _auc(a), _pct(a.get("tpr_at_1pct_fpr")), _pct(a.get("tpr_at_0.1pct_fpr"))]
            for name, a in attacks.items()]
    return ["## Membership inference", "",
            f"{m.get('n_members')} members vs {m.get('n_nonmembers')} nonmembers; every score is oriented so that "
            "members score higher (AUC 0.5 = chance). AUC with a stratified bootstrap 95 % CI; TPR at a target FPR "
            "is the largest TPR on the ROC with FPR <= target (no interpolation), so with n nonmembers FPRs below "
            "1/n read as TPR at zero false positives.", "",
            markdown_table(["attack", "AUC [95 % CI]", "TPR @ 1 % FPR", "TPR @ 0.1 % FPR"], rows), ""]


def _unknown(v: Any) -> str:
    return "unknown" if v is None else str(v)


def _example(w: Mapping) -> list[str]:
    gen, truth = highlight_differences(w.get("generation") or "", w.get("truth") or "")
    verdict = "verbatim" if w.get("exact_match") else f"token match {_num(w.get('token_match'))}"
    return [f"**{_escape(str(w.get('title') or w.get('doc_id')))}** (prefix {w.get('prefix_len')} tokens, "
            f"repetitions {_unknown(w.get('repetitions'))}, {verdict}, ROUGE-L {_num(w.get('rouge_l'))})", "",
            f"- generated: {gen}", f"- truth: {truth}", ""]


def _examples(windows: Sequence[Mapping]) -> list[str]:
    """The best- and worst-memorised member windows, generation vs truth with differing words in bold."""
    pool = [w for w in windows if w.get("split") in (None, "members") and w.get("truth") is not None]
    if not pool:
        return []
    ranked = sorted(pool, key=lambda w: (bool(w.get("exact_match")), w.get("token_match") or 0.0,
                                         w.get("rouge_l") or 0.0), reverse=True)
    best = ranked[:N_EXAMPLES]
    worst = [w for w in ranked[::-1][:N_EXAMPLES] if all(w is not b for b in best)]
    lines = ["## Examples", "", "Words that differ between generation and truth are in **bold**.", "",
             "### Best memorised", ""]
    for w in best:
        lines += _example(w)
    if worst:
        lines += ["### Worst memorised", ""]
        for w in worst:
            lines += _example(w)
    return lines


def _strata_series(strata: Mapping[str, Mapping], positive: bool) -> dict[str, tuple[list, list]]:
    """Numeric strata -> {"exact match": (xs, ys), "ROUGE-L": (xs, ys)} ("unknown" and, on log axes, x <= 0 out)."""
    points = [(float(k), r) for k, r in strata.items() if k.lstrip("-").isdigit() and (float(k) > 0 or not positive)]
    out = {}
    for label, key in (("exact match", "exact_match_rate"), ("ROUGE-L", "rouge_l")):
        xy = [(x, r[key]) for x, r in points if r.get(key) is not None]
        if len(xy) >= 2:
            out[label] = ([x for x, _ in xy], [y for _, y in xy])
    return out


def report_plots(results: Mapping, out_dir: str | os.PathLike) -> list[Path]:
    """The per-run PNGs; a plot is skipped when its data is absent or has a single point."""
    out, s, paths = Path(out_dir), _summary(results), []
    series = _strata_series(s.get("by_prefix_len") or {}, positive=False)
    if series:
        paths.append(line_plot(series, "memorisation vs prefix length", "prefix length (tokens)", "rate / score",
                               out / "memorisation_vs_prefix_len.png", logx=False, fit=False))
    series = _strata_series(s.get("by_repetitions") or {}, positive=True)
    if series:
        paths.append(line_plot(series, "memorisation vs repetitions", "repetitions in training (log)",
                               "rate / score", out / "memorisation_vs_repetitions.png", logx=True, fit=True))
    attacks = _attacks(results)
    if attacks:
        curves = {k: (a["roc_fpr"], a["roc_tpr"], a.get("auc")) for k, a in attacks.items() if a.get("roc_fpr")}
        paths.append(roc_plot(curves, "membership inference ROC", out / "roc.png"))
    by_split: dict[str, list] = {}
    for w in results.get("windows") or []:
        if w.get("token_match") is not None:
            by_split.setdefault(str(w.get("split") or "members"), []).append(w["token_match"])
    if by_split:
        paths.append(histogram(by_split, "token match per window", "fraction of suffix tokens reproduced",
                               out / "token_match_hist.png"))
    return paths


def write_report(results: dict, out_dir: str | os.PathLike) -> list[Path]:
    """Write ``report.md`` and its PNG plots into ``out_dir``; returns the paths written (report.md first)."""
    out = Path(out_dir)
    s = _summary(results)
    plots = report_plots(results, out)
    lines = _header(results) + _headline(s, _attacks(results)) + _strata(s) + _membership(results)
    lines += _examples(results.get("windows") or [])
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    atomic_write_text(out / "report.md", "\n".join(lines))
    return [out / "report.md", *plots]


def load_results(path: str | os.PathLike) -> dict:
    """Read a results.json (or the folder holding one), checking it is a goldfish-eval results file."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    if not p.is_file():
        raise UserError(f"results file not found: {p} (pass the results.json written by goldfish eval, or its folder)")
    try:
        results = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{p} is not valid JSON ({e}); rerun goldfish eval to rewrite it") from None
    schema = results.get("schema") if isinstance(results, dict) else None
    if not isinstance(schema, str) or not schema.startswith("goldfish-eval/"):
        raise UserError(f"{p} has schema {schema!r}, not goldfish-eval/1; is it a goldfish eval results file?")
    return results


def rewrite_report(path: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> list[Path]:
    """Re-render report.md and the plots from an existing results.json (into its folder unless ``out_dir``)."""
    p = Path(path)
    results = load_results(p)
    return write_report(results, out_dir if out_dir is not None else (p if p.is_dir() else p.parent))


# ------------------------------------------------------------------------------------------------ comparisons


def comparison_plots(arms: Mapping[str, Mapping], out_dir: str | os.PathLike, *, attack: str = "loss") -> list[Path]:
    """Compare several results dicts (``arm name -> results``, e.g. standard vs goldfish): bars of exact-match
    rate (Wilson 95 % CI) and ROUGE-L per arm, the ``attack``'s ROC per arm, and exact match vs repetitions per arm
    (log-x, log-linear fit) when the arms hold several repetition strata."""
    out, paths = Path(out_dir), []
    overall = {name: _summary(r).get("overall") or {} for name, r in arms.items()}
    exact = {k: o["exact_match_rate"] for k, o in overall.items() if o.get("exact_match_rate") is not None}
    if exact:
        ci = {k: (overall[k].get("exact_match_ci_low"), overall[k].get("exact_match_ci_high")) for k in exact}
        paths.append(bar_chart(exact, "exact-match rate per arm", "exact-match rate", out / "exact_match_by_arm.png",
                               errors=ci))
    rouge = {k: o["rouge_l"] for k, o in overall.items() if o.get("rouge_l") is not None}
    if rouge:
        paths.append(bar_chart(rouge, "ROUGE-L per arm", "ROUGE-L F1", out / "rouge_l_by_arm.png"))
    curves = {k: (a["roc_fpr"], a["roc_tpr"], a.get("auc")) for k, r in arms.items()
              if (a := _attacks(r).get(attack)) and a.get("roc_fpr")}
    if curves:
        paths.append(roc_plot(curves, f"{attack} attack per arm", out / f"roc_{attack}_by_arm.png"))
    series = {k: xy for k, r in arms.items()
              if (xy := _strata_series(_summary(r).get("by_repetitions") or {}, positive=True).get("exact match"))}
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
            value = (_summary(r).get("overall") or {}).get(metric)
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
            rows.append([label, g, _num(f["slope"], 4), _num(f["intercept"], 4), _num(f["r2"]), f["n"]])
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
        o = _summary(r).get("overall") or {}
        a = _attacks(r).get(attack) or {}
        rows.append([name, _num(o.get("n_windows")), _exact(o), _num(o.get("token_match")), _num(o.get("rouge_l")),
                     _auc(a) if a else "–", _pct(a.get("tpr_at_1pct_fpr")) if a else "–"])
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
