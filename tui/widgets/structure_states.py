"""What a lookup's highlight paints on the structure drawing, row by row, and the drawn
rows kept by what they show.

A lookup's probes give each node (tree) or position (array) it reached a state (`path`,
`compare`, `hit`, `miss`, `cache-hit`: the order kvm's search_memslots and the tree walks
visit them in); a row of the drawing is the row of the tree window's geometry (or the
array's strip of cells) with those states painted over it.  A row shows the same strip
as long as its text, scroll and the states on it are the same, so `DrawnRows` keeps each
strip drawn with the row's states: a drawing scrolled to follow a lookup, or a window
that goes back to a root it showed before, hands back the same strips.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from .highlight import CACHE_HIT, Highlight
from .tree_geometry import TreeGeometry, paint_run

ROWS_KEPT = 512  # drawn rows kept (a few screens of rows, of a few windows)
TreeStates = tuple[dict[int, str], list[tuple[int, int]]]


def tree_states(highlight: Highlight | None, node_of_slot: dict[int, int]) -> TreeStates:
    """Node index -> state, and the (parent, child) edges on the revealed path."""
    states: dict[int, str] = {}
    path_edges: list[tuple[int, int]] = []
    if highlight is None:
        return states, path_edges
    if highlight.cache_hit and highlight.slot is not None:
        node = node_of_slot.get(highlight.slot.id)
        if node is not None:
            states[node] = CACHE_HIT
        return states, path_edges
    previous = None
    for k, probe in enumerate(highlight.probes or ()):
        state = highlight.state_at(k)
        if state is None or probe.slot is None:
            break
        node = node_of_slot.get(probe.slot.id)
        if node is None:
            continue
        states[node] = state
        if previous is not None:
            path_edges.append((previous, node))
        previous = node
    return states, path_edges


def binary_states(highlight: Highlight | None) -> dict[int, str] | None:
    """Array position -> state of a binary search's probes (None: not a search)."""
    if highlight is None or highlight.probes is None:
        return None
    states: dict[int, str] = {}
    for k, probe in enumerate(highlight.probes):
        state = highlight.state_at(k)
        if state is None:
            break
        states[probe.position] = state
    return states


def tree_row_states(geometry: TreeGeometry, states: TreeStates) -> dict[int, tuple[object, ...]]:
    """Geometry row -> what the highlight paints on it: the states of the row's nodes
    (even rows) and the path's edges drawn in it (odd rows); rows left out paint none."""
    node_states, path_edges = states
    rows: dict[int, list[object]] = {}
    for placed in geometry.window.nodes:
        state = node_states.get(placed.index)
        if state is not None:
            rows.setdefault(2 * placed.level, []).append((placed.index, state))
    for edge in path_edges:
        found = geometry.edge_runs.get(edge)
        if found is not None:
            rows.setdefault(found[0], []).append(edge)
    return {row: tuple(painted) for row, painted in rows.items()}


def tree_row_styles(
    geometry: TreeGeometry, row: int, scroll_x: int, width: int, states: TreeStates
) -> tuple[str, list[str | None]]:
    """Geometry row `row` from column `scroll_x`, `width` wide: its text and the
    component of each cell (the base runs, then the highlight's states over them)."""
    text = geometry.rows[row][scroll_x : scroll_x + width]
    styles: list[str | None] = [None] * len(text)
    runs = geometry.runs[row]
    first = max(0, bisect_right(runs, (scroll_x, 1 << 60, "")) - 1)
    for start, end, component in runs[first:]:
        if start >= scroll_x + width:
            break
        paint_run(styles, start - scroll_x, end - scroll_x, component)
    node_states, path_edges = states
    if row % 2 == 0:
        for placed in geometry.window.nodes:
            if 2 * placed.level == row and placed.index in node_states:
                end = placed.end - (len(f" +{placed.hidden}") if placed.hidden else 0)
                paint_run(styles, placed.x - scroll_x, end - scroll_x, node_states[placed.index])
    else:
        for edge in path_edges:
            found = geometry.edge_runs.get(edge)
            if found is not None and found[0] == row:
                for start, end, component in found[1]:
                    paint_run(styles, start - scroll_x, end - scroll_x, component)
    return text, styles


def styled_strip(
    text: str, styles: list[str | None], base: Style, style_of: Callable[[str], Style]
) -> Strip:
    """`text` as one segment per run of cells of one component, over `base`."""
    segments: list[Segment] = []
    start = 0
    for i in range(1, len(text) + 1):
        if i == len(text) or styles[i] != styles[start]:
            component = styles[start]
            style = base + style_of(component) if component else base
            segments.append(Segment(text[start:i], style))
            start = i
    return Strip(segments)


class DrawnRows:
    """Strips drawn per row key, with the objects the row was drawn from (compared by
    identity: a key holds their ids) and the states painted on it."""

    def __init__(self) -> None:
        self._rows: dict[Hashable, tuple[tuple[object, ...], Hashable, Strip]] = {}

    def get(self, key: Hashable, drawn_from: tuple[object, ...], state: Hashable) -> Strip | None:
        known = self._rows.get(key)
        if known is None or known[1] != state:
            return None
        if any(a is not b for a, b in zip(known[0], drawn_from, strict=True)):
            return None
        return known[2]

    def put(
        self, key: Hashable, drawn_from: tuple[object, ...], state: Hashable, strip: Strip
    ) -> None:
        if len(self._rows) >= ROWS_KEPT:
            self._rows.clear()
        self._rows[key] = (drawn_from, state, strip)

    def clear(self) -> None:
        self._rows.clear()
