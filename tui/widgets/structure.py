"""The memslot lookup structure drawn in the terminal, with the lookup in progress.

Trees are node-link diagrams (in-order columns, one level per row, box-drawing edges) of a
window of levels (`engine.lookup.window`), so a 32764-slot tree is never laid out at once;
cut-off subtrees show "+N" and a click re-roots the window there.  Arrays are strips of
cells in search order, wrapped to the width and rendered a line at a time.  Colours come
from component classes whose TCSS uses the theme's `$node-*` variables only.
"""

from __future__ import annotations

from mmuscope.engine.lookup.views import ArrayView, Shape, TreeNodeView, TreeView
from mmuscope.engine.lookup.window import TreeIndex, TreeWindow, follow_root, layout_window
from rich.style import Style
from textual import events
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.strip import Strip

from ..messages import WindowMoved
from .highlight import CACHE_HIT, COMPARE, HIT_STATE, IDLE, Highlight
from .line_diff import LineDiffView
from .structure_states import (
    DrawnRows,
    TreeStates,
    binary_states,
    styled_strip,
    tree_row_states,
    tree_row_styles,
    tree_states,
)
from .tree_geometry import (
    MIN_AUTO_LEVELS,
    ZOOM_LEVELS,
    TreeGeometry,
    build_tree_geometry,
    slot_label,
    widest_label_slot,
)

WINDOWS_KEPT = 256  # tree windows laid out and kept per tree (a few KB each)


class StructureView(LineDiffView, can_focus=True):
    """Draws the current strategy's structure and animates the lookup on it."""

    COMPONENT_CLASSES = {
        "structure--idle",
        "structure--path",
        "structure--compare",
        "structure--hit",
        "structure--miss",
        "structure--cache-hit",
        "structure--stub",
        "structure--empty",
        "structure--edge",
        "structure--edge-path",
        "structure--rb-red",
        "structure--rb-black",
    }

    DEFAULT_CSS = """
    StructureView { background: $surface; }
    StructureView > .structure--idle { color: $node-idle; }
    StructureView > .structure--path { color: $node-path; text-style: bold; }
    StructureView > .structure--compare { color: $background; background: $node-compare;
        text-style: bold; }
    StructureView > .structure--hit { color: $background; background: $node-hit;
        text-style: bold; }
    StructureView > .structure--miss { color: $background; background: $node-miss;
        text-style: bold; }
    StructureView > .structure--cache-hit { color: $background; background: $node-cache-hit;
        text-style: bold; }
    StructureView > .structure--stub { color: $node-stub; text-style: italic; }
    StructureView > .structure--empty { color: $node-empty; }
    StructureView > .structure--edge { color: $edge; }
    StructureView > .structure--edge-path { color: $edge-path; text-style: bold; }
    StructureView > .structure--rb-red { color: $rb-red; }
    StructureView > .structure--rb-black { color: $rb-black; }
    """

    zoom: reactive[int] = reactive(1)
    levels: reactive[int] = reactive(0)  # tree levels shown; 0 = fit the height
    follow: reactive[bool] = reactive(True)
    _width_in_pass: int | None = None  # see _view_width

    def __init__(self, *, name: str | None = None, id: str | None = None) -> None:
        super().__init__(name=name, id=id)
        self.shape: Shape | None = None
        self.index: TreeIndex | None = None
        self.window_root = 0
        self.highlight: Highlight | None = None
        self._geometry: TreeGeometry | None = None
        self._node_of_slot: dict[int, int] = {}
        self._cell_width = 4
        self._pad_x = 0  # columns left blank to centre a narrow tree
        self._pad_y = 0  # rows left blank above a short tree
        self._size_floor = Size(0, 0)  # the largest tree window since the last set_shape
        self._root_unseen = False  # a new tree: scroll its root into view once laid out
        self._on_root = False  # scrolled to the root: the first lookup starts from the left
        self._window_announced: WindowMoved | None = None
        self._states_cache: (
            tuple[Highlight | None, dict[int, str], list[tuple[int, int]]] | None
        ) = None
        self.auto_zoom = True  # pick the most detailed labels that fit, until `z`/`Z`
        self._auto_depth = MIN_AUTO_LEVELS  # levels that fit the view (when `levels` is 0)
        self._style_cache: dict[str, Style] = {}
        self._drawn_rows = DrawnRows()
        self._row_states_cache: (
            tuple[Highlight | None, TreeGeometry, dict[int, tuple[object, ...]]] | None
        ) = None
        self._binary_cache: tuple[Highlight | None, dict[int, str] | None] | None = None
        self._windows: dict[tuple[int, int, int], TreeWindow] = {}  # (root, zoom, depth)
        self._geometries: dict[tuple[int, int, int], TreeGeometry] = {}

    # -- state ----------------------------------------------------------------------

    def set_shape(self, shape: Shape) -> None:
        """A new structure (strategy switch or slot update)."""
        self.shape = shape
        self._size_floor = Size(0, 0)
        if isinstance(shape, TreeView):
            self.index = TreeIndex.build(shape)
            self._windows.clear()  # laid out for the old tree
            self._geometries.clear()
            self._node_of_slot = {n.slot.id: i for i, n in enumerate(shape.nodes)}
            self._states_cache = None
            self.window_root = 0
            self._root_unseen = True
        else:
            self.index = None
            self._node_of_slot = {}
            self._window_announced = None  # no window: an array is drawn whole
        self.highlight = None
        self._relayout()

    def set_highlight(self, highlight: Highlight | None, via: Highlight | None = None) -> None:
        """Show `highlight`; `via`, when given, is an earlier stage of the same lookup
        that the window follows and scrolls to first (a lookup shown whole at once
        moves the window as if revealed from its first probe), drawn once, at the end."""
        drawn_with = self._drawing()
        stages: tuple[Highlight | None, ...] = (via, highlight) if via is not None else (highlight,)
        if self._on_root and highlight is not None:
            self._on_root = False  # lookups scroll from the left edge, as without it
            self.scroll_to(x=0, animate=False, immediate=True)
        for stage in stages:
            self.highlight = stage
            if self.follow and stage is not None and self.index is not None:
                self._follow(stage)
            self._scroll_to_head()
        if self._drawing() == drawn_with:
            self.refresh_changed_lines()  # the nodes and edges the lookups' paths change
        else:
            self.refresh()

    def _drawing(self) -> tuple[object, ...]:
        """What the drawn lines depend on besides the highlight."""
        return (self.scroll_offset, self.size, self.shape, self._geometry, self.zoom,
                self._cell_width, self._pad_x, self._pad_y)  # fmt: skip

    def watch_zoom(self) -> None:
        self._relayout()

    def set_zoom(self, zoom: int) -> None:
        """The user's zoom: fixed from now on (auto-fit is off)."""
        self.auto_zoom = False
        self.zoom = max(0, min(ZOOM_LEVELS - 1, zoom))

    def watch_levels(self) -> None:
        self._relayout()

    def on_resize(self, event: events.Resize) -> None:
        self._relayout()

    def _style(self, component: str) -> Style:
        style = self._style_cache.get(component)
        if style is None:
            style = self.get_component_rich_style(f"structure--{component}")
            self._style_cache[component] = style
        return style

    def _base_style(self) -> Style:
        """`rich_style`, cached: Textual computes it afresh on every call."""
        style = self._style_cache.get("")
        if style is None:
            style = self._style_cache[""] = self.rich_style
        return style

    def notify_style_update(self) -> None:
        self._style_cache.clear()
        self._drawn_rows.clear()
        super().notify_style_update()

    # -- tree window ----------------------------------------------------------------

    @property
    def window_depth(self) -> int:
        """Levels shown: the user's `levels`, else as many as fit the view."""
        return self.levels or self._auto_depth

    @property
    def _height_levels(self) -> int:
        return max(MIN_AUTO_LEVELS, (self.scrollable_content_region.height + 1) // 2)

    def _relayout(self) -> None:
        shape = self.shape
        if isinstance(shape, TreeView) and shape.nodes and self.index is not None:
            self._layout_tree(self.index)
        elif isinstance(shape, ArrayView):
            self._layout_array(shape)
        else:
            self._geometry = None
            self.virtual_size = Size(0, 0)
        self.refresh()

    def _tree_window(self, index: TreeIndex, zoom: int, depth: int) -> TreeWindow:
        """The window of `depth` levels from `window_root` at `zoom`, laid out once per
        tree: a window that follows lookups goes back to the same few roots, and
        fitting the width and height lays out several depths and zooms each time."""
        key = (self.window_root, zoom, depth)
        window = self._windows.get(key)
        if window is None:

            def label(node: TreeNodeView) -> str:
                return slot_label(node.slot, zoom)

            if len(self._windows) >= WINDOWS_KEPT:
                self._windows.clear()
                self._geometries.clear()
            window = self._windows[key] = layout_window(index, self.window_root, depth, label)
        return window

    def _tree_geometry(self, index: TreeIndex, window: TreeWindow) -> TreeGeometry:
        """`build_tree_geometry` of a window laid out by `_tree_window`, built once."""
        key = (window.root, self.zoom, window.depth)
        geometry = self._geometries.get(key)
        if geometry is None or geometry.window is not window:
            geometry = self._geometries[key] = build_tree_geometry(index, window)
        return geometry

    def _fit_depth(self, index: TreeIndex, view_width: int) -> int:
        """The most levels whose ids-only drawing fits the width (at least
        MIN_AUTO_LEVELS) and the height.  Widths about double per level, so trying
        depths upwards costs about twice the window finally drawn."""
        depth = MIN_AUTO_LEVELS
        while depth < self._height_levels:
            wider = self._tree_window(index, 0, depth + 1)
            if wider.width > view_width or wider.levels <= depth:
                break
            depth += 1
        return depth

    def _layout_tree(self, index: TreeIndex) -> None:
        view_width = self.scrollable_content_region.width
        if not self.levels and view_width:
            self._auto_depth = self._fit_depth(index, view_width)
        depth = self.window_depth
        window = self._tree_window(index, self.zoom, depth)
        if self.auto_zoom and view_width:
            # The most detailed labels that fit the width; the least detailed otherwise.
            for zoom in range(ZOOM_LEVELS - 1, -1, -1):
                window = self._tree_window(index, zoom, depth)
                if window.width <= view_width:
                    break
            self.set_reactive(StructureView.zoom, zoom)
        self._geometry = self._tree_geometry(index, window)
        self._announce_window(index, window)
        self._pad_x = max(0, (view_width - window.width) // 2)
        rows = len(self._geometry.rows)
        self._pad_y = max(0, (self.scrollable_content_region.height - rows) // 3)
        # The scroll area only grows while the structure stays the same: a window that
        # follows lookups changes width at every lookup, and a new virtual size makes
        # Textual lay the whole screen out again (20 ms at 32764 slots).
        floor = self._size_floor
        self._size_floor = Size(
            max(floor.width, window.width), max(floor.height, len(self._geometry.rows))
        )
        self.virtual_size = self._size_floor
        if self._root_unseen and view_width and self.highlight is None:
            self._root_unseen = False
            self._scroll_to_root()

    def _scroll_to_root(self) -> None:
        """A new tree's window wider than the view, before any lookup: its root in the
        middle of the view (from the left edge, the root of a 32764-slot tree sat at
        the right edge, its label cut to its first digit)."""
        geometry = self._geometry
        if geometry is None or not geometry.window.nodes:
            return
        root = min(geometry.window.nodes, key=lambda placed: placed.level)
        region = Region(root.x + self._pad_x, 0, len(root.label), 1)
        self.scroll_to_region(region, animate=False, center=True, y_axis=False, immediate=True)
        self._on_root = True

    def _announce_window(self, index: TreeIndex, window: TreeWindow) -> None:
        """Tell the screen when the window shows another part of the tree."""
        node = index.view.nodes[window.root]
        moved = WindowMoved(
            node.slot.id, node.depth, window.levels, len(index.view.nodes) - len(window.nodes)
        )
        if moved != self._window_announced:
            self._window_announced = moved
            self.post_message(moved)

    def window_nodes(self) -> dict[int, int] | None:
        """The tree window drawn now: node index (into the shape's nodes) -> the slots
        below it that the window leaves out; None when the whole tree is drawn (or an
        array is)."""
        moved, geometry = self._window_announced, self._geometry
        if geometry is None or moved is None or not (moved.depth or moved.hidden):
            return None
        return {placed.index: placed.hidden for placed in geometry.window.nodes}

    @property
    def window_shown(self) -> WindowMoved | None:
        """The window of the tree drawn now, as last announced (None: not a tree yet)."""
        return self._window_announced

    def _layout_array(self, shape: ArrayView) -> None:
        self._geometry = None
        self._pad_x = self._pad_y = 0
        widest = widest_label_slot(shape.entries)
        height = self.scrollable_content_region.height or 1
        zooms = range(ZOOM_LEVELS - 1, -1, -1) if self.auto_zoom else (self.zoom,)
        for zoom in zooms:
            self._cell_width = len(slot_label(widest, zoom)) + 1 if widest else 2
            rows = -(-len(shape.entries) // self._cells_per_row())
            if rows <= height:
                break
        if self.auto_zoom:
            self.set_reactive(StructureView.zoom, zoom)
        per_row = self._cells_per_row()
        self.virtual_size = Size(per_row * self._cell_width, -(-len(shape.entries) // per_row))

    def _follow(self, highlight: Highlight) -> None:
        assert self.index is not None
        target = self._target_node(highlight)
        if target is None:
            return
        root = follow_root(self.index, target, self.window_depth)
        if self.window_root != root and not self._in_window(target):
            self.window_root = root
            self._relayout()

    def _in_window(self, target: int) -> bool:
        if self._geometry is None or self.index is None:
            return False
        path = self.index.path_to(target)
        if self.window_root not in path:
            return False
        return len(path) - path.index(self.window_root) <= self.window_depth

    def _target_node(self, highlight: Highlight) -> int | None:
        if highlight.cache_hit and highlight.slot is not None:
            return self._node_of_slot.get(highlight.slot.id)
        probes = highlight.probes or ()
        if not probes:
            return None
        last = probes[max(0, min(highlight.shown, len(probes)) - 1)]
        return self._node_of_slot.get(last.slot.id) if last.slot else None

    def reroot(self, index: int | None) -> None:
        """Show the window from node `index` (None: the tree's root)."""
        if self.index is None:
            return
        self.window_root = 0 if index is None else index
        self._relayout()
        self.scroll_to(0, 0, animate=False)

    def reroot_up(self) -> None:
        if self.index is not None and self.index.view.nodes:
            parent = self.index.parent[self.window_root]
            self.reroot(parent)

    def on_click(self, event: events.Click) -> None:
        if self._geometry is None:
            return
        offset = event.get_content_offset(self)  # inside the border and padding
        if offset is None:
            return
        x = offset.x + int(self.scroll_x) - self._pad_x
        y = offset.y + int(self.scroll_y) - self._pad_y
        if y % 2:
            return
        for placed in self._geometry.window.nodes:
            if placed.level == y // 2 and placed.x <= x < placed.end:
                self.follow = False
                self.reroot(placed.index)
                return

    # -- highlighting ---------------------------------------------------------------

    def _tree_states(self) -> TreeStates:
        """Node index -> state, and the (parent, child) edges on the revealed path;
        worked out once per highlight (a path can be 32764 nodes long) and kept."""
        cached = self._states_cache
        if cached is not None and cached[0] is self.highlight:
            return cached[1], cached[2]
        states, path_edges = tree_states(self.highlight, self._node_of_slot)
        self._states_cache = (self.highlight, states, path_edges)
        return states, path_edges

    def _row_states(self) -> dict[int, tuple[object, ...]]:
        """Geometry row -> the states painted on it, once per highlight and window."""
        assert self._geometry is not None
        cached = self._row_states_cache
        if cached is None or cached[0] is not self.highlight or cached[1] is not self._geometry:
            rows = tree_row_states(self._geometry, self._tree_states())
            cached = self._row_states_cache = (self.highlight, self._geometry, rows)
        return cached[2]

    def _scroll_to_head(self) -> None:
        """Scroll the probe in progress into view, now: `set_highlight` then repaints
        the lines that change at the new offset (a deferred scroll would have them
        drawn at the old one first, then all again)."""
        highlight = self.highlight
        if highlight is None or self.shape is None:
            return
        if isinstance(self.shape, ArrayView):
            region = self._array_head(highlight)
            if region is not None:
                self.scroll_to_region(region, animate=False, immediate=True)
            return
        if self._geometry is None:
            return
        states, _ = self._tree_states()
        head = [i for i, s in states.items() if s in (COMPARE, HIT_STATE, CACHE_HIT, "miss")]
        for placed in self._geometry.window.nodes:
            if placed.index in head:
                region = Region(placed.x, 2 * placed.level, len(placed.label), 1)
                self.scroll_to_region(region, animate=False, spacing=None, immediate=True)
                return

    # -- drawing --------------------------------------------------------------------

    def _view_width(self) -> int:
        """The scrollable content's width: worked out once per drawing pass (a pass of
        the compositor, or of refresh_changed_lines; nothing is laid out during one)."""
        width = self._width_in_pass
        return self.scrollable_content_region.width if width is None else width

    def render_lines(self, crop: Region) -> list[Strip]:
        self._width_in_pass = self.scrollable_content_region.width
        try:
            return super().render_lines(crop)
        finally:
            self._width_in_pass = None

    def refresh_changed_lines(self) -> None:
        self._width_in_pass = self.scrollable_content_region.width
        try:
            super().refresh_changed_lines()
        finally:
            self._width_in_pass = None

    def draw_line(self, y: int) -> Strip:
        """Line `y` of the view: drawn once for what it shows (DrawnRows)."""
        scroll_x, scroll_y = self.scroll_offset
        width = self._view_width()
        base = self._base_style()
        row = y + scroll_y
        shape, geometry = self.shape, self._geometry
        key = (row, scroll_x, width, id(shape), id(geometry), id(base), self.zoom,
               self._cell_width, self._pad_x, self._pad_y)  # fmt: skip
        drawn_from = (shape, geometry, base)
        state = self._painted_on(row)
        strip = self._drawn_rows.get(key, drawn_from, state)
        if strip is None:
            strip = self._draw_row(row, scroll_x, width)
            self._drawn_rows.put(key, drawn_from, state, strip)
        return strip

    def _painted_on(self, row: int) -> tuple[object, ...]:
        """What the highlight paints on view row `row` (the scroll included)."""
        shape = self.shape
        if isinstance(shape, ArrayView):
            per_row = self._cells_per_row()
            start = row * per_row
            return self._cells_states(start, min(start + per_row, len(shape.entries)))
        if self._geometry is None:
            return ()
        return self._row_states().get(row - self._pad_y, ())

    def _draw_row(self, row: int, scroll_x: int, width: int) -> Strip:
        base = self._base_style()
        if isinstance(self.shape, ArrayView):
            strip = self._array_line(row, scroll_x, width)
        elif self._geometry is not None and 0 <= row - self._pad_y < len(self._geometry.rows):
            row -= self._pad_y
            pad = self._pad_x
            strip = self._tree_line(row, scroll_x, width - pad)
            if pad:
                strip = Strip.join([Strip.blank(pad, base), strip])
        else:
            strip = Strip.blank(width, base)
        return strip.crop_extend(0, width, base)

    def _tree_line(self, row: int, scroll_x: int, width: int) -> Strip:
        assert self._geometry is not None
        text, styles = tree_row_styles(self._geometry, row, scroll_x, width, self._tree_states())
        return self._segments(text, styles)

    def _segments(self, text: str, styles: list[str | None]) -> Strip:
        return styled_strip(text, styles, self._base_style(), self._style)

    # -- an array's cells (linear, size-sorted and binary search over kvm_memslots' array):
    # the slots in search order, wrapped to the view's width, each painted with the state
    # the lookup in progress gives it, and the cell of the probe in progress

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
