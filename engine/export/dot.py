"""Graphviz dot text for a memslot lookup structure, optionally with one lookup drawn on it.

Alex Williamson's 2011 RFC (the memslot-search thread: "[RFC PATCH 0/3] Weight-balanced
binary tree + KVM growable memory slots using wbtree") shipped a debug `print_tree()`
that dumped the tree as Graphviz dot, to be turned into a picture with
`dot -Tpdf foo.dot > foo.pdf`.  This module does the same for every structure mmuscope
models: trees (the wbtree and today's rbtree) become one node per slot with `L`/`R`
edges, arrays become tables of cells in search order. A `LookupTrace` (`--path GFN`) is
drawn on top: visited nodes orange, the hit green, each numbered in visit order.
A `window` (the levels the explorer shows of a big tree: node index -> the slots below it
the window leaves out) draws those nodes alone, each cut-off subtree as a `+N slots`
stub, as the terminal drawing does.

Pure text: no Graphviz, Textual or Rich import; `render.py` runs the `dot` binary.  Trees
are walked by index, never recursively (the `max` layout has 32764 slots and a wbtree can
degenerate into a chain that deep), and the output is deterministic.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

from ..lookup.base import HIT, LookupTrace
from ..lookup.views import ArrayView, TreeNodeView, TreeView
from ..memslots.memslot import MemorySlot

FONT = "Helvetica"
HIT_FILL = "#a6e3a1"
HIT_LINE = "#1b7a1b"
VISIT_FILL = "#ffc266"
VISIT_LINE = "#c86400"
EMPTY_FILL = "#eeeeee"
EMPTY_FONT = "#999999"
RB_LINE = {"red": "#cc0000", "black": "#000000"}
ROW_SPLIT_OVER = 256  # arrays longer than this are drawn as several rows ...
ROW_CELLS = 64  # ... of at most this many cells
TABLE = '<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="4">'

Attrs = Mapping[str, str]


# --- escaping -------------------------------------------------------------------------


def escape_string(text: str) -> str:
    """Escape `text` for the inside of a double-quoted dot string (backslash, quote, newline)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def quote(text: str) -> str:
    """A double-quoted dot string holding exactly `text`."""
    return f'"{escape_string(text)}"'


def escape_html(text: str) -> str:
    """Escape `text` for an HTML-like label (`&`, `<`, `>`, `"`)."""
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def format_attrs(attrs: Attrs) -> str:
    """`[k="v", ...]` in the given order; an HTML label (`<...>`) is passed through unquoted."""
    parts = []
    for key, value in attrs.items():
        is_html = key == "label" and value.startswith("<") and value.endswith(">")
        parts.append(f"{key}={value if is_html else quote(value)}")
    return "[" + ", ".join(parts) + "]"


def graph_label(lines: Iterable[str]) -> str:
    """A quoted graph label whose lines are all left-justified (`\\l`)."""
    return '"' + "".join(escape_string(line) + "\\l" for line in lines) + '"'


# --- lookup traces --------------------------------------------------------------------


def trace_summary(trace: LookupTrace, unit: str, units: str) -> str:
    """`lookup gfn 0x1234: 3 nodes visited, hit slot 5` (or `…, miss`)."""
    n = trace.visited
    result = f"hit slot {trace.slot.id}" if trace.slot is not None else "miss"
    cached = [c.cache for c in trace.cache_probes if c.hit]
    if cached:
        result += f" (from the {cached[0]} cache)"
    return f"lookup gfn {trace.gfn:#x}: {n} {unit if n == 1 else units} visited, {result}"


def visit_marks(order: list[int]) -> str:
    """`#1` (or `#2,#5` for an entry looked at twice)."""
    return ",".join(f"#{n}" for n in order)


def slot_key(slot: MemorySlot) -> tuple[int, int]:
    """What identifies a slot inside one drawing: (address space, slot id)."""
    return (slot.as_id, slot.id)


def tree_visits(view: TreeView, trace: LookupTrace | None) -> tuple[list[int], int | None]:
    """Node indexes the lookup probed, in order, and the index of the hit node (if any)."""
    if trace is None:
        return [], None
    index = {slot_key(node.slot): i for i, node in enumerate(view.nodes)}
    path: list[int] = []
    hit: int | None = None
    for probe in trace.probes:
        i = index.get(slot_key(probe.slot)) if probe.slot is not None else None
        if i is None:
            continue
        path.append(i)
        if probe.outcome == HIT:
            hit = i
    return path, hit


def visit_order(path: list[int]) -> dict[int, list[int]]:
    """Index -> the 1-based visit numbers at which the lookup looked at it."""
    order: dict[int, list[int]] = {}
    for n, i in enumerate(path, start=1):
        order.setdefault(i, []).append(n)
    return order


def highlight(visited: bool, hit: bool) -> tuple[str, str] | None:
    """(fill, line) colours for a probed node or cell, None if the lookup did not touch it."""
    if hit:
        return HIT_FILL, HIT_LINE
    if visited:
        return VISIT_FILL, VISIT_LINE
    return None


# --- trees ----------------------------------------------------------------------------


def node_id(slot: MemorySlot) -> str:
    """`s<as_id>_<slot id>`, the dot id of a tree node."""
    return f"s{slot.as_id}_{slot.id}"


def gfn_range(slot: MemorySlot) -> str:
    """`0x100-0x1ff`: first and last (inclusive) gfn of the slot."""
    return f"{slot.base_gfn:#x}-{slot.end_gfn - 1:#x}"


def tree_node_label(strategy: str, node: TreeNodeView, marks: str) -> str:
    """Slot id, gfn range, npages, and the wbtree weight or the rbtree colour."""
    head = f"slot {node.slot.id}"
    lines = [f"{marks} · {head}" if marks else head, gfn_range(node.slot)]
    lines.append(f"{node.slot.npages} pages")
    if strategy == "wbtree":
        lines.append(f"weight {node.weight}")
    if node.color is not None:
        lines.append(node.color)
    return "\n".join(lines)


def tree_node_attrs(strategy: str, node: TreeNodeView, marks: str, hit: bool) -> dict[str, str]:
    """Label and colours: an rbtree node's colour is its border, the lookup's is the fill."""
    attrs = {"label": tree_node_label(strategy, node, marks)}
    if node.color is not None:
        attrs["color"] = RB_LINE.get(node.color, "#000000")
        attrs["penwidth"] = "2"
    colours = highlight(bool(marks), hit)
    if colours is not None:
        attrs["fillcolor"] = colours[0]
        attrs["penwidth"] = "3"
        attrs.setdefault("color", colours[1])
    return attrs


def path_edges(view: TreeView, path: list[int]) -> set[tuple[int, int]]:
    """Parent->child index pairs the lookup walked down."""
    taken = set()
    for a, b in itertools.pairwise(path):
        if b in (view.nodes[a].left, view.nodes[a].right):
            taken.add((a, b))
    return taken


def child_edges(
    view: TreeView,
    i: int,
    taken: set[tuple[int, int]],
    hit: int | None,
    window: Mapping[int, int] | None = None,
) -> list[str]:
    """The `L`/`R` edges out of node `i`; a lone child gets an invisible sibling point.
    A node whose subtree the `window` cuts off gets a `+N slots` stub instead."""
    node = view.nodes[i]
    parent = node_id(node.slot)
    hidden = window.get(i, 0) if window is not None else 0
    if hidden:
        stub = f"{parent}_hidden"
        return [
            f"  {stub} {format_attrs({'label': f'+{hidden} slots', 'shape': 'plaintext'})};",
            f"  {parent} -> {stub} [style=dashed];",
        ]
    if node.left is None and node.right is None:
        return []
    lines = []
    for side, child in (("L", node.left), ("R", node.right)):
        if child is None:
            ghost = f"{parent}_nil{side}"
            lines.append(f"  {ghost} [shape=point, style=invis];")
            lines.append(f"  {parent} -> {ghost} [style=invis];")
            continue
        attrs = {"label": side}
        if (i, child) in taken:
            line = HIT_LINE if child == hit else VISIT_LINE
            attrs.update(color=line, fontcolor=line, penwidth="3")
        lines.append(f"  {parent} -> {node_id(view.nodes[child].slot)} {format_attrs(attrs)};")
    return lines


def tree_body(
    view: TreeView, trace: LookupTrace | None, window: Mapping[int, int] | None = None
) -> list[str]:
    """Node statements in breadth-first order, then the edges, all by index (no recursion);
    with a `window`, its nodes only."""
    if not view.nodes:
        return ['  empty [shape=plaintext, label="(no slots)"];']
    path, hit = tree_visits(view, trace)
    order = visit_order(path)
    drawn = range(len(view.nodes)) if window is None else sorted(window)
    lines = ['  node [shape=box, style="rounded,filled", fillcolor=white];']
    for i in drawn:
        node = view.nodes[i]
        attrs = tree_node_attrs(view.strategy, node, visit_marks(order.get(i, [])), i == hit)
        lines.append(f"  {node_id(node.slot)} {format_attrs(attrs)};")
    taken = path_edges(view, path)
    for i in drawn:
        lines.extend(child_edges(view, i, taken, hit, window))
    return lines


# --- arrays ---------------------------------------------------------------------------


def array_visits(trace: LookupTrace | None) -> tuple[list[int], int | None]:
    """Array indexes the lookup probed, in order, and the index where it hit (if any)."""
    if trace is None:
        return [], None
    path = [p.position for p in trace.probes]
    hits = [p.position for p in trace.probes if p.outcome == HIT]
    return path, (hits[0] if hits else None)


def cell_lines(index: int, slot: MemorySlot | None) -> list[str]:
    """`[i]`, `slot N`, `0x100-0x1ff`, `512 pg`; an unused entry is just `[i]` and `-`."""
    if slot is None:
        return [f"[{index}]", "-"]
    return [f"[{index}]", f"slot {slot.id}", gfn_range(slot), f"{slot.npages} pg"]


def array_cell(index: int, slot: MemorySlot | None, marks: str, hit: bool) -> str:
    """One `<TD>`: greyed when unused, filled and thick-bordered when the lookup probed it."""
    lines = ([marks] if marks else []) + cell_lines(index, slot)
    text = "<BR/>".join(escape_html(line) for line in lines)
    attrs = f'PORT="e{index}"'
    colours = highlight(bool(marks), hit)
    if colours is not None:
        attrs += f' BGCOLOR="{colours[0]}" COLOR="{colours[1]}" BORDER="3"'
        text = f"<B>{text}</B>"
    elif slot is None:
        attrs += f' BGCOLOR="{EMPTY_FILL}"'
        text = f'<FONT COLOR="{EMPTY_FONT}">{text}</FONT>'
    return f"<TD {attrs}>{text}</TD>"


def array_rows(count: int) -> list[range]:
    """One row for up to 256 entries, otherwise rows of 64 so dot can lay them out."""
    if count <= ROW_SPLIT_OVER:
        return [range(count)]
    return [range(start, min(start + ROW_CELLS, count)) for start in range(0, count, ROW_CELLS)]


def array_body(view: ArrayView, trace: LookupTrace | None) -> list[str]:
    """One table node per row of cells, rows chained top to bottom by invisible edges."""
    if not view.entries:
        return ['  empty [shape=plaintext, label="(no entries)"];']
    path, hit = array_visits(trace)
    order = visit_order(path)
    lines = ["  node [shape=plaintext];"]
    rows = array_rows(len(view.entries))
    for r, row in enumerate(rows):
        cells = "".join(
            array_cell(i, view.entries[i], visit_marks(order.get(i, [])), i == hit) for i in row
        )
        lines.append(f"  a{r} [label=<{TABLE}<TR>{cells}</TR></TABLE>>];")
    lines.extend(f"  a{r} -> a{r + 1} [style=invis];" for r in range(len(rows) - 1))
    return lines


# --- the whole graph --------------------------------------------------------------------


def header_lines(
    view: TreeView | ArrayView, title: str | None, trace: LookupTrace | None
) -> list[str]:
    """Lines of the graph label: title, the array's order, the lookup summary."""
    lines = [title if title is not None else view.strategy]
    if isinstance(view, ArrayView):
        lines.append(f"order: {view.order}")
        if trace is not None:
            lines.append(trace_summary(trace, "entry", "entries"))
    elif trace is not None:
        lines.append(trace_summary(trace, "node", "nodes"))
    return lines


def shape_to_dot(
    view: TreeView | ArrayView,
    *,
    title: str | None = None,
    trace: LookupTrace | None = None,
    window: Mapping[int, int] | None = None,
) -> str:
    """Dot text for `view` (a tree in the style of the RFC's `print_tree`, or an array).

    `title` (default: the strategy name) heads the graph label, top left; `trace` draws one
    lookup on the structure; `window` (a tree's node indexes -> slots cut off below each)
    draws only those nodes, each cut-off subtree a stub.  Feed the result to
    `dot -Tpdf foo.dot > foo.pdf`.
    """
    match view:
        case TreeView():
            body = tree_body(view, trace, window)
        case ArrayView():
            body = array_body(view, trace)
    head = [
        "digraph memslots {",
        f"  graph [label={graph_label(header_lines(view, title, trace))}, labelloc=t, "
        f'labeljust=l, fontname="{FONT}", ordering=out];',
        f'  node [fontname="{FONT}", fontsize=10];',
        f'  edge [fontname="{FONT}", fontsize=9, arrowsize=0.6];',
    ]
    return "\n".join([*head, *body, "}"]) + "\n"
