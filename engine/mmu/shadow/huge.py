"""Huge pages and NX huge pages under shadow paging (EPT off): the part of `FNAME(fetch)`
below the guest's own tables, the `disallow_lpage` a shadowed table raises, and NX huge
page recovery for shadow pages.

torvalds/linux 6.17/6.18 `arch/x86/kvm/mmu/paging_tmpl.h`, `mmu.c`, `page_track.c`:
- `FNAME(page_fault)`: `fault->max_level = walker.level` (the level of the guest's leaf:
  4K, 2M or 1G); `kvm_mmu_faultin_pfn()`; with mmu_lock, `FNAME(fetch)`.
- `FNAME(fetch)`: the indirect pages down to the guest leaf's level (`it.level ==
  gw->level`: `fetch`), then `kvm_mmu_hugepage_adjust()` *after* them ("KVM doesn't
  support mapping hugepages into the guest for gfns that are being shadowed by KVM, i.e.
  allocating a new shadow page may affect the allowed hugepage size": mapping_level.py,
  the host's backing and the slot's `lpage_info`), `trace_kvm_mmu_spte_requested`, then
  on down to `goal_level`: `disallowed_hugepage_adjust()` under the NX mitigation,
  `validate_direct_spte()` (a direct child made with another access is unlinked),
  `kvm_mmu_get_child_sp(base_gfn, direct=true, gw->pte_access)` (a huge leaf in the way
  dropped: `drop_large_spte`), and `account_nx_huge_page(sp, req_level >= it.level)`
  for a page made because an executable huge page was disallowed (nx_huge_pages.py);
  the leaf is `mmu_set_spte(gw->pte_access, base_gfn, fault->pfn)` at `goal_level`.
- `account_shadowed()`: a level-1 page `kvm_mmu_gfn_disallow_lpage()`s its gfn, an
  upper-level page `__kvm_write_track_add_gfn()`s it, which does too: the table's
  `lpage_info_slot(gfn, slot, level)->disallow_lpage` goes up at 2M and 1G
  (`update_gfn_disallow_lpage_count`), so no huge spte maps a range holding a shadowed
  table; `kvm_mmu_slot_gfn_write_protect(.., PG_LEVEL_4K)` clears W at every level, so a
  huge spte made before the table was shadowed loses W, and its next write fault maps
  4K below a direct page.  `unaccount_shadowed()` (`__kvm_mmu_prepare_zap_page()`)
  lowers the count: `kvm_mmu_gfn_allow_lpage()`.
- `kvm_recover_nx_huge_pages()`: shadow pages are zapped with
  `kvm_mmu_prepare_zap_page()` (nx_huge_pages.py, shared with the direct MMU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...memslots.memslot import MemorySlot
from ...memslots.vm import Vm
from ..guest.page_tables import GuestPageTables, GuestWalk, pt_index
from ..mapping_level import LEVEL_NAMES, KvmPageFault, MappingLevels, kvm_pages_per_hpage
from ..mmu_pages import KvmMmuPage, MmuPages, kvm_recover_mmu_nx_huge_pages
from ..nx_huge_pages import account_nx_huge_page
from ..params import TdpMmuParams
from ..role import PG_LEVEL_2M, PG_LEVEL_4K
from ..spte import KVM_MAX_HUGEPAGE_LEVEL, SPTE_BASE_ADDR_MASK

if TYPE_CHECKING:
    from .mmu import ShadowMmu

LpageKey = tuple[int, int, int]  # (as_id, level, gfn >> level shift)


class ShadowLpageInfo(MappingLevels):
    """`MappingLevels` plus the `disallow_lpage` counts shadowed tables raise."""

    def __init__(self, host_level: int, nx_huge_pages: bool) -> None:
        super().__init__(host_level, nx_huge_pages)
        self.disallow_lpage: dict[LpageKey, int] = {}
        self.accounted: dict[int, tuple[int, int]] = {}  # sp.seq -> (as_id, gfn)

    @staticmethod
    def _keys(as_id: int, gfn: int) -> list[LpageKey]:
        return [
            (as_id, level, gfn >> 9 * (level - 1))
            for level in range(PG_LEVEL_2M, KVM_MAX_HUGEPAGE_LEVEL + 1)
        ]

    def account(self, sp: KvmMmuPage) -> None:
        """`kvm_mmu_gfn_disallow_lpage(slot, sp->gfn)`."""
        self.accounted[sp.seq] = (sp.role.smm, sp.gfn)
        for key in self._keys(sp.role.smm, sp.gfn):
            self.disallow_lpage[key] = self.disallow_lpage.get(key, 0) + 1

    def unaccount(self, sp: KvmMmuPage) -> None:
        """`kvm_mmu_gfn_allow_lpage(slot, sp->gfn)`."""
        entry = self.accounted.pop(sp.seq, None)
        if entry is None:
            return
        for key in self._keys(*entry):
            left = self.disallow_lpage[key] - 1
            if left:
                self.disallow_lpage[key] = left
            else:
                del self.disallow_lpage[key]

    def shadowed_in(self, as_id: int, gfn: int, level: int) -> int:
        """Shadowed tables in the `level` frame of `gfn` (the shadow part of the count)."""
        return self.disallow_lpage.get((as_id, level, gfn >> 9 * (level - 1)), 0)

    def lpage_allowed(self, slot: MemorySlot, gfn: int, level: int) -> bool:
        return super().lpage_allowed(slot, gfn, level) and not self.shadowed_in(
            slot.as_id, gfn, level
        )

    def disallow_reason(self, slot: MemorySlot, gfn: int, level: int) -> str:
        if self.shadowed_in(slot.as_id, gfn, level):
            return f"guest page table in the {LEVEL_NAMES[level]}"  # account_shadowed()
        return super().disallow_reason(slot, gfn, level)

    def audit(self, expected: dict[int, tuple[int, int]]) -> str | None:
        """What is wrong with the counts, given the pages that should be accounted."""
        if expected != self.accounted:
            return "disallow_lpage: accounted pages differ from the indirect pages"
        counts: dict[LpageKey, int] = {}
        for as_id, gfn in expected.values():
            for key in self._keys(as_id, gfn):
                counts[key] = counts.get(key, 0) + 1
        return None if counts == self.disallow_lpage else "disallow_lpage counts are wrong"


def fetch(
    mmu: ShadowMmu,
    root: KvmMmuPage,
    gva: int,
    walk: GuestWalk,
    fault: KvmPageFault,
    access: int,
) -> tuple[KvmMmuPage, int]:
    """`FNAME(fetch)` (6.18 paging_tmpl.h): the indirect pages of the guest's tables
    down to `walker.level`, `kvm_mmu_hugepage_adjust()`, the
    `kvm_mmu_spte_requested` line, then direct pages to the goal level
    (`fetch_direct`); returns the leaf's page and index."""
    assert walk.gfn is not None
    sp = root
    for level in range(root.role.level, walk.level, -1):
        index = pt_index(gva, level)
        gfn = walk.table_gfn(level - 1)
        role = sp.role.child(walk.access_above(level - 1), direct=False)
        sp.write_flooding_count = 0  # clear_sp_write_flooding_count()
        child = mmu.pages.child_at(sp, index)
        if child is None or child.gfn != gfn or child.role.word != role.word:
            if child is not None:
                child.parent_ptes.discard(sp.sptep(index))
            elif sp.spt[index] != mmu.pages.nonpresent:
                mmu._zap_leaf(sp, index)  # a huge leaf where the guest has a table
            child = mmu._get_page(gfn, role)
            mmu.pages.link(sp, index, child)
        sp = child
    sp.write_flooding_count = 0
    mmu.levels.kvm_mmu_hugepage_adjust(fault)
    mmu.emit_spte_requested(fault)
    return fetch_direct(mmu, sp, gva, fault, access)


def fetch_direct(
    mmu: ShadowMmu, sp: KvmMmuPage, gva: int, fault: KvmPageFault, access: int
) -> tuple[KvmMmuPage, int]:
    """`FNAME(fetch)` from the page of the guest leaf's level (`sp`) down to
    `fault.goal_level`; returns the page and index of the leaf."""
    pages = mmu.pages
    while True:
        level = sp.role.level
        index = pt_index(gva, level)
        if mmu.nx:
            mmu.levels.disallowed_hugepage_adjust(fault, sp.spt[index], level, mmu._nx_disallowed)
        if level == fault.goal_level:
            break
        base_gfn = fault.gfn & ~(kvm_pages_per_hpage(level) - 1)
        role = sp.role.child(access, direct=True)
        child = pages.child_at(sp, index)
        if child is not None and (child.role.word != role.word or child.gfn != base_gfn):
            child.parent_ptes.discard(sp.sptep(index))  # validate_direct_spte()
            sp.spt[index] = pages.nonpresent
            child = None
        if child is None:
            if sp.spt[index] != pages.nonpresent:
                mmu._zap_leaf(sp, index)  # drop_large_spte()
            child, _ = pages.get_page(base_gfn, role)
            pages.link(sp, index, child)
            if fault.huge_page_disallowed:
                possible = fault.req_level >= level
                account_nx_huge_page(pages.possible_nx_huge_pages, pages.stat, child, possible)
        sp = child
    return sp, index


class ShadowHuge:
    """Mixed into `ShadowMmu`: the level of a fault and NX huge page recovery."""

    vm: Vm
    pages: MmuPages
    params: TdpMmuParams
    levels: ShadowLpageInfo
    huge_pages: bool
    nx: bool
    guest: GuestPageTables
    roots: dict[int, KvmMmuPage]

    def kvm_recover_nx_huge_pages(self) -> int:
        """One run of the NX recovery worker (nx_huge_pages.py)."""
        return kvm_recover_mmu_nx_huge_pages(self.vm, self.pages, self.params)

    def _nx_disallowed(self, spte: int) -> bool:
        sp = self.pages.page_by_pa(spte & SPTE_BASE_ADDR_MASK)
        return sp is not None and sp.nx_huge_page_disallowed

    def max_level(self, walk: GuestWalk) -> int:
        """`fault->max_level = walker.level` (4K when huge pages are off, a
        comparison the kernel has no switch for)."""
        return walk.level if self.huge_pages else PG_LEVEL_4K

    def why_level(self, vcpu: int, cr3: int, gva: int, fetch: bool = False) -> str:
        """The level a fault on `gva` maps at and why, for the screens: the guest leaf's
        level first (`walker.level`), then the slot, the host and the NX mitigation."""
        walk = self.guest.translate(cr3, gva)
        if walk.gfn is None:
            return "—: the guest maps nothing there (#PF injected)"
        if not self.huge_pages:
            return "4K: huge pages off (the model's switch; the kernel has none)"
        if walk.level == PG_LEVEL_4K:
            return "4K: guest leaf is 4K"
        as_id = self.vm.vcpu(vcpu).as_id  # the tree itself: no lookup counted
        slot = self.vm.memslot_set(as_id).gfn_tree.search(walk.gfn)
        level = self.levels.why(slot, walk.gfn, fetch, walk.level)[0]
        nx_split = False
        sp = self.roots.get(vcpu)
        while sp is not None and sp.role.level > level:
            sp = self.pages.child_at(sp, pt_index(gva, sp.role.level))
        if sp is not None and sp.role.level == level > PG_LEVEL_4K:
            child = self.pages.child_at(sp, pt_index(gva, level))
            nx_split = child is not None and child.nx_huge_page_disallowed
        return self.levels.why(slot, walk.gfn, fetch, walk.level, nx_split)[1]
