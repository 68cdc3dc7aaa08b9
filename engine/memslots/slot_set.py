"""`MemslotSet`: the `struct kvm_memslots` of one address space, and its caches.

docs/kvm.md §1.2-§1.3.  A set holds the slots by id (`id_hash`), by gfn (`gfn_tree`, an
rbtree, which also answers the overlap check), the lookup structure under study (any
`LookupStrategy`; for `rbtree` it *is* the gfn tree), the `generation`, and the VM-wide
`last_used_slot` cache.  The kernel keeps two such sets per address space and swaps them;
the model keeps the active one and counts the swaps in `generation`.

By default every strategy's structure is kept and follows each update, so the same gfn
can be explained by all of them (the cost comparison of the memslot-search thread (kvm,
2011)).  With `track_all=False` only the gfn tree and the chosen structure are kept;
another one is built on demand by inserting the live slots in the order they were created
(for the wbtree, whose shape depends on history when weights tie, that may differ from a
tree that saw every update).
"""

from __future__ import annotations

from ..errors import AuditError
from ..lookup import LOOKUP_STRATEGIES, LookupStrategy, make_strategy
from ..lookup.base import CacheProbe, LookupTrace, Probe
from ..lookup.rbtree import RbTree
from .memslot import MemorySlot


def try_get_memslot(slot: MemorySlot | None, gfn: int) -> MemorySlot | None:
    """`try_get_memslot()`: `slot` if it holds `gfn`."""
    if slot is not None and slot.base_gfn <= gfn < slot.base_gfn + slot.npages:
        return slot
    return None


def _search(
    structure: LookupStrategy, gfn: int, with_probes: bool
) -> tuple[tuple[Probe, ...], MemorySlot | None]:
    if with_probes:
        return structure.explain(gfn)
    return (), structure.search(gfn)


_EMPTY_LRU: tuple[int, int, MemorySlot | None] = (0, 0, None)


class MemslotSet:
    """One address space's memslots: id hash, gfn rbtree, lookup structure, caches."""

    def __init__(self, as_id: int, lookup: str, track_all: bool = True) -> None:
        self.as_id = as_id
        self.generation = as_id  # kvm_create_vm(): "generations must be different"
        self.id_hash: dict[int, MemorySlot] = {}
        self.gfn_tree = RbTree()
        # last_used_slot as (base, end, slot); (0, 0, None) when empty, so the hot path is
        # one tuple unpack and one chained comparison.
        self.lru: tuple[int, int, MemorySlot | None] = _EMPTY_LRU
        self.use_last_used_slot = True
        self._structures: dict[str, LookupStrategy] = {"rbtree": self.gfn_tree}
        self._created: dict[int, int] = {}  # slot id -> creation sequence number
        self._next_seq = 0
        if track_all:
            for name in LOOKUP_STRATEGIES:
                self.structure(name)
        self.lookup: LookupStrategy = self.structure(lookup)

    @property
    def last_used_slot(self) -> MemorySlot | None:
        """`slots->last_used_slot`: the VM-wide cache of the last slot found."""
        return self.lru[2]

    @last_used_slot.setter
    def last_used_slot(self, slot: MemorySlot | None) -> None:
        self.lru = _EMPTY_LRU if slot is None else (slot.base_gfn, slot.end_gfn, slot)

    # -- structures -----------------------------------------------------------------

    def structure(self, name: str) -> LookupStrategy:
        """The named lookup structure over this set, built now if not yet attached."""
        found = self._structures.get(name)
        if found is None:
            found = make_strategy(name)
            for slot in sorted(self.id_hash.values(), key=lambda s: self._created[s.id]):
                found.insert(slot)
            self._structures[name] = found
        return found

    def set_lookup(self, name: str) -> None:
        self.lookup = self.structure(name)

    def structures(self) -> list[LookupStrategy]:
        return list(self._structures.values())

    # -- updates (kvm_replace_memslot) ----------------------------------------------

    def install(self, slot: MemorySlot) -> None:
        self.id_hash[slot.id] = slot
        self._created[slot.id] = self._next_seq
        self._next_seq += 1
        for structure in self._structures.values():
            structure.insert(slot)

    def remove(self, slot: MemorySlot) -> None:
        del self.id_hash[slot.id]
        del self._created[slot.id]
        for structure in self._structures.values():
            structure.erase(slot)
        if self.last_used_slot is slot:
            self.last_used_slot = None

    def replace(self, old: MemorySlot, new: MemorySlot) -> None:
        """Swap `old` for `new`; `last_used_slot` follows to the new slot, as in the kernel."""
        self.id_hash[new.id] = new
        for structure in self._structures.values():
            structure.replace(old, new)
        if self.last_used_slot is old:
            self.last_used_slot = new

    def overlapping(self, slot_id: int, start: int, end: int) -> MemorySlot | None:
        """`kvm_check_memslot_overlap()`: another slot inside `[start, end)`, if any."""
        for slot in self.gfn_tree.in_range(start, end):
            if slot.id != slot_id:
                return slot
        return None

    # -- lookups ----------------------------------------------------------------------

    def gfn_to_memslot(self, gfn: int) -> MemorySlot | None:
        """`____gfn_to_memslot(slots, gfn, approx=false)`: last_used_slot, then search."""
        base, end, cached = self.lru
        if base <= gfn < end:
            return cached
        slot = self.lookup.search(gfn)
        if slot is not None and self.use_last_used_slot:
            self.last_used_slot = slot
        return slot

    def explain(
        self, gfn: int, strategy: str | None = None, *, with_probes: bool = True
    ) -> LookupTrace:
        """`____gfn_to_memslot` step by step: the VM-wide cache, then the structure.
        `with_probes=False` records the caches only and searches bare (fast)."""
        structure = self.structure(strategy) if strategy else self.lookup
        cache: tuple[CacheProbe, ...] = ()
        if self.use_last_used_slot:
            cached = try_get_memslot(self.last_used_slot, gfn)
            cache = (CacheProbe("vm", self.last_used_slot, cached is not None),)
            if cached is not None:
                return LookupTrace(gfn, self.as_id, structure.name, cache, (), cached)
        probes, slot = _search(structure, gfn, with_probes)
        if slot is not None and self.use_last_used_slot:
            self.last_used_slot = slot
        return LookupTrace(gfn, self.as_id, structure.name, cache, probes, slot)

    def search_explained(
        self, gfn: int, strategy: str | None = None, *, with_probes: bool = True
    ) -> LookupTrace:
        """`search_memslots()` alone, no cache (what the per-vCPU path falls back to)."""
        structure = self.structure(strategy) if strategy else self.lookup
        probes, slot = _search(structure, gfn, with_probes)
        return LookupTrace(gfn, self.as_id, structure.name, (), probes, slot)

    # -- listing and audit ------------------------------------------------------------

    def slots(self) -> list[MemorySlot]:
        """Slots by base_gfn (the gfn tree in order)."""
        return self.gfn_tree.slots()

    def audit(self) -> None:
        """Every structure holds exactly the slots of the id hash; caches point at live slots."""
        expected = {slot.id: slot for slot in self.id_hash.values()}
        for name, structure in self._structures.items():
            structure.audit()
            held = {slot.id: slot for slot in structure.slots()}
            if held != expected or len(structure) != len(expected):
                raise AuditError(f"as {self.as_id}: {name} holds other slots than the id hash")
        for slot_id, slot in self.id_hash.items():
            if slot.id != slot_id or slot.as_id != self.as_id:
                raise AuditError(f"as {self.as_id}: id hash entry {slot_id} is slot {slot.id}")
        if self.last_used_slot is not None and (
            self.id_hash.get(self.last_used_slot.id) is not self.last_used_slot
        ):
            raise AuditError(f"as {self.as_id}: last_used_slot points at a dead slot")
