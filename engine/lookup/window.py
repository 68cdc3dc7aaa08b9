"""A window onto a lookup tree for drawing on a character grid.

A memslot tree can hold 32764 slots (KVM_USER_MEM_SLOTS); nobody can read that many
nodes at once and laying them all out would take longer than a frame.  A `TreeWindow`
places only the nodes within `depth` levels below a chosen `root`: each node sits after
its left subtree and before its right one (in-order columns, so every parent lies
between its children and edges never cross), one level per row.  Nodes on the last row
whose children are cut off carry the number of slots hidden below them; the viewer can
re-root the window there.  Cost: O(nodes shown), plus O(n) once per tree for
`TreeIndex` (parents, subtree sizes, depths).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .views import TreeNodeView, TreeView


@dataclass(frozen=True, slots=True)
class TreeIndex:
    """Per-node facts about a `TreeView` that drawing needs, computed once per tree."""

    view: TreeView
    parent: tuple[int | None, ...]
    size: tuple[int, ...]  # slots in the subtree, the node included

    @classmethod
    def build(cls, view: TreeView) -> TreeIndex:
        count = len(view.nodes)
        parent: list[int | None] = [None] * count
        size = [1] * count
        for i, node in enumerate(view.nodes):
            for child in (node.left, node.right):
                if child is not None:
                    parent[child] = i
        for i in range(count - 1, 0, -1):  # breadth-first order: children after parents
            up = parent[i]
            if up is not None:
                size[up] += size[i]
        return cls(view, tuple(parent), tuple(size))

    def path_to(self, index: int) -> list[int]:
        """Node indexes from the root down to `index`."""
        path = [index]
        up = self.parent[index]
        while up is not None:
            path.append(up)
            up = self.parent[up]
        path.reverse()
        return path

    def index_of_slot(self, slot_id: int) -> int | None:
        for i, node in enumerate(self.view.nodes):
            if node.slot.id == slot_id:
                return i
        return None


@dataclass(frozen=True, slots=True)
class PlacedNode:
    """A node of the tree placed in the window: its row and first column."""

    index: int  # into TreeView.nodes
    level: int  # row of the window, 0 = the window's root
    x: int  # first column of the label
    label: str
    hidden: int  # slots below this node that the window cuts off (0: none)

    @property
    def center(self) -> int:
        return self.x + (len(self.label) - 1) // 2

    @property
    def end(self) -> int:
        return self.x + len(self.label)


@dataclass(frozen=True, slots=True)
class TreeWindow:
    """The nodes within `depth` levels below `root`, placed, and the edges between them."""

    root: int
    depth: int
    nodes: tuple[PlacedNode, ...]  # in-order (left to right)
    edges: tuple[tuple[int, int], ...]  # (parent, child) as positions in `nodes`
    width: int
    levels: int  # rows of nodes actually used

    def position_of(self, index: int) -> int | None:
        for position, placed in enumerate(self.nodes):
            if placed.index == index:
                return position
        return None


def layout_window(
    index: TreeIndex,
    root: int,
    depth: int,
    label: Callable[[TreeNodeView], str],
    gap: int = 1,
) -> TreeWindow:
    """Place the nodes within `depth` levels of `root` (depth >= 1)."""
    nodes = index.view.nodes
    placed: list[PlacedNode] = []
    edges: list[tuple[int, int]] = []
    cursor = 0

    def place(i: int, level: int) -> int:
        nonlocal cursor
        node = nodes[i]
        open_below = level + 1 < depth
        left = place(node.left, level + 1) if open_below and node.left is not None else None
        hidden = 0 if open_below else index.size[i] - 1
        text = label(node) + (f" +{hidden}" if hidden else "")
        position = len(placed)
        placed.append(PlacedNode(i, level, cursor, text, hidden))
        cursor += len(text) + gap
        right = place(node.right, level + 1) if open_below and node.right is not None else None
        edges.extend((position, child) for child in (left, right) if child is not None)
        return position

    if nodes:
        place(root, 0)
    levels = 1 + max((p.level for p in placed), default=-1)
    return TreeWindow(root, depth, tuple(placed), tuple(edges), max(cursor - gap, 0), levels)


def follow_root(index: TreeIndex, target: int, depth: int) -> int:
    """The window root that shows the whole path from the tree's root to `target` in its
    last rows: the tree's root when the path fits, else the ancestor `depth - 1` above."""
    path = index.path_to(target)
    return path[max(0, len(path) - depth)]
