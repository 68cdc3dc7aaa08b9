"""One guest's `mm->mmap_sem`: the reader-writer semaphore ebizzy's threads share (the
PV-flush thread's workload; the model's own reading of it, docs/bench.md §4).

Each ebizzy record starts by refaulting the chunk it writes (`do_page_fault()` takes
`down_read(&mm->mmap_sem)`, v3.2 arch/x86/mm/fault.c) and ends by unmapping it
(`vm_munmap()` → `do_munmap()` under `down_write(&mm->mmap_sem)`, v3.2 mm/mmap.c), whose
`unmap_region()` → `tlb_finish_mmu()` → `flush_tlb_mm()` is the remote flush: the sender
holds the semaphore for write while it waits for its targets.  A thread that cannot take
it sleeps (`rwsem_down_failed_common()`), and a vCPU with nothing else to run idles in
HLT.

The semaphore is handed over as rwsem-xadd of v3.2 does (lib/rwsem.c,
`__rwsem_do_wake()`): waiters queue in order; on `up_write()` a writer at the head gets
the lock alone, else every reader at the head is granted it at once and holds it until it
runs.  A sleeping reader also queues behind a waiting writer.  The refault's read hold is
the model's zero-length: a reader that finds the semaphore free takes and drops it at once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..errors import AuditError


@dataclass(slots=True, eq=False)
class MmapSem:
    """`struct rw_semaphore` of one VM's ebizzy mm: its holders and its wait list."""

    vm: int
    writer: int | None = None  # the gid holding it for write
    readers: set[int] = field(default_factory=set)  # granted at a wake-up, not yet run
    waiters: deque[tuple[int, bool]] = field(default_factory=deque)  # (gid, for write)

    def down_read(self, gid: int) -> bool:
        """True: taken and dropped at once (the refault); False: queued, to sleep."""
        if self.writer is None and not self.waiters:
            return True
        self.waiters.append((gid, False))
        return False

    def down_write(self, gid: int) -> bool:
        """True: `gid` holds it for write; False: queued, to sleep."""
        if self.writer is None and not self.readers and not self.waiters:
            self.writer = gid
            return True
        self.waiters.append((gid, True))
        return False

    def up_write(self, gid: int) -> list[int]:
        """The writer drops it; returns the waiters `__rwsem_do_wake()` granted it to."""
        if self.writer != gid:
            raise AuditError(f"vm{self.vm}: vCPU {gid} releases an mmap_sem it does not hold")
        self.writer = None
        return self._wake()

    def up_read(self, gid: int) -> list[int]:
        """A reader granted at a wake-up ran its fault; the last one may let a writer in."""
        self.readers.discard(gid)
        return self._wake() if not self.readers else []

    def _wake(self) -> list[int]:
        if not self.waiters:
            return []
        gid, write = self.waiters[0]
        if write:
            self.waiters.popleft()
            self.writer = gid
            return [gid]
        granted = []
        while self.waiters and not self.waiters[0][1]:
            granted.append(self.waiters.popleft()[0])
        self.readers.update(granted)
        return granted

    def holds(self, gid: int) -> bool:
        return self.writer == gid or gid in self.readers

    def waiting(self, gid: int) -> bool:
        return any(g == gid for g, _ in self.waiters)

    def audit(self) -> None:
        if self.writer is not None and self.readers:
            raise AuditError(f"vm{self.vm}: mmap_sem held for write and for read")
        queued = [g for g, _ in self.waiters]
        if len(set(queued)) != len(queued):
            raise AuditError(f"vm{self.vm}: a thread waits twice for mmap_sem")
        holders = self.readers | ({self.writer} if self.writer is not None else set())
        if holders & set(queued):
            raise AuditError(f"vm{self.vm}: a thread holds mmap_sem and waits for it")
        if self.waiters and self.writer is None and not self.readers:
            raise AuditError(f"vm{self.vm}: mmap_sem is free with threads waiting for it")
