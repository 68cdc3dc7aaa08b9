"""`kvm_age_gfn()` and `kvm_test_age_gfn()`: the MMU notifier's `clear_young` and
`test_young` (mmu_notifier.py), asked by the host's page reclaim and khugepaged whether
guest memory was used lately, the first making it "old" again.

torvalds/linux 6.18 `arch/x86/kvm/mmu/mmu.c` (`kvm_age_gfn`, `kvm_rmap_age_gfn_range`),
`tdp_mmu.c` (`kvm_tdp_mmu_age_gfn_range`, `kvm_tdp_mmu_age_spte`), `spte.c`/`spte.h`
(`is_accessed_spte`, `mark_spte_for_access_track`).  Since 6.15 both walk without mmu_lock
(the kvm-x86 MMU pull for 6.15: "KVM: x86/mmu: Age TDP MMU SPTEs without holding mmu_lock",
under RCU, and "KVM: x86/mmu: Walk rmaps (shadow MMU) without holding mmu_lock when aging
gfns", which locks each rmap head with its bit 1 instead; not modelled); before 6.15 under
mmu_lock, in `kvm_rmap_age_gfn_range()` from 6.12 ("KVM: x86/mmu: Fold mmu_spte_age() into
kvm_rmap_age_gfn_range()") and `mmu_spte_age()` per spte before that;
test_young is the same walk with `test_only`, which returns at the first young spte:
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

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..memslots.memslot import MemorySlot
from .mapping_level import gfn_to_index
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

if TYPE_CHECKING:  # (each MMU imports none of the others: `simulate --mmu X` loads one)
    from .direct.mmu import DirectMmu
    from .shadow.mmu import ShadowMmu
    from .tdp.mmu import TdpMmu

    RmapMmu = DirectMmu | ShadowMmu  # the MMUs that keep rmaps
    AnyMmu = DirectMmu | ShadowMmu | TdpMmu


def tdp_mmu_enabled(mmu: AnyMmu) -> bool:
    """`tdp_mmu_enabled`: the VM's MMU is the TDP MMU (tdp_mmu=Y under EPT/NPT)."""
    return hasattr(mmu, "kvm_tdp_mmu_unmap_gfn_range")


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


def walk_slot_rmaps(mmu: RmapMmu, slot: MemorySlot, start: int, end: int) -> Iterator[list[int]]:
    """`__walk_slot_rmaps()` (6.18 mmu.c) from PG_LEVEL_4K to KVM_MAX_HUGEPAGE_LEVEL: the
    sptes of each non-empty rmap head of gfns [start, end) of `slot` (a copy, so the
    caller may zap them), level by level."""
    for level in range(PG_LEVEL_4K, KVM_MAX_HUGEPAGE_LEVEL + 1):
        heads = mmu.rmaps.get((slot.as_id, slot.id, level))
        if not heads:
            continue
        first = gfn_to_index(max(start, slot.base_gfn), slot.base_gfn, level)
        last = gfn_to_index(min(end, slot.end_gfn) - 1, slot.base_gfn, level)
        for key in range(first, last + 1):
            head = heads.get(key)
            if head is not None:
                yield list(head)


def kvm_rmap_age_gfn_range(
    mmu: RmapMmu, slot: MemorySlot, start: int, end: int, test_only: bool = False
) -> int:
    """`kvm_rmap_age_gfn_range()` (6.18 mmu.c): the leaves in the slot's rmaps of gfns
    [start, end), each level; how many were young.  `test_only` (the notifier's
    test_young): 1 at the first young one, nothing changed."""
    young = 0
    cfg = mmu.cfg
    for sptes in walk_slot_rmaps(mmu, slot, start, end):
        for sptep in sptes:
            sp = mmu.pages.page_of_sptep(sptep)
            index = (sptep & 0xFFF) >> 3
            spte = sp.spt[index]
            if not is_accessed_spte(cfg, spte):
                continue
            if test_only:
                return 1
            sp.spt[index] = age_spte(cfg, spte)  # cmpxchg64 from the value read
            young += 1
    return young


def __kvm_tdp_mmu_age_gfn_range(
    mmu: TdpMmu, slot: MemorySlot, start: int, end: int, test_only: bool
) -> int:
    """`__kvm_tdp_mmu_age_gfn_range()` (6.18 tdp_mmu.c): every valid root of the slot's
    address space (`for_each_valid_tdp_mmu_root_rcu`: "this helper must NOT be used to
    unmap GFNs, as it processes only valid roots"), each leaf `tdp_root_for_each_leaf_pte`
    finds accessed aged by `kvm_tdp_mmu_age_spte()`; `test_only`: 1 at the first."""

    from .tdp.iter import for_each_tdp_pte

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
            if test_only:
                return 1
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


def kvm_tdp_mmu_age_gfn_range(mmu: TdpMmu, slot: MemorySlot, start: int, end: int) -> int:
    """`kvm_tdp_mmu_age_gfn_range()`: the young leaves made old; how many."""
    return __kvm_tdp_mmu_age_gfn_range(mmu, slot, start, end, test_only=False)


def kvm_tdp_mmu_test_age_gfn(mmu: TdpMmu, slot: MemorySlot, start: int, end: int) -> int:
    """`kvm_tdp_mmu_test_age_gfn()`: 1 when a leaf of the range is young, none changed."""
    return __kvm_tdp_mmu_age_gfn_range(mmu, slot, start, end, test_only=True)


def kvm_age_gfn(mmu: AnyMmu, slot: MemorySlot, start: int, end: int) -> int:
    """`kvm_age_gfn(kvm, range)` (6.18 mmu.c), the notifier's clear_young: the sptes of
    gfns [start, end) of `slot` made old; how many were young (the kernel returns
    whether any was)."""
    if tdp_mmu_enabled(mmu):
        return kvm_tdp_mmu_age_gfn_range(mmu, slot, start, end)  # type: ignore[arg-type]
    return kvm_rmap_age_gfn_range(mmu, slot, start, end)  # type: ignore[arg-type]


def kvm_test_age_gfn(mmu: AnyMmu, slot: MemorySlot, start: int, end: int) -> bool:
    """`kvm_test_age_gfn(kvm, range)` (6.18 mmu.c), the notifier's test_young: whether a
    spte of gfns [start, end) is young; nothing is changed."""
    if tdp_mmu_enabled(mmu):
        return bool(kvm_tdp_mmu_test_age_gfn(mmu, slot, start, end))  # type: ignore[arg-type]
    return bool(kvm_rmap_age_gfn_range(mmu, slot, start, end, test_only=True))  # type: ignore[arg-type]
