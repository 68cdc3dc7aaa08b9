"""A memslot array kept sorted by a key, updated by one insertion (the shared part of the
size-sorted (2011) and binary-search (2014) strategies).

The kernel moved slots within `memslots[]` on every update (heap `sort()` in 2011, Igor
Mammedov's single insertion pass in 2014): O(n) element moves.  Here the moves are one
C-level `list.insert`/`del`, found with `bisect` in O(log n).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from ..errors import AuditError
from ..memslots.memslot import MemorySlot
from .base import LookupStrategy

Key = tuple[int, int]


class SortedSlotArray:
    """`entries[i] = (base, end, slot)` in key order, with the keys alongside for bisect."""

    def __init__(self, key: Callable[[MemorySlot], Key], what: str) -> None:
        self.key = key
        self.what = what
        self.keys: list[Key] = []
        self.entries: list[tuple[int, int, MemorySlot]] = []

    def insert(self, slot: MemorySlot) -> None:
        key = self.key(slot)
        index = bisect_left(self.keys, key)
        if index < len(self.keys) and self.keys[index] == key:
            raise AuditError(f"{self.what}: duplicate key for slot {slot.id}")
        self.keys.insert(index, key)
        self.entries.insert(index, (slot.base_gfn, slot.end_gfn, slot))

    def erase(self, slot: MemorySlot) -> None:
        index = self.index_of(slot)
        del self.keys[index]
        del self.entries[index]

    def replace(self, old: MemorySlot, new: MemorySlot) -> None:
        if self.key(old) != self.key(new):
            self.erase(old)
            self.insert(new)
            return
        index = self.index_of(old)
        self.entries[index] = (new.base_gfn, new.end_gfn, new)

    def index_of(self, slot: MemorySlot) -> int:
        key = self.key(slot)
        index = bisect_left(self.keys, key)
        if index >= len(self.keys) or self.keys[index] != key:
            raise AuditError(f"{self.what}: slot {slot.id} not in the array")
        return index

    def slots(self) -> list[MemorySlot]:
        return [entry[2] for entry in self.entries]

    def audit(self) -> None:
        if len(self.keys) != len(self.entries):
            raise AuditError(f"{self.what}: keys and entries differ in length")
        for i, (key, (base, end, slot)) in enumerate(zip(self.keys, self.entries, strict=True)):
            if key != self.key(slot) or base != slot.base_gfn or end != slot.end_gfn:
                raise AuditError(f"{self.what}: entry {i} (slot {slot.id}) is stale")
            if i and self.keys[i - 1] >= key:
                raise AuditError(f"{self.what}: entries {i - 1} and {i} out of order")


class SortedArrayStrategy(LookupStrategy):
    """A strategy over one `SortedSlotArray`; subclasses give the key, search and explain."""

    @staticmethod
    def sort_key(slot: MemorySlot) -> Key:
        raise NotImplementedError

    def __init__(self) -> None:
        self.array = SortedSlotArray(self.sort_key, self.name)

    def insert(self, slot: MemorySlot) -> None:
        self.array.insert(slot)

    def erase(self, slot: MemorySlot) -> None:
        self.array.erase(slot)

    def replace(self, old: MemorySlot, new: MemorySlot) -> None:
        self.array.replace(old, new)

    def slots(self) -> list[MemorySlot]:
        return self.array.slots()

    def __len__(self) -> int:
        return len(self.array.entries)

    def audit(self) -> None:
        self.array.audit()
