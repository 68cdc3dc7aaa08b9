"""The CPU's side of a guest run on the TDP MMU: the walk the hardware makes of the vCPU's
root on each access (the EPT/NPT walk), and whether the leaf it ends at lets the access
through.  One it lets through costs no kernel code; any other is a VM exit (an EPT
violation, or an EPT misconfiguration on an MMIO spte: SDM 29.3.3) into the TDP MMU's
fault path, `TdpMmu.page_fault` (`kvm_mmu_page_fault()`).

The walks are remembered (`CpuWalks`, model-only): per root and 2M region, the page table
the walk read last and the index in it.  Page tables never move and a table is only ever
linked or taken out whole, so while none was (`TdpMmuPages.paging_changes`), the walk of
the same root and region ends in the same table again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import MutableSequence, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ..guest.ept import Access
from ..spte import PT_PRESENT_MASK, PT_WRITABLE_MASK, SPTE_MMU_PRESENT_MASK

if TYPE_CHECKING:
    from .mmu import TdpMmu
    from .pages import TdpMmuPage

PAGE_SHIFT = 12
#: where a walk ends: a page table's entries and the index read there (-1 in a 4K table,
#: where each gfn of the 2M region has its own entry: gfn & 511)
Table = tuple[MutableSequence[int], int]


class Needs(NamedTuple):
    """What an access needs of the leaf it reaches, for each kind of access: (mask,
    value), let through when `spte & mask == value`.  A fetch is never a write."""

    read: tuple[int, int]
    write: tuple[int, int]
    fetch: tuple[int, int]

    def of(self, write: bool, fetch: bool) -> tuple[int, int]:
        return self.fetch if fetch else self.write if write else self.read


class CpuWalks:
    """The CPU's walks of the TDP MMU's roots."""

    def __init__(self, mmu: TdpMmu) -> None:
        self.mmu = mmu
        #: root seq -> 2M region -> Table (a root's dict made at its first walk)
        self._tables: defaultdict[int, dict[int, Table]] = defaultdict(dict)
        self._changes = mmu.pages.paging_changes  # when the memo was last known right
        #: the leaf the access `first_exit` stopped at ended its walk at (the spte its
        #: VM exit reports: `EptSession.ept_exit`)
        self.exit_spte = 0
        cfg = mmu.cfg
        #: what an access needs of the leaf: `spte & mask == value`.  MMU-present (not
        #: an MMIO spte) and R for a read (access tracking clears RWX), W for a write,
        #: executable for a fetch (X set, NX clear: `is_executable_pte`)
        self.needs = Needs(
            read=(SPTE_MMU_PRESENT_MASK | PT_PRESENT_MASK,) * 2,
            write=(SPTE_MMU_PRESENT_MASK | PT_WRITABLE_MASK,) * 2,
            fetch=(
                SPTE_MMU_PRESENT_MASK | cfg.shadow_x_mask | cfg.shadow_nx_mask,
                SPTE_MMU_PRESENT_MASK | cfg.shadow_x_mask,
            ),
        )
        #: where `first_exit` stops: where the access exits, and with PML a write that
        #: sets a D bit (the CPU logs its gpa: `sets_dirty`, dirty_log.py)
        self.stops = self.needs
        if mmu.pml_logs_dirty_pages:
            dirty = SPTE_MMU_PRESENT_MASK | PT_WRITABLE_MASK | cfg.shadow_dirty_mask
            self.stops = self.needs._replace(write=(dirty, dirty))

    def leaf_spte(self, root: TdpMmuPage, gfn: int) -> int:
        """The spte the walk of `root` for `gfn` ends at: a leaf, a spte that is not
        present (or an MMIO spte), or level 1's entry."""
        self._check()
        spt, index = self._tables[root.seq].get(gfn >> 9) or self._walk(root, gfn)
        return spt[gfn & 511 if index < 0 else index]

    def allows(self, spte: int, write: bool, fetch: bool) -> bool:
        """Whether the leaf lets the access through (`needs`)."""
        mask, value = self.needs.of(write, fetch)
        return spte & mask == value

    def first_exit(self, accesses: Sequence[Access], start: int, stop: int) -> int:
        """Runs `accesses[start:stop]` as the CPU runs them, up to the first one it does
        not let through: whose vCPU has no valid root (its VM entry loads one) or whose
        walk ends at a leaf that does not allow it (`exit_spte`, the exit's).  That one's
        index, or `stop`."""
        self._check()
        # each vCPU's valid root's walks: while only the CPU runs, no root is loaded or
        # invalidated and no table is linked or taken out
        roots, tables = self.mmu.roots, self._tables
        read, write_, fetch_ = self.stops  # chosen as `Needs.of` does, with no call
        walks = {v: tables[root.seq] for v, root in roots.items() if not root.role.invalid}
        for index in range(start, stop):
            vcpu, gpa, write, fetch = accesses[index]
            regions = walks.get(vcpu)
            if regions is None:
                return index
            gfn = gpa >> PAGE_SHIFT
            spt, i = regions.get(gfn >> 9) or self._walk(roots[vcpu], gfn)
            mask, value = fetch_ if fetch else write_ if write else read
            spte = spt[gfn & 511 if i < 0 else i]
            if spte & mask != value:
                self.exit_spte = spte
                return index
        return stop

    def sets_dirty(self, root: TdpMmuPage, gfn: int) -> bool:
        """A write the leaf allows, to a leaf with D clear: the CPU sets D (EPT A/D bits)
        and, with PML on, logs the gpa.  False when the write exits instead."""
        spt, index = self._tables[root.seq].get(gfn >> 9) or self._walk(root, gfn)
        index = gfn & 511 if index < 0 else index
        dirty = self.mmu.cfg.shadow_dirty_mask
        if not self.allows(spt[index], True, False) or spt[index] & dirty:
            return False
        spt[index] |= dirty
        return True

    def _check(self) -> None:
        """Forget the walks when a page table was linked or taken out since."""
        if self.mmu.pages.paging_changes != self._changes:
            self._changes = self.mmu.pages.paging_changes
            self._tables.clear()

    def _walk(self, root: TdpMmuPage, gfn: int) -> Table:
        """The walk from the top (`TdpMmu.last_spte`), remembered."""
        sp, index = self.mmu.last_spte(root, gfn)
        table = self._tables[root.seq][gfn >> 9] = (sp.spt, index if sp.role.level > 1 else -1)
        return table
