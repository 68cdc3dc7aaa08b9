"""The host scheduler of the vCPU threads: CFS per pCPU, or gang scheduling per VM.

`CfsScheduler` is a small CFS (kernel/sched/fair.c of early 2012, constants in
config.py): each pCPU has a run queue ordered by vruntime; the running vCPU keeps the
pCPU for `sched_slice()` (24 ms / n), then the leftmost runnable one takes over.  CFS
ends a slice only from the scheduler tick (`scheduler_tick()` -> `task_tick_fair()` ->
`check_preempt_tick()`: the first tick after the slice is used up), and every pCPU ticks
at the same moments (the per-CPU tick was not skewed before the `skew_tick` option of
v3.5): a slice ends on the tick after it (`tick_after`, HOST_HZ in engine/costs.py).  A
vCPU that halts leaves the queue (`kvm_vcpu_block()` sleeps) and the next one runs at
once; when it wakes its vruntime is placed at least at `min_vruntime - latency / 2` and
it preempts the running vCPU at once if that one is ahead by more than the wakeup
granularity (`check_preempt_wakeup()`).

vCPU i of every VM starts on pCPU i, but the vCPU threads are not pinned: the load
balancer moves them where a pCPU idles, as v3.2's CFS does on one 8-CPU package that
shares its last-level cache.  A pCPU left with nothing to run pulls a queued vCPU at once
(`idle_balance()` from `schedule()`), and an idle pCPU pulls one on the next tick after a
vCPU queued up behind another (`trigger_load_balance()` → the nohz idle balancer); a
vCPU that ran within `sysctl_sched_migration_cost` (0.5 ms) is cache-hot and stays
(`can_migrate_task()` → `task_hot()`).  A waking vCPU whose pCPU is busy goes to an idle
one (`select_idle_sibling()`).  Periodic balancing between busy pCPUs is not modelled.
This is what lets a preempted flush target run where a guest idles (the model's reading
of the PV-flush thread, docs/bench.md §4): the busier the host, the fewer idle pCPUs.

The run starts with the VMs taking turns in the same order on every pCPU, each pCPU's
rotation shifted by a phase drawn over one CFS period (`TlbConfig.phase_spread_ns`):
when the VMs' vCPUs woke as their ebizzy runs began is not in the thread.

`GangScheduler` runs one VM at a time on all pCPUs, rotating on the tick after every
`sched_slice(vms)` — the slice CFS would give each vCPU — so a VM gets the same share as
under CFS; vCPU i of each VM stays on pCPU i.  A vCPU that halts leaves its pCPU idle
until its VM's next slot or its wake-up: no other VM may use it (the fragmentation gang
scheduling pays).  The
co-scheduling IPIs of a real gang scheduler are not in the thread and not modelled: the
switch costs CONTEXT_SWITCH_NS, as under CFS.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import AuditError
from .config import SCHED_LATENCY_NS, SCHED_WAKEUP_GRANULARITY_NS, sched_slice
from .vcpu import BLOCKED, RUNNABLE, RUNNING, VCpu

EV_SLICE = 0  # the pCPU's (or the gang's) slice ends
EV_BALANCE = 6  # the tick after a vCPU queued while a pCPU idles: the idle pCPU pulls
SCHED_MIGRATION_COST_NS = 500_000  # sysctl_sched_migration_cost: a task this recent is hot


class Host(Protocol):
    """What a scheduler needs from the simulator."""

    now: int
    vcpus: list[VCpu]

    def push(self, when: int, kind: int, a: int, b: int, token: int) -> None: ...
    def switch_in(self, v: VCpu) -> None: ...
    def deschedule(self, v: VCpu, blocked: bool) -> None: ...


@dataclass(slots=True, eq=False)
class RunQueue:
    pcpu: int
    curr: VCpu | None = None
    queue: list[VCpu] = field(default_factory=list)
    min_vruntime: int = 0
    exec_start: int = 0
    token: int = 0
    idle_since: int | None = 0
    idle_ns: int = 0

    def set_curr(self, v: VCpu | None, now: int) -> None:
        if v is None and self.curr is not None:
            self.idle_since = now
        elif v is not None and self.idle_since is not None:
            self.idle_ns += now - self.idle_since
            self.idle_since = None
        self.curr = v

    def idle_time(self, now: int) -> int:
        return self.idle_ns + (now - self.idle_since if self.idle_since is not None else 0)


def tick_after(when: int, tick_ns: int) -> int:
    """The first scheduler tick after `when` (every pCPU ticks at the same moments)."""
    return (when // tick_ns + 1) * tick_ns


class CfsScheduler:
    name = "cfs"

    def __init__(
        self, host: Host, pcpus: int, rng: random.Random, tick_ns: int, phase_spread_ns: int
    ) -> None:
        self.host = host
        self.rqs = [RunQueue(p) for p in range(pcpus)]
        self.rng = rng
        self.tick_ns = tick_ns
        self.phase_spread_ns = phase_spread_ns
        self.last_ran: dict[int, int] = {}  # gid -> when it last left its pCPU
        self.balance_at: int | None = None  # the pending EV_BALANCE's tick
        self.migrations = 0

    def tick_after(self, when: int) -> int:
        return tick_after(when, self.tick_ns)

    def start(self) -> None:
        """Every vCPU runnable on its pCPU, the VMs taking turns in the same order on
        every pCPU, each pCPU's rotation shifted by a phase drawn from
        [0, phase_spread_ns] (one CFS period unless a test asks otherwise)."""
        for v in self.host.vcpus:
            self.rqs[v.pcpu].queue.append(v)
        for rq in self.rqs:
            if not rq.queue:
                continue
            n = len(rq.queue)
            width = sched_slice(n)
            turns, into = divmod(self.rng.randrange(self.phase_spread_ns + 1), width)
            for v in rq.queue:
                v.vruntime = (v.vm - turns) % n
            self._switch(rq, self._leftmost(rq), first=width - into)

    # -- CFS's bookkeeping -------------------------------------------------------------

    def _update_curr(self, rq: RunQueue) -> None:
        now = self.host.now
        if rq.curr is not None:
            rq.curr.vruntime += now - rq.exec_start
        rq.exec_start = now
        candidates = [v.vruntime for v in rq.queue]
        if rq.curr is not None:
            candidates.append(rq.curr.vruntime)
        if candidates:
            rq.min_vruntime = max(rq.min_vruntime, min(candidates))

    @staticmethod
    def _leftmost(rq: RunQueue) -> VCpu:
        return min(rq.queue, key=lambda v: (v.vruntime, v.gid))

    def _switch(self, rq: RunQueue, v: VCpu, first: int | None = None) -> None:
        rq.queue.remove(v)
        rq.set_curr(v, self.host.now)
        rq.exec_start = self.host.now
        rq.token += 1
        slice_ns = first if first is not None else sched_slice(len(rq.queue) + 1)
        self.host.push(self.tick_after(self.host.now + slice_ns), EV_SLICE, rq.pcpu, 0, rq.token)
        self.host.switch_in(v)

    def _preempt_curr(self, rq: RunQueue) -> None:
        prev = rq.curr
        assert prev is not None
        rq.set_curr(None, self.host.now)
        self.last_ran[prev.gid] = self.host.now
        self.host.deschedule(prev, blocked=False)
        rq.queue.append(prev)
        self._want_balance()

    # -- load balancing: only an idle pCPU pulls, and a waking vCPU goes to an idle one --

    def _idle_rqs(self) -> list[RunQueue]:
        return [rq for rq in self.rqs if rq.curr is None and not rq.queue]

    def _want_balance(self) -> None:
        """A vCPU waits in a queue: if a pCPU idles, the idle load balancer pulls it on
        the next tick (`trigger_load_balance()` → `nohz_balancer_kick()`, v3.2)."""
        if self.balance_at is None and self._idle_rqs():
            self.balance_at = self.tick_after(self.host.now)
            self.host.push(self.balance_at, EV_BALANCE, -1, 0, 0)

    def balance(self) -> None:
        self.balance_at = None
        for rq in self._idle_rqs():
            self._pull(rq)
        if any(rq.queue for rq in self.rqs):
            self._want_balance()

    def _pull(self, dst: RunQueue) -> bool:
        """`load_balance()` for an idle `dst`: from the busiest queue, the first task on
        its list (`cfs_tasks`, the last queued first) that `can_migrate_task()` allows —
        not one that ran within sysctl_sched_migration_cost (`task_hot()`)."""
        now = self.host.now
        busiest = max(self.rqs, key=lambda rq: (len(rq.queue), -rq.pcpu))
        for v in reversed(busiest.queue):
            if now - self.last_ran.get(v.gid, -SCHED_MIGRATION_COST_NS) < SCHED_MIGRATION_COST_NS:
                continue
            self._migrate(v, busiest, dst)
            self._switch(dst, v)
            return True
        return False

    def _migrate(self, v: VCpu, src: RunQueue, dst: RunQueue) -> None:
        """Move a queued `v`: its vruntime relative to the queues' min_vruntime."""
        src.queue.remove(v)
        self._update_curr(src)
        self._update_curr(dst)
        v.vruntime = v.vruntime - src.min_vruntime + dst.min_vruntime
        v.pcpu = dst.pcpu
        dst.queue.append(v)
        self.migrations += 1

    # -- events --------------------------------------------------------------------------

    def slice_end(self, pcpu: int, token: int) -> None:
        rq = self.rqs[pcpu]
        if token != rq.token or rq.curr is None:
            return
        self._update_curr(rq)
        if rq.queue:
            self._preempt_curr(rq)
            self._switch(rq, self._leftmost(rq))
        else:
            rq.token += 1
            end = self.tick_after(self.host.now + sched_slice(1))
            self.host.push(end, EV_SLICE, pcpu, 0, rq.token)

    def block(self, v: VCpu) -> None:
        """The running `v` halted: it leaves the run queue, the next one runs; with none
        queued the pCPU first tries to pull one (`idle_balance()` in `schedule()`)."""
        rq = self.rqs[v.pcpu]
        assert rq.curr is v, f"{v.name} halts but does not run"
        self._update_curr(rq)
        rq.set_curr(None, self.host.now)
        rq.token += 1
        self.last_ran[v.gid] = self.host.now
        self.host.deschedule(v, blocked=True)
        if rq.queue:
            self._switch(rq, self._leftmost(rq))
        else:
            self._pull(rq)

    def wake(self, v: VCpu) -> None:
        """`v` left its halt: on its pCPU if that one idles, else on an idle one
        (`select_idle_sibling()`: the 8 pCPUs share one last-level cache); enqueue it, and
        preempt the running vCPU if CFS would."""
        rq = self.rqs[v.pcpu]
        if rq.curr is not None or rq.queue:
            idle = self._idle_rqs()
            if idle:  # task_waking_fair(): vruntime relative to the new queue's minimum
                self._update_curr(idle[0])
                v.vruntime += idle[0].min_vruntime - rq.min_vruntime
                rq = idle[0]
                v.pcpu = rq.pcpu
                self.migrations += 1
        self._update_curr(rq)
        v.vruntime = max(v.vruntime, rq.min_vruntime - SCHED_LATENCY_NS // 2)
        rq.queue.append(v)
        if rq.curr is None:
            self._switch(rq, self._leftmost(rq))
        elif rq.curr.vruntime - v.vruntime > SCHED_WAKEUP_GRANULARITY_NS:
            self._preempt_curr(rq)
            self._switch(rq, self._leftmost(rq))
        else:
            self._want_balance()

    def idle_ns(self, now: int) -> int:
        return sum(rq.idle_time(now) for rq in self.rqs)

    def audit(self) -> None:
        seen: set[int] = set()
        for rq in self.rqs:
            for v in rq.queue:
                if v.host != RUNNABLE or v.pcpu != rq.pcpu or v.gid in seen or v is rq.curr:
                    raise AuditError(f"pCPU {rq.pcpu}: {v.name} does not belong in the queue")
                seen.add(v.gid)
            if rq.curr is not None:
                seen.add(rq.curr.gid)
        for v in self.host.vcpus:
            if (v.host != BLOCKED) != (v.gid in seen):
                raise AuditError(f"{v.name} ({v.host}) is not where CFS thinks it is")


class GangScheduler:
    name = "gang"

    def __init__(self, host: Host, pcpus: int, vms: int, rng: random.Random, tick_ns: int) -> None:
        self.host = host
        self.rqs = [RunQueue(p) for p in range(pcpus)]
        self.vms = vms
        self.gang = rng.randrange(vms)
        self.token = 0
        self.tick_ns = tick_ns

    def _member(self, vm: int, pcpu: int) -> VCpu | None:
        return next((v for v in self.host.vcpus if v.vm == vm and v.pcpu == pcpu), None)

    def start(self) -> None:
        self._run_gang()

    def _run_gang(self) -> None:
        for rq in self.rqs:
            v = self._member(self.gang, rq.pcpu)
            if v is not None and v.host == RUNNABLE:
                rq.set_curr(v, self.host.now)
                self.host.switch_in(v)
        if self.vms > 1:
            self.token += 1
            end = tick_after(self.host.now + sched_slice(self.vms), self.tick_ns)
            self.host.push(end, EV_SLICE, -1, 0, self.token)

    def slice_end(self, pcpu: int, token: int) -> None:
        if token != self.token:
            return
        for rq in self.rqs:  # the whole gang leaves first, then the next one comes in
            if rq.curr is not None:
                prev = rq.curr
                rq.set_curr(None, self.host.now)
                self.host.deschedule(prev, blocked=False)
        self.gang = (self.gang + 1) % self.vms
        self._run_gang()

    def block(self, v: VCpu) -> None:
        rq = self.rqs[v.pcpu]
        assert rq.curr is v, f"{v.name} halts but does not run"
        rq.set_curr(None, self.host.now)
        self.host.deschedule(v, blocked=True)

    def wake(self, v: VCpu) -> None:
        rq = self.rqs[v.pcpu]
        if v.vm == self.gang and rq.curr is None:
            rq.set_curr(v, self.host.now)
            self.host.switch_in(v)

    def idle_ns(self, now: int) -> int:
        return sum(rq.idle_time(now) for rq in self.rqs)

    def audit(self) -> None:
        for rq in self.rqs:
            if rq.curr is not None and (rq.curr.vm != self.gang or rq.curr.host != RUNNING):
                raise AuditError(f"pCPU {rq.pcpu} runs {rq.curr.name} outside its gang")


Scheduler = CfsScheduler | GangScheduler
