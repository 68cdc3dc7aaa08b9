"""The POWER-keys thread's `pfault` program, run on the model guest (the thread's
benchmark).

The program, as the thread quotes it (the archive dropped its `<` signs: `j 10` is
`j < 10`, `i length` is `i < length`):

    #define PAGES (40*1024)
    for (j = 0; j < 10; j++) {
        c = mmap(NULL, length, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
        for (i = 0; i < length; i += size) c[i] = 0;
        /* flush hptes */
        mprotect(c, length, PROT_WRITE);
        for (i = 0; i < length; i += size) c[i] = 10;
        mprotect(c, length, PROT_READ);
        for (i = 0; i < length; i += size) k += c[i];
        munmap(c, length);
    }

with `size = getpagesize()`: 40960 pages, 10 iterations of three linear passes over
them (store, store after an HPTE flush, load after another flush), each page touched
once a pass.  Every touch of a page without an HPTE is a NO_HPTE fault of the guest's
own (case 1), so the program is 3 x 40960 x 10 = 1,228,800 such faults; the page size
only scales the bytes (64K, usual for ppc64 guests, makes it 2.5 GB; it is not in the
thread).  The thread does not say whether the host was short of memory or the guest did
any MMIO; the program itself does neither.

`PfaultProgram(reclaim=..., mmio_every=...)` adds what the program does not have, to
show cases 2 and 3 (the model's variant, not the thread's measurement): the host pages a
random guest page out with probability `reclaim` after each touch, and the process
stores to an MMIO doorbell page every `mmio_every` touches.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from ..errors import AuditError
from ..events import Event
from .faults import FaultRecord
from .guest import LinuxGuest, Vma
from .hpt import KVM_DEFAULT_HPT_ORDER
from .machine import PpcCounters, PpcMachine

PAGES = 40 * 1024
ITERATIONS = 10
MMAP_BASE = 0x3FF0_0000_0000  # the model's choice, 256 MB aligned
DOORBELL_EA = 0x3FE0_0000_0000
MMIO_GPA = 1 << 40  # above guest RAM: no memslot, so emulated MMIO
PASSES = ("c[i] = 0", "c[i] = 10", "k += c[i]")

Op = tuple[str, int, int, str]  # (what, iteration, page, label)


@dataclass(frozen=True, slots=True)
class PfaultProgram:
    """The program's shape: pages, iterations, page size, and the model's additions."""

    pages: int = PAGES
    iterations: int = ITERATIONS
    page_shift: int = 16
    reclaim: float = 0.0
    mmio_every: int = 0
    ram_pages: int = 0  # 0: twice the program's pages

    @property
    def guest_ram_pages(self) -> int:
        return self.ram_pages or 2 * self.pages

    @property
    def is_thread_program(self) -> bool:
        return self.reclaim == 0 and self.mmio_every == 0

    def scaled(self, pages: int, iterations: int) -> PfaultProgram:
        return replace(self, pages=pages, iterations=iterations)

    def ops(self) -> Iterator[Op]:
        """The program's steps in order; `touch` ops carry the page index."""
        if self.mmio_every:
            yield ("map_mmio", 0, 0, "ioremap the doorbell")
        touches = 0
        for j in range(self.iterations):
            yield ("mmap", j, 0, "mmap(PROT_READ|PROT_WRITE)")
            for number, label in enumerate(PASSES):
                if number == 1:
                    yield ("mprotect_w", j, 0, "mprotect(PROT_WRITE): flush hptes")
                elif number == 2:
                    yield ("mprotect_r", j, 0, "mprotect(PROT_READ): flush hptes")
                what = "load" if number == 2 else "store"
                for i in range(self.pages):
                    yield (what, j, i, label)
                    touches += 1
                    if self.mmio_every and touches % self.mmio_every == 0:
                        yield ("doorbell", j, i, "store to the MMIO doorbell")
            yield ("munmap", j, 0, "munmap()")


PFAULT = PfaultProgram()
PRESSURE = PfaultProgram(reclaim=0.002, mmio_every=64)
# For the screen: a table of 128 groups (order 14) that the program fills to 7 of 8
# slots a group, with host reclaim and MMIO so that every kind of HPTE shows.
DEMO = PfaultProgram(pages=896, reclaim=0.01, mmio_every=32, ram_pages=1280)
DEMO_ORDER = 14


class PfaultRun:
    """One era running one program: the machine, the guest, and the program counter."""

    def __init__(
        self,
        era: str = "today",
        program: PfaultProgram = PFAULT,
        *,
        seed: int = 1,
        order: int = KVM_DEFAULT_HPT_ORDER,
        emit: Callable[[Event], None] | None = None,
        trace: bool = False,
    ) -> None:
        self.program = program
        self.seed = seed
        self.order = order
        self.machine = PpcMachine(
            era,
            order=order,
            page_shift=program.page_shift,
            ram_pages=program.guest_ram_pages,
            emit=emit,
            trace=trace,
        )
        self.guest = LinuxGuest(self.machine, seed=seed)
        self.host_rng = random.Random(seed * 7919 + 1)  # the host's reclaim, era-blind
        self.op: Op = ("start", 0, 0, "not started")
        self.done = False
        self.pending: deque[FaultRecord] = deque()
        self._ops = program.ops()
        self._buffer: Vma | None = None
        self._doorbell: Vma | None = None

    @property
    def counters(self) -> PpcCounters:
        return self.machine.counters

    def step(self) -> list[FaultRecord]:
        """Run the program's next step; the HDSIs it took ([] at the end)."""
        op = next(self._ops, None)
        if op is None:
            self.done = True
            return []
        self.op = op
        what = op[0]
        if what in ("store", "load"):
            return self._touch(op[2], what == "store")
        if what == "doorbell":
            return self.guest.touch(DOORBELL_EA, store=True)
        self._do(what)
        return []

    def _touch(self, page: int, store: bool) -> list[FaultRecord]:
        records = self.guest.touch(MMAP_BASE + (page << self.program.page_shift), store)
        reclaim = self.program.reclaim
        if reclaim and self.host_rng.random() < reclaim:
            self.machine.host_swap_out(self.host_rng.randrange(self.machine.ram_pages))
        return records

    def _do(self, what: str) -> None:
        guest = self.guest
        if what == "mmap":
            self._buffer = guest.mmap(MMAP_BASE, self.program.pages)
        elif what in ("mprotect_w", "mprotect_r"):
            assert self._buffer is not None
            guest.mprotect(self._buffer, writable=what == "mprotect_w")
        elif what == "munmap":
            assert self._buffer is not None
            guest.munmap(self._buffer)
            self._buffer = None
        elif what == "map_mmio":
            self._doorbell = guest.mmap(DOORBELL_EA, 1, mmio_gpa=MMIO_GPA)
        else:
            raise ValueError(f"unknown pfault step {what!r}")

    def next_fault(self, max_steps: int = 1_000_000) -> FaultRecord | None:
        """Run until the next HDSI and return it (None when the program ends)."""
        for _ in range(max_steps):
            if self.pending:
                return self.pending.popleft()
            if self.done:
                return None
            self.pending.extend(self.step())
        return self.pending.popleft() if self.pending else None

    def run(self) -> PpcCounters:
        """The whole program, as fast as the model goes."""
        step = self.step
        while not self.done:
            step()
        return self.counters

    def audit(self, full: bool = True) -> None:
        self.machine.audit(full)
        guest_pages = len(self.guest.free_pages) + sum(
            1 for gpa in self.guest.ptes.values() if gpa < MMIO_GPA
        )
        if guest_pages != self.machine.ram_pages:
            raise AuditError(f"guest RAM pages leaked: {guest_pages} of {self.machine.ram_pages}")
