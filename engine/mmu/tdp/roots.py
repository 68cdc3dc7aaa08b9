"""TDP MMU roots: one per address space and role, shared by the vCPUs that need it,
reference counted, invalidated by a fast zap and zapped while still referenced.

torvalds/linux 6.18 `arch/x86/kvm/mmu/tdp_mmu.c`, `mmu.c`:
- `kvm_tdp_mmu_alloc_root()`: a valid root on `tdp_mmu_roots` with the same `role.word`
  gets one more reference (`kvm_tdp_mmu_get_root`, refcount_inc_not_zero); else a new root
  with `tdp_mmu_root_count = 2` (the vCPU's reference and the TDP MMU's own, "held until
  the root is invalidated").
- `kvm_tdp_mmu_put_root()`: the last reference (only ever on an invalid root) takes the
  root off the list and frees it through `call_rcu()` — no tracepoint.
- `kvm_tdp_mmu_invalidate_all_roots()` (mmu_lock for write): every valid root gets
  `role.invalid` and `tdp_mmu_scheduled_root_to_zap`; vCPUs see their root obsolete
  (KVM_REQ_MMU_FREE_OBSOLETE_ROOTS), put it and load another on their next entry.
- `kvm_tdp_mmu_zap_invalidated_roots()` (mmu_lock for read): each scheduled root is zapped
  (`tdp_mmu_zap_root`: passes at 4K, 2M, 1G, then the root's level, the first two skipped
  with CONFIG_KVM_PROVE_MMU, each spte cleared with `tdp_mmu_set_spte_atomic`), then the
  TDP MMU's reference is put.
- `kvm_mmu_zap_all_fast()` (mmu.c): `kvm_mmu_zap_all_fast` tracepoint (the old
  generation), the `mmu_valid_gen` 0/1 flip for the shadow MMU's pages, the invalidation,
  the zap of obsolete shadow pages (none here), then the zap of the invalidated roots.
- `kvm_tdp_mmu_zap_all()` (VM teardown; the classroom's "slow zap"): every root's sptes,
  mmu_lock held for write, roots left in place.
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import AuditError
from ..role import PG_LEVEL_1G, PG_LEVEL_2M, PG_LEVEL_4K, KvmMmuPageRole, tdp_root_role
from ..spte import is_last_spte, is_shadow_present_pte
from .core import TdpMmuCore
from .iter import for_each_tdp_pte_min_level
from .pages import TdpMmuPage

PAGE_SHIFT = 12


class TdpRoots(TdpMmuCore):
    """Roots and the zaps that work root by root."""

    roots: dict[int, TdpMmuPage]  # vcpu -> mmu->root (set by TdpMmu)

    def tdp_mmu_max_gfn_exclusive(self) -> int:
        """`kvm_mmu_max_gfn() + 1`: walks stop at host MAXPHYADDR."""
        return 1 << (self.cfg.host_phys_bits - PAGE_SHIFT)

    def root_role(self, as_id: int) -> KvmMmuPageRole:
        """`kvm_calc_tdp_mmu_root_page_role()`: direct, ACC_ALL, efer_nx, 4 levels."""
        return replace(tdp_root_role(smm=bool(as_id)), ad_disabled=int(self.cfg.ad_disabled))

    # -- references -------------------------------------------------------------------

    def kvm_tdp_mmu_get_root(self, root: TdpMmuPage) -> bool:
        if root.root_count <= 0:
            return False
        root.root_count += 1
        return True

    def kvm_tdp_mmu_put_root(self, root: TdpMmuPage) -> None:
        root.root_count -= 1
        if root.root_count:
            return
        if not root.role.invalid:
            raise AuditError(f"tdp: last reference of valid {root} put (KVM_BUG_ON)")
        self.pages.tdp_mmu_roots.remove(root)
        self.pages.call_rcu(root, self.now_ns)

    def kvm_tdp_mmu_alloc_root(self, as_id: int) -> TdpMmuPage:
        role = self.root_role(as_id)
        for root in self.pages.tdp_mmu_roots:
            if not root.role.invalid and root.role == role and self.kvm_tdp_mmu_get_root(root):
                return root
        root = self.tdp_mmu_init_sp(0, role, 0, None)
        root.root_count = 2
        self.pages.tdp_mmu_roots.insert(0, root)  # list_add_rcu()
        return root

    def root(self, vcpu: int) -> TdpMmuPage:
        """`kvm_mmu_load()`: the vCPU's root; an obsolete one is put first
        (`kvm_mmu_free_obsolete_roots`) and another loaded."""
        root = self.roots.get(vcpu)
        if root is not None and not root.role.invalid:
            return root
        if root is not None:
            self.kvm_tdp_mmu_put_root(root)
        root = self.kvm_tdp_mmu_alloc_root(self.vm.vcpu(vcpu).as_id)
        self.roots[vcpu] = root
        return root

    def kvm_mmu_unload(self, vcpu: int) -> None:
        """`kvm_mmu_reset_context()` → `kvm_mmu_unload()`: the vCPU puts its root (a
        role change, e.g. entering or leaving SMM); its next entry loads the root of its
        new role (`root`)."""
        root = self.roots.pop(vcpu, None)
        if root is not None:
            self.kvm_tdp_mmu_put_root(root)

    def _each_root(self, only_valid: bool) -> list[TdpMmuPage]:
        """`for_each_tdp_mmu_root_yield_safe`: each root, held while the body runs
        (the caller puts it after)."""
        held = []
        for root in list(self.pages.tdp_mmu_roots):
            if only_valid and root.role.invalid:
                continue
            if self.kvm_tdp_mmu_get_root(root):
                held.append(root)
        return held

    # -- invalidation and zapping ---------------------------------------------------------

    def kvm_tdp_mmu_invalidate_all_roots(self) -> int:
        invalidated = 0
        for root in self.pages.tdp_mmu_roots:
            if not root.role.invalid:
                root.tdp_mmu_scheduled_root_to_zap = True
                root.role = root.role.invalidated()
                invalidated += 1
        return invalidated

    def kvm_tdp_mmu_zap_invalidated_roots(self) -> int:
        """Page tables freed, per root in `pages.lock_holds`."""
        self.pages.lock_holds = []
        total = 0
        for root in self._each_root(only_valid=False):
            if root.tdp_mmu_scheduled_root_to_zap:
                root.tdp_mmu_scheduled_root_to_zap = False
                before = self.pages.removed_pt
                self.tdp_mmu_zap_root(root, shared=True)
                self.pages.lock_holds.append(self.pages.removed_pt - before)
                total += self.pages.removed_pt - before
                self.kvm_tdp_mmu_put_root(root)  # the TDP MMU's own reference
            self.kvm_tdp_mmu_put_root(root)  # the walk's
        return total

    def tdp_mmu_zap_root(self, root: TdpMmuPage, shared: bool) -> None:
        """`tdp_mmu_zap_root()` (6.18): passes of decreasing granularity, 4K, 2M, 1G, then
        the root's level; with CONFIG_KVM_PROVE_MMU the 4K and 2M passes are skipped, to
        exercise zapping a 1G region full of 4K sptes as the fault path can."""
        levels: tuple[int, ...] = (PG_LEVEL_1G, root.role.level)
        if not self.params.prove_mmu:
            levels = (PG_LEVEL_4K, PG_LEVEL_2M, *levels)
        for zap_level in levels:
            self._tdp_mmu_zap_root(root, shared, zap_level)

    def _tdp_mmu_zap_root(self, root: TdpMmuPage, shared: bool, zap_level: int) -> None:
        end = self.tdp_mmu_max_gfn_exclusive()
        for it in for_each_tdp_pte_min_level(self.pages.by_pa, root, zap_level, 0, end):
            while is_shadow_present_pte(it.old_spte) and it.level <= zap_level:
                if not shared:
                    self.tdp_mmu_iter_set_spte(it, self.nonpresent)
                    break
                if not self.tdp_mmu_set_spte_atomic(it, self.nonpresent):
                    break  # else another CPU changed it: retry with the new old_spte

    def kvm_tdp_mmu_zap_all(self) -> int:
        """Every root's sptes under mmu_lock for write; page tables freed."""
        before = self.pages.removed_pt
        for root in self._each_root(only_valid=False):
            self.tdp_mmu_zap_root(root, shared=False)
            self.kvm_tdp_mmu_put_root(root)
        self.pages.lock_holds = [self.pages.removed_pt - before]
        return self.pages.removed_pt - before

    def kvm_mmu_zap_all_fast(self) -> int:
        """mmu.c's fast zap with the TDP MMU on; page tables freed."""
        pages = self.pages
        self._emit("kvm_mmu_zap_all_fast", mmu_valid_gen=pages.mmu_valid_gen, mmu_used_pages=0)
        pages.mmu_valid_gen = 0 if pages.mmu_valid_gen else 1
        self.kvm_tdp_mmu_invalidate_all_roots()
        return self.kvm_tdp_mmu_zap_invalidated_roots()

    def tdp_mmu_zap_leafs(self, root: TdpMmuPage, start: int, end: int, flush: bool) -> bool:
        """`tdp_mmu_zap_leafs()` (6.18 tdp_mmu.c), mmu_lock held for write: every present
        leaf of gfns [start, end) in `root` becomes SHADOW_NONPRESENT_VALUE
        (`tdp_mmu_iter_set_spte`, each traced as `kvm_tdp_mmu_spte_changed`).  Only leaves
        go, so no page table is freed; a zap in a valid root needs a TLB flush, one in an
        invalid root none ("see kvm_tdp_mmu_zap_invalidated_roots()")."""
        end = min(end, self.tdp_mmu_max_gfn_exclusive())
        for it in for_each_tdp_pte_min_level(self.pages.by_pa, root, PG_LEVEL_4K, start, end):
            if not (is_shadow_present_pte(it.old_spte) and is_last_spte(it.old_spte, it.level)):
                continue
            self.tdp_mmu_iter_set_spte(it, self.nonpresent)
            if not root.role.invalid:
                flush = True
        return flush

    def kvm_tdp_mmu_unmap_gfn_range(self, as_id: int, start: int, end: int, flush: bool) -> bool:
        """`kvm_tdp_mmu_unmap_gfn_range()` (6.18 tdp_mmu.c), the MMU notifier's unmap
        (`kvm_unmap_gfn_range()`, mmu_notifier.py): `tdp_mmu_zap_leafs` in every root of
        the slot's address space, invalid ones too (`KVM_INVALID_ROOTS`: a vCPU may still
        run on an invalid root until it reloads, and must not keep the page mapped);
        True when a TLB flush is needed."""
        for root in self._each_root(only_valid=False):  # __for_each_tdp_mmu_root_yield_safe
            if root.as_id == as_id:
                flush = self.tdp_mmu_zap_leafs(root, start, end, flush)
            self.kvm_tdp_mmu_put_root(root)
        return flush
