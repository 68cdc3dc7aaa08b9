"""The direct-paging fault path (EPT on, legacy shadow MMU): leaves and rmaps, MMIO sptes
with generations, zaps on memslot updates, under random sequences with an audit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import KvmError, Vm
from engine.events import Event
from engine.layouts import build_vm, preset
from engine.mmu.direct import DirectMmu
from engine.mmu.role import PG_LEVEL_2M, PG_LEVEL_4K
from engine.mmu.spte import SPTE_CONFIGS, RetPf

MiB, GiB = 1 << 20, 1 << 30
LAPIC = 0xFEE0_0000


def guest(cfg: str = "ept", huge: bool = True) -> tuple[Vm, DirectMmu, list[Event]]:
    vm = build_vm(preset("pc-4g"))
    events: list[Event] = []
    return vm, DirectMmu(vm, SPTE_CONFIGS[cfg], huge_pages=huge, emit=events.append), events


def test_a_ram_fault_maps_a_leaf_and_rmaps_it() -> None:
    _, mmu, events = guest(huge=False)
    assert mmu.page_fault(0, 0x1234_5000) == RetPf.FIXED
    assert mmu.page_fault(0, 0x1234_5000) == RetPf.SPURIOUS  # already there
    heads = mmu.rmaps[(0, 1, PG_LEVEL_4K)]  # slot 1 = ram-1m-to-hole
    assert sum(h.count() for h in heads.values()) == 1
    names = [e.name for e in events]
    assert names.count("kvm_mmu_get_page") == 4  # root, then levels 3, 2, 1
    assert names[-1] == "kvm_mmu_set_spte"
    mmu.audit()


def test_a_2m_aligned_slot_gets_2m_leaves() -> None:
    vm, mmu, _ = guest()
    assert mmu.page_fault(0, 0x4000_0000) == RetPf.FIXED
    assert (0, 1, PG_LEVEL_2M) in mmu.rmaps and (0, 1, PG_LEVEL_4K) not in mmu.rmaps
    assert mmu.max_level(vm.slot(0, 0), 0x10) == PG_LEVEL_4K  # 640 KiB slot: no 2M range
    mmu.audit()


def test_mmio_is_cached_then_hit_without_a_memslot_search() -> None:
    vm, mmu, events = guest()
    assert mmu.page_fault(0, LAPIC) == RetPf.EMULATE
    assert [e.name for e in events][-1] == "mark_mmio_spte"
    searches = 0
    search = vm.vcpu_gfn_to_memslot

    def counting(vcpu: int, gfn: int) -> object:
        nonlocal searches
        searches += 1
        return search(vcpu, gfn)

    vm.vcpu_gfn_to_memslot = counting  # type: ignore[method-assign]
    for _ in range(5):
        assert mmu.page_fault(0, LAPIC) == RetPf.EMULATE
    assert searches == 0
    assert mmu.stat["pf_mmio_spte_created"] == 1
    assert [e.name for e in events][-1] == "handle_mmio_page_fault"


def test_a_memslot_update_makes_mmio_sptes_stale() -> None:
    vm, mmu, events = guest()
    mmu.page_fault(0, LAPIC)
    vm.set_user_memory_region(20, 0, 8 * GiB, 2 * MiB, 0x7F10_0000_0000)  # any CREATE
    assert mmu.page_fault(0, LAPIC) == RetPf.EMULATE
    assert mmu.stat["pf_mmio_spte_created"] == 2  # the stale one was rebuilt
    gens = [e.fields["gen"] for e in events if e.name == "mark_mmio_spte"]
    assert gens == [vm.generation() - 2, vm.generation()]
    mmu.audit()


def test_no_mmio_caching_in_2011() -> None:
    _, mmu, _ = guest("2011-no-mmio-cache")
    for _ in range(3):
        assert mmu.page_fault(0, LAPIC) == RetPf.EMULATE
    assert mmu.stat["pf_mmio_spte_created"] == 0


def test_delete_zaps_everything_fast() -> None:
    vm, mmu, events = guest()
    for gpa in range(0, 64 * MiB, 2 * MiB):
        mmu.page_fault(0, 0x1_0000_0000 + gpa)
    used = mmu.pages.n_used_mmu_pages
    vm.set_user_memory_region(2, 0, 0, 0, 0)  # delete ram-above-4g
    assert [e.name for e in events if e.name == "kvm_mmu_zap_all_fast"]
    assert mmu.pages.n_used_mmu_pages == 0 and used > 0
    assert not any(mmu.rmaps.values())
    mmu.audit()
    assert mmu.page_fault(0, 0x1_0000_0000) == RetPf.EMULATE  # now MMIO
    mmu.audit()


def test_the_19_bit_generation_wraps_into_a_fast_zap() -> None:
    vm, mmu, events = guest()
    mmu.page_fault(0, LAPIC)
    vm.memslot_set(0).generation = (1 << 19) - 2  # just before the wrap
    vm.memslot_set(1).generation = (1 << 19) - 1
    vm.set_user_memory_region(20, 0, 8 * GiB, 2 * MiB, 0x7F10_0000_0000)
    assert any(e.name == "kvm_mmu_zap_all_fast" for e in events)
    mmu.audit()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("ram"), st.integers(0, 4 * GiB // 4096 - 1)),
            st.tuples(st.just("mmio"), st.sampled_from([LAPIC, 0xFEC0_0000, 0xE800_0000])),
            st.tuples(st.just("add"), st.integers(20, 24)),
            st.tuples(st.just("delete"), st.integers(0, 24)),
            st.tuples(st.just("move"), st.integers(20, 24)),
            st.tuples(st.just("zap"), st.just(0)),
        ),
        max_size=40,
    ),
    st.booleans(),
)
def test_random_faults_and_updates_keep_the_invariants(
    ops: list[tuple[str, int]], huge: bool
) -> None:
    vm, mmu, _ = guest(huge=huge)
    for op, arg in ops:
        try:
            if op == "ram":
                mmu.page_fault(arg % 2, arg * 4096 % (4 * GiB), write=bool(arg & 1))
            elif op == "mmio":
                mmu.page_fault(1, arg)
            elif op == "add":
                vm.set_user_memory_region(arg, 0, arg * GiB, 4 * MiB, 0x7F00_0000_0000 + arg * GiB)
            elif op == "delete":
                vm.set_user_memory_region(arg, 0, 0, 0, 0)
            elif op == "move":
                slot = vm.slot(0, arg)
                if slot is not None:
                    vm.set_user_memory_region(
                        arg, 0, (arg + 40) * GiB, slot.npages * 4096, slot.userspace_addr
                    )
            else:
                mmu.zap_all_fast()
        except KvmError:
            pass
        mmu.audit()
        vm.audit()


@pytest.mark.parametrize("cfg", ["ept", "shadow"])
def test_faults_on_every_slot_of_the_guest(cfg: str) -> None:
    vm, mmu, _ = guest(cfg)
    for slot in vm.memslots():
        for gfn in (slot.base_gfn, slot.end_gfn - 1):
            assert mmu.page_fault(0, gfn << 12) == RetPf.FIXED
    mmu.audit()
