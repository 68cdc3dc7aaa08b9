"""`TextPanel`: a fixed-size widget showing one Rich renderable, redrawn without layout.

`Static.update()` asks for a new layout on every call; the explorer's panels change every
frame but never change size (their height is set in CSS), so they only repaint.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

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
        self.content: RenderableType = ""
        self._wrapped = WrapCache()

    def render(self) -> RenderableType:
        if self.WRAP and isinstance(self.content, Text):
            return self._wrapped.wrap(self.content, self.content_size.width)
        return self.content

    def show_content(self, content: RenderableType) -> None:
        """Repaint; lay out again only when an auto-height panel's wrapped text needs
        another number of rows.  A wrapping panel shows a str as plain text."""
        if self.WRAP and isinstance(content, str):
            content = Text(content)
        before = self._rows(self.content)
        self.content = content
        self.refresh(layout=self._rows(content) != before)

    def _rows(self, content: RenderableType) -> int:
        height = self.styles.height
        if not self.WRAP or not isinstance(content, Text) or height is None or not height.is_auto:
            return 0
        return wrapped_height(content, self.content_size.width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """With `height: auto`, the rows the text takes once wrapped to `width`."""
        if self.WRAP and isinstance(self.content, Text):
            return wrapped_height(self.content, width)
        return super().get_content_height(container, viewport, width)
