"""The model against today's mmu.c: each defect a KVM developer would catch, checked
against the 6.17/6.18 kernel's code (function names in each test).  Every test here
failed before its fix."""

from __future__ import annotations

import errno

import pytest
from mmuscope.engine import KvmError, Vm
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import build_vm, preset
from mmuscope.engine.mmu.direct.mmu import DirectMmu
from mmuscope.engine.mmu.direct.session import MmuSession
from mmuscope.engine.mmu.guest import page_tables as gpt
from mmuscope.engine.mmu.mmu_pages import BATCH_ZAP_PAGES, KVM_MIN_ALLOC_MMU_PAGES, MmuPages
from mmuscope.engine.mmu.role import ACC_ALL, tdp_root_role
from mmuscope.engine.mmu.shadow.mmu import ShadowMmu
from mmuscope.engine.mmu.spte import (
    MMIO_SPTE_GEN_MASK,
    SPTE_CONFIGS,
    SPTE_MMU_PRESENT_MASK,
    VMX_EPT_ACCESS_BIT,
    RetPf,
    is_empty_spte,
    is_shadow_present_pte,
    make_nonleaf_spte,
)

MiB, GiB = 1 << 20, 1 << 30
LAPIC = 0xFEE0_0000
GVA = 0x40_0000


def direct(cfg: str = "ept", huge: bool = False) -> tuple[Vm, DirectMmu, list[Event]]:
    vm = build_vm(preset("pc-4g"))
    events: list[Event] = []
    return vm, DirectMmu(vm, SPTE_CONFIGS[cfg], huge_pages=huge, emit=events.append), events


def shadow(cfg: str = "shadow") -> tuple[Vm, ShadowMmu, list[Event]]:
    vm = build_vm(preset("pc-4g"))
    events: list[Event] = []
    return vm, ShadowMmu(vm, SPTE_CONFIGS[cfg], emit=events.append), events


def leaf_of(mmu: DirectMmu, gfn: int) -> int:
    sp, index = mmu._walk_existing(mmu.roots[0], gfn)
    assert sp is not None
    return sp.spt[index]


# 1. make_spte(): the dirty mask with every writable spte ---------------------------------


@pytest.mark.parametrize("cfg", ["ept", "shadow"])
def test_a_read_fault_on_a_writable_slot_makes_a_dirty_writable_spte(cfg: str) -> None:
    _, mmu, _ = direct(cfg)
    assert mmu.page_fault(0, 0x1234_5000, write=False) == RetPf.FIXED
    spte = leaf_of(mmu, 0x12345)
    assert spte & gpt.PT_WRITABLE and spte & mmu.cfg.shadow_dirty_mask
    mmu.audit()


# 2. make_nonleaf_spte() -----------------------------------------------------------------


@pytest.mark.parametrize("cfg", ["ept", "shadow", "2011-no-mmio-cache"])
def test_nonleaf_sptes_are_make_nonleaf_spte(cfg: str) -> None:
    _, mmu, _ = direct(cfg)
    mmu.page_fault(0, 0x1234_5000)
    root = mmu.roots[0]
    spte = next(s for s in root.spt if not is_empty_spte(s))
    child = mmu.pages.child_at(root, root.spt.index(spte))
    assert child is not None and is_shadow_present_pte(spte)
    assert spte == make_nonleaf_spte(mmu.cfg, child.spt_pa, bool(child.role.ad_disabled))
    assert spte & SPTE_MMU_PRESENT_MASK
    if cfg == "ept":
        assert spte & VMX_EPT_ACCESS_BIT
    mmu.audit()


# 3. MMIO tracepoint values ------------------------------------------------------------


def test_mmio_tracepoints_print_what_the_kernel_masks() -> None:
    _, mmu, events = direct("ept")
    mmu.page_fault(0, LAPIC)
    mark = next(e for e in events if e.name == "mark_mmio_spte")
    assert mark.fields["access"] == 6  # spte & ACC_ALL: EPT's 110b misconfig value
    mmu.page_fault(1, LAPIC)  # vCPU 1: no MMIO info of its own, the spte is checked
    hit = next(e for e in events if e.name == "handle_mmio_page_fault")
    assert hit.fields["access"] == 0 and hit.fields["addr"] == 0  # EPT: no access bits


def test_mark_mmio_spte_prints_the_19_bit_generation() -> None:
    vm, mmu, events = direct("ept")
    vm.skip_updates((MMIO_SPTE_GEN_MASK + 1) // 2 + 3)  # generation above 2^19: wraps
    assert vm.generation() > MMIO_SPTE_GEN_MASK
    mmu.page_fault(0, LAPIC)
    mark = next(e for e in events if e.name == "mark_mmio_spte")
    assert mark.fields["gen"] == vm.generation() & MMIO_SPTE_GEN_MASK


def test_shadow_mark_mmio_spte_access_is_spte_and_acc_all() -> None:
    _, mmu, events = shadow()
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, LAPIC >> 12, user=False)
    mmu.page_fault(0, p, GVA, write=True)
    mark = next(e for e in events if e.name == "mark_mmio_spte")
    # legacy MMIO value BIT(51)|P: P reads as ACC_EXEC_MASK, plus W from the access
    assert mark.fields["access"] == (1 | (ACC_ALL & 2))


# 4. pf_taken, noslot faults without caching, roots' ad_disabled -------------------------


def test_a_cached_mmio_hit_is_not_counted_in_pf_taken() -> None:
    _, mmu, _ = direct("ept")
    mmu.page_fault(0, LAPIC)
    taken, emulated = mmu.stat["pf_taken"], mmu.stat["pf_emulate"]
    assert mmu.page_fault(0, LAPIC) == RetPf.EMULATE
    # kvm_mmu_page_fault(): handle_mmio_page_fault() == EMULATE jumps to "emulate:"
    assert mmu.stat["pf_taken"] == taken and mmu.stat["pf_emulate"] == emulated


def test_shadow_cached_mmio_hit_is_not_counted_in_pf_taken() -> None:
    _, mmu, _ = shadow()
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, LAPIC >> 12, user=False)
    mmu.page_fault(0, p, GVA, write=True)
    taken = mmu.stat["pf_taken"]
    assert mmu.page_fault(0, p, GVA, write=True) == RetPf.EMULATE
    assert mmu.stat["pf_taken"] == taken


def test_noslot_fault_without_mmio_caching_builds_no_page_table() -> None:
    _, mmu, events = direct("2011-no-mmio-cache")
    assert mmu.page_fault(0, LAPIC) == RetPf.EMULATE  # kvm_handle_noslot_fault()
    assert mmu.pages.n_used_mmu_pages == 1  # the root only
    assert not [e for e in events if e.name == "kvm_mmu_get_page" and e.fields["level"] < 4]


@pytest.mark.parametrize(("cfg", "ad"), [("ept", True), ("2011-no-mmio-cache", False)])
def test_the_root_role_ad_disabled_comes_from_the_host(cfg: str, ad: bool) -> None:
    _, mmu, events = direct(cfg)
    mmu.page_fault(0, 0x1234_5000)
    assert mmu.roots[0].role.ad_disabled == (not ad)
    assert {e.fields["ad"] for e in events if e.name == "kvm_mmu_get_page"} == {ad}


# 5. a write to a read-only slot: KVM_PFN_ERR_RO_FAULT -> emulate ----------------------------


def _ro_gpa(vm: Vm) -> int:
    slot = next(s for s in vm.memslots() if s.readonly)
    return slot.base_gfn << 12


def test_a_write_to_a_mapped_page_of_a_read_only_slot_is_emulated() -> None:
    vm, mmu, events = direct("ept")
    gpa = _ro_gpa(vm)
    assert mmu.page_fault(0, gpa) == RetPf.FIXED
    assert mmu.page_fault(0, gpa, write=True) == RetPf.EMULATE
    assert mmu.stat["pf_spurious"] == 0  # the emulator's store goes to userspace
    assert [e.name for e in events[-2:]] == ["kvm_mmio", "kvm_userspace_exit"]


def test_a_write_to_an_unmapped_read_only_page_makes_no_spte() -> None:
    vm, mmu, _ = direct("ept")
    gpa = _ro_gpa(vm)
    assert mmu.page_fault(0, gpa, write=True) == RetPf.EMULATE
    sp, _ = mmu._walk_existing(mmu.roots[0], gpa >> 12)
    assert sp is None
    session = MmuSession(preset("pc-4g"))
    session.mmu.page_fault(0, gpa)
    from mmuscope.engine.mmu.guest.ept import EptAccess

    assert session.needs_exit(EptAccess(0, gpa, True))  # the CPU: W on a read-only leaf


# 6. kvm_zap_obsolete_pages(): yield only to a waiter; roots add nothing --------------------


def _tree(pages: MmuPages, fanout: int = 30) -> None:
    root, _ = pages.get_page(0, tdp_root_role())
    root.root_count = 1  # vCPU 0 runs on it
    for gfn in range(fanout):
        child, _ = pages.get_page(gfn << 18, root.role.child(ACC_ALL, direct=True))
        pages.link(root, gfn, child)


def test_an_uncontended_fast_zap_is_one_hold() -> None:
    pages = MmuPages(10_000, mmu_lock_contended=False)
    _tree(pages)
    assert pages.zap_all_fast() == 30 and pages.lock_holds == [30]
    contended = MmuPages(10_000)
    _tree(contended)
    assert contended.zap_all_fast() == 30  # the root in use: nr_zapped 0
    assert contended.lock_holds == [BATCH_ZAP_PAGES] * 3
    contended.audit()


# 7. a zapped root in use: accounted until the last reference, then zapped again ----------


def test_a_zapped_root_in_use_stays_accounted_and_is_zapped_again() -> None:
    events: list[str] = []
    pages = MmuPages(1000, emit=lambda name, **f: events.append(name))
    _tree(pages, fanout=3)
    root = pages.pages().__next__()
    pages.zap_all_fast()
    assert pages.n_used_mmu_pages == 1 and events.count("kvm_mmu_prepare_zap_page") == 4
    pages.audit()
    pages.put_root(root)  # mmu_free_root_page() -> kvm_mmu_prepare_zap_page() again
    assert pages.n_used_mmu_pages == 0 and events.count("kvm_mmu_prepare_zap_page") == 5
    assert pages.stat["mmu_shadow_zapped"] == 5
    pages.audit()


# 8. the budget follows every CREATE and DELETE -----------------------------------------


def test_the_page_budget_is_recomputed_on_create_and_delete() -> None:
    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, 1 * MiB, 0x7F00_0000_0000)
    mmu = DirectMmu(vm)
    assert mmu.pages.n_max_mmu_pages == KVM_MIN_ALLOC_MMU_PAGES
    vm.set_user_memory_region(1, 0, 1 * GiB, 1 * GiB, 0x7F10_0000_0000)
    assert mmu.pages.n_max_mmu_pages == (256 + 262144) // 50 == 5248  # not 64
    vm.set_user_memory_region(1, 0, 0, 0, 0)
    assert mmu.pages.n_max_mmu_pages == KVM_MIN_ALLOC_MMU_PAGES
    mmu.pages.set_nr_mmu_pages(100)  # KVM_SET_NR_MMU_PAGES: no more resizing
    vm.set_user_memory_region(1, 0, 1 * GiB, 1 * GiB, 0x7F10_0000_0000)
    assert mmu.pages.n_max_mmu_pages == 100


# 10. a cached MMIO spte is emulated whatever the access -------------------------------------


def test_a_cached_mmio_spte_is_emulated_whatever_the_access() -> None:
    _, mmu, _ = shadow()
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, LAPIC >> 12, writable=False, user=False)
    mmu.page_fault(0, p, GVA)  # a supervisor read caches it
    created = mmu.stat["pf_mmio_spte_created"]
    assert mmu.page_fault(0, p, GVA, write=True, user=True) == RetPf.EMULATE
    assert mmu.stat["pf_mmio_spte_created"] == created and mmu.stat["pf_guest"] == 0


# 11. kvm_page_fault carries the exit qualification; a misconfig emits none ----------------


def test_kvm_page_fault_carries_the_ept_exit_qualification() -> None:
    session = MmuSession(preset("pc-4g"), workload="netperf", seed=3)
    events: list[Event] = []
    session.subscribe(events.append)
    session.run(60)
    faults = [e for e in events if e.name == "kvm_page_fault"]
    assert faults and all(int(e.fields["error_code"]) & 0x180 == 0x180 for e in faults)
    assert {int(e.fields["error_code"]) & 3 for e in faults} <= {1, 2}
    hits = sum(e.name == "handle_mmio_page_fault" for e in events)
    hits += session.mmu.mmio_info.gpa_hits
    assert hits and session.exits == len(faults) + hits  # misconfigs: exits, no event


# 12. a MOVE past kvm_mmu_max_gfn(): invalidated, zapped, reverted -------------------------


def test_a_move_past_the_max_gfn_invalidates_then_reverts() -> None:
    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, 2 * MiB, 0x7F00_0000_0000)
    mmu = DirectMmu(vm)
    mmu.page_fault(0, 0x1000)
    gen, before = vm.generation(), vm.memslots()
    with pytest.raises(KvmError) as refused:
        vm.set_user_memory_region(0, 0, vm.limits.max_gfn << 12, 2 * MiB, 0x7F00_0000_0000)
    assert refused.value.errno == errno.EINVAL
    assert vm.memslots() == before
    assert vm.generation() == gen + 2 * vm.address_spaces  # invalidate, then revert
    assert mmu.pages.stat["mmu_shadow_zapped"] > 0  # kvm_arch_flush_shadow_memslot()
    vm.audit()
    mmu.audit()


# 13. the shadow MMU frees pages after faultin, with the lock held ---------------------------


def test_shadow_mmu_makes_pages_available_only_on_the_fetch_path() -> None:
    _, mmu, _ = shadow("2011-shadow-no-mmio-cache")
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, LAPIC >> 12, user=False)
    mmu.cr3_load(0, p)
    calls: list[int] = []
    real = mmu.pages.make_mmu_pages_available
    mmu.pages.make_mmu_pages_available = lambda: calls.append(1) or real()  # type: ignore[method-assign]
    assert mmu.page_fault(0, p, GVA) == RetPf.EMULATE  # noslot, caching off: emulated first
    assert mmu.page_fault(0, p, GVA + 0x1000) == RetPf.RETRY  # a guest #PF: injected
    assert calls == []


# 9. guest page-table writes: unsync, track_write, flooding, sync ----------


def _mapped(mmu: ShadowMmu) -> tuple[int, int, int]:
    """A process with one page mapped and faulted in: (cr3, level-1 table gfn, index)."""
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, 0x1000)
    assert mmu.page_fault(0, p, GVA, write=True) == RetPf.FIXED
    walk = mmu.guest.translate(p, GVA)
    return p, walk.table_gfn(1), gpt.pt_index(GVA, 1)


def test_a_store_to_a_level_1_table_unsyncs_it_and_a_cr3_load_syncs_it() -> None:
    _, mmu, events = shadow()
    p, table, index = _mapped(mmu)
    before = mmu.guest.pte(table, index)
    mmu.guest.write_pte(table, index, before & ~gpt.PT_WRITABLE)  # no flush yet
    unsync = [e for e in events if e.name == "kvm_mmu_unsync_page"]
    assert len(unsync) == 1 and unsync[0].fields["gfn"] == table
    assert unsync[0].fields["level"] == 1 and not unsync[0].fields["unsync"]
    assert mmu.pages.stat["mmu_unsync"] == 1 and mmu.pages.stat["mmu_pte_write"] == 0
    sp = mmu.shadow_pages_of(table)[0]
    assert sp.unsync and sp.spt[index] & gpt.PT_WRITABLE  # stale: the guest took W away
    mmu.audit()
    mmu.cr3_load(0, p)  # KVM_REQ_MMU_SYNC: kvm_mmu_sync_roots()
    assert [e.fields["gfn"] for e in events if e.name == "kvm_mmu_sync_page"] == [table]
    assert not sp.unsync and mmu.pages.stat["mmu_unsync"] == 0
    assert is_shadow_present_pte(sp.spt[index]) and not sp.spt[index] & gpt.PT_WRITABLE
    mmu.audit()


def test_invlpg_syncs_the_one_spte_and_leaves_the_page_unsync() -> None:
    _, mmu, _ = shadow()
    _p, table, index = _mapped(mmu)
    mmu.guest.write_pte(table, index, 0)  # munmap's store, INVLPG below
    sp = mmu.shadow_pages_of(table)[0]
    assert is_shadow_present_pte(sp.spt[index])
    mmu.invlpg(0, GVA)
    assert sp.unsync and is_empty_spte(sp.spt[index]) and mmu.rmap_count(0x1000) == 0
    mmu.audit()


def test_an_upper_level_store_is_emulated_and_zaps_one_spte_until_it_floods() -> None:
    _, mmu, events = shadow()
    p, _, _ = _mapped(mmu)
    mmu.guest.map(p, GVA + 2 * MiB, 0x1001)  # a new PD entry: a store into the PD
    pd = mmu.guest.translate(p, GVA).table_gfn(2)
    assert mmu.pages.stat["mmu_pte_write"] == 1 and mmu.pages.stat["mmu_unsync"] == 0
    pd_page = next(sp for sp in mmu.shadow_pages_of(pd) if sp.role.level == 2)
    linked = pd_page.spt[gpt.pt_index(GVA, 2)]
    # the store at another index zapped nothing it did not write
    assert is_shadow_present_pte(linked)
    for _ in range(2):
        mmu.guest.write_pte(pd, 7, 0)
    assert mmu.pages.stat["mmu_flooded"] == 1 and not mmu.shadow_pages_of(pd)
    assert not [e for e in events if e.name == "kvm_mmu_unsync_page"]
    mmu.audit()
    # the PD page is rebuilt and relinked to the level-1 page, which kept its leaf; the
    # walk through it clears its flooding count
    assert mmu.page_fault(0, p, GVA) == RetPf.SPURIOUS
    pd_page = next(sp for sp in mmu.shadow_pages_of(pd) if sp.role.level == 2)
    assert pd_page.write_flooding_count == 0


def test_a_guest_write_through_a_gva_to_its_level_1_table_unsyncs_it() -> None:
    """The real-KVM `ptwrite` program: a CPL-3 store into its own page table."""
    _, mmu, events = shadow()
    p, table, _ = _mapped(mmu)
    mmu.guest.map(p, GVA + 0x1000, table)  # the level-1 table, mapped user-writable
    assert mmu.page_fault(0, p, GVA + 0x1000, write=True) == RetPf.FIXED  # not emulated
    assert [e.fields["gfn"] for e in events if e.name == "kvm_mmu_unsync_page"] == [table]
    mmu.audit()


def test_before_unsync_every_shadowed_table_store_is_tracked() -> None:
    vm = build_vm(preset("pc-4g"))
    mmu = ShadowMmu(vm, SPTE_CONFIGS["shadow"], unsync=False)
    _p, table, index = _mapped(mmu)
    mmu.guest.write_pte(table, index, 0)
    assert mmu.pages.stat["mmu_pte_write"] == 1 and mmu.pages.stat["mmu_unsync"] == 0
    assert is_empty_spte(mmu.shadow_pages_of(table)[0].spt[index])  # zapped at once
    mmu.audit()


# Missing from the fault path: prev_roots ---------------------------------------------------


def test_a_cr3_load_reuses_one_of_three_prev_roots() -> None:
    _, mmu, events = shadow()
    cr3s = [mmu.guest.spawn() for _ in range(5)]
    for cr3 in cr3s[:4]:
        mmu.cr3_load(0, cr3)
    roots = [e for e in events if e.name == "kvm_mmu_get_page" and e.fields["created"]]
    assert len(roots) == 4 and mmu.stat["prev_roots_hits"] == 0
    assert [sp.gfn for sp in mmu.prev_roots[0] if sp] == [cr3s[2], cr3s[1], cr3s[0]]
    mmu.cr3_load(0, cr3s[1])  # fast_pgd_switch(): found in the cache, no new root
    assert mmu.stat["prev_roots_hits"] == 1 and mmu.roots[0].gfn == cr3s[1]
    assert len([e for e in events if e.name == "kvm_mmu_get_page" and e.fields["created"]]) == 4
    mmu.audit()
    mmu.cr3_load(0, cr3s[4])  # a miss: the least recently used root is let go
    assert {sp.gfn for sp in mmu.prev_roots[0] if sp} == {cr3s[1], cr3s[3], cr3s[2]}
    assert mmu.pages.n_used_mmu_pages == 5  # freed roots are unused pages, not gone
    mmu.audit()


def test_before_4_19_a_cr3_load_keeps_no_prev_roots() -> None:
    vm = build_vm(preset("pc-4g"))
    mmu = ShadowMmu(vm, SPTE_CONFIGS["shadow"], prev_roots=False)
    a, b = mmu.guest.spawn(), mmu.guest.spawn()
    mmu.cr3_load(0, a)
    mmu.cr3_load(0, b)
    assert not mmu.prev_roots and mmu.pages.pages().__next__().root_count == 0
    mmu.audit()
