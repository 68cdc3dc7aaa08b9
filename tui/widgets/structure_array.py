"""An array strategy's drawing in the structure view (linear, size-sorted and binary
search over `kvm_memslots`' array): the slots as cells in search order, wrapped to the
view's width, each painted with the state the lookup in progress gives it (binary
search's probes, linear's scan, a cache hit), and the cell of the probe in progress that
the view scrolls to.
"""

from __future__ import annotations

from mmuscope.engine.lookup.views import ArrayView, Shape
from textual.geometry import Region
from textual.strip import Strip

from .highlight import CACHE_HIT, IDLE, Highlight
from .structure_states import binary_states
from .tree_geometry import slot_label


class ArrayCells:
    """Mixin of StructureView (first in its bases): an ArrayView's cells.  It reads the
    view's shape, highlight, zoom and cell width, and draws through the view's
    `_view_width()` (the content's width in a drawing pass) and `_segments()`."""

    shape: Shape | None
    highlight: Highlight | None
    zoom: int
    _cell_width: int
    _binary_cache: tuple[Highlight | None, dict[int, str] | None] | None

    def _view_width(self) -> int:
        raise NotImplementedError  # StructureView's

    def _segments(self, text: str, styles: list[str | None]) -> Strip:
        raise NotImplementedError  # StructureView's

    def _array_state(self, position: int, binary: dict[int, str] | None) -> str | None:
        highlight = self.highlight
        if highlight is None:
            return None
        if highlight.cache_hit:
            slot = highlight.slot
            entry = self.shape.entries[position] if isinstance(self.shape, ArrayView) else None
            return CACHE_HIT if slot is not None and entry is slot else None
        if binary is not None:
            return binary.get(position)
        return highlight.state_at(position)

    def _cells_states(self, start: int, end: int) -> tuple[str | None, ...]:
        """`_array_state` of positions `start` to `end` (excluded), a row's at once: a
        binary search's few probes looked up, a scan's revealed prefix (state_at), None
        past it; a drawing pass asks this for each row it draws."""
        highlight = self.highlight
        count = max(0, end - start)
        if highlight is None:
            return (None,) * count
        if highlight.cache_hit:
            return tuple(self._array_state(position, None) for position in range(start, end))
        shape = self.shape
        binary = (
            self._binary_states()
            if isinstance(shape, ArrayView) and shape.strategy == "binary"
            else None
        )
        if binary is not None:
            return tuple(map(binary.get, range(start, end)))
        revealed = min(end, max(start, highlight.shown))
        return tuple(map(highlight.state_at, range(start, revealed))) + (None,) * (end - revealed)

    def _binary_states(self) -> dict[int, str] | None:
        """binary_states of the highlight, once per highlight."""
        cached = self._binary_cache
        if cached is None or cached[0] is not self.highlight:
            cached = self._binary_cache = (self.highlight, binary_states(self.highlight))
        return cached[1]

    def _array_head(self, highlight: Highlight | None) -> Region | None:
        """The cell of an array's probe in progress (None: none)."""
        position = None if highlight is None else self._head_position(highlight)
        if position is None:
            return None
        per_row = self._cells_per_row()
        x = (position % per_row) * self._cell_width
        return Region(x, position // per_row, self._cell_width, 1)

    def _head_position(self, highlight: Highlight) -> int | None:
        assert isinstance(self.shape, ArrayView)
        if highlight.cache_hit:
            entries = self.shape.entries
            return next((i for i, e in enumerate(entries) if e is highlight.slot), None)
        if highlight.probes is not None:
            probes = highlight.probes[: highlight.shown]
            return probes[-1].position if probes else None
        return max(0, highlight.shown - 1)

    def _cells_per_row(self) -> int:
        width = self._view_width() or 80
        return max(1, width // self._cell_width)

    def _array_line(self, row: int, scroll_x: int, width: int) -> Strip:
        shape = self.shape
        assert isinstance(shape, ArrayView)
        per_row = self._cells_per_row()
        cell = self._cell_width
        parts: list[str] = []
        styles: list[str | None] = []
        entries, zoom = shape.entries, self.zoom
        start = row * per_row
        end = min(start + per_row, len(entries))
        for position, state in zip(range(start, end), self._cells_states(start, end), strict=True):
            entry = entries[position]
            label = slot_label(entry, zoom) if entry is not None else "·"
            component = state or (IDLE if entry is not None else "empty")
            if entry is not None and entry.readonly and state is None:
                component = "stub"
            parts.append(label.ljust(cell - 1) + " ")
            styles.extend([component] * (cell - 1) + [None])
        text = "".join(parts)[scroll_x : scroll_x + width]
        return self._segments(text, styles[scroll_x : scroll_x + width])
