"""The shadow-MMU screen: a guest faulting on the direct MMU (EPT on) or on shadow paging
(EPT off: guest processes, their walks, the vtlb), its pages by level with each root's
reach, one page's 512 sptes, MMIO sptes cached and hit, and zaps — the fast one
replayed batch by batch with its lock breaks, the slow one in a single hold (seeds 000,
002, 003 and 004, kvm-reference §4-§6)."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical

from engine.mmu.dag import RootReach, root_reach
from engine.mmu.mmu_pages import KvmMmuPage
from engine.mmu.role import ACC_EXEC_MASK, ACC_USER_MASK, ACC_WRITE_MASK
from engine.mmu.session import MmuSession, MmuStep
from engine.mmu.shadow_session import ShadowSession, ShadowStep
from engine.mmu.tdp_params import TdpMmuParams
from engine.mmu.tdp_session import TdpSession, TdpStep
from engine.mmu.views import spt_cells
from engine.pacing import Pacer

from ..widgets.lookup_bar import LookupBar
from ..widgets.mmu_panels import GuestPanel, MmuCounters, PageLevels, SptGrid
from .base import PlayerScreen
from .tdp_view import rcu_page, tdp_counter_lines, tdp_notes
from .zap_replay import ZapReplay

ENGINE_BUDGET = 0.008
REACH_SECONDS = 0.5  # the roots' reach (a networkx pass over every page) at most this often
#: `p` cycles these: (name, spte config, MMU: "tdp" | "direct" | "shadow")
PAGING_MODES = (
    ("EPT, TDP MMU (today's default)", "ept", "tdp"),
    ("EPT, direct pages (tdp_mmu=N)", "ept", "direct"),
    ("shadow paging (EPT off)", "shadow", "shadow"),
    ("shadow paging, 2011: no MMIO sptes", "2011-shadow-no-mmio-cache", "shadow"),
    ("EPT, 2011: no MMIO sptes (direct pages, tdp_mmu=N)", "2011-no-mmio-cache", "direct"),
)
SESSION_KINDS = {"tdp": TdpSession, "direct": MmuSession, "shadow": ShadowSession}
Session = MmuSession | ShadowSession | TdpSession
Step = MmuStep | ShadowStep | TdpStep


class ShadowMmuScreen(ZapReplay, PlayerScreen):
    BINDINGS = [
        Binding("space", "play_pause", "Play/Pause", tooltip="Play or pause the guest"),
        Binding("s", "step", "Step", tooltip="Reveal the next level of the fault (or run on)"),
        Binding("n", "next_exit", "Next", tooltip="Run until the next VM exit, paused"),
        Binding("plus,equals_sign", "faster", "Faster", key_display="+"),
        Binding("minus", "slower", "Slower", key_display="-"),
        Binding("w", "next_workload", "Workload",
                tooltip="kernbench, netperf, churn; with shadow paging also fork, pfault"),
        Binding("p", "next_paging", "Paging",
                tooltip="EPT with the TDP MMU (today), EPT with direct pages (tdp_mmu=N), "
                "shadow paging, and 2011 without MMIO sptes"),
        Binding("H", "toggle_huge_pages", "Huge pages", show=False,
                tooltip="EPT: 2M leaves where the slot allows, or 4K only (as while "
                "dirty logging)"),
        Binding("V", "toggle_vtlb", "vtlb", show=False,
                tooltip="Shadow paging: the 16-entry vtlb of seed 000 on or off"),
        Binding("z", "fast_zap", "Fast zap", tooltip="kvm_mmu_zap_all_fast: new generation"),
        Binding("Z", "slow_zap", "Slow zap", tooltip="The old kvm_mmu_zap_all: one lock hold"),
        Binding("i", "invalidate_roots", "Roots", show=False,
                tooltip="TDP MMU: kvm_tdp_mmu_invalidate_all_roots and the zap of the invalid "
                "roots, without the generation flip"),
        Binding("left_square_bracket", "select(-1)", "Up a level", show=False, key_display="["),
        Binding("right_square_bracket", "select(1)", "Down a level", show=False,
                key_display="]"),
    ]  # fmt: skip

    def __init__(self, session: Session, pacer: Pacer, *, seed: int = 1) -> None:
        super().__init__(pacer)
        self.session: Session = session
        self.seed = seed
        self.paging = {"tdp": 0, "ept": 1}.get(session.paging, 2)
        self.vtlb = True
        self.huge_pages = True
        self.reach: list[RootReach] = []
        self._reach_at = -REACH_SECONDS
        self._reach_key: object = None
        self.last: Step | None = None
        self.path: list[tuple[KvmMmuPage, int]] = []
        self.shown = 0  # levels of the path revealed
        self.depth = -1  # selected level on the path (-1: the deepest)
        self.zap_replay: list[tuple[int, int]] = []
        self.zap_kind = ""
        self._zap_at = 0.0
        self.zap_ghosts: list[KvmMmuPage] = []  # the zapped pages, oldest first (replay)
        self._unsubscribe = session.subscribe(self.pending_events.append)

    @property
    def view_name(self) -> str:  # type: ignore[override]
        return f"mmu-{self.session.layout.name}"

    def compose_main(self) -> ComposeResult:
        with Vertical(id="left"):
            yield LookupBar(id="fault-bar")
            yield PageLevels(id="levels")
            yield SptGrid(id="grid")
        with Vertical(id="mmu-right"):
            yield MmuCounters(id="mmu-counters")
            yield GuestPanel(id="guest")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#levels").border_title = "shadow pages by level"
        self.query_one("#mmu-counters").border_title = "kvm->arch"
        self.redraw()

    # -- the session ------------------------------------------------------------------

    def _replace_session(self, session: Session) -> None:
        """Start over on a new guest (same layout, seed and workload where it exists)."""
        self._unsubscribe()
        self.session = session
        self._unsubscribe = session.subscribe(self.pending_events.append)
        self.last, self.path, self.shown, self.depth = None, [], 0, -1
        self.zap_replay = []
        self._reach_key = None
        self.pending_events.clear()
        self.events_panel.reset()
        self.sync_player()

    def _new_session(self, workload: str) -> Session:
        _, config, kind = PAGING_MODES[self.paging]
        layout = self.session.layout
        if kind == "shadow":
            return ShadowSession(
                layout, workload=workload, seed=self.seed, spte_config=config, vtlb=self.vtlb
            )
        if kind == "tdp":
            params = TdpMmuParams(host_level=2 if self.huge_pages else 1)
            return TdpSession(
                layout, workload=workload, seed=self.seed, spte_config=config, params=params
            )
        return MmuSession(
            layout,
            workload=workload,
            seed=self.seed,
            spte_config=config,
            huge_pages=self.huge_pages,
        )

    def action_next_paging(self) -> None:
        self.action_set_paging((self.paging + 1) % len(PAGING_MODES))

    def action_set_paging(self, mode: int) -> None:
        """One of PAGING_MODES, on a new guest (scenarios use this directly)."""
        self.paging = mode
        workload = self.session.workload
        names = SESSION_KINDS[PAGING_MODES[self.paging][2]].workloads
        self._replace_session(self._new_session(workload if workload in names else names[0]))
        self.notify(f"{PAGING_MODES[self.paging][0]}: a new guest", timeout=3)
        self.redraw()

    def action_toggle_huge_pages(self) -> None:
        if isinstance(self.session, ShadowSession):
            self.notify("huge pages are an EPT setting here: press p first", severity="warning")
            return
        self.huge_pages = not self.huge_pages
        self._replace_session(self._new_session(self.session.workload))
        size = "2M leaves where the slot allows" if self.huge_pages else "4K leaves only"
        self.notify(f"{size}: a new guest", timeout=3)
        self.redraw()

    def action_toggle_vtlb(self) -> None:
        if not isinstance(self.session, ShadowSession):
            self.notify("the vtlb is for shadow paging: press p first", severity="warning")
            return
        self.vtlb = not self.vtlb
        self._replace_session(self._new_session(self.session.workload))
        self.notify(f"vtlb {'on' if self.vtlb else 'off'}: a new guest", timeout=3)
        self.redraw()

    # -- the player -------------------------------------------------------------------

    def animating_alone(self) -> bool:
        return bool(self.zap_replay)  # a zap replays even while paused

    def show_state(self) -> None:
        self.redraw()

    def tick(self, now: float, dt: float) -> None:
        if self.zap_replay:
            self._advance_zap(now)
        stalled = bool(self.zap_replay) and self.zap_kind == "slow zap"  # mmu_lock is held
        started = 0 if stalled else self.pacer.advance(dt)
        if started:
            self._run(started)
        elif self.path and self.pacer.animating:
            self.shown = self.pacer.revealed(len(self.path))
        self.flush_events()
        self.redraw()

    def _run(self, count: int) -> Step | None:
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

    def _show_step(self, step: Step) -> None:
        self.last = step
        self.path = self.session.path_of(step)  # type: ignore[arg-type]
        self.shown = self.pacer.revealed(len(self.path)) if self.pacer.playing else 1
        self.depth = -1

    # -- drawing --------------------------------------------------------------------

    def redraw(self) -> None:
        session, mmu = self.session, self.session.mmu
        path_pages = [sp for sp, _ in self.path[: self.shown]]
        selected, marked = self._selected()
        levels, zapping_now = self._zap_levels()
        panel = self.query_one(PageLevels)
        tdp = isinstance(session, TdpSession)
        panel.border_title = "TDP MMU page tables by level" if tdp else "shadow pages by level"
        panel.show(
            levels,
            path_pages,
            selected,
            mmu.pages.mmu_valid_gen,
            self._zap_caption(),
            self._root_reach(),
            zapping_now,
            is_obsolete=mmu.pages.is_obsolete,
            notes=tdp_notes(session),
        )
        grid = self.query_one(SptGrid)
        pending = rcu_page(session) if selected is None else None
        if pending is not None:
            grid.show(spt_cells(mmu.pages, pending, mmu.cfg, 0), None)  # type: ignore[arg-type]
            grid.border_title = (
                f"spt of sp gfn {pending.gfn:#x} l{pending.role.level}: RCU pending, "
                "its sptes frozen until the grace period ends"
            )
        elif selected is None:
            grid.show_text(grid.empty_text())
            grid.border_title = "spt: no page selected (step to a fault)"
        else:
            gen = session.vm.generation(selected.role.smm)
            grid.show(spt_cells(mmu.pages, selected, mmu.cfg, gen), marked)  # type: ignore[arg-type]
            obsolete = " (obsolete)" if mmu.pages.is_obsolete(selected) else ""
            if selected.unsync:
                obsolete += " (unsync: stale until the next CR3 load or INVLPG)"
            gen = "" if self._era_2011() else f" gen {selected.mmu_valid_gen}"
            grid.border_title = (
                f"spt of sp gfn {selected.gfn:#x} l{selected.role.level}{gen}{obsolete}"
            )
        self.query_one(LookupBar).show_content(self._fault_words())
        self.query_one(MmuCounters).show(self._counter_lines(), mmu.pages.lock_holds)
        self._show_guest()
        self._update_header()

    def _root_reach(self) -> list[RootReach]:
        """Each root's reach: a networkx pass over every page, so while playing at most
        every REACH_SECONDS; paused, whenever the pages changed."""
        pages, roots = self.session.mmu.pages, self.session.mmu.roots
        key = (self.session.steps, pages.n_used_mmu_pages, pages.mmu_valid_gen,
               tuple(sorted((v, r.seq) for v, r in roots.items())))  # fmt: skip
        now = time.monotonic()
        if key == self._reach_key or (self.pacer.playing and now - self._reach_at < REACH_SECONDS):
            return self.reach
        self._reach_at, self._reach_key = now, key
        self.reach = root_reach(pages, roots)  # type: ignore[arg-type]
        return self.reach

    def _show_guest(self) -> None:
        panel = self.query_one(GuestPanel)
        session = self.session
        if not isinstance(session, ShadowSession):
            panel.border_title = "guest walk · vtlb"
            panel.show_tdp()
            return
        vcpu = self.last.access.vcpu if self.last is not None else 0
        walk_title = "guest walk (kvm_mmu_paging_element)"
        if isinstance(self.last, ShadowStep):
            walk_title = f"walk of {self.last.access.label}"
        vtlbs = session.mmu.vtlbs
        if vtlbs is None:
            entries, vtlb_title = [], "vtlb off (V turns it on)"
        else:
            vtlb = vtlbs[vcpu]
            entries = [(e.page_number, e.frame_number, _access(e.access)) for e in vtlb.entries()]
            vtlb_title = (
                f"vtlb vcpu {vcpu}: {len(entries)}/{len(vtlb.slots)} · hits {vtlb.hits} "
                f"misses {vtlb.misses}"
            )
        panel.border_title = "guest walk · vtlb"
        panel.show(session.last_walk, walk_title, entries, vtlb_title)

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
        words = f"vcpu {access.vcpu} {kind} {access.label}: {walked} → {ret}"
        if isinstance(step, ShadowStep) and step.guest:
            words += f", #PF injected: guest {step.guest}"
        return words + (f" · {step.update}" if step.update else "")

    def _counter_lines(self) -> list[tuple[str, str]]:
        session, pages = self.session, self.session.mmu.pages
        if isinstance(session, TdpSession):
            lines = tdp_counter_lines(session)
            lines += [(f"RET_PF_{n}", str(c)) for n, c in sorted(session.results.items())]
            return lines + [(name, str(v)) for name, v in session.mmu.stat.items() if v]
        vcpu = self.last.access.vcpu if self.last is not None else 0
        lines = [
            ("mmu_valid_gen", self._valid_gen_text()),
            ("accesses / exits", f"{session.steps} / {session.exits}"),
        ]
        if isinstance(session, ShadowSession):
            vtlbs = session.mmu.vtlbs
            lines += [
                ("guest walks", str(session.guest_walks)),
                ("vtlb walks saved", str(vtlbs.walks_saved) if vtlbs else "vtlb off"),
                ("emulator translations", str(session.emulator_walks)),
                ("cr3 loads / processes", f"{session.cr3_loads} / {len(session.os.processes)}"),
                # guest page-table writes (kvm->stat): unsync pages, emulated pte writes
                ("unsync/pte_wr/flooded", " · ".join(str(pages.stat[n]) for n in _PT_WRITES)),
                (f"prev_roots vcpu {vcpu}", _prev_roots(session, vcpu)),
            ]
        lines += [
            ("memslot lookups", str(session.vm.memslot_lookups)),
            ("memslots generation", str(session.vm.generation())),
            ("pages used / max", f"{pages.n_used_mmu_pages} / {pages.n_max_mmu_pages}"),
        ]
        lines += [(f"RET_PF_{name}", str(count)) for name, count in sorted(session.results.items())]
        lines += [(name, str(value)) for name, value in session.mmu.stat.items() if value]
        info = session.mmu.mmio_info
        lines += [
            (f"mmio info vcpu {vcpu}", info.describe(vcpu, session.vm.generation())),
            ("mmio info hits", f"gva {info.gva_hits} gpa {info.gpa_hits}"),
        ]
        return lines

    def _era_2011(self) -> bool:
        return PAGING_MODES[self.paging][1].startswith("2011")

    def _valid_gen_text(self) -> str:
        """mmu_valid_gen and its era; none in 2011 (added in 2013, seed 003, §4.4)."""
        if self._era_2011():
            return "none (added in 2013)"
        return f"{self.session.mmu.pages.mmu_valid_gen} ({self.session.mmu.pages.gen_era} era)"

    def _update_header(self) -> None:
        state = "▶ playing" if self.pacer.playing else "⏸ paused"
        mmu = "TDP MMU" if isinstance(self.session, TdpSession) else "shadow MMU"
        self.title = f"mmuscope · {self.session.layout.name} · {mmu}"
        self.sub_title = (
            f"{PAGING_MODES[self.paging][0]} · {self.session.workload} · mmu_valid_gen "
            f"{self._valid_gen_text().split(' (')[0]} · {state} {self.pacer.speed:g}/s"
        )

    # -- export -----------------------------------------------------------------------

    def export_dot(self) -> tuple[str, int] | None:
        """The shadow pages as a graph, the last fault's path filled."""
        from engine.export.mmu_dot import pages_to_dot

        pages = self.session.mmu.pages
        title = f"{self.session.layout.name} · shadow pages · mmu_valid_gen {pages.mmu_valid_gen}"
        path = [sp for sp, _ in self.path]
        dot = pages_to_dot(pages, title=title, path=path)  # type: ignore[arg-type]
        return dot, pages.n_used_mmu_pages

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
        names = self.session.workloads
        self.action_set_workload(names[(names.index(self.session.workload) + 1) % len(names)])

    def action_set_workload(self, name: str) -> None:
        self.session.set_workload(name)
        self.last, self.path, self.shown = None, [], 0
        self.redraw()

    def action_run(self, count: int) -> None:
        """Run `count` guest accesses at once (paused), showing the last exit."""
        self.pause()
        shown = None
        for _ in range(count):
            step = self.session.step()
            shown = step if step.exited else shown
        if shown is not None:
            self._show_step(shown)
            self.shown = len(self.path)
        self.flush_events(force=True)
        self.redraw()

    def action_next_result(self, name: str) -> None:
        """Run to the next exit whose fault returns RET_PF_<name> (e.g. EMULATE)."""
        self._run_until(lambda step: step.ret is not None and step.ret.name == name)

    def action_next_exit_at(self, address: int) -> None:
        """Run to the next exit on the page of `address` (a gpa under EPT, a gva under
        shadow paging): scenarios follow one device page with it, e.g. the doorbell."""
        self._run_until(
            lambda step: (
                getattr(step.access, "gpa", getattr(step.access, "gva", -1)) >> 12 == address >> 12
            )
        )

    def _run_until(self, wanted: Callable[[Step], bool]) -> None:
        self.pause()
        for _ in range(10_000):
            step = self.session.step()
            if step.exited and wanted(step):
                self._show_step(step)
                self.shown = len(self.path)
                break
        self.flush_events(force=True)
        self.redraw()

    def action_memslot_update(self) -> None:
        """One memslot update (a BAR-like slot created or deleted): the generation moves
        on, cached MMIO sptes go stale, and a DELETE zaps."""
        from engine.mmu.session import churn_update

        done = churn_update(self.session.vm)
        self.notify(f"memslot update: {done}; generation {self.session.vm.generation()}")
        self.flush_events(force=True)
        self.redraw()

    def action_near_wrap(self, left: int = 2) -> None:
        """Fast-forward to `left` memslot swaps (a CREATE is one, a DELETE two) before the
        MMIO generation's 19 bits wrap (262,144 updates with two address spaces)."""
        from engine.mmu.spte import updates_until_mmio_wrap

        vm = self.session.vm
        skip = max(0, updates_until_mmio_wrap(vm.generation(), vm.address_spaces) - left)
        vm.skip_updates(skip)
        self.notify(f"skipped {skip:,} memslot updates: generation {vm.generation():#x}")
        self.redraw()

    def action_select(self, delta: int) -> None:
        revealed = len(self.path[: max(self.shown, 1)])
        if not revealed:
            return
        current = self.depth % revealed if self.depth < 0 else self.depth
        self.depth = max(0, min(revealed - 1, current + delta))
        self.redraw()


def _access(access: int) -> str:
    """ACC_* bits as letters, r always (a present translation is readable)."""
    return "r" + "".join(
        letter if access & mask else "-"
        for letter, mask in (("w", ACC_WRITE_MASK), ("u", ACC_USER_MASK), ("x", ACC_EXEC_MASK))
    )


_PT_WRITES = ("mmu_unsync", "mmu_pte_write", "mmu_flooded")


def _prev_roots(session: ShadowSession, vcpu: int) -> str:
    """The vCPU's cached roots (fast_pgd_switch), newest first, by the cr3 they shadow."""
    mmu = session.mmu
    if not mmu.prev_roots_enabled:
        return "none before 4.19"
    cached = [f"{sp.gfn:#x}" for sp in mmu.prev_roots.get(vcpu, []) if sp is not None]
    return (" ".join(cached) or "empty") + f" · hits {mmu.stat['prev_roots_hits']}"
