"""The fault path of the shadow MMU with direct pages (EPT/NPT on, tdp_mmu=N), with MMIO
sptes and rmaps (docs/kvm.md §3-§6).

`DirectMmu.page_fault(vcpu, gpa, write)` follows `kvm_mmu_page_fault()` →
`direct_page_fault()` → `direct_map()` (6.18 mmu.c), every fault the same way:
- a reserved-bit fault on a cached MMIO spte is `handle_mmio_page_fault()`: if the spte's
  19-bit generation matches the memslots generation the access is emulated at once
  (RET_PF_EMULATE, no memslot search); otherwise RET_PF_INVALID and the real fault path
  rebuilds it;
- the real path looks up the memslot (the vCPU's `last_used_slot`, then the gfn tree),
  tries `fast_page_fault()` (fast_pf.py), emulates what `kvm_mmu_faultin_pfn()` ends
  (no slot with MMIO caching off, a write to a read-only slot), makes room
  (`make_mmu_pages_available()`), picks the leaf level (`kvm_mmu_hugepage_adjust()`,
  mapping_level.py: 4K, 2M or 1G as the slot, the host's backing and the NX huge page
  mitigation allow; traced as `kvm_mmu_spte_requested`), walks from the vCPU's root
  creating direct child pages (`kvm_mmu_get_child_sp`; one made for a disallowed NX huge
  page is `account_nx_huge_page()`d, nx_huge_pages.py, and a later fault keeps below it:
  `disallowed_hugepage_adjust()`) and installs the leaf: an MMIO spte (`mark_mmio_spte`,
  RET_PF_EMULATE) when no slot holds the gfn, else the spte `make_spte()` makes, added
  to the slot's rmap of that level (RET_PF_FIXED; RET_PF_SPURIOUS when it is there
  already), then `direct_pte_prefetch()` maps the free neighbours of a 4K leaf
  (prefetch.py);
- a memslot DELETE or MOVE zaps everything fast (`kvm_arch_flush_shadow_memslot`), and a
  generation whose 19 MMIO bits wrap zaps fast too (`kvm_mmu_invalidate_mmio_sptes`).

One class, `DirectMmu`, holds what the kernel keeps for this MMU in `struct kvm` (the
shadow pages, their hash and budget: mmu_pages.py; the rmaps; the vCPUs' roots) and runs
mmu.c's functions on it, section by section: the fault above; MMIO sptes
(`mark_mmio_spte()` when a fault finds no memslot and MMIO caching is on, the emulator
after it, with `kvm_mmio` of the whole gpa: emulate.py; the RSVD / EPT-misconfiguration
path, `handle_mmio_page_fault(vcpu, addr, direct=true)`, is the TDP MMU's too:
mmio_info.py); huge pages (the level a fault maps at, and why, for the screens; NX huge
page recovery, `kvm_recover_nx_huge_pages()`: nx_huge_pages.py); the rmaps (per memslot
and level, each gfn's `kvm_rmap_head` of the present leaves that map it: `rmap_add()`,
`drop_spte()` → `rmap_remove()`) and the audit of leaves against them.  rmap.py is the
rmaps' read-only view, prefetch.py `direct_pte_prefetch()`.  With no listener, no Event
is built.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import AuditError
from ...events import Event, FieldValue
from ...memslots.constants import KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY
from ...memslots.memslot import MemorySlot
from ...memslots.vm import Vm
from ..fast_pf import (
    FastPageFault,
    fast_pf_get_last_sptep,
    fault_error_code,
    mark_page_dirty_in_slot,
)
from ..mapping_level import KvmPageFault, MappingLevels, kvm_pages_per_hpage
from ..mmu_pages import (
    KvmMmuPage,
    MmuPages,
    default_mmu_pages,
    kvm_recover_mmu_nx_huge_pages,
    shadow_mmu_memslot_update,
)
from ..nx_huge_pages import account_nx_huge_page
from ..params import TdpMmuParams
from ..rmap import (
    ERAS,
    KvmRmapHead,
    RmapVal,
    check_sptep,
    rmap_val_add,
    rmap_val_remove,
    rmap_val_sptes,
)
from ..role import (
    ACC_ALL,
    ACC_EXEC_MASK,
    PG_LEVEL_4K,
    KvmMmuPageRole,
    tdp_root_role,
)
from ..spte import (
    KVM_MAX_HUGEPAGE_LEVEL,
    PT_WRITABLE_MASK,
    RET_PF_EMULATE,
    RET_PF_FIXED,
    RET_PF_INVALID,
    RET_PF_RETRY,
    RET_PF_SPURIOUS,
    SPTE_BASE_ADDR_MASK,
    SPTE_CONFIGS,
    RetPf,
    SpteConfig,
    is_mmio_spte,
    kvm_mmu_max_gfn,
    make_mmio_spte,
    make_spte,
    mark_mmio_spte_fields,
    spte_access_str,
    spte_requested_fields,
)
from ..vcpu.emulate import DirectEmulator
from ..vcpu.mmio_info import VcpuMmioInfo, handle_mmio_page_fault
from ..vcpu.vcpu_memslot import VcpuMemslotCache
from ..vcpu.vmx import PFERR_RSVD_MASK
from .prefetch import direct_pte_prefetch
from .rmap import LEVEL_BITS, RmapKey, RmapsView, level_shift
from .rmap import SlotRmaps as SlotRmaps  # re-exported (public before)
from .rmap import gfn_to_index as gfn_to_index  # re-exported (public before)

PAGE_SHIFT = 12


def spte_index(gfn: int, level: int) -> int:
    return (gfn >> level_shift(level)) & 511


class DirectMmu:
    """One VM's direct-paging MMU: roots per vCPU, shadow pages, leaves, rmaps.

    `params` are the kvm module parameters and host backing the TDP MMU takes too
    (`nx_huge_pages`, its recovery ratio, `host_level`); `huge_pages=False` caps the
    level at 4K; `pte_prefetch=False` turns `direct_pte_prefetch()` off (the kernel has
    no switch: kept for comparisons)."""

    def __init__(
        self,
        vm: Vm,
        cfg: SpteConfig | None = None,
        *,
        pte_list_era: str = "6.4",
        huge_pages: bool = True,
        gen_era: str = "2019",
        emit: Callable[[Event], None] | None = None,
        mmio_info_cache: bool = True,
        fast_pf: bool = True,
        params: TdpMmuParams | None = None,
        pte_prefetch: bool = True,
        host_seed: int = 1,
    ) -> None:
        self.vm = vm
        self.mmio_info = VcpuMmioInfo(mmio_info_cache)  # False: before 3.1
        self.emulator = DirectEmulator(self)  # after RET_PF_EMULATE (emulate.py)
        self.cfg = cfg or SPTE_CONFIGS["ept"]
        self.era = ERAS[pte_list_era]
        self.huge_pages = huge_pages
        self.params = params or TdpMmuParams(tdp_mmu=False)
        self.nx = self.params.nx_huge_page_workaround_enabled  # is_nx_huge_page_enabled()
        self.levels = MappingLevels(self.params.host_level, self.nx, host_seed)
        self.pte_prefetch = pte_prefetch
        self._listener = emit
        self.pages = MmuPages(
            default_mmu_pages(vm.nr_memslot_pages),
            gen_era=gen_era,
            emit=self._emit,
            on_leaf_zapped=self._drop_leaf,
            cfg=self.cfg,
        )
        # kvm_rmap_head.val per (as_id, slot id, level) and gfn_to_index: see RmapVal.
        self.rmap_vals: dict[RmapKey, dict[int, RmapVal]] = {}
        self.roots: dict[int, KvmMmuPage] = {}
        self.stat = dict.fromkeys(
            ("pf_taken", "pf_fixed", "pf_emulate", "pf_spurious", "pf_mmio_spte_created"), 0
        )
        self.mark_page_dirty: Callable[[MemorySlot, int], None] | None = None  # dirty_log
        # fast_page_fault() (since 3.6, 2012; False: the 2011 era), fast_pf.py
        self.fast_pf = FastPageFault(self, self._fast_pf_last_sptep) if fast_pf else None
        self.prefetched = 0  # sptes set by direct_pte_prefetch() (no kernel stat)
        self.prefetch_lookups = 0  # its gfn_to_memslot_dirty_bitmap() calls
        self._child_roles: dict[KvmMmuPageRole, KvmMmuPageRole] = {}
        self._vcpu_gfn_to_memslot = VcpuMemslotCache(vm).lookup
        self._prefetch_vcpu = 0
        vm.subscribe(self._memslots_changed)

    # -- events ---------------------------------------------------------------------

    def _emit(self, name: str, **fields: FieldValue) -> None:
        if self._listener is not None:
            self._listener(Event(name, fields))

    def _memslots_changed(self, event: Event) -> None:
        shadow_mmu_memslot_update(event, self.vm, self.pages)

    def free_obsolete_roots(self) -> int:
        """KVM_REQ_MMU_FREE_OBSOLETE_ROOTS as each vCPU handles it at its next entry
        (`kvm_mmu_free_obsolete_roots()`): drop an obsolete root; returns how many."""
        return self.pages.put_obsolete_roots(self.roots)

    # -- roots ----------------------------------------------------------------------

    def root(self, vcpu: int) -> KvmMmuPage:
        """`kvm_mmu_load()`: the vCPU's root, made again after a fast zap obsoletes it."""
        root = self.roots.get(vcpu)
        if root is not None and not self.pages.is_obsolete(root):
            return root
        if root is not None:
            self.pages.put_root(root)  # KVM_REQ_MMU_FREE_OBSOLETE_ROOTS
        as_id = self.vm.vcpu(vcpu).as_id
        self.pages.make_mmu_pages_available()
        role = tdp_root_role(smm=bool(as_id), ad_disabled=self.cfg.ad_disabled)
        root, _ = self.pages.get_page(0, role)
        root.root_count += 1
        self.roots[vcpu] = root
        return root

    def zap_all_fast(self) -> int:
        return self.pages.zap_all_fast()

    # -- the fault --------------------------------------------------------------------

    def page_fault(
        self,
        vcpu: int,
        gpa: int,
        write: bool = False,
        exec_: bool = False,
        error_code: int | None = None,
    ) -> RetPf:
        """`kvm_mmu_page_fault()` (6.18 mmu.c) for a guest-physical address.

        A hit on a current MMIO spte (the RSVD/EPT-misconfig path,
        `handle_mmio_page_fault()`) jumps to `emulate:`: neither `pf_taken` nor
        `pf_emulate` counts it.  Only the `RET_PF_INVALID` path counts `pf_taken`, and
        goes on to `direct_page_fault()`.  `error_code` is what the exit handed over
        (vmx.c: `handle_ept_violation()`'s PFERR_* of the exit qualification,
        `handle_ept_misconfig()`'s PFERR_RSVD_MASK; svm.c: the #NPF error code); None:
        what the exit on the spte the walk ends at gives (`fault_error_code`)."""
        gfn = gpa >> PAGE_SHIFT
        root = self.root(vcpu)
        if error_code is None:
            error_code = fault_error_code(self.cfg, self._spte_at(root, gfn), write, exec_)
        if error_code & PFERR_RSVD_MASK and handle_mmio_page_fault(
            self, vcpu, gpa, self._spte_at(root, gfn), self.vm.generation(root.role.smm), True
        ):
            self.emulator.emulate(vcpu, gpa, write)  # emulate: x86_emulate_instruction()
            return RET_PF_EMULATE  # else a stale generation: RET_PF_INVALID, the real path
        self.stat["pf_taken"] += 1
        ret = self.direct_page_fault(vcpu, root, gpa, write, exec_, error_code)
        if ret is RET_PF_EMULATE:
            self.emulator.emulate(vcpu, gpa, write)
        return ret

    def _fast_pf_last_sptep(self, vcpu: int, gfn: int) -> tuple[KvmMmuPage, int]:
        """`fast_pf_get_last_sptep()` from the vCPU's root (fast_pf.py)."""
        return fast_pf_get_last_sptep(self.pages.child_at, self.roots[vcpu], gfn)

    def direct_page_fault(
        self,
        vcpu: int,
        root: KvmMmuPage,
        gpa: int,
        write: bool,
        exec_: bool,
        error_code: int,
    ) -> RetPf:
        """`direct_page_fault()` (6.18 mmu.c): `fast_page_fault()` first (fast_pf.py, with
        the exit's error code), then `kvm_mmu_faultin_pfn()`, which may end the fault before
        any page table is touched, then, with mmu_lock held,
        `make_mmu_pages_available()` and `direct_map()`.

        - no slot, MMIO caching off or a gfn above `kvm_mmu_max_gfn()`:
          `kvm_handle_noslot_fault()` returns RET_PF_EMULATE at once;
        - a write to a read-only slot: `__kvm_faultin_pfn()` gets KVM_PFN_ERR_RO_FAULT and
          `kvm_handle_error_pfn()` returns RET_PF_EMULATE (no spte is made or changed);
        - an MMU-notifier invalidation of the gfn in progress, or ended since the fault
          began: RET_PF_RETRY (`kvm_mmu_faultin_pfn()`'s checks, then
          `is_page_fault_stale()` under mmu_lock: mapping_level.py)."""
        gfn = gpa >> PAGE_SHIFT
        slot = self._vcpu_gfn_to_memslot(vcpu, gfn)
        fault = KvmPageFault(gfn, write, exec_, slot, self._max_level(), error_code, gpa)
        if self.fast_pf is not None:
            ret = self.fast_pf.page_fault(vcpu, fault)
            if ret is not RET_PF_INVALID:
                return ret
        noslot_emulate = False
        if slot is None:  # kvm_handle_noslot_fault(): the vCPU's MMIO info first
            self.mmio_info.cache(vcpu, 0, gfn, 0, self.vm.generation(root.role.smm))
            noslot_emulate = not self.cfg.mmio_caching_enabled or gfn > kvm_mmu_max_gfn(self.cfg)
        if not noslot_emulate and self.levels.kvm_mmu_faultin_pfn(fault) is RET_PF_RETRY:
            return RET_PF_RETRY  # an MMU-notifier invalidation of the gfn (mapping_level.py)
        if noslot_emulate or (slot is not None and write and slot.flags & KVM_MEM_READONLY):
            self.stat["pf_emulate"] += 1
            return RET_PF_EMULATE
        if self.levels.is_page_fault_stale(fault, self.pages.is_obsolete(root)):  # mmu_lock
            return RET_PF_RETRY
        self.pages.make_mmu_pages_available()
        return self.direct_map(vcpu, root, fault)

    def _spte_at(self, root: KvmMmuPage, gfn: int) -> int:
        """The spte the lockless walk ends at (the non-present value past the tables)."""
        leaf_page, index = self._walk_existing(root, gfn)
        return self.pages.nonpresent if leaf_page is None else leaf_page.spt[index]

    def _walk_existing(self, root: KvmMmuPage, gfn: int) -> tuple[KvmMmuPage | None, int]:
        """The lockless walk of `get_mmio_spte()`: the last page reached and the index."""
        sp = root
        while True:
            index = spte_index(gfn, sp.role.level)
            child = self.pages.child_at(sp, index)
            if child is None:
                return (sp, index) if sp.spt[index] != self.pages.nonpresent else (None, 0)
            sp = child

    def direct_map(self, vcpu: int, root: KvmMmuPage, fault: KvmPageFault) -> RetPf:
        """`direct_map()` (6.18 mmu.c): `kvm_mmu_hugepage_adjust()`, the
        `kvm_mmu_spte_requested` tracepoint, the walk down to the goal level
        (`_walk_to_goal`), then the leaf: `mark_mmio_spte()` without a slot, else
        `mmu_set_spte()` and `direct_pte_prefetch()`."""
        gfn, slot = fault.gfn, fault.slot
        self.levels.kvm_mmu_hugepage_adjust(fault)
        if self._listener is not None:
            fields = spte_requested_fields(gfn, fault.pfn, fault.goal_level)
            self._emit("kvm_mmu_spte_requested", **fields)
        sp = self._walk_to_goal(root, fault)
        level = fault.goal_level
        index = spte_index(gfn, level)
        if level > PG_LEVEL_4K:
            child = self.pages.child_at(sp, index)
            if child is not None:
                # `mmu_set_spte()`: "If we overwrite a PTE page pointer with a 2MB PMD,
                # unlink the parent of the now unreachable PTE" (`drop_parent_pte`), e.g.
                # 4K leaves made while the slot logged dirty pages.
                child.parent_ptes.discard(sp.sptep(index))
                sp.spt[index] = self.pages.nonpresent
        if slot is None:  # caching on (else direct_page_fault emulated): mark_mmio_spte()
            if sp.spt[index] != self.pages.nonpresent:
                self._zap_leaf(sp, index)
            return self._mark_mmio_spte(root, sp, index, gfn)
        spte = self.make_spte(slot, gfn, level)
        if sp.spt[index] == spte:  # `mmu_set_spte()`: already mapped (another vCPU won)
            self.stat["pf_spurious"] += 1
            return RET_PF_SPURIOUS
        if sp.spt[index] != self.pages.nonpresent:
            self._zap_leaf(sp, index)  # the same pfn with other bits: updated (FIXED)
        ret = self._set_leaf(sp, index, gfn, slot, level, spte)
        if self.pte_prefetch:
            self._prefetch(vcpu, sp, index)
        return ret

    def _walk_to_goal(self, root: KvmMmuPage, fault: KvmPageFault) -> KvmMmuPage:
        """`for_each_shadow_entry()` down to `fault.goal_level`: under the NX mitigation
        `disallowed_hugepage_adjust()` first; a missing table is made
        (`kvm_mmu_get_child_sp`), a huge leaf in the way dropped (`drop_large_spte`), and
        a table made for a disallowed NX huge page accounted (`account_nx_huge_page`)."""
        gfn, pages, sp = fault.gfn, self.pages, root
        while True:
            level = sp.role.level
            index = spte_index(gfn, level)
            if self.nx:
                self.levels.disallowed_hugepage_adjust(
                    fault, sp.spt[index], level, self._nx_disallowed
                )
            if level == fault.goal_level:
                break
            child = pages.child_at(sp, index)
            if child is None:
                if sp.spt[index] != pages.nonpresent:
                    self._zap_leaf(sp, index)  # a huge leaf in the way
                child = self._child(sp, gfn, index)
                if fault.huge_page_disallowed:
                    possible = fault.req_level >= level
                    account_nx_huge_page(pages.possible_nx_huge_pages, pages.stat, child, possible)
            sp = child
        return sp

    def _prefetch(self, vcpu: int, sp: KvmMmuPage, index: int) -> None:
        """`direct_pte_prefetch(vcpu, sptep)` (prefetch.py)."""
        self._prefetch_vcpu = vcpu
        self.prefetched += direct_pte_prefetch(
            sp, index, self._prefetch_memslot, self.set_prefetched_spte
        )

    def _prefetch_memslot(self, gfn: int) -> MemorySlot | None:
        self.prefetch_lookups += 1
        return self._vcpu_gfn_to_memslot(self._prefetch_vcpu, gfn)

    def set_prefetched_spte(
        self, sp: KvmMmuPage, index: int, gfn: int, access: int, slot: MemorySlot
    ) -> None:
        """`mmu_set_spte(vcpu, slot, sptep, access, gfn, pfn, NULL)`: a prefetch."""
        level = sp.role.level
        spte = self.make_spte(slot, gfn, level, prefetch=True)
        self._set_leaf(sp, index, gfn, slot, level, spte, prefetch=True)

    def make_spte(self, slot: MemorySlot, gfn: int, level: int, prefetch: bool = False) -> int:
        """`make_spte()` (6.18 spte.c) of the slot's page for `gfn` at `level` (a huge
        leaf maps from the base gfn): ACC_ALL, writable unless the slot is read-only (the
        dirty mask with it, read fault or write: `write` only decides the fault's path),
        Accessed unless a prefetch (`mark_spte_for_access_track()`); under the NX
        mitigation a huge leaf is not executable (ACC_EXEC_MASK dropped above 4K)."""
        base = gfn & -kvm_pages_per_hpage(level)
        pfn = self.levels.gfn_to_pfn(slot, base)
        access = ACC_ALL & ~ACC_EXEC_MASK if self.nx and level > PG_LEVEL_4K else ACC_ALL
        writable = not slot.flags & KVM_MEM_READONLY
        return make_spte(self.cfg, pfn, access, level, writable=writable, accessed=not prefetch)

    def _set_leaf(
        self,
        sp: KvmMmuPage,
        index: int,
        gfn: int,
        slot: MemorySlot,
        level: int,
        spte: int,
        *,
        prefetch: bool = False,
    ) -> RetPf:
        """`mmu_set_spte()` for RAM: the leaf `make_spte()` made, its rmap entry, the
        tracepoint, the page marked dirty in a slot that logs them (`make_spte()`).  A
        prefetch is no fault (not in pf_fixed).  The tracepoint's letters are
        `kvm_mmu_set_spte`'s in 6.18 mmutrace.h: r, w, `x` from `is_executable_pte()` and
        `u` from `shadow_user_mask`, of the spte layout in use (`spte_access_str`: under
        EPT `(rwxu)`, not the non-EPT decoding that reads bit 63 as NX)."""
        sp.spt[index] = spte
        sptep = sp.spt_pa + 8 * index
        self.rmap_add(slot, gfn, level, sptep)
        if self._listener is not None:
            self._emit(
                "kvm_mmu_set_spte", gfn=gfn & -kvm_pages_per_hpage(level), spte=spte,
                access_str=spte_access_str(self.cfg, spte), level=level, sptep=sptep,
            )  # fmt: skip
        if spte & PT_WRITABLE_MASK and slot.flags & KVM_MEM_LOG_DIRTY_PAGES:
            mark_page_dirty_in_slot(self, slot, gfn)
        if not prefetch:
            self.stat["pf_fixed"] += 1
        return RET_PF_FIXED

    def _child(self, parent: KvmMmuPage, gfn: int, index: int) -> KvmMmuPage:
        """`kvm_mmu_get_child_sp()`: the direct page mapping this part of the parent."""
        level = parent.role.level - 1
        base = gfn & ~((1 << (LEVEL_BITS * level)) - 1)
        role = self._child_roles.get(parent.role)
        if role is None:
            role = self._child_roles[parent.role] = parent.role.child(ACC_ALL, direct=True)
        child, _ = self.pages.get_page(base, role)
        self.pages.link(parent, index, child)
        return child

    def _zap_leaf(self, sp: KvmMmuPage, index: int) -> None:
        self._drop_leaf(sp, index, sp.spt[index])
        sp.spt[index] = self.pages.nonpresent

    # -- MMIO sptes -------------------------------------------------------------------

    def _mark_mmio_spte(self, root: KvmMmuPage, sp: KvmMmuPage, index: int, gfn: int) -> RetPf:
        self.stat["pf_emulate"] += 1
        gen = self.vm.generation(root.role.smm)
        sp.spt[index] = spte = make_mmio_spte(self.cfg, gfn, ACC_ALL, gen)
        self.stat["pf_mmio_spte_created"] += 1
        self._emit("mark_mmio_spte", **mark_mmio_spte_fields(sp.sptep(index), gfn, spte))
        return RET_PF_EMULATE

    # -- huge pages -------------------------------------------------------------------

    def kvm_recover_nx_huge_pages(self) -> int:
        """One run of the NX recovery worker (nx_huge_pages.py): the oldest tables made
        for a disallowed NX huge page are zapped (`kvm_mmu_prepare_zap_page()`)."""
        return kvm_recover_mmu_nx_huge_pages(self.vm, self.pages, self.params)

    def max_level(self, slot: MemorySlot | None, gfn: int, exec_: bool = False) -> int:
        """The level `kvm_mmu_hugepage_adjust()` picks for a fault on `gfn` (before
        `disallowed_hugepage_adjust()`): 4K without huge pages, a slot or for a fetch
        under the NX mitigation, else `kvm_mmu_max_mapping_level()` (mapping_level.py:
        the slot's `disallow_lpage` and the host's backing)."""
        fault = KvmPageFault(gfn, False, exec_, slot, self._max_level())
        self.levels.kvm_mmu_hugepage_adjust(self.levels.kvm_faultin_pfn(fault))
        return fault.goal_level

    def _max_level(self) -> int:
        return KVM_MAX_HUGEPAGE_LEVEL if self.huge_pages else PG_LEVEL_4K

    def why_level(self, slot: MemorySlot | None, gfn: int, exec_: bool = False) -> str:
        """The level a fault on `gfn` maps at, and why (for the screens)."""
        nx_split = False
        root = next(iter(self.roots.values()), None)
        if root is not None and slot is not None:
            level = self.max_level(slot, gfn, exec_)
            sp = root
            while sp.role.level > level and (child := self._child_of(sp, gfn)) is not None:
                sp = child
            if sp.role.level == level > PG_LEVEL_4K:
                child = self.pages.child_at(sp, spte_index(gfn, level))
                nx_split = child is not None and child.nx_huge_page_disallowed
        return self.levels.why(slot, gfn, exec_, self._max_level(), nx_split)[1]

    def _child_of(self, sp: KvmMmuPage, gfn: int) -> KvmMmuPage | None:
        return self.pages.child_at(sp, spte_index(gfn, sp.role.level))

    def _nx_disallowed(self, spte: int) -> bool:
        sp = self.pages.page_by_pa(spte & SPTE_BASE_ADDR_MASK)
        return sp is not None and sp.nx_huge_page_disallowed

    # -- rmaps ------------------------------------------------------------------------

    @property
    def rmaps(self) -> RmapsView:
        """The rmaps as heads, (as_id, slot id, level) -> gfn_to_index -> KvmRmapHead."""
        return RmapsView(self.rmap_vals, self.era)

    def rmap_add(self, slot: MemorySlot, gfn: int, level: int, sptep: int) -> None:
        """`rmap_add()`: `sptep` onto the rmap of (slot, level, gfn)."""
        vals = self.rmap_vals.setdefault((slot.as_id, slot.id, level), {})
        key = gfn_to_index(gfn, slot.base_gfn, level)
        old = vals.get(key)
        if old is None:
            vals[key] = sptep  # pte_list_add 0 -> 1: val is the sptep itself
        else:
            vals[key] = rmap_val_add(old, sptep, self.era)

    def _drop_leaf(self, sp: KvmMmuPage, index: int, spte: int) -> None:
        """A present leaf goes away: take it off its gfn's rmap (`drop_spte`)."""
        if is_mmio_spte(self.cfg, spte):
            return
        gfn = sp.gfn + (index << level_shift(sp.role.level))
        as_id, level = sp.role.smm, sp.role.level
        slot = self.vm.memslot_set(as_id).gfn_tree.search(gfn)
        if slot is None:
            raise AuditError(f"present leaf {sp.sptep(index):#x} maps gfn {gfn:#x} of no slot")
        vals = self.rmap_vals.get((as_id, slot.id, level), {})
        key = gfn_to_index(gfn, slot.base_gfn, level)
        sptep = sp.spt_pa + 8 * index
        old = vals.get(key)
        if type(old) is int and old == sptep:
            del vals[key]  # pte_list_remove 1 -> 0
            return
        if rmap_val_remove(old, sptep) is None:
            del vals[key]

    def audit(self) -> None:
        """Pages consistent; every rmap entry is a present leaf of its gfn and level, and
        every present leaf is in exactly one rmap; rmap vals encoded as the kernel's."""
        self.pages.audit()
        leaves: dict[int, KvmMmuPage] = {}
        nonpresent = self.pages.nonpresent
        for sp in self.pages.pages():
            for index, spte in enumerate(sp.spt):
                leaf = spte != nonpresent and self.pages.child_at(sp, index) is None
                if leaf and not is_mmio_spte(self.cfg, spte):
                    leaves[sp.sptep(index)] = sp
        seen: set[int] = set()
        for (as_id, slot_id, level), vals in self.rmap_vals.items():
            for key, val in vals.items():
                self._audit_val(key, val)
                for sptep in rmap_val_sptes(val):
                    holder = leaves.get(sptep)
                    if holder is None or holder.role.level != level or sptep in seen:
                        raise AuditError(f"rmap entry {sptep:#x} is not a present leaf once")
                    gfn = holder.gfn + (((sptep & 0xFFF) >> 3) << level_shift(level))
                    slot = self.vm.memslot_set(as_id).gfn_tree.search(gfn)
                    if (
                        holder.role.smm != as_id
                        or slot is None
                        or slot.id != slot_id
                        or gfn_to_index(gfn, slot.base_gfn, level) != key
                    ):
                        raise AuditError(f"rmap entry {sptep:#x} is in the rmap of another gfn")
                    seen.add(sptep)
        if seen != set(leaves):
            raise AuditError(f"{len(set(leaves) - seen)} present leaves are in no rmap")

    def _audit_val(self, key: int, val: RmapVal) -> None:
        if isinstance(val, KvmRmapHead):
            val.audit()
            if val.era is not self.era or not val.is_many:
                raise AuditError(f"rmap val of {key} is a head without descs")
        else:
            try:
                check_sptep(val)
            except ValueError as err:
                raise AuditError(f"rmap val {val:#x} of {key}: {err}") from None
