"""Huge pages and NX huge pages under shadow paging (each case worked by hand from 6.18
`FNAME(page_fault)`/`FNAME(fetch)` (paging_tmpl.h), `kvm_mmu_hugepage_adjust`,
`account_shadowed` and `kvm_recover_nx_huge_pages` (mmu.c).  The pc-4g layout: slot 2 is
gfn 0x100000 (4 GiB), 512 MiB, its host address 0x7f00e0200000 (2M-aligned alike, not
1G); its first 2M lies in the host's THP at pfn 0x4d3b400 (`HostPages`, seed 1); guest
tables come from the top of slot 1, gfn 0xdc000 on."""

from __future__ import annotations

from mmuscope.engine.events import Event
from mmuscope.engine.layouts import build_vm, preset
from mmuscope.engine.mmu.guest import page_tables as gpt
from mmuscope.engine.mmu.guest.page_tables import GuestPageTables
from mmuscope.engine.mmu.params import TdpMmuParams
from mmuscope.engine.mmu.role import PG_LEVEL_2M
from mmuscope.engine.mmu.shadow.mmu import ShadowMmu
from mmuscope.engine.mmu.spte import PT_PAGE_SIZE_MASK, PT_WRITABLE_MASK, SPTE_CONFIGS, RetPf

GVA_2M = 0x4000_0000  # PML4[0] PDPT[1] PD[0]
SLOT2, SLOT2_PFN = 0x10_0000, 0x4D3_B400


def shadow(**params: object) -> tuple[ShadowMmu, list[Event], int]:
    vm = build_vm(preset("pc-4g"))
    events: list[Event] = []
    tdp = TdpMmuParams(tdp_mmu=False, **params)  # type: ignore[arg-type]
    mmu = ShadowMmu(vm, SPTE_CONFIGS["shadow"], emit=events.append, params=tdp)
    return mmu, events, mmu.guest.spawn()


def created(events: list[Event]) -> list[tuple[int, bool, int]]:
    return [
        (int(e.fields["level"]), bool(e.fields["direct"]), int(e.fields["gfn"]))
        for e in events
        if e.name == "kvm_mmu_get_page" and e.fields["created"]
    ]


def table_gfns(mmu: ShadowMmu, cr3: int, gva: int) -> tuple[int, int]:
    """The gfns of the guest's PDPT and PD on the way to `gva` (the PD's slot for a 1G
    leaf: where a PD would be; the kernel half takes gfns of its own at spawn)."""
    walk = mmu.guest.translate(cr3, gva)
    return walk.table_gfn(3), walk.table_gfn(2) if walk.level < 3 else -1


def leaf_of(mmu: ShadowMmu, gva: int) -> tuple[int, int]:
    """(level, spte) of the leaf the vCPU 0 shadow tables hold for `gva`."""
    sp = mmu.roots[0]
    while (child := mmu.pages.child_at(sp, gpt.pt_index(gva, sp.role.level))) is not None:
        sp = child
    return sp.role.level, sp.spt[gpt.pt_index(gva, sp.role.level)]


def test_a_guest_2m_page_on_thp_maps_a_2m_spte_in_the_shadow_of_the_guest_pd() -> None:
    """max_level = walker.level = 2, the slot and the host allow 2M: goal 2M, reached
    by the indirect pages alone (no direct page); the leaf goes on the 2M rmap."""
    mmu, events, p = shadow()
    mmu.guest.map(p, GVA_2M, SLOT2, level=2)
    assert mmu.page_fault(0, p, GVA_2M + 5 * 4096, write=True) == RetPf.FIXED
    pdpt, pd = table_gfns(mmu, p, GVA_2M)
    assert created(events) == [(4, False, p), (3, False, pdpt), (2, False, pd)]
    requested = next(e for e in events if e.name == "kvm_mmu_spte_requested")
    assert requested.fields == {"gfn": SLOT2 + 5, "pfn": SLOT2_PFN + 5, "level": 2}
    level, spte = leaf_of(mmu, GVA_2M)
    assert level == 2 and spte & PT_PAGE_SIZE_MASK and spte & PT_WRITABLE_MASK
    assert mmu.rmaps[(0, 2, PG_LEVEL_2M)][0].count() == 1 and mmu.rmap_count(SLOT2) == 0
    # another 4K of the same 2M page: the spte is there already
    assert mmu.page_fault(0, p, GVA_2M + 0x1F_F000) == RetPf.SPURIOUS
    assert mmu.why_level(0, p, GVA_2M) == "2M: slot and host allow"
    mmu.audit()


def test_a_guest_1g_page_gets_a_direct_2m_table_where_1g_is_not_allowed() -> None:
    """walker.level = 3; slot 2's gfn and hva differ in 1G alignment (disallow_lpage at
    1G): goal 2M, so one direct level-2 page keyed by the 1G page's base gfn."""
    mmu, events, p = shadow(host_level=3)
    gva = 0x80_0000_0000
    mmu.guest.map(p, gva, SLOT2, level=3)
    assert mmu.page_fault(0, p, gva + 0x20_5000) == RetPf.FIXED
    pdpt, _ = table_gfns(mmu, p, gva)
    assert created(events) == [(4, False, p), (3, False, pdpt), (2, True, SLOT2)]
    level, spte = leaf_of(mmu, gva + 0x20_0000)
    assert level == 2 and spte & PT_PAGE_SIZE_MASK
    assert mmu.why_level(0, p, gva) == "2M: gfn/hva not 1G-aligned alike"
    mmu.audit()


def test_a_guest_page_table_in_the_2m_range_forbids_the_huge_spte() -> None:
    """The process's own tables (0xdc000-0xdc002) lie in the guest 2M page: each new
    indirect page raised disallow_lpage (account_shadowed), so 4K below a direct page;
    zapping them (the process exits) lowers it again."""
    mmu, events, p = shadow()
    mmu.guest.map(p, GVA_2M, p, level=2, writable=False)
    assert mmu.page_fault(0, p, GVA_2M + 9 * 4096) == RetPf.FIXED
    assert created(events)[-1] == (1, True, p)
    assert leaf_of(mmu, GVA_2M + 9 * 4096)[0] == 1
    assert mmu.why_level(0, p, GVA_2M) == "4K: guest page table in the 2M"
    assert mmu.levels.shadowed_in(0, p, PG_LEVEL_2M) == 3
    mmu.audit()
    mmu.drop_process(p)
    assert mmu.levels.disallow_lpage == {}
    mmu.audit()


def test_a_table_shadowed_later_write_protects_the_2m_spte_and_the_next_write_maps_4k() -> None:
    """`kvm_mmu_slot_gfn_write_protect(.., PG_LEVEL_4K)` covers the 2M rmap: the huge
    spte loses W; the write fault then finds disallow_lpage, drops the huge spte
    (`drop_large_spte`) and maps 4K in a direct page."""
    vm = build_vm(preset("pc-4g"))
    guest = GuestPageTables(range(0x1000, 0x1400))
    mmu = ShadowMmu(vm, SPTE_CONFIGS["shadow"], guest=guest)
    a = guest.spawn()
    guest.map(a, GVA_2M, 0x1200, level=2)
    assert mmu.page_fault(0, a, GVA_2M, write=True) == RetPf.FIXED
    assert leaf_of(mmu, GVA_2M)[1] & PT_WRITABLE_MASK
    while guest._next < 0x1200:
        guest.alloc_page()
    b = guest.spawn()  # gfn 0x1200: a table inside a's 2M page
    mmu.cr3_load(1, b)
    level, spte = leaf_of(mmu, GVA_2M)
    assert level == 2 and not spte & PT_WRITABLE_MASK and mmu.stat["wrprot_sptes"] == 1
    mmu.audit()
    assert mmu.page_fault(0, a, GVA_2M + 5 * 4096, write=True) == RetPf.FIXED
    level, spte = leaf_of(mmu, GVA_2M + 5 * 4096)
    assert level == 1 and spte & PT_WRITABLE_MASK
    mmu.audit()


def test_nx_huge_pages_split_on_fetch_and_recovery_lets_the_2m_spte_back() -> None:
    """nx_huge_pages=on: a fetch is 4K in a direct page accounted as a possible NX huge
    page (req_level 2 >= 2); a read next to it stays 4K (disallowed_hugepage_adjust);
    one recovery run zaps ceil(1/60) = 1 page, the next read maps 2M without X, and a
    fetch there splits it again."""
    mmu, _, p = shadow(nx_huge_pages="on")
    mmu.guest.map(p, GVA_2M, SLOT2, level=2)
    nx = mmu.cfg.shadow_nx_mask
    assert mmu.page_fault(0, p, GVA_2M, fetch=True) == RetPf.FIXED
    level, spte = leaf_of(mmu, GVA_2M)
    assert level == 1 and not spte & nx and mmu.pages.stat["nx_lpage_splits"] == 1
    assert mmu.why_level(0, p, GVA_2M, fetch=True) == "4K: NX huge page (fetch, req 2M)"
    assert mmu.why_level(0, p, GVA_2M + 0x9000) == "4K: NX-split table below"
    assert mmu.page_fault(0, p, GVA_2M + 0x9000) == RetPf.FIXED
    assert leaf_of(mmu, GVA_2M + 0x9000)[0] == 1
    mmu.audit()
    assert mmu.kvm_recover_nx_huge_pages() == 1 and mmu.pages.stat["nx_lpage_splits"] == 0
    assert mmu.page_fault(0, p, GVA_2M + 0x11000) == RetPf.FIXED
    level, spte = leaf_of(mmu, GVA_2M + 0x11000)
    assert level == 2 and spte & nx  # make_spte(): no executable huge page
    mmu.audit()
    assert mmu.page_fault(0, p, GVA_2M + 0x11000, fetch=True) == RetPf.FIXED
    level, spte = leaf_of(mmu, GVA_2M + 0x11000)
    assert level == 1 and not spte & nx and mmu.pages.stat["nx_lpage_splits"] == 1
    mmu.audit()


def test_a_fetch_through_a_guest_nx_pte_is_a_guest_fault() -> None:
    """`permission_fault()` for a fetch (EFER.NX=1): the #PF is injected with P|F."""
    mmu, _, p = shadow()
    mmu.guest.map(p, GVA_2M, SLOT2, level=2, nx=True)
    assert mmu.page_fault(0, p, GVA_2M, fetch=True) == RetPf.RETRY
    assert mmu.injected[0] == (GVA_2M, gpt.PFERR_PRESENT_MASK | gpt.PFERR_FETCH_MASK)


def test_a_guest_1g_page_on_hugetlbfs_1g_maps_a_1g_spte() -> None:
    """A slot whose gfn and hva are 1G-aligned alike, the host in 1G pages: goal 1G, the
    leaf in the shadow of the guest's PDPT, on the 1G rmap."""
    mmu, events, p = shadow(host_level=3)
    mmu.vm.set_user_memory_region(20, 0, 20 << 30, 1 << 30, 0x7F00_0000_0000)
    gfn, gva = (20 << 30) >> 12, 0x80_0000_0000
    mmu.guest.map(p, gva, gfn, level=3)
    assert mmu.page_fault(0, p, gva + 0x1234_5000) == RetPf.FIXED
    assert created(events) == [(4, False, p), (3, False, table_gfns(mmu, p, gva)[0])]
    level, spte = leaf_of(mmu, gva)
    assert level == 3 and spte & PT_PAGE_SIZE_MASK
    assert mmu.rmaps[(0, 20, 3)][0].count() == 1
    assert mmu.why_level(0, p, gva) == "1G: slot and host allow"
    mmu.audit()
