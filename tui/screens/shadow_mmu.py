"""The shadow-MMU screen: a guest faulting on the direct MMU (EPT on) or on shadow paging
(EPT off: guest processes, their walks, the vtlb), its pages by level with each root's
reach, one page's 512 sptes, MMIO sptes cached and hit, and zaps — the fast one
replayed batch by batch with its lock breaks, the slow one in a single hold (the
memslot-search, PTE_LIST_EXT, fast-zap and POWER-keys threads, docs/kvm.md §4-§6).

One class, in sections:
- the player, and the keys and scenario actions that drive the guest: step one level of
  a fault's walk or run to the next VM exit, run to the next `RET_PF_*` of a kind or to
  the next exit on one page, switch workloads, a memslot update (the generation moves on,
  cached MMIO sptes go stale, a DELETE zaps), a fast-forward to just before the MMIO
  generation wraps, the selection of a level on the fault's path;
- the paging modes (`p`, shadow_mmu_modes.PAGING_MODES) and the switches that start a new
  guest: EPT huge pages (`H`), host backing (`B`), NX huge pages (`X`), PML (`M`) and the
  shadow-paging vtlb (`V`);
- the keys that make `fast_page_fault()` fire (engine/mmu/fast_pf.py, 6.18 mmu.c): `L`
  dirty logging on the largest RAM slot, `G` KVM_GET_DIRTY_LOG, `A` kvm_age_gfn over
  guest RAM.  The direct MMU (tdp_mmu=N) and the TDP MMU call the fast path; shadow
  paging does not (`FNAME(page_fault)`), and there the keys say so.  With EPT and PML
  the CPU logs dirty pages itself: dirty logging clears D bits and no write faults;
- the zaps, replayed: the pages a zap took stay on screen, dimmed, and vanish hold by
  hold (the hold being replayed in red), each hold as long as its pages; a slow zap
  stalls the guest while its one hold replays.  Fast zap of 2013
  (`kvm_mmu_zap_all_fast`: BATCH_ZAP_PAGES per mmu_lock hold) and of today (TDP MMU roots
  invalidated, then zapped root by root with mmu_lock held for read, their page tables
  left to RCU), the old slow zap, and today's root invalidation alone (`i`);
- the drawing: the side panels' words are shadow_mmu_words, the TDP MMU's roots
  tdp_view."""

from __future__ import annotations

import time
from collections.abc import Callable

from mmuscope.engine.mmu.direct.session import MmuSession
from mmuscope.engine.mmu.mmu_pages import KvmMmuPage, MmuPages
from mmuscope.engine.mmu.params import TdpMmuParams
from mmuscope.engine.mmu.shadow.session import ShadowSession
from mmuscope.engine.mmu.tdp.session import TdpSession
from mmuscope.engine.mmu.views import (
    LevelSummary,
    RootReach,
    levels_of,
    root_reach,
    spt_cells,
    zap_batches,
)
from mmuscope.engine.pacing import Pacer
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical

from ..widgets.fit import fit_title, show_title
from ..widgets.lookup_bar import FaultBar
from ..widgets.mmu_panels import GuestPanel, MmuCounters, PageLevels
from ..widgets.spt_grid import SptGrid
from .base import PlayerScreen
from .shadow_mmu_modes import PAGING_MODES, SESSION_KINDS, Session, Step, era_2011
from .shadow_mmu_words import counter_lines, fault_words, show_guest, valid_gen_text
from .tdp_view import rcu_page, tdp_notes, tdp_zap_caption

__all__ = ["PAGING_MODES", "ShadowMmuScreen"]

ENGINE_BUDGET = 0.008
REACH_SECONDS = 0.5  # the roots' reach (a networkx pass over every page) at most this often
RUN_LIMIT = 10_000  # guest accesses a "run to" action tries before it gives up
NO_FAST_PATH = (
    "shadow paging has no fast_page_fault (FNAME(page_fault) takes mmu_lock): press p for EPT"
)
ZAP_BATCH_SECONDS = 0.25  # one lock hold of a replayed zap on screen, at least
ZAP_PAGE_SECONDS = 0.025  # and this long per page zapped under it (10 pages: 0.25 s)
ZAP_HOLD_MAX_SECONDS = 8.0  # the longest hold shown (a slow zap of a big guest)


class ShadowMmuScreen(PlayerScreen):
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

    # Its fault bar may take a fourth row at 120 columns: a fast page fault's spte before
    # and after, and the dirty log pass that made it.  The guest panel is as tall as its
    # rows (the vtlb's 16 entries in two columns at 120), up to 16; the counters take the
    # rest and drop their least important rows.  Short, the guest panel takes at most 60%
    # of the column (9 of 15 rows at 80x24, 6 under a scenario's caption).
    DEFAULT_CSS = """
    ShadowMmuScreen #fault-bar { max-height: 4; }
    ShadowMmuScreen.-narrow #fault-bar { max-height: 2; }
    ShadowMmuScreen #levels { height: 1fr; }
    ShadowMmuScreen #grid { height: 19; }
    ShadowMmuScreen #mmu-right { width: 2fr; min-width: 46; }
    ShadowMmuScreen.-narrow #mmu-right { width: 34; min-width: 0; }
    ShadowMmuScreen #mmu-counters { height: 1fr; }
    ShadowMmuScreen #guest { height: auto; max-height: 16; }
    ShadowMmuScreen.-captioned #grid { height: 11; }
    ShadowMmuScreen.-short #grid { height: 8; }
    ShadowMmuScreen.-short #guest { max-height: 60%; }
    ShadowMmuScreen.-short #mmu-counters { min-height: 4; }
    ShadowMmuScreen.-short.-captioned #levels { min-height: 3; }
    ShadowMmuScreen.-short.-captioned #grid { height: 1fr; }
    """

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

    # -- the guest's keys -------------------------------------------------------------

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
        for _ in range(RUN_LIMIT):
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
        for _ in range(RUN_LIMIT):
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
        from mmuscope.engine.mmu.direct.session import churn_update

        done = churn_update(self.session.vm)
        self.notify(f"memslot update: {done}; generation {self.session.vm.generation()}")
        self.flush_events(force=True)
        self.redraw()

    def action_near_wrap(self, left: int = 2) -> None:
        """Fast-forward to `left` memslot swaps (a CREATE is one, a DELETE two) before the
        MMIO generation's 19 bits wrap (262,144 updates with two address spaces)."""
        from mmuscope.engine.mmu.spte import updates_until_mmio_wrap

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

    # -- paging modes -----------------------------------------------------------------

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
        nx = "on" if self.nx_huge_pages else "off"
        # the module parameters of tdp_mmu=N: shadow paging and the direct MMU alike
        tdp_mmu_off = TdpMmuParams(
            tdp_mmu=False, host_level=self.host_level, nx_huge_pages=nx, enable_pml=self.pml
        )
        if kind == "shadow":  # B and X as for tdp_mmu=N; shadow paging's own H
            return ShadowSession(
                layout,
                workload=workload,
                seed=self.seed,
                spte_config=config,
                vtlb=self.vtlb,
                params=tdp_mmu_off,
                kernel_2m=self.kernel_2m,
            )
        if kind == "tdp":
            params = TdpMmuParams(
                host_level=self.host_level if self.huge_pages else 1,
                nx_huge_pages=nx,
                enable_pml=self.pml,
            )
            return TdpSession(
                layout, workload=workload, seed=self.seed, spte_config=config, params=params
            )
        return MmuSession(
            layout,
            workload=workload,
            seed=self.seed,
            spte_config=config,
            huge_pages=self.huge_pages,
            params=tdp_mmu_off,
        )

    def action_next_paging(self) -> None:
        self.action_set_paging((self.paging + 1) % len(PAGING_MODES))

    def action_set_paging(self, mode: int) -> None:
        """One of PAGING_MODES, on a new guest (scenarios use this directly)."""
        self.paging = mode
        workload = self.session.workload
        names = SESSION_KINDS[PAGING_MODES[self.paging][2]].workloads
        self._new_guest(PAGING_MODES[self.paging][0], workload if workload in names else names[0])

    def _new_guest(self, what: str, workload: str | None = None) -> None:
        """A new session after a setting changed (the current workload unless named)."""
        self._replace_session(self._new_session(workload or self.session.workload))
        self.notify(f"{what}: a new guest", timeout=3)
        self.redraw()

    def _refused(self, shadow: bool, what: str) -> bool:
        """Warn and refuse when the setting is not for this paging mode (`shadow`: only
        for shadow paging, else only for EPT)."""
        if isinstance(self.session, ShadowSession) is shadow:
            return False
        self.notify(f"{what}: press p first", severity="warning")
        return True

    def action_toggle_huge_pages(self) -> None:
        """`H`: EPT: 2M leaves or 4K only; shadow paging (`fault->max_level =
        walker.level`): the guest kernel's own 2M text and direct map or none."""
        if isinstance(self.session, ShadowSession):
            self.kernel_2m = not self.kernel_2m
            on = "guest kernel text and direct map in 2M pages"
            self._new_guest(on if self.kernel_2m else "guest maps 4K pages only")
            return
        self.huge_pages = not self.huge_pages
        self._new_guest("2M leaves where the slot allows" if self.huge_pages else "4K leaves only")

    def action_next_host_pages(self) -> None:
        """`B`: the host backs guest memory with THP 2M pages, hugetlbfs 1G, or 4K."""
        self.host_level = {2: 3, 3: 1, 1: 2}[self.host_level]
        name = {1: "4K pages", 2: "THP 2M pages", 3: "hugetlbfs 1G pages"}[self.host_level]
        self._new_guest(f"host memory in {name} (host_pfn_mapping_level)")

    def action_toggle_nx_huge_pages(self) -> None:
        """`X`: kvm.nx_huge_pages on or off (fetches split huge pages, recovery rejoins)."""
        self.nx_huge_pages = not self.nx_huge_pages
        self._new_guest(f"nx_huge_pages={'on' if self.nx_huge_pages else 'off'}")

    def action_toggle_pml(self) -> None:
        """`M`: kvm_intel.enable_pml on or off: how dirty logging runs under EPT (PML:
        D bits cleared, the CPU logs writes; off: write protection, fast_page_fault)."""
        if self._refused(False, "PML needs EPT: shadow paging logs by write protection"):
            return
        self.action_set_pml(not self.pml)

    def action_set_pml(self, on: bool) -> None:
        """PML on or off, on a new guest (scenarios use this directly)."""
        self.pml = on
        self._new_guest(f"kvm_intel.enable_pml={'Y' if on else 'N'}")

    def action_toggle_vtlb(self) -> None:
        if self._refused(True, "the vtlb is for shadow paging"):
            return
        self.vtlb = not self.vtlb
        self._new_guest(f"vtlb {'on' if self.vtlb else 'off'}")

    # -- fast_page_fault's keys -------------------------------------------------------

    def _fast_session(self) -> MmuSession | TdpSession | None:
        session = self.session
        if isinstance(session, ShadowSession):
            self.notify(NO_FAST_PATH, severity="warning")
            return None
        return session

    def _done(self, words: str) -> None:
        self.notify(words, timeout=4)
        self.flush_events(force=True)
        self.redraw()

    def action_toggle_dirty_logging(self) -> None:
        session = self._fast_session()
        if session is None:
            return
        words = session.toggle_dirty_logging()
        slot = session.logged_slot()
        if not slot.dirty_logging:
            self._done(f"{words}, slot {slot.id}")
            return
        how = (
            "PML: D bits cleared, the CPU logs the writes (no fault)"
            if session.dirty_log.pml
            else "PML off: its sptes lost W, the next write to each takes fast_page_fault"
        )
        self._done(f"{words}, slot {slot.id}: {how}")

    def action_get_dirty_log(self) -> None:
        session = self._fast_session()
        if session is None:
            return
        slot = session.logged_slot()
        if not slot.dirty_logging:
            self._done(f"slot {slot.id} logs no dirty pages: L starts dirty logging")
            return
        pages = session.get_dirty_log()
        again = "D bits cleared again" if session.dirty_log.pml else "write-protected again"
        self._done(f"KVM_GET_DIRTY_LOG slot {slot.id}: {len(pages)} pages, {again}")

    def action_next_fast_fault(self) -> None:
        """Run to the next VM exit that fast_page_fault fixed (or found spurious)."""
        if self._fast_session() is not None:
            self._run_until(lambda step: bool(getattr(step, "fast", "")))

    def action_age_memory(self) -> None:
        session = self._fast_session()
        if session is None:
            return
        young = session.age_memory()
        how = (
            "A bits cleared (the CPU sets them again, no fault)"
            if session.mmu.fast_pf is None or session.mmu.fast_pf.kvm_ad_enabled
            else "now access-tracked: the next access of each takes fast_page_fault"
        )
        self._done(f"kvm_age_gfn: {young} young sptes made old, {how}")

    # -- zaps, replayed ---------------------------------------------------------------

    def _start_zap(self, kind: str, zapped: int, before: list[KvmMmuPage]) -> None:
        """Replay a zap that already happened: `before` are the pages it found, zapped
        oldest first (kvm_zap_obsolete_pages walks active_mmu_pages from the tail)."""
        holds = self.session.mmu.pages.lock_holds
        alive = {sp.seq for sp in self.session.mmu.pages.pages()}
        self.zap_ghosts = sorted((sp for sp in before if sp.seq not in alive), key=_seq)
        self.zap_kind = kind
        self.zap_replay = zap_batches(holds) if zapped else []
        self.path, self.shown = [], 0
        pages = f"{zapped} page{'s' if zapped != 1 else ''}"
        locks = f"{len(holds)} lock hold{'s' if len(holds) != 1 else ''}"
        self.notify(f"{kind}: {pages} in {locks}", timeout=4)
        self.sync_player()
        self.flush_events(force=True)
        self._zap_at = time.monotonic()  # after the zap's events (thousands, for the TDP MMU)
        self.redraw()

    def _advance_zap(self, now: float) -> None:
        hold = self.zap_replay[0][1]
        seconds = min(ZAP_HOLD_MAX_SECONDS, max(ZAP_BATCH_SECONDS, hold * ZAP_PAGE_SECONDS))
        if now - self._zap_at >= seconds:
            self._zap_at = now
            self.zap_replay.pop(0)
            if not self.zap_replay:
                self.sync_player()

    def _zap_caption(self) -> str:
        if not self.zap_replay:
            return ""
        done, hold = self.zap_replay[0]
        left = len(self.zap_replay) - 1
        if isinstance(self.session, TdpSession):
            return tdp_zap_caption(self.zap_kind, done, hold, left)
        if self.zap_kind == "slow zap":
            return f"slow zap: mmu_lock held over all {hold} pages; every vCPU waits"
        return (
            f"{self.zap_kind}: mmu_lock held, zapping pages {done + 1}-{done + hold}; "
            f"{left} more hold{'s' if left != 1 else ''} after a lock break "
            "(the vCPUs run meanwhile)"
        )

    def _zap_levels(self) -> tuple[list[LevelSummary], set[int]]:
        """The pages by level, with the replayed zap's pages not yet gone (dimmed), and
        the seqs of the ones its current lock hold is zapping."""
        pages = self.session.mmu.pages
        if not self.zap_replay:
            return levels_of(pages.pages(), pages.is_obsolete), set()
        done, hold = self.zap_replay[0]
        ghosts = self.zap_ghosts[done:]
        gone = {sp.seq for sp in ghosts}
        levels = levels_of(
            [*pages.pages(), *ghosts], lambda sp: sp.seq in gone or pages.is_obsolete(sp)
        )
        return levels, {sp.seq for sp in ghosts[:hold]}

    def action_fast_zap(self) -> None:
        before = list(self.session.mmu.pages.pages())
        session = self.session
        zapped = (
            session.zap("fast") if isinstance(session, TdpSession) else session.mmu.zap_all_fast()
        )
        self._start_zap("fast zap", zapped, before)

    def action_slow_zap(self) -> None:
        before = list(self.session.mmu.pages.pages())
        session = self.session
        zapped = (
            session.zap("slow") if isinstance(session, TdpSession) else session.mmu.pages.zap_all()
        )
        self._start_zap("slow zap", zapped, before)

    def action_invalidate_roots(self) -> None:
        if not isinstance(self.session, TdpSession):
            self.notify("only the TDP MMU has roots to invalidate: p to it", severity="warning")
            return
        before = list(self.session.mmu.pages.pages())
        self._start_zap("root invalidation", self.session.zap("roots"), before)  # type: ignore[arg-type]

    # -- drawing ----------------------------------------------------------------------

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


def _seq(sp: KvmMmuPage) -> int:
    return sp.seq
