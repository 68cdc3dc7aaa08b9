"""`RowStylesCache`: Textual's styles cache, with the frame around a content row worked
out once per render instead of once per row.

Each row Textual repaints goes through `StylesCache.render_line`, which reads the
widget's border, outline, gutter, tint, opacity and hatch rules and builds the border's
edge segments afresh for every row: about 65 µs a row, most of what repainting a changed
row of a panel costs (a frame of the memslots screen repaints some thirty).
This cache reads them once per `render()` call (one widget, one frame), and then builds a
content row as Textual's branch (C) of `render_line` does: the content line cut or padded
to the content width, the left and right padding, the left and right edges.  Rows of the
border or the padding, and any widget with an outline, tint, opacity below 1, text
opacity or hatch, take Textual's own path.  The result is the same strip, segment for
segment (tests/test_tui_row_cache.py compares the two on every panel of a screen).

A content row that is the very strip framed before (a widget that hands back the strips
it drew for rows that did not change: a log scrolled by its new rows, a drawing scrolled
to follow a lookup), or a new strip of the same segments (a scrollbar drawn afresh for
its thumb's new place: its track rows are the rows it drew before), gets the very framed
strip it got then, so Textual's own caches on that strip (the line filter's result, the
compositor's cuts, the terminal bytes) are hits too: a frame makes no new strips for it.
A top or bottom border row is kept under all it is drawn from (its edges' types and
colours, the size, the backgrounds, the title or subtitle's text, spans, colours, style
and alignment): a drawing scrolled to follow a lookup repaints whole, and Textual drew
its bottom border with the legend afresh each time (some 0.7 ms, the title 0.2 ms).

A content row shorter than the content width is padded in the framed row itself, one
new strip a row rather than Textual's two (`adjust_cell_length`, then the frame).

A framed row that the app's `ANSIToTruecolor` line filter leaves as it is (no ANSI or
default colour, no dim colour, as a theme of truecolours draws) is its own filtered row:
Textual's `Strip.apply_filter` looks the filter up in the strip's `_filter_cache` first,
and finds the row itself there instead of making a copy of every segment (a new strip a
changed row, and the cuts and terminal bytes of that copy afresh).  The ANSI theme's rows
are filtered as Textual filters them (tests/test_tui_row_cache.py draws both themes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.terminal_theme import TerminalTheme
from textual._border import get_box
from textual._segment_tools import line_pad
from textual._styles_cache import RenderLineCallback
from textual.color import Color
from textual.content import Content
from textual.filter import ANSIToTruecolor, LineFilter
from textual.geometry import Size, Spacing
from textual.strip import Strip
from textual.style import Style
from textual.widget import Widget

from .kept_lines import KeptStylesCache

if TYPE_CHECKING:
    from textual.css.styles import StylesBase

BorderLabel = tuple[Content, Color, Color, Style] | None
FRAMED_KEPT = 64  # content strips kept with their framed rows (a few screens of a panel's rows)
BY_VALUE_KEPT = 64  # framed rows kept by their content's segments
BORDERS_KEPT = 16  # top and bottom border rows kept (a few titles of one widget)


class _Frame:
    """What a content row of one widget is framed with, for one render."""

    __slots__ = (
        "content", "end", "inner", "key", "left", "pad_left", "pad_right", "right", "top"
    )  # fmt: skip

    def __init__(
        self,
        styles: StylesBase,
        size: Size,
        content_size: Size,
        padding: Spacing,
        inner: RichStyle,
        edges: tuple[Segment | None, Segment | None],
    ) -> None:
        gutter = styles.gutter
        self.top, self.end = gutter.top, size.height - gutter.bottom  # content rows
        self.content = content_size
        self.pad_left, self.pad_right = padding.left, padding.right
        self.inner = inner
        self.left, self.right = edges
        self.key = (size, self.top, self.end, content_size, padding, inner, edges)


class RowStylesCache(KeptStylesCache):
    """`kept`: content strips kept with their framed rows (what they keep alive is
    rescanned by each full garbage collection: a cache no bigger than what is shown
    again keeps those pauses short)."""

    def __init__(self, kept: int = FRAMED_KEPT) -> None:
        super().__init__()
        self._kept_rows = kept
        self._frame: _Frame | bool | None = None  # None: not worked out; False: no fast rows
        self._truecolor: list[tuple[ANSIToTruecolor, Color, RichColor]] = []  # this render's
        self._framed: dict[int, tuple[Strip, Strip]] = {}  # id(content) -> (content, row)
        self._by_value: dict[tuple[Segment, ...], Strip] = {}  # content's segments -> row
        self._borders: dict[tuple[object, ...], Strip] = {}  # _border_key -> the border row
        self.reused = 0  # rows handed back for a new strip of known segments (tests)
        # the frame they were framed in; a clear() (all lines dirty: a scroll, a resize)
        # keeps them, since a framed row depends on its content strip and the frame alone
        self._framed_key: tuple[object, ...] | None = None

    def render(
        self,
        styles: StylesBase,
        size: Size,
        base_background: Color,
        background: Color,
        render_content_line: RenderLineCallback,
        filters: Sequence[LineFilter],
        *args: Any,
        **kwargs: Any,
    ) -> list[Strip]:
        """KeptStylesCache.render (StylesCache's parameters), the frame worked out afresh."""
        self._frame = None  # worked out at the first content row this render draws
        self._truecolor = [
            (f, background, background.rich_color) for f in filters if type(f) is ANSIToTruecolor
        ]
        try:
            return super().render(
                styles, size, base_background, background, render_content_line, filters,
                *args, **kwargs,
            )  # fmt: skip
        finally:
            self._frame = None

    def render_line(
        self,
        styles: StylesBase,
        y: int,
        size: Size,
        content_size: Size,
        padding: Spacing,
        base_background: Color,
        background: Color,
        render_content_line: RenderLineCallback,
        border_title: BorderLabel,
        border_subtitle: BorderLabel,
        opacity: float,
        ansi_theme: TerminalTheme,
        native_ansi: bool,
    ) -> Strip:
        frame = self._frame
        if frame is None:
            frame = self._frame = self._work_out_frame(
                styles, size, content_size, padding, base_background, background, opacity
            )
            if isinstance(frame, _Frame) and frame.key != self._framed_key:
                self._framed.clear()
                self._by_value.clear()
                self._framed_key = frame.key
        if isinstance(frame, _Frame) and frame.top <= y < frame.end:
            return self._content_row(frame, y, size.width, render_content_line)
        key = None
        if isinstance(frame, _Frame):
            key = _border_key(styles, y, size, base_background, background, border_title,
                              border_subtitle)  # fmt: skip
            if key is not None and (row := self._borders.get(key)) is not None:
                return row
        row = super().render_line(
            styles,
            y,
            size,
            content_size,
            padding,
            base_background,
            background,
            render_content_line,
            border_title,
            border_subtitle,
            opacity,
            ansi_theme,
            native_ansi,
        )
        if key is not None:
            if len(self._borders) >= BORDERS_KEPT:
                self._borders.clear()
            self._borders[key] = row
            self._filtered_as_is(row)
        return row

    def _work_out_frame(
        self,
        styles: StylesBase,
        size: Size,
        content_size: Size,
        padding: Spacing,
        base_background: Color,
        background: Color,
        opacity: float,
    ) -> _Frame | bool:
        """The frame of a content row as StylesCache.render_line builds it, or False
        where that takes more than the frame (outline, tint, opacity, hatch)."""
        if opacity != 1.0 or styles.tint.a or styles.text_opacity != 1.0:
            return False
        if styles.has_rule("hatch") and styles.hatch != "none":
            return False
        if any(edge for edge, _ in styles.outline):
            return False
        _, (border_right, right_color), _, (border_left, left_color) = styles.border
        inner, outer = self.get_inner_outer(base_background, background)
        left = right = None
        if border_left or border_right:
            left_style = Style(foreground=base_background + left_color.multiply_alpha(opacity))
            left = get_box(border_left, inner, outer, left_style)[1][0]
            right_style = Style(foreground=base_background + right_color.multiply_alpha(opacity))
            right = get_box(border_right, inner, outer, right_style)[1][2]
        edges = (left if border_left else None, right if border_right else None)
        return _Frame(styles, size, content_size, padding, inner.rich_style, edges)

    def _content_row(
        self, frame: _Frame, y: int, width: int, render_content_line: RenderLineCallback
    ) -> Strip:
        """Branch (C) of StylesCache.render_line with the frame worked out; the row
        framed before when the content line is the strip framed then, or its segments."""
        content_y = y - frame.top
        content_width, content_height = frame.content
        inner = frame.inner
        if content_y >= content_height:
            content = Strip.blank(content_width, inner)
        else:
            content = render_content_line(content_y)
        framed = self._framed
        known = framed.get(id(content))
        if known is not None and known[0] is content:
            return known[1]
        segments = tuple(content)
        row = self._by_value.get(segments)
        if row is not None:
            self.reused += 1
        else:
            row = self._framed_row(
                frame, width, self._fitted(segments, content, content_width, inner)
            )
            self._filtered_as_is(row)
            if len(self._by_value) >= BY_VALUE_KEPT:
                self._by_value.clear()
            self._by_value[segments] = row
        if len(framed) >= self._kept_rows:
            framed.clear()
        framed[id(content)] = (content, row)
        return row

    def _filtered_as_is(self, row: Strip) -> None:
        """Make `row` its own result of the ANSIToTruecolor filter where the filter
        changes none of its segments (`truecolor_style` hands back an equal style: the
        very style, or the equal one it was first asked for, from its lru_cache)."""
        for line_filter, background, rich_background in self._truecolor:
            truecolor = line_filter.truecolor_style
            if all(
                control is None and (style is None or truecolor(style, rich_background) == style)
                for _, style, control in row._segments
            ):
                row._filter_cache[(line_filter, background)] = row

    @staticmethod
    def _fitted(
        segments: tuple[Segment, ...], content: Strip, content_width: int, inner: RichStyle
    ) -> Sequence[Segment]:
        """The content line at the content width, as `adjust_cell_length` cuts or pads
        it (a pad is the same segment; no strip made for it)."""
        length = content.cell_length
        if length == content_width:
            return segments
        if length < content_width:
            return (*segments, Segment(" " * (content_width - length), inner))
        return list(content.adjust_cell_length(content_width, inner))

    @staticmethod
    def _framed_row(frame: _Frame, width: int, line: Sequence[Segment]) -> Strip:
        inner = frame.inner
        segments: list[Segment] = []
        if frame.left is not None:
            segments.append(frame.left)
        if frame.pad_left or frame.pad_right:
            segments.extend(line_pad(line, frame.pad_left, frame.pad_right, inner))
        else:
            segments.extend(line)
        if frame.right is not None:
            segments.append(frame.right)
        return Strip(segments, width)


def _border_key(
    styles: StylesBase,
    y: int,
    size: Size,
    base_background: Color,
    background: Color,
    border_title: BorderLabel,
    border_subtitle: BorderLabel,
) -> tuple[object, ...] | None:
    """All a top or bottom border row (branch (A) of StylesCache.render_line, in a frame
    without outline, tint, opacity or hatch) is drawn from; None for any other row.  A
    label's Content is compared by its text and spans (Content.__eq__ compares the text
    alone)."""
    top, bottom = styles.border_top[0], styles.border_bottom[0]
    if y == 0 and top:
        label, align = border_title, styles.border_title_align
    elif y == size.height - 1 and bottom:
        label, align = border_subtitle, styles.border_subtitle_align
    else:
        return None
    drawn = None
    if label is not None:
        content, color, label_background, style = label
        drawn = (content.plain, tuple(content.spans), color, label_background, style)
    return (y == 0, size, styles.border, base_background, background, drawn, align)


def use_row_cache(widget: Widget, kept: int = FRAMED_KEPT) -> None:
    """Give `widget` a RowStylesCache (call in its __init__, after Widget's)."""
    widget._styles_cache = RowStylesCache(kept)
