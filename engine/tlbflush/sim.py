"""A deterministic discrete-event simulation of remote TLB flushes in overcommitted KVM
guests (the PV-flush thread: ebizzy in 2, 4 and 8 VMs of 8 vCPUs on 8 pCPUs).

The host side (scheduler.py) runs the vCPU threads; this module is the rest: VM entry
(the steal-time byte read by `record_steal_time()`, then the interrupts pending in the
local APIC), VM exits on preemption (`kvm_steal_time_set_preempted()`) and on HLT, the
IPIs on the wire, and each guest's ebizzy threads (one per vCPU) with their flushes: a
record's work, then the munmap under the VM's mmap_sem held for write and its flush, then
the next record's refault under the read lock (mmap_sem.py).  A thread that must wait
sleeps; its vCPU idles in HLT until an IPI wakes it (a flush IPI, or the reschedule IPI of
`wake_up_process()` when the semaphore is handed to it).  A flush targets the VM's vCPUs
in `mm_cpumask` and follows the protocol (protocols.py); each target acknowledges in
`smp_invalidate_interrupt()` as soon as it runs in guest mode, and one idling lazily
leaves the mask (`leave_mm()`).

Events (to `emit`, tracepoint-shaped): `flush_tlb_others_ipi` (2012 kernel) or
`kvm_flush_tlb_multi` (today's, for flush_on_enter), `smp_invalidate_interrupt`,
`kvm_apic_accept_irq` (an IPI reaches the target's APIC; apicid = vcpu_id),
`kvm_kick_cpu`, `kvm_pv_tlb_flush` (vcpu_id, need_flush_tlb: the host tracepoint of
arch/x86/kvm/trace.h), `kvm_exit` (reason HLT), `kvm_vcpu_wakeup`, `kvm_entry` and
`sched_switch` (not when the pCPU picks the vCPU it ran last: the kernel has no switch to
itself).  The guest's events, and the host's with fields the kernel's record lacks
(`sched_switch` without pids, `kvm_apic_accept_irq` with sender and running,
`kvm_vcpu_wakeup` with the reason), are the model's own (engine.events, marked `*`).
With `trace_vm` set, only that VM's events are emitted and its flushes keep the time and
manner of every acknowledgement (for the TLB screen).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import AuditError
from ..events import Event, FieldValue
from .config import NS_PER_S, NS_PER_US, TlbConfig
from .metrics import TlbMetrics
from .mmap_sem import MmapSem
from .protocols import protocol
from .scheduler import EV_BALANCE, EV_SLICE, CfsScheduler, GangScheduler, Scheduler
from .vcpu import (
    BLOCKED,
    HALT,
    IDLE,
    RUNNABLE,
    RUNNING,
    SPIN,
    VIS_HALTED,
    VIS_PREEMPTED,
    VIS_RUNNING,
    VIS_SPINNING,
    WORK,
    Flush,
    VCpu,
)

EV_ENTER, EV_GUEST, EV_IPI, EV_TICK, EV_RESCHED = 1, 2, 3, 4, 5
RECENT_FLUSHES = 256  # flushes of the traced VM kept for the screen


@dataclass(slots=True)
class Counters:
    flushes: int = 0
    ipis: int = 0
    flags: int = 0  # KVM_VCPU_FLUSH_TLB set instead of an IPI
    flushes_on_entry: int = 0
    kicks: int = 0
    halts: int = 0
    early_returns: int = 0  # the patch's halt() returned with targets still in the mask
    waits_on_preempted: int = 0  # flushes that waited on a preempted target
    late_acks: int = 0  # acknowledgements at VM entry (the target was not running)
    idles: int = 0  # a vCPU idled in HLT, its thread asleep on mmap_sem
    wakeups: dict[str, int] = field(
        default_factory=lambda: {"kick": 0, "ipi": 0, "tick": 0, "resched": 0}
    )
    stall_ns: int = 0  # sender time from the flush's start to its return, summed
    stall_max_ns: int = 0
    returned: int = 0
    ack_ns: int = 0  # from the start to the last acknowledgement, summed
    acked: int = 0


class TlbSim:
    """One seeded run; `run_until()` / `step()` advance it, `audit()` checks it."""

    def __init__(
        self,
        config: TlbConfig,
        *,
        emit: Callable[[Event], None] | None = None,
        trace_vm: int | None = None,
    ) -> None:
        self.cfg = config
        self.costs = config.costs
        self.protocol = protocol(config.protocol)
        self.rng = random.Random(config.seed)
        self.now = 0
        self.emit = emit
        self.trace_vm = trace_vm
        self.counters = Counters()
        n = config.vcpus_per_vm
        self.vcpus = [VCpu(vm, i, vm * n + i, pcpu=i) for vm in range(config.vms) for i in range(n)]
        self.sems = [MmapSem(vm) for vm in range(config.vms)]  # each guest's mm->mmap_sem
        self.slots: dict[int, Flush] = {}  # sender gid -> its flush_state slot
        self.inflight: dict[tuple[int, int], int] = {}  # (target, sender) -> IPIs on the wire
        self.recent: deque[Flush] = deque(maxlen=RECENT_FLUSHES)
        self._heap: list[tuple[int, int, int, int, int, int]] = []
        self._seq = 0
        self._fid = 0
        self._last_on: list[str] = ["<idle>"] * config.pcpus
        self.tick_phase = [self.rng.randrange(config.tick_ns) for _ in self.vcpus]
        for v in self.vcpus:  # each thread starts somewhere inside a record,
            v.guest_left = self.rng.randrange(1, config.work_ns)
            v.st_preempted = True  # and every vCPU as if just preempted
        self.sched: Scheduler = (
            GangScheduler(self, config.pcpus, config.vms, self.rng, self.costs.host_tick_ns)
            if self.protocol.gang
            else CfsScheduler(
                self, config.pcpus, self.rng, self.costs.host_tick_ns, config.phase_spread_ns
            )
        )
        self.sched.start()

    # -- the event loop -------------------------------------------------------------------

    def push(self, when: int, kind: int, a: int, b: int, token: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, kind, a, b, token))

    @property
    def next_event_at(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def step(self) -> bool:
        """Handle the next event; False when nothing is left (never, in practice)."""
        if not self._heap:
            return False
        when, _, kind, a, b, token = heapq.heappop(self._heap)
        if when < self.now:
            raise AuditError(f"an event at {when} ns came after {self.now} ns")
        self.now = when
        if kind == EV_GUEST:
            self._on_guest(self.vcpus[a], token)
        elif kind == EV_IPI:
            self._on_ipi(self.vcpus[a], b)
        elif kind == EV_ENTER:
            self._on_enter(self.vcpus[a], token)
        elif kind == EV_SLICE:
            self.sched.slice_end(a, token)
        elif kind == EV_TICK:
            self._on_tick(self.vcpus[a], token)
        elif kind == EV_RESCHED:
            self._on_resched(self.vcpus[a])
        elif kind == EV_BALANCE and isinstance(self.sched, CfsScheduler):
            self.sched.balance()
        return True

    def run_until(self, until: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= until:
            self.step()
        self.now = max(self.now, until)

    def run(self) -> None:
        self.run_until(self.cfg.duration_ns)

    # -- the host: called by the scheduler ---------------------------------------------

    def switch_in(self, v: VCpu) -> None:
        """The scheduler picked `v`: load it and enter the guest after the switch."""
        v.host = RUNNING
        v.entered = False
        v.token += 1
        self.push(self.now + self.costs.context_switch_ns, EV_ENTER, v.gid, 0, v.token)
        prev, self._last_on[v.pcpu] = self._last_on[v.pcpu], v.name
        if prev != v.name:  # `__schedule()` traces a switch only when `prev != next`
            self._emit("sched_switch", {"prev_comm": prev, "next_comm": v.name}, v.vm, v.pcpu)
        self._update_vis(v)

    def deschedule(self, v: VCpu, blocked: bool) -> None:
        """`v` leaves its pCPU: preempted (still runnable) or blocked in a HLT."""
        if v.entered and self._timed(v):
            v.guest_left = max(0, v.done_at - self.now)
        v.entered = False
        v.token += 1
        if blocked:
            v.host = BLOCKED
            self._last_on[v.pcpu] = "<idle>"
        else:
            v.host = RUNNABLE
            v.st_preempted = True  # kvm_steal_time_set_preempted()
            self._target_preempted(v)
        self._update_vis(v)

    # -- VM entry and exit --------------------------------------------------------------

    def _on_enter(self, v: VCpu, token: int) -> None:
        if token != v.token or v.host != RUNNING or v.entered:
            return
        v.entered = True
        cost = 0
        if v.st_preempted:  # record_steal_time(): xchg(&st->preempted, 0)
            flush = v.st_flush
            v.st_preempted = v.st_flush = False
            if self.protocol.flag_preempted:
                self._emit(
                    "kvm_pv_tlb_flush", {"vcpu_id": v.index, "need_flush_tlb": flush}, v.vm, v.pcpu
                )
                if flush:
                    cost += self.costs.flush_on_entry_ns
                    self.counters.flushes_on_entry += 1
        if v.pending:
            cost += self._handle_irqs(v, late=True)
        self._update_vis(v)
        self._emit("kvm_entry", {"vcpu_id": v.index}, v.vm, v.pcpu)
        self._resume(v, self.now + cost)

    def _resume(self, v: VCpu, at: int) -> None:
        """Guest code runs again from `at`: the work, the spin, past the halt, or the idle
        loop, which looks whether mmap_sem was granted (then the thread runs) or halts."""
        if v.mode == WORK:
            self._arm(v, at + v.guest_left)
            return
        if v.mode == IDLE:
            self._arm(v, at)
            return
        f = v.flush
        assert f is not None
        if v.mode == HALT or not f.mask:  # a halt() returned: no second look at the mask
            self._finish_flush(v, at)
        else:
            if self.protocol.flag_preempted:
                self._recheck(v, f)
            if v.flush is f and self.protocol.halt_after_spin:
                self._arm(v, at + v.guest_left)

    def _halt(self, v: VCpu) -> None:
        """The patch's `halt()`: the vCPU blocks until an interrupt or a kick."""
        self.counters.halts += 1
        v.mode = HALT
        v.halt_seq += 1
        v.halted_at = self.now
        self._emit("kvm_exit", {"vcpu_id": v.index, "exit_reason": "HLT"}, v.vm, v.pcpu)
        self.sched.block(v)
        tick, phase = self.cfg.tick_ns, self.tick_phase[v.gid]
        next_tick = phase + ((self.now - phase) // tick + 1) * tick
        self.push(next_tick, EV_TICK, v.gid, 0, v.halt_seq)

    def _on_tick(self, v: VCpu, seq: int) -> None:
        if v.host == BLOCKED and v.mode == HALT and v.halt_seq == seq:
            self._wake(v, "tick")

    def _wake(self, v: VCpu, reason: str) -> None:
        if v.host != BLOCKED:
            return
        self.counters.wakeups[reason] += 1
        v.host = RUNNABLE
        self._emit(
            "kvm_vcpu_wakeup",
            {"vcpu_id": v.index, "ns": self.now - v.halted_at, "waited": True, "reason": reason},
            v.vm,
            v.pcpu,
        )
        self.sched.wake(v)
        self._update_vis(v)

    # -- the guest: ebizzy's records and their flushes -----------------------------------

    def _record_ns(self) -> int:
        jitter = self.cfg.work_jitter
        return int(self.costs.work_ns * self.rng.uniform(1 - jitter, 1 + jitter))

    def _timed(self, v: VCpu) -> bool:
        """Does `v` count down `guest_left` (work, or the patch's spin)?"""
        return v.mode == WORK or (v.mode == SPIN and self.protocol.halt_after_spin)

    def _arm(self, v: VCpu, when: int) -> None:
        v.token += 1
        v.done_at = when
        self.push(when, EV_GUEST, v.gid, 0, v.token)

    def _charge(self, v: VCpu, cost: int) -> None:
        """An interrupt handler or a hypercall took `cost` of the running `v`'s time."""
        if cost and v.entered and self._timed(v):
            self._arm(v, v.done_at + cost)

    def _on_guest(self, v: VCpu, token: int) -> None:
        if token != v.token or not v.entered:
            return
        if v.mode == WORK:
            v.records_all += 1
            if self.now >= self.cfg.warmup_ns:
                v.records += 1
            if self.sems[v.vm].down_write(v.gid):  # munmap: down_write(&mm->mmap_sem)
                self._start_flush(v)
            else:
                self._sleep(v, write=True, at=self.now)
        elif v.mode == IDLE:
            self._idle(v)
        elif v.mode == SPIN and v.flush is not None and v.flush.mask:
            self._halt(v)  # `if (!loop && !cpumask_empty(...)) halt();`

    # -- mmap_sem: the threads that sleep on it, and the idle vCPUs under them ------------

    def _sleep(self, v: VCpu, write: bool, at: int) -> None:
        """`v`'s thread sleeps on mmap_sem; from `at` its vCPU runs the idle loop."""
        v.mode = IDLE
        v.wants_write = write
        v.granted = False
        self._arm(v, at)

    def _idle(self, v: VCpu) -> None:
        """The guest's idle loop on `v`: the thread runs if mmap_sem was granted to it,
        else the vCPU halts (`default_idle()` → HLT; a tickless idle guest sets no timer)
        until an IPI wakes it."""
        if not v.granted:
            self.counters.idles += 1
            self._emit("kvm_exit", {"vcpu_id": v.index, "exit_reason": "HLT"}, v.vm, v.pcpu)
            self.sched.block(v)
            self._update_vis(v)
            return
        v.granted = False
        v.in_mm = True  # switch_mm() back to ebizzy's mm: cpumask_set_cpu(mm_cpumask)
        if v.wants_write:
            self._start_flush(v)
            return
        self._grant(v.vm, self.sems[v.vm].up_read(v.gid))  # the refault done
        v.mode = WORK
        v.guest_left = self._record_ns()
        self._arm(v, self.now + v.guest_left)
        self._update_vis(v)

    def _grant(self, vm: int, gids: list[int]) -> None:
        """`__rwsem_do_wake()` gave mmap_sem to `gids`: `wake_up_process()` sends each
        idle vCPU a reschedule IPI (one ICR write, then the delivery)."""
        for gid in gids:
            t = self.vcpus[gid]
            t.granted = True
            self.push(self.now + 2 * self.costs.exit_ns, EV_RESCHED, gid, 0, 0)

    def _on_resched(self, t: VCpu) -> None:
        if t.host == BLOCKED:
            self._wake(t, "resched")  # kvm_vcpu_kick(): a running one looks at entry

    def _start_flush(self, s: VCpu) -> None:
        """munmap/MADV_DONTNEED: flush the mm on every other vCPU of the VM."""
        self._fid += 1
        n = self.cfg.vcpus_per_vm
        targets = tuple(  # mm_cpumask(mm) but the sender
            g for g in range(s.vm * n, s.vm * n + n) if g != s.gid and self.vcpus[g].in_mm
        )
        old = self.slots.get(s.gid)
        if old is not None and old.mask:  # cpumask_andnot() overwrites the old mask
            old.superseded = True
            for gone in old.mask:
                self.vcpus[gone].in_masks.discard(s.gid)
            old.mask.clear()
        f = Flush(self._fid, s.gid, s.vm, self.now, targets)
        self.slots[s.gid] = f
        if s.vm == self.trace_vm:
            self.recent.append(f)
        s.flushes += 1
        self.counters.flushes += 1
        sent = self.now
        for gid in targets:
            t = self.vcpus[gid]
            if self.protocol.flag_preempted and t.mode == IDLE:
                continue  # today's native_flush_tlb_multi(): a lazy CPU gets no IPI
            if self.protocol.flag_preempted and t.st_preempted:
                self._flag(t, f)
                continue
            f.mask.add(gid)
            f.ipis.append(gid)
            t.in_masks.add(s.gid)
            sent += self.costs.exit_ns  # one ICR write (an exit) per target
            self.counters.ipis += 1
            key = (gid, s.gid)
            self.inflight[key] = self.inflight.get(key, 0) + 1
            self.push(sent + self.costs.exit_ns, EV_IPI, gid, s.gid, f.fid)
            if t.visible == VIS_PREEMPTED:
                self._waited(f)
        s.mode = SPIN
        s.flush = f
        self._emit_flush(s, f)
        if not f.mask:
            self._finish_flush(s, sent)
        elif self.protocol.halt_after_spin:
            s.guest_left = sent - self.now + self.costs.spin_ns
            self._arm(s, self.now + s.guest_left)
        else:
            s.token += 1  # spins until the mask is empty
        self._update_vis(s)

    def _emit_flush(self, s: VCpu, f: Flush) -> None:
        if self.emit is None:
            return
        n = self.cfg.vcpus_per_vm
        name = "kvm_flush_tlb_multi" if self.protocol.flag_preempted else "flush_tlb_others_ipi"
        ipi_mask = sum(1 << (g % n) for g in f.ipis)
        flag_mask = sum(1 << (g % n) for g in f.flagged)
        fields: dict[str, FieldValue] = {"vcpu_id": s.index, "ipi_mask": ipi_mask}
        if self.protocol.flag_preempted:
            fields["flush_on_enter_mask"] = flag_mask
        self._emit(name, fields, s.vm, s.pcpu)

    def _flag(self, t: VCpu, f: Flush) -> None:
        """`try_cmpxchg(&st->preempted, state, state | KVM_VCPU_FLUSH_TLB)`: no IPI."""
        t.flag_sets += not t.st_flush
        t.st_flush = True
        t.flags_received += 1
        f.flagged.append(t.gid)
        self.counters.flags += 1
        if f.vm == self.trace_vm:
            f.acks[t.gid] = (self.now, "flag")

    def _waited(self, f: Flush) -> None:
        if not f.waited_on_preempted:
            f.waited_on_preempted = True
            self.counters.waits_on_preempted += 1

    def _target_preempted(self, v: VCpu) -> None:
        """`v` was just preempted: flag it for senders re-checking their masks
        (flush_on_enter), or note that their flush now waits on a preempted vCPU."""
        for sender in sorted(v.in_masks):
            f = self.slots[sender]
            s = self.vcpus[sender]
            if s.flush is not f:
                continue  # the patch's halt() already returned: nobody waits
            if not self.protocol.flag_preempted:
                self._waited(f)
            elif s.entered:  # a sender not in guest mode re-checks at its entry
                self._unmask(v, f)
                self._flag(v, f)
                if not f.mask:
                    self._mask_empty(f, None)

    def _recheck(self, s: VCpu, f: Flush) -> None:
        """Peter Zijlstra's `goto again`: flag the targets preempted since the IPIs."""
        for gid in sorted(f.mask):
            t = self.vcpus[gid]
            if t.st_preempted:
                self._unmask(t, f)
                self._flag(t, f)
        if not f.mask:
            self._mask_empty(f, None)

    def _unmask(self, t: VCpu, f: Flush) -> None:
        f.mask.discard(t.gid)
        t.in_masks.discard(f.sender)

    def _on_ipi(self, t: VCpu, sender: int) -> None:
        key = (t.gid, sender)
        left = self.inflight[key] - 1
        if left:
            self.inflight[key] = left
        else:
            del self.inflight[key]
        t.pending.add(sender)  # the vector's IRR bit: IPIs of one sender coalesce
        self._emit(
            "kvm_apic_accept_irq",
            {"apicid": t.index, "sender": self.vcpus[sender].index, "running": t.entered},
            t.vm,
            t.pcpu,
        )
        if t.entered:
            self._charge(t, self._handle_irqs(t, late=False))
        elif t.host == BLOCKED:
            self._wake(t, "ipi")  # kvm_vcpu_kick()

    def _handle_irqs(self, t: VCpu, late: bool) -> int:
        """`smp_invalidate_interrupt()` for each pending sender; returns the time taken."""
        cost = 0
        for sender in sorted(t.pending):
            cost += self.costs.handler_ns + self._ack(t, sender, late)
        t.pending.clear()
        return cost

    def _ack(self, t: VCpu, sender: int, late: bool) -> int:
        self._emit(
            "smp_invalidate_interrupt",
            {"vcpu_id": t.index, "sender": self.vcpus[sender].index},
            t.vm,
            t.pcpu,
        )
        if t.mode == IDLE:  # TLBSTATE_LAZY: leave_mm() clears it from mm_cpumask
            t.in_mm = False
        f = self.slots.get(sender)
        if f is None or t.gid not in f.mask:
            return 0
        self._unmask(t, f)
        if late:
            t.late_acks += 1
            self.counters.late_acks += 1
        if f.vm == self.trace_vm:
            f.acks[t.gid] = (self.now, "late" if late else "ipi")
        return self._mask_empty(f, t) if not f.mask else 0

    def _mask_empty(self, f: Flush, acker: VCpu | None) -> int:
        """The last target acknowledged; returns the acknowledger's extra time."""
        f.done_at = self.now
        self.counters.ack_ns += self.now - f.start
        self.counters.acked += 1
        s = self.vcpus[f.sender]
        cost = 0
        if self.protocol.kick_sender and acker is not None:
            cost = self.costs.exit_ns  # `if (cpumask_empty(...)) kvm_kick_cpu(f->sender_cpu);`
            self.counters.kicks += 1
            self._emit("kvm_kick_cpu", {"vcpu_id": acker.index, "cpu": s.index}, s.vm, acker.pcpu)
            self._wake(s, "kick")
        if s.flush is f and s.entered and s.mode == SPIN:
            self._finish_flush(s, self.now)
        return cost

    def _finish_flush(self, s: VCpu, at: int) -> None:
        f = s.flush
        assert f is not None and s.entered
        f.returned_at = at
        if f.mask:
            f.early = True
            self.counters.early_returns += 1
        stall = at - f.start
        self.counters.stall_ns += stall
        self.counters.stall_max_ns = max(self.counters.stall_max_ns, stall)
        self.counters.returned += 1
        s.flush = None
        sem = self.sems[s.vm]
        self._grant(s.vm, sem.up_write(s.gid))  # munmap returns: up_write(&mm->mmap_sem)
        if sem.down_read(s.gid):  # the next record's refault
            s.mode = WORK
            s.guest_left = self._record_ns()
            self._arm(s, at + s.guest_left)
        else:
            self._sleep(s, write=False, at=at)
        self._update_vis(s)

    # -- bookkeeping ----------------------------------------------------------------------

    def _update_vis(self, v: VCpu) -> None:
        new = v.visible
        if new != v.vis:
            v.state_ns[v.vis] += self.now - v.vis_since
            v.vis = new
            v.vis_since = self.now

    def _emit(self, name: str, fields: dict[str, FieldValue], vm: int, pcpu: int) -> None:
        if self.emit is None or (self.trace_vm is not None and vm != self.trace_vm):
            return
        self.emit(Event(name, {"vm": vm, **fields}, ts=self.now / NS_PER_S, cpu=pcpu))

    def vm_vcpus(self, vm: int) -> list[VCpu]:
        n = self.cfg.vcpus_per_vm
        return self.vcpus[vm * n : vm * n + n]

    def waiting_on_preempted(self, s: VCpu) -> bool:
        """Is `s` stuck in its flush on a target that is descheduled right now?"""
        f = s.flush
        return f is not None and any(self.vcpus[g].visible == VIS_PREEMPTED for g in f.mask)

    def metrics(self) -> TlbMetrics:
        """What the run measured so far (after the warm-up)."""
        now = self.now
        window = max(1, now - self.cfg.warmup_ns) / NS_PER_S
        by_vm = tuple(
            sum(v.records for v in self.vm_vcpus(vm)) / window for vm in range(self.cfg.vms)
        )
        totals = [0, 0, 0, 0]
        for v in self.vcpus:
            for state, ns in enumerate(v.time_in_states(now)):
                totals[state] += ns
        all_ns = max(1, sum(totals))
        c = self.counters
        return TlbMetrics(
            protocol=self.cfg.protocol,
            vms=self.cfg.vms,
            seconds=window,
            records_per_s=sum(by_vm) / len(by_vm),
            records_per_s_by_vm=by_vm,
            running=totals[VIS_RUNNING] / all_ns,
            spinning=totals[VIS_SPINNING] / all_ns,
            preempted=totals[VIS_PREEMPTED] / all_ns,
            halted=totals[VIS_HALTED] / all_ns,
            idle_pcpu=self.sched.idle_ns(now) / max(1, now * self.cfg.pcpus),
            flushes=c.flushes,
            ipis=c.ipis,
            flags=c.flags,
            kicks=c.kicks,
            halts=c.halts,
            early_returns=c.early_returns,
            idles=c.idles,
            waits_on_preempted=c.waits_on_preempted,
            late_acks=c.late_acks,
            stall_us_mean=c.stall_ns / max(1, c.returned) / NS_PER_US,
            stall_us_max=c.stall_max_ns / NS_PER_US,
            ack_us_mean=c.ack_ns / max(1, c.acked) / NS_PER_US,
        )

    # -- audit ----------------------------------------------------------------------------
    # The TLB flush model's invariants, checked after any event (like KVM's old mmu audit).
    #
    # * time: no event is scheduled before `now`;
    # * pCPUs: each runs at most one vCPU, and a running vCPU runs on its own pCPU;
    # * vCPUs: each is in exactly one visible state, its state times add up to `now`, only a
    #   running vCPU is in guest mode, only the patch's `halt()` blocks one, and a spinning
    #   or halted vCPU owns the flush in its sender slot;
    # * flushes: every target in a mask belongs to the sender's VM, is not the sender, and
    #   owes an IPI that is on the wire or pending in its APIC; the reverse index `in_masks`
    #   matches the masks; KVM_VCPU_FLUSH_TLB is set only with KVM_VCPU_PREEMPTED;
    # * protocols: with `flush_on_enter` a sender in guest mode never waits on a preempted
    #   target; only `pv_flush` returns from a flush before every target acknowledged.

    def audit(self) -> None:
        if self.next_event_at is not None and self.next_event_at < self.now:
            raise AuditError(f"an event at {self.next_event_at} is older than now ({self.now})")
        self._audit_pcpus()
        for v in self.vcpus:
            self._audit_vcpu(v)
        self._audit_flushes()
        for sem in self.sems:
            sem.audit()
        self.sched.audit()
        if not self.protocol.halt_after_spin and self.counters.early_returns:
            raise AuditError(f"{self.protocol.name} returned from a flush before every ack")

    def _audit_pcpus(self) -> None:
        running: dict[int, VCpu] = {}
        for v in self.vcpus:
            if v.host == RUNNING:
                if v.pcpu in running:
                    raise AuditError(f"pCPU {v.pcpu} runs {running[v.pcpu].name} and {v.name}")
                running[v.pcpu] = v
        for rq in self.sched.rqs:
            if running.get(rq.pcpu) is not rq.curr:
                raise AuditError(f"pCPU {rq.pcpu}: the scheduler and the vCPUs disagree")

    def _audit_vcpu(self, v: VCpu) -> None:
        if v.vis != v.visible:
            raise AuditError(f"{v.name} is drawn in state {v.vis} but is in {v.visible}")
        if sum(v.time_in_states(self.now)) != self.now:
            raise AuditError(f"{v.name}: its state times do not add up to now")
        if v.entered and v.host != RUNNING:
            raise AuditError(f"{v.name} is in guest mode without a pCPU")
        if v.host == BLOCKED and v.mode not in (HALT, IDLE):
            raise AuditError(f"{v.name} is blocked outside the patch's halt() and idle")
        sem = self.sems[v.vm]
        if v.mode in (WORK, IDLE):
            if v.flush is not None:
                raise AuditError(f"{v.name} works or idles with a flush in progress")
        elif v.flush is None or self.slots.get(v.gid) is not v.flush:
            raise AuditError(f"{v.name} waits in a flush it does not own")
        elif sem.writer != v.gid:
            raise AuditError(f"{v.name} flushes without holding mmap_sem for write")
        if v.mode == IDLE and v.granted != sem.holds(v.gid):
            raise AuditError(f"{v.name}: granted mmap_sem {v.granted}, holds it {not v.granted}")
        if v.mode == IDLE and not v.granted and not sem.waiting(v.gid):
            raise AuditError(f"{v.name} idles without waiting for mmap_sem")
        if v.mode != IDLE and sem.waiting(v.gid):
            raise AuditError(f"{v.name} runs its thread while it waits for mmap_sem")
        if v.mode in (WORK, SPIN, HALT) and not v.in_mm:
            raise AuditError(f"{v.name} runs ebizzy outside mm_cpumask")
        if v.mode == HALT and not self.protocol.halt_after_spin:
            raise AuditError(f"{v.name} halted under {self.protocol.name}")
        if v.st_flush and not v.st_preempted:
            raise AuditError(f"{v.name}: KVM_VCPU_FLUSH_TLB without KVM_VCPU_PREEMPTED")
        if v.st_flush and not self.protocol.flag_preempted:
            raise AuditError(f"{v.name}: a flush-on-enter flag under {self.protocol.name}")
        for sender in v.in_masks:
            f = self.slots.get(sender)
            if f is None or v.gid not in f.mask:
                raise AuditError(f"{v.name} thinks vCPU {sender}'s mask holds it")
        if v.pending and v.entered:
            raise AuditError(f"{v.name} runs guest code with interrupts pending")

    def _audit_flushes(self) -> None:
        n = self.cfg.vcpus_per_vm
        for sender, f in self.slots.items():
            s = self.vcpus[sender]
            if f.sender != sender or f.vm != s.vm:
                raise AuditError(f"flush {f.fid} sits in the wrong slot")
            for gid in f.mask:
                t = self.vcpus[gid]
                if gid == sender or gid // n != s.vm:
                    raise AuditError(f"flush {f.fid} targets {t.name} outside its VM")
                if sender not in t.in_masks:
                    raise AuditError(f"flush {f.fid}: {t.name} misses its reverse index")
                if sender not in t.pending and not self.inflight.get((gid, sender)):
                    raise AuditError(f"flush {f.fid} waits on {t.name}, which got no IPI")
            if f.in_progress and s.flush is not f:
                raise AuditError(f"flush {f.fid} is in progress but its sender moved on")
            if self.protocol.flag_preempted and s.entered and s.mode == SPIN:
                late = [g for g in f.mask if self.vcpus[g].st_preempted]
                if late:
                    raise AuditError(f"flush_on_enter: {s.name} waits on preempted {late}")
