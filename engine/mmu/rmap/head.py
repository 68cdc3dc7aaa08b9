"""`kvm_rmap_head` and its `pte_list_desc` chain: x86 KVM's reverse map from a gfn to its
sptes, with `pte_list_add`, `pte_list_remove`, `pte_list_count`, the zap and `__rmap_add`.

docs/kvm.md §3 (arch/x86/kvm/mmu/mmu.c).  `kvm_rmap_head.val` is 0 (empty), the one
`u64 *sptep` (bit 0 clear), or a `pte_list_desc` address | 1.  An sptep is a plain int:
an spte's host physical address, nonzero and 8-byte aligned.  The eras, by name:

* ``"3"`` (to 2021): `{ u64 *sptes[3]; more; }`, 32 bytes, NULL-terminated.  Add walks
  to the first desc whose last slot is free (appending one if all are full), summing
  the count on the way, so a partial desc mid-chain makes the returned count short.
  Remove fills the hole with the last entry *of the same desc* (not of the chain, as
  the brief had it) and unlinks a desc that empties.  The zap loops `rmap_get_first` +
  `pte_list_remove`.  VERIFIED: the lines Peter Xu's counter patch removed (2021),
  with Li RongQing's 2020 count fix.
* ``"15"``: Peter Xu's v2 7/9 (the PTE_LIST_EXT thread): the same code, `PTE_LIST_EXT
  15`, 128 bytes.  In mainline as dc1cff969101 ("KVM: X86: MMU: Tune PTE_LIST_EXT to be
  bigger"), which 13236e25ebab made 14 in the same (5.15) merge window: no release had 15.
* ``"14"`` (5.15-6.3, 13236e25ebab): `{ more; u64 spte_count; u64 *sptes[14]; }`, the
  same walk and same-desc removal driven by `spte_count`; count walks the chain; the zap
  frees desc by desc (`pte_list_destroy`).  VERIFIED (v3 6/7 mail, 9/9 mail).
* ``"6.4"`` (default; Lai Jiangshan, merged for 6.4): `u32 spte_count, tail_count`.  Only
  the head may be partial; a full head gets a new head in front (`tail_count` = old
  total); removal fills the hole from the head's last entry; count is O(1).  VERIFIED
  (kvm-x86 mmu.c, patch mail).

In every era 2 -> 1 entries keeps the desc: `val` never goes back to a bare sptep.  The
model refuses a duplicate add (KVM would list it twice), looking for it in the chain as
`pte_list_remove` would: no second index beside the descs, whose size is what an rmap
costs.

The desc's layout per era is in pte_list_desc.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ...errors import AuditError
from .pte_list_desc import DEFAULT_ERA, ERAS, PteListDesc, PteListEra, check_sptep, desc_cache_lines

RMAP_RECYCLE_THRESHOLD = 1000  # __rmap_add: zap the whole rmap beyond this many sptes


@dataclass(slots=True)
class RmapCounters:
    """What the list operations cost so far: allocations, frees, moves, reads."""

    desc_allocs: int = 0
    desc_frees: int = 0
    entries_moved: int = 0  # sptes moved into a hole by pte_list_desc_remove_entry
    add_descs_visited: int = 0  # descs whose fields pte_list_add read
    add_slots_read: int = 0  # sptes[] slots read by pte_list_add (NULL scans)
    remove_descs_visited: int = 0
    remove_slots_read: int = 0


def rmap_add_would_recycle(count_before: int) -> bool:
    """`__rmap_add`: `if (rmap_count > RMAP_RECYCLE_THRESHOLD)` zap the whole rmap."""
    return count_before > RMAP_RECYCLE_THRESHOLD


class KvmRmapHead:
    """`struct kvm_rmap_head` of one era: empty, a single sptep, or a desc chain."""

    __slots__ = ("_head", "_single", "era", "stats")

    def __init__(self, era: str | PteListEra = DEFAULT_ERA) -> None:
        self.era = era if isinstance(era, PteListEra) else ERAS[era]
        self._single = 0  # val when bit 0 is clear
        self._head: PteListDesc | None = None  # val & ~1 when bit 0 is set
        self.stats = RmapCounters()

    # -- val ------------------------------------------------------------------------

    @property
    def val(self) -> int:
        """`rmap_head->val` as the kernel stores it."""
        return self._head.addr | 1 if self._head is not None else self._single

    @property
    def is_empty(self) -> bool:
        return self._head is None and not self._single

    @property
    def is_single(self) -> bool:
        return self._head is None and bool(self._single)

    @property
    def is_many(self) -> bool:
        return self._head is not None

    @property
    def descs(self) -> tuple[PteListDesc, ...]:
        """The desc chain from `val & ~1`, following `more`."""
        chain: dict[int, PteListDesc] = {}
        desc = self._head
        while desc is not None:
            if chain.setdefault(id(desc), desc) is not desc:
                raise AuditError("rmap: the desc chain loops")
            desc = desc.more
        return tuple(chain.values())

    def __contains__(self, sptep: object) -> bool:
        if self._head is None:
            return bool(self._single) and sptep == self._single
        if sptep == 0:  # an empty slot, never an sptep
            return False
        desc: PteListDesc | None = self._head
        while desc is not None:  # the chain as `_find` walks it (`audit` checks for loops)
            if sptep in desc.sptes:
                return True
            desc = desc.more
        return False

    def first(self) -> int:
        """`rmap_get_first`'s spte (0 when empty): the head desc's first slot."""
        return self._head.sptes[0] if self._head is not None else self._single

    def __iter__(self) -> Iterator[int]:
        """`for_each_rmap_spte`: the head desc first, slots in order, then `more`."""
        if self._single:
            yield self._single
        for desc in self.descs:
            yield from desc.entries()

    # -- pte_list_add ---------------------------------------------------------------

    def add(self, sptep: int) -> int:
        """`pte_list_add`: link `sptep`; returns the count before adding, as KVM does."""
        check_sptep(sptep)
        if sptep in self:
            raise AuditError(f"pte_list_add: sptep {sptep:#x} is already in this rmap")
        if self.is_empty:
            self._single = sptep
            return 0
        if self._head is None:
            return self._one_to_many(sptep)
        if self.era.has_tail_count:
            return self._add_to_head(self._head, sptep)
        return self._add_walking(self._head, sptep)

    def _alloc(self) -> PteListDesc:
        """`kvm_mmu_memory_cache_alloc(mmu_pte_list_desc_cache)`: a zeroed desc."""
        self.stats.desc_allocs += 1
        return PteListDesc(self.era)

    def _free(self, desc: PteListDesc) -> None:
        """`mmu_free_pte_list_desc`."""
        self.stats.desc_frees += 1
        desc.more = None

    def _one_to_many(self, sptep: int) -> int:
        desc = self._alloc()
        desc.sptes[0], desc.sptes[1] = self._single, sptep
        if self.era.has_spte_count:
            desc.spte_count = 2
        self._single, self._head = 0, desc
        return 1

    def _is_full(self, desc: PteListDesc) -> bool:
        if self.era.has_spte_count:
            return desc.spte_count == self.era.ext
        self.stats.add_slots_read += 1  # desc->sptes[PTE_LIST_EXT-1]
        return bool(desc.sptes[-1])

    def _add_walking(self, desc: PteListDesc, sptep: int) -> int:
        """Eras 3/15/14: walk past full descs; append a desc when the last is full."""
        count = 0
        self.stats.add_descs_visited += 1
        while self._is_full(desc):
            count += self.era.ext
            if desc.more is None:
                desc.more = self._alloc()
                desc = desc.more
                break
            desc = desc.more
            self.stats.add_descs_visited += 1
        used = desc.used()
        if not self.era.has_spte_count:
            self.stats.add_slots_read += used + 1  # for (i = 0; desc->sptes[i]; ++i)
        desc.sptes[used] = sptep
        if self.era.has_spte_count:
            desc.spte_count = used + 1
        return count + used

    def _add_to_head(self, head: PteListDesc, sptep: int) -> int:
        """Era 6.4: count from the head; a full head gets a new head in front of it."""
        count = head.tail_count + head.spte_count
        self.stats.add_descs_visited += 1
        if head.spte_count == self.era.ext:
            new = self._alloc()
            new.more, new.tail_count = head, count
            self._head = head = new
        head.sptes[head.spte_count] = sptep
        head.spte_count += 1
        return count

    # -- pte_list_remove ------------------------------------------------------------

    def remove(self, sptep: int) -> None:
        """`pte_list_remove`; a missing sptep is KVM_BUG_ON_DATA_CORRUPTION."""
        if self._head is None:
            if self._single != sptep:
                raise AuditError(f"pte_list_remove: {sptep:#x} not in rmap {self._single:#x}")
            self._single = 0
        else:
            desc, i, prev = self._find(sptep)
            if self.era.has_tail_count:
                self._remove_entry_from_head(desc, i)
            else:
                self._remove_entry_in_desc(desc, i, prev)

    def _find(self, sptep: int) -> tuple[PteListDesc, int, PteListDesc | None]:
        desc, prev = self._head, None
        while desc is not None:
            self.stats.remove_descs_visited += 1
            used = desc.used()
            if sptep in desc.sptes[:used]:
                i = desc.sptes.index(sptep)
                self.stats.remove_slots_read += i + 1
                return desc, i, prev
            null_read = not self.era.has_spte_count and used < self.era.ext
            self.stats.remove_slots_read += used + int(null_read)
            prev, desc = desc, desc.more
        raise AuditError(f"pte_list_remove: sptep {sptep:#x} not in rmap (many->many)")

    def _remove_entry_in_desc(self, desc: PteListDesc, i: int, prev: PteListDesc | None) -> None:
        """Eras 3/15/14 `pte_list_desc_remove_entry`: the desc's own last entry fills i."""
        j = desc.used() - 1
        if not self.era.has_spte_count:
            self.stats.remove_slots_read += self.era.ext - j  # scan down from the top
        self.stats.entries_moved += int(j != i)
        desc.sptes[i], desc.sptes[j] = desc.sptes[j], 0
        if self.era.has_spte_count:
            desc.spte_count -= 1
        if j:
            return
        if prev is not None:
            prev.more = desc.more
        else:
            self._head = desc.more  # None when it was the only desc: val = 0
        self._free(desc)

    def _remove_entry_from_head(self, desc: PteListDesc, i: int) -> None:
        """Era 6.4 `pte_list_desc_remove_entry`: the head's last entry fills i."""
        head = self._head
        assert head is not None
        j = head.spte_count - 1
        if j < 0:
            raise AuditError("pte_list_desc_remove_entry: empty head desc")
        self.stats.entries_moved += int(desc is not head or j != i)
        desc.sptes[i], head.sptes[j] = head.sptes[j], 0
        head.spte_count -= 1
        if head.spte_count:
            return
        self._head = head.more
        self._free(head)

    # -- count, zap, costs ----------------------------------------------------------

    def count(self) -> int:
        """`pte_list_count`: O(1) in era 6.4, a walk of the chain before."""
        if self._head is None:
            return 1 if self._single else 0
        if self.era.has_tail_count:
            return self._head.tail_count + self._head.spte_count
        return sum(desc.used() for desc in self.descs)

    def descs_read_by_count(self) -> int:
        """Descs `pte_list_count` reads: the head alone in 6.4, every desc before."""
        if self._head is None:
            return 0
        return 1 if self.era.has_tail_count else len(self.descs)

    def clear(self) -> list[int]:
        """Zap every spte of the rmap and free the descs; returns the sptes in zap order.

        Eras 14/6.4: `kvm_zap_all_rmap_sptes` (`pte_list_destroy` in 5.15) walks the chain
        and frees each desc.  Eras 3/15: `kvm_zap_rmapp` looped `rmap_get_first` +
        `pte_list_remove`, so each removal moves an entry (the order shows it).
        """
        if not self.era.has_spte_count:
            zapped: list[int] = []
            while not self.is_empty:
                zapped.append(next(iter(self)))
                self.remove(zapped[-1])
            return zapped
        zapped = list(self)
        for desc in self.descs:
            self._free(desc)
        self._single, self._head = 0, None
        return zapped

    def memory_bytes(self) -> int:
        """Bytes of `pte_list_desc` held (the head word lives in the memslot's array)."""
        return len(self.descs) * self.era.sizeof

    def cache_lines_touched_by_walk(self) -> int:
        """Desc cache lines a full walk touches (see `desc_cache_lines`)."""
        return sum(desc_cache_lines(self.era, desc.used()) for desc in self.descs)

    # -- audit ----------------------------------------------------------------------

    def audit(self) -> None:
        """Encoding, per-era desc invariants, counts, and no duplicate sptep."""
        descs = self.descs
        if self._single and descs:
            raise AuditError("rmap: both a single sptep and a desc chain")
        for k, desc in enumerate(descs):
            self._audit_desc(desc, is_head=k == 0)
            if self.era.has_tail_count:
                tail = sum(d.spte_count for d in descs[k + 1 :])
                if desc.tail_count != tail:
                    raise AuditError(f"rmap: desc {k} tail_count {desc.tail_count} != {tail}")
        sptes = list(self)
        for sptep in sptes:
            check_sptep(sptep)
        if len(set(sptes)) != len(sptes):
            raise AuditError("rmap: duplicate sptep")
        if self.count() != len(sptes):
            raise AuditError(f"rmap: pte_list_count {self.count()} != {len(sptes)} sptes")
        if self.stats.desc_allocs - self.stats.desc_frees != len(descs):
            raise AuditError("rmap: desc allocations minus frees != descs in the chain")

    def _audit_desc(self, desc: PteListDesc, is_head: bool) -> None:
        if desc.era is not self.era or len(desc.sptes) != self.era.ext:
            raise AuditError("rmap: desc of another era")
        prefix = next((i for i, s in enumerate(desc.sptes) if not s), self.era.ext)
        if prefix == 0 or any(desc.sptes[prefix:]):
            raise AuditError(f"rmap: desc sptes {desc.sptes} not a nonempty packed prefix")
        if self.era.has_spte_count and desc.spte_count != prefix:
            raise AuditError(f"rmap: spte_count {desc.spte_count} != {prefix} entries")
        if not self.era.has_spte_count and (desc.spte_count or desc.tail_count):
            raise AuditError("rmap: counters set in an era without them")
        if self.era.has_tail_count and not is_head and prefix != self.era.ext:
            raise AuditError(f"rmap: tail desc holds {prefix} < {self.era.ext} entries")


RmapHead = KvmRmapHead


def rmap_add(rmap_head: KvmRmapHead, sptep: int) -> list[int]:
    """`__rmap_add`: add, then zap the whole rmap if it already held more than 1000.

    Returns the sptes zapped (the new one included), or [] when nothing was recycled.
    Before 6.4 the count `pte_list_add` returns can fall short of the true total.
    """
    if rmap_add_would_recycle(rmap_head.add(sptep)):
        return rmap_head.clear()
    return []
