"""The vtlb: a per-vCPU cache of guest page number -> guest frame number (the
memslot-search thread).

Xiao Guangrong, "[PATCH 7/7] KVM: MMU: cache guest page number to guest frame number"
(2011, not merged; Avi Kivity preferred a faster walker): "Cache guest page number to
guest frame number to avoid walk guest page table frequently, the 'vtlb' idea is from
Xen."  What the thread shows of the patch: `#define VTLB_ENTRIES (1 << 4)`, `struct
vtlb_entry { gfn_t page_number; gfn_t frame_number; u32 access; }` in `struct kvm_mmu`
with a `vtlb_enabled` flag; `vtlb_insert(mmu, addr, walker->gfn, pte_access)` at the end
of every successful `FNAME(walk_addr_generic)`; `vtlb_lookup(mmu, vaddr, access)` in
front of the walk in `FNAME(gva_to_gpa)` and `FNAME(gva_to_gpa_nested)`.  Only for
shadow paging: with EPT "the guest tlb invalid operation is not intercept (reload CR3,
invlpg)", which are exactly the two flushes here.

The body of vtlb_insert/vtlb_lookup (mmu.c, "146 lines not on this page") is not in the
thread, so the replacement policy is UNVERIFIED.  `policy="round-robin"` (default) fills
the 16 slots in turn from a pointer that a flush resets; `policy="hash"` is the Xen code
the idea comes from (xen/arch/x86/mm/shadow/private.h: direct-mapped,
`vtlb_hash(page_number) = page_number % VTLB_ENTRIES`, an insert clobbers the slot; Xen
has 13 entries).  Either way an insert for a page already cached replaces that entry.
A lookup hits when the page matches and the cached access allows the request (Xen: the
cached pfec covers the requested one).  Also UNVERIFIED: whether the patch's INVLPG
dropped one entry (done here) or all (Xen's `sh_invlpg` flushes the whole vtlb).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ...errors import AuditError
from ..role import ACC_USER_MASK, ACC_WRITE_MASK

VTLB_ENTRIES = 1 << 4
POLICIES = ("round-robin", "hash")


@dataclass(frozen=True, slots=True)
class VtlbEntry:
    """`struct vtlb_entry`: gva >> 12, gfn, the ACC_* access the walk granted, and the
    level of the guest leaf (not in the patch: an INVLPG inside a guest 2M/1G page
    must drop every 4K entry cached from it, as it drops a large-page TLB entry)."""

    page_number: int
    frame_number: int
    access: int
    level: int = 1

    def covers(self, page_number: int) -> bool:
        """Does the guest page this entry came from contain `page_number`?"""
        return not (self.page_number ^ page_number) >> 9 * (self.level - 1)


class Vtlb:
    """One vCPU's vtlb, with counters of what it saved."""

    def __init__(self, entries: int = VTLB_ENTRIES, policy: str = "round-robin") -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown vtlb policy {policy!r}: {', '.join(POLICIES)}")
        if entries < 1:
            raise ValueError("a vtlb needs at least one entry")
        self.policy = policy
        self.slots: list[VtlbEntry | None] = [None] * entries
        self._next = 0
        self.hits = self.misses = self.inserts = self.evictions = 0
        self.flushes = self.invlpgs = 0

    @property
    def walks_saved(self) -> int:
        """Guest page-table walks a hit made unnecessary (one per hit)."""
        return self.hits

    def entries(self) -> list[VtlbEntry]:
        return [entry for entry in self.slots if entry is not None]

    def _find(self, page_number: int) -> int | None:
        if self.policy == "hash":
            index = page_number % len(self.slots)
            entry = self.slots[index]
            return index if entry is not None and entry.page_number == page_number else None
        for index, entry in enumerate(self.slots):
            if entry is not None and entry.page_number == page_number:
                return index
        return None

    def lookup(self, gva: int, write: bool = False, user: bool = False) -> VtlbEntry | None:
        """`vtlb_lookup()`: the cached translation of `gva`'s page, if it allows the access."""
        index = self._find(gva >> 12)
        entry = self.slots[index] if index is not None else None
        if (
            entry is None
            or (write and not entry.access & ACC_WRITE_MASK)
            or (user and not entry.access & ACC_USER_MASK)
        ):
            self.misses += 1
            return None
        self.hits += 1
        return entry

    def insert(self, gva: int, gfn: int, access: int, level: int = 1) -> None:
        """`vtlb_insert()` after a successful walk (`level`: of the guest leaf)."""
        page = gva >> 12
        index = self._find(page)
        if index is None:
            if self.policy == "hash":
                index = page % len(self.slots)
            else:
                index, self._next = self._next, (self._next + 1) % len(self.slots)
            self.evictions += self.slots[index] is not None
        self.slots[index] = VtlbEntry(page, gfn, access, level)
        self.inserts += 1

    def flush(self) -> None:
        """CR3 load: forget everything."""
        self.slots = [None] * len(self.slots)
        self._next = 0
        self.flushes += 1

    def invlpg(self, gva: int) -> None:
        """INVLPG: forget `gva`'s page (all of it, when it is a guest huge page)."""
        page = gva >> 12
        self.slots = [e if e is None or not e.covers(page) else None for e in self.slots]
        self.invlpgs += 1

    def audit(self) -> None:
        pages = [entry.page_number for entry in self.entries()]
        if len(pages) != len(set(pages)):
            raise AuditError("vtlb: a page is cached twice")
        if self.policy == "hash" and any(
            entry is not None and entry.page_number % len(self.slots) != index
            for index, entry in enumerate(self.slots)
        ):
            raise AuditError("vtlb: an entry sits outside its hash slot")


class VcpuVtlbs:
    """The vtlb of every vCPU (`vcpu->arch.mmu->vtlb`), created on first use."""

    def __init__(self, policy: str = "round-robin") -> None:
        Vtlb(policy=policy)  # reject an unknown policy now
        self.policy = policy
        self.by_vcpu: dict[int, Vtlb] = {}

    def __getitem__(self, vcpu: int) -> Vtlb:
        return self.by_vcpu.setdefault(vcpu, Vtlb(policy=self.policy))

    @property
    def walks_saved(self) -> int:
        return sum(vtlb.walks_saved for vtlb in self.by_vcpu.values())

    def guest_flush(self, vcpus: list[int], gva: int | None) -> None:
        """The guest flushed a TLB (INVLPG `gva`, or everything) on these vCPUs."""
        for vcpu in vcpus:
            if gva is None:
                self[vcpu].flush()
            else:
                self[vcpu].invlpg(gva)

    def audit(
        self, cr3s: Mapping[int, int], translate: Callable[[int, int], tuple[int, int]]
    ) -> None:
        """Every entry of a vCPU running `cr3s[vcpu]` agrees with `translate(cr3, gva)`,
        which gives (gfn or -1, access): same gfn, no access the guest does not grant."""
        for vcpu, vtlb in self.by_vcpu.items():
            vtlb.audit()
            for entry in vtlb.entries() if vcpu in cr3s else ():
                gfn, access = translate(cr3s[vcpu], entry.page_number << 12)
                if gfn != entry.frame_number or entry.access & ~access:
                    raise AuditError(f"vtlb of vcpu {vcpu}: stale entry {entry}")
