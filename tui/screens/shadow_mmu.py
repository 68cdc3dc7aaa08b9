"""The shadow-MMU screen: a guest faulting on the direct MMU (EPT on) or on shadow paging
(EPT off: guest processes, their walks, the vtlb), its pages by level with each root's
reach, one page's 512 sptes, MMIO sptes cached and hit, and zaps — the fast one
replayed batch by batch with its lock breaks, the slow one in a single hold (the
memslot-search, PTE_LIST_EXT, fast-zap and POWER-keys threads, docs/kvm.md §4-§6).

Its parts: the paging modes and the switches that start a new guest (shadow_mmu_modes),
the keys that drive the guest (shadow_mmu_actions), dirty logging and aging, which make
fast_page_fault fire (shadow_mmu_fast), the side panels' words
(shadow_mmu_words), the zaps replayed (zap_replay) and the TDP MMU's roots (tdp_view)."""

from __future__ import annotations

import time

from mmuscope.engine.mmu.mmu_pages import KvmMmuPage, MmuPages
from mmuscope.engine.mmu.tdp.session import TdpSession
from mmuscope.engine.mmu.views import RootReach, root_reach, spt_cells
from mmuscope.engine.pacing import Pacer
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical

from ..widgets.fit import fit_title, show_title
from ..widgets.lookup_bar import FaultBar
from ..widgets.mmu_panels import GuestPanel, MmuCounters, PageLevels
from ..widgets.spt_grid import SptGrid
from .base import PlayerScreen
from .shadow_mmu_actions import GuestActions
from .shadow_mmu_fast import FastPathActions
from .shadow_mmu_modes import PAGING_MODES, PagingModes, Session, Step, era_2011
from .shadow_mmu_words import counter_lines, fault_words, show_guest, valid_gen_text
from .tdp_view import rcu_page, tdp_notes
from .zap_replay import ZapReplay

__all__ = ["PAGING_MODES", "ShadowMmuScreen"]

ENGINE_BUDGET = 0.008
REACH_SECONDS = 0.5  # the roots' reach (a networkx pass over every page) at most this often


class ShadowMmuScreen(ZapReplay, PagingModes, GuestActions, FastPathActions, PlayerScreen):
    BINDINGS = [
        Binding("space", "play_pause", "Play/Pause", tooltip="Play or pause the guest"),
        Binding("s", "step", "Step", tooltip="Reveal the next level of the fault (or run on)"),
        Binding("n", "next_exit", "Next", tooltip="Run until the next VM exit, paused"),
        Binding("plus,equals_sign", "faster", "Faster", key_display="+"),
        Binding("minus", "slower", "Slower", key_display="-"),
        Binding("w", "next_workload", "Workload",
                tooltip="kernbench, netperf, churn; EPT also dirty, migrate (dirty logging "
                "passes: fast_page_fault); shadow paging also fork, pfault"),
        Binding("p", "next_paging", "Paging",
                tooltip="EPT with the TDP MMU (today), EPT with direct pages (tdp_mmu=N), "
                "shadow paging, 2011 without MMIO sptes, EPT without A/D bits"),
        Binding("H", "toggle_huge_pages", "Huge pages", show=False,
                tooltip="EPT: 2M leaves where the slot allows, or 4K only (as while "
                "dirty logging); shadow paging: the guest kernel's 2M text and direct map"),
        Binding("B", "next_host_pages", "Host pages", show=False,
                tooltip="The host backs guest memory with THP 2M, hugetlbfs 1G or 4K "
                "pages (host_pfn_mapping_level)"),
        Binding("X", "toggle_nx_huge_pages", "NX huge pages", show=False,
                tooltip="kvm.nx_huge_pages on or off: a fetch splits a huge page, "
                "the recovery worker rejoins it"),
        Binding("M", "toggle_pml", "PML", show=False,
                tooltip="EPT: kvm_intel.enable_pml on (dirty logging clears D bits, the CPU "
                "logs writes) or off (write protection: fast_page_fault fixes the writes)"),
        Binding("V", "toggle_vtlb", "vtlb", show=False,
                tooltip="Shadow paging: the memslot-search thread's 16-entry vtlb on or off"),
        Binding("z", "fast_zap", "Fast zap", tooltip="kvm_mmu_zap_all_fast: new generation"),
        Binding("Z", "slow_zap", "Slow zap", tooltip="The old kvm_mmu_zap_all: one lock hold"),
        Binding("i", "invalidate_roots", "Roots", show=False,
                tooltip="TDP MMU: kvm_tdp_mmu_invalidate_all_roots and the zap of the invalid "
                "roots, without the generation flip"),
        Binding("L", "toggle_dirty_logging", "Dirty log", show=False,
                tooltip="KVM_MEM_LOG_DIRTY_PAGES on the largest RAM slot: with PML its sptes "
                "lose D, else W and fast_page_fault fixes the next write to each (M)"),
        Binding("G", "get_dirty_log", "Get log", show=False,
                tooltip="KVM_GET_DIRTY_LOG: the dirty bitmap returned and cleared, its pages "
                "write-protected again (a live migration's next pass)"),
        Binding("A", "age_memory", "Age", show=False,
                tooltip="kvm_age_gfn over guest RAM (page reclaim's clear_young): without A/D "
                "bits sptes become access-tracked, restored by fast_page_fault"),
        Binding("left_square_bracket", "select(-1)", "Up a level", show=False, key_display="[",
                tooltip="Show the walk's level above in the grid"),
        Binding("right_square_bracket", "select(1)", "Down a level", show=False,
                key_display="]", tooltip="Show the walk's level below in the grid"),
    ]  # fmt: skip

    def __init__(self, session: Session, pacer: Pacer, *, seed: int = 1) -> None:
        super().__init__(pacer)
        self.session: Session = session
        self.seed = seed
        self.paging = {"tdp": 0, "ept": 1}.get(session.paging, 2)
        self.vtlb = True
        self.huge_pages = True
        self.host_level = 2  # THP 2M, as TdpMmuParams
        self.nx_huge_pages = False  # nx_huge_pages=auto on a CPU without ITLB multihit
        self.pml = True  # kvm_intel.enable_pml (M): dirty logging by PML or write protection
        self.kernel_2m = False  # shadow paging: the guest kernel's 2M pages (H)
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
            yield FaultBar(id="fault-bar")
            yield PageLevels(id="levels")
            yield SptGrid(id="grid")
        with Vertical(id="mmu-right"):
            yield MmuCounters(id="mmu-counters")
            yield GuestPanel(id="guest")

    def on_mount(self) -> None:
        show_title(self.query_one("#levels"), "shadow pages by level")
        show_title(self.query_one("#mmu-counters"), "kvm->arch")
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
        show_title(panel, "TDP MMU page tables by level" if tdp else "shadow pages by level")
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
            held_roots=held_roots(mmu.pages),
        )
        grid = self.query_one(SptGrid)
        pending = rcu_page(session) if selected is None else None
        if pending is not None:
            grid.show(spt_cells(mmu.pages, pending, mmu.cfg, 0), None)  # type: ignore[arg-type]
            page = f"spt of sp gfn {pending.gfn:#x} l{pending.role.level}: RCU pending"
            show_title(
                grid,
                fit_title(
                    [f"{page}, its sptes frozen until the grace period ends", f"{page}, frozen"],
                    grid.outer_size.width,
                ),
            )
        elif selected is None:
            grid.show_empty()
            show_title(grid, "spt: no page selected (step to a fault)")
        else:
            generation = session.vm.generation(selected.role.smm)
            grid.show(spt_cells(mmu.pages, selected, mmu.cfg, generation), marked)  # type: ignore[arg-type]
            obsolete = " (obsolete)" if mmu.pages.is_obsolete(selected) else ""
            gen = "" if era_2011(self.paging) else f" gen {selected.mmu_valid_gen}"
            page = f"spt of sp gfn {selected.gfn:#x} l{selected.role.level}{gen}{obsolete}"
            unsync = [" (unsync: stale until the next CR3 load or INVLPG)", " (unsync)"]
            versions = [page + why for why in unsync] if selected.unsync else [page]
            show_title(grid, fit_title(versions, grid.outer_size.width))
        words = fault_words(self.last, self.shown, len(self.path))
        self.query_one(FaultBar).show_words(words)
        lines = counter_lines(session, self.last, self.paging)
        self.query_one(MmuCounters).show(lines, mmu.pages.lock_holds, self.caption_text)
        show_guest(self.query_one(GuestPanel), session, self.last)
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

    def _selected(self) -> tuple[KvmMmuPage | None, int | None]:
        revealed = self.path[: max(self.shown, 1)]
        if not revealed:
            return None, None
        sp, index = (
            revealed[self.depth] if -len(revealed) <= self.depth < len(revealed) else revealed[-1]
        )
        return sp, index

    def _update_header(self) -> None:
        state = "▶ playing" if self.pacer.playing else "⏸ paused"
        gen = valid_gen_text(self.session, self.paging).split(" (")[0]
        mmu = "TDP MMU" if isinstance(self.session, TdpSession) else "shadow MMU"
        self.title = f"mmuscope · {self.session.layout.name} · {mmu}"
        self.sub_title = (
            f"{PAGING_MODES[self.paging][0]} · {self.session.workload} · mmu_valid_gen "
            f"{gen} · {state} {self.pacer.speed:g}/s"
        )

    # -- export -----------------------------------------------------------------------

    def export_dot(self) -> tuple[str, int] | None:
        """The shadow pages as a graph, the last fault's path filled."""
        from mmuscope.engine.export.mmu_dot import pages_to_dot

        pages = self.session.mmu.pages
        title = f"{self.session.layout.name} · shadow pages · mmu_valid_gen {pages.mmu_valid_gen}"
        path = [sp for sp, _ in self.path]
        dot = pages_to_dot(pages, title=title, path=path)  # type: ignore[arg-type]
        return dot, pages.n_used_mmu_pages


def held_roots(pages: object) -> list[KvmMmuPage]:
    """Zapped shadow roots a vCPU still runs on (the TDP MMU has none of these: its
    roots are counted and freed through RCU, tui/screens/tdp_view.py)."""
    return list(pages.invalid_roots.values()) if isinstance(pages, MmuPages) else []
