"""`linear`: the original memslot array, indexed by slot id and scanned in order (2007-2011).

`struct kvm_memslots { int nmemslots; u64 generation; struct kvm_memory_slot
memslots[KVM_MEMORY_SLOTS + KVM_PRIVATE_MEM_SLOTS]; }` — the memslot-search thread (kvm,
2011) shows the scan being removed from `memslot_id()`: `for (i = 0; i <
slots->nmemslots; ++i)`, testing `gfn >= base_gfn && gfn < base_gfn + npages` on every
entry, used or not.  `nmemslots` only ever grew (`if (slot_id >= slots->nmemslots)
slots->nmemslots = slot_id + 1;`), so a guest that once used slot 31 scans 32 entries on
every miss: Alex's "full 32 entries".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import AuditError
from ..memslots.memslot import MemorySlot
from .base import LookupStrategy, Probe, explain_scan

if TYPE_CHECKING:
    from .views import ArrayView


class LinearArray(LookupStrategy):
    """`memslots[]` by slot id, scanned from 0 to `nmemslots`."""

    name = "linear"
    era = "2007-2011"
    title = "unsorted array in slot-id order, linear scan"
    summary = (
        "The original array: every lookup scans entries 0..nmemslots-1, used or not; "
        "a miss (MMIO) always pays for all of them."
    )

    def __init__(self) -> None:
        # One (base, end, slot) per slot id; unused ids hold None.
        self._entries: list[tuple[int, int, MemorySlot] | None] = []
        self.nmemslots = 0
        self._count = 0

    def insert(self, slot: MemorySlot) -> None:
        if slot.id >= len(self._entries):
            self._entries.extend([None] * (slot.id + 1 - len(self._entries)))
        if self._entries[slot.id] is not None:
            raise AuditError(f"linear: slot id {slot.id} already in use")
        self._entries[slot.id] = (slot.base_gfn, slot.end_gfn, slot)
        self.nmemslots = max(self.nmemslots, slot.id + 1)  # memslots_updated()
        self._count += 1

    def erase(self, slot: MemorySlot) -> None:
        if slot.id >= len(self._entries) or self._entries[slot.id] is None:
            raise AuditError(f"linear: slot id {slot.id} not in use")
        self._entries[slot.id] = None  # the entry stays, zeroed; nmemslots does not shrink
        self._count -= 1

    def replace(self, old: MemorySlot, new: MemorySlot) -> None:
        self._entries[new.id] = (new.base_gfn, new.end_gfn, new)

    def search(self, gfn: int) -> MemorySlot | None:
        for entry in self._entries:
            if entry is not None and entry[0] <= gfn < entry[1]:
                return entry[2]
        return None

    def explain(self, gfn: int) -> tuple[tuple[Probe, ...], MemorySlot | None]:
        entries = self._entries
        scanned = (entries[i] if i < len(entries) else None for i in range(self.nmemslots))
        return explain_scan(scanned, gfn)  # every entry up to nmemslots, used or not

    def visits(self, gfn: int, found: MemorySlot | None) -> int:
        # The scan stops at memslots[found.id]; a miss walks all nmemslots entries.
        return self.nmemslots if found is None else found.id + 1

    def shape(self) -> ArrayView:
        from .views import ArrayView

        entries = tuple(
            (self._entries[i] or (0, 0, None))[2] if i < len(self._entries) else None
            for i in range(self.nmemslots)
        )
        return ArrayView(self.name, entries, "by slot id (memslots[id])")

    def slots(self) -> list[MemorySlot]:
        return [e[2] for e in self._entries if e is not None]

    def __len__(self) -> int:
        return self._count

    def audit(self) -> None:
        used = [e for e in self._entries if e is not None]
        if len(used) != self._count:
            raise AuditError(f"linear: {len(used)} entries used, {self._count} counted")
        for index, entry in enumerate(self._entries):
            if entry is None:
                continue
            base, end, slot = entry
            if slot.id != index or base != slot.base_gfn or end != slot.end_gfn:
                raise AuditError(f"linear: entry {index} holds stale slot {slot.id}")
            if index >= self.nmemslots:
                raise AuditError(f"linear: slot {index} beyond nmemslots {self.nmemslots}")
