"""A running guest on the direct-paging MMU: workloads, exits, faults, zaps, events.

The model behind the shadow-MMU screen (and its tests): guest accesses come from a seeded
workload; an access whose gfn already has a present leaf spte costs nothing (the CPU's
EPT walk succeeds, no VM exit); any other access exits — an EPT violation for a missing
leaf, an EPT misconfiguration for a cached MMIO spte — and runs `DirectMmu.page_fault()`.
Workloads (from the memslot-search and fast-zap threads):
- `kernbench`: RAM faults across the slots, most of them first touches;
- `netperf`: an emulated NIC's doorbell and the LAPIC hit again and again (MMIO: the
  first access caches an MMIO spte, the rest are emulated without a memslot search);
- `churn`: `kernbench` plus a memslot update every `CHURN_EVERY` accesses (a BAR
  created and deleted), so generations advance, MMIO sptes go stale and DELETE zaps;
- `dirty`: `kernbench` with dirty logging toggled on the largest RAM slot every
  `DIRTY_EVERY` accesses: with PML (`params.enable_pml`, the default on EPT with A/D
  bits) D bits cleared and the CPU logs the writes, without it write-protected sptes,
  fixed by `fast_page_fault()` (dirty_log.py);
- `migrate`: a live migration's dirty logging passes over a guest's working set
  (`EptSession.migrate_update`);
- `balloon`: kernbench while a virtio balloon gives pages back to the host
  (guest/balloon.py): MMU-notifier invalidations zap their sptes through the rmaps.
`fork` and `pfault` need guest page tables: shadow paging, `shadow/session.py`.
As in the TDP session, a tenth of the RAM reads are instruction fetches (a separate
random stream, so the accesses are those of before): under `nx_huge_pages` they split
huge pages, and the NX recovery worker runs every `recovery_period_ns` of guest time.
An access that needs no exit sets the spte's Accessed bit (and a write its Dirty bit),
as the CPU's EPT walk does with A/D bits on: a prefetched spte (A clear) shows when the
guest first touches it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...layouts.layout import Layout
from ..fast_pf import fast_words
from ..guest.ept import CHURN_EVERY as CHURN_EVERY
from ..guest.ept import CHURN_SLOT as CHURN_SLOT
from ..guest.ept import DIRTY_EVERY as DIRTY_EVERY
from ..guest.ept import EPT_WORKLOADS, EptAccess, EptSession, workload_update
from ..guest.ept import LAPIC_EOI as LAPIC_EOI
from ..guest.ept import NIC_DOORBELL as NIC_DOORBELL
from ..guest.ept import churn_update as churn_update
from ..guest.session import ACCESS_NS, after_2011
from ..mmu_pages import KvmMmuPage
from ..params import TdpMmuParams
from ..spte import (
    PT_PRESENT_MASK,
    PT_WRITABLE_MASK,
    RET_PF_RETRY,
    RetPf,
    SpteConfig,
    is_executable_pte,
    is_shadow_present_pte,
    spte_config_named,
)
from .mmu import DirectMmu

PAGE_SHIFT = 12
MMU_WORKLOADS = EPT_WORKLOADS
MAX_RETRIES = 4  # faults of one access while RET_PF_RETRY leaves it unmapped (model-only)


@dataclass(frozen=True, slots=True)
class MmuStep:
    """One guest access and what it cost: no exit, or the fault's RET_PF_* result."""

    access: EptAccess
    exited: bool
    ret: RetPf | None
    update: str = ""  # a memslot update made before the access (churn)
    fast: str = ""  # what fast_page_fault did, when it fixed the fault (fast_pf.fast_words)


class MmuSession(EptSession[MmuStep]):
    """A guest (a `Layout`), its direct MMU and a workload; deterministic for a seed."""

    paging = "ept"
    workloads = MMU_WORKLOADS
    mmu: DirectMmu

    def __init__(
        self,
        layout: Layout,
        *,
        workload: str = "kernbench",
        seed: int = 1,
        nr_vcpus: int = 2,
        spte_config: str | SpteConfig = "ept",
        pte_list_era: str = "6.4",
        gen_era: str = "2019",
        huge_pages: bool = True,
        params: TdpMmuParams | None = None,
        pte_prefetch: bool = True,
        dirty_log: str = "legacy",
        dirty_ring: int | None = None,
    ) -> None:
        super().__init__(layout, workload, seed, nr_vcpus)
        self.mmu = DirectMmu(
            self.vm,
            spte_config_named(spte_config),
            pte_list_era=pte_list_era,
            gen_era=gen_era,
            huge_pages=huge_pages,
            emit=self._forward,
            mmio_info_cache=after_2011(spte_config),  # cache mmio info: 3.1
            fast_pf=after_2011(spte_config),  # fast_page_fault: 3.6
            params=params,
            pte_prefetch=pte_prefetch,
            host_seed=seed,  # which host pages back guest memory (mapping_level.py)
        )
        self.set_up_guest(seed, dirty_log, dirty_ring)

    # -- the workload -------------------------------------------------------------------

    def next_access(self) -> EptAccess:
        return EptAccess(*self.draw())

    def _tick(self) -> None:
        """The NX recovery worker wakes when its period of guest time is up."""
        now = self.steps * ACCESS_NS
        if 0 <= self._next_recovery <= now:
            self.mmu.kvm_recover_nx_huge_pages()
            self._next_recovery = now + self.mmu.params.recovery_period_ns

    def step(self) -> MmuStep:
        self._tick()
        update = workload_update(self)
        return self._access(self.next_access(), update)

    def access(self, vcpu: int, gpa: int, write: bool = False, fetch: bool = False) -> MmuStep:
        """One guest access of the caller's choosing (not the workload's), run as the
        workload's are: the CPU's walk, else the exit and the fault."""
        return self._access(EptAccess(vcpu, gpa, write, fetch), "")

    def _access(self, access: EptAccess, update: str) -> MmuStep:
        self.steps += 1
        self.vcpu = access.vcpu
        self.mmu.root(access.vcpu)  # kvm_mmu_reload() before VM entry
        if not self.needs_exit(access):
            self._cpu_sets_accessed_dirty(access)
            self.dirty_ring_exit(access.vcpu)  # a dirty ring filled from the PML buffer
            return MmuStep(access, False, None, update)
        fast = self.mmu.fast_pf
        before = self.mmu.stat.get("pf_fast", 0)
        ret: RetPf | None = None
        for _ in range(MAX_RETRIES):  # RET_PF_RETRY: the vCPU re-enters and faults again
            code = self.ept_exit(access.vcpu, access.gpa, access.write, access.fetch)
            if code is None:
                ret = None  # the fast MMIO bus took the store (guest/ept.py)
                break
            ret = self._result(
                self.mmu.page_fault(access.vcpu, access.gpa, access.write, access.fetch, code)
            )
            self.vm_entry(access.vcpu, ret)
            if ret is not RET_PF_RETRY or not self.needs_exit(access):
                break
        words = ""
        if fast is not None and self.mmu.stat["pf_fast"] != before:
            words = fast_words(self.mmu.cfg, fast.last)
        return MmuStep(access, True, ret, update, words)

    def _cpu_sets_accessed_dirty(self, access: EptAccess) -> None:
        """The CPU's walk sets the leaf's Accessed bit, and Dirty on a write (EPT with A/D
        bits, or NPT); with PML on, a D bit it sets logs the gpa (dirty_log.py)."""
        leaf = self._leaf(access.vcpu, access.gpa >> PAGE_SHIFT)
        if leaf is None or leaf[0].role.ad_disabled:
            return
        sp, index = leaf
        cfg = self.mmu.cfg
        sp.spt[index] |= cfg.shadow_accessed_mask
        if access.write and not sp.spt[index] & cfg.shadow_dirty_mask:
            sp.spt[index] |= cfg.shadow_dirty_mask
            gfn = access.gpa >> PAGE_SHIFT
            as_id = self.vm.vcpu(access.vcpu).as_id  # the tree itself: no lookup counted
            self.dirty_log.cpu_sets_dirty(self.vm.memslot_set(as_id).gfn_tree.search(gfn), gfn)

    def needs_exit(self, access: EptAccess) -> bool:
        """False when the CPU's own walk finds a present, non-MMIO leaf that allows the
        access (no VM exit); a write to a read-only leaf exits (a read-only slot)."""
        spte = self.leaf_spte(access.vcpu, access.gpa >> PAGE_SHIFT)
        if not is_shadow_present_pte(spte):  # empty or an MMIO spte
            return True
        if not spte & PT_PRESENT_MASK:
            return True  # access-tracked (A/D bits off, aged): RWX cleared
        if access.fetch and not is_executable_pte(self.mmu.cfg, spte):
            return True  # an NX huge page (the mitigation keeps huge leaves not executable)
        return access.write and not spte & PT_WRITABLE_MASK

    def leaf_spte(self, vcpu: int, gfn: int) -> int:
        """The leaf spte the vCPU's current root maps `gfn` with (the non-present value
        when none)."""
        leaf = self._leaf(vcpu, gfn)
        return self.mmu.pages.nonpresent if leaf is None else leaf[0].spt[leaf[1]]

    def path_of(self, step: MmuStep) -> list[tuple[KvmMmuPage, int]]:
        """The pages the access's gfn walks through, root first."""
        return self._path(step.access.vcpu, step.access.gpa >> PAGE_SHIFT)

    def audit(self) -> None:
        self.mmu.audit()
        self.vm.audit()
        self.notifier.audit()
        self.dirty_log.audit()
