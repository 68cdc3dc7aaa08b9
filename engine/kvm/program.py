"""Guest programs: one object describing page tables, accesses and memslot operations,
so that the very same program runs on the kernel (`engine.kvm.runner`) and on the
engine's shadow MMU (`engine.kvm.model`).

A program is built whole before it runs: RAM memslot 0 at gpa 0 holds the guest's page
tables (an `engine.mmu.guest_pt.GuestPageTables`, 4-level, every entry P|W|U so the guest
runs at CPL 3), its code (`asm.assemble_slice`, one block per slice, never crossing a
page) and, for most programs, its data.  A *slice* is a CR3 (a process), a rip, the
sweeps the code makes, and the memslot or dirty-log operations the VMM applies before
it; every slice ends with a store to the doorbell gpa, which no memslot covers.

Programs:
- `touch`: one process writes N pages once: N demand faults;
- `fork`: a parent writes N pages, then C children (copies of its tables, as fork()
  makes them, `pte_mkold`) read them: the PTE_LIST_EXT thread's storm, each data gfn's
  rmap growing by one per process;
- `mmio`: N reads and N writes of gpas no memslot covers;
- `ptwrite`: the process maps its own last-level table user-writable and stores each of
  N of its ptes back unchanged: a write to a shadowed, write-protected gfn;
- `churn`: N pages in memslot 1, written after each of: create, KVM_MEM_LOG_DIRTY_PAGES
  on (flags only), off, delete (the reads then find no slot: MMIO exits), re-create,
  move away and back;
- `dirty`: memslot 1 logged from the start; rounds of writes, each followed by
  KVM_GET_DIRTY_LOG (which write-protects the logged pages again);
- `cr3`: two processes, each writing its own N pages, then each reading them again,
  switched by the guest itself: a CPL-0 slice (the guest's kernel, run by kvm-pvm in
  its emulator) executes `mov %rax,%cr3`, and `kvm_mmu_new_pgd()` ->
  `fast_pgd_switch()` keeps the root it leaves in the vCPU's `prev_roots`
  (`cached_root_find_and_keep_current()`, mmu.c 6.18): the switch back takes it from
  there (no `kvm_mmu_get_page` at all) with every spte kept.  The VMM's KVM_SET_SREGS
  that changes only the CPL keeps the MMU context; a last switch by KVM_SET_SREGS with
  another CR3 (`kvm_mmu_reset_context()`: every root freed, `prev_roots` included)
  finds the root's shadow page again (`kvm_mmu_get_page` existing);
- `flood`: the process maps its own page directory (the level-2 table over its N
  pages) at `FLOOD_GVA`, in a 1G region of its own, and stores `FLOOD_STORES` of its
  entries back: each store is emulated (the table is shadowed, so write-protected),
  and the third zaps it (`detect_write_flooding()`); reading the N pages again
  shadows it anew;
- `prefetch`: N pages whose ptes have the accessed bit set (a guest OS that used
  them), read every `PTE_PREFETCH_NUM`-th one: each fault maps its neighbours
  too (`FNAME(pte_prefetch)`), so reading all N faults no more; writing them faults
  once more per page, as a prefetched clean pte is mapped read-only;
- `huge`: N pages in 2M guest pages (memslot 1, 2M-aligned), written then read.  The
  VMM's memory is 4K pages (no MADV_HUGEPAGE), so the host maps them 4K: each guest
  2M page is shadowed by a direct last-level page whose sptes `__direct_pte_prefetch()`
  fills 8 at a time.

`MAX_PAGES` is each program's largest N; only `fork` has `--children`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..memslots.constants import KVM_MEM_LOG_DIRTY_PAGES
from ..mmu.guest.page_tables import ENTRIES, PT_ACCESSED, GuestPageTables, pt_index, pte_gfn
from .asm import READ, RMW, WRITE, Sweep, assemble_slice, instructions, memory_instructions

PAGE = 4096
CODE_GVA = 0x40_0000  # code, then the doorbell at the end of the same 2M (one table)
DOORBELL_GVA = 0x5F_F000
DATA_GVA = 0x100_0000
MMIO_GVA = 0x3000_0000
PT_GVA = 0x3800_0000
FLOOD_GVA = 0x40_0000_0000  # 256G: its faults walk other tables than DATA_GVA's
FLOOD_STORES = 4  # the third emulated store floods (WRITE_FLOODING_THRESHOLD)
PREFETCH_STRIDE = 8  # PTE_PREFETCH_NUM: one fault maps an aligned group of 8
DOORBELL_GPA = 0xFEE0_0000  # no memslot covers it
MMIO_GPA = 0xD000_0000
SLOT1_GPA = 0x1000_0000
SLOT1_MOVED_GPA = 0x2000_0000
RAM_SLOT, DATA_SLOT = 0, 1
PROGRAMS = ("touch", "fork", "mmio", "ptwrite", "churn", "dirty", "cr3", "flood", "prefetch",
            "huge", "thp")  # fmt: skip
DEFAULT_PAGES = {"touch": 64, "fork": 16, "mmio": 8, "ptwrite": 16, "churn": 16, "dirty": 16,
                 "cr3": 64, "flood": 64, "prefetch": 64, "huge": 1024, "thp": 1024}  # fmt: skip
DEFAULT_CHILDREN = 8
MAX_CHILDREN = 1024
WITH_CHILDREN = ("fork",)
DIRTY_ROUNDS = 3
# The largest N: data and MMIO ranges stay below the next range (MMIO_GVA, PT_GVA,
# SLOT1_MOVED_GPA); ptwrite's stores stay in its one last-level table.
MAX_PAGES = {name: 1 << 16 for name in PROGRAMS} | {"mmio": 1 << 15, "ptwrite": ENTRIES}


@dataclass(frozen=True, slots=True)
class MemslotOp:
    """A KVM_SET_USER_MEMORY_REGION call; the host address is `backing` (which guest
    memory: 0 RAM, 1 the data slot's) plus `offset`."""

    slot: int
    flags: int
    guest_phys_addr: int
    memory_size: int
    backing: int
    offset: int = 0

    def describe(self) -> str:
        if not self.memory_size:
            return f"delete slot {self.slot}"
        flags = " log-dirty" if self.flags & KVM_MEM_LOG_DIRTY_PAGES else ""
        return (f"slot {self.slot} gpa {self.guest_phys_addr:#x} "
                f"{self.memory_size >> 12} pages{flags}")  # fmt: skip


@dataclass(frozen=True, slots=True)
class DirtyLogOp:
    """KVM_GET_DIRTY_LOG of a slot."""

    slot: int
    npages: int

    def describe(self) -> str:
        return f"KVM_GET_DIRTY_LOG slot {self.slot}"


Op = MemslotOp | DirtyLogOp


Insn = tuple[int, bytes]  # an instruction's rip and bytes


@dataclass(frozen=True, slots=True)
class Slice:
    """One run to the doorbell.  At CPL 3 (a process) the code is sweeps and `insns`
    its loads and stores; at CPL 0 (the guest's kernel) it loads CR3 with `loads_cr3`'s
    table and rings: no sweeps, `insns` every instruction (each one emulated)."""

    cr3: int  # gfn of the PML4 the VMM's KVM_SET_SREGS gives
    rip: int
    sweeps: tuple[Sweep, ...]
    before: tuple[Op, ...] = ()
    label: str = ""
    insns: tuple[Insn, ...] = ()  # the loads and stores, in order, the doorbell's last
    cpl: int = 3
    loads_cr3: int | None = None  # the gfn of the PML4 a CPL-0 slice's `mov %cr3` loads

    def accesses(self) -> list[tuple[Sweep, Insn | None, Insn | None]]:
        """Each sweep with its load and its store instruction (None: it has none)."""
        insns = iter(self.insns)
        out = []
        for sweep in self.sweeps:
            load = next(insns) if sweep.kind in (READ, RMW) else None
            store = next(insns) if sweep.kind in (WRITE, RMW) else None
            out.append((sweep, load, store))
        return out

    @property
    def doorbell(self) -> Insn:
        return self.insns[-1]


@dataclass
class GuestProgram:
    name: str
    pages: int
    children: int
    ram_pages: int  # memslot 0, at gpa 0
    data_pages: int  # the memory behind memslot 1 (0: none)
    tables: GuestPageTables
    code: dict[int, bytes]  # gfn -> the code page
    setup: tuple[MemslotOp, ...]
    slices: list[Slice] = field(default_factory=list)
    data_huge: bool = False  # memslot 1's memory in transparent huge pages (2M)

    @property
    def table_gfns(self) -> list[int]:
        return sorted(self.tables.tables)

    def accesses(self) -> int:
        return sum(s.count for sl in self.slices for s in sl.sweeps)


class _Builder:
    def __init__(self, name: str, pages: int, children: int, ram_pages: int) -> None:
        self.tables = GuestPageTables(range(1, ram_pages))
        self.program = GuestProgram(
            name, pages, children, ram_pages, 0, self.tables, {},
            (MemslotOp(RAM_SLOT, 0, 0, ram_pages * PAGE, 0),),
        )  # fmt: skip
        self.code_pages = [self.tables.alloc_page()]
        self.code_at = 0  # offset of the next block in the last code page
        self.blocks: dict[tuple[tuple[Sweep, ...], int | None], tuple[int, tuple[Insn, ...]]]
        self.blocks = {}

    def process(self) -> int:
        cr3 = self.tables.spawn()
        for i, gfn in enumerate(self.code_pages):
            self.tables.map(cr3, CODE_GVA + i * PAGE, gfn, writable=False)
        self.tables.map(cr3, DOORBELL_GVA, DOORBELL_GPA >> 12)
        return cr3

    def data(self, cr3: int, count: int, gva: int = DATA_GVA) -> list[int]:
        gfns = [self.tables.alloc_page() for _ in range(count)]
        for i, gfn in enumerate(gfns):
            self.tables.map(cr3, gva + i * PAGE, gfn)
        return gfns

    def table_at(self, cr3: int, gva: int, level: int) -> int:
        """The gfn of the level-`level` table on `gva`'s path."""
        table = cr3
        for lvl in range(4, level, -1):
            table = pte_gfn(self.tables.pte(table, pt_index(gva, lvl)))
        return table

    def block(
        self, sweeps: tuple[Sweep, ...], load_cr3: int | None = None
    ) -> tuple[int, tuple[Insn, ...]]:
        """The rip of the code for `sweeps` and its memory instructions (each distinct
        block assembled once); with `load_cr3` (a PML4's gfn), CPL-0 code that loads
        CR3 first, and every instruction of it."""
        key = (sweeps, load_cr3)
        if key in self.blocks:
            return self.blocks[key]
        cr3 = None if load_cr3 is None else load_cr3 * PAGE
        size = len(assemble_slice(sweeps, DOORBELL_GVA, 0, cr3))
        if self.code_at + size > PAGE:
            self.code_pages.append(self.tables.alloc_page())
            self.code_at = 0
            gva = CODE_GVA + PAGE * (len(self.code_pages) - 1)
            if gva >= DOORBELL_GVA:
                raise ValueError("the program's code does not fit below the doorbell")
            for cr3 in self.tables.processes:
                self.tables.map(cr3, gva, self.code_pages[-1], writable=False)
        gfn = self.code_pages[-1]
        rip = CODE_GVA + PAGE * (len(self.code_pages) - 1) + self.code_at
        code = assemble_slice(sweeps, DOORBELL_GVA, rip, cr3)
        page = bytearray(self.program.code.get(gfn, bytes(PAGE)))
        page[self.code_at : self.code_at + len(code)] = code
        self.program.code[gfn] = bytes(page)
        self.code_at += (len(code) + 15) & ~15
        listed = memory_instructions(code, rip) if cr3 is None else instructions(code, rip)
        self.blocks[key] = rip, tuple(listed)
        return self.blocks[key]

    def slice(self, cr3: int, sweeps: tuple[Sweep, ...], label: str, *before: Op) -> None:
        rip, insns = self.block(sweeps)
        self.program.slices.append(Slice(cr3, rip, sweeps, before, label, insns))

    def switch(self, cr3: int, to: int, label: str) -> None:
        """A CPL-0 slice in `cr3` that loads CR3 with `to` (`mov %rax,%cr3`)."""
        rip, insns = self.block((), load_cr3=to)
        self.program.slices.append(Slice(cr3, rip, (), (), label, insns, cpl=0, loads_cr3=to))


def _ram_for(mapped: int, processes: int = 1, data: int = 0) -> int:
    """Memslot 0's pages: code, `data` pages, and each process's tables for `mapped`
    pages besides its code (last-level tables, a directory per 1G crossed, and the top
    levels, with room for a range that straddles a boundary)."""
    tables_each = 4 + 2 * (mapped // ENTRIES + 2) + 2 * (mapped // ENTRIES**2 + 2)
    return 16 + data + processes * tables_each


def build_program(name: str, pages: int | None = None, children: int | None = None) -> GuestProgram:
    """A fresh program (its tables are mutable: the model's walks set A/D bits)."""
    if name not in PROGRAMS:
        raise ValueError(f"unknown program {name!r}; choose from {', '.join(PROGRAMS)}")
    n = DEFAULT_PAGES[name] if pages is None else pages
    if not 1 <= n <= MAX_PAGES[name]:
        raise ValueError(f"--pages {n}: give 1 to {MAX_PAGES[name]}")
    if name not in WITH_CHILDREN:
        if children:
            raise ValueError(f"--children goes with fork; {name} has no child processes")
        return _BUILDERS[name](n, 0)
    c = DEFAULT_CHILDREN if children is None else children
    if not 0 <= c <= MAX_CHILDREN:
        raise ValueError(f"--children {c}: give 0 to {MAX_CHILDREN}")
    return _BUILDERS[name](n, c)


def _touch(n: int, c: int) -> GuestProgram:
    b = _Builder("touch", n, c, _ram_for(n, data=n))
    cr3 = b.process()
    b.data(cr3, n)
    b.slice(cr3, (Sweep(DATA_GVA, n, WRITE),), f"write {n} pages")
    return b.program


def _fork(n: int, c: int) -> GuestProgram:
    b = _Builder("fork", n, c, _ram_for(n, c + 1, data=n))
    parent = b.process()
    b.data(parent, n)
    b.block((Sweep(DATA_GVA, n, READ),))  # both blocks in the code before the fork
    b.slice(parent, (Sweep(DATA_GVA, n, WRITE),), f"parent writes {n} pages")
    for i in range(c):
        child = b.tables.fork(parent)
        b.slice(child, (Sweep(DATA_GVA, n, READ),), f"child {i + 1} reads {n} pages")
    return b.program


def _mmio(n: int, c: int) -> GuestProgram:
    b = _Builder("mmio", n, c, _ram_for(n))
    cr3 = b.process()
    for i in range(n):
        b.tables.map(cr3, MMIO_GVA + i * PAGE, (MMIO_GPA >> 12) + i)
    sweeps = (Sweep(MMIO_GVA, n, READ), Sweep(MMIO_GVA, n, WRITE))
    b.slice(cr3, sweeps, f"{n} MMIO reads, {n} MMIO writes")
    return b.program


def _ptwrite(n: int, c: int) -> GuestProgram:
    b = _Builder("ptwrite", n, c, _ram_for(n + 1, data=n))
    cr3 = b.process()
    b.data(cr3, n)
    b.tables.map(cr3, PT_GVA, b.table_at(cr3, DATA_GVA, 1))  # its own last-level table
    b.slice(cr3, (Sweep(DATA_GVA, n, READ),), f"read {n} pages")
    b.slice(cr3, (Sweep(PT_GVA, n, RMW, stride=8),), f"store {n} of its own ptes")
    b.slice(cr3, (Sweep(DATA_GVA, n, READ),), f"read {n} pages again")
    return b.program


def _slot1(b: _Builder, n: int, flags: int = 0, gpa: int = SLOT1_GPA) -> MemslotOp:
    b.program.data_pages = n
    return MemslotOp(DATA_SLOT, flags, gpa, n * PAGE, DATA_SLOT)


def _map_slot1(b: _Builder, cr3: int, n: int) -> None:
    for i in range(n):
        b.tables.map(cr3, DATA_GVA + i * PAGE, (SLOT1_GPA >> 12) + i)


def _churn(n: int, c: int) -> GuestProgram:
    b = _Builder("churn", n, c, _ram_for(n))
    cr3 = b.process()
    _map_slot1(b, cr3, n)
    write, read = (Sweep(DATA_GVA, n, WRITE),), (Sweep(DATA_GVA, n, READ),)
    create = _slot1(b, n)
    logged = _slot1(b, n, KVM_MEM_LOG_DIRTY_PAGES)
    delete = MemslotOp(DATA_SLOT, 0, SLOT1_GPA, 0, DATA_SLOT)
    away = _slot1(b, n, gpa=SLOT1_MOVED_GPA)
    b.slice(cr3, write, "write slot 1", create)
    b.slice(cr3, write, "log dirty pages, write", logged)
    b.slice(cr3, write, "stop logging, write", create)
    b.slice(cr3, read, "delete slot 1, read (no slot: MMIO)", delete)
    b.slice(cr3, write, "re-create slot 1, write", create)
    b.slice(cr3, read, "move slot 1 away, read (MMIO)", away)
    b.slice(cr3, write, "move slot 1 back, write", create)
    return b.program


def _dirty(n: int, c: int) -> GuestProgram:
    b = _Builder("dirty", n, c, _ram_for(n))
    cr3 = b.process()
    _map_slot1(b, cr3, n)
    logged = _slot1(b, n, KVM_MEM_LOG_DIRTY_PAGES)
    write = (Sweep(DATA_GVA, n, WRITE),)
    b.slice(cr3, write, "write logged slot 1", logged)
    for r in range(1, DIRTY_ROUNDS):
        b.slice(cr3, write, f"round {r + 1}: write again", DirtyLogOp(DATA_SLOT, n))
    b.slice(cr3, (Sweep(DATA_GVA, 1, READ),), "last dirty log", DirtyLogOp(DATA_SLOT, n))
    return b.program


def _cr3(n: int, c: int) -> GuestProgram:
    b = _Builder("cr3", n, c, _ram_for(n, 2, data=2 * n))
    first, second = b.process(), b.process()
    b.data(first, n)
    b.data(second, n)
    write, read = (Sweep(DATA_GVA, n, WRITE),), (Sweep(DATA_GVA, n, READ),)
    b.slice(first, write, f"process 1 writes {n} pages")
    b.switch(first, second, "CPL 0: mov to CR3, process 2's tree (a new root)")
    b.slice(second, write, f"process 2 writes its own {n} pages")
    b.switch(second, first, "CPL 0: mov to CR3, back to process 1 (its root from prev_roots)")
    b.slice(first, read, "process 1 reads its pages: no fault")
    b.switch(first, second, "CPL 0: mov to CR3, process 2 (its root from prev_roots)")
    b.slice(second, read, "process 2 reads its pages: no fault")
    b.slice(first, read, "KVM_SET_SREGS to process 1: every root freed, its page found again")
    return b.program


def _flood(n: int, c: int) -> GuestProgram:
    b = _Builder("flood", n, c, _ram_for(n + 1, data=n))
    cr3 = b.process()
    b.data(cr3, n)
    directory = b.table_at(cr3, DATA_GVA, 2)
    b.tables.map(cr3, FLOOD_GVA, directory)  # its own page directory, user-writable
    read = (Sweep(DATA_GVA, n, READ),)
    stores = (Sweep(FLOOD_GVA, FLOOD_STORES, RMW, stride=8, width=8),)
    b.slice(cr3, read, f"read {n} pages")
    b.slice(cr3, stores, f"store {FLOOD_STORES} entries of its page directory back")
    b.slice(cr3, read, f"read {n} pages again")
    return b.program


def _prefetch(n: int, c: int) -> GuestProgram:
    b = _Builder("prefetch", n, c, _ram_for(n, data=n))
    cr3 = b.process()
    b.data(cr3, n)
    for i in range(n):  # ptes the guest OS has used: accessed
        table, index = b.table_at(cr3, DATA_GVA + i * PAGE, 1), pt_index(DATA_GVA + i * PAGE, 1)
        b.tables.write_pte(table, index, b.tables.pte(table, index) | PT_ACCESSED)
    every = (n + PREFETCH_STRIDE - 1) // PREFETCH_STRIDE
    b.slice(cr3, (Sweep(DATA_GVA, every, READ, stride=PREFETCH_STRIDE * PAGE),),
            f"read every {PREFETCH_STRIDE}th of {n} pages")  # fmt: skip
    b.slice(cr3, (Sweep(DATA_GVA, n, READ),), f"read all {n} pages")
    b.slice(cr3, (Sweep(DATA_GVA, n, WRITE),), f"write all {n} pages")
    return b.program


def _huge(n: int, c: int, name: str = "huge") -> GuestProgram:
    b = _Builder(name, n, c, _ram_for(0))
    cr3 = b.process()
    large = (n + ENTRIES - 1) // ENTRIES
    slot = _slot1(b, large * ENTRIES)
    for i in range(large):  # 2M guest pages over memslot 1 (2M-aligned gpa)
        b.tables.map(cr3, DATA_GVA + i * ENTRIES * PAGE, (SLOT1_GPA >> 12) + i * ENTRIES,
                     level=2)  # fmt: skip
    b.slice(cr3, (Sweep(DATA_GVA, n, WRITE),), f"write {n} pages of 2M guest pages", slot)
    b.slice(cr3, (Sweep(DATA_GVA, n, READ),), "read them again")
    return b.program


def _thp(n: int, c: int) -> GuestProgram:
    program = _huge(n, c, "thp")
    program.data_huge = True
    return program


_BUILDERS = {
    "touch": _touch,
    "fork": _fork,
    "mmio": _mmio,
    "ptwrite": _ptwrite,
    "churn": _churn,
    "dirty": _dirty,
    "cr3": _cr3,
    "flood": _flood,
    "prefetch": _prefetch,
    "huge": _huge,
    "thp": _thp,
}
