"""A running guest on the TDP MMU (EPT/NPT, tdp_mmu=Y: the default, 6.18): workloads,
exits, faults, zaps, RCU grace periods, NX huge page recovery, and events.

The same guest accesses as `MmuSession` for the same seed (the same random draws), so a
run on the TDP MMU and one on the older direct MMU (`tdp_mmu=N`) can be compared access
by access; instruction fetches (kernbench's code, 1 in 10) come from a second generator,
and only matter under the NX huge page mitigation.  Workloads:
- `kernbench`, `netperf`, `churn`: as on `MmuSession`;
- `dirty`: kernbench, with dirty logging turned on for the largest RAM slot every
  `DIRTY_EVERY` accesses and off again the next time (eager page split and write
  protection when it starts, huge pages collapsing back when it stops);
- `balloon`: kernbench while a virtio balloon gives pages back to the host every
  `BALLOON_EVERY` accesses (guest/balloon.py, mmu_notifier.py);
- `migrate`: dirty logging passes over a working set (`EptSession.migrate_update`; `dirty_log`
  the mode, legacy, manual protect or the dirty ring, dirty_log.py): with PML
  (`params.enable_pml`, EPT with A/D bits) the CPU sets D bits and logs the writes
  (`CpuWalks.sets_dirty`, no exit), without it (enable_pml=0, eptad=0, NPT)
  `fast_page_fault()` fixes the write-protected sptes.
An access exits when the CPU's walk of the vCPU's root finds no leaf that allows it (not
present, MMIO, not writable for a write, not executable for a fetch: cpu.py); the exit is
the fault path's, `TdpMmu.page_fault`.  A fault that returns RET_PF_RETRY lets the vCPU
run again, and it faults again if it must.
`smi_every` sends the last vCPU an SMI every that many accesses; it leaves SMM (RSM) half
way to the next, so its accesses run in address space 1 (SMRAM) on a root of its own.
`race_rate` makes another vCPU fault on the same gfn inside the spte's cmpxchg window
that often, so `tdp_mmu_set_spte_atomic` loses the race (tests, and the screen's races).
"""

from __future__ import annotations

import random
import sys
from typing import NamedTuple

from ...layouts.layout import Layout
from ...memslots.memslot import MemorySlot
from ..fast_pf import fast_words
from ..guest.balloon import BALLOON_EVERY
from ..guest.ept import (
    CHURN_EVERY,
    DIRTY_EVERY,
    EPT_WORKLOADS,
    GET_DIRTY_EVERY,
    Access,
    EptAccess,
    EptSession,
    workload_update,
)
from ..guest.session import ACCESS_NS
from ..mmu_pages import KvmMmuPage
from ..params import TdpMmuParams
from ..spte import RET_PF_RETRY, RetPf, SpteConfig, spte_config_named
from .cpu import CpuWalks
from .iter import TdpIter
from .mmu import TdpMmu
from .pages import RCU_GRACE_PERIOD_NS, TdpMmuPage

PAGE_SHIFT = 12
MAX_RETRIES = 4  # faults of one access while RET_PF_RETRY leaves it unmapped (model-only)
TDP_WORKLOADS = EPT_WORKLOADS
ZAP_KINDS = ("fast", "slow", "roots")
SMBASE = 0x30000  # the default SMBASE (SDM: SMRAM at 0x30000 + 0x8000 entry)
Exited = tuple[int, RetPf | None, str]  # an exit: the access's number, RET_PF_*, fast_words


class TdpStep(NamedTuple):
    access: EptAccess
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
        spte_config: str | SpteConfig = "ept",
        params: TdpMmuParams | None = None,
        race_rate: float = 0.0,
        smi_every: int = 0,
        dirty_log: str = "legacy",
        dirty_ring: int | None = None,
    ) -> None:
        super().__init__(layout, workload, seed, nr_vcpus)
        if smi_every < 0 or (smi_every and not self.vm.memslots(1)):
            raise ValueError(
                f"SMIs every {smi_every} accesses need a guest with SMRAM (address space 1"
                " memslots, e.g. --layout q35-16g)"
            )
        self.smi_every = smi_every
        self.mmu = TdpMmu(self.vm, spte_config_named(spte_config), params, host_seed=seed)
        self.cpu = CpuWalks(self.mmu)  # the hardware's walks of the vCPUs' roots
        self._listeners_changed()
        self.set_up_guest(seed, dirty_log, dirty_ring)
        self._race_rng = random.Random(seed ^ 0xACE)
        self.race_rate = race_rate
        self._racing: EptAccess | None = None

    # -- the workload -------------------------------------------------------------------

    def kvm_smm_changed(self, vcpu: int) -> str:
        """An SMI (enter_smm) or RSM for `vcpu`: `kvm_smm_transition`, HF_SMM_MASK (its
        memslots become address space 1's, `kvm_arch_vcpu_memslots_id`), and
        `kvm_mmu_reset_context`, so its next entry loads a root with `role.smm`
        (6.18 arch/x86/kvm/smm.c `kvm_smm_changed`)."""
        state = self.vm.vcpu(vcpu)
        entering = not state.as_id
        self.vcpu = vcpu
        self._emit("kvm_smm_transition", vcpu_id=vcpu, entering=entering, smbase=SMBASE)
        state.as_id = 1 if entering else 0
        self.mmu.kvm_mmu_unload(vcpu)
        return f"vcpu {vcpu} {'entered' if entering else 'left'} SMM"

    # -- running ------------------------------------------------------------------------

    def _listeners_changed(self) -> None:
        """The MMU hands its names and fields where the session's own go
        (`fields_listener()`; None, bare mode: no event is built while nobody listens)."""
        super()._listeners_changed()
        self.mmu._listener = self._fields

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

    def access(self, vcpu: int, gpa: int, write: bool = False, fetch: bool = False) -> None:
        """One guest access of the caller's choosing (not the workload's), run as the
        workload's are (`_run`): the CPU's walk, else the exit and the fault."""
        self._run([(vcpu, gpa, write, fetch)])

    def _steps(self, count: int) -> TdpStep:
        """`count` accesses: before one that has something due (`_due`: time, the
        workload's update, an SMI), that; up to the next, the workload's accesses, drawn
        at once (`draws`) and run as the CPU runs them (`_run`)."""
        end = self.steps + count
        due = self.steps  # the first access of a run looks
        update, update_at = "", -1
        exited: Exited | None = None
        accesses: list[Access] = []
        while self.steps < end:
            at = self.steps
            if at >= due:
                note = self._due(at)
                if note is not None:
                    update, update_at = note, at
                due = self._next_due(at)
            accesses = self.draws(at, min(due, end))
            exited = self._run(accesses) or exited
        last = end - 1
        self.mmu.now_ns = last * ACCESS_NS
        access = EptAccess(*accesses[-1])
        if exited is None or exited[0] != last:
            return TdpStep(access, False, None, update if update_at == last else "")
        return TdpStep(access, True, exited[1], update if update_at == last else "", exited[2])

    def _run(self, accesses: list[Access]) -> Exited | None:
        """The accesses from `steps` on, as the CPU runs them (`CpuWalks.first_exit`) up to
        one it does not let through: at its VM entry a vCPU without a valid root loads one
        (`kvm_mmu_reload()`), else it exits into the fault path (`_exit`); then on after
        it.  Time moves on where it is due (`_tick`: a fault that freed page tables makes
        an RCU grace period end sooner).  The last exit: (access, RET_PF_*, what
        fast_page_fault did)."""
        first, exited = self.steps, None
        index = 0
        while True:
            stop = min(len(accesses), max(index, self._tick_step() - first))
            index = self.cpu.first_exit(accesses, index, stop)
            if index:
                self.steps, self.vcpu = first + index, accesses[index - 1][0]
            if index == len(accesses):
                return exited
            if index == stop:
                self._due(first + index)  # time only: updates and SMIs end a draw
                continue
            vcpu, gpa, write, fetch = accesses[index]
            self.steps, self.vcpu = first + index + 1, vcpu  # the stamp of its events
            self.mmu.now_ns = (first + index) * ACCESS_NS
            root = self.mmu.roots.get(vcpu)
            if root is None or root.role.invalid:
                self.mmu.root(vcpu)  # kvm_mmu_load(); the access runs on the new root
                continue
            if write and self.cpu.sets_dirty(root, gpa >> PAGE_SHIFT):  # no exit: PML
                self.dirty_log.cpu_sets_dirty(self._slot_of(vcpu, gpa), gpa >> PAGE_SHIFT)
                self.dirty_ring_exit(vcpu)  # the PML-full exit's entry (a ring, soft full)
                index += 1
                continue
            access = EptAccess(vcpu, gpa, write, fetch)
            exited = (first + index, *self._exit(access, self.cpu.exit_spte))
            index += 1

    def _slot_of(self, vcpu: int, gpa: int) -> MemorySlot | None:
        """The slot of a gpa the CPU wrote (the tree itself: no lookup counted)."""
        as_id = self.vm.vcpu(vcpu).as_id
        return self.vm.memslot_set(as_id).gfn_tree.search(gpa >> PAGE_SHIFT)

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

    def _next_due(self, steps: int) -> int:
        """The first access after `steps` that has something `_due`."""
        stop = self._tick_step()
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
        if workload == "balloon":
            return BALLOON_EVERY
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

    def _exit(self, access: EptAccess, spte: int) -> tuple[RetPf | None, str]:
        """The VM exit on `spte` (where the CPU's walk ended) and the faults, again while
        RET_PF_RETRY leaves it unmapped; the last RET_PF_* (None: the exit's handler took
        the store, `ept_exit`) and what fast_page_fault did (`fast_words`, when it fixed
        it)."""
        mmu = self.mmu
        fixed_fast = mmu.stat["pf_fast"]
        ret: RetPf | None = RET_PF_RETRY
        for retry in range(MAX_RETRIES):
            ret = self._fault(access, None if retry else spte)  # a retry walks again
            if ret is not RET_PF_RETRY or not self.needs_exit(access):
                break
        if mmu.stat["pf_fast"] == fixed_fast:
            return ret, ""
        return ret, fast_words(mmu.cfg, mmu.fast_pf.last)

    def _fault(self, access: EptAccess, spte: int | None = None) -> RetPf | None:
        """One exit of the access (on `spte`, when the caller's walk just read it):
        `ept_exit`, `kvm_mmu_page_fault()`, the next entry."""
        error_code = self.ept_exit(access.vcpu, access.gpa, access.write, access.fetch, spte)
        if error_code is None:
            return None
        mmu, vcpu, gpa = self.mmu, access.vcpu, access.gpa
        if not self.race_rate:
            ret = self._result(mmu.page_fault(vcpu, gpa, access.write, access.fetch, error_code))
            self.vm_entry(vcpu, ret)
            return ret
        self._racing = access
        mmu.race = self._race
        mmu.fast_pf.race = self._fast_race
        try:
            ret = mmu.page_fault(vcpu, gpa, access.write, access.fetch, error_code)
        finally:
            mmu.race = mmu.fast_pf.race = None
            self._racing = None
        self.vm_entry(access.vcpu, ret)
        return self._result(ret)

    def _race(self, it: TdpIter | None) -> None:
        """Another vCPU faults on the same gfn first (inside the cmpxchg window)."""
        access = self._racing
        if access is None or self.nr_vcpus < 2 or self._race_rng.random() >= self.race_rate:
            return
        other = (access.vcpu + 1) % self.nr_vcpus
        self._racing, self.vcpu = None, other
        try:
            code = self.ept_exit(other, access.gpa, access.write, access.fetch)
            if code is not None:
                ret = self.mmu.page_fault(other, access.gpa, access.write, access.fetch, code)
                self.vm_entry(other, ret)
        finally:
            self.vcpu = access.vcpu

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

    def needs_exit(self, access: EptAccess) -> bool:
        """True unless the vCPU's valid root maps the gfn with a leaf allowing the access."""
        root = self.mmu.roots.get(access.vcpu)
        if root is None or root.role.invalid:
            return True
        spte = self.cpu.leaf_spte(root, access.gpa >> PAGE_SHIFT)
        return not self.cpu.allows(spte, access.write, access.fetch)

    def leaf_spte(self, vcpu: int, gfn: int) -> int:
        """The spte the CPU's walk of the vCPU's valid root ends at (0 without one): the
        walk `CpuWalks` remembers, the one that just made the access exit."""
        root = self.mmu.roots.get(vcpu)
        if root is None or root.role.invalid:
            return 0
        return self.cpu.leaf_spte(root, gfn)

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
        self.notifier.audit()
        self.dirty_log.audit()
