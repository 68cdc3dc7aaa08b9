"""`size-sorted`: slots sorted by `npages`, largest first, scanned linearly (~Dec 2011).

Avi Kivity in the memslot-search thread (kvm, 2011): "If we optimized the linear list
we'd sort it by size, descending, and limit it by the number of instantiated slots, which
I think would beat the tree."  The kernel then kept `memslots[]` sorted with `sort()` +
`cmp_memslot` (npages only) and an `id_to_index[]` map, and `kvm_for_each_memslot`
stopped at the first unused entry (docs/kvm.md §1.6).  RAM hits end at entry 0 or 1; a
miss scans every used slot.  Equal sizes are ordered by slot id here (the kernel's heap
sort left ties in an unspecified order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..memslots.memslot import MemorySlot
from .base import Probe, explain_scan
from .sorted_array import Key, SortedArrayStrategy

if TYPE_CHECKING:
    from .views import ArrayView


def _size_key(slot: MemorySlot) -> Key:
    return (-slot.npages, slot.id)


class SizeSortedArray(SortedArrayStrategy):
    """Used slots by npages descending; lookup scans until a slot holds the gfn."""

    name = "size-sorted"
    era = "2011-2014"
    title = "array sorted by npages (largest first), linear scan"
    summary = (
        "Xiao Guangrong's sort by size: the big RAM slots come first, so hits are cheap; "
        "misses still scan every used slot (O(n))."
    )

    sort_key = staticmethod(_size_key)

    def search(self, gfn: int) -> MemorySlot | None:
        for base, end, slot in self.array.entries:
            if base <= gfn < end:
                return slot
        return None

    def explain(self, gfn: int) -> tuple[tuple[Probe, ...], MemorySlot | None]:
        return explain_scan(self.array.entries, gfn)  # the used slots, largest first

    def visits(self, gfn: int, found: MemorySlot | None) -> int:
        return len(self.array.entries) if found is None else self.array.index_of(found) + 1

    def shape(self) -> ArrayView:
        from .views import ArrayView

        return ArrayView(self.name, tuple(self.array.slots()), "npages descending")
