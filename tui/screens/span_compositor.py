"""`SpanCompositor`: Textual's compositor, with a partial update that draws only the
widgets under the regions that changed.

Textual's `Compositor.render_partial_update` (textual 8) takes the bounding box of every
dirty region of a frame and asks each widget that overlaps the box for all its visible
lines; a frame of the explorer that changes the header and the event log (top and
bottom of the screen) makes every widget of the screen draw every line, served from its
styles cache but each line still through the widget's styles, line filters and divided
at the screen's cuts.  This one asks each widget only for the rows that hold a dirty
region overlapping it, over its whole visible width (so that every chop the update
writes is filled as Textual fills it), and skips widgets that no dirty region touches.

The update written is Textual's own: for every cell of a dirty span the front-most
widget's strip at that cell, as `_render_chops` picks it (the cuts are every widget's
edges, so a chop is covered by the same widgets across its width).  Full updates (the
first frame, resizes, SVG screenshots) are Textual's, unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.strip import Strip


class SpanCompositor(Compositor):
    """A `Compositor` whose partial updates render the dirty rows of each widget only."""

    def render_partial_update(self) -> ChopsUpdate | None:
        update_regions = self._dirty_regions.copy()
        self._dirty_regions.clear()
        if not update_regions:
            return None
        screen = self.size.region
        dirty = [region.intersection(screen) for region in update_regions]
        spans = list(self._regions_to_spans(update_regions))
        rendered = {y for y, _, _ in spans}
        chops = self._render_dirty_rows([region for region in dirty if region], rendered)
        chop_ends = [cut_set[1:] for cut_set in self.cuts]
        return ChopsUpdate(chops, spans, chop_ends)

    def _render_dirty_rows(
        self, dirty: list[Region], rendered: set[int]
    ) -> Sequence[Mapping[int, Strip | None]]:
        """Textual's `_render_chops`, each widget drawn over the rows of the dirty regions
        that overlap its visible part (front to back: the first strip at a cut wins)."""
        cuts = self.cuts
        chops: list[dict[int, Strip | None]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
        for widget, (region, clip) in self.visible_widgets.items():
            visible = region.intersection(clip)
            first_cut, last_cut = visible.column_span
            rows = self._rows_to_draw(visible, dirty, rendered, chops)
            if rows is None:
                continue
            top, bottom = rows
            strips = widget.render_lines(
                Region(visible.x - region.x, top - region.y, visible.width, bottom - top)
            )
            for y, strip in zip(range(top, bottom), strips, strict=False):
                if y not in rendered:
                    continue
                chops_line = chops[y]
                final_cuts = [cut for cut in cuts[y] if last_cut >= cut >= first_cut]
                pieces = strip.divide([cut - visible.x for cut in final_cuts[1:]])
                for cut, piece in zip(final_cuts, pieces, strict=False):
                    if chops_line.get(cut) is None:
                        chops_line[cut] = piece
        return chops

    def _rows_to_draw(
        self,
        visible: Region,
        dirty: list[Region],
        rendered: set[int],
        chops: list[dict[int, Strip | None]],
    ) -> tuple[int, int] | None:
        """The first and past-the-last screen rows a widget showing at `visible` must draw:
        those under a dirty region where a widget in front of it has not filled a chop
        of its width (a container behind its children draws only the gaps)."""
        touched = [d for d in dirty if visible.overlaps(d)]
        if not touched:
            return None
        first_cut, last_cut = visible.column_span
        cuts = self.cuts
        top = max(visible.y, min(d.y for d in touched))
        bottom = min(visible.bottom, max(d.bottom for d in touched))
        needed = [
            y
            for y in range(top, bottom)
            if y in rendered
            and any(chops[y][cut] is None for cut in cuts[y] if first_cut <= cut < last_cut)
        ]
        if not needed:
            return None
        return needed[0], needed[-1] + 1
