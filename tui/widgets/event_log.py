"""The event log's widget: a line-API list of the last `max_lines` rows, drawn one
visible row at a time (`render_line`), so that appending costs the rows appended and
never lays the screen out again.

Why not Textual's `Log`: each `write_lines` starts a thread worker to measure the new
lines' width, and prunes with a list `del` and a rebuilt cache.  Here the rows are cut to
the log's width by the panel (`event_rows` wraps them), so the width is the widget's and
the rows sit in a bounded deque; the scroll range follows the row count without a
layout.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.selection import Selection
from textual.strip import Strip

_CONTROL = re.compile("[\u0000-\u0014]")  # as Log: control codes are drawn as U+FFFD


# rows kept with their strips: the rows a following log shows and a few screens more (a
# row further back is drawn again when scrolled to; each kept strip is rescanned by
# every full garbage collection)
ROW_STRIPS_KEPT = 128


class EventLog(ScrollView, can_focus=True):
    """The last `max_lines` rows of the event log, the newest at the bottom."""

    ALLOW_SELECT = True
    DEFAULT_CSS = """
    EventLog { background: $surface; color: $text; overflow: scroll;
        &:focus { background-tint: $foreground 5%; } }
    EventLog { width: 1fr; border: round $panel; border-title-color: $text-muted;
        scrollbar-gutter: stable; overflow-x: hidden; }
    EventLog:focus { border: round $primary; }
    """

    def __init__(
        self, *, max_lines: int = 1000, auto_scroll: bool = True, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self.max_lines = max_lines
        self.auto_scroll = auto_scroll
        self._rows: deque[str] = deque(maxlen=max_lines)
        self._rich_style: Style | None = None
        # row -> (its text, width, style, the strip drawn): a log that grows at the end
        # shows the same rows one place higher, drawn once
        self._row_strips: dict[int, tuple[str, int, Style, Strip]] = {}
        self._blank: tuple[int, Style, Strip] | None = None  # the rows below the last

    @property
    def allow_select(self) -> bool:
        return True

    @property
    def lines(self) -> list[str]:
        """The rows kept, oldest first (a copy)."""
        return list(self._rows)

    @property
    def line_count(self) -> int:
        return len(self._rows)

    def write_lines(self, lines: Iterable[str]) -> None:
        """Append rows (the oldest beyond `max_lines` drop out); follow the end if the
        view was at the end."""
        at_end = self.is_vertical_scroll_end
        self._rows.extend(_CONTROL.sub("\ufffd", line.expandtabs()) for line in lines)
        self._resized()
        if self.auto_scroll and at_end and not self.is_vertical_scrollbar_grabbed:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh(self.size.region)  # the rows: the border and its titles stay

    def clear(self) -> None:
        """No rows, and the view back at the top: the rows written next (a seek's, a new
        filter's) are drawn, not the blank rows at the old scroll offset."""
        self._rows.clear()
        self._row_strips.clear()
        self._resized()
        self.scroll_to(y=0, animate=False, immediate=True)
        self.refresh()

    def _resized(self) -> None:
        """The scroll range for the rows now.  The log's own size is the panel's, whatever
        its rows: only the range and the scrollbar (always shown) change, without the
        layout of the whole screen a new `virtual_size` asks for (4 a second while the
        log fills, 10-30 ms each at 512 slots)."""
        size = Size(self.scrollable_content_region.width, len(self._rows))
        if size != self.virtual_size:
            self.set_reactive(ScrollView.virtual_size, size)
            self.vertical_scrollbar.window_virtual_size = size.height

    def render_line(self, y: int) -> Strip:
        row = round(self.scroll_offset.y) + y
        width = self.size.width
        style = self._base_style()
        if not 0 <= row < len(self._rows):
            blank = self._blank
            if blank is None or blank[0] != width or blank[1] is not style:
                blank = self._blank = (width, style, Strip.blank(width, style))
            return blank[2]
        text = self._rows[row]
        selection = self.text_selection
        if selection is not None:
            strip = self._selected(text, row, style, selection)
            return strip.crop_extend(0, width, style).apply_offsets(0, row)
        known = self._row_strips.get(row)
        if known is not None and known[0] is text and known[1] == width and known[2] is style:
            return known[3]
        strip = Strip([Segment(text, style)]).crop_extend(0, width, style).apply_offsets(0, row)
        if len(self._row_strips) >= ROW_STRIPS_KEPT:
            del self._row_strips[next(iter(self._row_strips))]  # the row drawn first
        self._row_strips[row] = (text, width, style, strip)
        return strip

    def _base_style(self) -> Style:
        """`rich_style`, kept until the styles change: Textual works it out afresh from
        every ancestor on each call (half of what drawing a row cost)."""
        if self._rich_style is None:
            self._rich_style = self.rich_style
        return self._rich_style

    def notify_style_update(self) -> None:
        self._rich_style = None
        super().notify_style_update()

    def _selected(self, text: str, row: int, style: Style, selection: Selection) -> Strip:
        line = Text(text, no_wrap=True, style=style)
        span = selection.get_span(row)
        if span is not None:
            start, end = span
            selected = self.screen.get_component_rich_style("screen--selection")
            line.stylize(selected, start, len(text) if end == -1 else end)
        return Strip(line.render(self.app.console))

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        return selection.extract("\n".join(self._rows)), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self.refresh()
