"""The guest's own page tables: what KVM shadows when EPT is off.

A guest *process* is a CR3: here the gfn of its 4-level x86-64 root table (the register
holds that gfn << 12 plus flags).  Guest tables are guest pages, taken from a bump
allocator over part of a RAM memslot (`alloc_page`, which callers may use for data
pages too), so KVM must read them through the memslots and write-protect them.  Guest
PTE bits: P 0, W 1, U 2, A 5, D 6, PS 7 (a 2M/1G leaf; reserved in a PML4E), NX 63,
the address in bits 12..51.

- `map`/`unmap`/`protect`/`fork`/`exit` are the guest kernel editing its tables, as
  Linux does (`fork(cow=True)` is `copy_present_pte`: W cleared on both sides, the
  child's copies old; `exit` clears every pte, leaves first, then frees the tables).
  Every pte store is first the CPU's (`store_by`: the guest kernel's store through its
  direct map, which faults where KVM write-protects the table), then goes to
  `subscribe(on_write=...)` listeners: KVM sees what the store did to a table it
  shadows (unsynced by that fault, or emulated: `kvm_mmu_track_write`).  Changing a
  present pte flushes the TLB (`flush_tlb_page`/`flush_tlb_mm` -> INVLPG or a CR3
  reload): `on_flush(cr3, gva|None)`.
- `walk()` is `FNAME(walk_addr_generic)` (arch/x86/kvm/mmu/paging_tmpl.h) for 64-bit
  paging with CR0.WP=1 (no SMEP/SMAP/PKU): `kvm_mmu_pagetable_walk` (addr, pferr),
  one `kvm_mmu_paging_element` (pte, level) per level read, then on success
  `FNAME(update_accessed_dirty_bits)` (`kvm_mmu_set_accessed_bit`/`_dirty_bit`, gpa of
  the pte; KVM writes these itself, so no write is trapped), or `kvm_mmu_walker_error`
  (pferr): P set for a protection or reserved-bit fault, not for a missing pte.  A table
  gfn outside every memslot ends the walk like a non-present pte
  (`kvm_vcpu_gfn_to_hva_prot` fails).  `translate()` is the same walk without effects.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import NamedTuple

from ...errors import AuditError
from ...events import Event, FieldValue
from ...memslots.vm import Vm
from ..role import ACC_ALL, ACC_EXEC_MASK, ACC_USER_MASK, ACC_WRITE_MASK

PT_PRESENT, PT_WRITABLE, PT_USER = 1 << 0, 1 << 1, 1 << 2
PT_ACCESSED, PT_DIRTY, PT_PAGE_SIZE = 1 << 5, 1 << 6, 1 << 7
PT64_NX = 1 << 63
PT_ADDR_MASK = ((1 << 52) - 1) & ~0xFFF
PT_TABLE_FLAGS = PT_PRESENT | PT_WRITABLE | PT_USER  # Linux's _PAGE_TABLE, less A/D
PFERR_PRESENT_MASK, PFERR_WRITE_MASK, PFERR_USER_MASK = 1 << 0, 1 << 1, 1 << 2
PFERR_RSVD_MASK, PFERR_FETCH_MASK = 1 << 3, 1 << 4
PT64_ROOT_LEVEL = 4
GVA_BITS = 48
GFN_LIMIT = 1 << 40  # pte bits 12..51
ENTRIES = 512
DEFAULT_POOL_PAGES = 1 << 14

Emit = Callable[[Event], None]
PteWritten = Callable[[int, int, int, int], None]  # table gfn, index, old pte, new pte
TlbFlushed = Callable[[int, "int | None"], None]  # cr3, gva (None: the whole TLB)
PteStore = Callable[[int, int], None]  # table gfn, index: the CPU's store, before it lands
Readable = Callable[[int], bool]


class GuestOutOfMemoryError(RuntimeError):
    """The guest-physical pool has no free page left."""


def pte_gfn(pte: int) -> int:
    return (pte & PT_ADDR_MASK) >> 12


def pt_index(gva: int, level: int) -> int:
    """The index of `gva` in a table of `level` (4 = PML4 ... 1 = PT)."""
    return (gva >> (12 + 9 * (level - 1))) & (ENTRIES - 1)


def gpte_access(pte: int) -> int:
    """`FNAME(gpte_access)`: ACC_* bits one guest pte grants."""
    access = ACC_EXEC_MASK if not pte & PT64_NX else 0
    access |= ACC_WRITE_MASK if pte & PT_WRITABLE else 0
    return access | (ACC_USER_MASK if pte & PT_USER else 0)


class WalkStep(NamedTuple):
    """One pte the walker read (`walker->table_gfn[]`, `walker->ptes[]`)."""

    table_gfn: int
    pte_index: int
    pte: int
    level: int


class GuestWalk(NamedTuple):
    """The result of a walk: gfn (None on a guest #PF), pferr, the ptes read."""

    gfn: int | None
    pferr: int
    steps: tuple[WalkStep, ...]

    @property
    def level(self) -> int:
        """The level of the leaf (1 for 4K, 2 for 2M, 3 for 1G)."""
        return self.steps[-1].level

    @property
    def leaf_pte(self) -> int:
        return self.steps[-1].pte

    @property
    def access(self) -> int:
        """`walker->pte_access`: what every pte on the way grants."""
        return self.access_above(0)

    def access_above(self, level: int) -> int:
        """`walker->pt_access[level - 1]`: what the ptes above `level` grant (the
        `role.access` of the shadow page for the table at `level`)."""
        access = ACC_ALL
        for step in self.steps:
            if step.level > level:
                access &= gpte_access(step.pte)
        return access

    def table_gfn(self, level: int) -> int:
        return self.steps[PT64_ROOT_LEVEL - level].table_gfn


def access_error_code(write: bool, user: bool, fetch: bool = False) -> int:
    """The W/U/F bits of a #PF error code for this access (F: an instruction fetch)."""
    code = (PFERR_WRITE_MASK if write else 0) | (PFERR_USER_MASK if user else 0)
    return code | (PFERR_FETCH_MASK if fetch else 0)


class GuestPageTables:
    """Every guest process's page tables, in guest pages from one gfn pool."""

    def __init__(self, pool: range, *, emit: Emit | None = None) -> None:
        if not pool or pool.step != 1:
            raise ValueError("the page pool must be a non-empty range of gfns")
        self.pool = pool
        self.tables: dict[int, array[int]] = {}  # table gfn -> 512 ptes (u64, in guest RAM)
        self.processes: dict[int, set[int]] = {}  # cr3 -> the gfns of its tables
        self.allocated: set[int] = set()
        self._free: list[int] = []
        self._next = pool.start
        self._emit = emit
        self._on_write: list[PteWritten] = []
        self._on_flush: list[TlbFlushed] = []
        self.store_by: PteStore | None = None  # the vCPU making the guest kernel's stores
        self.kernel_half: Callable[[int], None] | None = None  # pgd_alloc()'s, by cr3

    @classmethod
    def in_memslot(
        cls, vm: Vm, as_id: int = 0, pages: int = DEFAULT_POOL_PAGES, *, emit: Emit | None = None
    ) -> GuestPageTables:
        """A pool at the top of the largest writable slot of `as_id`."""
        slots = [s for s in vm.memslots(as_id) if not s.readonly]
        if not slots:
            raise ValueError(f"address space {as_id} has no RAM memslot for page tables")
        slot = max(slots, key=lambda s: (s.npages, -s.base_gfn))
        return cls(range(max(slot.base_gfn, slot.end_gfn - pages), slot.end_gfn), emit=emit)

    def subscribe(self, on_write: PteWritten, on_flush: TlbFlushed) -> None:
        self._on_write.append(on_write)
        self._on_flush.append(on_flush)

    # -- guest-physical pages ------------------------------------------------------

    def alloc_page(self) -> int:
        if self._free:
            gfn = self._free.pop()
        elif self._next < self.pool.stop:
            gfn, self._next = self._next, self._next + 1
        else:
            raise GuestOutOfMemoryError(f"no free page in gfns {self.pool}")
        self.allocated.add(gfn)
        return gfn

    def free_page(self, gfn: int) -> None:
        if gfn in self.tables or gfn not in self.allocated:
            raise ValueError(f"gfn {gfn:#x} is not a free-able page")
        self.allocated.remove(gfn)
        self._free.append(gfn)

    def _new_table(self, cr3: int) -> int:
        gfn = self.alloc_page()
        self.tables[gfn] = array("Q", bytes(8 * ENTRIES))
        self.processes[cr3].add(gfn)
        return gfn

    # -- the guest kernel's edits --------------------------------------------------

    def write_pte(self, table_gfn: int, index: int, pte: int) -> int:
        """A guest store of a whole pte: the CPU's access first (`store_by`, which takes
        the write fault or emulation KVM makes of it), then the store lands."""
        if self.store_by is not None:
            self.store_by(table_gfn, index)
        ptes = self.tables[table_gfn]
        old, ptes[index] = ptes[index], pte
        for listener in list(self._on_write):
            listener(table_gfn, index, old, pte)
        return old

    def _flush(self, cr3: int, gva: int | None) -> None:
        for listener in list(self._on_flush):
            listener(cr3, gva)

    def spawn(self) -> int:
        """A new process: a PML4 empty but for the kernel half (`kernel_half`, as
        `pgd_alloc()` copies it); returns its cr3 (the PML4's gfn)."""
        cr3 = self._spawn()
        if self.kernel_half is not None:
            self.kernel_half(cr3)
        return cr3

    def _spawn(self) -> int:
        cr3 = self.alloc_page()
        self.tables[cr3] = array("Q", bytes(8 * ENTRIES))
        self.processes[cr3] = {cr3}
        return cr3

    def _process(self, cr3: int) -> set[int]:
        if cr3 not in self.processes:
            raise ValueError(f"no process has cr3 {cr3:#x}")
        return self.processes[cr3]

    def map(
        self,
        cr3: int,
        gva: int,
        gfn: int,
        writable: bool = True,
        user: bool = True,
        *,
        level: int = 1,
        nx: bool = False,
    ) -> None:
        """Map `gva` to `gfn` with a leaf at `level` (2: 2M, 3: 1G, `gfn` aligned)."""
        self._process(cr3)
        _check_gva(gva)
        if not 1 <= level <= 3 or not 0 <= gfn < GFN_LIMIT or gfn % (1 << 9 * (level - 1)):
            raise ValueError(f"cannot map gfn {gfn:#x} at level {level}")
        table = cr3
        for lvl in range(PT64_ROOT_LEVEL, level, -1):
            index = pt_index(gva, lvl)
            pte = self.tables[table][index]
            if not pte & PT_PRESENT:
                child = self._new_table(cr3)
                self.write_pte(table, index, child << 12 | PT_TABLE_FLAGS)
                table = child
            elif pte & PT_PAGE_SIZE:
                raise ValueError(f"gva {gva:#x} lies in a huge page mapped at level {lvl}")
            else:
                table = pte_gfn(pte)
        index = pt_index(gva, level)
        old = self.tables[table][index]
        if old & PT_PRESENT and level > 1 and not old & PT_PAGE_SIZE:
            raise ValueError(f"gva {gva:#x}: a page table is mapped at level {level}")
        pte = gfn << 12 | PT_PRESENT | (PT_PAGE_SIZE if level > 1 else 0)
        pte |= (PT_WRITABLE if writable else 0) | (PT_USER if user else 0)
        self.write_pte(table, index, pte | (PT64_NX if nx else 0))
        if old & PT_PRESENT:
            self._flush(cr3, gva)

    def _leaf(self, cr3: int, gva: int) -> tuple[int, int] | None:
        """(table gfn, index) of the present leaf mapping `gva`, if any."""
        self._process(cr3)
        _check_gva(gva)
        table = cr3
        for level in range(PT64_ROOT_LEVEL, 0, -1):
            index = pt_index(gva, level)
            pte = self.tables[table][index]
            if not pte & PT_PRESENT:
                return None
            if level == 1 or pte & PT_PAGE_SIZE:
                return table, index
            table = pte_gfn(pte)
        return None  # pragma: no cover - level 1 always returns

    def unmap(self, cr3: int, gva: int) -> bool:
        """Clear the leaf mapping `gva` (munmap); False when nothing was mapped."""
        leaf = self._leaf(cr3, gva)
        if leaf is None:
            return False
        self.write_pte(*leaf, 0)
        self._flush(cr3, gva)
        return True

    def protect(self, cr3: int, gva: int, writable: bool) -> bool:
        """mprotect one page: set or clear W on its leaf; False when nothing changed."""
        leaf = self._leaf(cr3, gva)
        if leaf is None:
            return False
        old = self.tables[leaf[0]][leaf[1]]
        new = old | PT_WRITABLE if writable else old & ~PT_WRITABLE
        if new == old:
            return False
        self.write_pte(*leaf, new)
        self._flush(cr3, gva)
        return True

    def fork(self, cr3: int, *, cow: bool = False) -> int:
        """A child with copies of every table, mapping the same gfns; `cow` write-protects
        the writable leaves of both (Linux's private mappings)."""
        self._process(cr3)
        child = self._spawn()  # the kernel half comes with the copy
        if self._copy(cr3, child, PT64_ROOT_LEVEL, child, cow):
            self._flush(cr3, None)
        return child

    def _copy(self, src: int, dst: int, level: int, child_cr3: int, cow: bool) -> bool:
        changed = False
        for index, pte in enumerate(self.tables[src]):
            if not pte & PT_PRESENT:
                continue
            if level > 1 and not pte & PT_PAGE_SIZE:
                table = self._new_table(child_cr3)
                self.write_pte(dst, index, table << 12 | (pte & ~PT_ADDR_MASK & ~PT_ACCESSED))
                changed |= self._copy(pte_gfn(pte), table, level - 1, child_cr3, cow)
                continue
            if cow and pte & PT_WRITABLE and pte & PT_USER:  # kernel pages: never COW
                pte &= ~PT_WRITABLE
                self.write_pte(src, index, pte)
                changed = True
            self.write_pte(dst, index, pte & ~PT_ACCESSED)  # pte_mkold()
        return changed

    def exit(self, cr3: int) -> list[int]:
        """Tear the process down: clear every pte, free its tables; returns their gfns."""
        tables = self._process(cr3)
        self._teardown(cr3, PT64_ROOT_LEVEL)
        del self.processes[cr3]
        for gfn in tables:
            del self.tables[gfn]
            self.free_page(gfn)
        self._flush(cr3, None)
        return sorted(tables)

    def _teardown(self, table: int, level: int) -> None:
        for index, pte in enumerate(self.tables[table]):
            if not pte & PT_PRESENT:
                continue
            if level > 1 and not pte & PT_PAGE_SIZE:
                self._teardown(pte_gfn(pte), level - 1)
            self.write_pte(table, index, 0)

    # -- the walker ----------------------------------------------------------------

    def pte(self, table_gfn: int, index: int) -> int:
        """A pte as guest memory holds it (a page that is no table reads as zeros)."""
        ptes = self.tables.get(table_gfn)
        return ptes[index] if ptes is not None else 0

    def translate(self, cr3: int, gva: int, write: bool = False, user: bool = False) -> GuestWalk:
        """The walk without events or A/D updates, every table readable."""
        return self._walk(cr3, gva, access_error_code(write, user), write, user, None)

    def walk(
        self,
        cr3: int,
        gva: int,
        write: bool = False,
        user: bool = False,
        *,
        error_code: int | None = None,
        readable: Readable | None = None,
        emit: Emit | None = None,
        fetch: bool = False,
    ) -> GuestWalk:
        """`FNAME(walk_addr)`: events and A/D updates as KVM's walker makes them.

        `error_code` is the pferr traced (default: W/U of the access); `readable` says
        whether a table gfn is in a memslot (default: all are); `fetch`: an instruction
        fetch, refused by a pte with NX set (EFER.NX=1)."""
        emit = emit or self._emit
        pferr = access_error_code(write, user, fetch) if error_code is None else error_code
        _send(emit, "kvm_mmu_pagetable_walk", addr=gva, pferr=pferr)
        walk = self._walk(cr3, gva, pferr, write, user, readable, fetch)
        for step in walk.steps:
            _send(emit, "kvm_mmu_paging_element", pte=step.pte, level=step.level)
        if walk.gfn is None:
            _send(emit, "kvm_mmu_walker_error", pferr=walk.pferr)
            return walk
        steps = list(walk.steps)
        for i, step in enumerate(steps):
            pte = step.pte | PT_ACCESSED
            if write and i == len(steps) - 1:
                pte |= PT_DIRTY
            gpa = step.table_gfn << 12 | step.pte_index * 8
            if not step.pte & PT_ACCESSED:
                _send(emit, "kvm_mmu_set_accessed_bit", gpa=gpa)
            if (pte & ~step.pte) & PT_DIRTY:
                _send(emit, "kvm_mmu_set_dirty_bit", gpa=gpa)
            if pte != step.pte:
                self.tables[step.table_gfn][step.pte_index] = pte
                steps[i] = step._replace(pte=pte)
        return walk._replace(steps=tuple(steps))

    def _walk(
        self,
        cr3: int,
        gva: int,
        pferr: int,
        write: bool,
        user: bool,
        readable: Readable | None,
        fetch: bool = False,
    ) -> GuestWalk:
        _check_gva(gva)
        request = access_error_code(write, user, fetch)
        steps: list[WalkStep] = []
        table, level = cr3, PT64_ROOT_LEVEL
        while True:
            if readable is not None and not readable(table):
                return GuestWalk(None, request, tuple(steps))
            pte = self.pte(table, pt_index(gva, level))
            steps.append(WalkStep(table, pt_index(gva, level), pte, level))
            if not pte & PT_PRESENT:
                return GuestWalk(None, request, tuple(steps))
            if pte & PT_PAGE_SIZE and level == PT64_ROOT_LEVEL:
                rsvd = PFERR_PRESENT_MASK | PFERR_RSVD_MASK | request
                return GuestWalk(None, rsvd, tuple(steps))
            if level == 1 or pte & PT_PAGE_SIZE:
                break  # FNAME(is_last_gpte)
            table, level = pte_gfn(pte), level - 1
        offset = (gva >> 12) & ((1 << 9 * (level - 1)) - 1)
        walk = GuestWalk(pte_gfn(pte) + offset, pferr, tuple(steps))
        if (
            (write and not walk.access & ACC_WRITE_MASK)
            or (user and not walk.access & ACC_USER_MASK)
            or (fetch and not walk.access & ACC_EXEC_MASK)
        ):  # permission_fault()
            return GuestWalk(None, PFERR_PRESENT_MASK | request, walk.steps)
        return walk

    # -- audit ---------------------------------------------------------------------

    def audit(self) -> None:
        """Each process's tables form a tree reachable from its cr3 and owned by it
        alone; tables are allocated pool pages; the free list is disjoint."""
        owned: dict[int, int] = {}
        for cr3, tables in self.processes.items():
            reached = self._reach(cr3, PT64_ROOT_LEVEL, set())
            if reached != tables:
                raise AuditError(
                    f"guest: process {cr3:#x} owns {len(tables)} tables, reaches {len(reached)}"
                )
            for gfn in tables:
                if owned.setdefault(gfn, cr3) != cr3:
                    raise AuditError(f"guest: table {gfn:#x} shared by two processes")
        if set(owned) != set(self.tables) or not set(self.tables) <= self.allocated:
            raise AuditError("guest: tables and processes disagree")
        if self.allocated & set(self._free) or any(g not in self.pool for g in self.allocated):
            raise AuditError("guest: allocator state inconsistent")

    def _reach(self, table: int, level: int, seen: set[int]) -> set[int]:
        if table in seen or table not in self.tables:
            raise AuditError(f"guest: table {table:#x} missing or linked twice")
        seen.add(table)
        for pte in self.tables[table]:
            if not pte & PT_PRESENT:
                continue
            if level == PT64_ROOT_LEVEL and pte & PT_PAGE_SIZE:
                raise AuditError(f"guest: PS set in a PML4E of {table:#x}")
            if level > 1 and not pte & PT_PAGE_SIZE:
                self._reach(pte_gfn(pte), level - 1, seen)
        return seen


def _check_gva(gva: int) -> None:
    if not 0 <= gva < 1 << GVA_BITS:
        raise ValueError(f"gva {gva:#x} outside the lower 48-bit half")


def _send(emit: Emit | None, name: str, **fields: FieldValue) -> None:
    if emit is not None:
        emit(Event(name, fields))
