"""Offline English Wikipedia: the real articles inside the gensim 4.4.0 wheel, cleaned to plain prose.

The wheel ships ``enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2`` (1.7 MB, 206 main-namespace
pages: ~100 redirects and ~106 full articles from "Anarchism" to "Affirming the consequent"). It needs no network,
so tests and the demo run on real prose rather than synthetic text.

Cleaning: gensim's ``filter_wiki`` removes templates, references, links' targets, tables and comments; we then drop
bold/italic quotes, trailing reference sections (See also, References, External links, ...), bare list stubs
(``*``, ``* .``), heading markup (the heading text stays on its own line) and empty brackets left where a template was,
and collapse whitespace. Pages are read in dump order, so the document order is deterministic.
"""

from __future__ import annotations

import bz2
import functools
import re
from pathlib import Path
from typing import Iterator

from ..errors import UserError

DUMP_NAME = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"

# Sections after which an article is bibliography, not prose.
_TAIL_SECTIONS = {
    "see also",
    "references",
    "notes",
    "external links",
    "further reading",
    "bibliography",
    "sources",
    "citations",
    "footnotes",
    "notes and references",
    "references and notes",
    "works cited",
    "primary sources",
    "secondary sources",
    "online sources",
    "external link",
    "related articles",
}
_HEADING = re.compile(r"^\s*(=+)\s*(.*?)\s*\1\s*$")
_EMPTY_BRACKETS = re.compile(r"\(\s*[,;:.]?\s*\)|\[\s*\]")
_SPACE_BEFORE_PUNCT = re.compile(r"[ \t]+([,.;:!?)])")
_MULTISPACE = re.compile(r"[ \t]{2,}")
_LIST_PREFIX = re.compile(r"^[*#:;]+\s*")


def dump_path(path: str | None = None) -> Path:
    """The dump to read: ``path`` if given, else the one shipped in the gensim wheel (found via ``importlib``)."""
    if path:
        p = Path(path).expanduser()
        if not p.is_file():
            raise UserError(
                f"Wikipedia dump not found: {p} (give a .xml.bz2 pages-articles dump, or omit "
                "source.path to use the one shipped with gensim)"
            )
        return p
    try:
        from gensim.test.utils import datapath
    except ImportError:
        raise UserError("the wikipedia source needs gensim: pip install gensim==4.4.0") from None
    p = Path(datapath(DUMP_NAME))
    if not p.is_file():
        raise UserError(
            f"the gensim wheel has no {DUMP_NAME} (installed gensim lacks its test data; "
            "pip install --force-reinstall gensim==4.4.0)"
        )
    return p


def clean_wikitext(raw: str) -> str:
    """Wiki markup -> plain prose (see the module docstring for each step)."""
    from gensim.corpora.wikicorpus import filter_wiki

    text = filter_wiki(raw).replace("'''", "").replace("''", "")
    lines: list[str] = []
    for line in text.split("\n"):
        heading = _HEADING.match(line)
        if heading:
            title = heading.group(2).strip()
            if title.lower() in _TAIL_SECTIONS:
                break
            lines.extend(["", title] if title else [])
            continue
        if line.lstrip().startswith(("{|", "|", "!")):  # table remnants
            continue
        if _LIST_PREFIX.match(line):
            line = _LIST_PREFIX.sub("", line)
            if len(line.split()) < 3:  # '*', '* .', a lone link target: not prose
                continue
        line = _EMPTY_BRACKETS.sub("", line)
        line = _SPACE_BEFORE_PUNCT.sub(r"\1", _MULTISPACE.sub(" ", line)).strip()
        lines.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def is_redirect(raw: str) -> bool:
    return raw.lstrip()[:9].lower() == "#redirect"


def iter_articles(path: str | None = None) -> Iterator[tuple[str, str, str]]:
    """Yield ``(page_id, title, clean_text)`` for each main-namespace, non-redirect page, in dump order.

    Parsed articles are cached per process (keyed by the file's path, size and mtime): a grid of experiments
    prepares many datasets from the same dump and should parse it once.
    """
    p = dump_path(path)
    st = p.stat()
    yield from _parse_dump(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _parse_dump(path: str, size: int, mtime_ns: int) -> tuple[tuple[str, str, str], ...]:
    from gensim.corpora.wikicorpus import extract_pages

    articles = []
    try:
        with bz2.open(path, "rb") as f:
            for title, raw, page_id in extract_pages(f, filter_namespaces=("0",)):
                if raw and not is_redirect(raw):
                    articles.append((str(page_id), title, clean_wikitext(raw)))
    except (OSError, EOFError) as e:
        raise UserError(f"cannot read Wikipedia dump {path}: {e} (is it a complete .xml.bz2 file?)") from None
    return tuple(articles)
