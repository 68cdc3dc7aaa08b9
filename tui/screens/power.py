"""The POWER screen (F5): the POWER-keys thread's pfault program on a Book3S HV guest,
the hashed page table's groups around each fault, the fault classified step by step — the
key check or the hash search, primary group then secondary, slot by slot — and its
outcome: forwarded to the guest, MMIO emulated, or paged in (docs/kvm.md §8).

The run is `engine.ppc.pfault.DEMO` on a 128-group table, with host reclaim and an MMIO
doorbell added so that every kind of HPTE shows; `k` switches between the eras (today's
hash search for every NO_HPTE fault, the thread's keys 30/31) and replays the same seeded
run to the same fault, so the same access can be compared.
"""

from __future__ import annotations

import time
from dataclasses import replace

from mmuscope.engine.pacing import Pacer
from mmuscope.engine.ppc.faults import FaultRecord, Phase
from mmuscope.engine.ppc.guest import MAX_RETRIES
from mmuscope.engine.ppc.keys import DEFAULT_ERA, ERAS, key_conflict
from mmuscope.engine.ppc.machine import PpcCounters
from mmuscope.engine.ppc.pfault import DEMO, DEMO_ORDER, PASSES, PfaultRun
from mmuscope.engine.ppc.views import searched_groups_dot
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical

from ..widgets.fit import show_title
from ..widgets.lookup_bar import LookupBar
from ..widgets.power_panels import FaultSteps, HptGroups, PowerCounters
from .base import PlayerScreen

ERA_NAMES = tuple(ERAS)
ENGINE_BUDGET = 0.008  # seconds of engine work a frame
REPLAY_LIMIT = 100_000  # faults replayed when switching era (beyond: start over)


class PowerScreen(PlayerScreen):
    BINDINGS = [
        Binding("space", "play_pause", "Play/Pause", tooltip="Run the pfault program"),
        Binding("s", "step", "Step", tooltip="The next step of the fault (or the next fault)"),
        Binding("n", "next_fault", "Next", tooltip="Run to the next HDSI, shown complete"),
        Binding("k", "next_era", "Era", tooltip="today / 2014-keys / 2014: replay the same run"),
        Binding("plus,equals_sign", "faster", "Faster", key_display="+"),
        Binding("minus", "slower", "Slower", key_display="-"),
    ]  # fmt: skip

    DEFAULT_CSS = """
    PowerScreen #hpt { height: 1fr; }
    PowerScreen #power-right { width: 2fr; min-width: 44; }
    PowerScreen.-narrow #power-right { width: 36; min-width: 0; }
    PowerScreen #power-counters { height: auto; max-height: 24; }
    PowerScreen #fault-steps { height: 1fr; }
    PowerScreen.-short #power-counters, PowerScreen.-captioned #power-counters { height: 1fr; }
    PowerScreen.-short #fault-steps, PowerScreen.-captioned #fault-steps { display: none; }
    """

    view_name = "power"

    def __init__(self, pacer: Pacer, *, era: str = DEFAULT_ERA, seed: int = 1) -> None:
        super().__init__(pacer)
        self.seed = seed
        self.run = self._new_run(era)
        self.record: FaultRecord | None = None
        self.phases: list[Phase] = []
        self.before: PpcCounters | None = None  # the counters before `record`
        self.shown = 0

    def _new_run(self, era: str) -> PfaultRun:
        return PfaultRun(
            era, DEMO, seed=self.seed, order=DEMO_ORDER, emit=self.pending_events.append, trace=True
        )

    @property
    def era(self) -> str:
        return self.run.machine.era.name

    def compose_main(self) -> ComposeResult:
        with Vertical(id="left"):
            yield LookupBar(id="power-bar")
            yield HptGroups(id="hpt")
        with Vertical(id="power-right"):
            yield PowerCounters(id="power-counters")
            yield FaultSteps(id="fault-steps")

    def on_mount(self) -> None:
        show_title(self.query_one("#power-counters"), "faults by class")
        show_title(self.query_one("#fault-steps"), "the handler's path")
        self.redraw()

    # -- the player -------------------------------------------------------------------

    def show_state(self) -> None:
        self.redraw()

    def tick(self, now: float, dt: float) -> None:
        started = self.pacer.advance(dt)
        if started:
            self._run(started)
        elif self.record is not None and self.pacer.animating:
            self.shown = max(self.shown, self.pacer.revealed(len(self.phases)))
        self.flush_events()
        self.redraw()

    def _run(self, count: int) -> None:
        """Up to `count` faults in the engine budget; show the last one."""
        deadline = time.perf_counter() + ENGINE_BUDGET
        last = None
        for _ in range(count):
            before = replace(self.run.counters)
            record = self.run.next_fault()
            if record is None:
                self._restart()
                break
            last = record
            if time.perf_counter() > deadline:
                break
        if last is not None:
            shown = self.pacer.revealed(len(last.phases())) if self.pacer.playing else 1
            self._show(last, shown, before)

    def _show(self, record: FaultRecord, shown: int, before: PpcCounters | None = None) -> None:
        self.record = record
        self.before = before  # the counters before this fault, for `revealed_counters`
        self.phases = record.phases()
        self.shown = max(1, min(shown, len(self.phases)))

    def _restart(self) -> None:
        """The program ended: the same seeded run again."""
        self.run = self._new_run(self.era)
        self.notify("pfault finished: starting over", timeout=3)

    # -- drawing ----------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return bool(self.phases) and self.shown >= len(self.phases)

    def redraw(self) -> None:
        run = self.run
        hpt = run.machine.hpt
        groups = self.query_one(HptGroups)
        show_title(
            groups, f"HPT: {hpt.n_groups} groups of 8 (order {hpt.order}), {hpt.occupied} HPTEs"
        )
        groups.show(hpt, self.record, self.phases, self.shown)
        self.query_one(PowerCounters).show(
            run.machine.era, self.revealed_counters(), self.record, self.done, self.caption_text
        )
        after = self._after(self.record) if self.record is not None else ""
        self.query_one(FaultSteps).show(self.record, self.phases, self.shown, after)
        self.query_one(LookupBar).show_content(self._fault_words())
        state = "▶ playing" if self.pacer.playing else "⏸ paused"
        self.title = "mmuscope · POWER HPT"
        self.sub_title = f"era {self.era} · {self._where()} · {state} {self.pacer.speed:g}/s"

    def revealed_counters(self) -> PpcCounters:
        """The counters as far as the animation has gone: while a fault is revealed step
        by step, it counts as a fault and by the HPTEs shown so far, and its class and
        search count only once it is complete (in class the counters must not give the
        answer away)."""
        if self.done or self.before is None or self.record is None:
            return self.run.counters
        probes = sum(1 for p in self.phases[: self.shown] if p.what == "probe")
        return replace(
            self.before,
            faults=self.before.faults + 1,
            hptes_examined=self.before.hptes_examined + probes,
        )

    def _where(self) -> str:
        what, iteration, page, label = self.run.op
        if what == "start":
            return "pfault not started"
        pass_ = f" · page {page + 1}/{DEMO.pages}" if label in PASSES else ""
        return f"iteration {iteration + 1}/{DEMO.iterations} · {label}{pass_}"

    def _fault_words(self) -> str:
        record = self.record
        if record is None:
            return "no fault yet: space plays, s steps, n runs to the next HDSI, k switches era"
        revealed = self.phases[: self.shown]
        probes = sum(1 for p in revealed if p.what == "probe")
        head = f"#{record.seq} {revealed[0].text}" if revealed else f"#{record.seq}"
        last = revealed[-1] if revealed else None
        if last is None or last.what == "fault":
            return head
        if last.what == "probe":
            group = "primary" if probes <= 8 else "secondary"
            hit = " match" if last.match else ""
            return f"#{record.seq} {record.purpose} search, {group}: {last.text}{hit} ({probes}/16)"
        if last.what == "outcome":
            after = self._after(record)
            return f"#{record.seq} → {last.text}" + (f"; {after}" if after else "")
        return f"#{record.seq} {last.text}"

    def _after(self, record: FaultRecord) -> str:
        """Where the guest's H_ENTER put the HPTE after a forwarded fault."""
        if record.outcome != "forwarded":
            return ""
        slot = self.run.machine.hpt.lookup(record.vpn)
        return f"the guest's H_ENTER → slot {slot:#x}" if slot >= 0 else ""

    def export_dot(self) -> tuple[str, int] | None:
        """The fault's primary and secondary groups, the slots its search examined."""
        if self.record is None:
            return None
        return searched_groups_dot(self.run.machine.hpt, self.record)

    # -- keys -------------------------------------------------------------------------

    def action_step(self) -> None:
        self.pause()
        if self.record is not None and not self.done:
            self.shown += 1
        else:
            self._next(shown=1)
        self.flush_events(force=True)
        self.redraw()

    def action_next_fault(self) -> None:
        self.pause()
        self._next(shown=10**9)
        self.flush_events(force=True)
        self.redraw()

    def _next(self, shown: int) -> None:
        before = replace(self.run.counters)
        record = self.run.next_fault()
        if record is None:
            self._restart()
            before = replace(self.run.counters)
            record = self.run.next_fault()
        if record is not None:
            self._show(record, shown, before)

    # -- actions for scenarios (engine.scenarios: the screen's own action names) --------

    def action_run(self, count: int) -> None:
        """Run `count` faults, paused, and show the last one complete."""
        self.pause()
        for _ in range(max(0, count)):
            self._next(shown=10**9)
        self.flush_events(force=True)
        self.redraw()

    def action_run_to(self, outcome: str, limit: int = 100_000) -> None:
        """Run to the next fault with this outcome (forwarded, emulated, paged_in)."""
        self.pause()
        for _ in range(limit):
            self._next(shown=10**9)
            if self.record is not None and self.record.outcome == outcome:
                break
        self.flush_events(force=True)
        self.redraw()

    def action_era(self, era: str) -> None:
        """Switch to `era` (replaying to the same fault), as `k` does (scenarios: `era(...)`)."""
        if era not in ERAS:
            self.notify(f"unknown era {era!r}", severity="error")
            return
        while self.era != era:
            self.action_next_era()

    def action_next_era(self) -> None:
        """The other era, the same seeded run replayed to the same fault."""
        era = ERA_NAMES[(ERA_NAMES.index(self.era) + 1) % len(ERA_NAMES)]
        target = self.record.seq if self.record is not None else 0
        run = PfaultRun(era, DEMO, seed=self.seed, order=DEMO_ORDER, trace=False)
        record = self._replay(run, target) if target <= REPLAY_LIMIT else None
        run.machine.trace = True
        run.machine.emit = self.pending_events.append
        self.run = run
        if record is None:
            self.record, self.phases, self.shown = None, [], 0
        else:
            self._show(record, self.shown if self.record is not None else 1)
        trade_off = key_conflict(ERAS[era], 30) or "the guest keeps all 32 keys"
        self.notify(f"era {era}: {ERAS[era].summary}.\n{trade_off}", timeout=6)
        self.flush_events(force=True)
        self.redraw()

    @staticmethod
    def _replay(run: PfaultRun, target: int) -> FaultRecord | None:
        """Run to fault number `target` untraced (fast), tracing only the last steps."""
        if target <= 0:
            return None
        while run.counters.faults < target - MAX_RETRIES:
            if run.next_fault() is None:
                return None
        run.machine.trace = True
        while (record := run.next_fault()) is not None:
            if record.seq >= target:
                return record
        return None
