"""Wrapping of the side panels' explanations: a line too long for its panel continues on
the next rows under its value column (a hanging indent), never cut with an ellipsis.

The panels build one Rich `Text` per frame with their rows at their natural length (a
table row `name<pad>value`, a sentence, a probe's decision); `wrap_text` breaks the lines
that do not fit at the width the panel has now, at spaces, and keeps their styles.  A
row that fits is left alone, so grids and tables sized to their panel are untouched.
"""

from __future__ import annotations

import re

from rich.text import Text

# The value column of a `name   value` row: the first gap of two or more spaces.
_COLUMN_GAP = re.compile(r"\S {2,}(?=\S)")


def hanging_indent(plain: str, width: int) -> int:
    """Where continuation rows start: under the value of a `name   value` row when
    that is in the left half, else two columns in from the line's own indent (as the
    event log's continuation rows)."""
    leading = len(plain) - len(plain.lstrip(" "))
    gap = _COLUMN_GAP.search(plain, leading)
    if gap is not None and gap.end() <= width // 2:
        return gap.end()
    return min(leading + 2, max(width // 2, 0))


def wrap_line(line: Text, width: int) -> list[Text]:
    """One line as rows of at most `width` cells, broken at spaces (a word longer than
    a row is folded)."""
    plain = line.plain
    if width <= 0 or len(plain) <= width:
        return [line]
    indent = hanging_indent(plain, width)
    rows: list[Text] = []
    start = 0
    while start < len(plain):
        room = width if not rows else width - indent
        end = start + room
        end = len(plain) if end >= len(plain) else _break_at(plain, start, end)
        piece = line[start:end]
        piece.rstrip()
        rows.append(piece if not rows else Text(" " * indent).append_text(piece))
        start = end
        while start < len(plain) and plain[start] == " ":
            start += 1
    return rows


def _break_at(plain: str, start: int, end: int) -> int:
    """Where the row `plain[start:end]` ends: at the last gap between two fields (two
    spaces) in its second half, else at its last space, else (one long word) at `end`."""
    gap = plain.rfind("  ", start + 1, end + 1)
    if gap > start + (end - start) // 2 and plain[start:gap].strip():
        return gap
    space = plain.rfind(" ", start + 1, end + 1)
    if space > start and plain[start:space].strip():
        return space
    return end


def wrap_text(text: Text, width: int) -> Text:
    """`text` with each line wider than `width` wrapped (the same object when all fit)."""
    if width <= 0:
        return text
    lines = text.split("\n", allow_blank=True)
    if all(len(line.plain) <= width for line in lines):
        return text
    wrapped = Text(style=text.style, end=text.end, no_wrap=text.no_wrap, overflow=text.overflow)
    for number, line in enumerate(lines):
        if number:
            wrapped.append("\n")
        for row, piece in enumerate(wrap_line(line, width)):
            if row:
                wrapped.append("\n")
            wrapped.append_text(piece)
    return wrapped


def wrapped_height(text: Text, width: int) -> int:
    """Rows `text` takes once wrapped to `width`."""
    return len(wrap_text(text, width).split("\n", allow_blank=True))


class WrapCache:
    """The last wrapped text, kept while neither the text nor the width changes (a
    panel repaints far more often than its text changes)."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._text: Text | None = None
        self._source: Text | None = None

    def wrap(self, text: Text, width: int) -> Text:
        key = (id(text), width)
        if key != self._key or self._source is not text or self._text is None:
            self._key, self._source, self._text = key, text, wrap_text(text, width)
        return self._text
