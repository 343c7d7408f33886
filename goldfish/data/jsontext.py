"""A long JSONL line's text field read without holding the text three times over.

``json.loads`` of a 50 MB line holds the line's bytes, the decoded line and the parsed string at once (and CPython's
line reader joins a long line's chunks, one more copy): a document's text costs ~3x its size before it is tokenized.
A line longer than :data:`LONG_LINE` bytes is read instead in bounded pieces into one growing buffer
(:func:`read_line`), and its text field is kept as :class:`LongText`: the JSON string's raw bytes (about a byte a
character), decoded :data:`CHUNK_BYTES` at a time whenever it is read -- by the word count, the exact-duplicate hash
and the tokenizer's pieces (:mod:`goldfish.data.stream`). The rest of the line (ids, titles, metadata) is parsed as
usual from the line with the text left out and its unused long values skipped unbuilt (:func:`split_long_row`: a
short text beside a 100 MB metadata field, or beside millions of empty arrays, costs the line's bytes only); a text
field that is an array or an object is refused where the scan meets it.

Reading the text is checked once, when the line is read, as the whole line would be: valid UTF-8, valid JSON escapes,
no raw control characters, no lone surrogates -- errors name the file, line and column. A skipped value is not read,
so not checked.
"""

from __future__ import annotations

import json
import re
from typing import BinaryIO, Collection, Iterator

import numpy as np

from ..errors import UserError

LONG_LINE = 1 << 20  # bytes: a longer JSONL line is read in pieces and its text field kept as LongText
CHUNK_BYTES = 1 << 16  # raw bytes of a LongText decoded at a time
SKIP_BYTES = 1 << 12  # a long line's unused top-level value longer than this is skipped, never built
SCAN_BYTES = 1 << 16  # bytes of an array or object whose brackets are counted at a time
_SCALAR = re.compile(rb"[^,}\] \t\r\n]*")  # a number, true, false or null: up to what ends a value
_STEP = np.zeros(256, dtype=np.int8)  # a byte's change of the nesting depth
_STEP[[0x5B, 0x7B]], _STEP[[0x5D, 0x7D]] = 1, -1
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

    def __init__(
        self,
        raw: memoryview,
        where: str,
        column: int,
        _measured: tuple[int, int, int] | None = None,
        _stripped: bool = False,
    ):
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
            raise UserError(
                f"{self._where} is not UTF-8 text (invalid byte at column "
                f"{self._column + offset + e.start}); re-encode the file as UTF-8, e.g. iconv -f latin1 "
                f"-t utf-8"
            ) from None
        try:
            value = json.loads('"' + text + '"')
        except json.JSONDecodeError as e:
            raise UserError(
                f"{self._where} is not valid JSON ({e.msg}); the file needs one JSON object per line"
            ) from None
        if "\\u" in text:  # an escape may spell a lone surrogate, which is not text
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise UserError(
                    f"{self._where} holds a lone UTF-16 surrogate ({e.object[e.start]!a}), which is not "
                    f"Unicode text; fix the escape in that line"
                ) from None
        return value


def _safe_cut(raw: memoryview, pos: int, end: int) -> int:
    """A position in ``(pos, end]`` where a JSON string's raw bytes (``raw``, a unit boundary at ``pos``) can be
    cut: not inside a UTF-8 character, not inside an escape, not between the two escapes of a surrogate pair."""
    if end >= len(raw):
        return len(raw)
    for _ in range(3):  # a UTF-8 continuation byte after the cut: back to its character's first byte
        if 0x80 <= raw[end] < 0xC0:
            end -= 1
    tail = bytes(raw[end - 6 : end])
    b = tail.rfind(b"\\")
    if b >= 0 and _starts_escape(raw, end - 6 + b, pos):  # the cut may split that escape (at most 6 bytes)
        end = end - 6 + b
    if _HIGH_SURROGATE.fullmatch(bytes(raw[end - 6 : end])) and _starts_escape(raw, end - 6, pos):
        end -= 6  # a high surrogate's escape: its low surrogate follows
    return end


def _starts_escape(raw: memoryview, b: int, pos: int) -> bool:
    """Whether the backslash at ``raw[b]`` starts an escape: an odd run of backslashes (since ``pos``) ends there."""
    run = 0
    while b - run >= pos and raw[b - run] == 0x5C:
        run += 1
    return run % 2 == 1


def split_long_row(
    raw: bytes | bytearray, field: str, keep: Collection[str] = (), where: str = "the line"
) -> tuple[bytes, tuple[int, int] | None] | None:
    """A long line read without building what it does not need -> (the rest of the line, the span of the raw bytes of
    its top-level ``field``'s string value without the quotes, or None when it has no such string).

    The rest is the line with that string left out (``""`` in its place) and every other top-level value longer than
    :data:`SKIP_BYTES` whose key is not in ``keep`` skipped (``null`` in its place: never parsed, never built, never
    checked); it is parsed as usual. ``field`` holding an array or an object is refused (one line naming ``where``)
    where the scan meets it, before anything of the line is built. None when the line is not one well-formed object
    at its top level (it is then parsed whole, which names what is wrong). The last occurrence of a repeated key wins,
    as with ``json.loads``. Strings are skipped by finding their closing quote (``find``), arrays and objects by
    counting their brackets a piece at a time (:func:`_container_end`): memory does not grow with what is skipped."""
    n, values = len(raw), []  # values: (key, begin, end) of each top-level value
    i = _skip_space(raw, 0)
    if i >= n or raw[i] != 0x7B:
        return None
    i = _skip_space(raw, i + 1)
    while i < n and raw[i] != 0x7D:
        end = _string_end(raw, i) if raw[i] == 0x22 else None
        if end is None:
            return None
        key, i = _key(raw, i, end), _skip_space(raw, end)
        if i >= n or raw[i] != 0x3A:
            return None
        i = _skip_space(raw, i + 1)
        first = raw[i] if i < n else None
        if first in (0x5B, 0x7B) and key == field:
            raise UserError(
                f"{where}: field {field!r} is a JSON {'array' if first == 0x5B else 'object'}, not text; "
                f"give each line's {field!r} a string"
            )
        vend = (
            _string_end(raw, i)
            if first == 0x22
            else _container_end(raw, i)
            if first in (0x5B, 0x7B)
            else _SCALAR.match(raw, i).end()
        )
        if vend is None or vend == i:
            return None
        values.append((key, i, vend))
        i = _skip_space(raw, vend)
        if i < n and raw[i] == 0x2C:
            i = _skip_space(raw, i + 1)
        elif i >= n or raw[i] != 0x7D:
            return None
    if i >= n or _skip_space(raw, i + 1) != n:
        return None
    own = [v for v in values if v[0] == field]
    last = own[-1] if own and raw[own[-1][1]] == 0x22 else None
    cuts = [
        (b, e, b'""' if (k, b, e) == last else b"null")
        for k, b, e in values
        if (k, b, e) == last or (k not in keep and e - b > SKIP_BYTES)
    ]
    parts, at = [], 0
    for b, e, put in cuts:
        parts += [bytes(raw[at:b]), put]
        at = e
    parts.append(bytes(raw[at:]))
    return b"".join(parts), (None if last is None else (last[1] + 1, last[2] - 1))


def _skip_space(raw: bytes | bytearray, i: int) -> int:
    """The first position at or after ``i`` that is not JSON whitespace."""
    while i < len(raw) and raw[i] in b" \t\r\n":
        i += 1
    return i


def _key(raw: bytes | bytearray, at: int, end: int) -> str | None:
    """The key spelled by the string ``raw[at:end]`` (None for a long or undecodable one: no field is so named)."""
    if end - at > 4096:
        return None
    try:
        return json.loads(bytes(raw[at:end]).decode("utf-8"))
    except ValueError:  # UnicodeDecodeError included
        return None


def _container_end(raw: bytes | bytearray, at: int) -> int | None:
    """The position after the array or object that opens at ``raw[at]`` (None: it never closes). Its strings are
    skipped by their closing quote; between them its brackets are counted :data:`SCAN_BYTES` at a time (numpy), so
    millions of empty arrays cost a few array operations, not a Python step each."""
    depth, i, n = 0, at, len(raw)
    while True:
        q = raw.find(b'"', i)
        stop = n if q < 0 else q
        while i < stop:
            j = min(i + SCAN_BYTES, stop)
            steps = _STEP[np.frombuffer(raw, dtype=np.uint8, count=j - i, offset=i)]  # (j - i,) int8
            level = depth + np.cumsum(steps, dtype=np.int64)
            closed = np.flatnonzero(level == 0)
            if closed.size:
                return i + int(closed[0]) + 1
            depth, i = int(level[-1]), j
        end = _string_end(raw, q) if q >= 0 else None
        if end is None:
            return None
        i = end


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
