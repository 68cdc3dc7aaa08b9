"""`LineDiffView`: a line-API `ScrollView` that repaints only the lines that changed.

Textual's work per repainted line (the styles cache: border, padding, colour filters, new
strips) is most of a frame's cost, so a view whose state changes a few lines (a lookup's
highlight on a tree of 512 slots) keeps the strips it drew and, after such a change,
repaints the lines whose new strips differ; the strips drawn to find them are the ones
the repaint shows (each line is drawn once a frame, not once to compare and again to
show).  Anything else that moves the drawing (a scroll, a new size or layout) repaints
the whole view as before.
"""

from __future__ import annotations

from textual.geometry import Offset, Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from typing_extensions import Self


class LineDiffView(ScrollView):
    def __init__(self, *, name: str | None = None, id: str | None = None) -> None:
        super().__init__(name=name, id=id)
        self._drawn: dict[int, Strip] = {}  # viewport line -> the strip last drawn there
        self._fresh: dict[int, Strip] = {}  # lines drawn by the last diff, not yet shown
        self._fresh_for: tuple[Offset, Size] | None = None  # the view they were drawn at

    def draw_line(self, y: int) -> Strip:
        """Line `y` of the viewport as the view's state draws it now."""
        raise NotImplementedError

    def render_line(self, y: int) -> Strip:
        strip = self._fresh.pop(y, None)
        if strip is None or self._fresh_for != (self.scroll_offset, self.size):
            strip = self.draw_line(y)
        strip = self._drawn[y] = strip
        return strip

    def refresh_changed_lines(self) -> None:
        """Repaint the lines whose strips differ from those drawn (state changed, nothing
        moved: the caller repaints everything otherwise)."""
        drawn, width = self._drawn, self.size.width
        self._fresh.clear()
        self._fresh_for = (self.scroll_offset, self.size)
        changed = []
        for y in range(self.scrollable_content_region.height):
            strip = self.draw_line(y)
            if drawn.get(y) != strip:
                self._fresh[y] = strip
                changed.append(y)
        if changed:
            super().refresh(*row_regions(changed, width))

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Self:
        if not regions:
            self._fresh.clear()  # all drawn again, from the state then
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)


def row_regions(rows: list[int], width: int) -> list[Region]:
    """The regions of `rows` (ascending) of a widget `width` wide, a run of adjacent
    rows in one region: one refresh call for a frame's changed rows, not one a row
    (each call costs Textual's bookkeeping)."""
    regions: list[Region] = []
    start = previous = rows[0]
    for row in rows[1:]:
        if row != previous + 1:
            regions.append(Region(0, start, width, previous - start + 1))
            start = row
        previous = row
    regions.append(Region(0, start, width, previous - start + 1))
    return regions
