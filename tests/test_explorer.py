"""The explorer's model: workloads, the live memslot session, counters, pacing and tree
windows (engine code behind the TUI, tested without it)."""

from __future__ import annotations

import errno
import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine import KvmError
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import preset
from mmuscope.engine.lookup import LOOKUP_STRATEGIES
from mmuscope.engine.lookup.views import TreeView
from mmuscope.engine.lookup.window import TreeIndex, follow_root, layout_window
from mmuscope.engine.memslots.explorer import MemslotExplorer
from mmuscope.engine.memslots.workload import MMIO, RAM, WORKLOADS, Workload, mmio_gfns
from mmuscope.engine.pacing import ANIMATE_BELOW, SPEEDS, Pacer
from mmuscope.engine.stats import EventCounters, LookupCost, compile_filter

MiB = 1 << 20


def brute_force(explorer: MemslotExplorer, gfn: int) -> object:
    return next((s for s in explorer.slots() if s.base_gfn <= gfn < s.end_gfn), None)


# -- workloads ----------------------------------------------------------------------------


def test_a_workload_is_deterministic_for_its_seed() -> None:
    slots = MemslotExplorer(preset("pc-4g")).slots()
    first = Workload(slots, "mixed", seed=3).take(500)
    again = Workload(slots, "mixed", seed=3).take(500)
    other = Workload(slots, "mixed", seed=4).take(500)
    assert first == again
    assert first != other


@pytest.mark.parametrize("mix", list(WORKLOADS))
def test_ram_accesses_hit_slots_and_mmio_accesses_hit_holes(mix: str) -> None:
    explorer = MemslotExplorer(preset("pc-4g"), workload=mix)
    accesses = explorer.workload.take(2000)
    for access in accesses:
        held = brute_force(explorer, access.gfn)
        assert (held is not None) == (access.kind == RAM), access
    share = sum(a.kind == MMIO for a in accesses) / len(accesses)
    assert abs(share - WORKLOADS[mix].mmio_ratio) < 0.05


def test_mmio_pages_include_the_pc_devices_in_holes() -> None:
    slots = MemslotExplorer(preset("pc-4g")).slots()
    gfns = mmio_gfns(slots)
    assert 0xFEE00 in gfns and 0xFEC00 in gfns  # LAPIC and IOAPIC sit in the PCI hole
    assert all(not any(s.base_gfn <= g < s.end_gfn for s in slots) for g in gfns)


# -- the session --------------------------------------------------------------------------


def test_every_lookup_is_costed_under_every_strategy() -> None:
    explorer = MemslotExplorer(preset("assigned-devices"), "rbtree", seed=5)
    sets = explorer.vm.memslot_set(0)
    for _ in range(300):
        record = explorer.step()
        assert record.slot == brute_force(explorer, record.access.gfn)
        for name in LOOKUP_STRATEGIES:
            probes, found = sets.structure(name).explain(record.access.gfn)
            assert found == record.slot
            assert record.visits[name] == len(probes), name
    costs = explorer.costs
    assert {c.lookups for c in costs.values()} == {300}
    # The memslot-search thread's point: on 512 slots a miss costs a linear scan every
    # used slot...
    assert costs["linear"].miss_mean == costs["linear"].worst == 512
    # ...and a tree or a binary search about log2(512).
    assert costs["rbtree"].miss_mean < 20 and costs["binary"].miss_mean <= 11
    assert costs["rbtree"].cached_mean < costs["rbtree"].bare_mean
    explorer.audit()


@pytest.mark.parametrize("vcpu_cache", [True, False])
def test_a_session_on_the_smm_address_space_looks_up_there(vcpu_cache: bool) -> None:
    explorer = MemslotExplorer(preset("q35-16g"), as_id=1, seed=2)
    explorer.set_vcpu_cache(vcpu_cache)
    for _ in range(200):
        record = explorer.step()
        assert record.slot == brute_force(explorer, record.access.gfn)
        assert record.slot is None or record.slot.as_id == 1
    assert explorer.slot_name(explorer.slots()[0]) == "smm-ram-below-768k"


def test_explain_replays_the_record_without_touching_the_caches() -> None:
    explorer = MemslotExplorer(preset("pc-4g"))
    explorer.set_vm_cache(False)
    explorer.set_vcpu_cache(False)
    record = explorer.lookup_gfn(0xFEE00)
    trace = explorer.explain(record)
    assert trace.slot is None and trace.visited == record.visits["rbtree"]
    before = explorer.vm.memslot_set(0).last_used_slot
    explorer.explain(explorer.lookup_gfn(0x100))
    assert explorer.vm.memslot_set(0).last_used_slot is before


def test_events_are_stamped_and_named_like_tracepoints() -> None:
    explorer = MemslotExplorer(preset("pc-4g"))
    events: list[Event] = []
    explorer.subscribe(events.append)
    explorer.lookup_gfn(0xFEE00, vcpu=1)
    names = [e.name for e in events]
    assert names == ["kvm_page_fault", "kvm_memslot_lookup", "kvm_mmio"]
    assert events[2].fields == {"type": "unsatisfied-read", "len": 4, "gpa": 0xFEE00000, "val": 0}
    assert all(e.cpu == 1 and e.ts > 0 for e in events)
    assert "vcpu=1" in events[1].format_fields() and "gfn=0xfee00" in events[1].format_fields()
    explorer.add_slot(20, 0x2_0000_0000, 2 * MiB)
    assert {e.name for e in events[3:]} == {
        "kvm_arch_memslots_updated",
        "kvm_set_user_memory_region",
    }


def test_slot_changes_follow_the_kernel_and_refusals_change_nothing() -> None:
    explorer = MemslotExplorer(preset("pc-4g"))
    gen = explorer.generation
    with pytest.raises(KvmError) as refused:
        explorer.add_slot(20, 0x1000_0000, 2 * MiB)  # inside ram-1m-to-hole
    assert refused.value.errno == errno.EEXIST
    with pytest.raises(KvmError) as misaligned:
        explorer.add_slot(20, 0x2_0000_0123, 2 * MiB)
    assert misaligned.value.errno == errno.EINVAL
    with pytest.raises(KvmError) as missing:
        explorer.delete_slot(99)
    assert missing.value.errno == errno.EINVAL
    assert explorer.generation == gen
    explorer.add_slot(20, 0x2_0000_0000, 2 * MiB)
    assert explorer.generation == gen + 2  # one swap, two address spaces
    explorer.move_slot(20, 0x3_0000_0000)
    assert explorer.vm.slot(0, 20).base_gfn == 0x300000  # type: ignore[union-attr]
    explorer.delete_slot(20)
    assert explorer.vm.slot(0, 20) is None
    assert explorer.slot_name(explorer.slots()[0]) == "ram-below-1m"
    explorer.audit()


@pytest.mark.parametrize("lookup", LOOKUP_STRATEGIES)
def test_the_shape_follows_updates_and_switches(lookup: str) -> None:
    explorer = MemslotExplorer(preset("pc-4g"), lookup)

    def ids() -> set[int]:
        shape = explorer.shape()
        held = [n.slot for n in shape.nodes] if isinstance(shape, TreeView) else shape.entries
        return {s.id for s in held if s is not None}

    assert explorer.shape() is explorer.shape()  # kept until something changes
    assert ids() == {s.id for s in explorer.slots()}
    explorer.add_slot(20, 0x2_0000_0000, 2 * MiB)
    assert 20 in ids()
    explorer.set_lookup("linear" if lookup != "linear" else "rbtree")
    assert 20 in ids() and explorer.shape().strategy == explorer.lookup


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("step"), st.integers(1, 20)),
            st.tuples(st.just("lookup"), st.sampled_from(LOOKUP_STRATEGIES)),
            st.tuples(st.just("add"), st.integers(8, 40)),
            st.tuples(st.just("delete"), st.integers(0, 40)),
            st.tuples(st.just("move"), st.integers(0, 40)),
            st.tuples(st.just("vm-cache"), st.booleans()),
            st.tuples(st.just("vcpu-cache"), st.booleans()),
        ),
        max_size=40,
    )
)
def test_random_sessions_stay_consistent(ops: list[tuple[str, object]]) -> None:
    """Lookups agree with a brute-force search through any mix of updates and switches;
    the audit holds after every operation."""
    explorer = MemslotExplorer(preset("pc-4g"), seed=11)
    for op, arg in ops:
        try:
            if op == "step":
                for _ in range(int(arg)):  # type: ignore[call-overload]
                    record = explorer.step()
                    assert record.slot == brute_force(explorer, record.access.gfn)
            elif op == "lookup":
                explorer.set_lookup(str(arg))
            elif op == "add":
                explorer.add_slot(int(arg), int(arg) << 32, 4 * MiB)  # type: ignore[call-overload]
            elif op == "delete":
                explorer.delete_slot(int(arg))  # type: ignore[call-overload]
            elif op == "move":
                explorer.move_slot(int(arg), (int(arg) + 64) << 32)  # type: ignore[call-overload]
            elif op == "vm-cache":
                explorer.set_vm_cache(bool(arg))
            else:
                explorer.set_vcpu_cache(bool(arg))
        except KvmError:
            pass
        explorer.audit()


# -- counters and pacing ------------------------------------------------------------------


def test_counters_follow_kvm_stat() -> None:
    counters = EventCounters()
    counters.refresh(0.0)
    counters.add("kvm_mmio", 30)
    counters.add("kvm_page_fault", 90)
    counters.refresh(2.0)
    rows = counters.rows()
    assert [(r.event, r.total) for r in rows] == [("kvm_page_fault", 90), ("kvm_mmio", 30)]
    assert rows[0].percent == 75.0 and rows[0].rate == 45.0
    only = counters.rows(compile_filter("mmio"))
    assert [r.event for r in only] == ["kvm_mmio"] and only[0].percent == 100.0
    with pytest.raises(ValueError, match="bad regular expression"):
        compile_filter("(")
    counters.reset()
    assert counters.rows() == []


def test_lookup_cost_counts_cache_checks() -> None:
    cost = LookupCost("linear")
    cost.add(visits=7, cache_checks=1, cache_hit=True, found=True)
    cost.add(visits=7, cache_checks=1, cache_hit=False, found=False)
    assert (cost.bare_mean, cost.cached_mean, cost.miss_mean) == (7.0, 4.5, 7.0)


def test_pacer_steps_at_its_speed_and_reveals_probes() -> None:
    pacer = Pacer(speed=4.0)
    assert pacer.speed == 4.0 and pacer.animating
    assert pacer.advance(0.1) == 0 and pacer.revealed(5) == 3  # 40% of a lookup
    assert pacer.advance(0.2) == 1
    pacer.toggle()
    assert pacer.advance(10.0) == 0
    while pacer.speed < SPEEDS[-1]:
        pacer.faster()
    pacer.toggle()
    assert pacer.speed >= ANIMATE_BELOW and not pacer.animating
    assert pacer.advance(0.01) == pytest.approx(SPEEDS[-1] * 0.01, abs=1)
    assert pacer.revealed(9) == 9


# -- tree windows -------------------------------------------------------------------------


@functools.cache  # the max layout's tree: 3.5 s to build, the same for every depth
def tree(name: str, lookup: str) -> TreeView:
    shape = MemslotExplorer(preset(name), lookup).shape()
    assert isinstance(shape, TreeView)
    return shape


@pytest.mark.parametrize(("name", "lookup"), [("assigned-devices", "rbtree"), ("max", "wbtree")])
@pytest.mark.parametrize("depth", [1, 3, 6])
def test_a_window_places_only_its_levels_in_order(name: str, lookup: str, depth: int) -> None:
    view = tree(name, lookup)
    index = TreeIndex.build(view)
    assert index.size[0] == len(view.nodes)
    window = layout_window(index, 0, depth, lambda n: str(n.slot.id))
    assert len(window.nodes) < 2**depth
    assert all(p.level < depth for p in window.nodes)
    # In-order columns: labels never overlap, keys increase left to right.
    for a, b in zip(window.nodes, window.nodes[1:], strict=False):
        assert a.end < b.x
        assert view.nodes[a.index].slot.base_gfn < view.nodes[b.index].slot.base_gfn
    # Every parent lies between its children, one level up.
    for parent, child in window.edges:
        p, c = window.nodes[parent], window.nodes[child]
        assert c.level == p.level + 1
        node = view.nodes[p.index]
        assert (c.x < p.x) == (c.index == node.left)
    # What the window cuts off is counted on its last row.
    assert len(window.nodes) + sum(p.hidden for p in window.nodes) == len(view.nodes)


def test_follow_root_keeps_the_path_in_the_window() -> None:
    view = tree("max", "rbtree")
    index = TreeIndex.build(view)
    deepest = max(range(len(view.nodes)), key=lambda i: view.nodes[i].depth)
    root = follow_root(index, deepest, 4)
    path = index.path_to(deepest)
    assert root in path and len(path) - path.index(root) == 4
    assert follow_root(index, 0, 4) == 0
