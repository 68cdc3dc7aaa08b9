"""The one small interface every memslot lookup structure implements.

KVM has searched memslots five ways over the years (docs/kvm.md §1.6, the memslot-search
thread (kvm, 2011)): an unsorted array, an array sorted by size, a sorted array with
binary search, Alex Williamson's weight-balanced tree (RFC, not merged) and today's gfn
rbtree.  Each is a `LookupStrategy`: it is told about slot inserts, erases and
replacements, answers `search(gfn)` bare (for speed), and can `explain(gfn)` a lookup as
the list of slots or tree nodes it touched (for animation and cost tables).  `shape()`
gives a read-only view of the structure for drawing and export (views.py, imported only
when drawn, so that building a VM does not load it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from ..memslots.memslot import MemorySlot

if TYPE_CHECKING:
    from .views import Shape

# Probe outcomes.
HIT = "hit"
GO_LEFT = "left"  # tree: gfn < base_gfn
GO_RIGHT = "right"  # tree: gfn >= base_gfn + npages
LOWER = "lower"  # binary search: continue in the lower half of the array
HIGHER = "higher"  # binary search: continue in the upper half
NEXT = "next"  # linear scan: not here, try the next entry
EMPTY = "empty"  # linear scan over the 2011 array: an unused entry (npages == 0)
MISS = "miss"  # binary search: the final range check on memslots[start] fails


class Probe(NamedTuple):
    """One slot or node a lookup looked at: the slot (None: an empty array entry), its
    position (array index, or depth in the tree, root = 0), the gfn comparisons made there
    (short-circuit counted as the C code does), and the outcome (HIT, GO_LEFT, GO_RIGHT,
    LOWER, HIGHER, NEXT, EMPTY, MISS)."""

    slot: MemorySlot | None
    position: int
    comparisons: int
    outcome: str


class CacheProbe(NamedTuple):
    """A look at one of the caches in front of the structure (docs/kvm.md §1.3): `cache`
    is "vcpu" (vcpu->last_used_slot) or "vm" (slots->last_used_slot); `note` for example
    "generation changed: cache reset"."""

    cache: str
    slot: MemorySlot | None
    hit: bool
    note: str = ""


class LookupTrace(NamedTuple):
    """A lookup that explains itself: what it looked at, in order, and what it found."""

    gfn: int
    as_id: int
    strategy: str
    cache_probes: tuple[CacheProbe, ...]
    probes: tuple[Probe, ...]
    slot: MemorySlot | None

    @property
    def cache_hit(self) -> bool:
        return any(c.hit for c in self.cache_probes)

    @property
    def found(self) -> bool:
        return self.slot is not None

    @property
    def visited(self) -> int:
        """Slots or nodes of the structure looked at (cache checks not counted)."""
        return len(self.probes)

    @property
    def comparisons(self) -> int:
        return sum(p.comparisons for p in self.probes) + sum(
            2 if c.slot is not None else 0 for c in self.cache_probes
        )


Entry = tuple[int, int, MemorySlot]  # (base_gfn, base_gfn + npages, slot) of an array


def explain_scan(
    entries: Iterable[Entry | None], gfn: int
) -> tuple[tuple[Probe, ...], MemorySlot | None]:
    """A linear scan of a memslot array, one `Probe` per entry, as the 2007-2011 loop
    (`gfn >= base_gfn && gfn < base_gfn + npages` on each entry) and the size-sorted
    `kvm_for_each_memslot` ran it: stop at the slot that holds `gfn`.  A None entry is an
    unused, zeroed one (base_gfn 0, npages 0): `gfn >= 0` holds, `gfn < 0` fails."""
    probes: list[Probe] = []
    for index, entry in enumerate(entries):
        if entry is None:
            probes.append(Probe(None, index, 2, EMPTY))
            continue
        base, end, slot = entry
        if base <= gfn < end:
            probes.append(Probe(slot, index, 2, HIT))
            return tuple(probes), slot
        probes.append(Probe(slot, index, 1 if gfn < base else 2, NEXT))
    return tuple(probes), None


class LookupStrategy(ABC):
    """A memslot lookup structure for one address space."""

    name: ClassVar[str]
    era: ClassVar[str]
    title: ClassVar[str]
    summary: ClassVar[str]

    @abstractmethod
    def insert(self, slot: MemorySlot) -> None:
        """Add a slot that overlaps no other."""

    @abstractmethod
    def erase(self, slot: MemorySlot) -> None:
        """Remove a slot (the same object that was inserted, or one with the same id)."""

    def replace(self, old: MemorySlot, new: MemorySlot) -> None:
        """Swap `old` for `new` (same id); structures with an O(1) path override this."""
        self.erase(old)
        self.insert(new)

    @abstractmethod
    def search(self, gfn: int) -> MemorySlot | None:
        """Bare lookup: the slot holding `gfn`, or None."""

    @abstractmethod
    def explain(self, gfn: int) -> tuple[tuple[Probe, ...], MemorySlot | None]:
        """The same lookup, recording every slot or node looked at."""

    def visits(self, gfn: int, found: MemorySlot | None) -> int:
        """How many slots or nodes `explain(gfn)` would look at, given the slot it finds
        (`found`, known from any structure).  The cost tables call this for every
        strategy on every lookup, so structures override it with an O(1)/O(log n) count."""
        return len(self.explain(gfn)[0])

    @abstractmethod
    def shape(self) -> Shape:
        """A read-only view of the structure for drawing and export."""

    @abstractmethod
    def audit(self) -> None:
        """Raise `AuditError` if an invariant is broken."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of slots held."""

    @abstractmethod
    def slots(self) -> list[MemorySlot]:
        """All slots held, in no particular order."""
