"""The `disallow_lpage` a shadowed table raises under shadow paging (EPT off): no huge
spte maps a range that holds a guest page table KVM shadows.

torvalds/linux 6.18 `arch/x86/kvm/mmu/mmu.c`, `page_track.c`:
- `account_shadowed()`: a level-1 page `kvm_mmu_gfn_disallow_lpage()`s its gfn, an
  upper-level page `__kvm_write_track_add_gfn()`s it, which does too: the table's
  `lpage_info_slot(gfn, slot, level)->disallow_lpage` goes up at 2M and 1G
  (`update_gfn_disallow_lpage_count`), so no huge spte maps a range holding a shadowed
  table; `kvm_mmu_slot_gfn_write_protect(.., PG_LEVEL_4K)` clears W at every level, so a
  huge spte made before the table was shadowed loses W, and its next write fault maps
  4K below a direct page.  `unaccount_shadowed()` (`__kvm_mmu_prepare_zap_page()`)
  lowers the count: `kvm_mmu_gfn_allow_lpage()`.
`ShadowLpageInfo` is `MappingLevels` (mapping_level.py) with those counts; `ShadowMmu`
(mmu.py) asks it the level of each fault in `FNAME(fetch)`.
"""

from __future__ import annotations

from ...memslots.memslot import MemorySlot
from ..mapping_level import LEVEL_NAMES, MappingLevels
from ..mmu_pages import KvmMmuPage
from ..role import PG_LEVEL_2M
from ..spte import KVM_MAX_HUGEPAGE_LEVEL

LpageKey = tuple[int, int, int]  # (as_id, level, gfn >> level shift)


class ShadowLpageInfo(MappingLevels):
    """`MappingLevels` plus the `disallow_lpage` counts shadowed tables raise."""

    def __init__(self, host_level: int, nx_huge_pages: bool, host_seed: int = 1) -> None:
        super().__init__(host_level, nx_huge_pages, host_seed)
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
