"""The shadow MMU's audit (as KVM's old mmu audit code checked the same things):
shadow pages against the guest tables they shadow, rmaps against present leaves, roots
against the vCPUs using them, and the vtlbs against the guest walk."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import AuditError
from ..guest import page_tables as gpt
from ..mapping_level import kvm_pages_per_hpage
from ..mmu_pages import KvmMmuPage
from ..role import ACC_USER_MASK, ACC_WRITE_MASK
from ..spte import (
    KVM_MAX_HUGEPAGE_LEVEL,
    PT_USER_MASK,
    PT_WRITABLE_MASK,
    check_mmio_spte,
    get_mmio_spte_gfn,
    is_empty_spte,
    is_large_pte,
    is_mmio_spte,
    spte_to_pfn,
)
from .sync import writable_leaf_allowed

if TYPE_CHECKING:
    from .mmu import ShadowMmu

PAGE_SHIFT = 12
ALL_LEVELS = range(1, KVM_MAX_HUGEPAGE_LEVEL + 1)


def _spte_index(sptep: int) -> int:
    return (sptep & 0xFFF) // 8


def audit_shadow_mmu(mmu: ShadowMmu) -> None:
    """`MmuPages.audit()` and the guest's tables, then: every spte of a page agrees
    with the gpte it shadows; every present leaf is in exactly one rmap (its gfn's,
    at 4K) and maps that gfn's host page; leaves under each loaded root map what the
    guest walk says; shadowed gfns have no writable leaf; root counts; vtlbs."""
    mmu.pages.audit()
    mmu.guest.audit()
    leaves: set[int] = set()
    for sp in mmu.pages.pages():
        _audit_page(mmu, sp, leaves)
    seen: set[int] = set()
    for (as_id, slot_id, level), heads in mmu.rmaps.items():
        for key, head in heads.items():
            head.audit()
            for sptep in head:
                tr = mmu.shadowed_translation.get(sptep)
                where = (as_id, slot_id, key, level)
                if sptep in seen or tr is None or (*tr[:2], *tr[3:]) != where:
                    raise AuditError(f"rmap entry {sptep:#x} is not a present leaf once")
                seen.add(sptep)
    if seen != leaves or set(mmu.shadowed_translation) != leaves:
        raise AuditError(f"{len(leaves ^ seen)} present leaves and rmap entries differ")
    users: dict[int, int] = {}
    for vcpu, root in mmu.roots.items():
        users[root.seq] = users.get(root.seq, 0) + 1
        if not mmu.pages.is_obsolete(root):
            _audit_walks(mmu, root, mmu.cr3s[vcpu], 0)
    for cached in mmu.prev_roots.values():  # each prev root holds a reference too
        if len(cached) > 3:
            raise AuditError("more than KVM_MMU_NUM_PREV_ROOTS cached roots")
        for prev in cached:
            if prev is not None:
                users[prev.seq] = users.get(prev.seq, 0) + 1
    for sp in [*mmu.pages.pages(), *mmu.pages.invalid_roots.values()]:
        if sp.root_count != users.get(sp.seq, 0):
            raise AuditError(f"{sp}: root_count {sp.root_count}, {users.get(sp.seq, 0)} users")
    expected = {sp.seq: (sp.role.smm, sp.gfn) for sp in mmu.pages.pages() if not sp.role.direct}
    wrong = mmu.levels.audit(expected)
    if wrong is not None:
        raise AuditError(wrong)
    if mmu.vtlbs is not None:
        mmu.vtlbs.audit(mmu.cr3s, lambda cr3, gva: _guest_translation(mmu, cr3, gva))


def _guest_translation(mmu: ShadowMmu, cr3: int, gva: int) -> tuple[int, int]:
    walk = mmu.guest.translate(cr3, gva)
    return (-1, 0) if walk.gfn is None else (walk.gfn, walk.access)


def _audit_page(mmu: ShadowMmu, sp: KvmMmuPage, leaves: set[int]) -> None:
    as_id, level, direct = sp.role.smm, sp.role.level, bool(sp.role.direct)
    if sp.unsync and (direct or level != 1 or not mmu.unsync_enabled):
        raise AuditError(f"{sp} is unsync but not an indirect level-1 page")
    if (
        not direct
        and not writable_leaf_allowed(mmu, sp.gfn, as_id)
        and any(
            mmu.pages.page_of_sptep(p).spt[_spte_index(p)] & PT_WRITABLE_MASK
            for p in mmu._rmap_of(as_id, sp.gfn, ALL_LEVELS)
        )
    ):
        raise AuditError(f"shadowed gfn {sp.gfn:#x} has a writable leaf")
    if sp.unsync:  # stale until the next sync: only the rmap side must hold
        for index, spte in enumerate(sp.spt):
            if not is_empty_spte(spte) and not is_mmio_spte(mmu.cfg, spte):
                leaves.add(sp.sptep(index))
        return
    for index, spte in enumerate(sp.spt):
        if is_empty_spte(spte):
            continue
        where = f"{sp} index {index}"
        gpte = 0 if direct else mmu.guest.pte(sp.gfn, index)
        if direct:
            want, access = sp.gfn + (index << 9 * (level - 1)), sp.role.access
        elif gpte & gpt.PT_PRESENT:
            want, access = gpt.pte_gfn(gpte), sp.role.access & gpt.gpte_access(gpte)
        else:
            raise AuditError(f"{where}: an spte for a non-present gpte")
        if level > 1 and is_large_pte(spte):
            if not (direct or gpte & gpt.PT_PAGE_SIZE):
                raise AuditError(f"{where}: a huge leaf where the guest has a table")
            _audit_leaf(mmu, sp, index, want, access, direct or bool(gpte & gpt.PT_DIRTY))
            leaves.add(sp.sptep(index))
        elif level > 1:
            child, huge = mmu.pages.child_at(sp, index), direct or gpte & gpt.PT_PAGE_SIZE
            if child is None or (child.gfn, bool(child.role.direct)) != (want, bool(huge)):
                raise AuditError(f"{where} links {child}, the guest says {want:#x}")
            if not huge and child.role.access != access:
                raise AuditError(f"{child}: access {child.role.access}, guest {access}")
        elif is_mmio_spte(mmu.cfg, spte):
            fresh = check_mmio_spte(mmu.cfg, spte, mmu.vm.generation(as_id))
            gfn = get_mmio_spte_gfn(mmu.cfg, spte)
            if gfn != want or (fresh and mmu.vm.gfn_to_memslot(gfn, as_id) is not None):
                raise AuditError(f"{where}: a wrong MMIO spte for gfn {want:#x}")
        else:
            _audit_leaf(mmu, sp, index, want, access, direct or bool(gpte & gpt.PT_DIRTY))
            leaves.add(sp.sptep(index))


def _audit_leaf(
    mmu: ShadowMmu, sp: KvmMmuPage, index: int, gfn: int, access: int, dirty: bool
) -> None:
    spte, where = sp.spt[index], f"{sp} index {index}"
    tr = mmu.shadowed_translation.get(sp.sptep(index))
    slot = mmu.vm.slot(sp.role.smm, tr.slot_id) if tr is not None else None
    level = sp.role.level
    if tr is None or slot is None or tr.gfn != gfn or not slot.contains(gfn):
        raise AuditError(f"{where}: the leaf does not map gfn {gfn:#x}")
    if tr.level != level or gfn % kvm_pages_per_hpage(level):
        raise AuditError(f"{where}: a level-{level} leaf on the level-{tr.level} rmap")
    if level > 1 and spte & PT_WRITABLE_MASK and mmu.levels.shadowed_in(sp.role.smm, gfn, level):
        raise AuditError(f"{where}: a writable huge leaf over a shadowed table")
    if level > 1 and mmu.nx and not spte & mmu.cfg.shadow_nx_mask:
        raise AuditError(f"{where}: an executable huge leaf under nx_huge_pages")
    if spte_to_pfn(spte) != (slot.userspace_addr >> PAGE_SHIFT) + gfn - slot.base_gfn:
        raise AuditError(f"{where}: the leaf maps the wrong host page")
    if spte & PT_WRITABLE_MASK and not (access & ACC_WRITE_MASK and dirty):
        raise AuditError(f"{where}: writable beyond the (clean or read-only) gpte")
    if spte & PT_USER_MASK and not access & ACC_USER_MASK:
        raise AuditError(f"{where}: user access beyond the gpte")


def _audit_walks(mmu: ShadowMmu, sp: KvmMmuPage, cr3: int, gva: int) -> None:
    """Each leaf reachable from a loaded root maps what the guest walk says."""
    for index, spte in enumerate(sp.spt):
        address = gva | index << (PAGE_SHIFT + 9 * (sp.role.level - 1))
        child = mmu.pages.child_at(sp, index)
        if child is not None:
            _audit_walks(mmu, child, cr3, address)
        elif not is_empty_spte(spte) and not sp.unsync:
            tr = mmu.shadowed_translation.get(sp.sptep(index))
            gfn = get_mmio_spte_gfn(mmu.cfg, spte) if tr is None else tr.gfn
            if mmu.guest.translate(cr3, address).gfn != gfn:
                raise AuditError(f"cr3 {cr3:#x} gva {address:#x}: the leaf maps {gfn:#x}")
