"""Every table's formatting: Markdown and terminal tables, and how a number, a rate, an interval, a p-value or a
difference of two texts is written in them -- for eval's report and the experiment's study report alike.

Two conventions live side by side, each kept by the reports that use it: eval's report writes a missing value as
"–" (``fmt_*``); the study report writes it as "-" (:func:`fmt` and the helpers below it).
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Mapping, Sequence

_MD_SPECIAL = set("\\`*_[]<>|~#")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table (cells are str()-ed, pipes escaped)."""

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, headers)) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines)


def markdown_section(title: str, *blocks: str) -> str:
    """A report section: ``## title`` and each block (a table, a paragraph), a blank line after each."""
    return "\n".join(line for block in (f"## {title}", *blocks) for line in (block, ""))


def plain_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A fixed-width table for the terminal: left-aligned columns two spaces apart."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header)] + [fmt.format(*r) for r in rows])


def escape_markdown(word: str) -> str:
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
        g = " ".join(escape_markdown(w) for w in gen[g0:g1])
        r = " ".join(escape_markdown(w) for w in ref[r0:r1])
        if op == "equal":
            out_gen.append(g)
            out_ref.append(r)
            continue
        if g:
            out_gen.append(f"**{g}**")
        if r:
            out_ref.append(f"**{r}**")
    return " ".join(out_gen), " ".join(out_ref)


# ------------------------------------------------------------------------------------------------ eval's report


def fmt_pct(v: Any) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def fmt_num(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    return str(v) if isinstance(v, int) else f"{v:.{digits}f}"


def fmt_auc(a: Mapping) -> str:
    if a.get("auc_p_method") == "perfect":  # every resample separates too: the exact p, not a [1, 1] interval
        return (
            f"{a['auc']:.3f} (perfect separation of {a.get('n_members')} vs {a.get('n_nonmembers')}: "
            f"p = 10^{a['auc_log10_p']:.1f}, exact)"
        )
    if a.get("auc_ci_low") is None:
        return fmt_num(a.get("auc"))
    return f"{a['auc']:.3f} [{a['auc_ci_low']:.3f}, {a['auc_ci_high']:.3f}]"


def fmt_tpr(a: Mapping, key: str, pct: bool = False) -> str:
    """A TPR at a target FPR, or the note that there are too few nonmembers to measure that FPR."""
    note = a.get(f"{key}_note")
    if note:
        return f"- ({note.split(':')[0]})"
    return fmt_pct(a.get(key)) if pct else fmt_num(a.get(key))


def fmt_exact(row: Mapping) -> str:
    if row.get("exact_match_ci_low") is None:
        return fmt_pct(row.get("exact_match_rate"))
    return (
        f"{fmt_pct(row.get('exact_match_rate'))} [{100 * row['exact_match_ci_low']:.1f}, "
        f"{100 * row['exact_match_ci_high']:.1f}]"
    )


def fmt_ci(row: Mapping, key: str, digits: int = 3) -> str:
    """``value [low, high]`` of a summary row's ``key`` and its ``key_ci_low``/``_ci_high``."""
    low, high = row.get(f"{key}_ci_low"), row.get(f"{key}_ci_high")
    if row.get(key) is None or low is None or high is None:
        return fmt_num(row.get(key), digits)
    return f"{row[key]:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


# ------------------------------------------------------------------------------------------------ the study report


def fmt(value: Any, kind: str = "") -> str:
    """A table entry: "-" for a missing or NaN value; ``kind`` pct (``12.3 %``), int (``1,234``), params (``1.23 M``
    / ``1.23 B``), s (``12 s``); a float with 3 decimals; anything else as ``str``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if kind == "pct":
        return f"{100 * value:.1f} %"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "params":
        return f"{value / 1e6:.2f} M" if value < 1e9 else f"{value / 1e9:.2f} B"
    if kind == "s":
        return f"{value:.0f} s"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def ci_suffix(low: Any, high: Any) -> str:
    """`` [low, high]`` (3 decimals) after a value, or nothing without an interval."""
    return f" [{fmt(low)}, {fmt(high)}]" if low is not None else ""


def with_ci(value: Any, low: Any, high: Any, kind: str = "") -> str:
    """``value [low, high]`` in :func:`fmt`'s ``kind``; the value alone without an interval."""
    return fmt(value, kind) + (f" [{fmt(low, kind)}, {fmt(high, kind)}]" if low is not None else "")


def boot(r: Mapping | None) -> str:
    """A rate over windows or positions with its interval over documents (a ``cluster_bootstrap_mean`` dict)."""
    r = r or {}
    return with_ci(r.get("mean"), r.get("ci_low"), r.get("ci_high"), "pct")


def pct(v: float | None) -> str:
    """A rate as a percentage number without the sign (``12.3``), "-" when missing."""
    return "-" if v is None else f"{100 * v:.1f}"


def interval(v: Mapping | None, key: str = "auc") -> str:
    """``v[key]`` with its ``[low, high]`` (3 decimals), "-" when absent."""
    if not v or v.get(key) is None:
        return "-"
    return f"{v[key]:.3f}" + (f" [{v['low']:.3f}, {v['high']:.3f}]" if v.get("low") is not None else "")


def num(v: float | None, as_pct: bool = False) -> str:
    """A number with 3 decimals, or a rate as ``12.3 %``; "-" for None or NaN."""
    if v is None or v != v:  # None or NaN
        return "-"
    return f"{100 * v:.1f} %" if as_pct else f"{v:.3f}"


def p_text(p: float | None, n_bootstrap: int = 1000) -> str:
    """A p-value; a bootstrap p-value of 0 as its resolution, ``< 2 / n_bootstrap``."""
    if p is None:
        return "-"
    if p == 0:  # a bootstrap p-value: every resample on one side
        return f"< {2 / n_bootstrap:g}"
    return f"{p:.3g}" if p >= 1e-3 else f"{p:.1e}"


def bootstrap_text(d: Mapping | None, as_pct: bool = False) -> str:
    """``a / b, diff [low, high] (p)`` of a paired bootstrap result."""
    if not d or d.get("diff") is None:
        return "-"
    a, b = d.get("a"), d.get("b")
    return (
        f"{num(a, as_pct)} / {num(b, as_pct)}, {num(d['diff'], as_pct)} [{num(d.get('ci_low'), as_pct)}, "
        f"{num(d.get('ci_high'), as_pct)}] (p {p_text(d.get('p_value'))})"
    )


def did_text(d: Mapping | None, kind: str = "") -> str:
    """A difference in differences with its 95 % interval and bootstrap p-value."""
    if not d or d.get("did") is None:
        return "-"
    p = f" (p {p_text(d['p_value'])})" if d.get("p_value") is not None else ""
    return with_ci(d["did"], d.get("ci_low"), d.get("ci_high"), kind) + p


def prefix_text(p: Any) -> str:
    """A prefix length as a table shows it: ``prefix 32``, or ``all`` (-1: all but the suffix)."""
    return "all" if p == -1 else f"prefix {p}"


def mcnemar_text(em: Mapping) -> str:
    """``4 vs 0 discordant documents (8 vs 0 windows; p 0.125)`` of a document-level McNemar result
    (``goldfish.eval.stats.document_mcnemar``); ``4 vs 0 discordant (p 0.125)`` with one window per document (and
    for an older result without the document counts)."""
    if em.get("test") == "document sign test":
        return (
            f"{em['a_only_documents']} vs {em['b_only_documents']} discordant documents ({em['a_only']} vs "
            f"{em['b_only']} windows; p {p_text(em['p_value'])})"
        )
    return f"{em['a_only']} vs {em['b_only']} discordant (p {p_text(em['p_value'])})"
