"""`wbtree`: Alex Williamson's weight-balanced binary tree (RFC, Feb 2011; not merged).

The memslot-search thread (kvm, 2011), "[RFC PATCH 1/3] Weight-balanced tree"
(lib/wbtree.c): "The balance of this tree is based on search probability.  The heaviest
weighted nodes (the ones we're most likely to hit), are at the top of each subtree."
Patch 3/3 embeds a `wb_node` in each `kvm_memory_slot` with weight = `npages`, so the
biggest RAM slot sits at the root.

The functions below follow the C code of patch 1/3 one to one:
`__wb_rotate_left/right` (copied from the rbtree, so bst.py's one pair serves both
trees), `wb_rebalance` (rotate a node up while its parent is lighter), `wb_erase` (rotate
the node down, towards its heavier child, until it is a leaf, then unlink it),
`wb_first/last/next/prev`.  Insertion is a plain BST
insert keyed by `base_gfn` followed by `wb_set_weight` + `wb_rebalance` — patch 3/3's body
was not archived, so this part is a reconstruction (docs/kvm.md §9 and its "What is
less certain").

The tree is a treap with weight as priority: nothing bounds its depth.  Slots of equal
size registered in address order form a chain, which is what Alex meant by "it needs a
compaction algorithm added after insert and remove".  The model keeps that behaviour.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

from ..errors import AuditError
from ..memslots.memslot import MemorySlot
from . import bst

if TYPE_CHECKING:
    from .views import TreeView


class WbNode(bst.TreeNode):
    """`struct wb_node` (wb_parent, wb_left, wb_right, wb_weight) plus the slot's bounds."""

    __slots__ = ("weight",)

    def __init__(self, slot: MemorySlot) -> None:
        super().__init__(slot)
        self.weight = slot.npages  # wb_set_weight(&slot->wb_node, slot->npages)


class WbTree(bst.TreeStrategy[WbNode]):
    """The memslot wbtree of one address space (`struct wb_root`)."""

    name = "wbtree"
    era = "2011 RFC"
    title = "weight-balanced tree, weight = npages (wbtree RFC)"
    summary = (
        "Alex Williamson's RFC: the heaviest slots sit at the top of every subtree, so RAM "
        'hits stop at the root; misses walk a whole branch ("6-7 tree nodes").'
    )

    def __init__(self) -> None:
        super().__init__()
        self._bases: list[int] = []  # sorted keys, to find in-order neighbours
        self._by_base: dict[int, WbNode] = {}

    # -- updates -------------------------------------------------------------------

    def insert(self, slot: MemorySlot) -> None:
        """BST insert by `base_gfn` (`wb_link_node`), then `wb_rebalance`.

        The leaf position of a new key is unique: the right child of its in-order
        predecessor if that is free, else the left child of its successor.  It is found
        through the sorted keys (bisect) rather than by walking down, so inserting stays
        O(log n) even when equal weights have grown the tree into a long chain.
        """
        node = WbNode(slot)
        index = bisect_left(self._bases, node.base)
        if index < len(self._bases) and self._bases[index] == node.base:
            raise AuditError(f"two slots at base_gfn {node.base:#x}")
        pred = self._by_base[self._bases[index - 1]] if index else None
        if pred is not None and pred.right is None:
            pred.right, node.parent = node, pred
        elif index < len(self._bases):
            succ = self._by_base[self._bases[index]]
            assert succ.left is None  # the predecessor's right subtree holds no key
            succ.left, node.parent = node, succ
        else:
            self.root = node
        self._bases.insert(index, node.base)
        self._by_base[node.base] = node
        self._nodes[slot.id] = node
        self.rebalance(node)

    @staticmethod
    def outranks(a: WbNode, b: WbNode) -> bool:
        """Does `a` belong above `b`?  The RFC compares weights only."""
        return a.weight > b.weight

    def rebalance(self, node: WbNode) -> None:
        """`wb_rebalance`: while the parent is lighter, rotate the node above it."""
        while node.parent is not None and self.outranks(node, node.parent):
            if node is node.parent.left:
                self._rotate_right(node.parent)
            else:
                self._rotate_left(node.parent)

    def erase(self, slot: MemorySlot) -> None:
        """`wb_erase`: rotate the node down (heavier child up) until it is a leaf; unlink."""
        node = self._nodes.pop(slot.id)
        del self._bases[bisect_left(self._bases, node.base)]
        del self._by_base[node.base]
        while node.left is not None or node.right is not None:
            if node.left is None:
                self._rotate_left(node)
            elif node.right is None or self.outranks(node.left, node.right):
                self._rotate_right(node)
            else:
                self._rotate_left(node)
        if node.parent is None:
            self.root = None
        elif node.parent.left is node:
            node.parent.left = None
        else:
            node.parent.right = None

    def height(self) -> int:
        return bst.height(self.root)

    def shape(self) -> TreeView:
        from .views import TreeView

        return TreeView(self.name, bst.flatten(self.root, _weight, lambda n: None))

    # -- audit ---------------------------------------------------------------------

    def audit(self) -> None:
        """BST order without overlap, parent links, and parent weight >= child weight."""
        if self.root is not None and self.root.parent is not None:
            raise AuditError("wbtree: the root has a parent")
        count = bst.audit_order(self.root, "wbtree")
        for node in bst.in_order(self.root):
            _audit_weight(node)
            if self._nodes.get(node.slot.id) is not node:
                raise AuditError(f"wbtree: node index stale for slot {node.slot.id}")
        if count != len(self._nodes) or len(self._bases) != count or len(self._by_base) != count:
            raise AuditError(f"wbtree: {count} nodes reachable, {len(self._nodes)} indexed")


def _weight(node: bst.BstNode) -> int:
    return node.weight if isinstance(node, WbNode) else node.slot.npages


def _audit_weight(node: WbNode) -> None:
    if node.weight != node.slot.npages:
        raise AuditError(f"wbtree: stale weight for slot {node.slot.id}")
    for child in (node.left, node.right):
        if child is not None and child.weight > node.weight:
            raise AuditError(
                f"wbtree: slot {child.slot.id} (weight {child.weight}) is heavier than its "
                f"parent slot {node.slot.id} (weight {node.weight})"
            )
