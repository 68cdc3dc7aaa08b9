"""Read-only views of a lookup structure for drawing and export (`LookupStrategy.shape()`):
a tree flattened breadth-first, or an array in the order a lookup scans it.

Apart from base.py so that a VM's structures (`mmuscope simulate`) are built without
them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..memslots.memslot import MemorySlot


@dataclass(frozen=True, slots=True)
class TreeNodeView:
    """One node of a drawn tree; children are indexes into `TreeView.nodes`."""

    slot: MemorySlot
    weight: int
    color: str | None  # "red"/"black" for the rbtree, None otherwise
    left: int | None
    right: int | None
    depth: int


@dataclass(frozen=True, slots=True)
class TreeView:
    """A tree flattened breadth-first: `nodes[0]` is the root (no recursion for deep trees)."""

    strategy: str
    nodes: tuple[TreeNodeView, ...]

    @property
    def height(self) -> int:
        return 1 + max((n.depth for n in self.nodes), default=-1)


@dataclass(frozen=True, slots=True)
class ArrayView:
    """An array drawn in the order a lookup scans it; None marks an unused entry."""

    strategy: str
    entries: tuple[MemorySlot | None, ...]
    order: str  # how the array is kept, e.g. "by slot id", "npages descending"


Shape = TreeView | ArrayView
