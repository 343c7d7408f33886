"""The regurgitation audit: one verdict per document from its extraction windows (results.json ``documents``).

A document is **regurgitated** when the greedy continuation of at least one of its windows reproduces the window's
whole suffix (S tokens) verbatim (``exact_match``). Its **longest verbatim span** is the longest stretch of the
document every token of which greedy decoding reproduced: each window contributes the run from its first suffix
token to its first mistake (``longest_match_prefix``), and runs that meet or overlap join -- with stride = S the
suffixes tile the document, so k consecutive regurgitated windows make one span of k x S tokens (each window
decoded from the true text before it, as an extraction attack that knows where it is would). ``longest_span_offset``
is the token offset where the span begins; ties go to the earliest. A document too short for every requested window
gets one window by a rule (:func:`goldfish.eval.windows.short_window`: the suffix its last half, at most S tokens;
``short_window`` true) and its verdict like any other; only one too short for that (under 16 tokens with S >= 8) is
``too_short``: it is listed with that verdict and its length, never silently dropped.

With the default windows of a JSONL corpus (``stride``, stride = S) the suffixes tile each document from token P
to its end (:mod:`goldfish.eval.windows`), so "not regurgitated" means no S-token stretch after the first P
tokens came back verbatim from the P tokens before it.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .windows import ALL, MIN_SHORT_SUFFIX, SHORT, EvalDocument

VERDICTS = ("regurgitated", "not_regurgitated", "too_short")


def tokens_needed(prefix_lens: Sequence[int], suffix_len: int) -> int:
    """The fewest tokens a document needs for at least one window: the smallest prefix (1 for ``all``) + S."""
    return min(suffix_len + (1 if p == ALL else p) for p in prefix_lens)


def document_verdicts(
    docs: Sequence[EvalDocument], windows: Sequence[Mapping], prefix_lens: Sequence[int], suffix_len: int
) -> list[dict]:
    """One record per document of ``docs`` (in their order; ``windows``: the results' window records), with its
    verdict, windows, regurgitated windows and longest verbatim span (schema: eval/SCHEMA.md "documents")."""
    by_doc: dict[tuple, list[Mapping]] = {}
    for w in windows:
        by_doc.setdefault((w.get("split"), w.get("doc_id")), []).append(w)
    need = tokens_needed(prefix_lens, suffix_len)
    out = []
    for d in docs:
        own = by_doc.get((d.split, d.id), [])
        rec = {
            "doc_id": d.id,
            "title": d.title,
            "split": d.split,
            "n_tokens": len(d.tokens),
            "n_windows": len(own),
            "tokens_needed": need,
            "regurgitated_windows": sum(bool(w.get("exact_match")) for w in own),
            "short_window": any(w.get("window") == SHORT for w in own),
            "longest_span": None,
            "longest_span_offset": None,
            "n_windows_in_span": None,
        }
        if own:
            length, offset = longest_span(own)
            rec.update(
                longest_span=length,
                longest_span_offset=offset,
                n_windows_in_span=sum(
                    1 for w in own if _run(w)[1] > _run(w)[0] and offset <= _run(w)[0] < offset + max(length, 1)
                ),
            )
        rec["verdict"] = (
            "too_short" if not own else "regurgitated" if rec["regurgitated_windows"] else "not_regurgitated"
        )
        out.append(rec)
    return out


def _run(w: Mapping) -> tuple[int, int]:
    """The document tokens [begin, end) a window's greedy continuation reproduced before its first mistake."""
    begin = w["start"] + w["prefix_tokens"]
    return begin, begin + int(w.get("longest_match_prefix") or 0)


def longest_span(windows: Sequence[Mapping]) -> tuple[int, int]:
    """(length, offset) of the longest stretch of a document every token of which some window's greedy continuation
    reproduced (each run from its window's first suffix token to its first mistake; runs that meet or overlap join,
    so consecutive regurgitated windows make one span); the earliest on a tie, (0, first suffix offset) when no
    window reproduced a token."""
    runs = sorted(_run(w) for w in windows)
    best = (0, -runs[0][0])
    begin, end = runs[0]
    for b, e in runs[1:] + [(float("inf"), float("inf"))]:
        if b <= end:  # meets or overlaps the current span
            end = max(end, e)
            continue
        if end - begin > 0:
            best = max(best, (end - begin, -begin))
        begin, end = b, e
    return int(best[0]), int(-best[1])


def regurgitated(documents: Sequence[Mapping]) -> list[Mapping]:
    """The regurgitated documents, longest verbatim span first, then most regurgitated windows, then id."""
    hits = [d for d in documents if d.get("verdict") == "regurgitated"]
    return sorted(
        hits, key=lambda d: (-(d.get("longest_span") or 0), -(d.get("regurgitated_windows") or 0), str(d.get("doc_id")))
    )


def _ids(docs: Sequence[Mapping]) -> str:
    return ", ".join(f"{d['doc_id']} ({d['n_tokens']})" for d in docs[:10]) + (
        f" and {len(docs) - 10} more" if len(docs) > 10 else ""
    )


def too_short_line(documents: Sequence[Mapping], suffix_len: int) -> str | None:
    """The console's lines on documents shorter than the requested windows: those given a short window, those too
    short for any (None when there are none)."""
    fitted = [d for d in documents if d.get("short_window")]
    short = [d for d in documents if d.get("verdict") == "too_short"]
    lines = []
    if fitted:
        lines.append(
            f"{len(fitted)} of {len(documents)} documents are shorter than the requested windows "
            f"({fitted[0]['tokens_needed']} tokens: prefix + suffix_len={suffix_len}): each gets one window, "
            f"placement 'short', its last half (at most {suffix_len} tokens) as the suffix: {_ids(fitted)}"
        )
    if short:
        floor = min(suffix_len, MIN_SHORT_SUFFIX)
        lines.append(
            f"{len(short)} of {len(documents)} documents are too short for any window (fewer than "
            f"{2 * floor} tokens: its last half as the suffix, at least {floor} tokens), unanswered: "
            f"{_ids(short)}"
        )
    return "\n".join(lines) or None
