"""The hashed page table: groups of 8 HPTEs, a primary and a secondary hash.

The hash is the one the ISA defines for 256 MB segments and KVM computes in
`kvmppc_hv_find_lock_hpte()` (arch/powerpc/kvm/book3s_hv_rm_mmu.c):

    hash = (vsid ^ ((eaddr & somask) >> pshift)) & kvmppc_hpt_mask(hpt)
    secondary = hash ^ kvmppc_hpt_mask(hpt)

where `somask` is the 256 MB segment offset mask and the mask is (number of groups - 1).
A virtual page number here is `vsid << (28 - pshift) | page-in-segment`, so the hash is
`(vpn >> (28 - pshift)) ^ (vpn & pages-per-segment mask)`.  The table has
`2 ** order` bytes, 128 per group: KVM's default is order 24 (`KVM_DEFAULT_HPT_ORDER`,
16 MB, 131072 groups) and the architecture's minimum order 18 (`PPC_MIN_HPT_ORDER`);
smaller orders are allowed here only so that a screen can show a table that fills up.

`search()` is that function's loop: the primary group's 8 slots in order, then the
secondary group's, an entry matching when its `v` has one of the `valid` bits and it maps
the page.  It returns the slot and how many HPTEs it examined (a miss examines all 16,
the expensive case of the POWER-keys thread (kvm-ppc, 2014)).  The table also keeps a
dictionary from page to slot, the model's shortcut (KVM has none: the hash *is* its
index); the count of examined HPTEs is computed from the slot's position, exactly as the
loop would count it.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import AuditError
from .hpte import (
    EMPTY,
    HPTE_V_ABSENT,
    HPTE_V_SECONDARY,
    HPTE_V_VALID,
    HPTEG_BYTES,
    HPTES_PER_GROUP,
    KINDS,
    Hpte,
)

KVM_DEFAULT_HPT_ORDER = 24  # 16 MB HPT by default (asm/kvm_book3s_64.h)
PPC_MIN_HPT_ORDER = 18  # "Power architecture requires HPT is at least 256kB"
MODEL_MIN_ORDER = 10  # 8 groups: small tables for the screen and the tests
SID_SHIFT = 28  # 256 MB segments
VALID_OR_ABSENT = HPTE_V_VALID | HPTE_V_ABSENT


class SearchResult(NamedTuple):
    """One `kvmppc_hv_find_lock_hpte()`: the slot found (-1: none; the kernel returns
    `(hash << 3) + i`, the same number), the HPTEs examined,
    the groups read (one 128-byte cache line each) and, when traced, the slots in the
    order the loop examined them."""

    slot: int
    examined: int
    groups_read: int
    primary: int
    secondary: int
    probes: tuple[int, ...] = ()

    @property
    def found(self) -> bool:
        return self.slot >= 0


class HashPageTable:
    """`kvm->arch.hpt`: `2 ** order` bytes of HPTE groups, plus the model's page index."""

    def __init__(self, order: int = KVM_DEFAULT_HPT_ORDER, page_shift: int = 16) -> None:
        if not MODEL_MIN_ORDER <= order <= 34:
            raise ValueError(f"HPT order {order} is outside {MODEL_MIN_ORDER}-34")
        if page_shift not in (12, 16):
            raise ValueError("the model's guest uses 4K or 64K base pages")
        self.order = order
        self.page_shift = page_shift
        self.n_groups = (1 << order) // HPTEG_BYTES
        self.mask = self.n_groups - 1
        self.seg_bits = SID_SHIFT - page_shift
        self.slots: list[Hpte | None] = [None] * (self.n_groups * HPTES_PER_GROUP)
        self.used = [0] * self.n_groups
        self.index: dict[int, int] = {}  # vpn -> slot of its (valid or absent) HPTE
        self.kind_counts: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.kind_counts[EMPTY] = len(self.slots)

    # -- the hash ---------------------------------------------------------------------

    def vpn(self, vsid: int, ea: int) -> int:
        """The virtual page number of effective address `ea` in segment `vsid`."""
        offset = ea & ((1 << SID_SHIFT) - 1)
        return (vsid << self.seg_bits) | (offset >> self.page_shift)

    def hash_of(self, vpn: int) -> int:
        """The primary group of a page."""
        return ((vpn >> self.seg_bits) ^ (vpn & ((1 << self.seg_bits) - 1))) & self.mask

    def groups_of(self, vpn: int) -> tuple[int, int]:
        primary = self.hash_of(vpn)
        return primary, primary ^ self.mask

    # -- slots ------------------------------------------------------------------------

    def group_slots(self, group: int) -> range:
        return range(group * HPTES_PER_GROUP, (group + 1) * HPTES_PER_GROUP)

    def free_slot(self, group: int) -> int:
        """The first slot of `group` holding neither a valid nor an absent HPTE, or -1."""
        if self.used[group] >= HPTES_PER_GROUP:
            return -1
        base = group * HPTES_PER_GROUP
        for slot in range(base, base + HPTES_PER_GROUP):
            if self.slots[slot] is None:
                return slot
        raise AuditError(f"group {group:#x} counts {self.used[group]} HPTEs but has none free")

    def lookup(self, vpn: int) -> int:
        """The slot of the page's HPTE, -1 if none (no cost counted: the model's index)."""
        return self.index.get(vpn, -1)

    def entry(self, slot: int) -> Hpte | None:
        return self.slots[slot]

    def insert(self, slot: int, hpte: Hpte) -> None:
        if self.slots[slot] is not None:
            raise ValueError(f"HPTE slot {slot:#x} is in use")
        if hpte.vpn in self.index:
            raise ValueError(f"page {hpte.vpn:#x} already has an HPTE at {self.index[hpte.vpn]:#x}")
        self.slots[slot] = hpte
        self.used[slot // HPTES_PER_GROUP] += 1
        self.index[hpte.vpn] = slot
        counts = self.kind_counts
        counts[EMPTY] -= 1
        counts[hpte.kind] += 1

    def replace(self, slot: int, hpte: Hpte) -> Hpte:
        """Change an HPTE in place (page-in, unmap, protect): same page, same slot."""
        old = self.slots[slot]
        if old is None or old.vpn != hpte.vpn:
            raise ValueError(f"slot {slot:#x} does not hold page {hpte.vpn:#x}")
        self.slots[slot] = hpte
        self.kind_counts[old.kind] -= 1
        self.kind_counts[hpte.kind] += 1
        return old

    def remove(self, slot: int) -> Hpte:
        old = self.slots[slot]
        if old is None:
            raise ValueError(f"HPTE slot {slot:#x} is empty")
        self.slots[slot] = None
        self.used[slot // HPTES_PER_GROUP] -= 1
        del self.index[old.vpn]
        counts = self.kind_counts
        counts[old.kind] -= 1
        counts[EMPTY] += 1
        return old

    @property
    def occupied(self) -> int:
        return len(self.index)

    # -- kvmppc_hv_find_lock_hpte ------------------------------------------------------

    def search(self, vpn: int, valid: int = VALID_OR_ABSENT, trace: bool = False) -> SearchResult:
        """The hash search: primary group slot by slot, then the secondary group."""
        primary, secondary = self.groups_of(vpn)
        slot = self.index.get(vpn, -1)
        if slot >= 0:
            hpte = self.slots[slot]
            if hpte is None or not hpte.v & valid:
                slot = -1
        if slot < 0:
            examined, groups = 2 * HPTES_PER_GROUP, 2
        elif slot // HPTES_PER_GROUP == primary:
            examined, groups = slot % HPTES_PER_GROUP + 1, 1
        else:
            examined, groups = HPTES_PER_GROUP + slot % HPTES_PER_GROUP + 1, 2
        probes: tuple[int, ...] = ()
        if trace:
            order = [*self.group_slots(primary), *self.group_slots(secondary)]
            probes = tuple(order[:examined])
        return SearchResult(slot, examined, groups, primary, secondary, probes)

    # -- views ------------------------------------------------------------------------

    def kinds_of(self, group: int) -> list[str]:
        """The kind of each of the group's 8 slots."""
        members = self.slots[group * HPTES_PER_GROUP : (group + 1) * HPTES_PER_GROUP]
        return [EMPTY if h is None else h.kind for h in members]

    def window(self, group: int, rows: int) -> list[int]:
        """`rows` consecutive group numbers around `group`, clipped to the table."""
        rows = max(1, min(rows, self.n_groups))
        start = max(0, min(group - rows // 2, self.n_groups - rows))
        return list(range(start, start + rows))

    # -- audit ------------------------------------------------------------------------

    def audit(self) -> None:
        """At most 8 HPTEs a group (the per-group counts agree with the slots), one
        HPTE per page, each in the group its hash (primary or secondary) names, the
        index and the per-kind counters consistent with the slots."""
        kinds = dict.fromkeys(KINDS, 0)
        seen: dict[int, int] = {}
        for group in range(self.n_groups):
            members = self.slots[group * HPTES_PER_GROUP : (group + 1) * HPTES_PER_GROUP]
            count = sum(1 for hpte in members if hpte is not None)
            if count != self.used[group] or count > HPTES_PER_GROUP:
                raise AuditError(f"group {group:#x} holds {count}, counted {self.used[group]}")
        for slot, hpte in enumerate(self.slots):
            if hpte is None:
                kinds[EMPTY] += 1
                continue
            kinds[hpte.kind] += 1
            self._audit_entry(slot, hpte, seen)
        if seen != self.index:
            raise AuditError("the page index does not match the slots")
        if kinds != self.kind_counts:
            raise AuditError(f"kind counters {self.kind_counts} != slots {kinds}")

    def _audit_entry(self, slot: int, hpte: Hpte, seen: dict[int, int]) -> None:
        if not hpte.consistent():
            raise AuditError(f"slot {slot:#x}: key/kind out of step with v and r")
        if not hpte.v & VALID_OR_ABSENT:
            raise AuditError(f"slot {slot:#x} keeps an HPTE neither valid nor absent")
        if hpte.valid and hpte.absent:
            raise AuditError(f"slot {slot:#x} is both valid and absent")
        if hpte.vpn in seen:
            raise AuditError(f"page {hpte.vpn:#x} has two HPTEs: {seen[hpte.vpn]:#x}, {slot:#x}")
        seen[hpte.vpn] = slot
        primary, secondary = self.groups_of(hpte.vpn)
        want = secondary if hpte.v & HPTE_V_SECONDARY else primary
        if slot // HPTES_PER_GROUP != want:
            raise AuditError(f"slot {slot:#x} is not in its hash group {want:#x}")
