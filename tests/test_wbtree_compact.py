"""`wbtree-compact`: the wbtree with Alex's missing compaction: heavy slots
still at the top, equal weights balanced by address, height O(log n), one shape per set of
slots whatever the order of updates."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine.layouts import build_vm, preset
from mmuscope.engine.lookup import LOOKUP_STRATEGIES, make_strategy
from mmuscope.engine.lookup.views import TreeView
from mmuscope.engine.lookup.wbtree_compact import alignment, mix64
from mmuscope.engine.memslots.memslot import MemorySlot


def shape_of(tree: object) -> list[tuple[int, int | None, int | None]]:
    view = tree.shape()  # type: ignore[attr-defined]
    assert isinstance(view, TreeView)
    return [(n.slot.id, n.left, n.right) for n in view.nodes]


def test_registered_after_the_rfc_tree() -> None:
    names = list(LOOKUP_STRATEGIES)
    assert names[-1] == "wbtree-compact" and names.index("wbtree") < names.index("rbtree")


def test_equal_weights_at_a_stride_form_a_balanced_tree() -> None:
    """The RFC's chain of 100 (test_lookup_strategies) becomes ceil(log2(101)) = 7 levels,
    one more when gfn 0 (the most aligned address of all) is among them."""
    for first_gfn, extra in ((2, 0), (0, 1)):
        tree = make_strategy("wbtree-compact")
        for i in range(100):
            tree.insert(MemorySlot(i, 0, first_gfn + i * 2, 1))
            tree.audit()
        height = tree.shape().height  # type: ignore[union-attr]
        assert height == math.ceil(math.log2(101)) + extra


def test_heavy_slots_stay_at_the_top() -> None:
    vm = build_vm(preset("pc-4g"), "wbtree-compact", last_used_slot=False)
    view = vm.memslot_set(0).lookup.shape()
    assert isinstance(view, TreeView)
    assert view.nodes[0].slot.npages == max(s.npages for s in vm.memslots())
    assert vm.explain(0x12345).visited == 1  # RAM hits stop at the root, as in the RFC
    for node in view.nodes:
        for child in (node.left, node.right):
            if child is not None:
                assert view.nodes[child].weight <= node.weight


def test_height_is_logarithmic_where_the_rfc_tree_is_a_chain() -> None:
    for layout, rfc_height in (("assigned-devices", 85), ("max", 32764)):
        vm = build_vm(preset(layout), "wbtree")
        assert vm.memslot_set(0).lookup.shape().height == rfc_height  # type: ignore[union-attr]
        vm.set_lookup("wbtree-compact")
        n = len(vm.memslots())
        height = vm.memslot_set(0).lookup.shape().height  # type: ignore[union-attr]
        # heavy on top costs a few levels per distinct weight (11 on assigned-devices)
        assert height <= 3 * math.log2(n + 1), (layout, height)
        vm.audit()


def test_audit_catches_an_uncompacted_tree() -> None:
    tree = make_strategy("wbtree-compact")
    for i in range(8):
        tree.insert(MemorySlot(i, 0, 2 + i * 2, 1))
    root = tree.root  # type: ignore[attr-defined]
    assert root is not None and root.left is not None
    tree._rotate_right(root)  # type: ignore[attr-defined]  # still a BST, out of rank
    try:
        tree.audit()
    except Exception as err:
        assert "not compacted" in str(err)
    else:
        raise AssertionError("the audit passed a tree out of rank order")


def test_priority_parts() -> None:
    assert alignment(0) == 64 and alignment(8) == 3 and alignment(7) == 0
    keys = range(5000)
    assert len({mix64(k) for k in keys}) == 5000  # a bijection: no two keys tie


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 63), st.sampled_from([1, 1, 1, 2, 8])), max_size=30),
    st.randoms(use_true_random=False),
)
def test_shape_depends_only_on_the_slots(specs: list[tuple[int, int]], rnd: random.Random) -> None:
    """Insert in two orders, erasing a few in between: the same tree, audited each step."""
    slots = {}
    for index, (cell, npages) in enumerate(specs):
        if cell not in slots:
            slots[cell] = MemorySlot(index, 0, cell * 16, npages)
    chosen = list(slots.values())
    first, second = make_strategy("wbtree-compact"), make_strategy("wbtree-compact")
    for slot in chosen:
        first.insert(slot)
        first.audit()
    order = chosen[:]
    rnd.shuffle(order)
    extra = order[: len(order) // 3]
    for slot in order:
        second.insert(slot)
    for slot in extra:
        second.erase(slot)
        second.audit()
    for slot in extra:
        second.insert(slot)
    second.audit()
    assert shape_of(first) == shape_of(second)
    assert [s.id for s in first.slots()] == sorted(
        (s.id for s in chosen), key=lambda i: next(s.base_gfn for s in chosen if s.id == i)
    )
