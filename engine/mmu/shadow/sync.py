"""Guest page-table writes under shadow paging: unsync pages, emulated pte writes, write
flooding, and the sync at the next CR3 load or INVLPG (docs/kvm.md §4).

From a 6.17/6.18 `arch/x86/kvm/mmu/mmu.c` and `paging_tmpl.h`:
- `account_shadowed()`: an upper-level (level > 1) shadow page write-tracks its gfn
  (`__kvm_write_track_add_gfn`); a level-1 page only write-protects it.
- `mmu_try_to_unsync_pages()`: making a writable spte for a gfn that is write-tracked
  fails (-EPERM: the spte stays read-only and a write fault becomes
  RET_PF_WRITE_PROTECTED, emulated by `kvm_mmu_write_protect_fault()`); otherwise each
  level-1 page of the gfn goes unsync (`kvm_unsync_page()`: `kvm_mmu_unsync_page`
  tracepoint, `++kvm->stat.mmu_unsync`) and the spte is writable: the guest edits that
  table without exits, and the shadow page goes stale.  While synchronizing, any shadow
  page of the gfn forces write protection.
- `kvm_mmu_track_write()`: an emulated store into a write-tracked table:
  `++mmu_pte_write`; a page hit by write flooding (`detect_write_flooding()`: a third
  emulated write with no fault walking through the page in between; level-1 pages never
  count) or a misaligned write is zapped (`++mmu_flooded`), else the written spte alone
  (`mmu_page_zap_pte`, `++mmu_pde_zapped` for a non-zero upper-level entry).
- `kvm_mmu_sync_roots()` (a CR3 load: KVM_REQ_MMU_SYNC, and `kvm_mmu_load()`):
  `mmu_sync_children()` write-protects each unsync page's gfn again, unlinks it from the
  unsync state (`kvm_unlink_unsync_page`, `--mmu_unsync`) and `kvm_sync_page()`s it:
  `kvm_mmu_sync_page`, then `FNAME(sync_spte)` for every spte (re-read the gpte: drop the
  spte when the gpte is not present or maps another gfn, else remake it with the gpte's
  access).
- `kvm_mmu_invalidate_addr()` (INVLPG): `kvm_sync_spte()` of the one spte of that gva in
  each unsync page on the path; the page stays unsync.

Eras: the unsync mechanism is Marcelo Tosatti's (2.6.27, 2008), so the 2011 threads had it;
`ShadowMmu(unsync=False)` is the earlier behaviour, every shadowed table write-tracked.
Not modelled: misaligned or partial pte writes (the model's guest stores whole ptes),
the values an emulated store writes (the guest's own `write_pte` that follows is it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..guest import page_tables as gpt
from ..mmu_pages import KvmMmuPage
from ..role import ACC_WRITE_MASK
from ..spte import (
    PT_WRITABLE_MASK,
    get_mmio_spte_access,
    get_mmio_spte_gfn,
    is_empty_spte,
    is_mmio_spte,
    make_spte,
    spte_to_pfn,
)

if TYPE_CHECKING:
    from .mmu import ShadowMmu

PG_LEVEL_4K = 1
WRITE_FLOODING_THRESHOLD = 3  # detect_write_flooding(): atomic_read(...) >= 3


def write_tracked(mmu: ShadowMmu, gfn: int, as_id: int | None = None) -> bool:
    """`kvm_gfn_is_write_tracked()`: an upper-level page shadows `gfn` (before unsync
    existed: any page)."""
    return any(
        sp.role.level > PG_LEVEL_4K or not mmu.unsync_enabled
        for sp in mmu.shadow_pages_of(gfn, as_id)
    )


def try_to_unsync(
    mmu: ShadowMmu, gfn: int, as_id: int, synchronizing: bool = False, prefetch: bool = False
) -> bool:
    """`mmu_try_to_unsync_pages()`: True when the new spte must stay read-only (a
    prefetch never unsyncs: -EEXIST)."""
    sps = mmu.shadow_pages_of(gfn, as_id)
    if write_tracked(mmu, gfn, as_id):
        return True
    for sp in sps:
        if synchronizing:
            return True
        if sp.unsync:
            continue
        if prefetch:
            return True
        unsync_page(mmu, sp)
    return False


def unsync_page(mmu: ShadowMmu, sp: KvmMmuPage) -> None:
    """`kvm_unsync_page()`: traced before `sp->unsync = 1`, so the line says "sync"."""
    mmu.pages.emit_sp("kvm_mmu_unsync_page", sp)
    mmu.pages.stat["mmu_unsync"] += 1
    sp.unsync = True


def guest_store(mmu: ShadowMmu, table_gfn: int, index: int, new: int) -> None:
    """A guest store of a whole pte into table `table_gfn`.  Not shadowed: plain memory.
    Level-1 pages only: the first store faulted and unsynced them; the store and the
    ones after it go to memory.  Write-tracked: the store was emulated."""
    sps = mmu.shadow_pages_of(table_gfn)
    if not sps:
        return
    if not write_tracked(mmu, table_gfn):
        for sp in sps:
            if not sp.unsync:
                unsync_page(mmu, sp)
        return
    track_write(mmu, sps, index, new)


def track_write(mmu: ShadowMmu, sps: list[KvmMmuPage], index: int, gentry: int) -> None:
    """`kvm_mmu_track_write()` for a whole-pte store at `index` of the pages `sps`."""
    stat = mmu.pages.stat
    stat["mmu_pte_write"] += 1
    for sp in sps:
        if sp.seq not in mmu.pages.active_mmu_pages:
            continue  # zapped with an earlier page of this store
        if detect_write_flooding(sp):
            mmu.pages.prepare_zap(sp)
            stat["mmu_flooded"] += 1
            continue
        if not is_empty_spte(sp.spt[index]):
            zap_spte(mmu, sp, index)
            if gentry and sp.role.level != PG_LEVEL_4K:
                stat["mmu_pde_zapped"] += 1


def detect_write_flooding(sp: KvmMmuPage) -> bool:
    """Level-1 pages can go unsync instead; an upper-level page counts the emulated
    writes since a fault last walked through it (`clear_sp_write_flooding_count`)."""
    if sp.role.level == PG_LEVEL_4K:
        return False
    sp.write_flooding_count += 1
    return sp.write_flooding_count >= WRITE_FLOODING_THRESHOLD


def zap_spte(mmu: ShadowMmu, sp: KvmMmuPage, index: int) -> None:
    """`mmu_page_zap_pte()`: unlink a child page or drop a leaf."""
    child = mmu.pages.child_at(sp, index)
    if child is not None:
        child.parent_ptes.discard(sp.sptep(index))
    elif not is_empty_spte(sp.spt[index]):
        mmu._drop_leaf(sp, index, sp.spt[index])
    sp.spt[index] = mmu.pages.nonpresent


# -- sync ------------------------------------------------------------------------------


def reachable_unsync(mmu: ShadowMmu, root: KvmMmuPage) -> list[KvmMmuPage]:
    """The unsync pages under `root` (the kernel follows `unsync_child_bitmap`)."""
    found: list[KvmMmuPage] = []
    for sp in mmu.pages.pages():
        if sp.unsync and _under(mmu, sp, root):
            found.append(sp)
    return found


def _under(mmu: ShadowMmu, sp: KvmMmuPage, root: KvmMmuPage) -> bool:
    todo, seen = [sp], set()
    while todo:
        page = todo.pop()
        if page is root:
            return True
        if page.seq in seen:
            continue
        seen.add(page.seq)
        todo.extend(mmu.pages.page_of_sptep(p) for p in page.parent_ptes)
    return False


def sync_roots(mmu: ShadowMmu, root: KvmMmuPage) -> int:
    """`kvm_mmu_sync_roots()` → `mmu_sync_children()`: every unsync page under the root
    written-protected again, then synced; returns how many."""
    pages = reachable_unsync(mmu, root)
    for sp in pages:
        mmu.write_protect_gfn(sp.role.smm, sp.gfn)
    for sp in pages:
        sp.unsync = False  # kvm_unlink_unsync_page()
        mmu.pages.stat["mmu_unsync"] -= 1
        sync_page(mmu, sp)
    return len(pages)


def sync_page(mmu: ShadowMmu, sp: KvmMmuPage) -> None:
    """`kvm_sync_page()`: the tracepoint, then `FNAME(sync_spte)` of every spte."""
    mmu.pages.emit_sp("kvm_mmu_sync_page", sp)
    for index, spte in enumerate(sp.spt):
        if not is_empty_spte(spte):
            sync_spte(mmu, sp, index)
    mmu.stat["synced_pages"] += 1


def sync_spte(mmu: ShadowMmu, sp: KvmMmuPage, index: int) -> None:
    """`FNAME(sync_spte)`: make a level-1 spte agree with the gpte the guest wrote."""
    spte = sp.spt[index]
    if is_empty_spte(spte):
        return
    mmu.stat["synced_sptes"] += 1
    gpte = mmu.guest.pte(sp.gfn, index)
    if not gpte & gpt.PT_PRESENT:  # FNAME(prefetch_invalid_gpte)
        zap_spte(mmu, sp, index)
        return
    gfn = gpt.pte_gfn(gpte)
    access = sp.role.access & gpt.gpte_access(gpte)
    if not gpte & gpt.PT_DIRTY:
        access &= ~ACC_WRITE_MASK  # FNAME(protect_clean_gpte)
    if is_mmio_spte(mmu.cfg, spte):  # sync_mmio_spte()
        mmio_access = access & mmu.cfg.shadow_mmio_access_mask
        if get_mmio_spte_gfn(mmu.cfg, spte) != gfn or (
            get_mmio_spte_access(mmu.cfg, spte) != mmio_access
        ):
            sp.spt[index] = mmu.pages.nonpresent  # mmu_spte_clear_no_track()
        return
    tr = mmu.shadowed_translation.get(sp.sptep(index))
    if tr is None or tr.gfn != gfn:
        zap_spte(mmu, sp, index)  # drop_spte(): the gpte maps another gfn now
        return
    if access & ACC_WRITE_MASK and try_to_unsync(mmu, gfn, sp.role.smm, synchronizing=True):
        access &= ~ACC_WRITE_MASK
    writable = bool(spte & mmu.cfg.shadow_host_writable_mask)
    sp.spt[index] = make_spte(mmu.cfg, spte_to_pfn(spte), access, writable=writable)


def invalidate_addr(mmu: ShadowMmu, root: KvmMmuPage, gva: int) -> None:
    """`__kvm_mmu_invalidate_addr()` (INVLPG): sync the gva's spte in unsync pages."""
    sp: KvmMmuPage | None = root
    while sp is not None:
        index = gpt.pt_index(gva, sp.role.level)
        if sp.unsync:
            sync_spte(mmu, sp, index)
        sp = mmu.pages.child_at(sp, index) if sp.role.level > PG_LEVEL_4K else None


def writable_leaf_allowed(mmu: ShadowMmu, gfn: int, as_id: int) -> bool:
    """For the audit: a leaf may map a shadowed gfn writable only while its pages are
    unsync."""
    sps = mmu.shadow_pages_of(gfn, as_id)
    return all(sp.unsync for sp in sps)


__all__ = ["PT_WRITABLE_MASK", "guest_store", "sync_roots", "try_to_unsync"]
