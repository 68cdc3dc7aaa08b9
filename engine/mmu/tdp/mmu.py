"""The MMU under EPT/NPT (6.18): the TDP MMU's page fault (`kvm_tdp_mmu_map`), its MMIO
sptes, its reaction to memslot updates, and its audit.

torvalds/linux 6.18 `tdp_mmu.c`, `mmu.c` (`kvm_mmu_page_fault`,
`kvm_tdp_page_fault`, `kvm_mmu_hugepage_adjust`, `disallowed_hugepage_adjust`,
`handle_mmio_page_fault`), `spte.c` (`make_spte`, `make_mmio_spte`):
- a reserved-bit fault (EPT misconfiguration) is emulated at once when the vCPU's MMIO
  info has the gpa, or the MMIO spte is of the current generation
  (`handle_mmio_page_fault`, RET_PF_EMULATE: mmio_info.py); a stale one takes the real
  path, which rebuilds it;
- the real path finds the memslot; no slot: an MMIO spte (or emulation without one when
  MMIO caching is off); a write to a read-only slot: emulated;
- `kvm_mmu_hugepage_adjust()` picks the goal level (4K, 2M, 1G: mapping_level.py), unless
  the slot logs dirty pages or the fault is an instruction fetch under the NX huge page
  mitigation (`huge_page_disallowed`); `kvm_mmu_spte_requested` traces it;
- the walk (`tdp_iter`) from the vCPU's root: a frozen spte gives RET_PF_RETRY; above the
  goal level a missing table is made and linked (`tdp_mmu_link_sp`) and a huge leaf in the
  way is split (`tdp_mmu_split_huge_page`), either change atomic, so a lost race frees the
  new table and returns RET_PF_RETRY; at the goal level
  `tdp_mmu_map_handle_target_level()` ends the fault as RET_PF_SPURIOUS when the leaf is
  there and allows the access (6.13+), else installs the leaf with
  `tdp_mmu_set_spte_atomic` (RET_PF_RETRY when that loses, RET_PF_SPURIOUS when nothing
  changes), then traces `kvm_mmu_set_spte` or `mark_mmio_spte`;
- memslot DELETE/MOVE and an MMIO generation wrap zap everything fast
  (`kvm_mmu_zap_all_fast`), a dirty-logging flag change applies the slot's flags.
No rmap is kept: the TDP MMU finds a gfn's sptes by walking the roots.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import AuditError
from ...events import Event, FieldValue
from ...memslots.constants import KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY, KVM_MR_FLAGS_ONLY
from ...memslots.memslot import MemorySlot
from ...memslots.vm import Vm
from ..emulate import DirectEmulator
from ..fast_pf import FastPageFault, is_access_allowed, mark_page_dirty_in_slot
from ..mapping_level import KvmPageFault as KvmPageFault
from ..mapping_level import MappingLevels
from ..mmio_info import VcpuMmioInfo, handle_mmio_page_fault
from ..params import TdpMmuParams
from ..role import ACC_ALL, ACC_EXEC_MASK, PG_LEVEL_4K
from ..spte import (
    PT_PAGE_SIZE_MASK,
    SPTE_BASE_ADDR_MASK,
    SPTE_MMU_PRESENT_MASK,
    RetPf,
    SpteConfig,
    is_large_pte,
    is_last_spte,
    is_mmio_spte,
    is_shadow_present_pte,
    kvm_mmu_max_gfn,
    make_mmio_spte,
    make_spte,
    mark_mmio_spte_fields,
    memslot_update_zaps,
    spte_access_str,
    spte_requested_fields,
)
from ..vcpu_memslot import VcpuMemslotCache
from .huge import TdpHuge
from .iter import TdpIter, for_each_tdp_pte
from .pages import TdpMmuPage

PAGE_SHIFT = 12


class TdpMmu(TdpHuge):
    """One VM's TDP MMU (tdp_mmu=Y)."""

    def __init__(
        self,
        vm: Vm,
        cfg: SpteConfig | None = None,
        params: TdpMmuParams | None = None,
        emit: Callable[[Event], None] | None = None,
        host_seed: int = 1,
    ) -> None:
        super().__init__(vm, cfg, params, emit)
        self.roots: dict[int, TdpMmuPage] = {}
        self._vcpu_gfn_to_memslot = VcpuMemslotCache(vm).lookup
        self.mmio_info = VcpuMmioInfo()  # each vCPU's mmio_gfn/access/gen (mmio_info.py)
        self.emulator = DirectEmulator(self)  # after RET_PF_EMULATE (emulate.py)
        self._nx = self.params.nx_huge_page_workaround_enabled  # is_nx_huge_page_enabled()
        self.levels = MappingLevels(self.params.host_level, self._nx, host_seed)
        self.mark_page_dirty: Callable[[MemorySlot, int], None] | None = None  # dirty_log
        self.fast_pf = FastPageFault(self, self.kvm_tdp_mmu_fast_pf_get_last_sptep)
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
    ) -> RetPf:
        """`kvm_mmu_page_fault()` (6.18 mmu.c) for a guest-physical address: a reserved-bit
        fault (an EPT misconfiguration, PFERR_RSVD_MASK: `rsvd`; None: the CPU hit an MMIO
        spte at the end of its walk) tries `handle_mmio_page_fault()` first, and when that
        emulates jumps to `emulate:`, counting neither `pf_taken` nor `pf_emulate`; only
        RET_PF_INVALID counts `pf_taken` and goes on to `kvm_tdp_page_fault()` →
        `kvm_tdp_mmu_page_fault()`, whose RET_PF_EMULATE counts `pf_emulate`."""
        root = self.root(vcpu)
        gfn = gpa >> PAGE_SHIFT
        sp, index = self.last_spte(root, gfn)
        spte = sp.spt[index]  # the spte the exit was on
        if rsvd is None:
            rsvd = is_mmio_spte(self.cfg, spte)
        if rsvd and handle_mmio_page_fault(
            self, vcpu, gpa, spte, self.vm.generation(root.role.smm), direct=True
        ):
            self.emulator.emulate(vcpu, gpa, write)  # emulate: x86_emulate_instruction()
            return RetPf.EMULATE
        self.stat["pf_taken"] += 1
        ret = self.kvm_tdp_mmu_page_fault(vcpu, root, gpa, write, exec_, spte)
        if ret is RetPf.EMULATE:
            self.stat["pf_emulate"] += 1
            self.emulator.emulate(vcpu, gpa, write)
        return ret

    def kvm_tdp_mmu_page_fault(
        self, vcpu: int, root: TdpMmuPage, gpa: int, write: bool, exec_: bool, spte: int
    ) -> RetPf:
        """`fast_page_fault()` first (fast_pf.py), then `kvm_mmu_faultin_pfn()`: RET_PF_EMULATE
        without a memslot when MMIO caching is off or the gfn is above `kvm_mmu_max_gfn()`
        (`kvm_handle_noslot_fault()`, 6.18 mmu.c: no MMIO spte for a gfn beyond the host's
        MAXPHYADDR), or for a write to a read-only slot (KVM_PFN_ERR_RO_FAULT); else
        `kvm_tdp_mmu_map()` unless an MMU-notifier invalidation of the gfn is in progress
        or ended since the fault began (RET_PF_RETRY: `kvm_mmu_faultin_pfn()`'s checks,
        then `is_page_fault_stale()` under mmu_lock).  Its RET_PF_FIXED and
        RET_PF_SPURIOUS are counted as `kvm_mmu_page_fault()` does.  Without a memslot
        the vCPU's MMIO info is filled first (`vcpu_cache_mmio_info()`, gva 0), so its
        next EPT misconfiguration on the gfn is emulated with no tracepoint
        (`mmio_info_in_cache()`)."""
        gfn = gpa >> PAGE_SHIFT
        slot = self._vcpu_gfn_to_memslot(vcpu, gfn)
        ret = self.fast_pf.try_fast_page_fault(vcpu, gpa, slot, spte, write, exec_)
        if ret is not RetPf.INVALID:
            return ret
        if slot is None:  # kvm_handle_noslot_fault(): vcpu_cache_mmio_info() first
            gen = self.vm.generation(root.role.smm)
            self.mmio_info.cache(vcpu, 0, gfn, ACC_ALL & self.cfg.shadow_mmio_access_mask, gen)
            if not self.cfg.mmio_caching_enabled or gfn > kvm_mmu_max_gfn(self.cfg):
                return RetPf.EMULATE  # no MMIO spte made
        fault = KvmPageFault(gfn, write, exec_, slot)
        if self.levels.kvm_mmu_faultin_pfn(fault) is RetPf.RETRY:
            return RetPf.RETRY  # an MMU-notifier invalidation of the gfn (mapping_level.py)
        if slot is not None and write and slot.flags & KVM_MEM_READONLY:
            return RetPf.EMULATE
        if self.levels.is_page_fault_stale(fault, bool(root.role.invalid)):  # read_lock
            return RetPf.RETRY
        ret = self.kvm_tdp_mmu_map(fault, root)
        if ret is RetPf.FIXED:
            self.stat["pf_fixed"] += 1
        elif ret is RetPf.SPURIOUS:
            self.stat["pf_spurious"] += 1
        return ret

    def disallowed_hugepage_adjust(self, fault: KvmPageFault, spte: int, cur_level: int) -> None:
        """Go one level below a table made for a disallowed NX huge page."""
        self.levels.disallowed_hugepage_adjust(fault, spte, cur_level, self._nx_disallowed)

    def _nx_disallowed(self, spte: int) -> bool:
        return self.pages.by_pa[spte & SPTE_BASE_ADDR_MASK].nx_huge_page_disallowed

    def kvm_tdp_mmu_map(self, fault: KvmPageFault, root: TdpMmuPage) -> RetPf:
        """`kvm_tdp_mmu_map()`: down the vCPU's root to the goal level
        (`tdp_mmu_for_each_pte`), making and linking each missing table and splitting a
        huge leaf in the way, then the leaf (`tdp_mmu_map_handle_target_level()`).  A
        frozen spte, or a link that loses its cmpxchg, gives RET_PF_RETRY."""
        self.levels.kvm_mmu_hugepage_adjust(fault)  # mapping_level.py, every MMU's
        if self._listener is not None:  # trace_kvm_mmu_spte_requested(fault)
            fields = spte_requested_fields(fault.gfn, fault.pfn, fault.goal_level)
            self._listener("kvm_mmu_spte_requested", fields)
        for it in for_each_tdp_pte(self.pages.by_pa, root, fault.gfn, fault.gfn + 1):
            if self._nx:
                self.disallowed_hugepage_adjust(fault, it.old_spte, it.level)
            if it.old_spte == self.frozen:  # is_frozen_spte(): another thread is zapping it
                return RetPf.RETRY
            if it.level == fault.goal_level:
                return self.tdp_mmu_map_handle_target_level(fault, it)
            if is_shadow_present_pte(it.old_spte) and not is_large_pte(it.old_spte):
                continue  # a table: step down into it
            sp = self.tdp_mmu_init_child_sp(it)
            sp.nx_huge_page_disallowed = fault.huge_page_disallowed
            if is_shadow_present_pte(it.old_spte):
                r = self.tdp_mmu_split_huge_page(it, sp, True)
            else:
                r = self.tdp_mmu_link_sp(it, sp, True)
            if r:
                self.tdp_mmu_free_sp(sp)
                return RetPf.RETRY
            if fault.huge_page_disallowed and fault.req_level >= it.level:
                self.track_possible_nx_huge_page(sp)
        return RetPf.RETRY  # the walk ended above the goal level

    def tdp_mmu_map_handle_target_level(self, fault: KvmPageFault, it: TdpIter) -> RetPf:
        """`tdp_mmu_map_handle_target_level()` (6.18 tdp_mmu.c).  6.13+ (`spurious_era`):
        a present leaf that already allows the access ends the fault as RET_PF_SPURIOUS
        before any spte is made, with no tracepoint; then (every era) a new spte equal
        to the old one is RET_PF_SPURIOUS too, otherwise it is installed with
        `tdp_mmu_set_spte_atomic()` (RET_PF_RETRY when that loses), and
        `kvm_mmu_set_spte` or `mark_mmio_spte` traces it."""
        slot = fault.slot
        old_spte = it.old_spte
        if (
            self.params.spurious_era == "6.13"
            and is_shadow_present_pte(old_spte)
            and is_access_allowed(self.cfg, fault, old_spte)
            and is_last_spte(old_spte, it.level)
        ):
            return RetPf.SPURIOUS
        if slot is None:
            new_spte = make_mmio_spte(self.cfg, it.gfn, ACC_ALL, self.vm.generation(it.as_id))
        else:
            new_spte = self.make_spte(fault.pfn, it.level, fault.map_writable)
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

    def make_spte(self, pfn: int, level: int, writable: bool) -> int:
        """`make_spte()` of a fault's leaf: ACC_ALL, not a prefetch, except that under the
        NX huge page mitigation a huge leaf is not executable."""
        access = ACC_ALL
        if level > PG_LEVEL_4K and self._nx:
            access &= ~ACC_EXEC_MASK
        return make_spte(self.cfg, pfn, access, level, writable=writable, accessed=True, dirty=True)

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
