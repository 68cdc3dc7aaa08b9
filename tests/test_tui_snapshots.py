"""SVG snapshots of every screen of the explorer, in the default theme and in `projector`.

Plain `def` tests with pytest-textual-snapshot's `snap_compare` (it runs the app itself;
from an `async def` test it fails).  Snapshots live in
`tests/__snapshots__/test_tui_snapshots/`; after an intended change of the look, review
and accept them with `pytest tests/test_tui_snapshots.py --snapshot-update`.

Determinism: paused apps, a fixed seed and terminal size, no animation, no cursor blink,
no user config.  Three things on the memslots screen follow the wall clock, so the
fixtures and `run_before` pin them down (see `freeze_wall_clock_panels`):
- kvm_stat's CurAvg/s column (`EventPanel.refresh_counters(time.monotonic())`, every
  `tui.screens.base.COUNTER_REFRESH` seconds from a screen timer): the timer is pushed
  out of reach of a test run, so the column shows 0;
- the counters' totals, redrawn by `MmuScreen.flush_events` only when events arrive and
  at most every `COUNTER_REDRAW` s: the last lookups' counts would otherwise wait for
  the next COUNTER_REFRESH; redrawn once all lookups have run;
- the cost table, redrawn by `MemslotsScreen._show_progress` at most every 0.25 s:
  redrawn once all lookups have run.
The header's measured rate ("runs N/s", `MemslotsScreen._measure_rate`) is wall-clock
too, but only shown while playing: every snapshot here is paused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import pytest
from mmuscope.tui.app import MmuscopeApp, make_app
from mmuscope.tui.screens import base
from mmuscope.tui.screens.memslots import MemslotsScreen
from mmuscope.tui.themes import DEFAULT_THEME
from mmuscope.tui.widgets.cost_panel import CostPanel
from mmuscope.tui.widgets.events import EventPanel
from textual.pilot import Pilot
from textual.widgets import Input

SIZE = (120, 36)
SEED = 3  # its third lookup walks three rbtree nodes down to slot 2
THEMES = [DEFAULT_THEME, "projector"]
LOOKUPS = ("c", "v", "n", "n", "n")  # caches off, so each lookup searches the structure

SnapCompare = Callable[..., bool]


@pytest.fixture(autouse=True)
def deterministic(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MMUSCOPE_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))
    # kvm_stat's CurAvg/s is sampled on the wall clock: never during a snapshot.
    monkeypatch.setattr(base, "COUNTER_REFRESH", 24 * 3600.0)


def snapshot_app(theme: str, lookup: str = "rbtree", layout: str = "pc-4g") -> MmuscopeApp:
    app = make_app(layout, lookup=lookup, seed=SEED, playing=False, theme=theme)
    app.animation_level = "none"
    return app


def memslots_screen(pilot: Pilot[object]) -> MemslotsScreen:
    screen = next(s for s in pilot.app.screen_stack if isinstance(s, MemslotsScreen))
    return screen


def freeze_wall_clock_panels(screen: MemslotsScreen) -> None:
    """Draw now what the wall-clock-throttled panels would draw a moment later."""
    screen.query_one(EventPanel).show_counters()
    screen.query_one(CostPanel).update_costs(screen.explorer.costs, screen.explorer.lookup)


def run_before(
    lookups: Iterable[str] = LOOKUPS, then: Iterable[str] = ()
) -> Callable[[Pilot[object]], Awaitable[None]]:
    """Run a few lookups (so one is highlighted), then press `then` (open a dialog...)."""

    async def run(pilot: Pilot[object]) -> None:
        await pilot.pause()
        await pilot.press(*lookups)
        freeze_wall_clock_panels(memslots_screen(pilot))
        await pilot.press(*then)
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False  # the cursor stays drawn
        await pilot.pause()

    return run


@pytest.mark.parametrize("theme", THEMES)
def test_memslots_rbtree(snap_compare: SnapCompare, theme: str) -> None:
    app = snapshot_app(theme, "rbtree")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before())


@pytest.mark.parametrize("theme", THEMES)
def test_memslots_rbtree_mid_lookup(snap_compare: SnapCompare, theme: str) -> None:
    """A lookup revealed probe by probe (`s`): two nodes on the path, one compared."""
    app = snapshot_app(theme, "rbtree")
    keys = ("c", "v", "n", "n", "s", "s")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before(keys))


@pytest.mark.parametrize("theme", THEMES)
def test_memslots_linear(snap_compare: SnapCompare, theme: str) -> None:
    app = snapshot_app(theme, "linear")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before())


@pytest.mark.parametrize("theme", THEMES)
def test_help_screen(snap_compare: SnapCompare, theme: str) -> None:
    app = snapshot_app(theme)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before(then=["question_mark"]))


@pytest.mark.parametrize("theme", THEMES)
def test_slot_dialog(snap_compare: SnapCompare, theme: str) -> None:
    app = snapshot_app(theme)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before(then=["a"]))


@pytest.mark.parametrize("theme", THEMES)
def test_filter_dialog(snap_compare: SnapCompare, theme: str) -> None:
    app = snapshot_app(theme)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before(then=["f"]))


@pytest.mark.parametrize("theme", THEMES)
def test_too_small(snap_compare: SnapCompare, theme: str) -> None:
    app = snapshot_app(theme)
    assert snap_compare(app, terminal_size=(70, 20), run_before=run_before())


def mmu_run_before(then: Iterable[str] = ()) -> Callable[[Pilot[object]], Awaitable[None]]:
    """The shadow-MMU screen after a few faults (and `then`)."""

    async def run(pilot: Pilot[object]) -> None:
        await pilot.pause()
        await pilot.press("f2")
        await pilot.pause()
        await pilot.press("n", "n", "n", "n", "n", "s", *then)
        await pilot.pause()

    return run


@pytest.mark.parametrize("theme", THEMES)
def test_shadow_mmu(snap_compare: SnapCompare, theme: str) -> None:
    """EPT with the TDP MMU, today's default: the root and its count, the fault's path."""
    app = snapshot_app(theme)
    assert snap_compare(app, terminal_size=(120, 40), run_before=mmu_run_before())


@pytest.mark.parametrize("theme", THEMES)
def test_shadow_paging(snap_compare: SnapCompare, theme: str) -> None:
    """EPT off: two processes' roots, a guest walk, the vtlb."""

    async def run(pilot: Pilot[object]) -> None:
        await pilot.pause()
        await pilot.press("f2", "p", "p")  # past the TDP MMU and direct pages (tdp_mmu=N)
        await pilot.pause()
        await pilot.press(*["n"] * 9)
        pilot.app.clear_notifications()  # "a new guest" lasts 3 s: under load it had gone
        await pilot.pause()

    assert snap_compare(snapshot_app(theme), terminal_size=(120, 40), run_before=run)


@pytest.mark.parametrize("theme", THEMES)
def test_rmap_screen(snap_compare: SnapCompare, theme: str) -> None:
    async def run(pilot: Pilot[object]) -> None:
        await pilot.pause()
        await pilot.press("f3")
        await pilot.pause()
        await pilot.press(*["n"] * 20, "x")
        await pilot.pause()

    assert snap_compare(snapshot_app(theme), terminal_size=(120, 40), run_before=run)
