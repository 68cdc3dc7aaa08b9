"""`direct_pte_prefetch()` (arch/x86/kvm/mmu/mmu.c, 6.18): after `direct_map()` set
a 4K leaf, KVM maps the free entries of the same aligned group of PTE_PREFETCH_NUM = 8
without waiting for their faults.  Used by the direct MMU (EPT/NPT, tdp_mmu=N) and, as
`__direct_pte_prefetch()`, by `FNAME(pte_prefetch)` for a shadow MMU's direct page.

- `direct_pte_prefetch()`: nothing for a page whose sptes have no Accessed bit
  (`sp_ad_disabled(sp)`: "there's no way to distinguish between actually accessed
  translations and prefetched"), nothing above PG_LEVEL_4K (nor while an mmu notifier
  invalidation is in progress, which the model has not got);
- `__direct_pte_prefetch()`: the group's runs of non-present entries, the faulting one
  counting as present, each to `direct_pte_prefetch_many()`; a run that fails ends it;
- `direct_pte_prefetch_many()`: the slot of the run's first gfn
  (`gfn_to_memslot_dirty_bitmap(vcpu, gfn, access & ACC_WRITE_MASK)`: none for a
  dirty-logged slot, since direct pages have ACC_ALL), `kvm_prefetch_pages()` for the
  whole run (all or none), then `mmu_set_spte(..., NULL)` for each: a
  prefetch, so the spte's Accessed bit is clear and `pf_fixed` does not count it, with
  the page's `role.access`.  An MMIO gfn (no slot) is never prefetched.

The gfn side, shared with `FNAME(pte_prefetch)` (shadow/mmu.py):
`gfn_to_memslot_dirty_bitmap()` (no slot, or a dirty-logged slot for a writable mapping:
none) and `kvm_prefetch_pages()` (6.13+, formerly `gfn_to_page_many_atomic()`):
`gfn_to_hva_many(slot, gfn, &entry)` asks for a writable hva, so a read-only slot
prefetches nothing, and fewer than the wanted pages left in the slot give 0;
`get_user_pages_fast_only()` then pins what the host has mapped: the model's host memory
is all populated, so every page.
"""

from __future__ import annotations

from collections.abc import Callable

from ...memslots.memslot import MemorySlot
from ..mmu_pages import KvmMmuPage
from ..role import ACC_WRITE_MASK, PG_LEVEL_4K
from ..spte import is_shadow_present_pte

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


Lookup = Callable[[int], MemorySlot | None]
SetSpte = Callable[[KvmMmuPage, int, int, int, MemorySlot], None]  # sp, index, gfn, access


def direct_pte_prefetch_many(
    sp: KvmMmuPage, start: int, end: int, lookup: Lookup, set_spte: SetSpte
) -> int:
    """Entries `start` to `end` - 1 of `sp`; -1 when nothing could be prefetched."""
    access = sp.role.access
    gfn = sp.gfn + start  # kvm_mmu_page_get_gfn() of a direct 4K page
    slot = gfn_to_memslot_dirty_bitmap(lookup(gfn), bool(access & ACC_WRITE_MASK))
    if slot is None:
        return -1
    ret = kvm_prefetch_pages(slot, gfn, end - start)
    if ret <= 0:
        return -1
    for i in range(ret):
        set_spte(sp, start + i, gfn + i, access, slot)
    return ret


def direct_pte_prefetch_around(
    sp: KvmMmuPage, index: int, lookup: Lookup, set_spte: SetSpte
) -> int:
    """`__direct_pte_prefetch(vcpu, sp, sptep)`: returns how many sptes were set."""
    first = index & ~(PTE_PREFETCH_NUM - 1)
    done = 0
    start: int | None = None
    for i in range(first, first + PTE_PREFETCH_NUM):
        if i == index or is_shadow_present_pte(sp.spt[i]):
            if start is None:
                continue
            ret = direct_pte_prefetch_many(sp, start, i, lookup, set_spte)
            if ret < 0:
                return done
            done += ret
            start = None
        elif start is None:
            start = i
    if start is not None:
        end = first + PTE_PREFETCH_NUM
        done += max(direct_pte_prefetch_many(sp, start, end, lookup, set_spte), 0)
    return done


def direct_pte_prefetch(sp: KvmMmuPage, index: int, lookup: Lookup, set_spte: SetSpte) -> int:
    """`direct_pte_prefetch(vcpu, sptep)` after `direct_map()` set `sp.spt[index]`."""
    if sp.role.ad_disabled or sp.role.level > PG_LEVEL_4K:
        return 0
    return direct_pte_prefetch_around(sp, index, lookup, set_spte)
