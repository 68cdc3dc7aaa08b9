"""Guest memory accesses that drive memslot lookups: a seeded, deterministic gfn stream.

Every guest page fault and every emulated MMIO access starts with `gfn_to_memslot()`
(docs/kvm.md §1.3).  The memslot-search thread's argument is about the mix: Alex
Williamson measured "~50% of the time the gfn is found in slot 1 ... not found at all"
for MMIO, where a linear array scans "the full 32 entries" on every miss, and Avi
answered that RAM hits dominate and end in the first entries once sorted by size.  A
`Workload` reproduces such mixes: RAM accesses land in slots weighted by their size, with
locality (a vCPU tends to stay in the slot it touched last, which is what makes
`last_used_slot` pay), and MMIO accesses land on a few device pages in the holes between
slots (LAPIC, IOAPIC, HPET and BAR-like pages), where every lookup misses.

Mixes, named after the workloads of the threads:
- `mixed`: 80% RAM with locality, 20% MMIO (a general guest);
- `kernbench`: RAM only, strong locality (a compile: page faults on guest RAM);
- `netperf`: 60% MMIO on a virtio-like doorbell and the LAPIC (Alex's I/O case);
- `scatter`: RAM and MMIO uniformly at random, no locality (a cache's worst case).
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Iterable
from itertools import accumulate
from typing import NamedTuple

from .constants import PAGE_SHIFT
from .memslot import MemorySlot

RAM = "ram"
MMIO = "mmio"

# Well-known device pages of a PC guest (gpa >> PAGE_SHIFT), used when they fall in a hole.
PC_DEVICE_GFNS = (
    0xFEE00,  # local APIC
    0xFEC00,  # IOAPIC
    0xFED00,  # HPET
    0xFEBF0,  # a PCI BAR below the IOAPIC (virtio-net notify in a q35 guest)
    0xFEBF1,
    0xA0,  # legacy VGA window (0xa0000)
)


class WorkloadMix(NamedTuple):
    name: str
    mmio_ratio: float  # share of accesses that hit no slot
    locality: float  # chance a vCPU stays in the slot of its previous RAM access
    description: str


WORKLOADS: dict[str, WorkloadMix] = {
    mix.name: mix
    for mix in (
        WorkloadMix("mixed", 0.2, 0.85, "80% RAM with locality, 20% MMIO misses"),
        WorkloadMix("kernbench", 0.0, 0.95, "RAM faults only, strong locality"),
        WorkloadMix("netperf", 0.6, 0.9, "60% MMIO: doorbell and LAPIC misses"),
        WorkloadMix("scatter", 0.3, 0.0, "uniform RAM and MMIO, no locality"),
    )
}
DEFAULT_WORKLOAD = "mixed"


class Access(NamedTuple):
    """One guest access that needs a memslot lookup."""

    seq: int
    vcpu: int
    gfn: int
    kind: str  # RAM or MMIO: what the workload meant; the lookup decides what happens

    @property
    def gpa(self) -> int:
        return self.gfn << PAGE_SHIFT


def workload_mix(name: str) -> WorkloadMix:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}") from None


def mmio_gfns(slots: Iterable[MemorySlot], count: int = 8) -> tuple[int, ...]:
    """Device pages that no slot covers: the PC's well-known ones that fall in a hole,
    then the first page of each hole between slots, up to `count`."""
    ordered = sorted(slots, key=lambda s: s.base_gfn)

    def covered(gfn: int) -> bool:
        return any(s.base_gfn <= gfn < s.end_gfn for s in ordered)

    chosen = [g for g in PC_DEVICE_GFNS if not covered(g)]
    cursor = 0
    for slot in ordered:
        if slot.base_gfn > cursor and cursor not in chosen:
            chosen.append(cursor)
        cursor = max(cursor, slot.end_gfn)
    if not covered(cursor) and cursor not in chosen:
        chosen.append(cursor)  # just above the highest slot
    return tuple(chosen[:count])


class Workload:
    """A deterministic access stream over one address space's slots.

    The same seed, mix and slots give the same stream.  `rebuild()` follows slot changes
    (the stream goes on from where it was; holes and weights are recomputed).
    """

    def __init__(
        self,
        slots: Iterable[MemorySlot],
        mix: str = DEFAULT_WORKLOAD,
        *,
        seed: int = 1,
        nr_vcpus: int = 2,
    ) -> None:
        if nr_vcpus < 1:
            raise ValueError("a workload needs at least one vCPU")
        self.mix = workload_mix(mix)
        self.seed = seed
        self.nr_vcpus = nr_vcpus
        self._rng = random.Random(seed)
        self._seq = 0
        self._last_slot: list[MemorySlot | None] = [None] * nr_vcpus
        self.rebuild(slots)

    def rebuild(self, slots: Iterable[MemorySlot]) -> None:
        """Recompute RAM weights and MMIO pages from the current slots."""
        self._slots = [s for s in sorted(slots, key=lambda s: s.base_gfn) if not s.invalid]
        self._cumulative = list(accumulate(s.npages for s in self._slots))
        self.mmio = mmio_gfns(self._slots)
        live = {s.id for s in self._slots}
        self._last_slot = [s if s is not None and s.id in live else None for s in self._last_slot]

    def set_mix(self, name: str) -> None:
        self.mix = workload_mix(name)

    def next(self) -> Access:
        rng = self._rng
        vcpu = self._seq % self.nr_vcpus
        self._seq += 1
        if not self._slots or (self.mmio and rng.random() < self.mix.mmio_ratio):
            gfn = self._pick_mmio(rng)
            return Access(self._seq, vcpu, gfn, MMIO)
        slot = self._pick_slot(rng, vcpu)
        gfn = slot.base_gfn + rng.randrange(slot.npages)
        return Access(self._seq, vcpu, gfn, RAM)

    def take(self, count: int) -> list[Access]:
        return [self.next() for _ in range(count)]

    def _pick_mmio(self, rng: random.Random) -> int:
        if not self.mmio:
            return 0
        # The first device pages are the hot ones (doorbell, LAPIC): a skewed choice.
        index = min(int(rng.expovariate(1.0)), len(self.mmio) - 1)
        return self.mmio[index]

    def _pick_slot(self, rng: random.Random, vcpu: int) -> MemorySlot:
        last = self._last_slot[vcpu]
        if last is not None and rng.random() < self.mix.locality:
            return last
        if self.mix.locality == 0.0:
            slot = self._slots[rng.randrange(len(self._slots))]  # uniform over slots
        else:
            point = rng.randrange(self._cumulative[-1])  # weighted by npages
            slot = self._slots[bisect_right(self._cumulative, point)]
        self._last_slot[vcpu] = slot
        return slot
