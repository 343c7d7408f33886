"""A long JSONL line's text field read without holding the text three times over.

``json.loads`` of a 50 MB line holds the line's bytes, the decoded line and the parsed string at once (and CPython's
line reader joins a long line's chunks, one more copy): a document's text costs ~3x its size before it is tokenized.
A line longer than :data:`LONG_LINE` bytes is read instead in bounded pieces into one growing buffer
(:func:`read_line`), and its text field is kept as :class:`LongText`: the JSON string's raw bytes (about a byte a
character), decoded :data:`CHUNK_BYTES` at a time whenever it is read -- by the word count, the exact-duplicate hash
and the tokenizer's pieces (:mod:`goldfish.data.stream`). The rest of the line (ids, titles, metadata) is parsed as
usual from the line with the text left out (:func:`split_long_row`).

Reading it is checked once, when the line is read, as the whole line would be: valid UTF-8, valid JSON escapes, no
raw control characters, no lone surrogates -- errors name the file, line and column.
"""

from __future__ import annotations

import json
import re
from typing import BinaryIO, Iterator

from ..errors import UserError

LONG_LINE = 1 << 20  # bytes: a longer JSONL line is read in pieces and its text field kept as LongText
CHUNK_BYTES = 1 << 16  # raw bytes of a LongText decoded at a time
_STRUCTURE = re.compile(rb'["{}\[\]]')  # what opens a string, an object or an array, or closes one
_COLON = re.compile(rb"[ \t\r\n]*:")
_HIGH_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")


def read_line(fh: BinaryIO) -> bytes | bytearray:
    """The next line of a binary file (``b""`` at its end); a line longer than :data:`LONG_LINE` bytes comes as one
    ``bytearray`` grown from bounded reads (held once, not joined from a list of chunks)."""
    line = fh.readline(LONG_LINE)
    if len(line) < LONG_LINE or line.endswith(b"\n"):
        return line
    buf = bytearray(line)
    del line
    while True:
        part = fh.readline(LONG_LINE)
        buf += part
        if not part or part.endswith(b"\n"):
            return buf


class LongText:
    """The text of a JSON string held as its raw bytes (without the quotes) and decoded a piece at a time.

    ``chunks()`` yields the decoded text in consecutive pieces (``strip()`` gives a view without the leading and
    trailing whitespace ``str.strip`` removes); ``len()`` is its length in characters; ``nbytes`` the raw bytes'.
    ``where`` names the line (``path:lineno``) and ``column`` is the 1-based column of the raw bytes' first byte in
    it, for one-line errors."""

    def __init__(self, raw: memoryview, where: str, column: int,
                 _measured: tuple[int, int, int] | None = None, _stripped: bool = False):
        self._raw, self._where, self._column = raw, where, column
        self.nbytes = len(raw)
        if _measured is None:  # the one checking pass: every piece decodes; the length and the edges measured
            chars = lead = trail = 0
            for piece in self._decoded():
                if lead == chars:  # only whitespace so far
                    lead += len(piece) - len(piece.lstrip())
                chars += len(piece)
                rest = piece.rstrip()
                trail = trail + len(piece) if not rest else len(piece) - len(rest)
            _measured = (chars, lead, 0 if lead == chars else trail)
        self._measured, self._stripped = _measured, _stripped
        chars, lead, trail = _measured
        self._span = (lead, chars - trail) if _stripped else (0, chars)

    def strip(self) -> "LongText":
        """The text without its leading and trailing whitespace (what ``str.strip()`` removes)."""
        return LongText(self._raw, self._where, self._column, self._measured, True)

    def __len__(self) -> int:
        return self._span[1] - self._span[0]

    def __bool__(self) -> bool:
        return len(self) > 0

    def chunks(self) -> Iterator[str]:
        """The text in consecutive pieces (of at most :data:`CHUNK_BYTES` characters)."""
        (start, end), at = self._span, 0
        for piece in self._decoded():
            lo, hi = max(start - at, 0), min(end - at, len(piece))
            at += len(piece)
            if lo < hi:
                yield piece if (lo, hi) == (0, len(piece)) else piece[lo:hi]

    def _decoded(self) -> Iterator[str]:
        raw, n, pos = self._raw, len(self._raw), 0
        while pos < n:
            cut = _safe_cut(raw, pos, pos + max(CHUNK_BYTES, 16))  # 16: past what a cut moves back (3 + 6 + 6)
            yield self._decode(bytes(raw[pos:cut]), pos)
            pos = cut

    def _decode(self, piece: bytes, offset: int) -> str:
        """One piece of the raw bytes as text; one line naming the place when it is not valid."""
        try:
            text = piece.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserError(f"{self._where} is not UTF-8 text (invalid byte at column "
                            f"{self._column + offset + e.start}); re-encode the file as UTF-8, e.g. iconv -f latin1 "
                            f"-t utf-8") from None
        try:
            value = json.loads('"' + text + '"')
        except json.JSONDecodeError as e:
            raise UserError(f"{self._where} is not valid JSON ({e.msg}); the file needs one JSON object per "
                            f"line") from None
        if "\\u" in text:  # an escape may spell a lone surrogate, which is not text
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise UserError(f"{self._where} holds a lone UTF-16 surrogate ({e.object[e.start]!a}), which is not "
                                f"Unicode text; fix the escape in that line") from None
        return value


def _safe_cut(raw: memoryview, pos: int, end: int) -> int:
    """A position in ``(pos, end]`` where a JSON string's raw bytes (``raw``, a unit boundary at ``pos``) can be
    cut: not inside a UTF-8 character, not inside an escape, not between the two escapes of a surrogate pair."""
    if end >= len(raw):
        return len(raw)
    for _ in range(3):  # a UTF-8 continuation byte after the cut: back to its character's first byte
        if 0x80 <= raw[end] < 0xC0:
            end -= 1
    tail = bytes(raw[end - 6:end])
    b = tail.rfind(b"\\")
    if b >= 0 and _starts_escape(raw, end - 6 + b, pos):  # the cut may split that escape (at most 6 bytes)
        end = end - 6 + b
    if _HIGH_SURROGATE.fullmatch(bytes(raw[end - 6:end])) and _starts_escape(raw, end - 6, pos):
        end -= 6  # a high surrogate's escape: its low surrogate follows
    return end


def _starts_escape(raw: memoryview, b: int, pos: int) -> bool:
    """Whether the backslash at ``raw[b]`` starts an escape: an odd run of backslashes (since ``pos``) ends there."""
    run = 0
    while b - run >= pos and raw[b - run] == 0x5C:
        run += 1
    return run % 2 == 1


def split_long_row(raw: bytes | bytearray, field: str) -> tuple[bytes, int, int] | None:
    """The line with the string value of its top-level key ``field`` left out (``""`` in its place) and that
    value's raw bytes' span (without the quotes); None when the line has no such string value (it is then parsed
    whole, which also names what is wrong with a malformed line). The last occurrence of a repeated key wins, as with
    ``json.loads``. Strings are skipped by finding their closing quote (``find``), never matched by a pattern whose
    memory grows with the string."""
    depth, span, key, after, i = 0, None, None, 0, 0
    while (m := _STRUCTURE.search(raw, i)) is not None:
        at = m.start()
        first = raw[at]
        if first != 0x22:  # { [ } ]
            depth, key, i = depth + (1 if first in (0x7B, 0x5B) else -1), None, at + 1
            continue
        end = _string_end(raw, at)
        if end is None:
            return None
        i = end
        if depth != 1:
            continue
        if key is not None:
            name, key = key, None
            if not raw[after:at].strip(b" \t\r\n"):  # this string is the key's value
                if name == field:
                    span = (at + 1, end - 1)
                continue
        colon = _COLON.match(raw, end)
        if colon is not None and end - at <= 4096:  # a key (a long string is a value, never a key)
            try:
                key, after = json.loads(bytes(raw[at:end]).decode("utf-8")), colon.end()
            except ValueError:  # UnicodeDecodeError included: the whole line's parse names it
                key = None
    if span is None:
        return None
    return bytes(raw[:span[0] - 1]) + b'""' + bytes(raw[span[1] + 1:]), span[0], span[1]


def _string_end(raw: bytes | bytearray, at: int) -> int | None:
    """The position after the closing quote of the JSON string that opens at ``raw[at]`` (None: it never closes)."""
    k = at + 1
    while (q := raw.find(b'"', k)) >= 0:
        run = 0
        while raw[q - 1 - run] == 0x5C:  # backslashes right before the quote: an odd run escapes it
            run += 1
        if run % 2 == 0:
            return q + 1
        k = q + 1
    return None
