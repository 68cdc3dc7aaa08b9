"""`LineTemplates`: a panel's lines drawn as Textual drew them the frame before, with the
new text poured into the same segments.

A table of fixed-width columns (the cost panel: every strategy's figures change with each
lookup, their places and styles do not) costs Textual the same work each frame: the Rich
`Text` turned into `Content`, split, each line's spans turned into styles and segments
(`Content.render`, `_FormattedLine.to_strip`): most of the panel's share of a frame.  What
those segments are depends on a line's length, its spans, its row and the widget's style,
not on the characters, as long as no line is cut, folded, wrapped, padded, aligned, linked
or selected.  So the strips Textual draws are kept as templates (each segment's start, end
and style) under that key, and a line whose key is known is the template with the new
characters: the very segments Textual would make (tests/test_tui_row_cache.py compares
them with Textual's on every panel, in two themes).  Anything else is drawn by Textual.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual.strip import Strip

Template = tuple[tuple[int, int, RichStyle], ...]
KEPT = 64  # templates kept (a panel's rows in a few layouts)


class LineTemplates:
    def __init__(self) -> None:
        self._templates: dict[tuple[object, ...], Template] = {}
        self._for: object = None  # the drawing key (size, visual style) they were made at
        self.poured = 0  # draws made from templates alone (tests check they happen)

    def strips(
        self, text: Text, width: int, height: int, drawing: object, draw: Callable[[], list[Strip]]
    ) -> list[Strip]:
        """`text`'s lines at `width` (at most `height` of them): from templates when every
        line has one, else `draw()` (Textual), whose strips become the templates."""
        if drawing != self._for:
            self._templates.clear()
            self._for = drawing
        lines, spans = _split(text, height)
        whole = (text.style, text.justify, text.overflow, text.no_wrap, text.end)
        keys = [_key(line, y, spans[y], width, whole) for y, line in enumerate(lines)]
        templates = self._templates
        if all(key is not None and key in templates for key in keys):
            self.poured += 1
            return [
                _pour(line, templates[key]) for line, key in zip(lines, keys, strict=True) if key
            ]
        drawn = draw()
        if len(drawn) == len(lines):
            for line, key, strip in zip(lines, keys, drawn, strict=True):
                template = _template(strip, line)
                if key is not None and template is not None:
                    if len(templates) >= KEPT:
                        templates.clear()
                    templates[key] = template
        return drawn


def _pour(plain: str, template: Template) -> Strip:
    return Strip([Segment(plain[start:end], style) for start, end, style in template])


def _split(text: Text, height: int) -> tuple[list[str], list[list[tuple[object, ...]]]]:
    """The first `height` lines of `text` and the part of each span on each (as
    `Text.split` cuts them, without making a `Text` a line: Rich's own split is most
    of what pouring costs)."""
    lines = text.plain.split("\n")[:height]
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    spans: list[list[tuple[object, ...]]] = [[] for _ in lines]
    for span in text.spans:
        first = max(bisect_right(starts, span.start) - 1, 0)
        for y in range(first, len(lines)):
            start, end = starts[y], starts[y] + len(lines[y])
            if span.end <= start:
                break
            cut_start, cut_end = max(span.start, start) - start, min(span.end, end) - start
            if cut_end > cut_start:
                spans[y].append((cut_start, cut_end, span.style))
    return lines, spans


def _key(
    plain: str, y: int, spans: list[tuple[object, ...]], width: int, whole: object
) -> tuple[object, ...] | None:
    """What Textual's segments of line `y` depend on, or None where they depend on more
    (a line cut or folded at `width`, a tab, a wide or control character, an empty line):
    its length, row and the characters each span styles, in order."""
    if not plain or len(plain) > width or not plain.isprintable():
        return None
    if not plain.isascii() and cell_len(plain) != len(plain):
        return None
    return (y, len(plain), tuple(spans), width, whole)


def _template(strip: Strip, plain: str) -> Template | None:
    """Where each of the strip's segments starts and ends in `plain`, and its style; None
    where the segments are not `plain` in order (padded, cut, control segments)."""
    template: list[tuple[int, int, RichStyle]] = []
    x = 0
    for segment in strip:
        text, style, control = segment
        end = x + len(text)
        if control or style is None or not text or plain[x:end] != text:
            return None
        template.append((x, end, style))
        x = end
    return tuple(template) if x == len(plain) else None
