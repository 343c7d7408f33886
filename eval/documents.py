"""The regurgitation audit: one verdict per document from its extraction windows (results.json ``documents``).

A document is **regurgitated** when the greedy continuation of at least one of its windows reproduces the window's
whole suffix (S tokens) verbatim (``exact_match``). Its **longest verbatim span** is the longest run of suffix
tokens greedy decoding reproduced before its first mistake (``longest_match_prefix``) over all its windows, and
``longest_span_offset`` the token offset in the document where that run begins (the window's start + its prefix
length); ties go to the earliest offset. A document with no window (fewer tokens than the smallest prefix +
suffix) is ``too_short``: it is listed with that verdict, never silently dropped.

With the default windows of a JSONL corpus (``stride``, stride = S) the suffixes tile each document from token P
to its end (:mod:`goldfish.eval.windows`), so "not regurgitated" means no S-token stretch after the first P
tokens came back verbatim from the P tokens before it.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .windows import ALL, EvalDocument

VERDICTS = ("regurgitated", "not_regurgitated", "too_short")


def tokens_needed(prefix_lens: Sequence[int], suffix_len: int) -> int:
    """The fewest tokens a document needs for at least one window: the smallest prefix (1 for ``all``) + S."""
    return min(suffix_len + (1 if p == ALL else p) for p in prefix_lens)


def document_verdicts(docs: Sequence[EvalDocument], windows: Sequence[Mapping], prefix_lens: Sequence[int],
                      suffix_len: int) -> list[dict]:
    """One record per document of ``docs`` (in their order; ``windows``: the results' window records), with its
    verdict, windows, regurgitated windows and longest verbatim span (schema: eval/SCHEMA.md "documents")."""
    by_doc: dict[tuple, list[Mapping]] = {}
    for w in windows:
        by_doc.setdefault((w.get("split"), w.get("doc_id")), []).append(w)
    need = tokens_needed(prefix_lens, suffix_len)
    out = []
    for d in docs:
        own = by_doc.get((d.split, d.id), [])
        rec = {"doc_id": d.id, "title": d.title, "split": d.split, "n_tokens": len(d.tokens), "n_windows": len(own),
               "tokens_needed": need, "regurgitated_windows": sum(bool(w.get("exact_match")) for w in own),
               "longest_span": None, "longest_span_offset": None, "longest_span_window_start": None}
        if own:
            best = max(own, key=lambda w: (int(w.get("longest_match_prefix") or 0),
                                           -(w["start"] + w["prefix_tokens"])))
            rec.update(longest_span=int(best.get("longest_match_prefix") or 0),
                       longest_span_offset=best["start"] + best["prefix_tokens"],
                       longest_span_window_start=best["start"])
        rec["verdict"] = ("too_short" if not own else
                          "regurgitated" if rec["regurgitated_windows"] else "not_regurgitated")
        out.append(rec)
    return out


def regurgitated(documents: Sequence[Mapping]) -> list[Mapping]:
    """The regurgitated documents, longest verbatim span first, then most regurgitated windows, then id."""
    hits = [d for d in documents if d.get("verdict") == "regurgitated"]
    return sorted(hits, key=lambda d: (-(d.get("longest_span") or 0), -(d.get("regurgitated_windows") or 0),
                                       str(d.get("doc_id"))))


def too_short_line(documents: Sequence[Mapping], suffix_len: int) -> str | None:
    """The console's line on documents too short for a window (None when there are none)."""
    short = [d for d in documents if d.get("verdict") == "too_short"]
    if not short:
        return None
    need = short[0]["tokens_needed"]
    ids = ", ".join(str(d["doc_id"]) for d in short[:10]) + (f" and {len(short) - 10} more" if len(short) > 10 else "")
    return (f"{len(short)} of {len(documents)} documents skipped as too short: a window needs at least {need} tokens "
            f"(prefix + suffix_len={suffix_len}), they have {min(d['n_tokens'] for d in short)}-"
            f"{max(d['n_tokens'] for d in short)} ({ids}); lower data.prefix_lens or data.suffix_len to cover them")
