"""`rbtree`: today's memslot `gfn_tree`, a red-black tree keyed by `base_gfn`.

Since Maciej S. Szmigiero's "scalable memslots" (Dec 2021) each `struct kvm_memslots`
keeps its slots in an `rb_root gfn_tree` (docs/kvm.md §1.2); slots never overlap, so a
plain rbtree suffices.  Insertion is `kvm_insert_gfn_node()` + `rb_insert_color()`,
removal `rb_erase()`, and an update that keeps `base_gfn` uses `rb_replace_node()` in
O(1).  The rebalancing below follows lib/rbtree.c case by case (`__rb_insert`,
`__rb_erase_augmented`, `____rb_erase_color`), written with two rotate helpers instead of
the kernel's hand-inlined pointer updates.  Lookup is `search_memslots()` with its
`approx` mode (s390 CMMA, 2021): on a miss, return the last node visited.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import AuditError
from ..memslots.memslot import MemorySlot
from . import bst

if TYPE_CHECKING:
    from .views import TreeView


class RbNode(bst.TreeNode):
    """`struct rb_node` embedded in a slot (`gfn_node[idx]`), with the slot's bounds cached."""

    __slots__ = ("red",)

    def __init__(self, slot: MemorySlot) -> None:
        super().__init__(slot)
        self.red = True


def _is_red(node: RbNode | None) -> bool:
    return node is not None and node.red


class RbTree(bst.TreeStrategy[RbNode]):
    """The gfn rbtree of one memslot set."""

    name = "rbtree"
    era = "2021-today"
    title = "red-black tree keyed by base_gfn (gfn_tree)"
    summary = (
        "Maciej Szmigiero's scalable memslots (v5.17): O(log n) lookups and updates; "
        "search_memslots() descends left when gfn < base_gfn, right when past the end."
    )

    # -- updates -------------------------------------------------------------------

    def insert(self, slot: MemorySlot) -> None:
        """`kvm_insert_gfn_node()`: plain BST insert, then `rb_insert_color()`."""
        node = RbNode(slot)
        parent: RbNode | None = None
        cur = self.root
        went_left = False
        while cur is not None:
            parent = cur
            if node.base < cur.base:
                cur, went_left = cur.left, True
            elif node.base > cur.base:
                cur, went_left = cur.right, False
            else:
                raise AuditError(f"two slots at base_gfn {node.base:#x} (BUG() in the kernel)")
        node.parent = parent
        if parent is None:
            self.root = node
        elif went_left:
            parent.left = node
        else:
            parent.right = node
        self._nodes[slot.id] = node
        self._insert_color(node)

    def erase(self, slot: MemorySlot) -> None:
        """`rb_erase()`: unlink the node, then `____rb_erase_color()` if black went missing."""
        node = self._nodes.pop(slot.id)
        rebalance = self._unlink(node)
        if rebalance is not None:
            self._erase_color(rebalance)

    # -- rebalancing (lib/rbtree.c) -------------------------------------------------

    def _insert_color(self, node: RbNode) -> None:
        """`__rb_insert()`: restore the red-black rules after linking a red node."""
        while True:
            parent = node.parent
            if parent is None:
                node.red = False  # the root is black
                return
            if not parent.red:
                return
            gparent = parent.parent
            assert gparent is not None  # a red parent is never the root
            next_node = self._insert_fix_side(node, parent, gparent, left=parent is gparent.left)
            if next_node is None:
                return
            node = next_node

    def _insert_fix_side(
        self, node: RbNode, parent: RbNode, gparent: RbNode, left: bool
    ) -> RbNode | None:
        """One pass of `__rb_insert` for a parent on the `left` (or right) of gparent.

        Returns the node to continue from (case 1), or None when the tree is valid.
        """
        uncle = gparent.right if left else gparent.left
        if _is_red(uncle):
            # Case 1 - the uncle is red: colour flips, continue from gparent.
            assert uncle is not None
            uncle.red = parent.red = False
            gparent.red = True
            return gparent
        inner = parent.right if left else parent.left
        if node is inner:
            # Case 2 - node is the inner grandchild: rotate at parent.
            (self._rotate_left if left else self._rotate_right)(parent)
            parent = node
        # Case 3 - rotate at gparent; the parent takes its place, black.
        (self._rotate_right if left else self._rotate_left)(gparent)
        parent.red = False
        gparent.red = True
        return None

    def _unlink(self, node: RbNode) -> RbNode | None:
        """`__rb_erase_augmented()`: splice `node` out; return where black height dropped."""
        child, tmp = node.right, node.left
        if tmp is None:
            # Case 1 - at most a right child: it takes node's place and colour.
            self._change_child(node, child, node.parent)
            if child is not None:
                child.red = node.red
                return None
            return None if node.red else node.parent
        if child is None:
            # Case 1 mirrored - only a left child (always red with a black node).
            self._change_child(node, tmp, node.parent)
            tmp.red = node.red
            return None
        return self._unlink_with_successor(node, child)

    def _unlink_with_successor(self, node: RbNode, child: RbNode) -> RbNode | None:
        """Cases 2 and 3 of `__rb_erase_augmented`: the in-order successor takes node's place."""
        successor = child
        if child.left is None:
            # Case 2 - the successor is node's right child.
            parent = successor
            child2 = successor.right
        else:
            # Case 3 - the successor is the leftmost node under node's right child.
            while successor.left is not None:
                successor = successor.left
            assert successor.parent is not None
            parent = successor.parent
            child2 = successor.right
            parent.left = child2
            successor.right = child
            child.parent = successor
        successor.left = node.left
        assert node.left is not None
        node.left.parent = successor
        self._change_child(node, successor, node.parent)
        successor_was_red = successor.red
        successor.red = node.red
        if child2 is not None:
            child2.parent = parent
            child2.red = False
            return None
        return None if successor_was_red else parent

    def _erase_color(self, parent: RbNode) -> None:
        """`____rb_erase_color()`: the subtree at the `node` side of `parent` lacks one black."""
        node: RbNode | None = None
        while True:
            if self._erase_fix_side(parent, left=node is not parent.right):
                return
            # Case 2 with a black parent: the parent's subtree now lacks a black.
            node = parent
            if node.parent is None:
                return
            parent = node.parent

    def _erase_fix_side(self, parent: RbNode, left: bool) -> bool:
        """One pass for a deficit on the left (or right) of `parent`; True when done."""
        sibling = parent.right if left else parent.left
        assert sibling is not None  # the other side holds at least one black node
        if sibling.red:
            # Case 1 - red sibling: rotate at parent so the sibling becomes black.
            (self._rotate_left if left else self._rotate_right)(parent)
            sibling.red = False
            parent.red = True
            sibling = parent.right if left else parent.left
            assert sibling is not None
        outer = sibling.right if left else sibling.left
        inner = sibling.left if left else sibling.right
        if not _is_red(outer) and not _is_red(inner):
            # Case 2 - sibling colour flip; push the deficit up unless parent was red.
            sibling.red = True
            if parent.red:
                parent.red = False
                return True
            return False
        if not _is_red(outer):
            # Case 3 - rotate at sibling so its red child becomes the outer one.
            assert inner is not None
            (self._rotate_right if left else self._rotate_left)(sibling)
            inner.red = False
            sibling.red = True
            sibling = inner
        # Case 4 - rotate at parent and recolour: done.
        outer = sibling.right if left else sibling.left
        (self._rotate_left if left else self._rotate_right)(parent)
        sibling.red = parent.red
        parent.red = False
        if outer is not None:
            outer.red = False
        return True

    # -- lookups -------------------------------------------------------------------

    def search_approx(self, gfn: int) -> MemorySlot | None:
        """`search_memslots(slots, gfn, approx=true)`: on a miss, the last node visited."""
        _, node = bst.explain(self.root, gfn)
        return node.slot if node is not None else None

    def floor(self, gfn: int) -> RbNode | None:
        """The node with the largest `base_gfn <= gfn` (start of a gfn-range walk)."""
        node, best = self.root, None
        while node is not None:
            if node.base <= gfn:
                best, node = node, node.right
            else:
                node = node.left
        return best

    def in_range(self, start: int, end: int) -> Iterator[MemorySlot]:
        """`kvm_for_each_memslot_in_gfn_range()`: slots that may overlap [start, end)."""
        node = self.floor(start) or self.first()
        while node is not None and node.base < end:
            if node.end > start:
                yield node.slot
            node = bst.successor(node)

    def shape(self) -> TreeView:
        from .views import TreeView

        return TreeView(
            self.name,
            bst.flatten(self.root, lambda n: n.slot.npages, _color),
        )

    # -- audit ---------------------------------------------------------------------

    def audit(self) -> None:
        """BST order, no overlap, parent links, red-black rules, node index in sync."""
        if self.root is not None and (self.root.red or self.root.parent is not None):
            raise AuditError("rbtree: the root must be black and parentless")
        count = bst.audit_order(self.root, "rbtree")
        for node in self.in_order():
            if node.red and (_is_red(node.left) or _is_red(node.right)):
                raise AuditError(f"rbtree: red slot {node.slot.id} has a red child")
            if self._nodes.get(node.slot.id) is not node:
                raise AuditError(f"rbtree: node index stale for slot {node.slot.id}")
        if count != len(self._nodes):
            raise AuditError(f"rbtree: {count} nodes reachable, {len(self._nodes)} indexed")
        _black_height(self.root)


def _color(node: bst.BstNode) -> str:
    return "red" if isinstance(node, RbNode) and node.red else "black"


def _black_height(root: RbNode | None) -> int:
    """Black nodes on every root-to-leaf path; raise if two paths differ (iterative)."""
    if root is None:
        return 1
    heights: dict[int, int] = {}
    stack: list[tuple[RbNode, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if not children_done:
            stack.append((node, True))
            stack.extend((c, False) for c in (node.left, node.right) if c is not None)
            continue
        left = heights.pop(id(node.left), 1) if node.left is not None else 1
        right = heights.pop(id(node.right), 1) if node.right is not None else 1
        if left != right:
            raise AuditError(f"rbtree: black heights differ under slot {node.slot.id}")
        heights[id(node)] = left + (0 if node.red else 1)
    return heights[id(root)]
