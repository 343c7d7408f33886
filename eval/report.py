"""Human-readable views of results.json: a terminal table and ``report.md`` with PNG plots (an SVG copy beside each).

Everything here reads the results dict only (see the schema in ``eval/SCHEMA.md``) and copes with missing sections: no
membership (no nonmembers), a single prefix length or repetition stratum, windows without metrics. Files are written
atomically (``goldfish.io.atomic_write_text``; PNGs via :func:`goldfish.eval.plots.save_figure`).

How a value is written in a table is :mod:`goldfish.eval.tables`'s (one formatting module for every table).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from goldfish.io import atomic_write_text

from .aggregate import summarize
from .documents import regurgitated
from .windows import MIN_SHORT_SUFFIX
from .plots import histogram, line_plot, roc_plot
from .tables import (
    escape_markdown,
    fmt_auc,
    fmt_ci,
    fmt_exact,
    fmt_num,
    fmt_pct,
    fmt_tpr,
    highlight_differences,
    markdown_table,
)

__all__ = ["format_summary_table", "write_report"]

N_EXAMPLES = 3  # best- and worst-memorised windows shown in report.md


# ------------------------------------------------------------------------------------------------ tables


def summary_of(results: Mapping) -> dict:
    """The summary section, recomputed from the windows when a results dict lacks it ({} without windows)."""
    if results.get("summary"):
        return results["summary"]
    windows = results.get("windows") or []
    return summarize(windows) if windows else {}


def attacks_of(results: Mapping) -> dict:
    return ((results.get("membership") or {}).get("attacks")) or {}


def _columns(rows: Sequence[Mapping]) -> list[tuple[str, Any]]:
    """(header, row -> cell) of the summary tables; beam and sampling columns only when some row has them."""
    cols: list[tuple[str, Any]] = [
        ("n", lambda r: fmt_num(r.get("n_windows"))),
        ("exact match [95 % CI]", fmt_exact),
        ("token match [CI]", lambda r: fmt_ci(r, "token_match")),
        ("ROUGE-L (rouge-score)", lambda r: fmt_num(r.get("rouge_l_paper"))),
        ("ROUGE-L (tokens)", lambda r: fmt_num(r.get("rouge_l"))),
        ("one-pass top-1 acc [CI]", lambda r: fmt_ci(r, "onepass_token_acc")),
        ("suffix log-prob [CI]", lambda r: fmt_ci(r, "suffix_logprob", 1)),
        ("(n,p) extraction [CI]", lambda r: fmt_ci(r, "np_extraction")),
    ]
    if any(r.get("beam_exact_match_rate") is not None for r in rows):
        cols.append(("beam exact match", lambda r: fmt_pct(r.get("beam_exact_match_rate"))))
    if any(r.get("sample_rate") is not None for r in rows):
        cols.append(("sample rate", lambda r: fmt_ci(r, "sample_rate")))
    return cols


def _stratum(key: str) -> str:
    return "all" if key == "-1" else key  # prefix length -1 = all but the last S tokens


def summary_table(label: str, strata: Mapping[str, Mapping]) -> str:
    """A Markdown table, one row per stratum, with every summary measure and its interval."""
    cols = _columns(list(strata.values()))
    return markdown_table(
        [label] + [h for h, _ in cols], [[_stratum(k)] + [f(r) for _, f in cols] for k, r in strata.items()]
    )


def _terminal_rows(s: Mapping) -> list[tuple[str, Mapping]]:
    rows = [(f"window {k}", r) for k, r in (s.get("by_window") or {}).items()]
    for key, label in (
        ("by_prefix_len", "prefix"),
        ("by_repetitions", "repetitions"),
        ("by_split", "split"),
        ("by_group", "group"),
    ):
        strata = s.get(key) or {}
        if len(strata) > 1:
            rows += [(f"{label} {_stratum(k)}", r) for k, r in strata.items()]
    return rows


def format_summary_table(results: Mapping) -> str:
    """A compact fixed-width table for the terminal: one row per window placement (never pooled), then per prefix
    length, repetitions, split and group where there are several, then the membership attacks."""
    s = summary_of(results)
    # ROUGE-L as the README's headline (rouge-score on words, the paper's) and on token ids, each labelled
    table = [["", "n", "exact %", "token", "ROUGE-L words", "ROUGE-L tokens", "top-1", "log p(suffix)", "(n,p)"]]
    table += [
        [
            label,
            fmt_num(r.get("n_windows")),
            fmt_pct(r.get("exact_match_rate")),
            fmt_num(r.get("token_match")),
            fmt_num(r.get("rouge_l_paper")),
            fmt_num(r.get("rouge_l")),
            fmt_num(r.get("onepass_token_acc")),
            fmt_num(r.get("suffix_logprob"), 1),
            fmt_num(r.get("np_extraction")),
        ]
        for label, r in _terminal_rows(s)
    ]
    lines = []
    if len(table) > 1:
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        lines = [
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in table
        ]
    audit = audit_line(results)
    if audit:
        lines += ["", audit]
    attacks = attacks_of(results)
    if attacks:
        width = max(len(k) for k in attacks)
        lines.append("")
        lines += [
            f"MIA {name.ljust(width)}  AUC {fmt_auc(a)}  TPR@1%FPR {fmt_tpr(a, 'tpr_at_1pct_fpr')}"
            for name, a in attacks.items()
        ]
    return "\n".join(lines).strip("\n")


def audit_line(results: Mapping) -> str | None:
    """One line on the regurgitation audit: how many documents came back verbatim, how many were too short."""
    docs = results.get("documents") or []
    if not docs:
        return None
    hits = regurgitated(docs)
    short = sum(d.get("verdict") == "too_short" for d in docs)
    line = f"regurgitated: {', '.join(split_counts(results))}" + (
        f" ({short} too short for any window)" if short else ""
    )
    if hits:
        top = hits[0]
        line += (
            f"; longest verbatim span {top['longest_span']} tokens in {top['doc_id']} at token "
            f"{top['longest_span_offset']}; every one listed in report.md"
        )
    return line


def split_counts(results: Mapping) -> list[str]:
    """ "N of M member documents" per split of the audited documents (members and nonmembers never pooled: a
    nonmember reproduced is no evidence about training)."""
    docs = results.get("documents") or []
    out = []
    for split in dict.fromkeys(d.get("split") or "members" for d in docs):
        own = [d for d in docs if (d.get("split") or "members") == split]
        hits = sum(d.get("verdict") == "regurgitated" for d in own)
        word = documents_word(results) if split == "members" else f"{split_label(results, split)[:-1]} documents"
        out.append(f"{hits} of {len(own)} {word}")
    return out


def documents_word(results: Mapping) -> str:
    """What the evaluated documents are called: "member documents" beside nonmembers, else just "documents" (a
    corpus without a membership split says nothing about training)."""
    return "member documents" if (results.get("data") or {}).get("nonmembers") else "documents"


def split_label(results: Mapping, split: Any) -> str:
    """A split's name in tables and plots: ``members`` reads "documents" when there is no membership split."""
    split = "members" if split is None else str(split)
    return "documents" if split == "members" and not (results.get("data") or {}).get("nonmembers") else split


# --------------------------------------------------------------------------------------------------- report.md


def _header(results: Mapping) -> list[str]:
    model, data = results.get("model") or {}, results.get("data") or {}
    lines = ["# Memorisation evaluation", ""]
    if model:
        params = model.get("num_parameters")
        lines.append(
            f"- model: `{model.get('path')}`"
            + (f" at revision `{model['revision']}`" if model.get("revision") else "")
            + (f", {params / 1e6:.2f} M parameters" if params else "")
            + (f", {model.get('dtype')}" if model.get("dtype") else "")
            + (f" ({model['nature']})" if model.get("nature") else "")
        )
        if model.get("partial"):
            lines.append(
                f"- **a partial checkpoint** (model.allow_partial=true): {'; '.join(model['partial'])}; "
                f"the missing tensors were random, so no number below describes the trained model"
            )
        own, used = model.get("checkpoint_precision"), model.get("precision")
        if own and used and own != used:
            lines.append(
                f"- evaluated in {used}, not the checkpoint's own {own} (model.dtype): faster, but a "
                f"verdict may differ from the checkpoint's own greedy output"
            )
    if data:
        counts = (
            f"{data.get('members', '?')} member and {data.get('nonmembers')} nonmember documents"
            if data.get("nonmembers")
            else f"{data.get('members', '?')} documents (no membership split)"
        )
        short = sum(d.get("verdict") == "too_short" for d in results.get("documents") or [])
        lines.append(
            f"- data: `{data.get('path')}`: {counts}" + (f", {short} too short for any window" if short else "")
        )
    stamp = ", ".join(f"{k} {results[k]}" for k in ("created", "git") if results.get(k))
    if stamp:
        lines.append(f"- {stamp}")
    return lines + [""]


def _headline(s: Mapping, attacks: Mapping) -> list[str]:
    """One row per window placement: start and end windows measure different things and are never pooled."""
    lines = ["## Headline", ""]
    if s.get("by_window"):
        lines += ["One row per window placement, 95 % intervals; the measures are defined in the Glossary.", ""]
        by_split = s.get("by_split_window") or {}
        if len(by_split) > 1:  # members and nonmembers extracted: each split's own rows, never pooled
            for split, strata in by_split.items():
                lines += [f"{split.capitalize()}:", "", summary_table("window", strata), ""]
        else:
            lines += [summary_table("window", s["by_window"]), ""]
    else:
        lines += ["Extraction not run (tasks without extraction).", ""]
    if "loss" in attacks:
        lines += [f"LOSS-attack AUC [95 % CI]: {fmt_auc(attacks['loss'])}", ""]
    return lines


STRATA = (
    ("by_prefix_len", "By prefix length", "prefix length"),
    ("by_repetitions", "By repetition count", "repetitions"),
    ("by_split", "By split", "split"),
    ("by_group", "By group", "group"),
)


def _strata(s: Mapping, results: Mapping | None = None) -> list[str]:
    """A table per stratification with more than one stratum (or beside several placements, where its one row pools
    them)."""
    lines = []
    for key, title, label in STRATA:
        strata = s.get(key) or {}
        if key == "by_split" and results is not None:
            strata = {split_label(results, k): r for k, r in strata.items()}
        if not strata or (len(strata) == 1 and len(s.get("by_window") or {}) == 1):
            continue  # one stratum and one placement: its row is the headline's, not repeated
        lines += [f"## {title}", "", summary_table(label, strata), ""]
        if key == "by_repetitions":
            lines += ['Repetitions 0 are nonmembers; "unknown": no repetition count (see the Glossary).', ""]
    return lines


N_RANKED = 15  # documents shown in the partial-memorisation ranking


def _partial(s: Mapping, results: Mapping | None = None) -> list[str]:
    """Documents ranked by one-pass top-1 accuracy, then suffix log-prob (all of them in results.json)."""
    docs = s.get("documents") or []
    if not docs:
        return []
    rows = [
        [
            i + 1,
            escape_markdown(str(d.get("title") or d.get("doc_id"))),
            split_label(results or {"data": {"nonmembers": 1}}, d.get("split")),
            _unknown(d.get("group")),
            d.get("n_windows"),
            fmt_num(d.get("onepass_token_acc")),
            fmt_num(d.get("suffix_logprob"), 1),
            fmt_num(d.get("np_extraction")),
            fmt_num(d.get("token_match")),
            fmt_pct(d.get("exact_match_rate")),
        ]
        for i, d in enumerate(docs[:N_RANKED])
    ]
    more = f" (top {N_RANKED} of {len(docs)}; all in results.json summary.documents)" if len(docs) > N_RANKED else ""
    return [
        "## Partial memorisation",
        "",
        f"Documents ranked by one-pass top-1 accuracy, then suffix log-probability, means over their windows{more}.",
        "",
        markdown_table(
            [
                "rank",
                "document",
                "split",
                "group",
                "windows",
                "top-1 acc",
                "log p(suffix)",
                "(n,p) extraction",
                "token match",
                "exact match",
            ],
            rows,
        ),
        "",
    ]


def _audit(results: Mapping) -> list[str]:
    """The regurgitation audit: every regurgitated document (all of them, longest verbatim span first) and the
    documents too short for a window."""
    docs = results.get("documents") or []
    if not docs:
        return []
    cfg = (results.get("config") or {}).get("data") or {}
    hits = regurgitated(docs)
    short = [d for d in docs if d.get("verdict") == "too_short"]
    fitted = [d for d in docs if d.get("short_window")]
    word = documents_word(results)
    lines = [
        "## Regurgitation audit",
        "",
        f"{' and '.join(split_counts(results))} regurgitated: the greedy continuation of at least one window "
        f"reproduced its whole suffix of {cfg.get('suffix_len', 'S')} tokens verbatim (windows: "
        f"{', '.join(cfg.get('window') or [])}, prefixes {cfg.get('prefix_lens')}"
        + (
            f", stride {cfg.get('stride') or cfg.get('suffix_len')} tokens"
            if "stride" in (cfg.get("window") or [])
            else ""
        )
        + "). Every document's verdict is in results.json `documents` and report.html.",
        "",
    ]
    if hits:
        rows = [
            [
                i + 1,
                escape_markdown(str(d.get("doc_id"))),
                escape_markdown(str(d.get("title") or "")),
                d.get("n_tokens"),
                d.get("n_windows"),
                d.get("regurgitated_windows"),
                d.get("longest_span"),
                d.get("longest_span_offset"),
            ]
            for i, d in enumerate(hits)
        ]
        lines += [
            markdown_table(
                [
                    "#",
                    "document",
                    "title",
                    "tokens",
                    "windows",
                    "regurgitated windows",
                    "longest verbatim span (tokens)",
                    "at token",
                ],
                rows,
            ),
            "",
        ]
    if fitted:
        lines += [
            f"{len(fitted)} documents shorter than the requested windows ({fitted[0].get('tokens_needed')} "
            f"tokens) got one window each (placement `short`): the suffix is the last half of the document (at "
            f"most {cfg.get('suffix_len', 'S')} tokens), the prefix every token before it.",
            "",
        ]
    if short:
        floor = min(MIN_SHORT_SUFFIX, int(cfg.get("suffix_len") or MIN_SHORT_SUFFIX))
        lines += [
            f"{len(short)} {word} too short for any window (fewer than {2 * floor} tokens: its last half as "
            f"the suffix, at least {floor} tokens), unanswered: "
            + ", ".join(f"{escape_markdown(str(d.get('doc_id')))} ({d.get('n_tokens')})" for d in short)
            + ".",
            "",
        ]
    return lines


def _membership(results: Mapping) -> list[str]:
    attacks = attacks_of(results)
    if not attacks:
        tasks = ((results.get("config") or {}).get("tasks")) or ["membership"]
        n_non = (results.get("data") or {}).get("nonmembers") or 0
        why = (
            "tasks excludes membership"
            if "membership" not in tasks
            else "no nonmember documents"
            if not n_non
            else "no scores"
        )
        return ["## Membership inference", "", f"Not run ({why}).", ""]
    m = results["membership"]
    rows = [
        [name, fmt_auc(a), fmt_tpr(a, "tpr_at_1pct_fpr", pct=True), fmt_tpr(a, "tpr_at_0.1pct_fpr", pct=True)]
        for name, a in attacks.items()
    ]
    return [
        "## Membership inference",
        "",
        f"{m.get('n_members')} members vs {m.get('n_nonmembers')} nonmembers (AUC 0.5 = chance; the attacks and "
        "their intervals in the Glossary).",
        "",
        markdown_table(["attack", "AUC [95 % CI]", "TPR @ 1 % FPR", "TPR @ 0.1 % FPR"], rows),
        "",
    ]


GLOSSARY = (
    (
        "exact match",
        "the greedy continuation of a window's prefix equals its whole true suffix; it decides only "
        "verbatim reproduction. Rates carry Wilson 95 % intervals, means mean ± 1.96 s.e.",
    ),
    (
        "one-pass measures",
        "teacher-forced: top-1 accuracy of the true next token, log-probability of the whole "
        "suffix and the (n,p)-extraction chance; they show partial memorisation where exact match is 0.",
    ),
    (
        "ROUGE-L",
        "F1 of the longest common subsequence: rouge-score's on the decoded words (the Goldfish paper's) and "
        "ours on token ids.",
    ),
    ("regurgitated", "a document at least one of whose windows came back verbatim."),
    (
        "longest verbatim span",
        "the longest stretch of a document every token of which greedy decoding reproduced "
        "(each window from the true text before it, up to its first mistake; consecutive windows join), at a token "
        "offset into the document.",
    ),
    (
        "short window",
        "a document shorter than the requested windows gets one: its last half (at most S tokens) as "
        "the suffix, every token before it as the prompt (placement `short`); one under 16 tokens gets none.",
    ),
    (
        "repetitions",
        "training copies of a document; 0 are nonmembers (never trained on), whose rates are the floor of "
        'chance matches; "unknown": documents without a count (e.g. JSONL members).',
    ),
    (
        "membership AUC",
        "every score oriented so that members score higher; stratified bootstrap 95 % interval; a "
        "perfect separation shows its exact permutation p-value instead of a degenerate interval.",
    ),
    (
        "TPR at a target FPR",
        "the largest TPR on the ROC with FPR <= target (no interpolation), shown only with at "
        "least 1/FPR nonmembers (below that it would be the TPR at zero false positives).",
    ),
    (
        "attacks",
        "zlib_mimir divides the mean loss by the zlib length (MIMIR's form, which tracks document length); "
        "zlib_ratio divides total loss bits by zlib bits (length-normalised); recall (ReCaLL) is LL(x | P) / LL(x) "
        "with P the first nonmember document(s), which it leaves unscored; dc_pdd (DC-PDD) averages p(token) x -log "
        "f(token), clipped, over first occurrences, f the nonmembers' token frequencies (reference-free).",
    ),
)


def _glossary() -> list[str]:
    """The definitions the sections refer to, once, at the end."""
    return ["## Glossary", ""] + [f"- **{term}**: {text}" for term, text in GLOSSARY] + [""]


def _unknown(v: Any) -> str:
    return "unknown" if v is None else str(v)


def _example(w: Mapping) -> list[str]:
    gen, truth = highlight_differences(w.get("generation") or "", w.get("truth") or "")
    verdict = "verbatim" if w.get("exact_match") else f"token match {fmt_num(w.get('token_match'))}"
    prefix = f"all ({w.get('prefix_tokens')})" if w.get("prefix_len") == -1 else str(w.get("prefix_len"))
    return [
        f"**{escape_markdown(str(w.get('title') or w.get('doc_id')))}** (prefix {prefix} tokens, "
        f"repetitions {_unknown(w.get('repetitions'))}, {verdict}, ROUGE-L {fmt_num(w.get('rouge_l_paper'))} "
        f"(rouge-score) / {fmt_num(w.get('rouge_l'))} (tokens))",
        "",
        f"- generated: {gen}",
        f"- truth: {truth}",
        "",
    ]


def _examples(windows: Sequence[Mapping]) -> list[str]:
    """The best- and worst-memorised member windows, generation vs truth with differing words in bold."""
    pool = [w for w in windows if w.get("split") in (None, "members") and w.get("truth") is not None]
    if not pool:
        return []
    ranked = sorted(
        pool,
        key=lambda w: (bool(w.get("exact_match")), w.get("token_match") or 0.0, w.get("rouge_l") or 0.0),
        reverse=True,
    )
    best = ranked[:N_EXAMPLES]
    worst = [w for w in ranked[::-1][:N_EXAMPLES] if all(w is not b for b in best)]
    lines = [
        "## Examples",
        "",
        "Words that differ between generation and truth are in **bold**.",
        "",
        "### Best memorised",
        "",
    ]
    for w in best:
        lines += _example(w)
    if worst:
        lines += ["### Worst memorised", ""]
        for w in worst:
            lines += _example(w)
    return lines


def _numeric_strata(strata: Mapping[str, Mapping]) -> list[tuple[float, Mapping]]:
    """The strata with a positive numeric key: "unknown", prefix length -1 ("all": a placement, not a length) and
    repetitions 0 (nonmembers) are not points of a curve."""
    return [(float(k), r) for k, r in strata.items() if k.isdigit() and float(k) > 0]


# a curve of the per-run plots: (label, summary key, the stem of its interval's keys)
STRATA_CURVES = (
    ("exact match", "exact_match_rate", "exact_match"),
    ("ROUGE-L (rouge-score, the paper's)", "rouge_l_paper", "rouge_l_paper"),
)  # the one word-level ROUGE-L


def strata_series(strata: Mapping[str, Mapping]) -> dict[str, tuple[list, list]]:
    """Positive numeric strata -> {"exact match": (xs, ys), "ROUGE-L (rouge-score, the paper's)": (xs, ys)}."""
    points = _numeric_strata(strata)
    out = {}
    for label, key, _ in STRATA_CURVES:
        xy = [(x, r[key]) for x, r in points if r.get(key) is not None]
        if len(xy) >= 2:
            out[label] = ([x for x, _ in xy], [y for _, y in xy])
    return out


def strata_bands(strata: Mapping[str, Mapping]) -> dict[str, tuple[list, list]]:
    """Each curve's 95 % interval (lows, highs) aligned with :func:`strata_series`' points: Wilson's for exact match,
    the mean's normal interval for the paper's ROUGE-L (the summary's ``_ci_low`` / ``_ci_high``)."""
    out = {}
    for label, key, stem in STRATA_CURVES:
        rows = [r for _, r in _numeric_strata(strata) if r.get(key) is not None]
        out[label] = ([r.get(f"{stem}_ci_low") for r in rows], [r.get(f"{stem}_ci_high") for r in rows])
    return out


def report_plots(results: Mapping, out_dir: str | os.PathLike) -> list[Path]:
    """The per-run PNGs; a plot is skipped when its data is absent or has a single point."""
    out, s, paths = Path(out_dir), summary_of(results), []
    for key, name, label, logx in (
        ("by_prefix_len", "prefix_len", "prefix length (tokens)", False),
        ("by_repetitions", "repetitions", "repetitions in training (log)", True),
    ):
        strata = s.get(key) or {}
        series = strata_series(strata)
        if series:
            paths.append(
                line_plot(
                    series,
                    f"memorisation vs {name.replace('_', ' ')}",
                    label,
                    "fraction of windows / F1 (0-1, 95 % bands)",
                    out / f"memorisation_vs_{name}.png",
                    logx=logx,
                    fit=logx,
                    bands=strata_bands(strata),
                    unit_interval=True,
                )
            )
    attacks = attacks_of(results)
    if attacks:
        curves = {k: (a["roc_fpr"], a["roc_tpr"], a.get("auc")) for k, a in attacks.items() if a.get("roc_fpr")}
        paths.append(roc_plot(curves, "membership inference ROC", out / "roc.png"))
    by_split: dict[str, list] = {}
    for w in results.get("windows") or []:
        if w.get("token_match") is not None:
            by_split.setdefault(split_label(results, w.get("split")), []).append(w["token_match"])
    if by_split:
        paths.append(
            histogram(
                by_split, "token match per window", "fraction of suffix tokens reproduced", out / "token_match_hist.png"
            )
        )
    return paths


def write_report(results: dict, out_dir: str | os.PathLike) -> list[Path]:
    """Write ``report.md`` and its PNG plots into ``out_dir``; returns the paths written (report.md first)."""
    out = Path(out_dir)
    s = summary_of(results)
    plots = report_plots(results, out)
    lines = (
        _header(results)
        + _headline(s, attacks_of(results))
        + _audit(results)
        + _strata(s, results)
        + _partial(s, results)
    )
    lines += _membership(results)
    lines += _examples(results.get("windows") or [])
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    lines += _glossary()
    atomic_write_text(out / "report.md", "\n".join(lines))
    return [out / "report.md", *plots]
