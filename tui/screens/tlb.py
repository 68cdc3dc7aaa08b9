"""The TLB flush screen (F4): the vCPUs of one VM as lanes over time while ebizzy in every
VM flushes remote TLBs, under the protocol of your choice (the PV-flush thread,
docs/kvm.md §7).

Each step runs the seeded simulation one column (250 µs) further.  `p` switches the
protocol and `v` the number of VMs; both restart the same seeded run, so what changes
on screen is the protocol's doing.  `e` exports the followed flush as a graph.
"""

from __future__ import annotations

import time

from mmuscope.engine.pacing import Pacer
from mmuscope.engine.tlbflush import PROTOCOL_NAMES, PROTOCOLS, VM_COUNTS, Flush, TlbConfig, TlbSim
from mmuscope.engine.tlbflush.config import sched_slice
from mmuscope.engine.tlbflush.lanes import LaneHistory
from mmuscope.engine.tlbflush.vcpu import VIS_PREEMPTED
from textual.app import ComposeResult
from textual.binding import Binding

from ..widgets.fit import show_title
from ..widgets.tlb_panels import TlbLanes, TlbSide
from .base import PlayerScreen

STUDIED_VM = 0
SEED = 1
MAX_STEPS_PER_FRAME = 40
ENGINE_BUDGET = 0.008  # seconds of simulation per frame, at most
NEXT_WAIT_LIMIT = 400  # columns `n` runs at most (100 ms)


class TlbScreen(PlayerScreen):
    BINDINGS = [
        Binding("space", "play_pause", "Play/Pause", tooltip="Run the VMs continuously"),
        Binding("s", "step", "Step", tooltip="Run 250 µs more (one column)"),
        Binding("n", "next_wait", "Next wait",
                tooltip="Run to the next flush that waits on a preempted vCPU (or a flag)"),
        Binding("plus,equals_sign", "faster", "Faster", key_display="+"),
        Binding("minus", "slower", "Slower", key_display="-"),
        Binding("p", "next_protocol", "Protocol",
                tooltip="baseline, gang, pv_flush, flush_on_enter: the same seeded run"),
        Binding("v", "next_vms", "VMs", tooltip="1, 2, 4 or 8 VMs of 8 vCPUs on 8 pCPUs"),
    ]  # fmt: skip

    DEFAULT_CSS = """
    TlbScreen #lanes { width: 3fr; height: 1fr; }
    TlbScreen #tlb-side { width: 2fr; min-width: 42; height: 1fr; }
    TlbScreen.-narrow #tlb-side { width: 34; min-width: 0; }
    """

    view_name = "tlb"

    def __init__(self, pacer: Pacer, *, protocol: str = "baseline", vms: int = 2) -> None:
        super().__init__(pacer)
        self.protocol_name = protocol
        self.vms = vms
        self.seed = SEED
        self._restart()

    def _restart(self) -> None:
        """A fresh run of the same seed with the current protocol and VM count."""
        config = TlbConfig(vms=self.vms, protocol=self.protocol_name, seed=self.seed)
        self.sim = TlbSim(config, emit=self.pending_events.append, trace_vm=STUDIED_VM)
        self.history = LaneHistory(self.sim, vm=STUDIED_VM)

    def compose_main(self) -> ComposeResult:
        yield TlbLanes(id="lanes")
        yield TlbSide(id="tlb-side")

    def on_mount(self) -> None:
        show_title(self.query_one("#tlb-side"), "protocol")
        self.redraw()

    # -- the player -------------------------------------------------------------------

    def tick(self, now: float, dt: float) -> None:
        steps = min(self.pacer.advance(dt), MAX_STEPS_PER_FRAME)
        deadline = time.monotonic() + ENGINE_BUDGET
        for _ in range(steps):
            self.history.step()
            if time.monotonic() > deadline:
                break
        self.flush_events()
        self.redraw()

    def show_state(self) -> None:
        self.redraw()

    def action_step(self) -> None:
        self.pause()
        self.history.step()
        self.flush_events(force=True)
        self.redraw()

    def action_next_wait(self) -> None:
        self.pause()
        for _ in range(NEXT_WAIT_LIMIT):
            column = self.history.step()
            if any(cell.waiting or cell.mark == "⚑" for cell in column):
                break
        else:
            self.notify("no flush waited on a preempted vCPU in 100 ms", timeout=4)
        self.flush_events(force=True)
        self.redraw()

    def action_next_protocol(self) -> None:
        index = PROTOCOL_NAMES.index(self.protocol_name)
        self.action_protocol(PROTOCOL_NAMES[(index + 1) % len(PROTOCOL_NAMES)])

    def action_protocol(self, name: str) -> None:
        """One protocol by name (scenarios): the same seeded run restarts under it."""
        self.protocol_name = name
        self._switched(f"{name}: {PROTOCOLS[name].summary}")

    def action_next_vms(self) -> None:
        self.action_set_vms(VM_COUNTS[(VM_COUNTS.index(self.vms) + 1) % len(VM_COUNTS)])

    def action_set_vms(self, vms: int) -> None:
        self.vms = vms
        self._switched(f"{vms} VM{'s' if vms > 1 else ''}: {vms}× overcommit")

    def action_run(self, columns: int) -> None:
        """Run `columns` × 250 µs at once (paused)."""
        self.pause()
        for _ in range(columns):
            self.history.step()
        self.flush_events(force=True)
        self.redraw()

    def _switched(self, message: str) -> None:
        """A new run: its events and kvm_stat totals start from zero too."""
        self.pending_events.clear()
        self.flush_events(force=True)  # the old run's last lines, cleared just below
        self._restart()
        self.events_panel.reset()
        self.notify(f"{message} (seed {self.seed}, restarted)", timeout=4)
        self.redraw()

    # -- drawing ------------------------------------------------------------------------

    def redraw(self) -> None:
        flush = self.history.followed_flush()
        self.query_one(TlbLanes).show(self.history, flush)
        self.query_one(TlbSide).show(
            self._heading(), self._rows(), self._flush_lines(flush), self.caption_text
        )
        show_title(
            self.query_one(TlbLanes),
            f"vm{STUDIED_VM}: 8 vCPU lanes, one column = {self.history.column_ns // 1000} µs",
        )
        state = "▶ playing" if self.pacer.playing else "⏸ paused"
        self.title = "mmuscope · paravirt TLB flush"
        self.sub_title = (
            f"{self.protocol_name} · {self.vms} VM{'s' if self.vms > 1 else ''} · "
            f"t {self.sim.now / 1e6:.2f} ms · {state} {self.pacer.speed:g}/s"
        )

    def _heading(self) -> list[tuple[str, str]]:
        slice_ms = sched_slice(self.vms) / 1e6
        return [
            (self.protocol_name, "title"),
            (PROTOCOLS[self.protocol_name].summary, "label"),
            (f"{self.vms} VMs × 8 vCPUs on 8 pCPUs, slice {slice_ms:g} ms", "label"),
        ]

    def _rows(self) -> list[tuple[str, str]]:
        sim = self.sim
        m = sim.metrics()
        c = sim.counters
        warm = sim.now > sim.cfg.warmup_ns
        return [
            ("records/s per VM", f"{m.records_per_s:,.0f}" if warm else "(warming up)"),
            ("running / spinning", f"{m.running:.0%} / {m.spinning:.0%}"),
            ("preempted / halted", f"{m.preempted:.0%} / {m.halted:.0%}"),
            ("flushes", f"{c.flushes:,}"),
            ("IPIs", f"{c.ipis:,}"),
            ("waits on preempted", f"{c.waits_on_preempted:,}"),
            ("flags / kicks", f"{c.flags:,} / {c.kicks:,}"),
            ("halts / early", f"{c.halts:,} / {c.early_returns:,}"),
            ("stall mean / max", f"{_us(m.stall_us_mean)} / {_us(m.stall_us_max)}"),
        ]

    def _flush_lines(self, flush: Flush | None) -> list[tuple[str, str]]:
        if flush is None:
            return [("no flush yet", "label")]
        n = self.sim.cfg.vcpus_per_vm
        age = (self.sim.now - flush.start) / 1000
        state = "waiting" if flush.in_progress else "returned"
        lines = [(f"flush of vcpu{flush.sender % n}: {state}, {_us(age)} ago", "title")]
        for gid in flush.targets:
            lines.append(self._target_line(flush, gid))
        return lines

    def _target_line(self, flush: Flush, gid: int) -> tuple[str, str]:
        n = self.sim.cfg.vcpus_per_vm
        name = f" vcpu{gid % n} "
        if gid in flush.acks:
            at, how = flush.acks[gid]
            if how == "flag":
                return name + "⚑ flagged: flushes on entry", "mark"
            late = " at entry" if how == "late" else ""
            return name + f"◆ acked{late} after {_us((at - flush.start) / 1000)}", "flush"
        if gid in flush.mask:
            target = self.sim.vcpus[gid]
            if target.visible == VIS_PREEMPTED:
                return name + "○ preempted, owes its ack", "waiting"
            return name + "○ ack owed", "label"
        return name + "(mask overwritten)", "label"

    # -- export -------------------------------------------------------------------------

    def export_dot(self) -> tuple[str, int] | None:
        """The followed flush as a graph: the sender and how each target answered."""
        from mmuscope.engine.tlbflush.dot import flush_to_dot

        flush = self.history.followed_flush()
        if flush is None:
            return None
        text = flush_to_dot(flush, self.sim.cfg.vcpus_per_vm, self.sim.now, self.protocol_name)
        return text, 1 + len(flush.targets)


def _us(value: float) -> str:
    """A duration given in µs, in µs or ms."""
    if value >= 1000:
        return f"{value / 1000:,.1f} ms"
    return f"{value:,.0f} µs"
