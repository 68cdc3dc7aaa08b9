"""The TDP MMU (tdp_mmu=Y, the default under EPT/NPT since 5.15): one class, `TdpMmu`,
holding what 6.18 keeps for it in `struct kvm` (`tdp_mmu_roots`, the page stats,
`possible_nx_huge_pages`) and the functions `tdp_mmu.c` runs on it, as the kernel's take
`struct kvm`: how an spte changes and what each change sets off, the roots, the zaps,
the page fault, huge pages (splitting, dirty logging, recovery, NX huge pages), the
reaction to memslot updates, and the audit.  The page-table pages are pages.py, the
iterator iter.py; no rmap is kept: the TDP MMU finds a gfn's sptes by walking the roots.

**Changing an spte** (torvalds/linux 6.18 `arch/x86/kvm/mmu/tdp_mmu.c`):
- `tdp_mmu_set_spte_atomic()` (mmu_lock held for read, e.g. the fault path): a
  `try_cmpxchg64()` of the spte from the iterator's `old_spte`; when another CPU changed it
  first the exchange fails (-EBUSY), `old_spte` is refreshed, and the caller retries or
  gives up (the fault returns RET_PF_RETRY).  `race`, when set, runs "another CPU" just
  before the exchange (tests and the session use it to lose races on purpose).
- `tdp_mmu_zap_spte_atomic()`: the spte is first *frozen* (`FROZEN_SPTE` =
  SHADOW_NONPRESENT_VALUE | 0x5a0, 6.10+; `REMOVED_SPTE` = 0x5a0 before: `cfg.frozen_spte`)
  while remote TLBs are flushed, so that no other CPU installs a present spte in its
  place; then cleared to `SHADOW_NONPRESENT_VALUE` (BIT(63) from 6.10, 0 before:
  `cfg.shadow_nonpresent_value`), which `kvm_tdp_mmu_spte_changed` prints as new_spte.
- `tdp_mmu_set_spte()` (mmu_lock held for write): a plain write.
- `handle_changed_spte()`, after each: `kvm_tdp_mmu_spte_changed` (as id, gfn, level,
  old, new) unless nothing changed, the page stats (`pages_4k/2m/1g`), and when a table
  spte went away or became a leaf, `handle_removed_pt()` on the table it pointed at:
  `kvm_mmu_prepare_zap_page`, unaccount, every entry frozen (FROZEN_SPTE; with mmu_lock
  shared, all 512 of them, each one a `handle_changed_spte`; held for write, only the
  present ones), recursively, then `call_rcu()`.
- `tdp_mmu_init_sp()` emits `kvm_mmu_get_page` (new; gen 0, root 0: the kernel never sets
  `mmu_valid_gen` for TDP pages and traces before any root reference is taken);
  `tdp_mmu_link_sp()` installs `make_nonleaf_spte()` and accounts the page.

**Roots and zaps** (6.18 `tdp_mmu.c`, `mmu.c`): one root per address space and role,
shared by the vCPUs that need it, reference counted, invalidated by a fast zap and
zapped while still referenced.
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

**The fault** (6.18 `tdp_mmu.c`, `mmu.c` (`kvm_mmu_page_fault`, `kvm_tdp_page_fault`,
`kvm_mmu_hugepage_adjust`, `disallowed_hugepage_adjust`, `handle_mmio_page_fault`),
`spte.c` (`make_spte`, `make_mmio_spte`)):
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

**Huge pages** (6.18 `tdp_mmu.c`, `mmu.c`, `spte.c`, `x86.c`): how large a leaf may be,
splitting (eager, when dirty logging starts, and on an instruction fetch under the NX
huge page mitigation), dirty logging's write protection, collapsing back to huge pages,
and NX huge page recovery.
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

import errno
from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from ...errors import AuditError
from ...events import Event, FieldValue
from ...memslots.constants import KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY, KVM_MR_FLAGS_ONLY
from ...memslots.memslot import MemorySlot
from ...memslots.vm import Vm, kvm_dirty_log_manual_protect_and_init_set
from ..fast_pf import (
    FastPageFault,
    fault_error_code,
    is_access_allowed,
    mark_page_dirty_in_slot,
)
from ..mapping_level import KvmPageFault as KvmPageFault
from ..mapping_level import MappingLevels
from ..nx_huge_pages import (
    recover_nx_huge_pages,
    track_possible_nx_huge_page,
    unaccount_nx_huge_page,
    untrack_possible_nx_huge_page,
)
from ..params import TdpMmuParams, cpu_dirty_log_size
from ..role import (
    ACC_ALL,
    ACC_EXEC_MASK,
    PG_LEVEL_1G,
    PG_LEVEL_2M,
    PG_LEVEL_4K,
    KvmMmuPageRole,
    tdp_root_role,
)
from ..spte import (
    KVM_MAX_HUGEPAGE_LEVEL,
    PT_PAGE_SIZE_MASK,
    PT_WRITABLE_MASK,
    RET_PF_EMULATE,
    RET_PF_FIXED,
    RET_PF_INVALID,
    RET_PF_RETRY,
    RET_PF_SPURIOUS,
    SPTE_BASE_ADDR_MASK,
    SPTE_CONFIGS,
    SPTE_MMU_PRESENT_MASK,
    RetPf,
    SpteConfig,
    is_large_pte,
    is_last_spte,
    is_mmio_spte,
    is_shadow_present_pte,
    kvm_mmu_max_gfn,
    make_huge_spte,
    make_mmio_spte,
    make_nonleaf_spte,
    make_small_spte,
    make_spte,
    mark_mmio_spte_fields,
    memslot_update_zaps,
    spte_access_str,
    spte_requested_fields,
)
from ..vcpu.emulate import DirectEmulator
from ..vcpu.mmio_info import VcpuMmioInfo, handle_mmio_page_fault
from ..vcpu.vcpu_memslot import VcpuMemslotCache
from ..vcpu.vmx import PFERR_RSVD_MASK
from .iter import TdpIter, for_each_tdp_pte, for_each_tdp_pte_min_level, kvm_pages_per_hpage
from .pages import SPTE_ENT_PER_PAGE, TdpMmuPage, TdpMmuPages, spte_to_child_pa

PAGE_SHIFT = 12
EBUSY = -errno.EBUSY
_PAGE_STATS = {1: "pages_4k", 2: "pages_2m", 3: "pages_1g"}
Race = Callable[[TdpIter], None]
FieldsListener = Callable[[str, Mapping[str, FieldValue]], None]


def fields_listener(emit: Callable[[Event], None] | None) -> FieldsListener | None:
    """An `Event` listener as the (name, fields) listener the TDP MMU calls (a session
    listens to names and fields itself, and builds an Event only for who wants one)."""
    if emit is None:
        return None
    return lambda name, fields: emit(Event(name, fields))


class TdpMmu:
    """One VM's TDP MMU (tdp_mmu=Y): what 6.18 keeps for it in `struct kvm_arch`
    (`tdp_mmu_roots`, the page stats, `possible_nx_huge_pages`) and the functions
    tdp_mmu.c runs on it."""

    def __init__(
        self,
        vm: Vm,
        cfg: SpteConfig | None = None,
        params: TdpMmuParams | None = None,
        emit: Callable[[Event], None] | None = None,
        host_seed: int = 1,
    ) -> None:
        self.vm = vm
        self.cfg = cfg or SPTE_CONFIGS["ept"]
        self.params = params or TdpMmuParams()
        self.pages = TdpMmuPages(self.cfg, self.params.counts_tdp_mmu_pages)
        self.nonpresent = self.cfg.shadow_nonpresent_value  # SHADOW_NONPRESENT_VALUE or 0
        self.frozen = self.cfg.frozen_spte  # FROZEN_SPTE or REMOVED_SPTE, by era
        #: (name, fields) of each event, or None: nobody listens, no event is built
        self._listener: FieldsListener | None = fields_listener(emit)
        self.now_ns = 0  # guest time, for RCU grace periods (the session sets it)
        self.race: Race | None = None
        self._child_roles: dict[KvmMmuPageRole, KvmMmuPageRole] = {}
        self.frozen_seen = 0  # sptes frozen by tdp_mmu_zap_spte_atomic() (model-only)
        self.stat = dict.fromkeys(
            (
                *("pf_taken", "pf_fixed", "pf_emulate", "pf_spurious"),
                *("pf_mmio_spte_created", "pages_4k", "pages_2m", "pages_1g"),
                *("nx_lpage_splits", "lost_races"),  # lost_races: model-only
            ),
            0,
        )
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

    # -- events -----------------------------------------------------------------------

    def _emit(self, name: str, **fields: FieldValue) -> None:
        if self._listener is not None:
            self._listener(name, fields)

    def _emit_sp(self, name: str, sp: TdpMmuPage, **extra: FieldValue) -> None:
        if self._listener is None:
            return
        role = sp.role
        self._listener(
            name,
            {
                "gen": sp.mmu_valid_gen,
                "gfn": sp.gfn,
                "level": role.level,
                "gpte_bytes": 4 if role.has_4_byte_gpte else 8,
                "quadrant": role.quadrant,
                "direct": bool(role.direct),
                "access": role.access,
                "invalid": bool(role.invalid),
                "nxe": bool(role.efer_nx),
                "ad": not role.ad_disabled,
                "root_count": sp.root_count,
                "unsync": sp.unsync,
                **extra,
            },
        )

    # -- pages ------------------------------------------------------------------------

    def tdp_mmu_init_sp(
        self, gfn: int, role: KvmMmuPageRole, ptep: int, root: TdpMmuPage | None
    ) -> TdpMmuPage:
        sp = self.pages.alloc(gfn, role, ptep)
        if root is not None:
            sp.tdp_root = root
        self._emit_sp("kvm_mmu_get_page", sp, created=True)
        return sp

    def tdp_mmu_init_child_sp(self, it: TdpIter) -> TdpMmuPage:
        parent = it.pt
        assert isinstance(parent, TdpMmuPage)
        role = self._child_role(parent.role)
        return self.tdp_mmu_init_sp(it.gfn, role, it.sptep, parent.tdp_root)

    def _child_role(self, role: KvmMmuPageRole) -> KvmMmuPageRole:
        """`tdp_mmu_init_child_sp()`: the parent's role, one level down."""
        child = self._child_roles.get(role)
        if child is None:
            child = self._child_roles[role] = replace(role, level=role.level - 1)
        return child

    def tdp_mmu_link_sp(self, it: TdpIter, sp: TdpMmuPage, shared: bool) -> int:
        spte = make_nonleaf_spte(self.cfg, sp.spt_pa)
        if shared:
            ret = self.tdp_mmu_set_spte_atomic(it, spte)
            if ret:
                return ret
        else:
            self.tdp_mmu_iter_set_spte(it, spte)
        self.tdp_account_mmu_page()
        return 0

    def tdp_account_mmu_page(self) -> None:
        """`tdp_account_mmu_page()` (6.18 tdp_mmu.c): `kvm_account_pgtable_pages(+1)`
        (NR_SECONDARY_PAGETABLE, "SecPageTables" in /proc/meminfo), and
        `kvm->arch.tdp_mmu_pages` only with CONFIG_KVM_PROVE_MMU (6.15+; always before:
        `params.tdp_mmu_pages_era`)."""
        pages = self.pages
        pages.secondary_pagetables += 1
        if pages.counts_tdp_mmu_pages:
            pages.tdp_mmu_pages += 1

    def tdp_unaccount_mmu_page(self) -> None:
        pages = self.pages
        pages.secondary_pagetables -= 1
        if pages.counts_tdp_mmu_pages:
            pages.tdp_mmu_pages -= 1

    def tdp_mmu_free_sp(self, sp: TdpMmuPage) -> None:
        """A page table that never got linked (its link lost a race)."""
        self.pages.free(sp)

    def kvm_update_page_stats(self, level: int, delta: int) -> None:
        self.stat[_PAGE_STATS[level]] += delta

    def untrack_possible_nx_huge_page(self, sp: TdpMmuPage) -> None:
        untrack_possible_nx_huge_page(self.pages.possible_nx_huge_pages, self.stat, sp)

    def track_possible_nx_huge_page(self, sp: TdpMmuPage) -> None:
        track_possible_nx_huge_page(self.pages.possible_nx_huge_pages, self.stat, sp)

    # -- spte changes -------------------------------------------------------------------

    def _tdp_mmu_set_spte_atomic(self, it: TdpIter, new_spte: int) -> int:
        """`__tdp_mmu_set_spte_atomic()`: the cmpxchg; -EBUSY when another CPU won."""
        if it.yielded or it.old_spte == self.frozen:
            raise AuditError(f"tdp: atomic change of a frozen spte at gfn {it.gfn:#x}")
        race = self.race
        if race is not None:
            self.race = None  # the other CPU does not race itself
            try:
                race(it)
            finally:
                self.race = race
        spt, index = it.pt.spt, it.index
        current = spt[index]
        if current != it.old_spte:
            it.old_spte = current
            self.stat["lost_races"] += 1
            return EBUSY
        spt[index] = new_spte
        return 0

    def tdp_mmu_set_spte_atomic(self, it: TdpIter, new_spte: int) -> int:
        ret = self._tdp_mmu_set_spte_atomic(it, new_spte)
        if ret:
            return ret
        self.handle_changed_spte(it.as_id, it.gfn, it.old_spte, new_spte, it.level, True)
        return 0

    def tdp_mmu_zap_spte_atomic(self, it: TdpIter) -> int:
        """Freeze, flush remote TLBs, clear, then handle the old spte."""
        ret = self._tdp_mmu_set_spte_atomic(it, self.frozen)
        if ret:
            return ret
        self.frozen_seen += 1  # kvm_flush_remote_tlbs_gfn() runs while it is frozen
        nonpresent = self.nonpresent
        it.pt.spt[it.index] = nonpresent
        self.handle_changed_spte(it.as_id, it.gfn, it.old_spte, nonpresent, it.level, True)
        return 0

    def tdp_mmu_set_spte(
        self, as_id: int, sp: TdpMmuPage, index: int, old: int, new: int, gfn: int, level: int
    ) -> int:
        frozen = self.frozen
        if old == frozen or new == frozen:
            raise AuditError("tdp: tdp_mmu_set_spte() to or from FROZEN_SPTE")
        old = sp.spt[index]
        sp.spt[index] = new
        self.handle_changed_spte(as_id, gfn, old, new, level, False)
        return old

    def tdp_mmu_iter_set_spte(self, it: TdpIter, new_spte: int) -> None:
        pt = it.pt
        assert isinstance(pt, TdpMmuPage)
        it.old_spte = self.tdp_mmu_set_spte(
            it.as_id, pt, it.index, it.old_spte, new_spte, it.gfn, it.level
        )

    def handle_changed_spte(
        self, as_id: int, gfn: int, old: int, new: int, level: int, shared: bool
    ) -> None:
        was_present = old & SPTE_MMU_PRESENT_MASK != 0
        is_present = new & SPTE_MMU_PRESENT_MASK != 0
        was_leaf = was_present and (level == 1 or old & PT_PAGE_SIZE_MASK != 0)
        is_leaf = is_present and (level == 1 or new & PT_PAGE_SIZE_MASK != 0)
        if gfn & ((1 << (9 * level - 9)) - 1):
            raise AuditError(f"tdp: gfn {gfn:#x} not aligned for level {level}")
        if was_leaf and is_leaf and (old ^ new) & SPTE_BASE_ADDR_MASK:
            raise AuditError(f"tdp: a present leaf at gfn {gfn:#x} changed its pfn (BUG)")
        if old == new:
            return
        if self._listener is not None:
            self._listener(
                "kvm_tdp_mmu_spte_changed",
                {"as_id": as_id, "gfn": gfn, "level": level, "old_spte": old, "new_spte": new},
            )
        if not was_present and not is_present:
            cfg = self.cfg
            if not (is_mmio_spte(cfg, old) or is_mmio_spte(cfg, new) or new == self.frozen):
                raise AuditError(f"tdp: non-present {old:#x} -> {new:#x} at gfn {gfn:#x}")
            return
        if is_leaf != was_leaf:
            self.stat[_PAGE_STATS[level]] += 1 if is_leaf else -1
        if was_present and not was_leaf and (is_leaf or not is_present):
            self.handle_removed_pt(spte_to_child_pa(old, level), shared)

    def handle_removed_pt(self, pt_pa: int, shared: bool) -> None:
        pages = self.pages
        sp = pages.by_pa[pt_pa]
        level, base_gfn, as_id = sp.role.level, sp.gfn, sp.role.smm
        self._emit_sp("kvm_mmu_prepare_zap_page", sp)
        self.tdp_unaccount_mmu_page()  # tdp_mmu_unlink_sp()
        pages.removed_pt += 1
        if sp.nx_huge_page_disallowed:
            unaccount_nx_huge_page(pages.possible_nx_huge_pages, self.stat, sp)
        spt, step, frozen = sp.spt, kvm_pages_per_hpage(level), self.frozen
        for i in range(SPTE_ENT_PER_PAGE):
            old = spt[i]
            if not shared and not is_shadow_present_pte(old):
                continue
            spt[i] = frozen
            self.handle_changed_spte(as_id, base_gfn + i * step, old, frozen, level, shared)
        pages.call_rcu(sp, self.now_ns)

    # -- roots --------------------------------------------------------------------------

    def tdp_mmu_max_gfn_exclusive(self) -> int:
        """`kvm_mmu_max_gfn() + 1`: walks stop at host MAXPHYADDR."""
        return 1 << (self.cfg.host_phys_bits - PAGE_SHIFT)

    def root_role(self, as_id: int) -> KvmMmuPageRole:
        """`kvm_calc_tdp_mmu_root_page_role()`: direct, ACC_ALL, efer_nx, 4 levels."""
        return replace(tdp_root_role(smm=bool(as_id)), ad_disabled=int(self.cfg.ad_disabled))

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
        error_code: int | None = None,
    ) -> RetPf:
        """`kvm_mmu_page_fault(vcpu, gpa, error_code, ...)` (6.18 mmu.c) for a
        guest-physical address; `write`/`exec_` are the access the emulator would redo.
        `error_code` is what the exit handed over (vmx.c: `handle_ept_violation()`'s
        PFERR_* of the exit qualification, `handle_ept_misconfig()`'s PFERR_RSVD_MASK;
        svm.c: the #NPF error code); None: what the exit on the spte the walk ends at
        gives (`fault_error_code`).  A reserved-bit fault tries `handle_mmio_page_fault()`
        first (its walk, `get_mmio_spte()`), and when that emulates jumps to `emulate:`,
        counting neither `pf_taken` nor `pf_emulate`; only RET_PF_INVALID counts `pf_taken`
        and goes on to `kvm_tdp_page_fault()` → `kvm_tdp_mmu_page_fault()`, whose
        RET_PF_EMULATE counts `pf_emulate`."""
        root = self.root(vcpu)
        if error_code is None:
            sp, index = self.last_spte(root, gpa >> PAGE_SHIFT)
            error_code = fault_error_code(self.cfg, sp.spt[index], write, exec_)
        if error_code & PFERR_RSVD_MASK:
            sp, index = self.last_spte(root, gpa >> PAGE_SHIFT)
            gen = self.vm.generation(root.role.smm)
            if handle_mmio_page_fault(self, vcpu, gpa, sp.spt[index], gen, direct=True):
                self.emulator.emulate(vcpu, gpa, write)  # emulate: x86_emulate_instruction()
                return RET_PF_EMULATE
        self.stat["pf_taken"] += 1
        ret = self.kvm_tdp_mmu_page_fault(vcpu, root, gpa, write, exec_, error_code)
        if ret is RET_PF_EMULATE:
            self.stat["pf_emulate"] += 1
            self.emulator.emulate(vcpu, gpa, write)
        return ret

    def kvm_tdp_mmu_page_fault(
        self, vcpu: int, root: TdpMmuPage, gpa: int, write: bool, exec_: bool, error_code: int
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
        fault = KvmPageFault(gfn, write, exec_, slot, error_code=error_code, addr=gpa)
        ret = self.fast_pf.page_fault(vcpu, fault)
        if ret is not RET_PF_INVALID:
            return ret
        if slot is None:  # kvm_handle_noslot_fault(): vcpu_cache_mmio_info() first
            gen = self.vm.generation(root.role.smm)
            self.mmio_info.cache(vcpu, 0, gfn, ACC_ALL & self.cfg.shadow_mmio_access_mask, gen)
            if not self.cfg.mmio_caching_enabled or gfn > kvm_mmu_max_gfn(self.cfg):
                return RET_PF_EMULATE  # no MMIO spte made
        if self.levels.kvm_mmu_faultin_pfn(fault) is RET_PF_RETRY:
            return RET_PF_RETRY  # an MMU-notifier invalidation of the gfn (mapping_level.py)
        if slot is not None and write and slot.flags & KVM_MEM_READONLY:
            return RET_PF_EMULATE
        if self.levels.is_page_fault_stale(fault, bool(root.role.invalid)):  # read_lock
            return RET_PF_RETRY
        ret = self.kvm_tdp_mmu_map(fault, root)
        if ret is RET_PF_FIXED:
            self.stat["pf_fixed"] += 1
        elif ret is RET_PF_SPURIOUS:
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
                return RET_PF_RETRY
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
                return RET_PF_RETRY
            if fault.huge_page_disallowed and fault.req_level >= it.level:
                self.track_possible_nx_huge_page(sp)
        return RET_PF_RETRY  # the walk ended above the goal level

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
            return RET_PF_SPURIOUS
        if slot is None:
            new_spte = make_mmio_spte(self.cfg, it.gfn, ACC_ALL, self.vm.generation(it.as_id))
        else:
            new_spte = self.make_spte(fault.pfn, it.level, fault.map_writable)
        ret = RET_PF_FIXED
        if new_spte == it.old_spte:
            ret = RET_PF_SPURIOUS
        elif self.tdp_mmu_set_spte_atomic(it, new_spte):
            return RET_PF_RETRY
        if slot is None:
            self.stat["pf_mmio_spte_created"] += 1
            if self._listener is not None:
                # tdp_mmu_map_handle_target_level(): trace_mark_mmio_spte(sptep, gfn,
                # new_spte), whose access is spte & ACC_ALL (6 on EPT), as the shadow MMU's
                self._emit("mark_mmio_spte", **mark_mmio_spte_fields(it.sptep, it.gfn, new_spte))
            return RET_PF_EMULATE
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
        sp.spt[:] = array("Q", self._split_sptes(huge_spte, sp.role))
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
