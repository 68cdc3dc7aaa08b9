"""`wbtree-compact`: the wbtree with the compaction its author said it needed (beyond the
memslot-search thread (kvm, 2011)).

The memslot-search thread, Alex Williamson on his RFC: "the tree should have ~O(logN)
(note that it currently doesn't because it needs a compaction algorithm added after
insert and remove)".  The RFC's `wb_rebalance` stops rotating as soon as the parent is at
least as heavy, so slots of equal weight keep the shape of their insertion order: on
`assigned-devices` (512 slots, most of one size) the tree is an 85-deep chain, on `max`
a 32764-deep one.  The RFC never got its compaction; this is one, named after what it
does.

The rule: a node belongs above another when it is heavier, exactly as in the RFC; among
equal weights, the node whose `base_gfn` is more aligned (more trailing zero bits) goes
above, and a fixed bijective mix of `base_gfn` (splitmix64's finalizer) breaks what ties
are left.  The tree is then a treap whose priority is `(npages, alignment, mix)`:
- heavy slots stay at the top of every subtree (the RFC's whole point: RAM hits stop at
  the root);
- equal weights are balanced by address: slots of one size laid out at a power-of-two
  stride form a perfectly balanced tree (the most aligned in the middle, as a ruler's
  marks), and any other addresses form a treap on the mix, of expected height O(log n);
- priorities are distinct, so the shape depends only on the slots, never on the order
  of inserts and removes: `audit()` checks the order that fixes that shape.
Insert and erase are the RFC's own (`wb_rebalance` rotations up, `wb_erase` rotations
down), with the comparison widened; each touches O(height) nodes.
"""

from __future__ import annotations

from ..errors import AuditError
from . import bst
from .wbtree import WbNode, WbTree

MASK64 = (1 << 64) - 1


def mix64(value: int) -> int:
    """splitmix64's finalizer: a bijection on 64-bit integers (distinct keys, distinct mixes)."""
    z = value & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def alignment(base_gfn: int) -> int:
    """Trailing zero bits of `base_gfn` (64 for gfn 0, the most aligned address)."""
    return 64 if base_gfn == 0 else (base_gfn & -base_gfn).bit_length() - 1


def rank(node: WbNode) -> tuple[int, int, int]:
    """The treap priority: weight first, then the address's alignment, then its mix."""
    return (node.weight, alignment(node.base), mix64(node.base))


class WbTreeCompact(WbTree):
    """The wbtree with equal weights compacted by address (see the module docstring)."""

    name = "wbtree-compact"
    era = "beyond the thread"
    title = "weight-balanced tree, equal weights compacted by address"
    summary = (
        "The wbtree with the compaction Alex said it needed: heavy slots still at the top, "
        "equal weights balanced by address, so the height is O(log n) on any layout."
    )

    @staticmethod
    def outranks(a: WbNode, b: WbNode) -> bool:
        return rank(a) > rank(b)

    def audit(self) -> None:
        """The wbtree's audit, and every parent strictly outranking its children."""
        super().audit()
        for node in bst.in_order(self.root):
            for child in (node.left, node.right):
                if child is not None and not self.outranks(node, child):
                    raise AuditError(
                        f"wbtree-compact: slot {child.slot.id} outranks its parent slot "
                        f"{node.slot.id}: the tree is not compacted"
                    )
