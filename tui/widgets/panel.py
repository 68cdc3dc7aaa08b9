"""`TextPanel`: a fixed-size widget showing one Rich renderable, redrawn without layout,
line by line.

`Static.update()` asks for a new layout on every call; the explorer's panels change every
frame but never change size (their height is set in CSS), so they only repaint, and only
the lines whose text or style changed: the panel keeps the strips it drew (as Textual's
own line-API widgets keep theirs) and compares the new ones with them, so a frame pays
Textual's per-line work (border, padding, filters) for the changed lines alone.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget
from typing_extensions import Self

from .line_diff import row_regions
from .wrap import WrapCache, wrapped_height


class TextPanel(Widget):
    """`WRAP`: a `Text` too long for the panel wraps under its value column (explanations);
    tables that choose their columns for the width leave it off."""

    DEFAULT_CSS = """
    TextPanel { height: 1; }
    """

    WRAP = False

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # No panel text carries links (no `@click` markup): Textual's link styling of every
        # drawn line (a tenth of a panel's drawing) and the hover check have nothing to do.
        self.set_reactive(Widget.auto_links, False)
        self.content: RenderableType = ""
        self._wrapped = WrapCache()
        self._rows_of: tuple[Text, int, int] | None = None  # content, width, its rows
        self._lines: list[Strip] | None = None  # the content drawn at `_drawn_for`
        self._drawn_for: tuple[Size, object] = (Size(0, 0), None)  # size, visual style

    def render(self) -> RenderableType:
        if self.WRAP and isinstance(self.content, Text):
            return self._wrapped.wrap(self.content, self.content_size.width)
        return self.content

    def show_content(self, content: RenderableType) -> None:
        """Repaint the lines that change; lay out again only when an auto-height panel's
        wrapped text needs another number of rows.  A wrapping panel shows a str as
        plain text."""
        if self.WRAP and isinstance(content, str):
            content = Text(content)
        if self._unchanged(content):
            return  # drawn already, and nothing asked for a repaint since
        before = self._rows(self.content)
        self.content = content
        old = self._lines
        if self._rows(content) != before:
            self.refresh(layout=True)
        elif old is None or self._drawn_for != self._drawing_key() or not self.is_mounted:
            self.refresh()  # drawn whole at the next frame
        else:
            new = self._lines = self._draw()
            width = self.size.width
            changed = [
                y
                for y in range(max(len(old), len(new)))
                if y >= len(old) or y >= len(new) or old[y] != new[y]
            ]
            if changed:
                super().refresh(*row_regions(changed, width))

    def _unchanged(self, content: RenderableType) -> bool:
        """`content` draws as the lines drawn now: the same text, spans and text options
        (Rich's `Text.__eq__` leaves out the base style and the options), same size and
        style, no repaint pending."""
        old = self.content
        if self._lines is None or self._drawn_for != self._drawing_key():
            return False
        if isinstance(content, str) and isinstance(old, str):
            return content == old
        if isinstance(content, Text) and isinstance(old, Text):
            return _text_key(content) == _text_key(old)
        return False

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Self:
        if repaint and not regions:
            self._lines = None  # a style, size or selection change: all drawn again
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _rows(self, content: RenderableType) -> int:
        """The rows an auto-height panel's `content` takes; counted once per content
        and width (show_content asks for the content shown, then for the new one)."""
        height = self.styles.height
        if not self.WRAP or not isinstance(content, Text) or height is None or not height.is_auto:
            return 0
        width = self.content_size.width
        known = self._rows_of
        if known is not None and known[0] is content and known[1] == width:
            return known[2]
        # wrapped once: the cache's text is the one render() draws next
        wrapped = self._wrapped.wrap(content, width)
        rows = len(wrapped.split("\n", allow_blank=True))
        self._rows_of = (content, width, rows)
        return rows

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """With `height: auto`, the rows the text takes once wrapped to `width`."""
        if self.WRAP and isinstance(self.content, Text):
            return wrapped_height(self.content, width)
        return super().get_content_height(container, viewport, width)

    def _drawing_key(self) -> tuple[Size, object]:
        return self.size, self.visual_style

    def _draw(self) -> list[Strip]:
        """The content's lines at the panel's size, as a Widget draws its render()'s
        (a str as markup, a Widget's default)."""
        width, height = self.size
        visual = visualize(self, self.render(), markup=True)
        return Visual.to_strips(self, visual, width, height, self.visual_style)

    def render_line(self, y: int) -> Strip:
        key = self._drawing_key()
        if self._lines is None or self._drawn_for != key:
            self._lines, self._drawn_for = self._draw(), key
        lines = self._lines
        if y < len(lines):
            return lines[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)


def _text_key(text: Text) -> tuple[object, ...]:
    """All a `Text` draws with."""
    return (text.plain, text.spans, text.style, text.justify, text.overflow, text.no_wrap,
            text.end, text.tab_size)  # fmt: skip
