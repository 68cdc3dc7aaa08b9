"""Huge pages in the direct MMU (EPT/NPT with tdp_mmu=N), mmu.c 6.18: the level a
fault maps at (`kvm_mmu_hugepage_adjust()` and its reason, from `mapping_level.py`,
shared with the TDP MMU) and NX huge page recovery (`kvm_recover_nx_huge_pages()`, from
`nx_huge_pages.py`: the oldest tables made for a disallowed NX huge page are zapped, so
the next fault maps the huge page again).
"""

from __future__ import annotations

from ...memslots.memslot import MemorySlot
from ...memslots.vm import Vm
from ..mapping_level import KvmPageFault, MappingLevels
from ..mmu_pages import KvmMmuPage, MmuPages, kvm_recover_mmu_nx_huge_pages
from ..params import TdpMmuParams
from ..role import PG_LEVEL_4K
from ..spte import KVM_MAX_HUGEPAGE_LEVEL, SPTE_BASE_ADDR_MASK


def spte_index(gfn: int, level: int) -> int:
    return (gfn >> (9 * (level - 1))) & 511


class DirectHuge:
    vm: Vm
    pages: MmuPages
    params: TdpMmuParams
    levels: MappingLevels
    huge_pages: bool
    roots: dict[int, KvmMmuPage]

    def kvm_recover_nx_huge_pages(self) -> int:
        """One run of the NX recovery worker (nx_huge_pages.py): the oldest tables made
        for a disallowed NX huge page are zapped (`kvm_mmu_prepare_zap_page()`)."""
        return kvm_recover_mmu_nx_huge_pages(self.vm, self.pages, self.params)

    # -- the fault --------------------------------------------------------------------

    def max_level(self, slot: MemorySlot | None, gfn: int, exec_: bool = False) -> int:
        """The level `kvm_mmu_hugepage_adjust()` picks for a fault on `gfn` (before
        `disallowed_hugepage_adjust()`): 4K without huge pages, a slot or for a fetch
        under the NX mitigation, else `kvm_mmu_max_mapping_level()` (mapping_level.py:
        the slot's `disallow_lpage` and the host's backing)."""
        fault = KvmPageFault(gfn, False, exec_, slot, self._max_level())
        self.levels.kvm_mmu_hugepage_adjust(self.levels.kvm_faultin_pfn(fault))
        return fault.goal_level

    def _max_level(self) -> int:
        return KVM_MAX_HUGEPAGE_LEVEL if self.huge_pages else PG_LEVEL_4K

    def why_level(self, slot: MemorySlot | None, gfn: int, exec_: bool = False) -> str:
        """The level a fault on `gfn` maps at, and why (for the screens)."""
        nx_split = False
        root = next(iter(self.roots.values()), None)
        if root is not None and slot is not None:
            level = self.max_level(slot, gfn, exec_)
            sp = root
            while sp.role.level > level and (child := self._child_of(sp, gfn)) is not None:
                sp = child
            if sp.role.level == level > PG_LEVEL_4K:
                child = self.pages.child_at(sp, spte_index(gfn, level))
                nx_split = child is not None and child.nx_huge_page_disallowed
        return self.levels.why(slot, gfn, exec_, self._max_level(), nx_split)[1]

    def _child_of(self, sp: KvmMmuPage, gfn: int) -> KvmMmuPage | None:
        return self.pages.child_at(sp, spte_index(gfn, sp.role.level))

    def _nx_disallowed(self, spte: int) -> bool:
        sp = self.pages.page_by_pa(spte & SPTE_BASE_ADDR_MASK)
        return sp is not None and sp.nx_huge_page_disallowed
