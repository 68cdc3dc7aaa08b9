"""`FNAME(pte_prefetch)` (arch/x86/kvm/mmu/paging_tmpl.h, 6.18): after a fault fixed a
last-level spte of an indirect page, KVM maps the other guest ptes of the same aligned
group of PTE_PREFETCH_NUM = 8 without waiting for their faults.

For each neighbour, in order: a present spte is skipped; a gpte that is not present or
not accessed (`FNAME(prefetch_invalid_gpte)`: "Prefetch only accessed entries") ends the
prefetch; so does a gfn with no memslot, or a write to a dirty-logged slot
(`gfn_to_memslot_dirty_bitmap`).  Otherwise `mmu_set_spte(..., prefetch=true)` with
`sp->role.access & FNAME(gpte_access)(gpte)`, write removed from a clean gpte
(`FNAME(protect_clean_gpte)`).  Prefetched sptes are traced by `kvm_mmu_set_spte` and
join the rmaps like any other, but are no fault: `pf_fixed` does not count them; their
Accessed bit is clear (`make_spte(prefetch=true)` → `mark_spte_for_access_track()`), so
the guest's first access shows.  A direct last-level page (below a guest huge page) goes
to `__direct_pte_prefetch()` (direct/prefetch.py, shared with the direct MMU).

The gfn side, shared with `direct/prefetch.py`: `gfn_to_memslot_dirty_bitmap()` (no slot,
or a dirty-logged slot for a writable mapping: none) and `kvm_prefetch_pages()` (6.13+,
formerly `gfn_to_page_many_atomic()`): `gfn_to_hva_many(slot, gfn, &entry)` asks for a
writable hva, so a read-only slot prefetches nothing, and fewer than the wanted pages
left in the slot give 0; `get_user_pages_fast_only()` then pins what the host has
mapped: the model's host memory is all populated, so every page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...memslots.memslot import MemorySlot
from ..guest.page_tables import PT_ACCESSED, PT_DIRTY, PT_PRESENT, gpte_access, pte_gfn
from ..role import ACC_WRITE_MASK
from ..spte import is_shadow_present_pte

if TYPE_CHECKING:
    from ..mmu_pages import KvmMmuPage
    from .mmu import ShadowMmu

PTE_PREFETCH_NUM = 8


def gfn_to_memslot_dirty_bitmap(slot: MemorySlot | None, no_dirty_log: bool) -> MemorySlot | None:
    """`gfn_to_memslot_dirty_bitmap(vcpu, gfn, no_dirty_log)` (mmu.c) on the slot the
    lookup found (KVM_MEMSLOT_INVALID is not modelled)."""
    if slot is None or (no_dirty_log and slot.dirty_logging):
        return None
    return slot


def kvm_prefetch_pages(slot: MemorySlot, gfn: int, nr_pages: int) -> int:
    """`kvm_prefetch_pages()` (kvm_main.c 6.13+): -1 for a read-only slot
    (`KVM_HVA_ERR_RO_BAD`), 0 when fewer than `nr_pages` are left in the slot, else the
    pages `get_user_pages_fast_only()` pins (all of them: the host memory is populated)."""
    if slot.readonly:
        return -1
    if slot.base_gfn + slot.npages - gfn < nr_pages:
        return 0
    return nr_pages


def pte_prefetch(mmu: ShadowMmu, sp: KvmMmuPage, index: int) -> int:
    """Prefetch around `sp.spt[index]`; returns how many sptes were set."""
    if sp.role.level != 1:
        return 0
    if sp.role.direct:
        from ..direct.prefetch import direct_pte_prefetch_around

        def lookup(gfn: int) -> MemorySlot | None:
            return mmu.vm.gfn_to_memslot(gfn, sp.role.smm)

        return direct_pte_prefetch_around(sp, index, lookup, mmu.set_prefetched_spte)
    start = index & ~(PTE_PREFETCH_NUM - 1)
    done = 0
    for i in range(start, start + PTE_PREFETCH_NUM):
        if i == index or is_shadow_present_pte(sp.spt[i]):
            continue
        gpte = mmu.guest.pte(sp.gfn, i)
        if not gpte & PT_PRESENT or not gpte & PT_ACCESSED:
            break  # FNAME(prefetch_invalid_gpte): drop_spte of a non-present spte
        gfn = pte_gfn(gpte)
        access = sp.role.access & gpte_access(gpte)
        if not gpte & PT_DIRTY:
            access &= ~ACC_WRITE_MASK  # FNAME(protect_clean_gpte)
        slot = mmu.vm.gfn_to_memslot(gfn, sp.role.smm)
        slot = gfn_to_memslot_dirty_bitmap(slot, bool(access & ACC_WRITE_MASK))
        if slot is None or kvm_prefetch_pages(slot, gfn, 1) != 1:
            break
        mmu.set_prefetched_spte(sp, i, gfn, access, slot)
        done += 1
    return done
