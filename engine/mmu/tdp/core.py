"""How the TDP MMU changes an spte, and what every change sets off.

torvalds/linux 6.18 `arch/x86/kvm/mmu/tdp_mmu.c`:
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
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Mapping
from dataclasses import replace

from ...errors import AuditError
from ...events import Event, FieldValue
from ...memslots.vm import Vm
from ..nx_huge_pages import (
    track_possible_nx_huge_page,
    unaccount_nx_huge_page,
    untrack_possible_nx_huge_page,
)
from ..params import TdpMmuParams
from ..role import KvmMmuPageRole
from ..spte import (
    PT_PAGE_SIZE_MASK,
    SPTE_BASE_ADDR_MASK,
    SPTE_CONFIGS,
    SPTE_MMU_PRESENT_MASK,
    SpteConfig,
    is_mmio_spte,
    is_shadow_present_pte,
    make_nonleaf_spte,
)
from .iter import TdpIter, kvm_pages_per_hpage
from .pages import SPTE_ENT_PER_PAGE, TdpMmuPage, TdpMmuPages, spte_to_child_pa

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


class TdpMmuCore:
    """The TDP MMU's pages, its spte changes, and the events they emit."""

    def __init__(
        self,
        vm: Vm,
        cfg: SpteConfig | None = None,
        params: TdpMmuParams | None = None,
        emit: Callable[[Event], None] | None = None,
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
