"""The TDP MMU (engine.mmu.tdp_*): the fault path and its events, roots and their counts,
fast zap of today beside 2013's, RCU-pending page tables, frozen sptes, lost races, huge
pages (2M/1G), eager splitting on dirty logging, NX huge pages and their recovery, and a
property test against the memslots' own translation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine import KVM_MEM_LOG_DIRTY_PAGES, Vm
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import preset
from mmuscope.engine.mmu.params import TdpMmuParams
from mmuscope.engine.mmu.spte import (
    FROZEN_SPTE,
    PT_WRITABLE_MASK,
    SHADOW_NONPRESENT_VALUE,
    RetPf,
    is_executable_pte,
    is_last_spte,
    is_mmio_spte,
    is_shadow_present_pte,
    spte_to_pfn,
)
from mmuscope.engine.mmu.tdp.iter import for_each_tdp_pte
from mmuscope.engine.mmu.tdp.mmu import TdpMmu
from mmuscope.engine.mmu.tdp.pages import RCU_GRACE_PERIOD_NS
from mmuscope.engine.mmu.tdp.session import TdpSession
from mmuscope.engine.mmu.vcpu.vmx import PFERR_RSVD_MASK

GIB = 1 << 30
UA = 0x7F00_0000_0000  # 1G-aligned host address


def vm_4g() -> Vm:
    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, 4 * GIB, UA)
    return vm


def leaves(mmu: TdpMmu) -> dict[int, tuple[int, int]]:
    """gfn -> (level, spte) of every present leaf under a valid root."""
    out = {}
    for root in mmu.pages.tdp_mmu_roots:
        if root.role.invalid:
            continue
        for it in for_each_tdp_pte(mmu.pages.by_pa, root, 0, 1 << 36):
            if is_shadow_present_pte(it.old_spte) and is_last_spte(it.old_spte, it.level):
                out[it.gfn] = (it.level, it.old_spte)
    return out


def test_a_fault_links_tables_then_the_leaf_with_the_kernels_events() -> None:
    events: list[Event] = []
    mmu = TdpMmu(vm_4g(), params=TdpMmuParams(host_level=1), emit=events.append)
    assert mmu.page_fault(0, 0x1234_5000, write=True) is RetPf.FIXED
    names = [e.name for e in events]
    assert names == [
        "kvm_mmu_get_page",  # the root, made by kvm_mmu_load()
        "kvm_mmu_spte_requested",
        *["kvm_mmu_get_page", "kvm_tdp_mmu_spte_changed"] * 3,  # L3, L2, L1 tables
        "kvm_tdp_mmu_spte_changed",  # the leaf
        "kvm_mmu_set_spte",
    ]
    root = events[0].fields
    assert root["level"] == 4 and root["root_count"] == 0 and root["gen"] == 0
    leaf = events[-2].fields
    assert leaf["old_spte"] == SHADOW_NONPRESENT_VALUE  # the page cache's init_value (6.10+)
    assert leaf["level"] == 1 and leaf["gfn"] == 0x12345
    # the host page behind the slot's address (mapping_level.py HostPages, seed 1)
    assert spte_to_pfn(int(leaf["new_spte"])) == mmu.levels.host.hva_to_pfn(UA + 0x1234_5000)
    assert int(leaf["new_spte"]) & PT_WRITABLE_MASK
    assert mmu.stat["pages_4k"] == 1 and mmu.pages.secondary_pagetables == 3  # SecPageTables
    mmu.audit()
    assert mmu.page_fault(0, 0x1234_5000) is RetPf.SPURIOUS  # already mapped


def test_huge_leaves_where_slot_and_host_allow() -> None:
    for host_level, level in ((1, 1), (2, 2), (3, 3)):
        mmu = TdpMmu(vm_4g(), params=TdpMmuParams(host_level=host_level))
        mmu.page_fault(0, 0x4030_2000)
        assert next(iter(leaves(mmu).values()))[0] == level
        mmu.audit()
    vm = Vm()  # misaligned host address: 4K only
    vm.set_user_memory_region(0, 0, 0, GIB, UA + 0x1000)
    mmu = TdpMmu(vm, params=TdpMmuParams(host_level=3))
    mmu.page_fault(0, 0x20_0000)
    assert next(iter(leaves(mmu).values()))[0] == 1


def test_roots_are_shared_counted_invalidated_and_freed_after_rcu() -> None:
    mmu = TdpMmu(vm_4g())
    mmu.page_fault(0, 0x1000)
    mmu.page_fault(1, 0x4000_0000)
    (root,) = mmu.pages.tdp_mmu_roots
    assert mmu.roots[0] is mmu.roots[1] is root and root.root_count == 3  # 2 vCPUs + own
    mmu.audit()
    freed = mmu.kvm_mmu_zap_all_fast()
    assert root.role.invalid and root.root_count == 2  # the TDP MMU's own is put
    assert freed == len(mmu.pages.rcu_pending) == 3  # the L3 and two L2 tables (2M leaves)
    assert all(spte == FROZEN_SPTE for sp in mmu.pages.rcu_pending.values() for spte in sp.spt)
    mmu.audit()
    mmu.now_ns = RCU_GRACE_PERIOD_NS
    mmu.page_fault(0, 0x1000)  # vCPU 0 puts the old root and loads a new one
    assert mmu.roots[0] is not root and root.root_count == 1
    mmu.page_fault(1, 0x2000)
    assert root.root_count == 0 and root not in mmu.pages.tdp_mmu_roots
    assert root.seq in mmu.pages.rcu_pending  # freed through call_rcu(), no tracepoint
    mmu.audit()
    assert mmu.pages.rcu_advance(2 * RCU_GRACE_PERIOD_NS) == 4  # and the old root
    mmu.audit()


def test_fast_zap_traces_the_old_generation_and_zaps_in_passes() -> None:
    events: list[Event] = []
    mmu = TdpMmu(vm_4g(), params=TdpMmuParams(host_level=1), emit=events.append)
    mmu.page_fault(0, 0x1000)
    events.clear()
    mmu.kvm_mmu_zap_all_fast()
    assert events[0].name == "kvm_mmu_zap_all_fast" and events[0].fields["mmu_valid_gen"] == 0
    changed = [e.fields for e in events if e.name == "kvm_tdp_mmu_spte_changed"]
    assert changed[0]["level"] == 1  # the 4K pass first, its spte set to the non-present value
    assert changed[0]["new_spte"] == SHADOW_NONPRESENT_VALUE
    removed = [f for f in changed if f["new_spte"] == FROZEN_SPTE]
    assert len(removed) == 3 * 512  # mmu_lock shared: every entry of each removed table
    zaps = [e for e in events if e.name == "kvm_mmu_prepare_zap_page"]
    assert len(zaps) == 3 and mmu.pages.mmu_valid_gen == 1


def test_a_lost_race_retries_and_the_guest_still_gets_its_page() -> None:
    session = TdpSession(preset("pc-4g"), seed=3, race_rate=1.0)
    for _ in range(40):
        step = session.step()
        session.audit()
        if step.exited:
            assert not session.needs_exit(step.access)
    assert session.mmu.stat["lost_races"] > 0 and session.results.get("RETRY", 0) > 0


def dirty_logged_4k(era: str, events: list[Event] | None = None) -> tuple[Vm, TdpMmu]:
    """A 2M page split by eager page splitting when dirty logging starts, one 4K page of
    it written (so made writable again) while the slot logs."""
    vm = vm_4g()
    params = TdpMmuParams(host_level=2, enable_pml=False, huge_recovery_era=era)
    mmu = TdpMmu(vm, params=params, emit=None if events is None else events.append)
    mmu.page_fault(0, 0x20_0000, write=True)
    assert mmu.stat["pages_2m"] == 1
    vm.set_user_memory_region(0, KVM_MEM_LOG_DIRTY_PAGES, 0, 4 * GIB, UA)
    assert mmu.stat["pages_2m"] == 0 and mmu.stat["pages_4k"] == 512  # eager_page_split
    assert all(not spte & PT_WRITABLE_MASK for _, spte in leaves(mmu).values())  # wrprot
    mmu.audit()
    assert mmu.page_fault(0, 0x20_1000, write=True) is RetPf.FIXED  # 4K, writable again
    return vm, mmu


def test_dirty_logging_off_recovers_the_huge_page_in_place() -> None:
    """6.13+ `kvm_mmu_recover_huge_pages()` → `recover_huge_pages_range()`: the 4K table
    is replaced by `make_huge_spte()` of its first leaf at once, no fault needed."""
    events: list[Event] = []
    vm, mmu = dirty_logged_4k("6.13", events)
    first = leaves(mmu)[0x200][1]
    seen = len(events)
    vm.set_user_memory_region(0, 0, 0, 4 * GIB, UA)
    assert mmu.frozen_seen == 0  # replaced with one cmpxchg, nothing zapped first
    assert mmu.stat["pages_2m"] == 1 and mmu.stat["pages_4k"] == 0
    ((level, huge),) = [v for g, v in leaves(mmu).items() if 0x200 <= g < 0x400]
    assert level == 2 and spte_to_pfn(huge) == spte_to_pfn(first)
    assert huge == first | 1 << 7  # PT_PAGE_SIZE; the rest is the first leaf's
    names = [e.name for e in events[seen:] if e.name != "kvm_set_user_memory_region"]
    assert names[:2] == ["kvm_tdp_mmu_spte_changed", "kvm_mmu_prepare_zap_page"]
    assert events[seen:][names.index("kvm_tdp_mmu_spte_changed")].fields["new_spte"] == huge
    mmu.audit()
    assert mmu.page_fault(0, 0x20_1000) is RetPf.SPURIOUS  # mapped: a read finds it there
    mmu.now_ns += RCU_GRACE_PERIOD_NS
    assert mmu.pages.rcu_advance(mmu.now_ns) == 1  # the old 4K table, after a grace period
    mmu.audit()


def test_before_6_13_dirty_logging_off_zaps_and_faults_the_huge_page_back() -> None:
    """Before 6.13 `kvm_tdp_mmu_zap_collapsible_sptes()`: the table is zapped (frozen
    first) and the next fault maps the huge page again."""
    vm, mmu = dirty_logged_4k("before-6.13")
    vm.set_user_memory_region(0, 0, 0, 4 * GIB, UA)
    assert mmu.frozen_seen == 1 and mmu.stat["pages_4k"] == 0  # zap_collapsible_sptes
    assert mmu.stat["pages_2m"] == 0
    mmu.page_fault(0, 0x20_1000)
    assert mmu.stat["pages_2m"] == 1
    mmu.audit()


def test_without_eager_split_huge_pages_stay_until_written() -> None:
    vm = vm_4g()
    mmu = TdpMmu(vm, params=TdpMmuParams(eager_page_split=False))
    mmu.page_fault(0, 0x20_0000)
    vm.set_user_memory_region(0, KVM_MEM_LOG_DIRTY_PAGES, 0, 4 * GIB, UA)
    assert mmu.stat["pages_2m"] == 1  # write-protected (PML: 2M and up), not split
    mmu.page_fault(0, 0x20_0000, write=True)
    assert mmu.stat["pages_4k"] == 512 and mmu.stat["pages_2m"] == 0  # split on the write
    mmu.audit()


def test_nx_huge_pages_split_on_fetch_and_recovery_zaps_them() -> None:
    params = TdpMmuParams(nx_huge_pages="on", nx_huge_pages_recovery_ratio=1)
    mmu = TdpMmu(vm_4g(), params=params)
    mmu.page_fault(0, 0x20_0000)
    ((level, spte),) = leaves(mmu).values()
    assert level == 2 and not is_executable_pte(mmu.cfg, spte)  # huge leaves: NX
    assert mmu.page_fault(0, 0x20_3000, exec_=True) in (RetPf.SPURIOUS, RetPf.FIXED)
    assert mmu.stat["nx_lpage_splits"] == 1 and mmu.stat["pages_4k"] == 512
    assert is_executable_pte(mmu.cfg, leaves(mmu)[0x203][1])
    mmu.page_fault(0, 0x20_5000)  # a read stays 4K below the disallowed table
    assert mmu.stat["pages_2m"] == 0
    mmu.audit()
    assert mmu.kvm_recover_nx_huge_pages() == 1
    assert mmu.stat["nx_lpage_splits"] == 0 and mmu.stat["pages_4k"] == 0
    mmu.page_fault(0, 0x20_5000)
    assert mmu.stat["pages_2m"] == 1
    mmu.audit()


def test_mmio_sptes_are_cached_hit_and_rebuilt_when_stale() -> None:
    events: list[Event] = []
    vm = vm_4g()
    mmu = TdpMmu(vm, emit=events.append)
    gpa = 0x1_2000_0000  # past the slot: MMIO
    assert mmu.page_fault(0, gpa, write=True) is RetPf.EMULATE
    assert mmu.stat["pf_mmio_spte_created"] == 1
    seen = len(events)
    assert (
        mmu.page_fault(0, gpa, error_code=PFERR_RSVD_MASK) is RetPf.EMULATE
    )  # vCPU 0's MMIO info: no trace
    # then the emulator (emulate.py): the MMIO info matches the exit's gpa, userspace's store
    emulated = ["kvm_emulate_insn", "vcpu_match_mmio", "kvm_mmio", "kvm_userspace_exit"]
    assert [e.name for e in events[seen:]] == emulated
    seen = len(events)
    assert (
        mmu.page_fault(1, gpa, error_code=PFERR_RSVD_MASK) is RetPf.EMULATE
    )  # vCPU 1 reads the spte
    names = [e.name for e in events[seen:]]
    assert names == ["check_mmio_spte", "handle_mmio_page_fault", *emulated]
    marked = [e.fields for e in events if e.name == "mark_mmio_spte"]
    assert marked[0]["access"] == 6  # spte & ACC_ALL: EPT's misconfig value W|X (mmutrace.h)
    assert marked[0]["gen"] == vm.generation() & 0x7FFFF
    vm.set_user_memory_region(1, 0, 0x1_0000_0000, 1 << 20, UA + 8 * GIB)  # a new generation
    mmu.page_fault(0, gpa, error_code=PFERR_RSVD_MASK)
    assert mmu.stat["pf_mmio_spte_created"] == 2  # stale: the real path rebuilt it
    mmu.audit()


OPS = st.one_of(
    st.tuples(st.just("access"), st.integers(0, 3), st.integers(0, (4 * GIB >> 12) + 4096),
              st.sampled_from(("r", "w", "x"))),
    st.tuples(st.just("zap"), st.sampled_from(("fast", "slow", "roots"))),
    st.tuples(st.just("dirty"), st.booleans()),
    st.tuples(st.just("recover")),
    st.tuples(st.just("grace")),
)  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(st.lists(OPS, max_size=25), st.sampled_from((1, 2, 3)), st.booleans())
def test_random_operations_keep_the_invariants_and_the_translation(
    ops: list[tuple[object, ...]], host_level: int, nx: bool
) -> None:
    vm = vm_4g()
    mmu = TdpMmu(
        vm, params=TdpMmuParams(host_level=host_level, nx_huge_pages="on" if nx else "off")
    )
    flags = 0
    for op in ops:
        if op[0] == "access":
            _, vcpu, gfn, kind = op
            assert isinstance(gfn, int) and isinstance(vcpu, int)
            ret = mmu.page_fault(vcpu, gfn << 12, write=kind == "w", exec_=kind == "x")
            root = mmu.roots[vcpu]
            sp, index = mmu.last_spte(root, gfn)
            spte = sp.spt[index]
            if gfn < 4 * GIB >> 12:
                assert ret in (RetPf.FIXED, RetPf.SPURIOUS) and is_shadow_present_pte(spte)
                offset = gfn & ((1 << 9 * (sp.role.level - 1)) - 1)
                host_pfn = mmu.levels.host.hva_to_pfn(UA + (gfn << 12))
                assert spte_to_pfn(spte) + offset == host_pfn  # the slot's page
                assert kind != "w" or spte & PT_WRITABLE_MASK
            else:
                assert ret is RetPf.EMULATE and is_mmio_spte(mmu.cfg, spte)
        elif op[0] == "zap":
            kind = op[1]
            if kind == "fast":
                mmu.kvm_mmu_zap_all_fast()
            elif kind == "slow":
                mmu.kvm_tdp_mmu_zap_all()
            else:
                mmu.kvm_tdp_mmu_invalidate_all_roots()
                mmu.kvm_tdp_mmu_zap_invalidated_roots()
        elif op[0] == "dirty":
            flags = KVM_MEM_LOG_DIRTY_PAGES if op[1] else 0
            vm.set_user_memory_region(0, flags, 0, 4 * GIB, UA)
        elif op[0] == "recover":
            mmu.kvm_recover_nx_huge_pages()
        else:
            mmu.now_ns += RCU_GRACE_PERIOD_NS
            mmu.pages.rcu_advance(mmu.now_ns)
        mmu.audit()
        for gfn, (level, spte) in leaves(mmu).items():
            host_pfn = mmu.levels.host.hva_to_pfn(UA + (gfn << 12))
            assert spte_to_pfn(spte) == host_pfn  # every leaf: the slot's page
            if flags and level > 1:
                assert not spte & PT_WRITABLE_MASK


def test_split_children_are_make_small_spte_of_each_index() -> None:
    """`tdp_mmu_split_huge_page`'s one-pass children equal the kernel's per-index
    `make_small_spte()`, with and without the NX mitigation, for any spte."""
    import random
    from dataclasses import replace

    rng = random.Random(1)
    for nx in ("off", "on"):
        mmu = TdpMmu(vm_4g(), params=TdpMmuParams(nx_huge_pages=nx))
        base = mmu.root(0).role
        for level, access in ((1, 7), (1, 3), (2, 7), (2, 0)):
            role = replace(base, level=level, access=access)
            for huge in (rng.getrandbits(64), 0x8600_7F00_91E0_0BF7, 0x8600_7F00_91E0_1BF7):
                expected = [mmu.make_small_spte(huge, role, i) for i in range(512)]
                assert mmu._split_sptes(huge, role) == expected


def test_a_fault_the_leaf_already_allows_is_spurious_with_no_set_spte() -> None:
    """6.13+ `tdp_mmu_map_handle_target_level()`: a present leaf that allows the access
    returns RET_PF_SPURIOUS before `make_spte()`, so no `kvm_mmu_set_spte` line; before
    6.13 the same spte was made again and traced."""
    for era, traced in (("6.13", []), ("before-6.13", ["kvm_mmu_set_spte"])):
        events: list[Event] = []
        params = TdpMmuParams(host_level=1, spurious_era=era)
        mmu = TdpMmu(vm_4g(), params=params, emit=events.append)
        assert mmu.page_fault(0, 0x1234_5000, write=True) is RetPf.FIXED
        seen = len(events)
        assert mmu.page_fault(0, 0x1234_5000) is RetPf.SPURIOUS  # e.g. another vCPU won
        names = [e.name for e in events[seen:]]
        assert names == ["kvm_mmu_spte_requested", *traced], era
        assert mmu.stat["pf_spurious"] == 1
        mmu.audit()


def test_tdp_mmu_pages_is_counted_only_with_prove_mmu() -> None:
    """6.15+ `tdp_account_mmu_page()`: `kvm->arch.tdp_mmu_pages` only under
    CONFIG_KVM_PROVE_MMU; `kvm_account_pgtable_pages()` (SecPageTables) always."""
    for params, counted in (
        (TdpMmuParams(host_level=1), 0),
        (TdpMmuParams(host_level=1, prove_mmu=True), 3),
        (TdpMmuParams(host_level=1, tdp_mmu_pages_era="before-6.15"), 3),
    ):
        mmu = TdpMmu(vm_4g(), params=params)
        mmu.page_fault(0, 0x1234_5000, write=True)
        assert mmu.pages.secondary_pagetables == 3  # L3, L2, L1 tables; not the root
        assert mmu.pages.tdp_mmu_pages == counted
        assert mmu.pages.n_used_mmu_pages == 4
        mmu.kvm_tdp_mmu_zap_all()
        assert mmu.pages.secondary_pagetables == mmu.pages.tdp_mmu_pages == 0
        mmu.audit()


def test_nx_recovery_zaps_under_the_read_lock_freezing_every_entry() -> None:
    """6.18 `kvm_recover_nx_huge_pages()`: unaccounted first, then
    `kvm_tdp_mmu_zap_possible_nx_huge_page()` zaps the parent spte atomically, so
    `handle_removed_pt()` runs shared and freezes (and traces) all 512 entries; before
    6.18 `kvm_tdp_mmu_zap_sp()` held mmu_lock for write and traced the present ones."""
    for era, frozen in (("6.18", 512), ("before-6.18", 1)):
        events: list[Event] = []
        params = TdpMmuParams(nx_huge_pages="on", nx_huge_pages_recovery_ratio=1,
                              nx_recovery_era=era)  # fmt: skip
        mmu = TdpMmu(vm_4g(), params=params, emit=events.append)
        assert mmu.page_fault(0, 0x20_3000, exec_=True) is RetPf.FIXED  # a 4K table
        assert mmu.stat["nx_lpage_splits"] == 1 and mmu.stat["pages_4k"] == 1
        seen = len(events)
        assert mmu.kvm_recover_nx_huge_pages() == 1
        changed = [e.fields for e in events[seen:] if e.name == "kvm_tdp_mmu_spte_changed"]
        assert changed[0]["level"] == 2 and changed[0]["new_spte"] == SHADOW_NONPRESENT_VALUE
        assert sum(f["new_spte"] == FROZEN_SPTE for f in changed) == frozen, era
        assert mmu.stat["nx_lpage_splits"] == 0 and mmu.stat["pages_4k"] == 0
        mmu.audit()
        mmu.page_fault(0, 0x20_5000)  # a read maps the huge page again
        assert mmu.stat["pages_2m"] == 1
        mmu.audit()


def test_nx_recovery_skips_a_table_no_longer_linked_there() -> None:
    """6.18: the page was unaccounted first, so a table already zapped by someone else
    (the parent spte no longer points at it) just leaves the list."""
    params = TdpMmuParams(nx_huge_pages="on", nx_huge_pages_recovery_ratio=1)
    mmu = TdpMmu(vm_4g(), params=params)
    mmu.page_fault(0, 0x20_3000, exec_=True)
    (sp,) = mmu.pages.possible_nx_huge_pages.values()
    parent = mmu.pages.page_of_sptep(sp.ptep)
    parent.spt[(sp.ptep & 0xFFF) >> 3] = 0x1234_5000 | 1 << 11  # another table there now
    assert mmu.kvm_tdp_mmu_zap_possible_nx_huge_page(sp) is False
    assert mmu.kvm_recover_nx_huge_pages() == 0 and not mmu.pages.possible_nx_huge_pages
    assert mmu.stat["nx_lpage_splits"] == 0 and not sp.nx_huge_page_disallowed


def test_prove_mmu_zaps_a_root_from_1g_down() -> None:
    """`tdp_mmu_zap_root()` (6.18): with CONFIG_KVM_PROVE_MMU the 4K and 2M passes are
    skipped, so the first spte zapped is the 1G-level one and its tables go with it."""
    events: list[Event] = []
    mmu = TdpMmu(vm_4g(), params=TdpMmuParams(host_level=1, prove_mmu=True),
                 emit=events.append)  # fmt: skip
    mmu.page_fault(0, 0x1000)
    events.clear()
    mmu.kvm_mmu_zap_all_fast()
    changed = [e.fields for e in events if e.name == "kvm_tdp_mmu_spte_changed"]
    assert changed[0]["level"] == 3 and changed[0]["new_spte"] == SHADOW_NONPRESENT_VALUE
    assert mmu.pages.tdp_mmu_pages == 0 and mmu.stat["pages_4k"] == 0
    mmu.audit()
