"""What the two running guests under EPT/NPT share: `MmuSession` on the older direct MMU
(tdp_mmu=N) and `TdpSession` on the TDP MMU (tdp_mmu=Y, today's default).

Both draw the same guest accesses for the same seed (so a run on either MMU can be
compared access by access) and make the same memslot updates:
- `kernbench`: RAM accesses across the RAM slots (`random.choice` of a slot, then
  `randrange` of its pages), 30% of them writes; a tenth of the reads are instruction
  fetches, drawn from a second generator (`seed ^ FETCH_SEED`) so that the accesses are
  those of before fetches existed;
- `netperf`: 70% MMIO stores, to an emulated NIC's doorbell (80%) or the LAPIC's EOI;
- `churn`: kernbench plus a 1 MiB BAR-like slot created and deleted every `CHURN_EVERY`
  accesses (`churn_update`: generations advance, DELETE zaps);
- `dirty`: kernbench with dirty logging toggled on the largest RAM slot every
  `DIRTY_EVERY` accesses;
- `migrate`: a live migration's dirty logging passes (`FastPathControls`).
`set_up_guest()` is the part of both constructors after the MMU is made: the RAM slots
the draws choose from, dirty logging, the fetch generator and the NX recovery worker's
first wake-up (`recovery_period_ns` of guest time).  The shadow-paging session
(`ShadowSession`, guest processes) shares only `churn_update` and the MMIO addresses.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ...errors import KvmError
from ...memslots.vm import Vm
from ..dirty_log import DirtyLogging
from .fast import FastPathControls
from .session import FETCH_RATE, GuestSession, StepT

if TYPE_CHECKING:
    from ..direct.mmu import DirectMmu
    from ..tdp.mmu import TdpMmu

PAGE_SHIFT = 12
CHURN_EVERY = 50
CHURN_SLOT = 500  # the slot id the churn workload creates and deletes
NIC_DOORBELL, LAPIC_EOI = 0xFEBF_1000, 0xFEE0_00B0
DIRTY_EVERY = 400  # the dirty workload toggles dirty logging this often
EPT_WORKLOADS = ("kernbench", "netperf", "churn", "dirty", "migrate")
FETCH_SEED = 0x7D9  # the fetch generator's seed is the session's seed ^ this


AccessT = TypeVar("AccessT")


class EptSession(GuestSession[StepT], FastPathControls):
    """The workloads of a guest whose MMU maps guest-physical addresses (EPT/NPT)."""

    workloads = EPT_WORKLOADS
    mmu: DirectMmu | TdpMmu  # type: ignore[assignment]  # both read like RootedMmu

    def set_up_guest(self, seed: int) -> None:
        """After `self.mmu` is made: what the draws and the workloads' updates use."""
        self._ram = [s for s in self.vm.memslots(0) if not s.readonly]
        self.dirty_log = DirtyLogging(self.mmu)
        self._fetch_rng = random.Random(seed ^ FETCH_SEED)
        period = self.mmu.params.recovery_period_ns
        self._next_recovery = period if period else -1

    def draw_access(self, access: Callable[[int, int, bool, bool], AccessT]) -> AccessT:
        """The next access of the workload (its random draws), as `access(vcpu, gpa,
        write, fetch)`."""
        rng = self._rng
        vcpu = self.steps % self.nr_vcpus
        if self.workload == "netperf" and rng.random() < 0.7:
            gpa = NIC_DOORBELL if rng.random() < 0.8 else LAPIC_EOI
            return access(vcpu, gpa, True, False)
        hot = self.hot_access(rng) if self.workload == "migrate" else None
        if hot is not None:
            return access(vcpu, hot[0] << PAGE_SHIFT, hot[1], False)
        slot = rng.choice(self._ram)
        gfn = slot.base_gfn + rng.randrange(slot.npages)
        write = rng.random() < 0.3
        fetch = not write and self._fetch_rng.random() < FETCH_RATE
        return access(vcpu, gfn << PAGE_SHIFT, write, fetch)

    def set_workload(self, workload: str) -> None:
        self.check_workload(workload)
        self.workload = workload


def workload_update(session: FastPathControls) -> str:
    """The workload's memslot update before access `session.steps`, if any, for both MMUs
    with a fast path (`MmuSession`, `TdpSession`): churn's BAR, dirty's logging toggle,
    migrate's KVM_GET_DIRTY_LOG passes."""
    workload, steps = session.workload, session.steps
    if workload == "churn" and not steps % CHURN_EVERY:
        return churn_update(session.vm)
    if workload == "dirty" and steps and not steps % DIRTY_EVERY:
        return session.toggle_dirty_logging()
    return session.migrate_update(steps) if workload == "migrate" else ""


def churn_update(vm: Vm) -> str:
    """The churn workload's memslot update: create a 1 MiB BAR-like slot, or delete it."""
    exists = vm.slot(0, CHURN_SLOT) is not None
    try:
        if exists:
            vm.set_user_memory_region(CHURN_SLOT, 0, 0, 0, 0)
            return "delete"
        vm.set_user_memory_region(CHURN_SLOT, 0, 0xFD00_0000, 1 << 20, 0x7E00_0000_0000)
        return "create"
    except KvmError as err:  # a layout that already uses that range
        return f"refused: {err.errno_name}"
