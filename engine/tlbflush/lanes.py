"""vCPU lanes over time, for the TLB screen: the simulation cut into columns.

Each column covers `column_ns` of simulated time.  For every vCPU of the VM under study
it keeps the state the vCPU spent most of the column in (running, spinning, preempted,
halted), whether it was stuck at the column's end in a flush on a preempted target (the
stall the PV-flush thread (lkml, 2012) is about), and a mark when its flush-on-enter flag
got set (⚑) or acknowledged an IPI late, at its next VM entry (✓).  For every pCPU it
keeps the VM whose vCPU ran there at the column's end.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .config import NS_PER_US
from .sim import TlbSim
from .vcpu import RUNNING, VIS_HALTED, VIS_SPINNING, Flush

COLUMN_NS = 250 * NS_PER_US  # about one ebizzy record
KEEP_COLUMNS = 400
MARK_FLAG, MARK_LATE_ACK = "⚑", "✓"


@dataclass(frozen=True, slots=True)
class LaneCell:
    state: int  # VIS_RUNNING .. VIS_HALTED
    waiting: bool  # in its flush on a preempted target at the column's end
    mark: str = ""


class LaneHistory:
    def __init__(
        self,
        sim: TlbSim,
        vm: int = 0,
        column_ns: int = COLUMN_NS,
        keep: int = KEEP_COLUMNS,
    ) -> None:
        self.sim = sim
        self.vm = vm
        self.column_ns = column_ns
        self.columns: deque[tuple[LaneCell, ...]] = deque(maxlen=keep)
        self.pcpus: deque[tuple[int | None, ...]] = deque(maxlen=keep)
        self.starts: deque[int] = deque(maxlen=keep)

    @property
    def lanes(self) -> int:
        return self.sim.cfg.vcpus_per_vm

    def step(self) -> tuple[LaneCell, ...]:
        """Run the simulation one column further and record the column."""
        sim = self.sim
        vcpus = sim.vm_vcpus(self.vm)
        start = sim.now
        before = [(v.time_in_states(start), v.flag_sets, v.late_acks) for v in vcpus]
        sim.run_until(start + self.column_ns)
        cells = []
        for v, (times, flags, late) in zip(vcpus, before, strict=True):
            spent = [b - a for a, b in zip(times, v.time_in_states(sim.now), strict=True)]
            state = max(range(len(spent)), key=lambda s: (spent[s], s))
            waiting = state in (VIS_SPINNING, VIS_HALTED) and sim.waiting_on_preempted(v)
            mark = MARK_FLAG if v.flag_sets > flags else MARK_LATE_ACK if v.late_acks > late else ""
            cells.append(LaneCell(state, waiting, mark))
        column = tuple(cells)
        self.columns.append(column)
        self.starts.append(start)
        self.pcpus.append(self._on_pcpus())
        return column

    def _on_pcpus(self) -> tuple[int | None, ...]:
        running: list[int | None] = [None] * self.sim.cfg.pcpus
        for v in self.sim.vcpus:
            if v.host == RUNNING:
                running[v.pcpu] = v.vm
        return tuple(running)

    def column_at(self, ns: int) -> int | None:
        """The index of the column holding time `ns`, if it is still kept."""
        if not self.starts or ns < self.starts[0] or ns >= self.sim.now:
            return None
        return min(len(self.starts) - 1, (ns - self.starts[0]) // self.column_ns)

    def followed_flush(self) -> Flush | None:
        """The flush to draw: the oldest one of the VM still in progress (the one that
        stalls), else the last one to finish."""
        recent = [f for f in self.sim.recent if f.vm == self.vm]
        waiting = [f for f in recent if f.in_progress]
        if waiting:
            return min(waiting, key=lambda f: f.start)
        return recent[-1] if recent else None
