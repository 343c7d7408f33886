"""The King James Bible from Debian's ``bible-kjv`` package, one document per chapter (1,189 chapters).

The package stores the text in its own compressed format (``/usr/lib/bible.data``, from ``bible-kjv-text``) and ships
the ``bible`` program that reads it. We ask that program for every verse, Genesis 1:1 to Revelation 22:21, with
pretty-printing off (``-f``: one ``Ge1:1 In the beginning ...`` line per verse) and group verses by chapter.
Install with ``apt-get install bible-kjv``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import UserError

# The 66 books in canonical order; the program prints its own abbreviations (Ge, Exo, ... Rev) in this order.
BOOKS = (
    "Genesis",
    "Exodus",
    "Leviticus",
    "Numbers",
    "Deuteronomy",
    "Joshua",
    "Judges",
    "Ruth",
    "1 Samuel",
    "2 Samuel",
    "1 Kings",
    "2 Kings",
    "1 Chronicles",
    "2 Chronicles",
    "Ezra",
    "Nehemiah",
    "Esther",
    "Job",
    "Psalms",
    "Proverbs",
    "Ecclesiastes",
    "Song of Solomon",
    "Isaiah",
    "Jeremiah",
    "Lamentations",
    "Ezekiel",
    "Daniel",
    "Hosea",
    "Joel",
    "Amos",
    "Obadiah",
    "Jonah",
    "Micah",
    "Nahum",
    "Habakkuk",
    "Zephaniah",
    "Haggai",
    "Zechariah",
    "Malachi",
    "Matthew",
    "Mark",
    "Luke",
    "John",
    "Acts",
    "Romans",
    "1 Corinthians",
    "2 Corinthians",
    "Galatians",
    "Ephesians",
    "Philippians",
    "Colossians",
    "1 Thessalonians",
    "2 Thessalonians",
    "1 Timothy",
    "2 Timothy",
    "Titus",
    "Philemon",
    "Hebrews",
    "James",
    "1 Peter",
    "2 Peter",
    "1 John",
    "2 John",
    "3 John",
    "Jude",
    "Revelation",
)
_VERSE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+)\s+(.*)$")
_INSTALL = "install it with: apt-get install bible-kjv"
BIBLE_PROGRAM = "/usr/bin/bible"  # where Debian puts it; a `bible` on PATH wins


def _run_bible(data_dir: Path) -> str:
    program = shutil.which("bible") or BIBLE_PROGRAM
    if not Path(program).is_file():
        raise UserError(f"the kjv source needs Debian's bible-kjv package (no 'bible' program found); {_INSTALL}")
    if not (data_dir / "bible.data").is_file():
        raise UserError(f"no bible.data in {data_dir} (the KJV text of Debian's bible-kjv-text); {_INSTALL}")
    try:
        done = subprocess.run(
            [program, "-f", "-p", str(data_dir), "gen1:1-rev22:21"],
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=120,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UserError(f"running {program} failed: {e}; reinstall: apt-get install --reinstall bible-kjv") from None
    if done.returncode != 0:
        raise UserError(f"{program} exited with status {done.returncode}: {done.stderr.strip()[:200]}")
    return done.stdout


def parse_verses(lines: Iterable[str]) -> Iterator[tuple[str, str, str]]:
    """``Ge1:1 text`` lines -> ``(chapter_id, title, text)`` per chapter, verses joined by spaces, in input order.

    Books are named by order of appearance (the program's abbreviations are not stable across releases).
    """
    book_index, current, verses = -1, None, []
    last_abbrev = None
    for line in lines:
        m = _VERSE.match(line.strip())
        if not m:
            continue
        abbrev, chapter, _, text = m.groups()
        if abbrev != last_abbrev:
            book_index, last_abbrev = book_index + 1, abbrev
        key = (book_index, int(chapter))
        if key != current and verses:
            yield _chapter(current, verses)
            verses = []
        current = key
        verses.append(text.strip())
    if verses:
        yield _chapter(current, verses)


def _chapter(key: tuple[int, int] | None, verses: list[str]) -> tuple[str, str, str]:
    book, chapter = key  # type: ignore[misc]
    name = BOOKS[book] if book < len(BOOKS) else f"Book {book + 1}"
    return f"{name.replace(' ', '')}.{chapter}", f"{name} {chapter}", " ".join(verses)


def iter_chapters(path: str | None = None) -> Iterator[tuple[str, str, str]]:
    """Yield ``(chapter_id, title, text)`` for the 1,189 KJV chapters; ``path`` = folder of bible.data."""
    data_dir = Path(path).expanduser() if path else Path("/usr/lib")
    yield from parse_verses(_run_bible(data_dir).splitlines())
