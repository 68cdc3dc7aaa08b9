"""The shadow-MMU screen: a guest faulting on the direct MMU (EPT on), its shadow pages by
level, one page's 512 sptes, MMIO sptes cached and hit, and zaps — the fast one replayed
batch by batch with its lock breaks, the slow one in a single hold (seeds 000 and 003,
kvm-reference §4-§6)."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical

from engine.mmu.mmu_pages import KvmMmuPage
from engine.mmu.session import MMU_WORKLOADS, MmuSession, MmuStep
from engine.mmu.views import fault_path, pages_by_level, spt_cells, zap_batches
from engine.pacing import Pacer

from ..widgets.lookup_bar import LookupBar
from ..widgets.mmu_panels import MmuCounters, PageLevels, SptGrid
from .base import PlayerScreen

ENGINE_BUDGET = 0.008
ZAP_BATCH_SECONDS = 0.25  # one lock hold of a replayed zap on screen


class ShadowMmuScreen(PlayerScreen):
    BINDINGS = [
        Binding("space", "play_pause", "Play/Pause", tooltip="Play or pause the guest"),
        Binding("s", "step", "Step", tooltip="Reveal the next level of the fault (or run on)"),
        Binding("n", "next_exit", "Next", tooltip="Run until the next VM exit, paused"),
        Binding("plus,equals_sign", "faster", "Faster", key_display="+"),
        Binding("minus", "slower", "Slower", key_display="-"),
        Binding("w", "next_workload", "Workload", tooltip="kernbench, netperf, churn"),
        Binding("z", "fast_zap", "Fast zap", tooltip="kvm_mmu_zap_all_fast: new generation"),
        Binding("Z", "slow_zap", "Slow zap", tooltip="The old kvm_mmu_zap_all: one lock hold"),
        Binding("left_square_bracket", "select(-1)", "Up a level", show=False, key_display="["),
        Binding("right_square_bracket", "select(1)", "Down a level", show=False,
                key_display="]"),
    ]  # fmt: skip

    def __init__(self, session: MmuSession, pacer: Pacer) -> None:
        super().__init__(pacer)
        self.session = session
        self.last: MmuStep | None = None
        self.path: list[tuple[KvmMmuPage, int]] = []
        self.shown = 0  # levels of the path revealed
        self.depth = -1  # selected level on the path (-1: the deepest)
        self.zap_replay: list[tuple[int, int]] = []
        self.zap_kind = ""
        self._zap_at = 0.0
        session.subscribe(self.pending_events.append)

    @property
    def view_name(self) -> str:  # type: ignore[override]
        return f"mmu-{self.session.layout.name}"

    def compose_main(self) -> ComposeResult:
        with Vertical(id="left"):
            yield LookupBar(id="fault-bar")
            yield PageLevels(id="levels")
            yield SptGrid(id="grid")
        yield MmuCounters(id="mmu-counters")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#levels").border_title = "shadow pages by level"
        self.query_one("#mmu-counters").border_title = "kvm->arch"
        self.redraw()

    # -- the player -------------------------------------------------------------------

    def animating_alone(self) -> bool:
        return bool(self.zap_replay)  # a zap replays even while paused

    def show_state(self) -> None:
        self.redraw()

    def tick(self, now: float, dt: float) -> None:
        if self.zap_replay:
            self._advance_zap(now)
        started = self.pacer.advance(dt)
        if started:
            self._run(started)
        elif self.path and self.pacer.animating:
            self.shown = self.pacer.revealed(len(self.path))
        self.flush_events()
        self.redraw()

    def _run(self, count: int) -> MmuStep | None:
        """Run up to `count` accesses in the engine budget; show the last VM exit."""
        deadline = time.perf_counter() + ENGINE_BUDGET
        shown = None
        for _ in range(count):
            step = self.session.step()
            if step.exited:
                shown = step
            if time.perf_counter() > deadline:
                break
        if shown is not None:
            self._show_step(shown)
        return shown

    def _show_step(self, step: MmuStep) -> None:
        self.last = step
        root = self.session.mmu.roots.get(step.access.vcpu)
        gfn = step.access.gpa >> 12
        self.path = fault_path(self.session.mmu.pages, root, gfn) if root else []
        self.shown = self.pacer.revealed(len(self.path)) if self.pacer.playing else 1
        self.depth = -1

    # -- drawing --------------------------------------------------------------------

    def redraw(self) -> None:
        session, mmu = self.session, self.session.mmu
        path_pages = [sp for sp, _ in self.path[: self.shown]]
        selected, marked = self._selected()
        zapping = self._zap_caption()
        self.query_one(PageLevels).show(
            pages_by_level(mmu.pages), path_pages, selected, mmu.pages.mmu_valid_gen, zapping
        )
        grid = self.query_one(SptGrid)
        if selected is None:
            grid.show_text(grid.empty_text())
            grid.border_title = "spt: no page selected (step to a fault)"
        else:
            gen = session.vm.generation(selected.role.smm)
            grid.show(spt_cells(mmu.pages, selected, mmu.cfg, gen), marked)
            obsolete = " (obsolete)" if mmu.pages.is_obsolete(selected) else ""
            grid.border_title = (
                f"spt of sp gfn {selected.gfn:#x} l{selected.role.level} "
                f"gen {selected.mmu_valid_gen}{obsolete}"
            )
        self.query_one(LookupBar).show_content(self._fault_words())
        self.query_one(MmuCounters).show(self._counter_lines(), mmu.pages.lock_holds)
        self._update_header()

    def _selected(self) -> tuple[KvmMmuPage | None, int | None]:
        revealed = self.path[: max(self.shown, 1)]
        if not revealed:
            return None, None
        sp, index = (
            revealed[self.depth] if -len(revealed) <= self.depth < len(revealed) else revealed[-1]
        )
        return sp, index

    def _fault_words(self) -> str:
        step = self.last
        if step is None:
            return "no VM exit yet: space plays, n runs to the next exit, z zaps fast"
        access = step.access
        kind = "write" if access.write else "read"
        ret = f"RET_PF_{step.ret.name}" if step.ret is not None else "no exit"
        walked = f"{min(self.shown, len(self.path))}/{len(self.path)} levels"
        return f"vcpu {access.vcpu} {kind} gpa {access.gpa:#x}: {walked} → {ret}"

    def _counter_lines(self) -> list[tuple[str, str]]:
        session, pages = self.session, self.session.mmu.pages
        lines = [
            ("mmu_valid_gen", f"{pages.mmu_valid_gen} ({pages.gen_era} era)"),
            ("memslots generation", str(session.vm.generation())),
            ("pages used / max", f"{pages.n_used_mmu_pages} / {pages.n_max_mmu_pages}"),
            ("accesses / exits", f"{session.steps} / {session.exits}"),
        ]
        lines += [(f"RET_PF_{name}", str(count)) for name, count in sorted(session.results.items())]
        lines += [(name, str(value)) for name, value in session.mmu.stat.items() if value]
        return lines

    def _update_header(self) -> None:
        state = "▶ playing" if self.pacer.playing else "⏸ paused"
        self.title = f"mmuscope · {self.session.layout.name} · shadow MMU"
        self.sub_title = (
            f"EPT, direct pages · {self.session.workload} · mmu_valid_gen "
            f"{self.session.mmu.pages.mmu_valid_gen} · {state} {self.pacer.speed:g}/s"
        )

    # -- export -----------------------------------------------------------------------

    def export_dot(self) -> tuple[str, int] | None:
        """The shadow pages as a graph, the last fault's path filled."""
        from engine.export.mmu_dot import pages_to_dot

        pages = self.session.mmu.pages
        title = f"{self.session.layout.name} · shadow pages · mmu_valid_gen {pages.mmu_valid_gen}"
        path = [sp for sp, _ in self.path]
        return pages_to_dot(pages, title=title, path=path), pages.n_used_mmu_pages

    # -- zaps -------------------------------------------------------------------------

    def _start_zap(self, kind: str, zapped: int) -> None:
        holds = self.session.mmu.pages.lock_holds
        self.zap_kind = kind
        self.zap_replay = zap_batches(holds) if zapped else []
        self._zap_at = time.monotonic()
        self.path, self.shown = [], 0
        self.notify(f"{kind}: {zapped} pages in {len(holds)} lock holds", timeout=4)
        self.sync_player()
        self.flush_events(force=True)
        self.redraw()

    def _advance_zap(self, now: float) -> None:
        if now - self._zap_at >= ZAP_BATCH_SECONDS:
            self._zap_at = now
            self.zap_replay.pop(0)
            if not self.zap_replay:
                self.sync_player()

    def _zap_caption(self) -> str:
        if not self.zap_replay:
            return ""
        done, hold = self.zap_replay[0]
        left = len(self.zap_replay) - 1
        return (
            f"{self.zap_kind}: mmu_lock held, zapping pages {done + 1}-{done + hold}; "
            f"{left} more holds after a lock break"
        )

    def action_fast_zap(self) -> None:
        self._start_zap("fast zap", self.session.mmu.zap_all_fast())

    def action_slow_zap(self) -> None:
        self._start_zap("slow zap", self.session.mmu.pages.zap_all())

    # -- actions ------------------------------------------------------------------

    def action_step(self) -> None:
        self.pause()
        if self.path and self.shown < len(self.path):
            self.shown += 1
        else:
            self._run_to_exit()
            self.shown = 1
        self.flush_events(force=True)
        self.redraw()

    def action_next_exit(self) -> None:
        self.pause()
        self._run_to_exit()
        self.shown = len(self.path)
        self.flush_events(force=True)
        self.redraw()

    def _run_to_exit(self) -> None:
        for _ in range(10_000):
            step = self.session.step()
            if step.exited:
                self._show_step(step)
                return

    def action_next_workload(self) -> None:
        names = MMU_WORKLOADS
        self.session.workload = names[(names.index(self.session.workload) + 1) % len(names)]
        self.redraw()

    def action_select(self, delta: int) -> None:
        revealed = len(self.path[: max(self.shown, 1)])
        if not revealed:
            return
        current = self.depth % revealed if self.depth < 0 else self.depth
        self.depth = max(0, min(revealed - 1, current + delta))
        self.redraw()
