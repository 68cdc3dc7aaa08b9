"""`TextPanel`: a fixed-size widget showing one Rich renderable, redrawn without layout.

`Static.update()` asks for a new layout on every call; the explorer's panels change every
frame but never change size (their height is set in CSS), so they only repaint.
"""

from __future__ import annotations

from rich.console import RenderableType
from textual.widget import Widget


class TextPanel(Widget):
    DEFAULT_CSS = """
    TextPanel { height: 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.content: RenderableType = ""

    def render(self) -> RenderableType:
        return self.content

    def show_content(self, content: RenderableType) -> None:
        self.content = content
        self.refresh()
