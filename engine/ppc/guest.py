"""The guest kernel's side of the hash MMU: segments, Linux PTEs, and `hash_page()`.

A pSeries Linux guest of the thread's time, reduced to what the POWER-keys thread's
pfault program makes it do (the model's reading, not the guest's code):

* Segments of 256 MB: `vsid = vsid_scramble((context << ESID_BITS) | esid)` with the
  multiplier `VSID_MULTIPLIER_256M 12538073` ("24-bit prime") modulo `2 ** 38 - 1`
  (`VSID_BITS_256M 38`), as one 3.x mmu-hash64.h had them (the model only needs a fixed
  scramble; the bit count changed across versions).
* A DSI the hypervisor forwards is handled by the guest: a page without a Linux PTE
  gets a page of guest RAM (do_page_fault), and the guest then inserts the HPTE with
  H_ENTER into the primary group, else the secondary one (the guest's hash code).  One
  forwarded fault per missing HPTE: the model lets the fault path insert the HPTE at
  once (`update_mmu_cache()`'s hash preload; UNVERIFIED for every kernel version).
* Both groups full: the guest's `hpte_remove` evicts one non-bolted HPTE, from a
  random group of the two and a random starting slot (the kernel draws both from the
  timebase; here a seeded `random.Random`), then inserts again.
* mprotect() and munmap() flush the range's HPTEs with H_BULK_REMOVE, 4 at a time (the
  thread's program comments its mprotect() calls "flush hptes").

The guest never uses page-class keys itself (Linux did not in 2014; QEMU gave guests no
`ibm,processor-storage-keys`, as Aneesh notes in the thread).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from .faults import EMULATED, FORWARDED, FaultRecord
from .hpt import SID_SHIFT
from .hpte import HPTES_PER_GROUP
from .keys import H_PTEG_FULL, H_SUCCESS
from .machine import PpcMachine

ESID_BITS = 18
VSID_MULTIPLIER_256M = 12538073
VSID_BITS_256M = 38
VSID_MODULUS_256M = (1 << VSID_BITS_256M) - 1
USER_CONTEXT = 1  # the pfault process's MMU context
MAX_RETRIES = 4  # an access faults at most: forwarded, then paged in or emulated


def vsid_scramble(protovsid: int) -> int:
    return (protovsid * VSID_MULTIPLIER_256M) % VSID_MODULUS_256M


@dataclass(slots=True)
class Vma:
    """A mapping of the process: `npages` guest pages from `start`, RAM or MMIO."""

    start: int
    npages: int
    writable: bool
    mmio_gpa: int = -1  # >= 0: an ioremap-like mapping of this guest real address
    vpns: list[int] = field(default_factory=list)  # the pages' virtual page numbers


class LinuxGuest:
    """The guest kernel and the one process running the program."""

    def __init__(self, machine: PpcMachine, *, seed: int = 1, context: int = USER_CONTEXT) -> None:
        self.m = machine
        self.shift = machine.page_shift
        self.context = context
        self.rng = random.Random(seed)
        self.free_pages: deque[int] = deque(range(machine.ram_pages))
        self.ptes: dict[int, int] = {}  # vpn -> gpa: the Linux PTEs present
        self.vmas: list[Vma] = []
        self.vsids: dict[int, int] = {}
        self.evictions = 0
        self.page_faults = 0  # forwarded faults that found no Linux PTE

    # -- addresses --------------------------------------------------------------------

    def vsid(self, ea: int) -> int:
        esid = ea >> SID_SHIFT
        vsid = self.vsids.get(esid)
        if vsid is None:
            vsid = self.vsids[esid] = vsid_scramble((self.context << ESID_BITS) | esid)
        return vsid

    def vpn(self, ea: int) -> int:
        return self.m.hpt.vpn(self.vsid(ea), ea)

    def vma_of(self, ea: int) -> Vma:
        for vma in self.vmas:
            if vma.start <= ea < vma.start + (vma.npages << self.shift):
                return vma
        raise ValueError(f"ea {ea:#x} is in no mapping (a SIGSEGV is not modelled)")

    # -- the process's calls ------------------------------------------------------------

    def mmap(self, start: int, npages: int, writable: bool = True, mmio_gpa: int = -1) -> Vma:
        vma = Vma(start, npages, writable, mmio_gpa)
        vma.vpns = [self.vpn(ea) for ea in self.eas(vma)]
        self.vmas.append(vma)
        return vma

    def mprotect(self, vma: Vma, writable: bool) -> None:
        self.flush(vma)
        vma.writable = writable

    def munmap(self, vma: Vma) -> None:
        self.flush(vma)
        for vpn in vma.vpns:
            gpa = self.ptes.pop(vpn, -1)
            if gpa >= 0 and vma.mmio_gpa < 0:
                self.free_pages.append(gpa >> self.shift)
        self.vmas.remove(vma)

    def eas(self, vma: Vma) -> range:
        return range(vma.start, vma.start + (vma.npages << self.shift), 1 << self.shift)

    def flush(self, vma: Vma) -> None:
        """The range's HPTEs go (`flush_hash_range` → H_BULK_REMOVE)."""
        index = self.m.hpt.index
        slots = [index[vpn] for vpn in vma.vpns if vpn in index]
        self.m.h_bulk_remove(slots)

    def touch(self, ea: int, store: bool) -> list[FaultRecord]:
        """One load or store; returns the HDSIs it took."""
        m = self.m
        vsid = self.vsids.get(ea >> SID_SHIFT)
        vpn = m.hpt.vpn(self.vsid(ea) if vsid is None else vsid, ea)
        records: list[FaultRecord] = []
        for _ in range(MAX_RETRIES):
            dsisr = m.hw_access(vpn, store)
            if not dsisr:
                return records
            record = m.hdsi(ea, vpn, store, dsisr)
            records.append(record)
            if record.outcome == EMULATED:
                return records
            if record.outcome == FORWARDED:
                self.dsi(ea, vpn)
        raise AssertionError(f"the access at {ea:#x} never completed: {records}")

    # -- the guest kernel -------------------------------------------------------------

    def dsi(self, ea: int, vpn: int) -> None:
        """The forwarded DSI: a Linux PTE if there is none, then the HPTE."""
        vma = self.vma_of(ea)
        gpa = self.ptes.get(vpn, -1)
        if gpa < 0:
            self.page_faults += 1
            if vma.mmio_gpa >= 0:
                gpa = vma.mmio_gpa + (ea - vma.start)
            else:
                gpa = self.free_pages.popleft() << self.shift
            self.ptes[vpn] = gpa
        self.hash_page(vpn, gpa, vma.writable)

    def hash_page(self, vpn: int, gpa: int, writable: bool) -> int:
        """H_ENTER into the primary group, else the secondary, else evict and retry."""
        primary = self.m.hpt.hash_of(vpn)
        secondary = primary ^ self.m.hpt.mask
        h_enter = self.m.h_enter
        while True:
            for group in (primary, secondary):
                ret, slot = h_enter(group, vpn, gpa, writable)
                if ret == H_SUCCESS:
                    return slot
                if ret != H_PTEG_FULL:
                    raise ValueError(f"H_ENTER failed with {ret}")
            self.hpte_remove(primary if self.rng.random() < 0.5 else secondary)

    def hpte_remove(self, group: int) -> None:
        """Evict one HPTE of a full group, from a random slot on (H_REMOVE)."""
        start = self.rng.randrange(HPTES_PER_GROUP)
        base = group * HPTES_PER_GROUP
        for i in range(HPTES_PER_GROUP):
            slot = base + (start + i) % HPTES_PER_GROUP
            if self.m.hpt.slots[slot] is not None:
                self.m.h_remove(slot)
                self.evictions += 1
                return
        raise AssertionError(f"group {group:#x} is full but has nothing to evict")
