"""Huge pages in the TDP MMU: how large a leaf may be, splitting (eager, when dirty
logging starts, and on an instruction fetch under the NX huge page mitigation), dirty
logging's write protection, collapsing back to huge pages, and NX huge page recovery.

torvalds/linux 6.18 `tdp_mmu.c`, `mmu.c`, `spte.c`, `x86.c`:
- `kvm_mmu_max_mapping_level()`: the largest level whose aligned range lies inside the
  memslot with gfn and host address aligned alike (`lpage_info.disallow_lpage`), capped
  by the host's own mapping (`host_pfn_mapping_level`: `TdpMmuParams.host_level`); one
  implementation for every MMU, `mapping_level.py`.
- `tdp_mmu_split_huge_page()`: a new page table filled with `make_small_spte()` (6.18
  spte.c, spte.py: the huge spte plus the offset of each part; 4K parts lose PT_PAGE_SIZE
  and, under the NX mitigation, become executable through `make_spte_executable()`, which
  keeps an access-tracked spte access-tracked), linked in place of the huge spte;
  `kvm_mmu_split_huge_page` traces it.
- `kvm_mmu_slot_apply_flags()` (x86.c) when a slot starts logging dirty pages:
  `eager_page_split` splits every huge page down to 4K at once, then write protection
  (`kvm_tdp_mmu_wrprot_slot`, 4K and up) or, with PML, D bits cleared on the leaves
  (`kvm_tdp_mmu_clear_dirty_slot`) and write protection of 2M and up; when it stops,
  `kvm_mmu_recover_huge_pages()` (6.13+) replaces each table a huge leaf can stand for by
  `make_huge_spte()` of its first leaf, in place (`recover_huge_pages_range()`: the
  table goes through `handle_removed_pt()`), or, in the "before-6.13" era
  (`params.huge_recovery_era`), `kvm_tdp_mmu_zap_collapsible_sptes()` zaps (freezing
  first) those tables and the next faults map huge pages again.
- `kvm_recover_nx_huge_pages()`: zaps ceil(nr_pages / ratio) of the page tables made for
  disallowed executable huge pages, oldest first, each unaccounted first and zapped by
  `kvm_tdp_mmu_zap_possible_nx_huge_page()` under mmu_lock held for read (6.18; before,
  `kvm_tdp_mmu_zap_sp()` under the write lock); a slot that logs dirty pages only loses
  the tracking (`nx_huge_pages.py`, shared).
"""

from __future__ import annotations

from collections.abc import Iterable

from ...memslots.constants import KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY
from ...memslots.memslot import MemorySlot
from ...memslots.vm import kvm_dirty_log_manual_protect_and_init_set
from ..mapping_level import MappingLevels
from ..nx_huge_pages import recover_nx_huge_pages
from ..params import cpu_dirty_log_size
from ..role import PG_LEVEL_2M, PG_LEVEL_4K, KvmMmuPageRole
from ..spte import (
    KVM_MAX_HUGEPAGE_LEVEL,
    PT_WRITABLE_MASK,
    SPTE_BASE_ADDR_MASK,
    is_large_pte,
    is_last_spte,
    is_shadow_present_pte,
    make_huge_spte,
    make_small_spte,
)
from .iter import TdpIter, for_each_tdp_pte, for_each_tdp_pte_min_level, kvm_pages_per_hpage
from .pages import SPTE_ENT_PER_PAGE, TdpMmuPage, spte_to_child_pa
from .roots import TdpRoots

PAGE_SHIFT = 12


class TdpHuge(TdpRoots):
    levels: MappingLevels
    # -- mapping levels -------------------------------------------------------------------

    def kvm_mmu_max_mapping_level(self, slot: MemorySlot, gfn: int, max_level: int) -> int:
        """`kvm_mmu_max_mapping_level()` (mapping_level.py, shared with the shadow MMU)."""
        return self.levels.kvm_mmu_max_mapping_level(slot, gfn, max_level)

    # -- splitting ----------------------------------------------------------------------

    def make_small_spte(self, huge_spte: int, role: KvmMmuPageRole, index: int) -> int:
        """`make_small_spte(kvm, huge_spte, role, index)` (spte.py)."""
        nx = self.params.nx_huge_page_workaround_enabled  # is_nx_huge_page_enabled()
        return make_small_spte(self.cfg, huge_spte, role.level, role.access, index, nx)

    def _split_sptes(self, huge_spte: int, role: KvmMmuPageRole) -> list[int]:
        """`make_small_spte()` of every index, in one pass: the bits it changes
        (PT_PAGE_SIZE, X/NX, A, RWX and their saved copy) lie outside the address bits the
        index sets, so each child is the first one plus its offset (the comprehension when
        the huge spte has address bits below its size, which an aligned pfn never has)."""
        first = self.make_small_spte(huge_spte, role, 0)
        step = kvm_pages_per_hpage(role.level) << PAGE_SHIFT
        span = step * SPTE_ENT_PER_PAGE
        if not first & (span - 1) & ~(step - 1):
            return list(range(first, first + span, step))
        return [first | i * step for i in range(SPTE_ENT_PER_PAGE)]

    def tdp_mmu_split_huge_page(self, it: TdpIter, sp: TdpMmuPage, shared: bool) -> int:
        huge_spte, level = it.old_spte, it.level
        sp.spt[:] = self._split_sptes(huge_spte, sp.role)
        ret = self.tdp_mmu_link_sp(it, sp, shared)
        if not ret:
            self.kvm_update_page_stats(level - 1, SPTE_ENT_PER_PAGE)
        self._emit("kvm_mmu_split_huge_page", gfn=it.gfn, spte=huge_spte, level=level, errno=ret)
        return ret

    def tdp_mmu_split_huge_pages_root(
        self, root: TdpMmuPage, start: int, end: int, target_level: int, shared: bool
    ) -> int:
        """Pre-order, so a 1G page split into 2M pages has those split in turn."""
        split = 0
        for it in for_each_tdp_pte_min_level(self.pages.by_pa, root, target_level + 1, start, end):
            while is_shadow_present_pte(it.old_spte) and is_large_pte(it.old_spte):
                sp = self.tdp_mmu_init_child_sp(it)
                if not self.tdp_mmu_split_huge_page(it, sp, shared):
                    split += 1
                    break
                self.tdp_mmu_free_sp(sp)  # lost a race: retry on the fresh old_spte
        return split

    def kvm_tdp_mmu_try_split_huge_pages(
        self, slot: MemorySlot, start: int, end: int, target_level: int, shared: bool = True
    ) -> int:
        split = 0
        for root in self._each_root(only_valid=True):
            if root.as_id == slot.as_id:
                split += self.tdp_mmu_split_huge_pages_root(root, start, end, target_level, shared)
            self.kvm_tdp_mmu_put_root(root)
        return split

    # -- dirty logging ------------------------------------------------------------------

    @property
    def pml_logs_dirty_pages(self) -> bool:
        """Page Modification Logging in use (`kvm->arch.cpu_dirty_log_size`, params.py):
        `enable_pml` on EPT, which needs EPT A/D bits (vmx.c `hardware_setup()`)."""
        return cpu_dirty_log_size(self.params, self.cfg) > 0

    def wrprot_gfn_range(self, root: TdpMmuPage, start: int, end: int, min_level: int) -> bool:
        sptes = for_each_tdp_pte_min_level(self.pages.by_pa, root, min_level, start, end)
        return self._clear_leaf_bit(sptes, PT_WRITABLE_MASK)

    def clear_dirty_gfn_range(self, root: TdpMmuPage, start: int, end: int) -> bool:
        """D bits off (write protection instead when A/D bits are off)."""
        dbit = PT_WRITABLE_MASK if self.cfg.ad_disabled else self.cfg.shadow_dirty_mask
        return self._clear_leaf_bit(for_each_tdp_pte(self.pages.by_pa, root, start, end), dbit)

    def _clear_leaf_bit(self, sptes: Iterable[TdpIter], bit: int) -> bool:
        """The loop `wrprot_gfn_range()` and `clear_dirty_gfn_range()` share: `bit` off in
        each present leaf that has it, by `tdp_mmu_set_spte_atomic()` (a lost exchange
        reads the spte again: `goto retry`); True if any spte changed."""
        spte_set = False
        for it in sptes:
            while (
                is_shadow_present_pte(it.old_spte)
                and is_last_spte(it.old_spte, it.level)
                and it.old_spte & bit
            ):
                if not self.tdp_mmu_set_spte_atomic(it, it.old_spte & ~bit):
                    spte_set = True
                    break
        return spte_set

    def _for_slot(self, slot: MemorySlot, action: str, *args: int) -> bool:
        done = False
        for root in self._each_root(only_valid=True):
            if root.as_id == slot.as_id:
                start, end = slot.base_gfn, slot.base_gfn + slot.npages
                done |= getattr(self, action)(root, start, end, *args)
            self.kvm_tdp_mmu_put_root(root)
        return done

    def kvm_tdp_mmu_wrprot_slot(self, slot: MemorySlot, min_level: int) -> bool:
        return self._for_slot(slot, "wrprot_gfn_range", min_level)

    def kvm_tdp_mmu_clear_dirty_slot(self, slot: MemorySlot) -> bool:
        return self._for_slot(slot, "clear_dirty_gfn_range")

    def kvm_tdp_mmu_clear_dirty_pt_masked(
        self, slot: MemorySlot, gfn: int, mask: int, wrprot: bool
    ) -> int:
        """`kvm_tdp_mmu_clear_dirty_pt_masked()` (6.18 tdp_mmu.c), from
        `kvm_arch_mmu_enable_log_dirty_pt_masked()` (KVM_GET_DIRTY_LOG, KVM_CLEAR_DIRTY_LOG,
        a dirty ring's reset): on each valid root of the slot's address space
        (`clear_dirty_pt_masked()`), the 4K leaves of the gfns in the 64-page `mask` from
        `gfn` lose D, or W when `wrprot` (`kvm_mmu_write_protect_pt_masked()`) or A/D bits
        are off; how many changed."""
        dbit = PT_WRITABLE_MASK if wrprot or self.cfg.ad_disabled else self.cfg.shadow_dirty_mask
        changed = 0
        for root in self._each_root(only_valid=True):
            left = mask if root.as_id == slot.as_id else 0
            start = gfn + (left & -left).bit_length() - 1
            for it in for_each_tdp_pte(self.pages.by_pa, root, start, gfn + 64) if left else ():
                if not left:
                    break
                if it.level > PG_LEVEL_4K or not left >> (it.gfn - gfn) & 1:
                    continue
                left &= ~(1 << (it.gfn - gfn))
                old = it.old_spte
                if is_shadow_present_pte(old) and old & dbit:
                    pt = it.pt
                    assert isinstance(pt, TdpMmuPage)
                    self.tdp_mmu_set_spte(it.as_id, pt, it.index, old, old & ~dbit, it.gfn, 1)
                    changed += 1
            self.kvm_tdp_mmu_put_root(root)
        return changed

    def kvm_tdp_mmu_write_protect_gfn(self, slot: MemorySlot, gfn: int, min_level: int) -> int:
        """`kvm_tdp_mmu_write_protect_gfn()` (6.18 tdp_mmu.c, `write_protect_gfn()`): each
        leaf over `gfn` from `min_level` up, on every valid root of the slot's address
        space, loses W and MMU-writable; how many changed."""
        changed = 0
        clear = PT_WRITABLE_MASK | self.cfg.shadow_mmu_writable_mask
        for root in self._each_root(only_valid=True):
            sptes = for_each_tdp_pte_min_level(self.pages.by_pa, root, min_level, gfn, gfn + 1)
            for it in sptes if root.as_id == slot.as_id else ():
                old = it.old_spte
                if not is_shadow_present_pte(old) or not is_last_spte(old, it.level):
                    continue
                if old & ~clear == old:
                    break
                pt = it.pt
                assert isinstance(pt, TdpMmuPage)
                self.tdp_mmu_set_spte(it.as_id, pt, it.index, old, old & ~clear, it.gfn, it.level)
                changed += 1
            self.kvm_tdp_mmu_put_root(root)
        return changed

    def zap_collapsible_spte_range(self, root: TdpMmuPage, start: int, end: int) -> bool:
        slot = self.vm.memslot_set(root.as_id).gfn_tree.search(start)
        zapped = False
        for it in for_each_tdp_pte_min_level(self.pages.by_pa, root, PG_LEVEL_2M, start, end):
            while (
                it.level <= KVM_MAX_HUGEPAGE_LEVEL
                and is_shadow_present_pte(it.old_spte)
                and not is_last_spte(it.old_spte, it.level)
                and start <= it.gfn < end
                and slot is not None
                and self.kvm_mmu_max_mapping_level(slot, it.gfn, KVM_MAX_HUGEPAGE_LEVEL) >= it.level
            ):
                if not self.tdp_mmu_zap_spte_atomic(it):
                    zapped = True
                    break
        return zapped

    def kvm_tdp_mmu_zap_collapsible_sptes(self, slot: MemorySlot) -> bool:
        """Before 6.13 (`huge_recovery_era` "before-6.13")."""
        return self._for_slot(slot, "zap_collapsible_spte_range")

    def tdp_mmu_make_huge_spte(self, parent: TdpIter) -> int | None:
        """`tdp_mmu_make_huge_spte()` (6.18 tdp_mmu.c): `make_huge_spte()` of the first
        present leaf under the table `parent` points at; None (-ENOENT) when it has none."""
        start = parent.gfn
        end = start + kvm_pages_per_hpage(parent.level)
        child = self.pages.by_pa[parent.old_spte & SPTE_BASE_ADDR_MASK]
        for it in for_each_tdp_pte(self.pages.by_pa, child, start, end):
            if is_shadow_present_pte(it.old_spte) and is_last_spte(it.old_spte, it.level):
                nx = self.params.nx_huge_page_workaround_enabled  # is_nx_huge_page_enabled()
                return make_huge_spte(self.cfg, it.old_spte, parent.level, nx)
        return None

    def recover_huge_pages_range(self, root: TdpMmuPage, start: int, end: int) -> bool:
        """`recover_huge_pages_range()` (6.18 tdp_mmu.c, 6.13+): pre-order from 2M up, each
        table in the slot whose gfn may be mapped at its level
        (`kvm_mmu_max_mapping_level()`) replaced by a huge spte with
        `tdp_mmu_set_spte_atomic()` (a lost exchange retries); the table's own
        `handle_removed_pt()` freezes its entries and frees it after a grace period."""
        slot = self.vm.memslot_set(root.as_id).gfn_tree.search(start)
        if slot is None or slot.dirty_logging:
            return False  # WARN_ON_ONCE(kvm_slot_dirty_track_enabled(slot))
        flush = False
        for it in for_each_tdp_pte_min_level(self.pages.by_pa, root, PG_LEVEL_2M, start, end):
            while (
                it.level <= KVM_MAX_HUGEPAGE_LEVEL
                and is_shadow_present_pte(it.old_spte)
                and not is_last_spte(it.old_spte, it.level)
                and start <= it.gfn < end
                and self.kvm_mmu_max_mapping_level(slot, it.gfn, KVM_MAX_HUGEPAGE_LEVEL) >= it.level
            ):
                huge_spte = self.tdp_mmu_make_huge_spte(it)
                if huge_spte is None:
                    break  # -ENOENT: no leaf to make it from
                if not self.tdp_mmu_set_spte_atomic(it, huge_spte):
                    flush = True
                    break
        return flush  # kvm_flush_remote_tlbs_memslot()

    def kvm_tdp_mmu_recover_huge_pages(self, slot: MemorySlot) -> bool:
        """`kvm_tdp_mmu_recover_huge_pages()` (6.18, 6.13+): every valid root of the slot's
        address space, mmu_lock held for read."""
        return self._for_slot(slot, "recover_huge_pages_range")

    def kvm_mmu_slot_apply_flags(self, old_flags: int, slot: MemorySlot) -> None:
        """x86.c, on a KVM_MR_FLAGS_ONLY change of KVM_MEM_LOG_DIRTY_PAGES."""
        new_flags = slot.flags
        if new_flags & KVM_MEM_READONLY or not (old_flags ^ new_flags) & KVM_MEM_LOG_DIRTY_PAGES:
            return
        if not new_flags & KVM_MEM_LOG_DIRTY_PAGES:
            if self.params.huge_recovery_era == "6.13":
                self.kvm_tdp_mmu_recover_huge_pages(slot)  # kvm_mmu_recover_huge_pages()
            else:
                self.kvm_tdp_mmu_zap_collapsible_sptes(slot)
            return
        if kvm_dirty_log_manual_protect_and_init_set(self.vm):
            return  # "Initially-all-set does not require write protecting any page"
        if self.params.eager_page_split:
            end = slot.base_gfn + slot.npages
            self.kvm_tdp_mmu_try_split_huge_pages(slot, slot.base_gfn, end, PG_LEVEL_4K)
        if self.pml_logs_dirty_pages:
            self.kvm_tdp_mmu_clear_dirty_slot(slot)
            self.kvm_tdp_mmu_wrprot_slot(slot, PG_LEVEL_2M)
        else:
            self.kvm_tdp_mmu_wrprot_slot(slot, PG_LEVEL_4K)

    # -- NX huge pages -------------------------------------------------------------------

    def kvm_tdp_mmu_zap_sp(self, sp: TdpMmuPage) -> bool:
        """Before 6.18 (`nx_recovery_era` "before-6.18"), mmu_lock held for write: the
        parent spte cleared with `tdp_mmu_set_spte()`, so `handle_removed_pt()` freezes
        and traces only the table's present entries."""
        if not sp.ptep:
            return False  # a root has no parent spte
        parent = self.pages.page_of_sptep(sp.ptep)
        index = (sp.ptep & 0xFFF) >> 3
        old = parent.spt[index]
        if not is_shadow_present_pte(old):
            return False
        self.tdp_mmu_set_spte(
            sp.as_id, parent, index, old, self.nonpresent, sp.gfn, sp.role.level + 1
        )
        return True

    def kvm_tdp_mmu_zap_possible_nx_huge_page(self, sp: TdpMmuPage) -> bool:
        """`kvm_tdp_mmu_zap_possible_nx_huge_page()` (6.18 tdp_mmu.c), mmu_lock held for
        read: an iterator on the parent spte (`sp->ptep`), which is zapped with
        `tdp_mmu_set_spte_atomic()` only while it still points at this table (another
        task may have zapped or replaced it), so `handle_removed_pt()` runs shared:
        every one of the 512 entries frozen and traced."""
        if not sp.ptep:
            return False  # WARN_ON_ONCE: a root is never a possible NX huge page
        parent = self.pages.page_of_sptep(sp.ptep)
        it = TdpIter(self.pages.by_pa, parent, parent.role.level, sp.gfn)
        if spte_to_child_pa(it.old_spte, it.level) != sp.spt_pa:
            return False
        return not self.tdp_mmu_set_spte_atomic(it, self.nonpresent)

    def kvm_recover_nx_huge_pages(self) -> int:
        """One run of the recovery worker for the TDP MMU's list (nx_huge_pages.py);
        page tables zapped.  6.18: mmu_lock held for read,
        `kvm_tdp_mmu_zap_possible_nx_huge_page()`; before 6.18 for write,
        `kvm_tdp_mmu_zap_sp()` (`params.nx_recovery_era`)."""

        def dirty_tracked(sp: TdpMmuPage) -> bool:
            slot = self.vm.memslot_set(sp.as_id).gfn_tree.search(sp.gfn)
            return slot is not None and slot.dirty_logging

        era = self.params.nx_recovery_era
        zap = self.kvm_tdp_mmu_zap_sp
        if era == "6.18":
            zap = self.kvm_tdp_mmu_zap_possible_nx_huge_page
        return recover_nx_huge_pages(
            self.pages.possible_nx_huge_pages,
            self.stat,
            self.params.nx_huge_pages_recovery_ratio,
            dirty_tracked,
            zap,
            era,
        )
