"""The pieces every ``report.html`` is built of (an evaluation's, :mod:`goldfish.eval.html_report`, and a study's,
:mod:`goldfish.experiment.html_report`): the page shell with its inline style and script, the data island, figures
and a small Markdown-to-HTML converter for the Markdown reports' sections.

Every text is escaped (:func:`html.escape`) before it reaches the page; the table data travels as JSON in a
``<script type="application/json">`` with ``<``, ``>`` and ``&`` written as ``\\u003c``, ``\\u003e``, ``\\u0026`` (so
no document text can close the script element), and the page's script renders it through ``textContent`` only.
The page loads nothing: no network, no file beside it.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .html_assets import CSS, JS

esc = html.escape  # quote=True: safe in text and in attribute values


def embed_json(data: Any) -> str:
    """``data`` as JSON safe inside ``<script type="application/json">``: ``<``, ``>`` and ``&`` escaped as
    ``\\u003c``, ``\\u003e``, ``\\u0026`` (JSON.parse reads them back as the characters)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def page(title: str, body: str, data: Mapping | None = None) -> str:
    """One self-contained HTML document: ``body`` (already escaped HTML), the data island and the script."""
    island = embed_json(data or {"columns": [], "rows": []})
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        f"style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>\n{body}\n</main>\n"
        f'<script type="application/json" id="gf-data">{island}</script>\n<script>{JS}</script>\n'
        f"</body></html>\n"
    )


def table(headers: Iterable[str], rows: Iterable[Iterable[Any]], numeric_from: int = 1) -> str:
    """A plain HTML table of escaped cells; columns from ``numeric_from`` on are right-aligned."""
    head = "".join(f"<th>{esc(str(h))}</th>" for h in headers)
    num = ' class="n"'
    body = "".join(
        "<tr>" + "".join(f"<td{num if i >= numeric_from else ''}>{esc(str(c))}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def definitions(items: Iterable[tuple[str, str]], summary: str = "Definitions") -> str:
    """A closed ``<details>`` of term: meaning lines (one click away, never in the way)."""
    lines = "".join(f"<dt><b>{esc(t)}</b></dt><dd>{esc(d)}</dd>" for t, d in items)
    return f"<details><summary>{esc(summary)}</summary><dl>{lines}</dl></details>"


def provenance(items: Iterable[tuple[str, Any]]) -> str:
    """A compact grid of (label, value), values missing (None, "") left out."""
    cells = "".join(f"<dt>{esc(k)}</dt><dd>{esc(str(v))}</dd>" for k, v in items if v not in (None, "", [], {}))
    return f'<dl class="prov">{cells}</dl>'


def figure(name: str, svg: bytes | str) -> str:
    """An SVG figure inline as an ``<img>`` data URI (an image cannot run script, whatever the file holds)."""
    raw = svg.encode("utf-8") if isinstance(svg, str) else svg
    uri = "data:image/svg+xml;base64," + base64.b64encode(raw).decode("ascii")
    return f'<figure><img alt="{esc(name)}" src="{uri}"><figcaption class="small">{esc(name)}</figcaption></figure>'


def svg_figures(folder: Path, names: Iterable[str]) -> dict[str, bytes]:
    """{stem: SVG bytes} of the figures ``names`` (PNG or SVG file names) whose SVG copy is in ``folder``."""
    out = {}
    for name in names:
        path = Path(folder) / (Path(name).stem + ".svg")
        if path.is_file():
            out[path.stem] = path.read_bytes()
    return out


# ------------------------------------------------------------------------------------------------ Markdown


_INLINE = [
    (re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"<b>\1</b>"),
    (re.compile(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])"), r"<i>\1</i>"),
]


def _inline(text: str) -> str:
    out = esc(text, quote=False)
    for pattern, repl in _INLINE:
        out = pattern.sub(repl, out)
    return out


def _cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [p.strip().replace("\\|", "|") for p in parts]


def markdown_html(text: str, figures: Mapping[str, bytes] | None = None) -> str:
    """The Markdown our reports write (headings, tables, lists, paragraphs, code blocks, ``**bold**``, `` `code` ``,
    images) as HTML, every text escaped; an image ``![x](name.png)`` is inlined from ``figures`` (by stem), else its
    name is shown."""
    figures = figures or {}
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append(f"<pre>{esc(chr(10).join(lines[i + 1 : j]))}</pre>")
            i = j + 1
            continue
        heading = re.match(r"(#{1,6})\s+(.*)", line)
        image = re.fullmatch(r"!\[([^\]]*)\]\(([^)]+)\)", line.strip())
        if heading:
            level = min(len(heading.group(1)) + 1, 6)
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif image:
            stem = Path(image.group(2)).stem
            out.append(
                figure(stem, figures[stem])
                if stem in figures
                else f'<p class="small">[figure {esc(image.group(2))}]</p>'
            )
        elif line.lstrip().startswith("|"):
            block = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                block.append(lines[i])
                i += 1
            rows = [_cells(b) for b in block if not re.fullmatch(r"[\s|:\-]+", b)]
            head = "".join(f"<th>{_inline(c)}</th>" for c in rows[0]) if rows else ""
            body = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            continue
        elif re.match(r"\s*[-*] ", line):
            items = []
            while i < len(lines) and re.match(r"\s*[-*] ", lines[i]):
                items.append("<li>" + _inline(re.sub(r"^\s*[-*] ", "", lines[i])) + "</li>")
                i += 1
            out.append(f"<ul>{''.join(items)}</ul>")
            continue
        elif line.strip():
            para = [line]
            block_start = re.compile(r"(#|\||\s*[-*] |```|!\[)")
            while i + 1 < len(lines) and lines[i + 1].strip() and not block_start.match(lines[i + 1]):
                i += 1
                para.append(lines[i])
            out.append(f"<p>{_inline(' '.join(para))}</p>")
        i += 1
    return '<div class="md">' + "\n".join(out) + "</div>"
