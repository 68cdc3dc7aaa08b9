"""The guest kernel's own 2M mappings under shadow paging (EPT off): its text and its
direct map, mapped with PS set in the PDE as a Linux guest maps them, so that the
shadow MMU sees guest 2M leaves (`walker.level` = 2M) and instruction fetches.

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
- the direct map: the 2M of RAM holding the guest's page tables (the first frame of
  their pool), writable and NX; the kernel only reads it here (a store there would be a
  page-table write).  A read maps 4K: `account_shadowed()` raised `disallow_lpage` for
  the shadowed tables in that 2M ("guest page table in the 2M").

Each `KERNEL_EVERY`-th access of a session is the running process's kernel work (a
system call): a fetch from the text, or, one time in `DIRECT_MAP_SHARE`, a read of the
direct map, on a random page, from the session's own `random.Random` so the user
workload is the same with and without it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ...memslots.vm import Vm
from ..guest.page_tables import GuestPageTables

KERNEL_TEXT_GVA = 0x8000_0000  # 2 GiB: PDE 0 of the third PDPT entry
DIRECT_MAP_GVA = 0x8020_0000  # the next 2M
HPAGE_PAGES = 512
KERNEL_EVERY = 4
DIRECT_MAP_SHARE = 4


@dataclass(frozen=True, slots=True)
class KernelMaps:
    """The gfns of the guest kernel's two 2M pages (each 2M-aligned)."""

    text_gfn: int
    direct_gfn: int

    @classmethod
    def for_guest(cls, vm: Vm, tables: GuestPageTables) -> KernelMaps:
        """The text at the first 2M-aligned frame of the slot holding the page-table pool
        (RAM no table uses), the direct map over the pool's first frame."""
        start = tables.pool.start
        slot = next(s for s in vm.memslots(0) if s.base_gfn <= start < s.end_gfn)
        text = -(-slot.base_gfn // HPAGE_PAGES) * HPAGE_PAGES
        direct = start - start % HPAGE_PAGES
        if text + HPAGE_PAGES > min(direct, slot.end_gfn):
            raise ValueError("no 2M of RAM below the page tables for the kernel text")
        return cls(text, direct)

    def map_into(self, tables: GuestPageTables, cr3: int) -> None:
        """The kernel's PDEs in a new process (PS set: 2M leaves, supervisor only)."""
        tables.map(cr3, KERNEL_TEXT_GVA, self.text_gfn, writable=False, user=False, level=2)
        tables.map(
            cr3, DIRECT_MAP_GVA, self.direct_gfn, writable=True, user=False, level=2, nx=True
        )


def kernel_access(rng: random.Random) -> tuple[int, bool]:
    """(gva, fetch) of one kernel access: a fetch in the text or a direct-map read."""
    page = rng.randrange(HPAGE_PAGES) << 12
    if rng.randrange(DIRECT_MAP_SHARE) == 0:
        return DIRECT_MAP_GVA + page, False
    return KERNEL_TEXT_GVA + page, True
