"""`FNAME(pte_prefetch)` (arch/x86/kvm/mmu/paging_tmpl.h, 6.18): after a fault fixed a
last-level spte of an indirect page, KVM maps the other guest ptes of the same aligned
group of PTE_PREFETCH_NUM = 8 without waiting for their faults.

For each neighbour, in order: a present spte is skipped; a gpte that is not present or
not accessed (`FNAME(prefetch_invalid_gpte)`: "Prefetch only accessed entries") ends the
prefetch; so does a gfn with no memslot, or a write to a dirty-logged slot
(`gfn_to_memslot_dirty_bitmap`).  Otherwise `mmu_set_spte(..., prefetch=true)` with
`sp->role.access & FNAME(gpte_access)(gpte)`, write removed from a clean gpte
(`FNAME(protect_clean_gpte)`).  Prefetched sptes are traced by `kvm_mmu_set_spte` and
join the rmaps like any other, but are no fault: `pf_fixed` does not count them.  Direct
pages (`__direct_pte_prefetch`) are not modelled: the shadow MMU here maps 4K only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..constants import KVM_MEM_LOG_DIRTY_PAGES
from .guest_pt import PT_ACCESSED, PT_DIRTY, PT_PRESENT, gpte_access, pte_gfn
from .role import ACC_WRITE_MASK
from .spte import is_shadow_present_pte

if TYPE_CHECKING:
    from .mmu_pages import KvmMmuPage
    from .shadow import ShadowMmu

PTE_PREFETCH_NUM = 8


def pte_prefetch(mmu: ShadowMmu, sp: KvmMmuPage, index: int) -> int:
    """Prefetch around `sp.spt[index]`; returns how many sptes were set."""
    if sp.role.level != 1 or sp.role.direct:
        return 0
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
        if slot is None or (access & ACC_WRITE_MASK and slot.flags & KVM_MEM_LOG_DIRTY_PAGES):
            break
        mmu.set_prefetched_spte(sp, i, gfn, access, slot)
        done += 1
    return done
