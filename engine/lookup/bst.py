"""What the two memslot trees share: binary-search-tree walks over nodes keyed by `base_gfn`.

Both the rbtree (today) and the wbtree (2011 RFC) hold one node per slot with the slot's
`[base, end)` bounds cached, and search it the way `search_memslots()` does: left when
`gfn < base_gfn`, right when `gfn >= base_gfn + npages`, hit otherwise.  Only the shape
differs: colours versus weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from ..memslots.memslot import MemorySlot
from .base import GO_LEFT, GO_RIGHT, HIT, LookupStrategy, Probe

if TYPE_CHECKING:
    from typing_extensions import Self

    from .views import TreeNodeView


class BstNode(Protocol):
    """A tree node: `base`/`end` of its slot, children and parent."""

    base: int
    end: int
    slot: MemorySlot

    @property
    def left(self) -> BstNode | None: ...

    @property
    def right(self) -> BstNode | None: ...

    @property
    def parent(self) -> BstNode | None: ...


N = TypeVar("N", bound=BstNode)


class TreeNode:
    """A slot's node in either tree: `struct rb_node` and `struct wb_node` share the links
    (parent, left, right); the slot's `[base, end)` bounds are cached for the descent."""

    __slots__ = ("base", "end", "left", "parent", "right", "slot")

    def __init__(self, slot: MemorySlot) -> None:
        self.slot = slot
        self.base = slot.base_gfn
        self.end = slot.base_gfn + slot.npages
        self.left: Self | None = None
        self.right: Self | None = None
        self.parent: Self | None = None


T = TypeVar("T", bound=TreeNode)


def search(root: BstNode | None, gfn: int) -> MemorySlot | None:
    """Bare descent: the slot holding `gfn`, or None."""
    node = root
    while node is not None:
        if gfn < node.base:
            node = node.left
        elif gfn >= node.end:
            node = node.right
        else:
            return node.slot
    return None


def explain(root: BstNode | None, gfn: int) -> tuple[tuple[Probe, ...], BstNode | None]:
    """The same descent, one `Probe` per node; returns the hit node or the last visited."""
    probes: list[Probe] = []
    node, last, depth = root, None, 0
    while node is not None:
        last = node
        if gfn < node.base:
            probes.append(Probe(node.slot, depth, 1, GO_LEFT))
            node = node.left
        elif gfn >= node.end:
            probes.append(Probe(node.slot, depth, 2, GO_RIGHT))
            node = node.right
        else:
            probes.append(Probe(node.slot, depth, 2, HIT))
            return tuple(probes), node
        depth += 1
    return tuple(probes), last


def leftmost(node: N | None) -> N | None:
    """`rb_first()` / `wb_first()` from `node` down."""
    while node is not None and node.left is not None:
        node = node.left  # type: ignore[assignment]
    return node


def successor(node: N) -> N | None:
    """`rb_next()` / `wb_next()`: the in-order successor."""
    if node.right is not None:
        return leftmost(node.right)  # type: ignore[return-value]
    parent = node.parent
    while parent is not None and node is parent.right:
        node, parent = parent, parent.parent  # type: ignore[assignment]
    return parent  # type: ignore[return-value]


def in_order(root: N | None) -> Iterator[N]:
    node = leftmost(root)
    while node is not None:
        yield node
        node = successor(node)


def height(root: BstNode | None) -> int:
    """Nodes on the longest root-to-leaf path (iterative: a wbtree chain can be 32k deep)."""
    best = 0
    stack = [(root, 1)] if root is not None else []
    while stack:
        node, depth = stack.pop()
        assert node is not None
        best = max(best, depth)
        stack.extend((c, depth + 1) for c in (node.left, node.right) if c is not None)
    return best


def flatten(
    root: BstNode | None,
    weight: Callable[[BstNode], int],
    color: Callable[[BstNode], str | None],
) -> tuple[TreeNodeView, ...]:
    """Breadth-first `TreeNodeView`s with children as indexes (no recursion).

    The queue is the output list itself, read by position (32764 nodes in ~40 ms)."""
    from .views import TreeNodeView  # for drawing only: not loaded to build a VM

    if root is None:
        return ()
    order: list[BstNode] = [root]
    depths = [0]
    index: dict[int, int] = {id(root): 0}
    head = 0
    while head < len(order):
        node, depth = order[head], depths[head] + 1
        head += 1
        for child in (node.left, node.right):
            if child is not None:
                index[id(child)] = len(order)
                order.append(child)
                depths.append(depth)
    return tuple(
        TreeNodeView(
            node.slot,
            weight(node),
            color(node),
            None if node.left is None else index[id(node.left)],
            None if node.right is None else index[id(node.right)],
            depth,
        )
        for node, depth in zip(order, depths, strict=True)
    )


def audit_order(root: BstNode | None, what: str) -> int:
    """In-order walk: keys increase and ranges do not overlap; returns the node count."""
    from ..errors import AuditError

    count, prev_end = 0, -1
    for node in in_order(root):
        count += 1
        if node.base < prev_end:
            raise AuditError(f"{what}: slot {node.slot.id} out of order or overlapping")
        if node.base != node.slot.base_gfn or node.end != node.slot.end_gfn:
            raise AuditError(f"{what}: cached bounds stale for slot {node.slot.id}")
        for child in (node.left, node.right):
            if child is not None and child.parent is not node:
                raise AuditError(f"{what}: bad parent link under slot {node.slot.id}")
        prev_end = node.end
    return count


class TreeStrategy(LookupStrategy, Generic[T]):
    """What both trees do alike: node index by slot id, search, explain, relabel, and the
    rotations (the RFC's `__wb_rotate_left/right` are copies of lib/rbtree.c's)."""

    def __init__(self) -> None:
        self.root: T | None = None
        self._nodes: dict[int, T] = {}

    # -- rotations (__rb_rotate_left / __rb_rotate_right, __wb_rotate_*) ---------------

    def _rotate_left(self, node: T) -> None:
        pivot = node.right
        assert pivot is not None
        node.right = pivot.left
        if pivot.left is not None:
            pivot.left.parent = node
        self._change_child(node, pivot, node.parent)
        pivot.left = node
        node.parent = pivot

    def _rotate_right(self, node: T) -> None:
        pivot = node.left
        assert pivot is not None
        node.left = pivot.right
        if pivot.right is not None:
            pivot.right.parent = node
        self._change_child(node, pivot, node.parent)
        pivot.right = node
        node.parent = pivot

    def _change_child(self, old: T, new: T | None, parent: T | None) -> None:
        """`__rb_change_child()`: make `new` take `old`'s place under `parent`."""
        if new is not None:
            new.parent = parent
        if parent is None:
            self.root = new
        elif parent.left is old:
            parent.left = new
        else:
            parent.right = new

    def replace(self, old: MemorySlot, new: MemorySlot) -> None:
        """Same range: the node stays and takes the new slot (`rb_replace_node()`, O(1));
        otherwise erase + insert."""
        node = self._nodes.get(old.id)
        if node is not None and old.base_gfn == new.base_gfn and old.npages == new.npages:
            node.slot = new
            del self._nodes[old.id]
            self._nodes[new.id] = node
            return
        self.erase(old)
        self.insert(new)

    def search(self, gfn: int) -> MemorySlot | None:
        return search(self.root, gfn)

    def explain(self, gfn: int) -> tuple[tuple[Probe, ...], MemorySlot | None]:
        probes, node = explain(self.root, gfn)
        if node is not None and node.base <= gfn < node.end:
            return probes, node.slot
        return probes, None

    def visits(self, gfn: int, found: MemorySlot | None) -> int:
        node: BstNode | None = self.root
        steps = 0
        while node is not None:
            steps += 1
            if gfn < node.base:
                node = node.left
            elif gfn >= node.end:
                node = node.right
            else:
                break
        return steps

    def first(self) -> T | None:
        """`rb_first()` / `wb_first()`."""
        return leftmost(self.root)

    def in_order(self) -> Iterator[T]:
        return in_order(self.root)

    def slots(self) -> list[MemorySlot]:
        return [node.slot for node in in_order(self.root)]

    def __len__(self) -> int:
        return len(self._nodes)
