"""What the fault path needs beyond mapping a 4K page, for the direct MMU (EPT/NPT,
tdp_mmu=N) and the shadow MMU: `direct_pte_prefetch`, the host's backing
(`host_pfn_mapping_level`), NX huge pages (`disallowed_hugepage_adjust`,
`account_nx_huge_page`, recovery) and the kernel's non-present spte value
(`SHADOW_NONPRESENT_VALUE`), each rule of mmu.c 6.17/6.18."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine import Vm
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import build_vm, preset
from mmuscope.engine.memslots.constants import KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY
from mmuscope.engine.mmu.direct.mmu import DirectMmu
from mmuscope.engine.mmu.direct.session import MmuSession
from mmuscope.engine.mmu.guest import page_tables as gpt
from mmuscope.engine.mmu.mapping_level import (
    HOST_RAM_BASE,
    HOST_RAM_SIZE,
    HostPages,
    MappingLevels,
    kvm_pages_per_hpage,
)
from mmuscope.engine.mmu.params import TdpMmuParams
from mmuscope.engine.mmu.role import PG_LEVEL_1G, PG_LEVEL_2M, PG_LEVEL_4K
from mmuscope.engine.mmu.shadow.mmu import ShadowMmu
from mmuscope.engine.mmu.spte import (
    SHADOW_NONPRESENT_VALUE,
    SPTE_CONFIGS,
    VMX_EPT_ACCESS_BIT,
    VMX_EPT_EXECUTABLE_MASK,
    RetPf,
    describe_spte,
    is_shadow_present_pte,
)
from mmuscope.engine.mmu.tdp.mmu import TdpMmu
from mmuscope.engine.mmu.views import NONE, spt_cells

MiB, GiB = 1 << 20, 1 << 30
HVA = 0x7F00_0000_0000  # 1G-aligned


def direct(
    size: int = 64 * MiB, flags: int = 0, cfg: str = "ept", **kw: object
) -> tuple[Vm, DirectMmu, list[Event]]:
    vm = Vm()
    vm.set_user_memory_region(0, flags, 0, size, HVA)
    events: list[Event] = []
    mmu = DirectMmu(vm, SPTE_CONFIGS[cfg], emit=events.append, **kw)  # type: ignore[arg-type]
    return vm, mmu, events


def leaf(mmu: DirectMmu, gfn: int) -> tuple[int, int]:
    """(spte, level) the walk from vCPU 0's root ends at for `gfn`."""
    sp = mmu.roots[0]
    while True:
        index = (gfn >> (9 * (sp.role.level - 1))) & 511
        child = mmu.pages.child_at(sp, index)
        if child is None:
            return sp.spt[index], sp.role.level
        sp = child


# 1. direct_pte_prefetch ------------------------------------------------------------------


def test_a_4k_fault_prefetches_its_aligned_group_with_the_accessed_bit_clear() -> None:
    _, mmu, events = direct(huge_pages=False)
    assert mmu.page_fault(0, 0x2345 << 12) == RetPf.FIXED
    for gfn in range(0x2340, 0x2348):
        spte, level = leaf(mmu, gfn)
        assert level == PG_LEVEL_4K and is_shadow_present_pte(spte)
        # make_spte(prefetch=true) -> mark_spte_for_access_track(): A clear, except the fault's
        assert bool(spte & VMX_EPT_ACCESS_BIT) == (gfn == 0x2345)
    assert leaf(mmu, 0x2348)[0] == SHADOW_NONPRESENT_VALUE  # the next group: untouched
    assert mmu.stat["pf_fixed"] == 1 and mmu.prefetched == 7
    gfns = [e.fields["gfn"] for e in events if e.name == "kvm_mmu_set_spte"]
    assert gfns == [0x2345, *range(0x2340, 0x2345), *range(0x2346, 0x2348)]
    # a fault on a prefetched spte finds A clear: mmu_set_spte() rewrites it (FIXED, A
    # set); only then is the next one RET_PF_SPURIOUS
    assert mmu.page_fault(0, 0x2341 << 12) == RetPf.FIXED
    assert leaf(mmu, 0x2341)[0] & VMX_EPT_ACCESS_BIT
    assert mmu.page_fault(0, 0x2341 << 12) == RetPf.SPURIOUS
    mmu.audit()


def test_prefetch_goes_run_by_run_around_present_entries() -> None:
    """`__direct_pte_prefetch()`: each run of non-present entries, the fault's counting as
    present, to `direct_pte_prefetch_many()`."""
    _, mmu, events = direct(huge_pages=False, pte_prefetch=False)
    for gfn in (2, 5):
        mmu.page_fault(0, gfn << 12)
    mmu.pte_prefetch = True
    del events[:]
    assert mmu.page_fault(0, 3 << 12) == RetPf.FIXED
    assert [e.fields["gfn"] for e in events if e.name == "kvm_mmu_set_spte"] == [3, 0, 1, 4, 6, 7]
    mmu.audit()


def test_no_prefetch_without_accessed_bits_a_read_only_slot_dirty_logging_or_the_slot_end() -> None:
    _, ad_off, _ = direct(cfg="2011-no-mmio-cache", huge_pages=False)  # sp_ad_disabled(sp)
    _, ro, _ = direct(flags=KVM_MEM_READONLY, huge_pages=False)  # gfn_to_hva_many: RO_BAD
    _, logged, _ = direct(flags=KVM_MEM_LOG_DIRTY_PAGES)  # gfn_to_memslot_dirty_bitmap
    _, short, _ = direct(size=4 << 12)  # 3 pages left of a run of 7: kvm_prefetch_pages 0
    for mmu in (ad_off, ro, logged, short):
        assert mmu.page_fault(0, 0) == RetPf.FIXED
        assert mmu.prefetched == 0
        assert sum(is_shadow_present_pte(leaf(mmu, g)[0]) for g in range(8)) == 1
        mmu.audit()


def test_prefetch_is_the_kernel_default_and_can_be_switched_off() -> None:
    vm = build_vm(preset("pc-4g"))
    assert DirectMmu(vm).pte_prefetch and not DirectMmu(vm, pte_prefetch=False).pte_prefetch
    on = MmuSession(preset("pc-4g"), seed=3, huge_pages=False)
    off = MmuSession(preset("pc-4g"), seed=3, huge_pages=False, pte_prefetch=False)
    on.run(400)
    off.run(400)
    assert on.mmu.prefetched > 0 and off.mmu.prefetched == 0
    assert on.mmu.stat["pf_fixed"] < off.mmu.stat["pf_fixed"]  # neighbours need no fault


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 3 * 512 - 1), min_size=1, max_size=40), st.booleans())
def test_prefetch_maps_exactly_the_groups_of_the_faulted_gfns(gfns: list[int], on: bool) -> None:
    """Reference model: one writable slot, 4K only: after faults on `gfns` the mapped
    gfns are their aligned groups of 8 (just the gfns without prefetch), and a fault is
    SPURIOUS exactly when its gfn was mapped by a fault already (a prefetched spte has A
    clear, so its first fault rewrites it: FIXED)."""
    _, mmu, _ = direct(huge_pages=False, pte_prefetch=on)
    mapped: set[int] = set()
    faulted: set[int] = set()
    for gfn in gfns:
        ret = mmu.page_fault(0, gfn << 12)
        assert ret == (RetPf.SPURIOUS if gfn in faulted else RetPf.FIXED)
        faulted.add(gfn)
        mapped |= set(range(gfn & ~7, (gfn & ~7) + 8)) if on else {gfn}
        mmu.audit()
    present = {g for g in range(3 * 512) if is_shadow_present_pte(leaf(mmu, g)[0])}
    assert present == mapped


def test_the_shadow_mmu_prefetches_below_a_guest_huge_page_and_clears_accessed() -> None:
    """`FNAME(pte_prefetch)` on a direct page (a guest 2M page, 4K host pages) is
    `__direct_pte_prefetch()`; every prefetched spte has A clear."""
    vm = build_vm(preset("pc-4g"))
    params = TdpMmuParams(tdp_mmu=False, host_level=PG_LEVEL_4K)
    mmu = ShadowMmu(vm, SPTE_CONFIGS["shadow"], pte_prefetch=True, params=params)
    p = mmu.guest.spawn()
    gva = 0x4000_0000
    mmu.guest.map(p, gva, 0x200, level=2)
    assert mmu.page_fault(0, p, gva + 0x3000) == RetPf.FIXED
    sp = mmu.pages.page_of_sptep(next(iter(mmu.shadowed_translation)))
    assert sp.role.direct and sp.role.level == 1
    present = [i for i in range(8) if is_shadow_present_pte(sp.spt[i])]
    assert present == list(range(8)) and mmu.stat["pf_fixed"] == 1
    accessed = [bool(sp.spt[i] & gpt.PT_ACCESSED) for i in range(8)]
    assert accessed == [i == 3 for i in range(8)]
    mmu.audit()


def test_the_cpu_sets_the_accessed_bit_of_a_prefetched_spte_on_first_use() -> None:
    session = MmuSession(preset("pc-4g"), seed=3, huge_pages=False)
    session.run(50)
    mmu = session.mmu
    sp, index = next(
        (sp, i)
        for sp in mmu.pages.pages()
        if sp.role.level == 1
        for i, s in enumerate(sp.spt)
        if is_shadow_present_pte(s) and not s & VMX_EPT_ACCESS_BIT
    )
    gpa = (sp.gfn + index) << 12
    from mmuscope.engine.mmu.guest.ept import EptAccess

    session.next_access = lambda: EptAccess(0, gpa, False)  # type: ignore[method-assign]
    step = session.step()
    assert not step.exited and sp.spt[index] & VMX_EPT_ACCESS_BIT


# 2. host_pfn_mapping_level / kvm_mmu_max_mapping_level ------------------------------------


def test_the_host_backing_caps_the_level() -> None:
    for host, want in ((PG_LEVEL_4K, PG_LEVEL_4K), (PG_LEVEL_2M, PG_LEVEL_2M), (PG_LEVEL_1G, 3)):
        _, mmu, _ = direct(size=2 * GiB, params=TdpMmuParams(host_level=host))
        assert mmu.page_fault(0, GiB + 0x5000) == RetPf.FIXED
        assert leaf(mmu, (GiB >> 12) + 5)[1] == want
        assert (0, 0, want) in mmu.rmaps
        mmu.audit()


@settings(max_examples=40, deadline=None)
@given(
    level=st.sampled_from([PG_LEVEL_4K, PG_LEVEL_2M, PG_LEVEL_1G]),
    seed=st.integers(0, 2**32),
    hvas=st.lists(st.integers(0x7F00_0000_0000 >> 12, (0x7F00_0000_0000 + (1 << 37)) >> 12),
                  min_size=1, max_size=60),
)  # fmt: skip
def test_host_pages_back_each_vmm_page_with_its_own_host_ram_page(
    level: int, seed: int, hvas: list[int]
) -> None:
    """`HostPages.hva_to_pfn()` against a plain reference: host pages of `level` are
    contiguous runs of host RAM aligned to their size, two VMM pages (within host RAM's
    size of each other) never share a frame, and the draw is the seed's alone."""
    host, again = HostPages(level, seed), HostPages(level, seed)
    pages = kvm_pages_per_hpage(level)
    seen: dict[int, int] = {}  # pfn -> the VMM page it backs
    for vpfn in hvas:
        pfn = host.hva_to_pfn(vpfn << 12)
        assert pfn == again.hva_to_pfn(vpfn << 12)
        assert HOST_RAM_BASE <= pfn << 12 < HOST_RAM_BASE + HOST_RAM_SIZE
        assert seen.setdefault(pfn, vpfn) == vpfn
        head = host.hva_to_pfn((vpfn - vpfn % pages) << 12)
        assert head % pages == 0 and pfn == head + vpfn % pages


def test_the_reason_for_a_level_is_the_kernels() -> None:
    _, mmu, _ = direct(size=2 * GiB + 4096, params=TdpMmuParams(host_level=PG_LEVEL_1G))
    slot = mmu.vm.slot(0, 0)
    assert mmu.why_level(slot, 5) == "1G: slot and host allow"
    last = (2 * GiB) >> 12
    assert mmu.why_level(slot, last) == "4K: 2M range not all in slot"
    _, thp, _ = direct(size=2 * GiB)
    assert thp.why_level(thp.vm.slot(0, 0), 5) == "2M: host 2M pages"
    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, 64 * MiB, HVA + 4096)  # gfn and hva misaligned
    odd = DirectMmu(vm)
    assert odd.why_level(vm.slot(0, 0), 600) == "4K: gfn/hva not 2M-aligned alike"
    assert odd.max_level(vm.slot(0, 0), 600) == PG_LEVEL_4K


def brute_force_level(base: int, npages: int, ugfn: int, host: int, gfn: int) -> int:
    for level in (PG_LEVEL_1G, PG_LEVEL_2M):
        pages = kvm_pages_per_hpage(level)
        start = gfn & ~(pages - 1)
        aligned = not (base ^ ugfn) & (pages - 1)
        if level <= host and aligned and base <= start and start + pages <= base + npages:
            return level
    return PG_LEVEL_4K


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 3 * 512 * 512),
    st.integers(1, 2 * 512 * 512),
    st.sampled_from([0, 1, 512, 512 * 512]),
    st.sampled_from([PG_LEVEL_4K, PG_LEVEL_2M, PG_LEVEL_1G]),
    st.integers(0, 2 * 512 * 512 - 1),
)
def test_the_direct_and_the_tdp_mmu_share_one_max_mapping_level(
    base: int, npages: int, skew: int, host: int, offset: int
) -> None:
    vm = Vm()
    ugfn = (HVA >> 12) + skew
    vm.set_user_memory_region(0, 0, base << 12, npages << 12, ugfn << 12)
    slot = vm.slot(0, 0)
    assert slot is not None
    gfn = base + offset % npages
    params = TdpMmuParams(host_level=host)
    d, t = DirectMmu(vm, params=params), TdpMmu(vm, params=params)
    want = brute_force_level(base, npages, ugfn, host, gfn)
    assert d.max_level(slot, gfn) == t.kvm_mmu_max_mapping_level(slot, gfn, 3) == want
    assert type(d.levels) is type(t.levels) is MappingLevels


# 3. nx_huge_pages -------------------------------------------------------------------------


OPS = ["read", "write", "fetch", "recover", "zap"]


def nx_direct(**kw: object) -> tuple[Vm, DirectMmu, list[Event]]:
    params = TdpMmuParams(nx_huge_pages="on", nx_huge_pages_recovery_ratio=1)
    return direct(params=params, **kw)


def test_a_fetch_under_nx_huge_pages_maps_4k_and_accounts_the_table() -> None:
    _, mmu, _ = nx_direct()
    assert mmu.page_fault(0, 0x20_5000, exec_=True) == RetPf.FIXED  # a 2M-capable gfn
    spte, level = leaf(mmu, 0x205)
    assert level == PG_LEVEL_4K and spte & VMX_EPT_EXECUTABLE_MASK
    l1 = mmu.pages.page_of_sptep(next(iter(mmu.rmap_vals[(0, 0, 1)].values())))  # type: ignore[arg-type]
    assert l1.nx_huge_page_disallowed and mmu.pages.stat["nx_lpage_splits"] == 1
    assert list(mmu.pages.possible_nx_huge_pages.values()) == [l1]
    # a read in the same 2M range may not replace the table: disallowed_hugepage_adjust
    assert mmu.page_fault(0, 0x30_0000) == RetPf.FIXED
    assert leaf(mmu, 0x300)[1] == PG_LEVEL_4K
    assert mmu.why_level(mmu.vm.slot(0, 0), 0x300) == "4K: NX-split table below"
    mmu.audit()


def test_huge_leaves_are_not_executable_and_a_fetch_splits_them() -> None:
    _, mmu, _ = nx_direct()
    assert mmu.page_fault(0, 0x40_0000) == RetPf.FIXED
    spte, level = leaf(mmu, 0x400)
    assert level == PG_LEVEL_2M and not spte & VMX_EPT_EXECUTABLE_MASK  # make_spte()
    assert mmu.page_fault(0, 0x40_1000, exec_=True) == RetPf.FIXED
    assert leaf(mmu, 0x401)[1] == PG_LEVEL_4K and mmu.pages.stat["nx_lpage_splits"] == 1
    assert mmu.why_level(mmu.vm.slot(0, 0), 0x401, exec_=True) == "4K: NX huge page (fetch, req 2M)"
    mmu.audit()


def test_recovery_zaps_the_oldest_split_and_the_huge_page_comes_back() -> None:
    _, mmu, _ = nx_direct()
    for gpa in (0x20_0000, 0x40_0000, 0x60_0000):
        mmu.page_fault(0, gpa, exec_=True)
    oldest = next(iter(mmu.pages.possible_nx_huge_pages.values()))
    assert mmu.pages.stat["nx_lpage_splits"] == 3
    assert mmu.kvm_recover_nx_huge_pages() == 3  # ratio 1: DIV_ROUND_UP(3, 1)
    assert oldest.role.invalid and mmu.pages.stat["nx_lpage_splits"] == 0
    assert mmu.page_fault(0, 0x20_0000) == RetPf.FIXED
    assert leaf(mmu, 0x200)[1] == PG_LEVEL_2M
    mmu.audit()


def test_recovery_only_unaccounts_in_a_dirty_logged_slot() -> None:
    vm, mmu, _ = nx_direct()
    mmu.page_fault(0, 0x20_0000, exec_=True)
    vm.set_user_memory_region(0, KVM_MEM_LOG_DIRTY_PAGES, 0, 64 * MiB, HVA)
    (sp,) = mmu.pages.possible_nx_huge_pages.values()
    assert mmu.kvm_recover_nx_huge_pages() == 0
    assert not sp.role.invalid and not sp.nx_huge_page_disallowed
    assert mmu.pages.stat["nx_lpage_splits"] == 0
    mmu.audit()


def test_without_the_mitigation_a_fetch_maps_an_executable_huge_page() -> None:
    _, mmu, _ = direct()  # nx_huge_pages=auto on a CPU without ITLB multihit
    assert mmu.page_fault(0, 0x20_0000, exec_=True) == RetPf.FIXED
    spte, level = leaf(mmu, 0x200)
    assert level == PG_LEVEL_2M and spte & VMX_EPT_EXECUTABLE_MASK
    assert mmu.pages.stat["nx_lpage_splits"] == 0


@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["read", "write", "fetch", "recover", "zap"]), st.integers(0, 95)
        ),
        min_size=1,
        max_size=40,
    )
)
def test_nx_accounting_survives_random_faults_recoveries_and_zaps(
    ops: list[tuple[str, int]],
) -> None:
    _, mmu, _ = nx_direct()
    for op, n in ops:
        gpa = n * (640 << 10)  # spread over 64 MiB: 2M and 4K neighbours alike
        if op == "recover":
            mmu.kvm_recover_nx_huge_pages()
        elif op == "zap":
            mmu.zap_all_fast()
        else:
            mmu.page_fault(0, gpa, write=op == "write", exec_=op == "fetch")
            spte, level = leaf(mmu, gpa >> 12)
            if level > PG_LEVEL_4K:
                assert not spte & VMX_EPT_EXECUTABLE_MASK
            if op == "fetch":
                assert level == PG_LEVEL_4K
        mmu.audit()  # nx_lpage_splits == len(possible_nx_huge_pages), all disallowed


def test_the_session_fetches_and_recovers_under_the_mitigation() -> None:
    params = TdpMmuParams(
        nx_huge_pages="on", nx_huge_pages_recovery_ratio=2, nx_huge_pages_recovery_period_ms=0
    )
    session = MmuSession(preset("pc-4g"), seed=5, params=params)
    session.mmu.params = params
    session._next_recovery = 200_000  # the worker's first wake-up, in guest ns
    steps = [session.step() for _ in range(600)]
    assert any(s.access.fetch for s in steps)
    assert session.mmu.pages.stat["mmu_shadow_zapped"] > 0  # recovery zapped splits
    session.audit()


# 4. SHADOW_NONPRESENT_VALUE ---------------------------------------------------------------


def test_empty_entries_hold_shadow_nonpresent_value_from_6_10_and_0_before() -> None:
    _, mmu, _ = direct()
    mmu.page_fault(0, 0x1000)
    root = mmu.roots[0]
    assert root.spt[1] == SHADOW_NONPRESENT_VALUE == 1 << 63
    cells = spt_cells(mmu.pages, root, mmu.cfg, mmu.vm.generation(0))
    assert cells[1].state == NONE and cells[1].spte == 1 << 63
    assert describe_spte(mmu.cfg, root.spt[1], 4) == "not present"
    mmu.zap_all_fast()
    assert all(s == SHADOW_NONPRESENT_VALUE for s in root.spt)  # mmu_spte_clear_track_bits
    _, old, _ = direct(cfg="2011-no-mmio-cache")
    old.page_fault(0, 0x1000)
    assert old.roots[0].spt[1] == 0  # before 6.10 a non-present spte is 0
    vm = build_vm(preset("pc-4g"))
    shadow = ShadowMmu(vm, SPTE_CONFIGS["shadow"])
    p = shadow.guest.spawn()
    shadow.guest.map(p, 0x40_0000, 0x1000)
    shadow.page_fault(0, p, 0x40_0000)
    assert shadow.roots[0].spt[300] == SHADOW_NONPRESENT_VALUE
    shadow.audit()
