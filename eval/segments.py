"""A document's text cut where its verdicts change (results.json ``documents[].segments``), for report.html.

Each document token is one of three kinds: ``r`` reproduced (some window's greedy continuation had it right, from
the window's first suffix token up to its first mistake: the runs :mod:`goldfish.eval.documents` joins into the
longest verbatim span), ``s`` evaluated but not reproduced (inside some window's suffix), ``p`` prompt only (never
inside a suffix: the first window's prefix, gaps between placements). Consecutive tokens of one kind make one
segment ``[start, end, kind, text]`` (token offsets, ``text`` the decoded tokens), so the page shows the document
with the reproduced tokens marked without a tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

KINDS = {0: "p", 1: "s", 2: "r"}


def document_segments(
    tokens: Sequence[int], windows: Sequence[Mapping], decode: Callable[[Sequence[int]], str]
) -> list[list]:
    """``[[start, end, kind, text], ...]`` covering ``tokens`` in order (``windows``: the document's window records,
    with ``start``, ``prefix_tokens``, ``truth_ids`` or ``suffix_len``, ``longest_match_prefix``)."""
    n = len(tokens)
    if not n:
        return []
    suffix, run = [0] * (n + 1), [0] * (n + 1)  # difference arrays of the suffixes and the reproduced runs
    for w in windows:
        begin = int(w["start"]) + int(w["prefix_tokens"])
        length = len(w.get("truth_ids") or []) or int(w.get("suffix_len") or 0)
        for diff, end in ((suffix, begin + length), (run, begin + int(w.get("longest_match_prefix") or 0))):
            lo, hi = max(0, min(begin, n)), max(0, min(end, n))
            if hi > lo:
                diff[lo] += 1
                diff[hi] -= 1
    kinds, in_suffix, in_run = [], 0, 0
    for i in range(n):
        in_suffix += suffix[i]
        in_run += run[i]
        kinds.append(2 if in_run else 1 if in_suffix else 0)
    out, start = [], 0
    for i in range(1, n + 1):
        if i == n or kinds[i] != kinds[start]:
            out.append([start, i, KINDS[kinds[start]], decode(tokens[start:i])])
            start = i
    return out


def attach_segments(
    documents: list[dict], docs: Sequence, windows: Sequence[Mapping], decode: Callable[[Sequence[int]], str]
) -> None:
    """Add ``segments`` to each record of ``documents`` (aligned with the :class:`EvalDocument` list ``docs``, as
    :func:`goldfish.eval.documents.document_verdicts` returns them) from its window records."""
    by_doc: dict[tuple, list] = {}
    for w in windows:
        by_doc.setdefault((w.get("split"), w.get("doc_id")), []).append(w)
    for record, doc in zip(documents, docs):
        record["segments"] = document_segments(doc.tokens, by_doc.get((doc.split, doc.id), []), decode)
