"""`struct tdp_iter`: the TDP MMU's pre-order walk over one root's paging structure.

torvalds/linux 6.18 `arch/x86/kvm/mmu/tdp_iter.c` / `tdp_iter.h`.  The iterator keeps
the page table of every level on its path (`pt_path`), the spte it is on (`sptep`, here
the page `pt` and the `index` in it), the first gfn that spte maps (`gfn`, rounded to the
level) and its value when last read (`old_spte`).  `tdp_iter_next()` steps down into a
child table unless at `min_level` (`try_step_down`, which re-reads the spte), else to the
next spte of the same table (`try_step_side`), climbing while at a table's last entry
(`try_step_up`).  After a yield (`yielded`, set when the walker dropped mmu_lock) the
walk restarts from the root at `next_last_level_gfn` (`tdp_iter_restart`).

`for_each_tdp_pte_min_level(by_pa, root, min_level, start, end)` is the kernel's macro:
every spte at or above `min_level` mapping gfns in [start, end), in pre-order; the same
iterator object is yielded each time, so a caller can retry on it (`goto retry`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..mmu_pages import KvmMmuPage
from ..role import PG_LEVEL_4K
from ..spte import PT_PAGE_SIZE_MASK, SPTE_BASE_ADDR_MASK, SPTE_MMU_PRESENT_MASK
from .pages import SPTE_ENT_PER_PAGE

PT64_ROOT_MAX_LEVEL = 5
SPTE_LEVEL_BITS = 9


def kvm_pages_per_hpage(level: int) -> int:
    """`KVM_PAGES_PER_HPAGE(level)`: gfns one spte at `level` maps."""
    return 1 << (SPTE_LEVEL_BITS * (level - 1))


def gfn_round_for_level(gfn: int, level: int) -> int:
    return gfn & -kvm_pages_per_hpage(level)


def spte_index(gfn: int, level: int) -> int:
    """`SPTE_INDEX(gfn << PAGE_SHIFT, level)`."""
    return (gfn >> (SPTE_LEVEL_BITS * (level - 1))) & (SPTE_ENT_PER_PAGE - 1)


class TdpIter:
    __slots__ = (
        "_by_pa",
        "as_id",
        "gfn",
        "index",
        "level",
        "min_level",
        "next_last_level_gfn",
        "old_spte",
        "pt",
        "pt_path",
        "root_level",
        "valid",
        "yielded",
        "yielded_gfn",
    )

    def __init__(
        self,
        by_pa: Mapping[int, KvmMmuPage],
        root: KvmMmuPage,
        min_level: int,
        next_last_level_gfn: int,
    ) -> None:
        """`tdp_iter_start()`."""
        self._by_pa = by_pa
        self.root_level = root.role.level
        if not PG_LEVEL_4K <= self.root_level <= PT64_ROOT_MAX_LEVEL:
            raise ValueError(f"root level {self.root_level} outside 1..{PT64_ROOT_MAX_LEVEL}")
        self.min_level = min_level
        self.next_last_level_gfn = next_last_level_gfn
        self.pt_path: list[KvmMmuPage | None] = [None] * PT64_ROOT_MAX_LEVEL
        self.pt_path[self.root_level - 1] = root
        self.as_id = root.role.smm
        self.restart()

    @property
    def sptep(self) -> int:
        """The host-physical address of the spte the iterator is on."""
        return self.pt.spt_pa + 8 * self.index

    def restart(self) -> None:
        """`tdp_iter_restart()`: from the root again, at next_last_level_gfn."""
        self.yielded = False
        self.yielded_gfn = self.next_last_level_gfn
        self.level = self.root_level
        self.gfn = gfn_round_for_level(self.next_last_level_gfn, self.level)
        self._refresh_sptep()
        self.valid = True

    def _refresh_sptep(self) -> None:
        pt = self.pt_path[self.level - 1]
        assert pt is not None
        self.pt = pt
        self.index = spte_index(self.gfn, self.level)
        self.old_spte = pt.spt[self.index]

    def try_step_down(self) -> bool:
        level = self.level
        if level == self.min_level:
            return False
        spte = self.pt.spt[self.index]  # re-read: it may have changed
        self.old_spte = spte
        if level == PG_LEVEL_4K or not spte & SPTE_MMU_PRESENT_MASK or spte & PT_PAGE_SIZE_MASK:
            return False  # spte_to_child_pt() is NULL
        child = self._by_pa.get(spte & SPTE_BASE_ADDR_MASK)
        if child is None:
            return False
        level -= 1
        self.level = level
        self.pt_path[level - 1] = child
        shift = SPTE_LEVEL_BITS * (level - 1)
        gfn = self.next_last_level_gfn >> shift << shift
        self.gfn = gfn
        self.pt = child
        self.index = index = (gfn >> shift) & (SPTE_ENT_PER_PAGE - 1)
        self.old_spte = child.spt[index]
        return True

    def try_step_side(self) -> bool:
        if self.index == SPTE_ENT_PER_PAGE - 1:
            return False
        self.gfn += kvm_pages_per_hpage(self.level)
        self.next_last_level_gfn = self.gfn
        self.index += 1
        self.old_spte = self.pt.spt[self.index]
        return True

    def try_step_up(self) -> bool:
        if self.level == self.root_level:
            return False
        self.level += 1
        self.gfn = gfn_round_for_level(self.gfn, self.level)
        self._refresh_sptep()
        return True

    def next(self) -> None:
        """`tdp_iter_next()`: pre-order, children before the next sibling."""
        if self.yielded:
            self.restart()
            return
        if self.try_step_down():
            return
        while True:
            if self.try_step_side():
                return
            if not self.try_step_up():
                break
        self.valid = False


def for_each_tdp_pte_min_level(
    by_pa: Mapping[int, KvmMmuPage], root: KvmMmuPage, min_level: int, start: int, end: int
) -> Iterator[TdpIter]:
    it = TdpIter(by_pa, root, min_level, start)
    while it.valid and it.gfn < end:
        yield it
        it.next()


def for_each_tdp_pte(
    by_pa: Mapping[int, KvmMmuPage], root: KvmMmuPage, start: int, end: int
) -> Iterator[TdpIter]:
    return for_each_tdp_pte_min_level(by_pa, root, PG_LEVEL_4K, start, end)
