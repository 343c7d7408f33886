"""``report.html``: an evaluation a data owner can read, one self-contained page from ``results.json`` alone.

:func:`render_html` is a pure function of the results dict (and, optionally, the SVG copies of the report's
figures): the headline first (per window placement and split: exact match, ROUGE-L, one-pass top-1 accuracy with
their 95 % intervals, the membership attack's AUC and TPR, the verdict on each split's documents, the provenance),
then every document in a sortable, filterable, paged table (100 a page) that opens to the document's text with the
tokens greedy decoding reproduced highlighted and the prompt marked, its per-window top-1 accuracy along the
document, and the model's continuation beside the truth wherever they diverge; then the figures and the
definitions (closed ``<details>``). :func:`write_html` writes it beside report.md; to rebuild it from committed
results::

    import json; from goldfish.eval.html_report import write_html
    write_html(json.load(open("out/results.json")), "out")

Documents are untrusted input: every text is escaped, and the document table travels as JSON the page's script
renders through ``textContent`` (:mod:`goldfish.eval.html_page`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from goldfish.io import atomic_write_text

from .aggregate import summarize_group
from .html_page import definitions, esc, figure, page, provenance, svg_figures, table
from .tables import fmt_auc, fmt_ci, fmt_exact, fmt_tpr

PAGE_SIZE = 100  # table rows a page
BIN = 8  # tokens a bar of the per-token accuracy profile averages
FIGURES = ("memorisation_vs_prefix_len", "memorisation_vs_repetitions", "roc", "token_match_hist")  # report.py's
SPLIT_WORD = {"members": "member documents", "nonmembers": "nonmember documents"}

GLOSSARY = (
    (
        "exact match",
        "the greedy continuation of a window's prefix equals its whole true suffix (S tokens); the rate "
        "over windows with its Wilson 95 % interval.",
    ),
    (
        "ROUGE-L (rouge-score)",
        "ROUGE-L F1 of the continuation against the truth as the Goldfish paper computes it "
        "(rouge-score's rougeL on the decoded texts); mean with a 95 % interval.",
    ),
    (
        "one-pass top-1 accuracy",
        "teacher-forced: the share of suffix tokens that are the model's most likely next "
        "token given the true text before them; shows partial memorisation where exact match is 0.",
    ),
    ("regurgitated", "a document at least one of whose windows came back verbatim (exact match)."),
    (
        "longest verbatim span",
        "the longest stretch of the document every token of which greedy decoding reproduced, "
        "each window decoded from the true text before it up to its first mistake; consecutive windows join.",
    ),
    ("matched fraction", "the document's reproduced tokens (highlighted) over its evaluated suffix tokens."),
    (
        "membership score",
        "the headline membership attack's score of the whole document (higher = more likely a "
        "training member); its ROC-AUC over members vs nonmembers, with a bootstrap 95 % interval, and the TPR at 1 % "
        "FPR (shown only with at least 100 nonmembers).",
    ),
    ("prompt", "tokens that are only ever context (the first window's prefix): marked grey in a document's text."),
    (
        "accuracy along the document",
        "one-pass top-1 accuracy of the true token at each evaluated position, a bar per "
        f"{BIN} tokens (per window where the results hold no per-token hits), orange where greedy decoding reproduced "
        "them all; a locally memorised passage stands out against the rest of the document.",
    ),
)


def _headline_attack(results: Mapping) -> tuple[str | None, Mapping]:
    attacks = ((results.get("membership") or {}).get("attacks")) or {}
    name = "loss" if "loss" in attacks else next(iter(attacks), None)
    return name, attacks.get(name) or {}


def verdict_lines(results: Mapping) -> list[str]:
    """One sentence per split: how many of its documents came back verbatim, how many were too short, the
    longest span (members and nonmembers never pooled)."""
    docs = results.get("documents") or []
    has_non = bool((results.get("data") or {}).get("nonmembers"))
    out = []
    for split in dict.fromkeys(d.get("split") or "members" for d in docs):
        own = [d for d in docs if (d.get("split") or "members") == split]
        hits = [d for d in own if d.get("verdict") == "regurgitated"]
        short = [d for d in own if d.get("verdict") == "too_short"]
        word = SPLIT_WORD.get(split, f"{split} documents") if has_non else "documents"
        line = f"{len(hits)} of {len(own)} {word} regurgitated"
        if short:
            line += f" ({len(short)} too short for any window)"
        if hits:
            top = max(hits, key=lambda d: (d.get("longest_span") or 0, -(d.get("longest_span_offset") or 0)))
            line += (
                f"; longest verbatim span {top.get('longest_span')} tokens in {top.get('doc_id')} at token "
                f"{top.get('longest_span_offset')}"
            )
        out.append(line + ".")
    extracted = {d.get("split") or "members" for d in docs}
    scored_only = [
        k for k, ids in (((results.get("membership") or {}).get("doc_ids")) or {}).items() if ids and k not in extracted
    ]
    out += [
        f"{len(results['membership']['doc_ids'][k])} {SPLIT_WORD.get(k, k)}: scored for membership, not "
        f"extracted (data.extract_splits)."
        for k in scored_only
    ]
    name, a = _headline_attack(results)
    if name:
        m = results["membership"]
        out.append(
            f"Membership ({name} attack, {m.get('n_members')} members vs {m.get('n_nonmembers')} nonmembers): "
            f"AUC {fmt_auc(a)}; TPR at 1 % FPR {fmt_tpr(a, 'tpr_at_1pct_fpr', pct=True)}."
        )
    return out


def extraction_rows(results: Mapping) -> list[list[str]]:
    """The headline table: one row per (placement, split) of the windows -- placements never pooled, members and
    nonmembers apart -- with exact match, ROUGE-L, token match and one-pass top-1 accuracy and their intervals."""
    windows = results.get("windows") or []
    groups: dict[tuple, list] = {}
    for w in windows:
        groups.setdefault((w.get("window"), w.get("split") or "members"), []).append(w)
    rows = []
    for (placement, split), own in groups.items():
        r = summarize_group(own)
        rows.append(
            [
                placement,
                split,
                r["n_windows"],
                fmt_exact(r),
                fmt_ci(r, "rouge_l_paper"),
                fmt_ci(r, "token_match"),
                fmt_ci(r, "onepass_token_acc"),
            ]
        )
    if not rows:  # results without windows (a summary only)
        for placement, r in (((results.get("summary") or {}).get("by_window")) or {}).items():
            rows.append(
                [
                    placement,
                    "all",
                    r.get("n_windows"),
                    fmt_exact(r),
                    fmt_ci(r, "rouge_l_paper"),
                    fmt_ci(r, "token_match"),
                    fmt_ci(r, "onepass_token_acc"),
                ]
            )
    return rows


def _weights(model: Mapping) -> str | None:
    """The weight files as results.json ``model.weights`` names them: ``[file, bytes, sha256]`` (a content hash), or
    ``[file, bytes, mtime_ns]`` in older results (then said so)."""
    files = model.get("weights") or []
    return (
        "; ".join(
            f"{f[0]} ({f[1]} B, sha256 {f[2]})"
            if isinstance(f[2], str)
            else f"{f[0]} ({f[1]} B, identified by size and time only)"
            for f in files
            if len(f) >= 3
        )
        or None
    )


def provenance_items(results: Mapping) -> list[tuple[str, Any]]:
    model, data = results.get("model") or {}, results.get("data") or {}
    dev = model.get("device") or {}
    precision = model.get("precision")
    if precision and model.get("checkpoint_precision") and model["checkpoint_precision"] != precision:
        precision = f"{precision} (checkpoint: {model['checkpoint_precision']})"
    return [
        ("model", model.get("path")),
        ("revision", model.get("revision")),
        ("weights", _weights(model)),
        ("nature", model.get("nature")),
        ("parameters", model.get("num_parameters")),
        ("data", data.get("path")),
        ("documents sha256", data.get("documents_sha256")),
        ("windows sha256", data.get("sha256")),
        ("code", results.get("code")),
        ("git", results.get("git")),
        ("device", " ".join(str(x) for x in (dev.get("type"), dev.get("name")) if x)),
        ("precision", precision),
        ("written", results.get("created")),
    ]


def _union(intervals: Sequence[tuple[int, int]]) -> int:
    total, end = 0, None
    for b, e in sorted(i for i in intervals if i[1] > i[0]):
        if end is None or b > end:
            total, end = total + e - b, e
        elif e > end:
            total, end = total + e - end, e
    return total


def profile(windows: Sequence[Mapping]) -> list[list]:
    """[[begin, end, accuracy, reproduced], ...] along a document: bars of :data:`BIN` tokens from the windows'
    per-token ``onepass_hits`` (a token several windows score: its first), else one bar per window."""
    spans = [_suffix(w) for w in windows]
    if not windows or any(not isinstance(w.get("onepass_hits"), str) for w in windows):
        return [
            [b, e, w["onepass_token_acc"], bool(w.get("exact_match"))]
            for (b, e, _), w in zip(spans, windows)
            if w.get("onepass_token_acc") is not None
        ]
    hits: dict[int, bool] = {}
    reproduced: set[int] = set()
    for (b, _, r), w in zip(spans, windows):
        for i, h in enumerate(w["onepass_hits"]):
            hits.setdefault(b + i, h == "1")
        reproduced.update(range(b, r))
    bars: dict[int, list[int]] = {}
    for pos in sorted(hits):
        bars.setdefault(pos // BIN, []).append(pos)
    return [
        [ps[0], ps[-1] + 1, sum(hits[p] for p in ps) / len(ps), all(p in reproduced for p in ps)]
        for ps in bars.values()
    ]


def _suffix(w: Mapping) -> tuple[int, int, int]:
    """(begin, end, reproduced end) of a window's suffix in document tokens."""
    begin = int(w.get("start") or 0) + int(w.get("prefix_tokens") or 0)
    n = len(w.get("truth_ids") or []) or int(w.get("suffix_len") or 0)
    return begin, begin + n, begin + int(w.get("longest_match_prefix") or 0)


COLUMNS = (
    ("doc_id", "document", False),
    ("title", "title", False),
    ("split", "split", False),
    ("n_tokens", "tokens", True),
    ("n_windows", "windows", True),
    ("verdict", "verdict", False),
    ("longest_span", "longest verbatim span", True),
    ("longest_span_offset", "at token", True),
    ("matched", "matched fraction", True),
    ("top1", "top-1 acc", True),
    ("score", "membership score", True),
)


def document_data(results: Mapping) -> dict:
    """The page's table: one row per document (every extracted one, and every scored nonmember not extracted), and
    for each its detail: text segments, per-window accuracy, diverging continuations."""
    by_doc: dict[tuple, list] = {}
    for w in results.get("windows") or []:
        by_doc.setdefault((w.get("split") or "members", w.get("doc_id")), []).append(w)
    name, _ = _headline_attack(results)
    m = results.get("membership") or {}
    scores: dict[tuple, float] = {}
    for split, ids in (m.get("doc_ids") or {}).items() if name else ():
        for doc_id, s in zip(ids, ((m.get("scores") or {}).get(name) or {}).get(split) or []):
            scores[(split, doc_id)] = s
    docs = list(results.get("documents") or [])
    seen = {(d.get("split") or "members", d.get("doc_id")) for d in docs}
    docs += [{"doc_id": k[1], "split": k[0], "verdict": "not extracted"} for k in scores if k not in seen]
    rows, details = [], []
    for d in docs:
        key = (d.get("split") or "members", d.get("doc_id"))
        own = sorted(by_doc.get(key, []), key=lambda w: (_suffix(w)[0], str(w.get("window"))))
        spans = [_suffix(w) for w in own]
        evaluated = _union([(b, e) for b, e, _ in spans])
        accs = [w.get("onepass_token_acc") for w in own if w.get("onepass_token_acc") is not None]
        rows.append(
            [
                d.get("doc_id"),
                d.get("title") or "",
                key[0],
                d.get("n_tokens"),
                d.get("n_windows"),
                d.get("verdict"),
                d.get("longest_span"),
                d.get("longest_span_offset"),
                _union([(b, r) for b, _, r in spans]) / evaluated if evaluated else None,
                sum(accs) / len(accs) if accs else None,
                scores.get(key),
                len(details),
            ]
        )
        details.append(
            {
                "n_tokens": d.get("n_tokens") or max((e for _, e, _ in spans), default=1),
                "segments": d.get("segments") or [],
                "profile": profile(own),
                "pairs": [
                    [b, int(w.get("longest_match_prefix") or 0), e - b, w.get("truth") or "", w.get("generation") or ""]
                    for (b, e, _), w in zip(spans, own)
                    if not w.get("exact_match") and w.get("truth") is not None
                ],
            }
        )
    columns = [
        {"key": k, "label": label, "num": num, "float": k in ("matched", "top1", "score")} for k, label, num in COLUMNS
    ]
    columns.append({"key": "detail", "label": "", "num": True, "hidden": True})
    return {"columns": columns, "rows": rows, "details": details, "page_size": PAGE_SIZE}


def controls(
    rows: Sequence[Sequence], columns: Sequence[Mapping], choices: Sequence[str] = ("split", "verdict")
) -> str:
    """The table's filter box, a choice of value for each column in ``choices``, and the pager."""

    def select(key: str) -> str:
        i = next(j for j, c in enumerate(columns) if c["key"] == key)
        values = dict.fromkeys(r[i] for r in rows)
        opts = "".join(f'<option value="{esc(str(v))}">{esc(str(v))}</option>' for v in values)
        return (
            f'<label>{esc(columns[i]["label"])} <select data-key="{esc(key)}"><option value="">all</option>'
            f"{opts}</select></label>"
        )

    return (
        '<div class="controls"><input id="q" type="search" placeholder="filter by id or title">'
        + "".join(select(k) for k in choices)
        + '<button id="prev">&#9664; previous</button><button id="next">next &#9654;</button>'
        '<span id="pageinfo" class="small"></span></div>'
    )


def documents_html(data: Mapping, title: str = "Documents", choices: Sequence[str] = ("split", "verdict")) -> str:
    """The document table's frame (the script fills it from the data island)."""
    return (
        f'<h2>{esc(title)}</h2><p class="small">Click a column\'s header to sort (again to reverse), a row to '
        f"open its document: reproduced tokens highlighted, the prompt grey.</p>"
        + controls(data["rows"], data["columns"], choices)
        + '<table id="docs"><thead><tr></tr></thead><tbody></tbody></table>'
    )


def render_html(results: Mapping, figures: Mapping[str, bytes] | None = None) -> str:
    """The whole page (a pure function of ``results`` and the optional ``{name: SVG}`` figures)."""
    model = results.get("model") or {}
    ex = ((results.get("config") or {}).get("data")) or {}
    data = document_data(results)
    head = [f"<h1>Memorisation audit of {esc(str(model.get('path') or 'a model'))}</h1>"]
    head += [f'<p class="verdict">{esc(line)}</p>' for line in verdict_lines(results)]
    rows = extraction_rows(results)
    if rows:
        head.append(
            f'<p class="small">Windows: prefix {esc(str(ex.get("prefix_lens")))} tokens, suffix '
            f"{esc(str(ex.get('suffix_len')))} tokens, placements {esc(str(ex.get('window')))}.</p>"
        )
        head.append(
            table(
                [
                    "placement",
                    "split",
                    "windows",
                    "exact match [95 % CI]",
                    "ROUGE-L (rouge-score) [CI]",
                    "token match [CI]",
                    "one-pass top-1 acc [CI]",
                ],
                rows,
                numeric_from=2,
            )
        )
    attacks = ((results.get("membership") or {}).get("attacks")) or {}
    if attacks:
        arows = [
            [k, fmt_auc(a), fmt_tpr(a, "tpr_at_1pct_fpr", pct=True), a.get("n_members"), a.get("n_nonmembers")]
            for k, a in attacks.items()
        ]
        head.append(
            "<details><summary>every membership attack</summary>"
            + table(["attack", "AUC [95 % CI]", "TPR @ 1 % FPR", "members", "nonmembers"], arows)
            + "</details>"
        )
    head.append(provenance(provenance_items(results)))
    body = '<section id="headline">' + "\n".join(head) + "</section>"
    body += documents_html(data)
    if figures:
        body += "<h2>Figures</h2>" + "".join(figure(k, v) for k, v in figures.items())
    body += "<h2>Definitions</h2>" + definitions(GLOSSARY)
    return page(f"goldfish eval: {model.get('path') or ''}", body, data)


def write_html(results: Mapping, out_dir: str | os.PathLike, figures: Mapping[str, bytes] | None = None) -> Path:
    """Write ``report.html`` into ``out_dir`` (atomically), with the report's figures found there as SVG (by
    default); returns its path."""
    out = Path(out_dir)
    figs = svg_figures(out, FIGURES) if figures is None else figures
    path = out / "report.html"
    atomic_write_text(path, render_html(results, figs))
    return path
