"""The TLB flush model's invariants, checked after any event (like KVM's old mmu audit).

* time: no event is scheduled before `now`;
* pCPUs: each runs at most one vCPU, and a running vCPU runs on its own pCPU;
* vCPUs: each is in exactly one visible state, its state times add up to `now`, only a
  running vCPU is in guest mode, only the patch's `halt()` blocks one, and a spinning
  or halted vCPU owns the flush in its sender slot;
* flushes: every target in a mask belongs to the sender's VM, is not the sender, and
  owes an IPI that is on the wire or pending in its APIC; the reverse index `in_masks`
  matches the masks; KVM_VCPU_FLUSH_TLB is set only with KVM_VCPU_PREEMPTED;
* protocols: with `flush_on_enter` a sender in guest mode never waits on a preempted
  target; only `pv_flush` returns from a flush before every target acknowledged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import AuditError
from .vcpu import BLOCKED, HALT, RUNNING, SPIN, WORK, VCpu

if TYPE_CHECKING:
    from .sim import TlbSim


def audit_sim(sim: TlbSim) -> None:
    if sim.next_event_at is not None and sim.next_event_at < sim.now:
        raise AuditError(f"an event at {sim.next_event_at} is older than now ({sim.now})")
    _audit_pcpus(sim)
    for v in sim.vcpus:
        _audit_vcpu(sim, v)
    _audit_flushes(sim)
    sim.sched.audit()
    if not sim.protocol.halt_after_spin and sim.counters.early_returns:
        raise AuditError(f"{sim.protocol.name} returned from a flush before every ack")


def _audit_pcpus(sim: TlbSim) -> None:
    running: dict[int, VCpu] = {}
    for v in sim.vcpus:
        if v.host == RUNNING:
            if v.pcpu in running:
                raise AuditError(f"pCPU {v.pcpu} runs {running[v.pcpu].name} and {v.name}")
            running[v.pcpu] = v
    for rq in sim.sched.rqs:
        if running.get(rq.pcpu) is not rq.curr:
            raise AuditError(f"pCPU {rq.pcpu}: the scheduler and the vCPUs disagree")


def _audit_vcpu(sim: TlbSim, v: VCpu) -> None:
    if v.vis != v.visible:
        raise AuditError(f"{v.name} is drawn in state {v.vis} but is in {v.visible}")
    if sum(v.time_in_states(sim.now)) != sim.now:
        raise AuditError(f"{v.name}: its state times do not add up to now")
    if v.entered and v.host != RUNNING:
        raise AuditError(f"{v.name} is in guest mode without a pCPU")
    if v.host == BLOCKED and v.mode != HALT:
        raise AuditError(f"{v.name} is blocked outside the patch's halt()")
    if v.mode == WORK:
        if v.flush is not None:
            raise AuditError(f"{v.name} works with a flush in progress")
    elif v.flush is None or sim.slots.get(v.gid) is not v.flush:
        raise AuditError(f"{v.name} waits in a flush it does not own")
    if v.mode == HALT and not sim.protocol.halt_after_spin:
        raise AuditError(f"{v.name} halted under {sim.protocol.name}")
    if v.st_flush and not v.st_preempted:
        raise AuditError(f"{v.name}: KVM_VCPU_FLUSH_TLB without KVM_VCPU_PREEMPTED")
    if v.st_flush and not sim.protocol.flag_preempted:
        raise AuditError(f"{v.name}: a flush-on-enter flag under {sim.protocol.name}")
    for sender in v.in_masks:
        f = sim.slots.get(sender)
        if f is None or v.gid not in f.mask:
            raise AuditError(f"{v.name} thinks vCPU {sender}'s mask holds it")
    if v.pending and v.entered:
        raise AuditError(f"{v.name} runs guest code with interrupts pending")


def _audit_flushes(sim: TlbSim) -> None:
    n = sim.cfg.vcpus_per_vm
    for sender, f in sim.slots.items():
        s = sim.vcpus[sender]
        if f.sender != sender or f.vm != s.vm:
            raise AuditError(f"flush {f.fid} sits in the wrong slot")
        for gid in f.mask:
            t = sim.vcpus[gid]
            if gid == sender or gid // n != s.vm:
                raise AuditError(f"flush {f.fid} targets {t.name} outside its VM")
            if sender not in t.in_masks:
                raise AuditError(f"flush {f.fid}: {t.name} misses its reverse index")
            if sender not in t.pending and not sim.inflight.get((gid, sender)):
                raise AuditError(f"flush {f.fid} waits on {t.name}, which got no IPI")
        if f.in_progress and s.flush is not f:
            raise AuditError(f"flush {f.fid} is in progress but its sender moved on")
        if sim.protocol.flag_preempted and s.entered and s.mode == SPIN:
            late = [g for g in f.mask if sim.vcpus[g].st_preempted]
            if late:
                raise AuditError(f"flush_on_enter: {s.name} waits on preempted {late}")
