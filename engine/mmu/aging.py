"""`kvm_age_gfn()`: the MMU notifier's `clear_young`, asked by the host's page reclaim
whether guest memory was used lately, and making it "old" again.

torvalds/linux 6.18 `arch/x86/kvm/mmu/mmu.c` (`kvm_age_gfn`, `kvm_rmap_age_gfn_range`),
`tdp_mmu.c` (`kvm_tdp_mmu_age_gfn_range`, `kvm_tdp_mmu_age_spte`), `spte.c`/`spte.h`
(`is_accessed_spte`, `mark_spte_for_access_track`).  Since the lockless aging of 6.15
(`mmu_spte_age()` under mmu_lock before; version UNVERIFIED) both walk without the lock:
- every leaf of the range that `is_accessed_spte()` (its A bit set: 6.13+, where KVM
  keeps bit 8 itself without EPT A/D bits; before, such a spte was accessed unless
  access-tracked) is made old: with A/D bits its Accessed bit is cleared (the CPU sets
  it again on the next access, no fault), without them the spte is *access-tracked*
  (`mark_spte_for_access_track`: R and X saved at bits 54/56, RWX cleared), so the next
  access faults and `fast_page_fault()` restores it (fast_pf.py);
- the legacy MMU finds the leaves through the rmaps of each level and changes them with
  a plain `cmpxchg64` (no tracepoint); the TDP MMU walks its valid roots
  (`tdp_root_for_each_leaf_pte`), and each change emits `kvm_tdp_mmu_spte_changed`
  (`__tdp_mmu_set_spte_atomic`; a lost exchange leaves the spte young).
With A/D bits an aged spte costs no fault: the CPU sets A again on its next access
(`MmuSession` models that; the TDP session's CPU does not, so there an aged A/D spte
stays old until it is made again).  Only the A/D-off case changes what faults.
"""

from __future__ import annotations

from ..memslots.memslot import MemorySlot
from .direct.mmu import DirectMmu, gfn_to_index
from .role import PG_LEVEL_4K
from .spte import (
    KVM_MAX_HUGEPAGE_LEVEL,
    SPTE_TDP_AD_DISABLED,
    SPTE_TDP_AD_MASK,
    SpteConfig,
    is_access_track_spte,
    is_last_spte,
    is_shadow_present_pte,
    mark_spte_for_access_track,
)
from .tdp.iter import for_each_tdp_pte
from .tdp.mmu import TdpMmu


def spte_ad_enabled(spte: int) -> bool:
    return spte & SPTE_TDP_AD_MASK != SPTE_TDP_AD_DISABLED


def is_accessed_spte(cfg: SpteConfig, spte: int) -> bool:
    """`is_accessed_spte()` (6.18 spte.h): `spte & shadow_accessed_mask`.  Before 6.13 an
    A/D-disabled spte had no Accessed bit (`spte_shadow_accessed_mask()` was 0): it was
    accessed unless access-tracked."""
    if cfg.ad_masks_era == "before-6.13" and not spte_ad_enabled(spte):
        return not is_access_track_spte(cfg, spte)
    return bool(spte & cfg.shadow_accessed_mask)


def age_spte(cfg: SpteConfig, spte: int) -> int:
    """The old spte: A cleared (`clear_bit`) or `mark_spte_for_access_track()`."""
    if spte_ad_enabled(spte):
        return spte & ~cfg.shadow_accessed_mask
    return mark_spte_for_access_track(cfg, spte)


def kvm_rmap_age_gfn_range(mmu: DirectMmu, slot: MemorySlot, start: int, end: int) -> int:
    """The legacy MMU: the leaves in the slot's rmaps of gfns [start, end), each level;
    how many were young."""
    young = 0
    cfg = mmu.cfg
    for level in range(PG_LEVEL_4K, KVM_MAX_HUGEPAGE_LEVEL + 1):
        heads = mmu.rmaps.get((slot.as_id, slot.id, level))
        if not heads:
            continue
        first = gfn_to_index(max(start, slot.base_gfn), slot.base_gfn, level)
        last = gfn_to_index(min(end, slot.end_gfn) - 1, slot.base_gfn, level)
        for key in range(first, last + 1):
            head = heads.get(key)
            for sptep in head if head is not None else ():
                sp = mmu.pages.page_of_sptep(sptep)
                index = (sptep & 0xFFF) >> 3
                spte = sp.spt[index]
                if not is_accessed_spte(cfg, spte):
                    continue
                sp.spt[index] = age_spte(cfg, spte)  # cmpxchg64 from the value read
                young += 1
    return young


def kvm_tdp_mmu_age_gfn_range(mmu: TdpMmu, slot: MemorySlot, start: int, end: int) -> int:
    """The TDP MMU: every valid root of the slot's address space."""
    young = 0
    cfg = mmu.cfg
    for root in mmu.pages.tdp_mmu_roots:
        if root.role.invalid or root.as_id != slot.as_id:
            continue
        for it in for_each_tdp_pte(mmu.pages.by_pa, root, start, end):
            old = it.old_spte
            if not (is_shadow_present_pte(old) and is_last_spte(old, it.level)):
                continue
            if not is_accessed_spte(cfg, old):
                continue
            young += 1
            new = age_spte(cfg, old)
            if not spte_ad_enabled(old) and mmu._tdp_mmu_set_spte_atomic(it, new):
                continue  # "It is safe for the following cmpxchg to fail"
            it.pt.spt[it.index] = new  # tdp_mmu_clear_spte_bits_atomic() for A/D sptes
            if mmu._listener is not None:
                mmu._emit(
                    "kvm_tdp_mmu_spte_changed",
                    as_id=it.as_id, gfn=it.gfn, level=it.level, old_spte=old, new_spte=new,
                )  # fmt: skip
    return young


def kvm_age_gfn(mmu: DirectMmu | TdpMmu, slot: MemorySlot, start: int, end: int) -> int:
    """`kvm_age_gfn(kvm, range)`: the sptes of gfns [start, end) of `slot` made old;
    how many were young (the kernel returns whether any was)."""
    if isinstance(mmu, TdpMmu):
        return kvm_tdp_mmu_age_gfn_range(mmu, slot, start, end)
    return kvm_rmap_age_gfn_range(mmu, slot, start, end)
