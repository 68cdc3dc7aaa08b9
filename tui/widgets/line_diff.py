"""`LineDiffView`: a line-API `ScrollView` that repaints only the lines that changed.

Textual's work per repainted line (the styles cache: border, padding, colour filters, new
strips) is most of a frame's cost, so a view whose state changes a few lines (a lookup's
highlight on a tree of 512 slots) keeps the strips it drew and, after such a change,
repaints the lines whose new strips differ.  Anything else that moves the drawing (a
scroll, a new size or layout) repaints the whole view as before.
"""

from __future__ import annotations

from textual.geometry import Region
from textual.scroll_view import ScrollView
from textual.strip import Strip


class LineDiffView(ScrollView):
    def __init__(self, *, name: str | None = None, id: str | None = None) -> None:
        super().__init__(name=name, id=id)
        self._drawn: dict[int, Strip] = {}  # viewport line -> the strip last drawn there

    def draw_line(self, y: int) -> Strip:
        """Line `y` of the viewport as the view's state draws it now."""
        raise NotImplementedError

    def render_line(self, y: int) -> Strip:
        strip = self._drawn[y] = self.draw_line(y)
        return strip

    def refresh_changed_lines(self) -> None:
        """Repaint the lines whose strips differ from those drawn (state changed, nothing
        moved: the caller repaints everything otherwise)."""
        drawn, width = self._drawn, self.size.width
        for y in range(self.scrollable_content_region.height):
            if drawn.get(y) != self.draw_line(y):
                self.refresh(Region(0, y, width, 1))
