"""The shadow MMU's leaves (`mmu_set_spte()`, arch/x86/kvm/mmu/mmu.c, 6.18), set at the
end of `FNAME(fetch)` (mmu.py, huge.py) or by `FNAME(pte_prefetch)`
(prefetch.py): an MMIO spte with the generation (`mark_mmio_spte`), or a spte of the
slot's host page at the fault's goal level (4K, or 2M/1G where `kvm_mmu_hugepage_adjust`
allowed it), read-only on a read while the gpte is clean (`FNAME(protect_clean_gpte)`);
a writable spte unsyncs the gfn's level-1 pages or, for a write-tracked gfn, stays
read-only (`mmu_try_to_unsync_pages()`); under the NX mitigation a huge spte is not
executable (`make_spte()`, 6.18 spte.c); it goes on the rmap of (slot, level, gfn) by
`rmap_add` (RMAP_RECYCLE_THRESHOLD included).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...memslots.constants import PAGE_SHIFT
from ...memslots.memslot import MemorySlot
from ..direct.rmap import gfn_to_index
from ..mmu_pages import KvmMmuPage
from ..rmap import KvmRmapHead, rmap_add
from ..role import ACC_EXEC_MASK, ACC_WRITE_MASK, PG_LEVEL_4K
from ..spte import (
    PT_USER_MASK,
    PT_WRITABLE_MASK,
    RetPf,
    is_empty_spte,
    is_mmio_spte,
    is_shadow_present_pte,
    make_mmio_spte,
    make_spte,
    mark_mmio_spte_fields,
    spte_to_pfn,
)
from . import sync as shadow_sync
from .rmap import Translation

if TYPE_CHECKING:
    from .mmu import ShadowMmu


def spte_index(sptep: int) -> int:
    """The index of `sptep` in its page table (8-byte sptes)."""
    return (sptep & 0xFFF) // 8


def set_mmio_spte(mmu: ShadowMmu, sp: KvmMmuPage, index: int, gfn: int, access: int) -> RetPf:
    """`mark_mmio_spte()`: cache the miss with the memslots generation."""
    if not is_empty_spte(sp.spt[index]):
        mmu._zap_leaf(sp, index)
    gen = mmu.vm.generation(sp.role.smm)
    sp.spt[index] = spte = make_mmio_spte(mmu.cfg, gfn, access, gen)
    mmu._emit("mark_mmio_spte", **mark_mmio_spte_fields(sp.sptep(index), gfn, spte))
    mmu.stat["pf_mmio_spte_created"] += 1
    mmu.stat["pf_emulate"] += 1
    return RetPf.EMULATE


def set_spte(
    mmu: ShadowMmu,
    sp: KvmMmuPage,
    index: int,
    gfn: int,
    access: int,
    slot: MemorySlot,
    write: bool,
    user: bool,
    *,
    prefetch: bool = False,
    level: int = PG_LEVEL_4K,
    fetch: bool = False,
) -> RetPf:
    """`mmu_set_spte()` for a RAM gfn (`prefetch`: no fault, not in pf_fixed) at
    `level` (`gfn` is then the huge page's first): a writable spte unsyncs the gfn's
    level-1 pages, or stays read-only for a write-tracked gfn (or, prefetched, a gfn
    with a page still in sync), and a write fault then is RET_PF_WRITE_PROTECTED,
    emulated (`mmu_try_to_unsync_pages()`).  A table in the way of a huge leaf is
    unlinked ("If we overwrite a PTE page pointer with a 2MB PMD, unlink the parent of
    the now unreachable PTE": `drop_parent_pte`)."""
    as_id, spte, sptep = sp.role.smm, sp.spt[index], sp.sptep(index)
    child = mmu.pages.child_at(sp, index) if level > PG_LEVEL_4K else None
    if child is not None:
        child.parent_ptes.discard(sptep)
        sp.spt[index] = spte = mmu.pages.nonpresent
    if level > PG_LEVEL_4K and mmu.nx:
        access &= ~ACC_EXEC_MASK  # make_spte(): is_nx_huge_page_enabled()
    wrprot = False
    if (
        access & ACC_WRITE_MASK
        and not spte & PT_WRITABLE_MASK  # an old writable spte: already unsync
        and shadow_sync.try_to_unsync(mmu, gfn, as_id, prefetch=prefetch)
    ):
        access &= ~ACC_WRITE_MASK
        wrprot = True
    pfn = (slot.userspace_addr >> PAGE_SHIFT) + (gfn - slot.base_gfn)
    needs = (PT_WRITABLE_MASK if write else 0) | (PT_USER_MASK if user else 0)
    present = is_shadow_present_pte(spte) and not is_mmio_spte(mmu.cfg, spte)
    executable = not fetch or not spte & mmu.cfg.shadow_nx_mask
    if present and spte_to_pfn(spte) == pfn and spte & needs == needs and executable:
        mmu.stat["pf_spurious"] += 1
        return RetPf.SPURIOUS
    if not is_empty_spte(spte):
        mmu._zap_leaf(sp, index)
    sp.spt[index] = spte = make_spte(
        mmu.cfg, pfn, access, level, writable=not slot.readonly, accessed=not prefetch
    )
    key = gfn_to_index(gfn, slot.base_gfn, level)
    mmu.shadowed_translation[sptep] = Translation(as_id, slot.id, gfn, key, level)
    heads = mmu._rmap(as_id, slot.id, level)
    recycled = rmap_add(heads.setdefault(key, KvmRmapHead(mmu.era)), sptep)
    for old in recycled:  # over RMAP_RECYCLE_THRESHOLD: the whole rmap was zapped
        mmu.pages.page_of_sptep(old).spt[spte_index(old)] = mmu.pages.nonpresent
        del mmu.shadowed_translation[old]
    if recycled:
        del heads[key]
        mmu.stat["rmap_recycled"] += len(recycled)
    mmu._emit("kvm_mmu_set_spte", gfn=gfn, spte=spte, level=level, sptep=sptep)
    if wrprot and write:
        return mmu._write_protected()
    if not prefetch:
        mmu.stat["pf_fixed"] += 1
    return RetPf.FIXED
