"""A study's ``report.html`` beside its report.md: one self-contained page from ``results.json`` alone.

The headline first -- one row per cell (arm): exact match and ROUGE-L with their intervals, the headline membership
attack's AUC (interval or exact p) and TPR at 1 % FPR (or why not), the held-out loss -- with the provenance (code,
start model, device, precision, prepared data); then the example windows of every arm in the sortable, filterable
table of :mod:`goldfish.eval.html_report` (each opening to its continuation beside the truth); then every section of
report.md (:func:`goldfish.experiment.report.render`, so the verdict words are the report's own) rendered as HTML
with the figures inline. Rebuilt from committed results with::

    import json; from goldfish.experiment.html_report import write_html
    write_html(json.load(open("experiments/results/default/results.json")), "experiments/results/default")
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..eval.html_page import esc, markdown_html, page, provenance, svg_figures, table
from ..eval.html_report import documents_html
from ..eval.tables import fmt, fmt_auc, with_ci
from ..io import atomic_write_text
from .report import render


def headline_rows(results: Mapping) -> list[list[Any]]:
    """One row per cell, in the results' order."""
    rows = []
    for c in results.get("cells") or []:
        mia = {"auc": c.get("mia_auc"), "auc_ci_low": c.get("mia_auc_ci_low"), "auc_ci_high": c.get("mia_auc_ci_high")}
        p = c.get("mia_auc_p") or {}
        auc = fmt_auc(mia) if c.get("mia_auc") is not None else "-"
        if isinstance(p, Mapping) and p.get("method") == "perfect":
            auc = (
                f"{fmt(c.get('mia_auc'))} (perfect separation of {p.get('n_members')} vs {p.get('n_nonmembers')}: "
                f"p = 10^{p.get('log10_p'):.1f}, exact)"
            )
        tpr = (
            f"- ({c['mia_tpr_at_1pct_fpr_note'].split(':')[0]})"
            if c.get("mia_tpr_at_1pct_fpr_note")
            else fmt(c.get("mia_tpr_at_1pct_fpr"), "pct")
        )
        rows.append(
            [
                c.get("cell"),
                c.get("arm"),
                c.get("mia_attack") or "-",
                fmt(c.get("n_windows"), "int"),
                with_ci(c.get("exact_match_rate"), c.get("exact_match_ci_low"), c.get("exact_match_ci_high"), "pct"),
                fmt(c.get("rouge_l_paper")),
                fmt(c.get("token_match")),
                auc,
                tpr,
                fmt(c.get("heldout_loss")),
            ]
        )
    return rows


def provenance_items(results: Mapping) -> list[tuple[str, Any]]:
    cells = results.get("cells") or [{}]
    first = cells[0]
    dev = first.get("device") or {}
    cfg = results.get("config") or {}
    return [
        ("experiment", results.get("experiment")),
        ("start model", results.get("start_model")),
        ("data", cfg.get("data_recipe")),
        ("data settings", cfg.get("data")),
        ("code", ", ".join(dict.fromkeys(str(c.get("code")) for c in cells if c.get("code"))) or None),
        ("git", first.get("git")),
        ("device", " ".join(str(x) for x in (dev.get("type"), dev.get("name")) if x)),
        ("training precision", ", ".join(dict.fromkeys(str(c.get("precision")) for c in cells if c.get("precision")))),
        (
            "evaluation precision",
            ", ".join(dict.fromkeys(str(c.get("eval_precision")) for c in cells if c.get("eval_precision"))),
        ),
    ]


COLUMNS = (
    ("doc_id", "document", False),
    ("title", "title", False),
    ("arm", "arm", False),
    ("verdict", "verdict", False),
    ("prefix_len", "prefix", True),
    ("rouge_l_paper", "ROUGE-L", True),
    ("rouge_l", "ROUGE-L (tokens)", True),
)


def example_data(results: Mapping) -> dict:
    """The report's example windows (results ``examples``) as the page's table: one row per (arm, window)."""
    rows, details = [], []
    for ex in results.get("examples") or []:
        for w in ex.get("windows") or []:
            rows.append(
                [
                    w.get("doc_id"),
                    w.get("title") or "",
                    ex.get("arm"),
                    "verbatim" if w.get("exact_match") else "not verbatim",
                    w.get("prefix_len"),
                    w.get("rouge_l_paper"),
                    w.get("rouge_l"),
                    len(details),
                ]
            )
            details.append(
                {
                    "pairs": [[None, None, None, w.get("truth") or "", w.get("generation") or ""]]
                    if not w.get("exact_match")
                    else [],
                    "segments": [[0, 0, "r" if w.get("exact_match") else "s", w.get("truth") or ""]],
                }
            )
    columns = [{"key": k, "label": label, "num": num, "float": k.startswith("rouge")} for k, label, num in COLUMNS]
    columns.append({"key": "detail", "label": "", "num": True, "hidden": True})
    return {"columns": columns, "rows": rows, "details": details, "page_size": 100}


def render_html(results: Mapping, figures: Mapping[str, bytes] | None = None) -> str:
    """The study's page: a pure function of ``results`` (and the optional ``{name: SVG}`` figures)."""
    name = results.get("experiment") or "experiment"
    data = example_data(results)
    head = [
        f"<h1>Study {esc(str(name))}</h1>",
        f"<p>{esc(str(results.get('description') or ''))}</p>",
        table(
            [
                "cell",
                "arm",
                "membership attack",
                "windows",
                "exact match [95 % CI]",
                "ROUGE-L (rouge-score)",
                "token match",
                "membership AUC [95 % CI]",
                "TPR @ 1 % FPR",
                "held-out loss",
            ],
            headline_rows(results),
            numeric_from=3,
        ),
        provenance(provenance_items(results)),
    ]
    body = '<section id="headline">' + "\n".join(head) + "</section>"
    if data["rows"]:
        body += documents_html(
            data, "Example windows (truth; the model's continuation where it diverges)", choices=("arm", "verdict")
        )
    body += "<h2>The report</h2>" + markdown_html(render(dict(results)), figures)
    return page(f"goldfish experiment: {name}", body, data)


def write_html(results: Mapping, out_dir: str | os.PathLike, figures: Mapping[str, bytes] | None = None) -> Path:
    """Write ``report.html`` into ``out_dir`` (atomically) with the figures whose SVG copies are there; its path."""
    out = Path(out_dir)
    figs = svg_figures(out, results.get("plots") or []) if figures is None else figures
    path = out / "report.html"
    atomic_write_text(path, render_html(results, figs))
    return path
