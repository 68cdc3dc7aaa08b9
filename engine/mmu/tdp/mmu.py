"""Today's MMU under EPT/NPT: the TDP MMU's page fault (`kvm_tdp_mmu_map`), its MMIO
sptes, its reaction to memslot updates, and its audit.

torvalds/linux ≈6.10 (commit 0089c055) `tdp_mmu.c`, `mmu.c` (`kvm_mmu_page_fault`,
`kvm_tdp_page_fault`, `kvm_mmu_hugepage_adjust`, `disallowed_hugepage_adjust`,
`handle_mmio_page_fault`), `spte.c` (`make_spte`, `make_mmio_spte`):
- a reserved-bit fault (EPT misconfiguration) on a cached MMIO spte of the current
  generation is emulated at once (`handle_mmio_page_fault`, RET_PF_EMULATE); a stale one
  takes the real path, which rebuilds it;
- the real path finds the memslot; no slot: an MMIO spte (or emulation without one when
  MMIO caching is off); a write to a read-only slot: emulated;
- `kvm_mmu_hugepage_adjust()` picks the goal level (4K, 2M, 1G: `kvm_huge.py`), unless
  the slot logs dirty pages or the fault is an instruction fetch under the NX huge page
  mitigation (`huge_page_disallowed`); `kvm_mmu_spte_requested` traces it;
- the walk (`tdp_iter`) from the vCPU's root: a frozen spte gives RET_PF_RETRY; above the
  goal level a missing table is made and linked (`tdp_mmu_link_sp`) and a huge leaf in the
  way is split (`tdp_mmu_split_huge_page`), either change atomic, so a lost race frees the
  new table and returns RET_PF_RETRY; at the goal level
  `tdp_mmu_map_handle_target_level()` installs the leaf with `tdp_mmu_set_spte_atomic`
  (RET_PF_RETRY when that loses, RET_PF_SPURIOUS when nothing changes), then traces
  `kvm_mmu_set_spte` or `mark_mmio_spte`;
- the common fault (`_map_common`): where the spte the CPU's walk ended at is known and
  empty, a leaf installed in an empty spte of a table already on the path, with nothing
  else to do on the way: the same changes and events as the walk above, done in one call
  (`common_fault=False` always walks: tests compare them);
- memslot DELETE/MOVE and an MMIO generation wrap zap everything fast
  (`kvm_mmu_zap_all_fast`), a dirty-logging flag change applies the slot's flags.
No rmap is kept: the TDP MMU finds a gfn's sptes by walking the roots.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from ...errors import AuditError
from ...events import Event, FieldValue
from ...memslots.constants import KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY, KVM_MR_FLAGS_ONLY
from ...memslots.memslot import MemorySlot
from ...memslots.vm import Vm
from ..fast_pf import FastPageFault, mark_page_dirty_in_slot
from ..mapping_level import KvmPageFault as KvmPageFault
from ..mapping_level import MappingLevels
from ..params import TdpMmuParams
from ..role import ACC_ALL, ACC_EXEC_MASK, PG_LEVEL_1G, PG_LEVEL_2M, PG_LEVEL_4K
from ..spte import (
    PT_PAGE_SIZE_MASK,
    SHADOW_NONPRESENT_VALUE,
    SPTE_BASE_ADDR_MASK,
    SPTE_MMU_PRESENT_MASK,
    RetPf,
    SpteConfig,
    check_mmio_spte,
    get_mmio_spte_access,
    is_last_spte,
    is_mmio_spte,
    is_shadow_present_pte,
    kvm_mmio_fields,
    make_mmio_spte,
    make_spte,
    mark_mmio_spte_fields,
    memslot_update_zaps,
    spte_access_str,
)
from ..vcpu_memslot import VcpuMemslotCache
from .core import _PAGE_STATS
from .huge import TdpHuge
from .iter import PT64_ROOT_MAX_LEVEL, TdpIter, kvm_pages_per_hpage
from .pages import TdpMmuPage

PAGE_SHIFT = 12
KVM_PFN_NOSLOT = 1 << 63  # include/linux/kvm_host.h (6.x); earlier kernels differ
_PFN_LIMIT = 1 << 40  # pfns that fit bits 12-51 of an spte


class TdpMmu(TdpHuge):
    """One VM's TDP MMU (tdp_mmu=Y)."""

    def __init__(
        self,
        vm: Vm,
        cfg: SpteConfig | None = None,
        params: TdpMmuParams | None = None,
        emit: Callable[[Event], None] | None = None,
    ) -> None:
        super().__init__(vm, cfg, params, emit)
        self.roots: dict[int, TdpMmuPage] = {}
        self._vcpu_gfn_to_memslot = VcpuMemslotCache(vm).lookup
        #: root seq -> 2M region -> the iterator's pt_path when a fault reached its goal
        self._walks: dict[int, dict[int, list[TdpMmuPage | None]]] = {}
        self._nx = self.params.nx_huge_page_workaround_enabled  # is_nx_huge_page_enabled()
        self.levels = MappingLevels(self.params.host_level, self._nx)
        self._leaf_bits: dict[tuple[int, bool, int], tuple[int, int]] = {}
        self.mark_page_dirty: Callable[[MemorySlot, int], None] | None = None  # dirty_log
        self.common_fault = True  # model-only: `_map_common` for the common fault
        self._access_strs: dict[int, str] = {}  # spte_access_str() by the non-address bits
        self.fast_pf = FastPageFault(self, self.kvm_tdp_mmu_fast_pf_get_last_sptep)
        #: `_map_common` may take an empty spte's fault: A/D bits (fast_page_fault()
        #: leaves it alone) and no NX huge pages (the goal level is the mapping level)
        self._common_ok = self.fast_pf.kvm_ad_enabled and not self._nx
        self._slot_flags = {
            (s.as_id, s.id): s.flags for a in range(vm.address_spaces) for s in vm.memslots(a)
        }
        vm.subscribe(self._memslots_changed)

    # -- memslot updates -------------------------------------------------------------------

    def _memslots_changed(self, event: Event) -> None:
        fields = event.fields
        if memslot_update_zaps(event.name, int(fields.get("gen", 0)), self.vm.address_spaces):
            self.kvm_mmu_zap_all_fast()
        if event.name != "kvm_set_user_memory_region" or fields.get("ret"):
            return
        uapi = int(fields["slot"])
        key = (uapi >> 16, uapi & 0xFFFF)
        slot = self.vm.slot(*key)
        old = self._slot_flags.pop(key, 0)
        if slot is None:
            return
        self._slot_flags[key] = slot.flags
        if fields.get("change") == KVM_MR_FLAGS_ONLY:
            self.kvm_mmu_slot_apply_flags(old, slot)

    # -- the fault --------------------------------------------------------------------------

    def last_spte(self, root: TdpMmuPage, gfn: int) -> tuple[TdpMmuPage, int]:
        """`kvm_tdp_mmu_get_walk()`'s last step: the page and index the walk ends at."""
        sp, by_pa = root, self.pages.by_pa
        level = sp.role.level
        while True:
            index = (gfn >> (9 * (level - 1))) & 511
            spte = sp.spt[index]
            if level == 1 or not spte & SPTE_MMU_PRESENT_MASK or spte & PT_PAGE_SIZE_MASK:
                return sp, index
            sp = by_pa[spte & SPTE_BASE_ADDR_MASK]
            level -= 1

    def kvm_tdp_mmu_fast_pf_get_last_sptep(self, vcpu: int, gfn: int) -> tuple[TdpMmuPage, int]:
        """`for_each_tdp_pte(iter, kvm, root, gfn, gfn + 1)` without mmu_lock: the last
        spte the walk of the vCPU's root reads (fast_pf.py)."""
        return self.last_spte(self.roots[vcpu], gfn)

    def page_fault(
        self,
        vcpu: int,
        gpa: int,
        write: bool = False,
        exec_: bool = False,
        rsvd: bool | None = None,
        walked: int | None = None,
    ) -> RetPf:
        """`kvm_mmu_page_fault()` → `kvm_tdp_page_fault()` for a guest-physical address.
        `rsvd`: the exit was an EPT misconfiguration (PFERR_RSVD_MASK), i.e. the CPU hit
        an MMIO spte; None looks at the spte the walk ends at, as the CPU would (`walked`:
        that spte, when the caller has just walked the vCPU's valid root itself)."""
        stat = self.stat
        stat["pf_taken"] += 1
        gfn = gpa >> PAGE_SHIFT
        root = self.roots.get(vcpu)
        if root is None or root.role.invalid:
            root = self.root(vcpu)
        cfg = self.cfg
        spte, walked_to = 0, rsvd is None or rsvd  # the spte the walk ends at is known
        if walked_to:
            if walked is None:
                sp, index = self.last_spte(root, gfn)
                walked = sp.spt[index]
            spte = walked
            if not spte & ~SHADOW_NONPRESENT_VALUE:  # is_empty_spte(): neither MMIO nor
                slot = self._vcpu_gfn_to_memslot(vcpu, gfn)  # fast_page_fault()'s
                if (
                    slot is not None
                    and self.common_fault
                    and self.race is None
                    and not (write and slot.flags & KVM_MEM_READONLY)
                    and self._common_ok
                    and self._map_common(root, gfn, slot)
                ):
                    stat["pf_fixed"] += 1
                    return RetPf.FIXED
            elif is_mmio_spte(cfg, spte) and check_mmio_spte(
                cfg, spte, self.vm.generation(root.role.smm)
            ):
                access = get_mmio_spte_access(cfg, spte)
                self._emit("handle_mmio_page_fault", addr=0, gfn=gfn, access=access)
                return self._emulate(gpa, write)
            else:
                slot = self._vcpu_gfn_to_memslot(vcpu, gfn)
        else:
            slot = self._vcpu_gfn_to_memslot(vcpu, gfn)
        # kvm_tdp_mmu_page_fault(): fast_page_fault() first
        ret = self.fast_pf.try_fast_page_fault(vcpu, gpa, slot, spte, write, exec_)
        if ret is not RetPf.INVALID:
            return ret
        if slot is None and not cfg.mmio_caching_enabled:
            return self._emulate(gpa, write)  # kvm_handle_noslot_fault(), caching off
        if slot is not None and write and slot.flags & KVM_MEM_READONLY:
            return self._emulate(gpa, write)  # KVM_PFN_ERR_RO_FAULT
        fault = KvmPageFault(gfn, write, exec_, slot)
        ret = self.kvm_tdp_mmu_map(fault, root)
        if ret is RetPf.FIXED:
            stat["pf_fixed"] += 1
        elif ret is RetPf.SPURIOUS:
            stat["pf_spurious"] += 1
        elif ret is RetPf.EMULATE:
            return self._emulate(gpa, write)
        return ret

    def _map_common(self, root: TdpMmuPage, gfn: int, slot: MemorySlot) -> bool:
        """The common fault, with the walk's outcome known before anything changes:
        `kvm_tdp_mmu_map()` when the goal level's table is on the path already (the
        memo of an earlier walk of this root and 2M region, else the steps down from the
        root) and its spte is empty, so that `tdp_mmu_map_handle_target_level()` installs
        the leaf at once: `kvm_mmu_spte_requested`, `tdp_mmu_set_spte_atomic()` (no race:
        the cmpxchg succeeds), `handle_changed_spte()` of a new leaf (its page stat),
        the page marked dirty in a slot that logs them, `kvm_mmu_set_spte`.  The caller
        has checked the rest (a slot, an exit fast_page_fault() leaves alone, no NX huge
        pages, no race).  False, with nothing changed or emitted: the general path."""
        dirty_logging = slot.flags & KVM_MEM_LOG_DIRTY_PAGES
        goal = PG_LEVEL_4K  # kvm_mmu_hugepage_adjust(): 4K in a slot that logs dirty pages
        if not dirty_logging:  # kvm_mmu_max_mapping_level(slot, gfn, KVM_MAX_HUGEPAGE_LEVEL)
            levels = self.levels  # (its lpage_allowed() of 1G, then of 2M, on slot_limits)
            (lo_2m, hi_2m), (lo_1g, hi_1g) = levels.slot_limits(slot)
            if lo_1g <= gfn < hi_1g:
                goal = min(levels.host_level, PG_LEVEL_1G)  # host_pfn_mapping_level()
            elif lo_2m <= gfn < hi_2m:
                goal = min(levels.host_level, PG_LEVEL_2M)
        root_level = root.role.level
        walks = self._walks.get(root.seq)
        if walks is None or goal >= root_level:
            return False
        memo = walks.get(gfn >> 9)
        pt = memo[goal - 1] if memo is not None else None
        path: list[TdpMmuPage | None]
        if memo is None or pt is None or pt.rcu_queued_ns >= 0:
            path = [None] * PT64_ROOT_MAX_LEVEL  # the steps down from the root
            path[root_level - 1] = pt = root
            by_pa, level = self.pages.by_pa, root_level
            while level > goal:
                spte = pt.spt[(gfn >> (9 * level - 9)) & 511]
                if not spte & SPTE_MMU_PRESENT_MASK or spte & PT_PAGE_SIZE_MASK:
                    return False  # a table to link or a huge page to split
                child = by_pa.get(spte & SPTE_BASE_ADDR_MASK)
                if child is None:
                    return False
                level -= 1
                path[level - 1] = pt = child
        elif goal > PG_LEVEL_4K and any(memo[: goal - 1]):
            path = [None] * (goal - 1)
            path += memo[goal - 1 :]  # as the walk's pt_path
        else:
            path = memo
        shift = 9 * goal - 9
        index = (gfn >> shift) & 511
        old = pt.spt[index]
        if old != self.nonpresent:
            return False  # not an empty spte: a spurious fault, a frozen or MMIO spte, ...
        mask = (1 << shift) - 1  # KVM_PAGES_PER_HPAGE(goal) - 1
        pfn = ((slot.userspace_addr >> PAGE_SHIFT) + gfn - slot.base_gfn) & ~mask
        writable = not slot.flags & KVM_MEM_READONLY  # fault->map_writable
        leaf = self._leaf_bits.get((goal, writable, ACC_ALL))  # _make_spte(), no NX here
        if leaf is None or pfn & leaf[1]:
            new_spte = self._make_spte(pfn, goal, writable)
        else:
            new_spte = leaf[0] | pfn << PAGE_SHIFT
        if not new_spte & SPTE_MMU_PRESENT_MASK or not (goal == 1 or new_spte & PT_PAGE_SIZE_MASK):
            return False  # not a leaf to install
        listener, common = self._listener, self._common
        base = gfn & ~mask
        if listener is not None and common is None:
            requested: dict[str, FieldValue] = {"gfn": gfn, "pfn": pfn | gfn & mask, "level": goal}
            listener("kvm_mmu_spte_requested", requested)
        pt.spt[index] = new_spte
        if listener is not None and common is None:
            listener(
                "kvm_tdp_mmu_spte_changed",
                {"as_id": root.role.smm, "gfn": base, "level": goal, "old_spte": old,
                 "new_spte": new_spte},
            )  # fmt: skip
        self.stat[_PAGE_STATS[goal]] += 1
        walks[gfn >> 9] = path
        if writable and dirty_logging and self.mark_page_dirty is not None:
            self.mark_page_dirty(slot, gfn)  # make_spte(): mark_page_dirty_in_slot()
        if listener is not None:
            access_strs = self._access_strs
            bits = new_spte & ~SPTE_BASE_ADDR_MASK
            access = access_strs.get(bits)
            if access is None:
                access = access_strs[bits] = spte_access_str(self.cfg, new_spte)
            if common is not None:  # the three events at once (nothing came between)
                sptep, pfn = pt.spt_pa + 8 * index, pfn | gfn & mask
                common(root.role.smm, gfn, pfn, goal, base, old, new_spte, access, sptep)
                return True
            fields: dict[str, FieldValue] = {
                "gfn": base,
                "spte": new_spte,
                "access_str": access,
                "level": goal,
                "sptep": pt.spt_pa + 8 * index,
            }
            listener("kvm_mmu_set_spte", fields)
        return True

    def _emulate(self, gpa: int, write: bool) -> RetPf:
        self.stat["pf_emulate"] += 1
        if self._listener is not None:
            self._emit("kvm_mmio", **kvm_mmio_fields(gpa, write))
        return RetPf.EMULATE

    def kvm_mmu_hugepage_adjust(self, fault: KvmPageFault) -> None:
        """mapping_level.py, shared with the direct and shadow MMUs."""
        self.levels.kvm_mmu_hugepage_adjust(fault)

    def disallowed_hugepage_adjust(self, fault: KvmPageFault, spte: int, cur_level: int) -> None:
        """Go one level below a table made for a disallowed NX huge page."""
        self.levels.disallowed_hugepage_adjust(fault, spte, cur_level, self._nx_disallowed)

    def _nx_disallowed(self, spte: int) -> bool:
        return self.pages.by_pa[spte & SPTE_BASE_ADDR_MASK].nx_huge_page_disallowed

    def kvm_tdp_mmu_map(self, fault: KvmPageFault, root: TdpMmuPage) -> RetPf:
        """The walk of `tdp_mmu_for_each_pte(iter, mmu, gfn, gfn + 1)`, stepped by hand:
        for a one-gfn range the pre-order walk only ever steps down (the step to the side
        leaves the range), so each level's spte is visited once, after the table above
        it was linked (`try_step_down` re-reads it)."""
        self.levels.kvm_mmu_hugepage_adjust(fault)
        listener = self._listener
        if listener is not None:
            goal = fault.goal_level
            offset = fault.gfn & ((1 << (9 * goal - 9)) - 1)  # KVM_PAGES_PER_HPAGE(goal) - 1
            listener(
                "kvm_mmu_spte_requested",
                {"gfn": fault.gfn, "pfn": fault.pfn | offset, "level": goal},
            )
        nx, goal = self._nx, fault.goal_level
        it = TdpIter(self.pages.by_pa, root, PG_LEVEL_4K, fault.gfn)
        if not nx:  # nothing to adjust on the way: down through the tables there are
            self._resume_walk(it, root, goal)
            it.step_down_through_tables(goal)
        while True:
            old, level = it.old_spte, it.level
            if nx:
                self.disallowed_hugepage_adjust(fault, old, level)
                goal = fault.goal_level
            if old == self.frozen:
                return RetPf.RETRY  # frozen by another thread: let the vCPU fault again
            if level == goal:
                if not nx and level < it.root_level:
                    path = cast("list[TdpMmuPage | None]", it.pt_path[:])  # a TDP root's
                    self._walks.setdefault(root.seq, {})[fault.gfn >> 9] = path
                return self.tdp_mmu_map_handle_target_level(fault, it)
            if not (old & SPTE_MMU_PRESENT_MASK and not old & PT_PAGE_SIZE_MASK):
                sp = self.tdp_mmu_init_child_sp(it)
                sp.nx_huge_page_disallowed = fault.huge_page_disallowed
                if old & SPTE_MMU_PRESENT_MASK:
                    r = self.tdp_mmu_split_huge_page(it, sp, True)
                else:
                    r = self.tdp_mmu_link_sp(it, sp, True)
                if r:
                    self.tdp_mmu_free_sp(sp)
                    return RetPf.RETRY
                if fault.huge_page_disallowed and fault.req_level >= level:
                    self.track_possible_nx_huge_page(sp)
            if not it.try_step_down():
                return RetPf.RETRY  # the walk ended above the goal level

    def _resume_walk(self, it: TdpIter, root: TdpMmuPage, goal: int) -> None:
        """Start the fault's walk at the deepest table an earlier fault's walk of this root
        and 2M region reached, not below the goal level, while that table is linked (not
        RCU pending): tables never move, and unlinking one unlinks all below it, so the
        steps down reach it again.  Model-only (a memo; the direct MMU's `_l1_hint`)."""
        walks = self._walks.get(root.seq)
        path = walks.get(it.next_last_level_gfn >> 9) if walks is not None else None
        if path is None:
            if walks is None and len(self._walks) > len(self.pages.tdp_mmu_roots):
                live = {r.seq for r in self.pages.tdp_mmu_roots}  # freed roots' memos go
                self._walks = {seq: w for seq, w in self._walks.items() if seq in live}
            return
        level = goal if goal > PG_LEVEL_4K else PG_LEVEL_4K
        pt = path[level - 1]
        while pt is None and level < it.root_level:
            level += 1
            pt = path[level - 1]
        if pt is not None and pt.rcu_queued_ns < 0 and level < it.root_level:
            it.start_at(pt, path)

    def tdp_mmu_map_handle_target_level(self, fault: KvmPageFault, it: TdpIter) -> RetPf:
        slot = fault.slot
        if slot is None:
            new_spte = make_mmio_spte(self.cfg, it.gfn, ACC_ALL, self.vm.generation(it.as_id))
        else:
            new_spte = self._make_spte(fault.pfn, it.level, fault.map_writable)
        ret = RetPf.FIXED
        if new_spte == it.old_spte:
            ret = RetPf.SPURIOUS
        elif self.tdp_mmu_set_spte_atomic(it, new_spte):
            return RetPf.RETRY
        if slot is None:
            self.stat["pf_mmio_spte_created"] += 1
            if self._listener is not None:
                # tdp_mmu_map_handle_target_level(): trace_mark_mmio_spte(sptep, gfn,
                # new_spte), whose access is spte & ACC_ALL (6 on EPT), as the shadow MMU's
                self._emit("mark_mmio_spte", **mark_mmio_spte_fields(it.sptep, it.gfn, new_spte))
            return RetPf.EMULATE
        if fault.map_writable and slot.flags & KVM_MEM_LOG_DIRTY_PAGES:
            mark_page_dirty_in_slot(self, slot, fault.gfn)  # make_spte()
        listener = self._listener
        if listener is not None:
            pt, index = it.pt, it.index
            spte = pt.spt[index]
            fields: dict[str, FieldValue] = {
                "gfn": it.gfn,
                "spte": spte,
                "access_str": spte_access_str(self.cfg, spte),
                "level": it.level,
                "sptep": pt.spt_pa + 8 * index,  # it.sptep
            }
            listener("kvm_mmu_set_spte", fields)
        return ret

    def _make_spte(self, pfn: int, level: int, writable: bool) -> int:
        """`make_spte()` with ACC_ALL, not a prefetch: from the constant bits of this
        (level, writable) when the pfn allows it, else `make_spte()` itself.  Under the NX
        mitigation huge leaves are not executable."""
        access = ACC_ALL
        if level > PG_LEVEL_4K and self._nx:
            access &= ~ACC_EXEC_MASK
        key = (level, writable, access)
        bits = self._leaf_bits.get(key)
        if bits is None:
            bits = self._leaf_bits[key] = self._leaf_constants(level, writable, access)
        const, forbidden = bits
        if pfn & forbidden:
            return make_spte(
                self.cfg, pfn, access, level, writable=writable, accessed=True, dirty=True
            )
        return const | pfn << PAGE_SHIFT

    def _leaf_constants(self, level: int, writable: bool, access: int) -> tuple[int, int]:
        const = make_spte(self.cfg, 0, access, level, writable=writable, accessed=True, dirty=True)
        mmio_bits = 0
        if self.cfg.shadow_mmio_value:
            mmio_bits = (self.cfg.shadow_mmio_mask & SPTE_BASE_ADDR_MASK) >> PAGE_SHIFT
        return const, -_PFN_LIMIT | (kvm_pages_per_hpage(level) - 1) | mmio_bits

    # -- audit ---------------------------------------------------------------------------

    def audit(self) -> None:
        """Pages consistent (`TdpMmuPages.audit`); each root's count is the vCPUs using
        it plus the TDP MMU's own reference while it is valid or scheduled for zapping;
        the page stats and nx_lpage_splits match what is mapped."""
        self.pages.audit()
        users: dict[int, int] = {}
        for root in self.roots.values():
            users[root.seq] = users.get(root.seq, 0) + 1
        for root in self.pages.tdp_mmu_roots:
            own = 1 if not root.role.invalid or root.tdp_mmu_scheduled_root_to_zap else 0
            if root.root_count != users.get(root.seq, 0) + own:
                raise AuditError(f"tdp: {root} count {root.root_count}, expected more/less")
        for vcpu, root in self.roots.items():
            if root not in self.pages.tdp_mmu_roots:
                raise AuditError(f"tdp: vcpu {vcpu} uses {root}, not on tdp_mmu_roots")
        counted = {1: 0, 2: 0, 3: 0}
        for sp in self.pages.pages():
            level = sp.role.level
            for spte in sp.spt:
                if is_shadow_present_pte(spte) and is_last_spte(spte, level):
                    counted[level] += 1
        for level, name in ((1, "pages_4k"), (2, "pages_2m"), (3, "pages_1g")):
            if self.stat[name] != counted[level]:
                raise AuditError(f"tdp: {name} {self.stat[name]} != {counted[level]} mapped")
        if self.stat["nx_lpage_splits"] != len(self.pages.possible_nx_huge_pages):
            raise AuditError("tdp: nx_lpage_splits disagrees with possible_nx_huge_pages")
