"""The TDP MMU's page tables: `struct kvm_mmu_page` with `tdp_mmu_page = true`, the
`tdp_mmu_roots` list, the `tdp_mmu_pages` count, and page tables waiting for RCU.

torvalds/linux 6.18 `arch/x86/kvm/mmu/tdp_mmu.c`, `mmu_internal.h`:
- a TDP MMU page is found through the spte that points at it (`sp->ptep`, in a union
  with the shadow MMU's `parent_ptes`), never through `mmu_page_hash` or
  `active_mmu_pages`; there is no rmap for its leaves;
- roots live on `kvm->arch.tdp_mmu_roots` (`list_add_rcu`: newest first) with a
  `tdp_mmu_root_count` refcount (in a union with `root_count`): 2 at creation (the vCPU's
  and the TDP MMU's own), +1 for every vCPU or walker that takes it;
- `tdp_account_mmu_page()` counts linked page tables (roots are not counted) in the
  host's NR_SECONDARY_PAGETABLE (`kvm_account_pgtable_pages()`: `secondary_pagetables`)
  and, with CONFIG_KVM_PROVE_MMU only (6.15+; always before), in
  `kvm->arch.tdp_mmu_pages`, the count `kvm_mmu_uninit_tdp_mmu()` checks for leaks;
  `tdp_mmu_unlink_sp()` uncounts them;
- a page table taken out of the paging structure is freed by `call_rcu()`
  (`tdp_mmu_free_sp_rcu_callback`): lockless walkers in an RCU read-side section may
  still read it, so it is *RCU pending* (its sptes all frozen: `FROZEN_SPTE`, 6.10+, or
  `REMOVED_SPTE` before) until a grace period ends; here a grace period ends
  `RCU_GRACE_PERIOD_NS` of guest time later.
- a new page table (`tdp_mmu_alloc_sp()`: `mmu_shadow_page_cache`, whose `init_value` is
  `SHADOW_NONPRESENT_VALUE` from 6.10 on, 0 before) starts with every entry non-present.
- `possible_nx_huge_pages`: page tables made because an executable huge page was not
  allowed (`track_possible_nx_huge_page`), oldest first, for NX huge page recovery.

Model-only: `tdp_root` (the root a page hangs under; the kernel does not keep it) and
`rcu_queued_ns` (when `call_rcu` was called, -1 while linked).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...errors import AuditError
from ..mmu_pages import KvmMmuPage
from ..role import KvmMmuPageRole
from ..spte import (
    SPTE_BASE_ADDR_MASK,
    SPTE_CONFIGS,
    SpteConfig,
    is_large_pte,
    is_shadow_present_pte,
)

RCU_GRACE_PERIOD_NS = 1_000_000  # a grace period of 1 ms of guest time (a few jiffies)
SPTE_ENT_PER_PAGE = 512


class TdpMmuPage(KvmMmuPage):
    """`struct kvm_mmu_page` of the TDP MMU (`root_count` is `tdp_mmu_root_count`)."""

    __slots__ = (
        "nx_huge_page_disallowed",
        "ptep",
        "rcu_queued_ns",
        "tdp_mmu_scheduled_root_to_zap",
        "tdp_root",
    )

    def __init__(
        self, gfn: int, role: KvmMmuPageRole, seq: int, ptep: int, nonpresent: int = 0
    ) -> None:
        super().__init__(gfn, role, 0, seq, nonpresent)  # tdp_mmu_init_sp(): gen never set
        self.ptep = ptep  # 0 for a root (no parent spte)
        if ptep:
            self.parent_ptes.add(ptep)
        self.nx_huge_page_disallowed = False
        self.tdp_mmu_scheduled_root_to_zap = False
        self.rcu_queued_ns = -1
        self.tdp_root: TdpMmuPage = self

    @property
    def as_id(self) -> int:
        """`kvm_mmu_page_as_id()`: role.smm."""
        return self.role.smm

    def __repr__(self) -> str:
        kind = "root" if not self.ptep else "sp"
        return f"<tdp {kind} gfn {self.gfn:#x} l{self.role.level} #{self.seq}>"


def spte_to_child_pa(spte: int, level: int) -> int:
    """`spte_to_child_pt()` as a page address: 0 for a leaf or a non-present spte."""
    if not is_shadow_present_pte(spte) or level == 1 or is_large_pte(spte):
        return 0
    return spte & SPTE_BASE_ADDR_MASK


class TdpMmuPages:
    """The pages one VM's TDP MMU holds: linked, roots, and RCU pending."""

    gen_era = "2019"
    n_max_mmu_pages = 0  # the page budget is the shadow MMU's; TDP pages are not in it

    def __init__(self, cfg: SpteConfig | None = None, counts_tdp_mmu_pages: bool = False) -> None:
        cfg = cfg or SPTE_CONFIGS["ept"]
        self.nonpresent = cfg.shadow_nonpresent_value  # a new table's entries
        self.frozen = cfg.frozen_spte  # FROZEN_SPTE (6.10+) or REMOVED_SPTE (before)
        self.by_pa: dict[int, TdpMmuPage] = {}  # sptep_to_sp(): every page not yet freed
        self.tdp_mmu_roots: list[TdpMmuPage] = []  # newest first
        self.tdp_mmu_pages = 0  # CONFIG_KVM_PROVE_MMU (6.15+), or a kernel before 6.15
        self.counts_tdp_mmu_pages = counts_tdp_mmu_pages
        self.secondary_pagetables = 0  # kvm_account_pgtable_pages(): NR_SECONDARY_PAGETABLE
        self.rcu_pending: dict[int, TdpMmuPage] = {}  # by seq, in call_rcu order
        self.rcu_frozen = 0  # frozen entries in the RCU-pending page tables
        self.possible_nx_huge_pages: dict[int, TdpMmuPage] = {}  # by seq, oldest first
        self.mmu_valid_gen = 0  # kvm->arch.mmu_valid_gen (for the shadow MMU's pages)
        self.lock_holds: list[int] = []  # last zap: page tables freed per root zapped
        self.freed = 0
        self._seq = 0
        self.removed_pt = 0  # page tables taken out (handle_removed_pt), model-only
        self.paging_changes = 0  # tables allocated (to be linked) or queued for RCU (model)

    # -- allocation and freeing ---------------------------------------------------------

    def alloc(self, gfn: int, role: KvmMmuPageRole, ptep: int) -> TdpMmuPage:
        """`tdp_mmu_alloc_sp()` + `tdp_mmu_init_sp()`."""
        sp = TdpMmuPage(gfn, role, self._seq, ptep, self.nonpresent)
        self._seq += 1
        self.paging_changes += 1
        self.by_pa[sp.spt_pa] = sp
        return sp

    def free(self, sp: TdpMmuPage) -> None:
        """`tdp_mmu_free_sp()`: a page never linked, or one whose grace period ended."""
        del self.by_pa[sp.spt_pa]
        if self.rcu_pending.pop(sp.seq, None) is not None:
            self.rcu_frozen -= sp.spt.count(self.frozen)
        self.freed += 1

    def call_rcu(self, sp: TdpMmuPage, now_ns: int) -> None:
        sp.rcu_queued_ns = now_ns
        self.paging_changes += 1
        self.rcu_pending[sp.seq] = sp
        self.rcu_frozen += sp.spt.count(self.frozen)

    def rcu_advance(self, now_ns: int) -> int:
        """Run the RCU callbacks whose grace period has ended; how many pages were freed."""
        done = 0
        while self.rcu_pending:
            sp = next(iter(self.rcu_pending.values()))
            if now_ns - sp.rcu_queued_ns < RCU_GRACE_PERIOD_NS:
                break
            self.free(sp)
            done += 1
        return done

    def rcu_barrier(self) -> int:
        """`rcu_barrier()`: wait for every pending callback."""
        done = len(self.rcu_pending)
        for sp in list(self.rcu_pending.values()):
            self.free(sp)
        return done

    # -- the views the shadow-MMU screen reads (MmuPages' names) --------------------------

    def is_obsolete(self, sp: KvmMmuPage) -> bool:
        """Under an invalid root (being zapped, or zapped and waiting for its users)."""
        root = sp.tdp_root if isinstance(sp, TdpMmuPage) else sp
        return bool(root.role.invalid) or bool(sp.role.invalid)

    def child_at(self, parent: KvmMmuPage, index: int) -> TdpMmuPage | None:
        pa = spte_to_child_pa(parent.spt[index], parent.role.level)
        return self.by_pa.get(pa) if pa else None

    def page_of_sptep(self, sptep: int) -> TdpMmuPage:
        return self.by_pa[sptep & ~0xFFF]

    def pages(self) -> Iterator[TdpMmuPage]:
        """Roots on the list and linked page tables, oldest first (not RCU pending)."""
        live = [sp for sp in self.by_pa.values() if sp.rcu_queued_ns < 0]
        roots = set(map(id, self.tdp_mmu_roots))
        return iter([sp for sp in live if sp.ptep or id(sp) in roots])

    @property
    def n_used_mmu_pages(self) -> int:
        """Roots plus linked page tables (what the screen counts as pages used)."""
        return len(self.tdp_mmu_roots) + self.secondary_pagetables

    # -- audit ------------------------------------------------------------------------

    def audit(self) -> None:
        """Every live page hangs under exactly one root on the list, through a parent spte
        that points at it; accounted pages (SecPageTables, and tdp_mmu_pages where it is
        counted) are the linked non-roots; RCU-pending pages are
        unreachable and hold only frozen or non-present sptes."""
        reached: dict[int, TdpMmuPage] = {}
        for root in self.tdp_mmu_roots:
            if root.ptep or root.root_count <= 0:
                raise AuditError(f"tdp: {root} on tdp_mmu_roots with count {root.root_count}")
            self._audit_tree(root, reached)
        linked = sum(1 for sp in reached.values() if sp.ptep)
        if linked != self.secondary_pagetables:
            raise AuditError(f"tdp: SecPageTables {self.secondary_pagetables} != {linked} linked")
        if self.tdp_mmu_pages != (linked if self.counts_tdp_mmu_pages else 0):
            raise AuditError(f"tdp: tdp_mmu_pages {self.tdp_mmu_pages}, {linked} linked")
        for sp in self.by_pa.values():
            queued = sp.rcu_queued_ns >= 0
            if queued != (sp.seq in self.rcu_pending):
                raise AuditError(f"tdp: {sp} RCU state disagrees with rcu_pending")
            if queued and sp.seq in reached:
                raise AuditError(f"tdp: RCU-pending {sp} still reachable")
            if not queued and sp.seq not in reached:
                raise AuditError(f"tdp: {sp} is neither reachable nor RCU pending")
            if queued and any(is_shadow_present_pte(s) for s in sp.spt):
                raise AuditError(f"tdp: RCU-pending {sp} still holds a present spte")
        for sp in self.possible_nx_huge_pages.values():
            if not sp.nx_huge_page_disallowed or sp.seq not in reached:
                raise AuditError(f"tdp: {sp} on possible_nx_huge_pages but not tracked")

    def _audit_tree(self, root: TdpMmuPage, reached: dict[int, TdpMmuPage]) -> None:
        stack = [root]
        while stack:
            sp = stack.pop()
            if sp.seq in reached or sp.tdp_root is not root:
                raise AuditError(f"tdp: {sp} reached twice or under another root")
            reached[sp.seq] = sp
            for index, spte in enumerate(sp.spt):
                pa = spte_to_child_pa(spte, sp.role.level)
                if not pa:
                    if spte == self.frozen and not self.is_obsolete(sp):
                        raise AuditError(f"tdp: frozen spte left in {sp}[{index}] at rest")
                    continue
                child = self.by_pa.get(pa)
                if child is None or child.ptep != sp.sptep(index):
                    raise AuditError(f"tdp: {sp}[{index}] points at no page linked there")
                gfn = sp.gfn + (index << 9 * (sp.role.level - 1))
                if child.role.level != sp.role.level - 1 or child.role.smm != sp.role.smm:
                    raise AuditError(f"tdp: {child} has the wrong role under {sp}")
                if child.gfn != gfn:
                    raise AuditError(f"tdp: {child} linked at gfn {gfn:#x}")
                stack.append(child)
