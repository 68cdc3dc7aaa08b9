"""Each strategy explains lookups the way its kernel code ran; the caches behave as §1.3."""

from __future__ import annotations

import subprocess
import sys

from mmuscope.engine import Vm
from mmuscope.engine.layouts import build_vm, preset
from mmuscope.engine.lookup import make_strategy
from mmuscope.engine.lookup.views import ArrayView, TreeView
from mmuscope.engine.memslots.memslot import MemorySlot

UA = 0x7F00_0000_0000
PAGE = 4096


def guest(lookup: str, **options: bool) -> Vm:
    return build_vm(preset("pc-4g"), lookup, **options)


def test_linear_scans_unused_entries_and_never_shrinks() -> None:
    vm = Vm("linear", last_used_slot=False)
    vm.set_user_memory_region(0, 0, 0, PAGE, UA)
    vm.set_user_memory_region(31, 0, 64 * PAGE, PAGE, UA + PAGE)
    trace = vm.explain(1000)
    assert trace.slot is None
    assert trace.visited == 32  # Avi's "full 32 entries"
    assert [p.outcome for p in trace.probes[1:31]] == ["empty"] * 30
    vm.set_user_memory_region(31, 0, 0, 0, 0)
    assert vm.explain(1000).visited == 32  # nmemslots only grows


def test_size_sorted_puts_big_ram_first() -> None:
    vm = guest("size-sorted", last_used_slot=False)
    view = vm.memslot_set(0).lookup.shape()
    assert isinstance(view, ArrayView)
    npages = [s.npages for s in view.entries if s is not None]
    assert npages == sorted(npages, reverse=True)
    assert vm.explain(0x12345).visited == 1
    assert vm.explain(0xFEE00).visited == 7  # a miss scans every used slot


def test_binary_search_is_logarithmic_then_one_range_check() -> None:
    vm = build_vm(preset("assigned-devices"), "binary", last_used_slot=False)
    trace = vm.explain(0xFEE00)
    assert trace.slot is None
    assert trace.visited == 10  # 9 halvings of 512 entries, then the final check
    assert all(p.comparisons == 1 for p in trace.probes[:-1])
    view = vm.memslot_set(0).lookup.shape()
    assert isinstance(view, ArrayView)
    bases = [s.base_gfn for s in view.entries if s is not None]
    assert bases == sorted(bases, reverse=True)


def test_wbtree_puts_the_heaviest_slot_at_the_root() -> None:
    vm = guest("wbtree", last_used_slot=False)
    view = vm.memslot_set(0).lookup.shape()
    assert isinstance(view, TreeView)
    assert view.nodes[0].slot.npages == max(s.npages for s in vm.memslots())
    assert vm.explain(0x12345).visited == 1  # RAM hits stop at the root


def test_wbtree_rebalance_and_erase_follow_the_rfc() -> None:
    tree = make_strategy("wbtree")
    light, heavy = MemorySlot(0, 0, 0, 1), MemorySlot(1, 0, 10, 50)
    tree.insert(light)
    tree.insert(heavy)  # linked right of light, then rotated above it
    view = tree.shape()
    assert isinstance(view, TreeView)
    assert view.nodes[0].slot == heavy and view.nodes[1].slot == light
    tree.erase(heavy)  # rotated down to a leaf, then unlinked
    assert tree.slots() == [light]
    tree.audit()


def test_wbtree_with_equal_weights_is_a_chain() -> None:
    """Alex: "it needs a compaction algorithm added after insert and remove"."""
    tree = make_strategy("wbtree")
    for i in range(100):
        tree.insert(MemorySlot(i, 0, i * 2, 1))
    assert tree.shape().height == 100  # type: ignore[union-attr]
    tree.audit()


def test_rbtree_approx_returns_a_neighbour_of_the_hole() -> None:
    vm = guest("rbtree", last_used_slot=False)
    assert vm.gfn_to_memslot(0xFEE00) is None
    near = vm.gfn_to_memslot_approx(0xFEE00)
    assert near is not None and near.id in (5, 6)


def test_vm_cache_hit_skips_the_structure() -> None:
    vm = guest("linear")
    first = vm.explain(0xF0010)
    assert not first.cache_hit and first.visited > 0
    second = vm.explain(0xF0020)
    assert second.cache_hit and second.visited == 0 and second.slot == first.slot


def test_vcpu_cache_resets_when_the_generation_changes() -> None:
    vm = guest("rbtree")
    assert not vm.explain(0x12345, vcpu=0).cache_hit
    assert vm.explain(0x12346, vcpu=0).cache_hit
    vm.set_user_memory_region(20, 0, 0x2000_0000_0000, PAGE, UA + (1 << 30))
    trace = vm.explain(0x12347, vcpu=0)
    assert not trace.cache_hit
    assert trace.cache_probes[0].note == "generation changed: cache reset"
    # the vCPU path leaves the VM-wide cache alone ("to avoid thrashing")
    assert vm.memslot_set(0).last_used_slot is None


def test_switching_strategy_keeps_answers() -> None:
    vm = build_vm(preset("assigned-devices"))
    answers = [vm.gfn_to_memslot(g) for g in range(0xE0000, 0xE4000, 7)]
    for name in ("linear", "size-sorted", "binary", "wbtree", "rbtree"):
        vm.set_lookup(name)
        vm.set_last_used_slot(False)
        assert [vm.gfn_to_memslot(g) for g in range(0xE0000, 0xE4000, 7)] == answers


def test_presets() -> None:
    counts = {"pc-2g": 6, "pc-4g": 7, "pc-8g": 7, "q35-16g": 7, "assigned-devices": 512}
    for name, count in counts.items():
        vm = build_vm(preset(name))
        vm.audit()
        assert len(vm.memslots()) == count, name
    assert len(build_vm(preset("q35-16g")).memslots(1)) == 6


def test_max_preset_fills_every_user_slot() -> None:
    vm = build_vm(preset("max"))
    assert len(vm.memslots()) == 32764
    assert vm.gfn_to_memslot(32763 * 512 + 5).id == 32763  # type: ignore[union-attr]


def test_engine_never_imports_textual_or_rich() -> None:
    """Every module under engine/ (found on disk, so new ones are covered) imports
    without pulling in the UI."""
    code = (
        "import sys, pkgutil, importlib, mmuscope.engine as engine;"
        "names = [m.name for m in pkgutil.walk_packages(engine.__path__, 'mmuscope.engine.')];"
        "[importlib.import_module(n) for n in names];"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')];"
        "print(len(names), bad); sys.exit(1 if bad or len(names) < 20 else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
