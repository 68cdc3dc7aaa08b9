"""Where a tree window's labels and edges go on the character grid, and their base styles.

`build_tree_geometry` turns a `TreeWindow` (engine.lookup.window: which nodes, at which
columns) into rows of text with box-drawing edges, plus style runs per row; the drawing
widget then paints the lookup's states over these runs, a visible line at a time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mmuscope.engine.lookup.views import TreeNodeView
from mmuscope.engine.lookup.window import TreeIndex, TreeWindow
from mmuscope.engine.memslots.memslot import MemorySlot

from .highlight import IDLE

ZOOM_LEVELS = 3  # 0: slot ids, 1: id:base_gfn, 2: id base_gfn+npages
MIN_AUTO_LEVELS = 4  # fitting the width never shows fewer levels than this
Run = tuple[int, int, str]  # start column, end column, component


def slot_label(slot: MemorySlot, zoom: int) -> str:
    if zoom <= 0:
        return str(slot.id)
    if zoom == 1:
        return f"{slot.id}:{slot.base_gfn:x}"
    return f"{slot.id} {slot.base_gfn:x}+{slot.npages:x}"


def widest_label_slot(slots: Iterable[MemorySlot | None]) -> MemorySlot | None:
    """A stand-in slot whose label is at least as wide as any real one's, at every zoom
    (labels only grow with id, base_gfn and npages): one pass, no formatting."""
    used = [s for s in slots if s is not None]
    if not used:
        return None
    return MemorySlot(
        id=max(s.id for s in used),
        as_id=0,
        base_gfn=max(s.base_gfn for s in used),
        npages=max(s.npages for s in used),
    )


@dataclass(frozen=True, slots=True)
class TreeGeometry:
    """The rows of a drawn tree window: text and base styles, before highlighting."""

    window: TreeWindow
    rows: tuple[str, ...]
    runs: tuple[tuple[Run, ...], ...]  # per row, sorted by start
    edge_runs: dict[tuple[int, int], tuple[int, tuple[Run, ...]]]  # (parent, child) -> row


def _node_component(node: TreeNodeView) -> str:
    if node.color == "red":
        return "rb-red"
    if node.color == "black":
        return "rb-black"
    return IDLE


def build_tree_geometry(index: TreeIndex, window: TreeWindow) -> TreeGeometry:
    nodes = index.view.nodes
    width = max(window.width, 1)
    height = max(2 * window.levels - 1, 0)
    chars = [[" "] * width for _ in range(height)]
    runs: list[list[Run]] = [[] for _ in range(height)]
    for placed in window.nodes:
        row = chars[2 * placed.level]
        row[placed.x : placed.end] = placed.label
        name_end = placed.end - (len(f" +{placed.hidden}") if placed.hidden else 0)
        runs[2 * placed.level].append((placed.x, name_end, _node_component(nodes[placed.index])))
        if placed.hidden:
            runs[2 * placed.level].append((name_end, placed.end, "stub"))
    edge_runs: dict[tuple[int, int], tuple[int, tuple[Run, ...]]] = {}
    children: dict[int, list[int]] = {}
    for parent, child in window.edges:
        children.setdefault(parent, []).append(child)
    for parent, kids in children.items():
        top = window.nodes[parent]
        row_index = 2 * top.level + 1
        row = chars[row_index]
        center = top.center
        for child in kids:
            c = window.nodes[child].center
            lo, hi = (c, center) if c < center else (center, c)
            for x in range(lo + 1, hi):
                row[x] = "─"
            row[c] = "┌" if c < center else "┐"
            span = (lo, hi + 1)
            edge_runs[(window.nodes[parent].index, window.nodes[child].index)] = (
                row_index,
                ((span[0], span[1], "edge-path"),),
            )
            runs[row_index].append((span[0], span[1], "edge"))
        sides = {window.nodes[k].center < center for k in kids}
        row[center] = "┴" if len(sides) == 2 else ("┘" if True in sides else "└")
    for row_runs in runs:
        row_runs.sort()
    return TreeGeometry(
        window,
        tuple("".join(r) for r in chars),
        tuple(tuple(r) for r in runs),
        edge_runs,
    )


def paint_run(styles: list[str | None], start: int, end: int, component: str) -> None:
    start, end = max(start, 0), min(end, len(styles))
    if start < end:
        styles[start:end] = [component] * (end - start)
