"""`kvm_rmap_head` and `pte_list_desc`: x86 KVM's reverse map from a gfn to its sptes.

kvm-reference §3 (arch/x86/kvm/mmu/mmu.c).  `kvm_rmap_head.val` is 0 (empty), the one
`u64 *sptep` (bit 0 clear), or a `pte_list_desc` address | 1.  An sptep is a plain int:
an spte's host physical address, nonzero and 8-byte aligned.  The eras, by name:

* ``"3"`` (to 2021): `{ u64 *sptes[3]; more; }`, 32 bytes, NULL-terminated.  Add walks
  to the first desc whose last slot is free (appending one if all are full), summing
  the count on the way, so a partial desc mid-chain makes the returned count short.
  Remove fills the hole with the last entry *of the same desc* (not of the chain, as
  the brief had it) and unlinks a desc that empties.  The zap loops `rmap_get_first` +
  `pte_list_remove`.  VERIFIED: the lines Peter Xu's counter patch removed (2021),
  with Li RongQing's 2020 count fix.
* ``"15"``: Peter Xu's v2 7/9 (seed 002): the same code, `PTE_LIST_EXT 15`, 128 bytes.
  VERIFIED as posted; that a release shipped 15 is UNVERIFIED (Sean: Paolo made it 14).
* ``"14"`` (5.15-6.3, 13236e25ebab): `{ more; u64 spte_count; u64 *sptes[14]; }`, the
  same walk and same-desc removal driven by `spte_count`; count walks the chain; the zap
  frees desc by desc (`pte_list_destroy`).  VERIFIED (v3 6/7 mail, 9/9 mail).
* ``"6.4"`` (default; Lai Jiangshan, merged for 6.4): `u32 spte_count, tail_count`.  Only
  the head may be partial; a full head gets a new head in front (`tail_count` = old
  total); removal fills the hole from the head's last entry; count is O(1).  VERIFIED
  (kvm-x86 mmu.c, patch mail).

In every era 2 -> 1 entries keeps the desc: `val` never goes back to a bare sptep.  The
model adds a set of members to refuse a duplicate add (KVM would list it twice).

`RmapVal` and the `rmap_val_*` functions store `val` as the kernel does, for callers that
hold many rmaps (the fault path): absent is an empty head, a bare int is the single
sptep, and a `KvmRmapHead` is made only when a second sptep arrives (then it holds a
desc, and keeps it down to one entry, as the kernel does).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeAlias

from ..errors import AuditError

CACHE_LINE = 64
RMAP_RECYCLE_THRESHOLD = 1000  # __rmap_add: zap the whole rmap beyond this many sptes
DEFAULT_ERA = "6.4"
_PTR = 8  # sizeof(u64 *)


@dataclass(frozen=True, slots=True)
class PteListEra:
    """One era of `struct pte_list_desc`: `PTE_LIST_EXT`, layout and algorithm."""

    name: str
    ext: int  # PTE_LIST_EXT
    layout: str  # the C struct
    sizeof: int  # bytes
    more_offset: int
    sptes_offset: int
    spte_count_offset: int | None  # None: no counter, sptes[] is NULL-terminated
    tail_count_offset: int | None  # None: append at the chain's end, not a new head

    @property
    def has_spte_count(self) -> bool:
        return self.spte_count_offset is not None

    @property
    def has_tail_count(self) -> bool:
        return self.tail_count_offset is not None


def _member_name(decl: str) -> str:
    return decl.split()[-1].lstrip("*").split("[")[0]


def _member_size(decl: str) -> int:
    """sizeof a C member: pointers and u64 take 8 bytes, u32 takes 4; `[n]` multiplies."""
    size = _PTR if "*" in decl or decl.startswith("u64") else 4
    return size * int(decl[decl.index("[") + 1 : -1]) if decl.endswith("]") else size


def _era(name: str, *members: str) -> PteListEra:
    """Lay `struct pte_list_desc` out member by member (each naturally aligned)."""
    offsets: dict[str, int] = {}
    end = 0
    for decl in members:
        offsets[_member_name(decl)] = end
        end += _member_size(decl)
    sptes = next(decl for decl in members if _member_name(decl) == "sptes")
    layout = "struct pte_list_desc { " + " ".join(f"{decl};" for decl in members) + " }"
    ext, more, at = _member_size(sptes) // _PTR, offsets["more"], offsets["sptes"]
    counters = offsets.get("spte_count"), offsets.get("tail_count")
    return PteListEra(name, ext, layout, end, more, at, *counters)


_MORE = "struct pte_list_desc *more"
ERAS: dict[str, PteListEra] = {
    era.name: era
    for era in (
        _era("3", "u64 *sptes[3]", _MORE),
        _era("15", "u64 *sptes[15]", _MORE),
        _era("14", _MORE, "u64 spte_count", "u64 *sptes[14]"),
        _era("6.4", _MORE, "u32 spte_count", "u32 tail_count", "u64 *sptes[14]"),
    )
}

# Fake slab addresses for descs, so `val` reads like the kernel's (desc address | 1).
_desc_addresses = itertools.count(0xFFFF_8881_0000_0000, 128)


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


class PteListDesc:
    """`struct pte_list_desc`; `spte_count`/`tail_count` stay 0 in eras without them."""

    __slots__ = ("addr", "era", "more", "spte_count", "sptes", "tail_count")

    def __init__(self, era: PteListEra) -> None:
        self.era = era
        self.addr = next(_desc_addresses)
        self.more: PteListDesc | None = None
        self.spte_count = 0
        self.tail_count = 0
        self.sptes = [0] * era.ext  # 0 is NULL

    def used(self) -> int:
        """Entries held: `spte_count`, or the length of the non-NULL prefix."""
        if self.era.has_spte_count:
            return self.spte_count
        for i, sptep in enumerate(self.sptes):
            if not sptep:
                return i
        return self.era.ext

    def entries(self) -> list[int]:
        return self.sptes[: self.used()]


def check_sptep(sptep: int) -> None:
    """An sptep is the nonzero, 8-byte aligned host physical address of an spte."""
    if not 0 < sptep < 1 << 64 or sptep % 8:
        raise ValueError(f"not an sptep: {sptep:#x} (nonzero and 8-byte aligned)")


def desc_cache_lines(era: PteListEra, used: int) -> int:
    """64-byte lines a walk of one desc with `used` entries touches.

    The walk reads `more` and the entries; with a counter it also reads `spte_count` and
    stops there (pte_list_remove's scan, kvm_zap_all_rmap_sptes), without one it reads
    the NULL slot that ends a partial desc.  Descs are assumed aligned to their size.
    Note `rmap_get_next` (for_each_rmap_spte) reads that NULL slot in every era, so an
    iterator walk of a 6-entry era-14/6.4 desc touches its second line too.
    """
    read = used if era.has_spte_count else min(used + 1, era.ext)
    offsets = [era.more_offset] + [era.sptes_offset + _PTR * k for k in range(read)]
    if era.spte_count_offset is not None:
        offsets.append(era.spte_count_offset)
    return len({offset // CACHE_LINE for offset in offsets})


def rmap_add_would_recycle(count_before: int) -> bool:
    """`__rmap_add`: `if (rmap_count > RMAP_RECYCLE_THRESHOLD)` zap the whole rmap."""
    return count_before > RMAP_RECYCLE_THRESHOLD


class KvmRmapHead:
    """`struct kvm_rmap_head` of one era: empty, a single sptep, or a desc chain."""

    __slots__ = ("_head", "_members", "_single", "era", "stats")

    def __init__(self, era: str | PteListEra = DEFAULT_ERA) -> None:
        self.era = era if isinstance(era, PteListEra) else ERAS[era]
        self._single = 0  # val when bit 0 is clear
        self._head: PteListDesc | None = None  # val & ~1 when bit 0 is set
        self._members: set[int] = set()
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
        return sptep in self._members

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
        if sptep in self._members:
            raise AuditError(f"pte_list_add: sptep {sptep:#x} is already in this rmap")
        self._members.add(sptep)
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
        self._members.discard(sptep)

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
        self._members.clear()
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
        if len(set(sptes)) != len(sptes) or set(sptes) != self._members:
            raise AuditError("rmap: duplicate sptep, or the member set is stale")
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


RmapVal: TypeAlias = int | KvmRmapHead
"""`kvm_rmap_head.val` decoded: the single sptep (bit 0 clear), or a head holding descs."""


def rmap_val_add(val: RmapVal | None, sptep: int, era: str | PteListEra = DEFAULT_ERA) -> RmapVal:
    """`pte_list_add` on a stored `val` (None is 0, empty): 0 -> the bare sptep; one sptep
    -> a `KvmRmapHead` whose desc holds both (1 -> many); a head -> its own `add`."""
    if val is None:
        check_sptep(sptep)
        return sptep
    if isinstance(val, KvmRmapHead):
        val.add(sptep)
        return val
    head = KvmRmapHead(era)
    head.add(val)
    head.add(sptep)
    return head


def rmap_val_remove(val: RmapVal | None, sptep: int) -> RmapVal | None:
    """`pte_list_remove` on a stored `val`; None when the rmap is empty afterwards (the
    caller drops the entry).  A head that still holds sptes keeps its desc."""
    if isinstance(val, KvmRmapHead):
        val.remove(sptep)
        return None if val.is_empty else val
    if val != sptep:
        held = "empty" if val is None else f"{val:#x}"
        raise AuditError(f"pte_list_remove: {sptep:#x} not in rmap ({held})")
    return None


def rmap_val_sptes(val: RmapVal | None) -> list[int]:
    """The sptes of a stored `val`, in `for_each_rmap_spte` order."""
    if val is None:
        return []
    return list(val) if isinstance(val, KvmRmapHead) else [val]


def rmap_val_count(val: RmapVal | None) -> int:
    """`pte_list_count` of a stored `val`."""
    if val is None:
        return 0
    return val.count() if isinstance(val, KvmRmapHead) else 1


def rmap_val_head(val: RmapVal | None, era: str | PteListEra = DEFAULT_ERA) -> KvmRmapHead:
    """A `KvmRmapHead` for a stored `val`: the head itself, or a new head holding the single
    sptep (a copy: changing it does not change the stored `val`)."""
    if isinstance(val, KvmRmapHead):
        return val
    head = KvmRmapHead(era)
    if val is not None:
        head.add(val)
    return head
