"""A running guest on the TDP MMU (EPT/NPT, tdp_mmu=Y: today's default): workloads,
exits, faults, zaps, RCU grace periods, NX huge page recovery, and events.

The same guest accesses as `MmuSession` for the same seed (the same random draws), so a
run on the TDP MMU and one on the older direct MMU (`tdp_mmu=N`) can be compared access
by access; instruction fetches (kernbench's code, 1 in 10) come from a second generator,
and only matter under the NX huge page mitigation.  Workloads:
- `kernbench`, `netperf`, `churn`: as on `MmuSession`;
- `dirty`: kernbench, with dirty logging turned on for the largest RAM slot every
  `DIRTY_EVERY` accesses and off again the next time (eager page split and write
  protection when it starts, huge pages collapsing back when it stops);
- `migrate`: dirty logging passes over a working set (`FastPathControls`): with PML
  (EPT) the CPU logs the writes, without it (NPT) `fast_page_fault()` fixes them.
An access exits when the CPU's walk of the vCPU's root finds no leaf that allows it (not
present, MMIO, not writable for a write, not executable for a fetch).  A fault that
returns RET_PF_RETRY lets the vCPU run again, and it faults again if it must.
`smi_every` sends the last vCPU an SMI every that many accesses; it leaves SMM (RSM) half
way to the next, so its accesses run in address space 1 (SMRAM) on a root of its own.
`race_rate` makes another vCPU fault on the same gfn inside the spte's cmpxchg window
that often, so `tdp_mmu_set_spte_atomic` loses the race (tests, and the screen's races).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from typing import NamedTuple

from ...layouts.layout import Layout
from ..guest.ept import (
    CHURN_EVERY,
    DIRTY_EVERY,
    EPT_WORKLOADS,
    EptSession,
    workload_update,
)
from ..guest.fast import GET_DIRTY_EVERY
from ..guest.session import ACCESS_NS, PFERR_WRITE
from ..mmu_pages import KvmMmuPage
from ..params import TdpMmuParams
from ..spte import (
    PT_PRESENT_MASK,
    PT_WRITABLE_MASK,
    SPTE_CONFIGS,
    SPTE_MMU_PRESENT_MASK,
    RetPf,
    is_executable_pte,
)
from .core import CommonListener
from .cpu import MAX_RETRIES, TdpAccess, cpu_run
from .iter import TdpIter
from .mmu import TdpMmu
from .pages import RCU_GRACE_PERIOD_NS, TdpMmuPage

PAGE_SHIFT = 12
PFERR_FETCH = 1 << 4
TDP_WORKLOADS = EPT_WORKLOADS
ZAP_KINDS = ("fast", "slow", "roots")
SMBASE = 0x30000  # the default SMBASE (SDM: SMRAM at 0x30000 + 0x8000 entry)


class TdpStep(NamedTuple):
    access: TdpAccess
    exited: bool
    ret: RetPf | None
    update: str = ""
    fast: str = ""  # what fast_page_fault did, when it fixed the fault (fast_pf.fast_words)


class TdpSession(EptSession[TdpStep]):
    """A guest (a `Layout`), its TDP MMU and a workload; deterministic for a seed."""

    paging = "tdp"
    workloads = TDP_WORKLOADS
    mmu: TdpMmu

    def __init__(
        self,
        layout: Layout,
        *,
        workload: str = "kernbench",
        seed: int = 1,
        nr_vcpus: int = 2,
        spte_config: str = "ept",
        params: TdpMmuParams | None = None,
        race_rate: float = 0.0,
        walk_cache: bool = True,
        smi_every: int = 0,
    ) -> None:
        super().__init__(layout, workload, seed, nr_vcpus)
        if smi_every < 0 or (smi_every and not self.vm.memslots(1)):
            raise ValueError(
                f"SMIs every {smi_every} accesses need a guest with SMRAM (address space 1"
                " memslots, e.g. --layout q35-16g)"
            )
        self.smi_every = smi_every
        self.mmu = TdpMmu(self.vm, SPTE_CONFIGS[spte_config], params)
        #: a printer's fast paths beside its `raw_listener` (values, no fields): the
        #: common fault's three events (`TdpMmu._common`) and a VM exit's `kvm_page_fault`
        #: (vcpu_id, fault_address, error_code); used only while the raw listener is
        #: what the MMU calls (no Event listener, no `_observe`)
        self.common_listener: CommonListener | None = None
        self.fault_listener: Callable[[int, int, int], None] | None = None
        self._fault_line: Callable[[int, int, int], None] | None = None
        self._listeners_changed()
        self.set_up_guest(seed)
        self._race_rng = random.Random(seed ^ 0xACE)
        self.race_rate = race_rate
        self._racing: TdpAccess | None = None
        self.walk_cache = walk_cache
        #: where the CPU's walks of each root (by seq) ended, per 2M region: the entries of
        #: the page table read last and the index in it (-1 in a 4K table: gfn & 511).
        #: While no table was linked or taken out since (`_memos_checked`), a walk of the
        #: same root ends there again.
        #: Model-only, a memo of `last_spte` (`walk_cache=False`: walk from the root).
        self._walks: dict[int, dict[int, tuple[list[int], int]]] = {}
        self._memo_changes = -1

    # -- the workload -------------------------------------------------------------------

    def next_access(self) -> TdpAccess:
        return self.draw_access(TdpAccess)

    def kvm_smm_changed(self, vcpu: int) -> str:
        """An SMI (enter_smm) or RSM for `vcpu`: `kvm_smm_transition`, HF_SMM_MASK (its
        memslots become address space 1's, `kvm_arch_vcpu_memslots_id`), and
        `kvm_mmu_reset_context`, so its next entry loads a root with `role.smm`
        (arch/x86/kvm/smm.c `kvm_smm_changed`, ≈6.10)."""
        state = self.vm.vcpu(vcpu)
        entering = not state.as_id
        self._vcpu = vcpu
        self._emit("kvm_smm_transition", vcpu_id=vcpu, entering=entering, smbase=SMBASE)
        state.as_id = 1 if entering else 0
        self.mmu.kvm_mmu_unload(vcpu)
        return f"vcpu {vcpu} {'entered' if entering else 'left'} SMM"

    # -- running ------------------------------------------------------------------------

    def _listeners_changed(self) -> None:
        """The MMU hands its names and fields to `fields_listener()` (None, bare mode:
        no event is built while nobody listens), and to the printer's fast paths while
        that is the raw listener."""
        mmu = self.mmu
        mmu._listener = self.fields_listener()
        raw = mmu._listener is not None and mmu._listener is self._raw
        mmu._common = self.common_listener if raw else None
        self._fault_line = self.fault_listener if raw else None

    def _tick(self) -> None:
        """Guest time moves on: RCU callbacks whose grace period ended run, and the NX
        recovery worker wakes when its period is up."""
        now = self.steps * ACCESS_NS
        mmu = self.mmu
        mmu.now_ns = now
        if mmu.pages.rcu_pending:
            mmu.pages.rcu_advance(now)
        if 0 <= self._next_recovery <= now:
            mmu.kvm_recover_nx_huge_pages()
            self._next_recovery = now + mmu.params.recovery_period_ns

    def step(self) -> TdpStep:
        return self._steps(1)

    def run(self, count: int) -> TdpStep | None:
        """`count` steps, exactly as `step()` that often (tests compare the two); the last."""
        return self._steps(count) if count > 0 else None

    def _steps(self, count: int) -> TdpStep:
        """`count` steps.  Each: time moves on (`_tick`), the workload's update, an SMI,
        the next access (`next_access`'s draws, made inline: `random.choice`/`randrange`
        are `_randbelow(n)`, i.e. `getrandbits(n.bit_length())` until below n), the vCPU's
        `kvm_mmu_reload()`, and the CPU's walk of its root (`needs_exit`, inline); only an
        access that exits builds its `TdpAccess` and takes `_exit`.  Between two accesses
        that have anything but the walk to do (`_due`), the accesses run as the hardware
        runs them (`_hits`): no exit, no kernel code."""
        steps, end = self.steps, self.steps + count
        update_at = exit_at = -1
        update, ret, fast = "", None, ""
        access = (0, 0, False, False)
        ram = self._ram_draws()
        while steps < end:
            note = self._due(steps)
            if note is not None:
                update, update_at, ram = note, steps, self._ram_draws()
            self._reload_root(steps)
            done, access, exited = self._hits(steps, self._next_due(steps, end), ram)
            if exited is not None:
                exit_at, ret, fast = exited
            self._vcpu = (done - 1) % self.nr_vcpus  # the stamp of what comes next
            steps = done
        last = end - 1
        self.steps, self._vcpu, self.mmu.now_ns = end, last % self.nr_vcpus, last * ACCESS_NS
        if exit_at != last:
            ret, fast = None, ""
        return TdpStep(
            TdpAccess(*access), exit_at == last, ret, update if update_at == last else "", fast
        )

    def _due(self, steps: int) -> str | None:
        """What comes before access `steps` besides the access: time (`_tick`, when an
        RCU grace period ends or the NX recovery worker wakes), the workload's memslot
        update, an SMI or RSM; the update's words (None: no update was due)."""
        self.steps = steps
        now = self.mmu.now_ns = steps * ACCESS_NS
        if steps >= self._tick_step():
            self._tick()
        note = None
        every = self._update_every()
        if every and not steps % every:
            note = workload_update(self)
        smi_half = max(1, self.smi_every // 2) if self.smi_every else 0
        if smi_half and steps and not steps % smi_half:
            note = self.kvm_smm_changed(self.nr_vcpus - 1)
        self.mmu.now_ns = now
        return note

    def _next_due(self, steps: int, end: int) -> int:
        """The first access after `steps` (at most `end`) that has something `_due`."""
        stop = min(end, self._tick_step())
        every = self._update_every()
        if every:
            stop = min(stop, (steps // every + 1) * every)
        smi_half = max(1, self.smi_every // 2) if self.smi_every else 0
        if smi_half:
            stop = min(stop, (steps // smi_half + 1) * smi_half)
        return max(stop, steps + 1)

    def _update_every(self) -> int:
        workload = self.workload
        if workload == "migrate":
            return GET_DIRTY_EVERY
        return CHURN_EVERY if workload == "churn" else DIRTY_EVERY if workload == "dirty" else 0

    def _tick_step(self) -> int:
        """The first access at which `_tick` has work: an RCU-pending page table's grace
        period ends (`rcu_pending` is in call_rcu order), or the NX recovery worker wakes."""
        due = self._next_recovery
        pending = self.mmu.pages.rcu_pending
        if pending:
            first = next(iter(pending.values())).rcu_queued_ns + RCU_GRACE_PERIOD_NS
            due = first if due < 0 else min(due, first)
        return -(-due // ACCESS_NS) if due >= 0 else sys.maxsize

    def _reload_root(self, steps: int) -> None:
        """`kvm_mmu_reload()` before access `steps`: a new root when the vCPU has none or
        its root is invalid (its events stamped with the access)."""
        vcpu = steps % self.nr_vcpus
        root = self.mmu.roots.get(vcpu)
        if root is None or root.role.invalid:
            self.steps, self._vcpu, self.mmu.now_ns = steps + 1, vcpu, steps * ACCESS_NS
            self.mmu.root(vcpu)

    def _hits(
        self, steps: int, stop: int, ram: list[tuple[int, int, int]]
    ) -> tuple[int, tuple[int, int, bool, bool], tuple[int, RetPf, str] | None]:
        """Accesses `steps` up to `stop`, as the CPU runs them (`tdp_cpu.cpu_run`)."""
        return cpu_run(self, steps, stop, ram)

    def _memos_checked(self) -> int:
        """The walks' memos (`_walks`), dropped when a page table was linked or taken out
        since they were made (`paging_changes`): then an spte a walk ended at may point to
        a table now, or the table it was read from may be RCU pending."""
        changes = self.mmu.pages.paging_changes
        if changes != self._memo_changes:
            self._memo_changes = changes
            for memo in self._walks.values():
                memo.clear()
        return changes

    def _vcpu_roots(
        self,
    ) -> tuple[list[TdpMmuPage | None], list[dict[int, tuple[list[int], int]]]]:
        """Each vCPU's valid root (None: it needs `kvm_mmu_reload()`) and its walk memo."""
        roots: list[TdpMmuPage | None] = []
        walks: list[dict[int, tuple[list[int], int]]] = []
        for vcpu in range(self.nr_vcpus):
            root = self.mmu.roots.get(vcpu)
            valid = root is not None and not root.role.invalid
            roots.append(root if valid else None)
            walks.append(self._walks_of(root) if valid and root is not None else {})
        return roots, walks

    def _walks_of(self, root: TdpMmuPage) -> dict[int, tuple[list[int], int]]:
        walks = self._walks.get(root.seq)
        if walks is None:  # a new root: the memos of roots freed since go
            live = {r.seq for r in self.mmu.pages.tdp_mmu_roots}
            self._walks = {seq: w for seq, w in self._walks.items() if seq in live}
            walks = self._walks[root.seq] = {}
        return walks

    def _ram_draws(self) -> list[tuple[int, int, int]]:
        """(base_gfn, npages, npages.bit_length()) of each RAM slot `next_access` draws."""
        return [(s.base_gfn, s.npages, s.npages.bit_length()) for s in self._ram]

    def _exit(self, access: TdpAccess, tries: int = MAX_RETRIES) -> RetPf:
        """The VM exit and the faults, again while RET_PF_RETRY leaves it unmapped."""
        ret = RetPf.RETRY
        for _ in range(tries):
            ret = self._fault(access)
            if ret is not RetPf.RETRY or not self.needs_exit(access):
                break
        return ret

    def _fault(self, access: TdpAccess) -> RetPf:
        error_code = (PFERR_WRITE if access.write else 0) | (PFERR_FETCH if access.fetch else 0)
        self._vm_exit(access.vcpu, access.gpa, error_code)
        mmu = self.mmu
        if not self.race_rate:
            return self._result(mmu.page_fault(access.vcpu, access.gpa, access.write, access.fetch))
        self._racing = access
        mmu.race = self._race
        mmu.fast_pf.race = self._fast_race
        try:
            ret = mmu.page_fault(access.vcpu, access.gpa, access.write, access.fetch)
        finally:
            mmu.race = mmu.fast_pf.race = None
            self._racing = None
        return self._result(ret)

    def _race(self, it: TdpIter | None) -> None:
        """Another vCPU faults on the same gfn first (inside the cmpxchg window)."""
        access = self._racing
        if access is None or self.nr_vcpus < 2 or self._race_rng.random() >= self.race_rate:
            return
        other = (access.vcpu + 1) % self.nr_vcpus
        self._racing, self._vcpu = None, other
        try:
            self._vm_exit(other, access.gpa, PFERR_WRITE if access.write else 0)
            self.mmu.page_fault(other, access.gpa, access.write, access.fetch)
        finally:
            self._vcpu = access.vcpu

    def _fast_race(self, sp: KvmMmuPage, index: int) -> None:
        """Another vCPU faults on the same gfn inside the fast path's cmpxchg window."""
        self._race(None)

    def zap(self, kind: str) -> int:
        """`fast`: kvm_mmu_zap_all_fast; `roots`: only invalidate and zap the roots (no
        generation flip, no tracepoint); `slow`: kvm_mmu_zap_all (kvm_tdp_mmu_zap_all,
        mmu_lock held for write).  Page tables freed."""
        mmu = self.mmu
        if kind == "fast":
            return mmu.kvm_mmu_zap_all_fast()
        if kind == "roots":
            mmu.kvm_tdp_mmu_invalidate_all_roots()
            return mmu.kvm_tdp_mmu_zap_invalidated_roots()
        if kind == "slow":
            return mmu.kvm_tdp_mmu_zap_all()
        raise ValueError(f"unknown zap {kind!r}: one of {', '.join(ZAP_KINDS)}")

    # -- the CPU's walk -------------------------------------------------------------------

    def needs_exit(self, access: TdpAccess) -> bool:
        """True unless the vCPU's valid root maps the gfn with a leaf allowing the access."""
        root = self.mmu.roots.get(access.vcpu)
        if root is None or root.role.invalid:
            return True
        sp, index = self.mmu.last_spte(root, access.gpa >> PAGE_SHIFT)
        spte = sp.spt[index]
        if not spte & SPTE_MMU_PRESENT_MASK:
            return True  # not present, or an MMIO spte (never MMU-present)
        if access.write and not spte & PT_WRITABLE_MASK:
            return True
        if not access.write and not access.fetch and not spte & PT_PRESENT_MASK:
            return True  # an access-tracked spte (RWX cleared)
        return access.fetch and not is_executable_pte(self.mmu.cfg, spte)

    def leaf_spte(self, vcpu: int, gfn: int) -> int:
        root = self._live_root(vcpu)
        if root is None:
            return 0
        assert isinstance(root, TdpMmuPage)
        sp, index = self.mmu.last_spte(root, gfn)
        return sp.spt[index]

    def _live_root(self, vcpu: int) -> KvmMmuPage | None:
        root = self.mmu.roots.get(vcpu)
        return None if root is None or root.role.invalid else root

    def _leaf(self, vcpu: int, number: int) -> tuple[KvmMmuPage, int] | None:
        root = self._live_root(vcpu)
        if root is None:
            return None
        assert isinstance(root, TdpMmuPage)
        return self.mmu.last_spte(root, number)

    def _path(self, vcpu: int, number: int) -> list[tuple[KvmMmuPage, int]]:
        root = self.mmu.roots.get(vcpu)
        if root is None:
            return []
        path: list[tuple[KvmMmuPage, int]] = []
        sp: KvmMmuPage | None = root
        while sp is not None:
            index = (number >> (9 * (sp.role.level - 1))) & 511
            path.append((sp, index))
            sp = self.mmu.pages.child_at(sp, index)
        return path

    def path_of(self, step: TdpStep) -> list[tuple[KvmMmuPage, int]]:
        return self._path(step.access.vcpu, step.access.gpa >> PAGE_SHIFT)

    def audit(self) -> None:
        self.mmu.audit()
        self.vm.audit()
