"""`binary`: slots sorted by `base_gfn`, highest first, found by binary search (Dec 2014).

Igor Mammedov, "KVM: change memslot sorting rule from size to GFN" and "use binary
search" (v3.19, docs/kvm.md §1.6), after Xiao Guangrong's 2011 attempt in the
memslot-search thread (kvm, 2011) (PATCH 4/7, to which Avi answered "a binary search ...
introduces a lot of branches which may be mispredicted").  `search_memslots()` of that
era narrows `[start, end)` to the first entry with `base_gfn <= gfn`, comparing only
`base_gfn` on the way down, then makes one range check on `memslots[start]`; when `start
== used_slots` that entry is the zeroed one past the end and the check fails.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

from ..memslots.memslot import MemorySlot
from .base import EMPTY, HIGHER, HIT, LOWER, MISS, Probe
from .sorted_array import Key, SortedArrayStrategy

if TYPE_CHECKING:
    from .views import ArrayView


def _gfn_desc_key(slot: MemorySlot) -> Key:
    return (-slot.base_gfn, 0)


class BinarySearchArray(SortedArrayStrategy):
    """Used slots by base_gfn descending; binary search then one range check."""

    name = "binary"
    era = "2014-2021"
    title = "array sorted by base_gfn (highest first), binary search"
    summary = (
        "Igor Mammedov's v3.19 search: about log2(n) base_gfn comparisons for hits and "
        "misses alike, then one range check."
    )

    sort_key = staticmethod(_gfn_desc_key)

    def search(self, gfn: int) -> MemorySlot | None:
        # The same narrowing as the kernel loop, run by bisect over the negated keys.
        start = bisect_left(self.array.keys, (-gfn, 0))
        entries = self.array.entries
        if start < len(entries):
            base, end, slot = entries[start]
            if base <= gfn < end:
                return slot
        return None

    def explain(self, gfn: int) -> tuple[tuple[Probe, ...], MemorySlot | None]:
        entries = self.array.entries
        probes: list[Probe] = []
        start, end = 0, len(entries)
        while start < end:
            mid = start + (end - start) // 2
            if gfn >= entries[mid][0]:
                probes.append(Probe(entries[mid][2], mid, 1, LOWER))
                end = mid
            else:
                probes.append(Probe(entries[mid][2], mid, 1, HIGHER))
                start = mid + 1
        if start == len(entries):
            probes.append(Probe(None, start, 2, EMPTY))
            return tuple(probes), None
        base, end_gfn, slot = entries[start]
        if base <= gfn < end_gfn:
            probes.append(Probe(slot, start, 2, HIT))
            return tuple(probes), slot
        probes.append(Probe(slot, start, 1 if gfn < base else 2, MISS))
        return tuple(probes), None

    def visits(self, gfn: int, found: MemorySlot | None) -> int:
        # The halving loop's length depends only on where it ends, then one range check.
        bases = self.array.keys
        start, end, steps, key = 0, len(bases), 1, -gfn
        while start < end:
            mid = start + (end - start) // 2
            if bases[mid][0] >= key:  # gfn >= base_gfn
                end = mid
            else:
                start = mid + 1
            steps += 1
        return steps

    def shape(self) -> ArrayView:
        from .views import ArrayView

        return ArrayView(self.name, tuple(self.array.slots()), "base_gfn descending")
