"""The guest kernel's own 2M mappings under shadow paging (EPT off): its direct map, in
every process, and (`kernel_2m`) its text, mapped with PS set in the PDE as a Linux guest
maps them, so that the shadow MMU sees guest 2M leaves (`walker.level` = 2M) and
instruction fetches.

Linux maps the kernel image (`_text`) with 2M pages and the direct map
(`phys_base`/`PAGE_OFFSET`, `kernel_physical_mapping_init()`) with 2M or 1G pages, and
every process shares them: the kernel half of each PGD is copied from `init_mm` at
`pgd_alloc()` (`clone_pgd_range`), never copy-on-write.  This model's guest has only the
lower half of the address space (guest/page_tables.py), so the kernel lives at `KERNEL_TEXT_GVA`
and `DIRECT_MAP_GVA` there; every process maps both when it is spawned.

- the text: a 2M page of RAM away from the page tables, read-only and executable: a
  fetch there maps a 2M spte where the host's backing (`host_pfn_mapping_level`) and the
  slot allow, or splits under `nx_huge_pages` (`disallowed_hugepage_adjust`, an
  `nx_lpage_splits` count);
- the direct map (`DirectMap`, always): the RAM holding the guest's page tables (their
  pool, in 2M pages), writable and NX.  The guest kernel writes its ptes through it
  (`pte_gva`): a store into a table KVM shadows hits a write-protected spte and faults,
  and that fault unsyncs the table (`mmu_try_to_unsync_pages()` from `make_spte()`,
  6.18) or, for an upper-level table, is emulated (RET_PF_WRITE_PROTECTED).  A 4K spte
  maps it: `account_shadowed()` raised `disallow_lpage` for the shadowed tables in each
  2M ("guest page table in the 2M").

With `kernel_2m`, each `KERNEL_EVERY`-th access of a session is the running process's
kernel work (a system call): a fetch from the text, or, one time in `DIRECT_MAP_SHARE`, a
read of the direct map's first 2M, on a random page, from the session's own
`random.Random` so the user workload is the same with and without it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ...memslots.vm import Vm
from ..guest.page_tables import GuestPageTables
from ..spte import RET_PF_EMULATE, RetPf
from .cpu import ShadowMmuView, exit_error_code, leaf_allows

KERNEL_TEXT_GVA = 0x8000_0000  # 2 GiB: PDE 0 of the third PDPT entry
DIRECT_MAP_GVA = 0x8020_0000  # the next 2M
HPAGE_PAGES = 512
KERNEL_EVERY = 4
DIRECT_MAP_SHARE = 4
MAX_FAULTS = 3  # one store faulting more often than this is a model bug


@dataclass(frozen=True, slots=True)
class DirectMap:
    """The guest kernel's direct map of its page-table pool: `npages` gfns from
    `first_gfn` (both 2M-aligned) at `DIRECT_MAP_GVA`, in 2M pages."""

    first_gfn: int
    npages: int

    @classmethod
    def for_guest(cls, tables: GuestPageTables) -> DirectMap:
        first = tables.pool.start - tables.pool.start % HPAGE_PAGES
        return cls(first, -(-(tables.pool.stop - first) // HPAGE_PAGES) * HPAGE_PAGES)

    def pte_gva(self, table_gfn: int, index: int) -> int:
        """`__va()` of a pte: where the guest kernel stores it."""
        return DIRECT_MAP_GVA + ((table_gfn - self.first_gfn) << 12) + 8 * index

    def map_into(self, tables: GuestPageTables, cr3: int) -> None:
        """The direct map's PDEs in a new process (`pgd_alloc()`: the kernel half;
        PS set, supervisor only, NX)."""
        for offset in range(0, self.npages, HPAGE_PAGES):
            gva = DIRECT_MAP_GVA + (offset << 12)
            gfn = self.first_gfn + offset
            tables.map(cr3, gva, gfn, writable=True, user=False, level=2, nx=True)


class GuestKernel:
    """The guest kernel of `ShadowMmu`'s own guest: every process maps the direct map
    (`kernel_half`), and each pte store is the kernel's store through it (`store_by`),
    made by a vCPU.

    `store`: a table KVM does not shadow is plain memory (simplified: the kernel's first
    touch of a page through the direct map takes no fault here); otherwise the CPU's
    walk of the shadow tables (cpu.py) decides: no exit while the spte is writable (an
    unsync table), else a write fault into `ShadowMmu.page_fault()`, which unsyncs the
    table in `mmu_set_spte()` (`mmu_try_to_unsync_pages()`, from `make_spte()`, 6.18) or
    returns RET_PF_WRITE_PROTECTED for a write-tracked one, and the store is emulated.
    It runs on `vcpu` (the session sets the vCPU that ran last) in the process loaded
    there, any process since all map the kernel half; with none loaded, in the table's
    own.  `on_exit(vcpu, address, error_code)` and `on_result(ret)` hear each exit;
    `storing` is True meanwhile."""

    def __init__(self, mmu: ShadowMmuView, direct_map: DirectMap) -> None:
        self.mmu = mmu
        self.direct_map = direct_map
        self.vcpu = 0
        self.exits = 0
        self.storing = False
        self.on_exit: Callable[[int, int, int], None] | None = None
        self.on_result: Callable[[RetPf], object] | None = None
        mmu.guest.kernel_half = lambda cr3: direct_map.map_into(mmu.guest, cr3)
        mmu.guest.store_by = self.store

    def _running(self, table_gfn: int) -> tuple[int, int]:
        cr3s = self.mmu.cr3s
        vcpu = self.vcpu if self.vcpu in cr3s else min(cr3s, default=self.vcpu)
        if vcpu in cr3s:
            return vcpu, cr3s[vcpu]
        owner = next(c for c, tables in self.mmu.guest.processes.items() if table_gfn in tables)
        return vcpu, owner

    def store(self, table_gfn: int, index: int) -> None:
        """The CPU's store of pte `index` of `table_gfn`, before it lands."""
        mmu = self.mmu
        if not mmu.shadow_pages_of(table_gfn):
            return
        vcpu, cr3 = self._running(table_gfn)
        gva = self.direct_map.pte_gva(table_gfn, index)
        self.storing = True
        try:
            for _ in range(MAX_FAULTS):
                if mmu.cr3s.get(vcpu) == cr3 and leaf_allows(mmu, vcpu, gva, True, False):
                    return
                self.exits += 1
                if self.on_exit is not None:
                    self.on_exit(vcpu, gva, exit_error_code(mmu, vcpu, gva, True, False))
                ret = mmu.page_fault(vcpu, cr3, gva, write=True, user=False)
                if self.on_result is not None:
                    self.on_result(ret)
                if ret is RET_PF_EMULATE:
                    mmu.emulate_instruction(vcpu, gva, True, False, size=8)  # a pte
                    return
        finally:
            self.storing = False
        raise RuntimeError(f"the guest kernel's store at {gva:#x} still faults")


@dataclass(frozen=True, slots=True)
class KernelMaps:
    """The gfn of the guest kernel's 2M text (2M-aligned) and its direct map."""

    text_gfn: int
    direct: DirectMap

    @classmethod
    def for_guest(cls, vm: Vm, tables: GuestPageTables) -> KernelMaps:
        """The text at the first 2M-aligned frame of the slot holding the page-table pool
        (RAM no table uses), below the direct map of the pool."""
        start = tables.pool.start
        slot = next(s for s in vm.memslots(0) if s.base_gfn <= start < s.end_gfn)
        text = -(-slot.base_gfn // HPAGE_PAGES) * HPAGE_PAGES
        direct = DirectMap.for_guest(tables)
        if text + HPAGE_PAGES > min(direct.first_gfn, slot.end_gfn):
            raise ValueError("no 2M of RAM below the page tables for the kernel text")
        return cls(text, direct)

    def map_into(self, tables: GuestPageTables, cr3: int) -> None:
        """The text's PDE in a new process (PS set: a 2M leaf, supervisor only)."""
        tables.map(cr3, KERNEL_TEXT_GVA, self.text_gfn, writable=False, user=False, level=2)


def kernel_access(rng: random.Random) -> tuple[int, bool]:
    """(gva, fetch) of one kernel access: a fetch in the text or a direct-map read."""
    page = rng.randrange(HPAGE_PAGES) << 12
    if rng.randrange(DIRECT_MAP_SHARE) == 0:
        return DIRECT_MAP_GVA + page, False
    return KERNEL_TEXT_GVA + page, True
