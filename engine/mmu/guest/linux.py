"""The guest kernel's side of shadow paging: processes, their mappings, demand paging.

KVM with EPT off sees a guest only through its page tables; this is just enough of a
guest Linux to produce the table edits and faults that matter (the memslot-search,
PTE_LIST_EXT and POWER-keys threads):
- `mmap` records a VMA and maps nothing (anonymous memory is populated on first touch);
- `handle_fault` is the guest's #PF handler for a fault KVM injected: a first touch
  allocates a page and maps it (`do_anonymous_page`), a write to a shared read-only page
  of a writable VMA copies it (`do_wp_page`, copy-on-write after `fork`);
- `mprotect`, `munmap`, `fork` and `exit` edit the tables through `GuestPageTables`, whose
  stores KVM traps where it shadows the table.
Data pages come from the same guest-physical pool as the tables (`alloc_page`) and are
reference-counted across forks, so an exit frees only what no process maps any more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import AuditError
from .page_tables import PT_PRESENT, PT_WRITABLE, GuestPageTables, pte_gfn

PAGE_SIZE = 4096


@dataclass(slots=True)
class Vma:
    start: int
    npages: int
    writable: bool

    def covers(self, gva: int) -> bool:
        return self.start <= gva < self.start + self.npages * PAGE_SIZE


@dataclass(slots=True)
class GuestProcess:
    cr3: int
    pid: int
    comm: str
    vmas: list[Vma] = field(default_factory=list)
    pages: dict[int, int] = field(default_factory=dict)  # gva -> data gfn it maps

    def vma_of(self, gva: int) -> Vma | None:
        return next((vma for vma in self.vmas if vma.covers(gva)), None)


class GuestOs:
    """Processes of one guest and their anonymous memory, on `GuestPageTables`."""

    def __init__(self, tables: GuestPageTables, first_pid: int = 1000) -> None:
        self.tables = tables
        self.processes: dict[int, GuestProcess] = {}  # by cr3
        self.page_refs: dict[int, int] = {}  # data gfn -> how many processes map it
        self._next_pid = first_pid
        self.stat = {"minor_faults": 0, "cow_copies": 0, "segv": 0}
        self.on_spawn: Callable[[int], None] | None = None  # the kernel's mappings (cr3)

    def spawn(self, comm: str) -> GuestProcess:
        proc = GuestProcess(self.tables.spawn(), self._next_pid, comm)
        self._next_pid += 1
        if self.on_spawn is not None:
            self.on_spawn(proc.cr3)  # pgd_alloc(): the kernel half (shadow/kernel.py)
        self.processes[proc.cr3] = proc
        return proc

    def mmap(self, proc: GuestProcess, start: int, npages: int, writable: bool = True) -> Vma:
        vma = Vma(start, npages, writable)
        proc.vmas.append(vma)
        return vma

    def map_now(self, proc: GuestProcess, gva: int, gfn: int, writable: bool = True) -> None:
        """Map a page that is not the process's to free (a device BAR, say)."""
        self.tables.map(proc.cr3, gva, gfn, writable)

    # -- the #PF handler ---------------------------------------------------------------

    def handle_fault(self, cr3: int, gva: int, write: bool) -> str:
        """The guest's do_page_fault for an injected #PF; returns what it did."""
        proc = self.processes.get(cr3)
        vma = proc.vma_of(gva) if proc is not None else None
        if proc is None or vma is None or (write and not vma.writable):
            self.stat["segv"] += 1
            return "SIGSEGV"
        page = gva & ~(PAGE_SIZE - 1)
        old = proc.pages.get(page)
        if old is None:
            self._install(proc, page, self.tables.alloc_page(), vma.writable)
            self.stat["minor_faults"] += 1
            return "do_anonymous_page"
        if write and self.page_refs[old] > 1:
            self._release(old)
            self._install(proc, page, self.tables.alloc_page(), True)
            self.stat["cow_copies"] += 1
            return "do_wp_page (copy)"
        self.tables.protect(proc.cr3, page, vma.writable)  # last user: reuse the page
        return "do_wp_page (reuse)"

    def _install(self, proc: GuestProcess, page: int, gfn: int, writable: bool) -> None:
        proc.pages[page] = gfn
        self.page_refs[gfn] = self.page_refs.get(gfn, 0) + 1
        self.tables.map(proc.cr3, page, gfn, writable)

    def _release(self, gfn: int) -> None:
        self.page_refs[gfn] -= 1
        if not self.page_refs[gfn]:
            del self.page_refs[gfn]
            self.tables.free_page(gfn)

    # -- system calls ------------------------------------------------------------------

    def mprotect(self, proc: GuestProcess, vma: Vma, writable: bool) -> int:
        """Change a VMA's protection and rewrite its present ptes; returns ptes changed
        (on x86 PROT_WRITE implies read, so only the W bit can change)."""
        vma.writable = writable
        changed = 0
        for page in self._pages_in(proc, vma):
            shared = self.page_refs[proc.pages[page]] > 1
            changed += self.tables.protect(proc.cr3, page, writable and not shared)
        return changed

    def munmap(self, proc: GuestProcess, vma: Vma) -> int:
        pages = self._pages_in(proc, vma)
        for page in pages:
            self.tables.unmap(proc.cr3, page)
            self._release(proc.pages.pop(page))
        proc.vmas.remove(vma)
        return len(pages)

    def _pages_in(self, proc: GuestProcess, vma: Vma) -> list[int]:
        return sorted(page for page in proc.pages if vma.covers(page))

    def fork(self, parent: GuestProcess, comm: str | None = None) -> GuestProcess:
        """A child sharing every page read-only until a write copies it (fork + COW)."""
        child = GuestProcess(
            self.tables.fork(parent.cr3, cow=True), self._next_pid, comm or parent.comm
        )
        self._next_pid += 1
        child.vmas = [Vma(v.start, v.npages, v.writable) for v in parent.vmas]
        child.pages = dict(parent.pages)
        for gfn in child.pages.values():
            self.page_refs[gfn] += 1
        self.processes[child.cr3] = child
        return child

    def exit(self, proc: GuestProcess) -> None:
        """Free the process's own pages (the tables go with `GuestPageTables.exit`, which
        the caller runs through KVM: `ShadowMmu.drop_process`)."""
        del self.processes[proc.cr3]
        for gfn in proc.pages.values():
            self._release(gfn)
        proc.pages.clear()

    def audit(self) -> None:
        """Every process page is mapped by a present pte to its gfn, a page mapped by
        more than one process is mapped read-only, and the refcounts add up."""
        refs: dict[int, int] = {}
        for proc in self.processes.values():
            for gfn in proc.pages.values():
                refs[gfn] = refs.get(gfn, 0) + 1
        if refs != self.page_refs:
            raise AuditError("guest page reference counts disagree with the processes")
        for proc in self.processes.values():
            for page, gfn in proc.pages.items():
                pte = self._pte(proc.cr3, page)
                if not pte & PT_PRESENT or pte_gfn(pte) != gfn:
                    raise AuditError(f"pid {proc.pid}: gva {page:#x} not mapped to {gfn:#x}")
                if pte & PT_WRITABLE and refs[gfn] > 1:
                    raise AuditError(f"pid {proc.pid}: shared gfn {gfn:#x} mapped writable")

    def _pte(self, cr3: int, gva: int) -> int:
        walk = self.tables.translate(cr3, gva)
        return walk.leaf_pte if walk.gfn is not None else 0
