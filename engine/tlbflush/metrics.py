"""What a run of the TLB flush model measured: ebizzy's score and where the time went.

`records_per_s` is ebizzy's own score — "%u records/s", records read / elapsed — per VM,
averaged over the VMs (each VM runs its own ebizzy), counted after the warm-up.  The
other numbers say why: the share of vCPU time spent running, spinning in a flush,
preempted and halted; IPIs sent, flags set instead, flushes that waited on a preempted
vCPU, and the sender's stall (flush start to return).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config import NS_PER_S, NS_PER_US
from .vcpu import VIS_HALTED, VIS_PREEMPTED, VIS_RUNNING, VIS_SPINNING

if TYPE_CHECKING:
    from .sim import TlbSim


@dataclass(frozen=True, slots=True)
class TlbMetrics:
    protocol: str
    vms: int
    seconds: float  # measured window (after the warm-up)
    records_per_s: float  # per VM, mean over the VMs
    records_per_s_by_vm: tuple[float, ...]
    running: float  # shares of all vCPU time
    spinning: float
    preempted: float
    halted: float
    idle_pcpu: float  # share of pCPU time with no vCPU
    flushes: int
    ipis: int
    flags: int
    kicks: int
    halts: int
    early_returns: int
    waits_on_preempted: int
    late_acks: int
    stall_us_mean: float  # flush start to the sender's return
    stall_us_max: float
    ack_us_mean: float  # flush start to the last acknowledgement

    def as_rows(self) -> list[tuple[str, str]]:
        """Name/value pairs for a counters panel."""
        return [
            ("records/s per VM", f"{self.records_per_s:,.0f}"),
            ("running", f"{self.running:.0%}"),
            ("spinning", f"{self.spinning:.0%}"),
            ("preempted", f"{self.preempted:.0%}"),
            ("halted", f"{self.halted:.0%}"),
            ("flushes", f"{self.flushes:,}"),
            ("IPIs", f"{self.ipis:,}"),
            ("flush-on-enter flags", f"{self.flags:,}"),
            ("waits on preempted", f"{self.waits_on_preempted:,}"),
            ("kicks", f"{self.kicks:,}"),
            ("halts / early returns", f"{self.halts:,} / {self.early_returns:,}"),
            ("flush stall mean", f"{self.stall_us_mean:,.1f} µs"),
            ("flush stall max", f"{self.stall_us_max:,.0f} µs"),
        ]


def metrics_of(sim: TlbSim) -> TlbMetrics:
    now = sim.now
    window = max(1, now - sim.cfg.warmup_ns) / NS_PER_S
    by_vm = tuple(sum(v.records for v in sim.vm_vcpus(vm)) / window for vm in range(sim.cfg.vms))
    totals = [0, 0, 0, 0]
    for v in sim.vcpus:
        for state, ns in enumerate(v.time_in_states(now)):
            totals[state] += ns
    all_ns = max(1, sum(totals))
    c = sim.counters
    return TlbMetrics(
        protocol=sim.cfg.protocol,
        vms=sim.cfg.vms,
        seconds=window,
        records_per_s=sum(by_vm) / len(by_vm),
        records_per_s_by_vm=by_vm,
        running=totals[VIS_RUNNING] / all_ns,
        spinning=totals[VIS_SPINNING] / all_ns,
        preempted=totals[VIS_PREEMPTED] / all_ns,
        halted=totals[VIS_HALTED] / all_ns,
        idle_pcpu=sim.sched.idle_ns(now) / max(1, now * sim.cfg.pcpus),
        flushes=c.flushes,
        ipis=c.ipis,
        flags=c.flags,
        kicks=c.kicks,
        halts=c.halts,
        early_returns=c.early_returns,
        waits_on_preempted=c.waits_on_preempted,
        late_acks=c.late_acks,
        stall_us_mean=c.stall_ns / max(1, c.returned) / NS_PER_US,
        stall_us_max=c.stall_max_ns / NS_PER_US,
        ack_us_mean=c.ack_ns / max(1, c.acked) / NS_PER_US,
    )
