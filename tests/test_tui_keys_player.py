"""The explorer's keys for playing, stepping, speed, strategy, caches, workload and `g`
(look up a gfn), driven through Textual's Pilot: each test presses what a user presses
and checks what the user would see change (model state, header, tables).

Apps come from `tests.tui_pilot.build`, paused (deterministic) unless the test is about
playing, with no user config read.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mmuscope.engine.lookup import LOOKUP_STRATEGIES
from mmuscope.engine.lookup.views import ArrayView, TreeView
from mmuscope.engine.memslots.workload import WORKLOADS
from mmuscope.engine.pacing import SPEEDS
from mmuscope.tui.screens.dialogs import GfnDialog
from mmuscope.tui.widgets.lookup_bar import LookupBar
from mmuscope.tui.widgets.structure import StructureView
from textual.widgets import Input, Static

from tests.tui_pilot import SIZE, build, fill, memslots, paste, text_of, until

SHAPE_KIND = {
    "linear": ArrayView,
    "size-sorted": ArrayView,
    "binary": ArrayView,
    "wbtree": TreeView,
    "rbtree": TreeView,
    "wbtree-compact": TreeView,
}


# -- playing ------------------------------------------------------------------------


async def test_space_plays_then_pauses(tmp_path: Path) -> None:
    app = build(tmp_path, speed=10)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        assert not screen.pacer.playing and "paused" in screen.sub_title
        await pilot.pause(0.2)
        assert screen.lookups_done == 0, "a paused explorer ran lookups"

        await pilot.press("space")
        assert screen.pacer.playing and "playing" in screen.sub_title
        await until(pilot, lambda: screen.lookups_done > 0 and screen.highlight is not None)
        assert screen.lookups_done > 0
        assert screen.highlight is not None

        await pilot.press("space")
        assert not screen.pacer.playing and "paused" in screen.sub_title
        done = screen.lookups_done
        await pilot.pause(0.3)
        assert screen.lookups_done == done


@pytest.mark.parametrize("lookup", ["rbtree", "linear"])
async def test_s_reveals_probes_one_by_one(tmp_path: Path, lookup: str) -> None:
    app = build(tmp_path, lookup=lookup)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        bar = screen.query_one(LookupBar)
        await pilot.press("c", "v")  # caches off: every lookup searches the structure
        assert "cache off" in screen.sub_title
        # The first press starts a lookup with its first probe shown; find one with several.
        for _ in range(20):
            await pilot.press("s")
            assert screen.highlight is not None and screen.highlight.shown == 1
            if screen.highlight.steps >= 2:
                break
        highlight = screen.highlight
        assert highlight.steps >= 2, "no lookup with several probes in 20 steps"
        started = screen.lookups_done
        steps = highlight.steps
        assert f"1/{steps} visited" in text_of(bar)
        for shown in range(2, steps + 1):
            await pilot.press("s")
            assert screen.highlight.shown == shown
            assert screen.lookups_done == started, "s started a new lookup mid-way"
            assert f"{shown}/{steps} visited" in text_of(bar)
            assert screen.query_one(StructureView).highlight == screen.highlight
        assert screen.highlight.done
        seq = screen.record.access.seq
        await pilot.press("s")  # the lookup is done: the next press starts the next one
        assert screen.lookups_done == started + 1
        assert screen.record.access.seq == seq + 1
        assert screen.highlight.shown == 1
        assert not screen.pacer.playing


async def test_s_pauses_a_playing_explorer(tmp_path: Path) -> None:
    app = build(tmp_path, playing=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        assert screen.pacer.playing
        await pilot.press("s")
        assert not screen.pacer.playing and "paused" in screen.sub_title


async def test_n_runs_one_whole_lookup(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press("c", "v")
        for expected in (1, 2, 3):
            await pilot.press("n")
            assert screen.lookups_done == expected
            highlight = screen.highlight
            assert highlight is not None and highlight.done
            assert highlight.shown == highlight.steps
            bar = text_of(screen.query_one(LookupBar))
            assert f"gfn {highlight.gfn:#x}" in bar
            assert ("hit" in bar) if highlight.slot is not None else ("miss" in bar)
            assert screen.record.trace.cache_probes == ()  # caches off: none consulted
        assert screen.explorer.costs["rbtree"].lookups == 3


async def test_n_pauses_a_playing_explorer(tmp_path: Path) -> None:
    app = build(tmp_path, playing=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press("n")
        assert not screen.pacer.playing
        done = screen.lookups_done
        await pilot.pause(0.3)
        assert screen.lookups_done == done


async def test_plus_and_minus_change_speed(tmp_path: Path) -> None:
    app = build(tmp_path, speed=4)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        i = SPEEDS.index(4.0)
        assert screen.pacer.speed == 4.0
        await pilot.press("plus")
        assert screen.pacer.speed == SPEEDS[i + 1]
        assert f"{SPEEDS[i + 1]:g}/s" in screen.sub_title
        await pilot.press("equals_sign")  # the unshifted key of '+'
        assert screen.pacer.speed == SPEEDS[i + 2]
        await pilot.press("minus", "minus", "minus")
        assert screen.pacer.speed == SPEEDS[i - 1]
        assert f"{SPEEDS[i - 1]:g}/s" in screen.sub_title


@pytest.mark.parametrize(("key", "start", "end"), [("minus", 1, 0), ("plus", -2, -1)])
async def test_speed_stops_at_the_ends(tmp_path: Path, key: str, start: int, end: int) -> None:
    app = build(tmp_path, speed=SPEEDS[start])
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press(key, key)
        assert screen.pacer.speed == SPEEDS[end]
        assert f"{SPEEDS[end]:g}/s" in screen.sub_title


# -- strategy, caches, workload -----------------------------------------------------


async def test_l_cycles_every_strategy_and_the_drawing_kind(tmp_path: Path) -> None:
    app = build(tmp_path, lookup="rbtree")
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        view = screen.query_one(StructureView)
        assert isinstance(view.shape, TreeView)
        names = list(LOOKUP_STRATEGIES)
        assert sorted(names) == sorted(SHAPE_KIND)
        current = names.index("rbtree")
        seen = []
        for _ in names:
            await pilot.press("l")
            current = (current + 1) % len(names)
            name = names[current]
            seen.append(screen.explorer.lookup)
            assert screen.explorer.lookup == name
            assert isinstance(view.shape, SHAPE_KIND[name]), name
            assert view.shape.strategy == name
            assert screen.sub_title.startswith(f"{name} ·")
            assert name in str(view.border_title)
        assert sorted(seen) == sorted(names)
        assert screen.explorer.lookup == "rbtree"


async def test_l_then_n_highlights_on_the_new_structure(tmp_path: Path) -> None:
    app = build(tmp_path, lookup=LOOKUP_STRATEGIES[-1])  # `l` wraps round to linear
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press("c", "v", "l", "n")  # linear, caches off
        assert screen.explorer.lookup == "linear"
        highlight = screen.highlight
        assert highlight is not None and highlight.done
        assert highlight.steps == screen.record.visits["linear"]


async def test_digits_pick_a_strategy(tmp_path: Path) -> None:
    app = build(tmp_path, lookup="rbtree")
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        for digit in "13524426":  # every digit, from different strategies, and repeated
            name = LOOKUP_STRATEGIES[int(digit) - 1]
            await pilot.press(digit)
            assert screen.explorer.lookup == name, digit
            assert isinstance(screen.query_one(StructureView).shape, SHAPE_KIND[name])
            assert screen.sub_title.startswith(f"{name} ·")


async def test_c_and_v_toggle_the_caches(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        vm = screen.explorer.vm
        assert vm.last_used_slot and vm.vcpu_cache
        assert "cache vcpu+vm" in screen.sub_title
        await pilot.press("c")
        assert not vm.last_used_slot and vm.vcpu_cache
        assert "cache vcpu ·" in screen.sub_title
        await pilot.press("v")
        assert not vm.last_used_slot and not vm.vcpu_cache
        assert "cache off" in screen.sub_title
        await pilot.press("c")
        assert vm.last_used_slot and not vm.vcpu_cache
        assert "cache vm ·" in screen.sub_title
        await pilot.press("v")
        assert "cache vcpu+vm" in screen.sub_title


async def test_w_cycles_the_workload(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        names = list(WORKLOADS)
        current = names.index(screen.explorer.workload.mix.name)
        for _ in names:
            await pilot.press("w")
            current = (current + 1) % len(names)
            assert screen.explorer.workload.mix.name == names[current]
            assert f"· {names[current]} ·" in screen.sub_title


# -- g: look up a gfn ---------------------------------------------------------------


@pytest.mark.parametrize("typed", ["0xfee00", "gpa 0xfee00000"])
async def test_g_looks_up_a_gfn_that_misses(tmp_path: Path, typed: str) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press("g")
        assert isinstance(app.screen, GfnDialog)
        assert isinstance(app.focused, Input)
        await paste(pilot, typed)
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen, "the dialog should close on a valid gfn"
        assert screen.highlight is not None
        assert screen.highlight.gfn == 0xFEE00
        assert screen.highlight.slot is None
        assert screen.record is not None and screen.record.slot is None
        assert "gfn 0xfee00" in text_of(screen.query_one(LookupBar))
        assert screen.explorer.misses == 1
        assert not screen.pacer.playing


async def test_g_looks_up_a_gfn_that_hits(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press("g")
        await paste(pilot, "0x100000")  # 4 GiB: ram-above-4g
        await pilot.press("enter")
        await pilot.pause()
        assert screen.highlight is not None and screen.highlight.gfn == 0x100000
        assert screen.highlight.slot is not None and screen.highlight.slot.id == 2


@pytest.mark.parametrize(
    ("typed", "error"),
    [
        ("zzz", "not a number"),
        ("0x1 0x2 0x3", "type a gfn"),
        (hex(1 << 52), "beyond"),
    ],
)
async def test_g_bad_value_keeps_the_dialog_with_an_error(
    tmp_path: Path, typed: str, error: str
) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press("g")
        await paste(pilot, typed)
        await pilot.press("enter")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, GfnDialog), "the dialog closed on a bad value"
        assert error in text_of(dialog.query_one("#error", Static))
        assert screen.highlight is None and screen.lookups_done == 0
        # Correcting the value then works, and the error is gone with the dialog.
        await fill(pilot, dialog, {"#gfn": "0xfee00"})
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen
        assert screen.highlight is not None and screen.highlight.gfn == 0xFEE00


async def test_a_timer_that_fires_while_the_app_exits_touches_no_widget(tmp_path: Path) -> None:
    """Textual removes a screen's widgets before it stops the screen's timers: a kvm_stat
    sample or a frame due in between found no EventPanel (a NoMatches that failed a test
    under load). Both are skipped once the app exits."""
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        screen = app.screen
    assert not screen.query("EventPanel")  # the widgets are gone, the screen object is not
    screen._refresh_counters()
    assert screen._frame() is None


class _ShutdownProbe(Static):
    """Stands for a screen's timer firing while its widgets are closed: when the probe
    unmounts, the screen is still attached but its widgets are going."""

    def __init__(self, owner: object, calls: list[str]) -> None:
        super().__init__()
        self.owner, self.calls = owner, calls

    def on_unmount(self) -> None:
        self.calls.append(f"leaving={self.owner.leaving}")  # type: ignore[attr-defined]
        self.owner._refresh_counters()  # type: ignore[attr-defined]
        self.calls.append(f"frame={self.owner._frame()}")  # type: ignore[attr-defined]


async def test_a_timer_that_fires_while_an_installed_screen_closes_touches_no_widget(
    tmp_path: Path,
) -> None:
    """run_test's shutdown closes the widgets of an installed screen that is not the
    current one one by one, before the screen and its timers, while the screen still
    counts as attached (App.exit was never called): the memslots screen's kvm_stat
    sample, due while the TLB screen was shown, found no EventPanel (CI's NoMatches in
    test_play_pause_and_speed).  A sample or a frame then does nothing."""
    app = build(tmp_path)
    calls: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await screen.mount(_ShutdownProbe(screen, calls), before=0)
        await pilot.press("f4")
        await pilot.pause()
    assert calls == ["leaving=True", "frame=None"]
