"""`scroll_through`: one scroll to where scrolling to several regions in turn ends.

A lookup shown whole at once scrolls the structure drawing as if its probes were
revealed one by one: first to the first probe, then to the last (StructureView's
`via`).  Each `scroll_to_region(..., immediate=True)` is a scroll of its own (the scroll
reactives, their watchers, the scrollbar, a repaint of the whole view and a reflow of the
screen), and no frame is drawn between them; the offset they end at is worked out here
as Textual's `Widget.scroll_to_region` (Textual 8.2) works out each step (no spacing, not
to the top or centre), and the view scrolls once.  tests/test_tui_structure_scroll.py
compares the offsets and the screens with those of the step-by-step scrolls.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.geometry import Offset, Region, clamp
from textual.widget import Widget


def scroll_delta(widget: Widget, offset: Offset, region: Region) -> Offset:
    """The scroll `scroll_to_region(region)` makes from `offset` (its `clamp_delta`)."""
    window = widget.scrollable_content_region.at_offset(offset)
    if region.contains_region(window):  # Textual's test: the region holds the whole window
        return Offset()
    delta = Region.get_scroll_to_visible(window, region)
    x, y = offset
    delta = Offset(
        clamp(x + delta.x, 0, widget.max_scroll_x) - x,
        clamp(y + delta.y, 0, widget.max_scroll_y) - y,
    )
    if not widget.allow_horizontal_scroll:
        delta = Offset(0, delta.y)
    if not widget.allow_vertical_scroll:
        delta = Offset(delta.x, 0)
    return delta


def scroll_through(widget: Widget, regions: Iterable[Region | None]) -> None:
    """Scroll `widget` to where `scroll_to_region(region, animate=False,
    immediate=True)` for each region in turn (None: no scroll) ends, in one scroll."""
    start = offset = widget.scroll_offset
    for region in regions:
        if region is not None:
            offset += scroll_delta(widget, offset, region)
    if offset != start:
        widget.scroll_to(offset.x, offset.y, animate=False, immediate=True)
