"""What a run of the TLB flush model measured: ebizzy's score and where the time went.

`records_per_s` is ebizzy's own score — "%u records/s", records read / elapsed — per VM,
averaged over the VMs (each VM runs its own ebizzy), counted after the warm-up.  The
other numbers say why: the share of vCPU time spent running, spinning in a flush,
preempted and halted; IPIs sent, flags set instead, flushes that waited on a preempted
vCPU, and the sender's stall (flush start to return).  `TlbSim.metrics()` measures them.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    idles: int  # a vCPU idled in HLT, its ebizzy thread asleep on mmap_sem
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
