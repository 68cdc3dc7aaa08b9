"""Every key of the explorer, driven through Textual's Pilot: each test presses what a user
presses and checks what the user would see change (model state, header, tables, files).

Apps come from `tui.app.make_app`, paused (deterministic) unless the test is about
playing, with exports going to the test's tmp_path and no user config read.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from textual import events
from textual.command import CommandList, CommandPalette
from textual.geometry import Region
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Input, Static

from engine.lookup import LOOKUP_STRATEGIES
from engine.lookup.base import ArrayView, TreeView
from engine.pacing import SPEEDS
from engine.workload import WORKLOADS
from tui.app import MmuscopeApp, make_app
from tui.screens.base import TooSmall
from tui.screens.dialogs import FilterDialog, GfnDialog, SlotDialog
from tui.screens.help import HelpScreen
from tui.screens.memslots import MemslotsScreen
from tui.themes import BUILTIN_THEMES, DEFAULT_THEME
from tui.widgets.cost_panel import CostPanel
from tui.widgets.events import CountersTable, EventLog, EventPanel
from tui.widgets.lookup_bar import LookupBar
from tui.widgets.slot_table import SlotTable
from tui.widgets.structure import StructureView

SIZE = (120, 36)
SHAPE_KIND = {
    "linear": ArrayView,
    "size-sorted": ArrayView,
    "binary": ArrayView,
    "wbtree": TreeView,
    "rbtree": TreeView,
}
FREE_GPA = 0x2_0000_0000  # 8 GiB: above every slot of pc-4g (RAM above 4G ends at 4.5 GiB)


@pytest.fixture(autouse=True)
def no_user_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Never read the real config (user themes) during a test."""
    monkeypatch.setenv("MMUSCOPE_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))


def build(export_dir: Path, layout: str = "pc-4g", **options: object) -> MmuscopeApp:
    options.setdefault("playing", False)
    app = make_app(layout, export_dir=export_dir, **options)  # type: ignore[arg-type]
    app.animation_level = "none"
    return app


def memslots(app: MmuscopeApp) -> MemslotsScreen:
    screen = app.screen
    assert isinstance(screen, MemslotsScreen), f"expected the memslots screen, got {screen!r}"
    return screen


def text_of(widget: Static) -> str:
    return str(widget.content)


def structure_text(view: StructureView) -> str:
    """What the structure drawing shows, as plain text."""
    height = view.scrollable_content_region.height
    return "\n".join(view.render_line(y).text for y in range(height))


def drawn_lines(widget: Widget) -> list[str]:
    """The widget as it is drawn on the screen (border included), line by line."""
    return [strip.text for strip in widget.render_lines(Region(0, 0, *widget.outer_size))]


def drawn_table(widget: Widget) -> list[list[str]]:
    """The rows of a table as drawn, split into words: borders, the header line, rules
    and scrollbars left out."""
    rows = []
    for line in drawn_lines(widget)[1:-1]:  # inside the top and bottom borders
        words = line.strip("│ ").split()
        if words and any(c.isalnum() for c in "".join(words)):
            rows.append(words)
    return rows[1:]  # after the header


def table_rows(table: SlotTable) -> list[list[str]]:
    """The slot table's rows as drawn: id, as, base_gfn, npages, flags, hits, name."""
    return drawn_table(table)


def cost_rows(screen: MemslotsScreen) -> dict[str, list[str]]:
    """The cost table as drawn: strategy -> [bare, cached, miss, worst]."""
    rows = ([w for w in words if w != "▶"] for words in drawn_table(screen.query_one(CostPanel)))
    return {row[0]: row[1:] for row in rows}


def counter_events(screen: MemslotsScreen) -> list[str]:
    """The event names kvm_stat's table shows."""
    return [words[0] for words in drawn_table(screen.query_one(CountersTable))]


def slot_state(screen: MemslotsScreen) -> tuple[int, list[tuple[int, int, int, int]]]:
    explorer = screen.explorer
    slots = [(s.id, s.base_gfn, s.npages, s.flags) for s in explorer.slots()]
    return explorer.generation, slots


async def paste(pilot: Pilot, text: str) -> None:
    """Paste `text` into the focused widget, as a terminal's bracketed paste does (one
    event instead of a key press per character: each press waits for the app to idle)."""
    pilot.app.post_message(events.Paste(text))
    await pilot.pause()


async def fill(pilot: Pilot, dialog: Screen[None], values: dict[str, str]) -> None:
    """Put `values` in the dialog's inputs as a user would: focus, select all, and paste
    over it (an empty value: delete the selection)."""
    for selector, value in values.items():
        field = dialog.query_one(selector, Input)
        field.focus()
        await pilot.pause()
        field.select_all()
        if value:
            await paste(pilot, value)
        else:
            await pilot.press("backspace")
        assert field.value == value, (selector, field.value)


async def wait_until(pilot: Pilot, condition: Callable[[], bool], timeout: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out waiting for the app"
        await pilot.pause(0.02)


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
        await pilot.pause(0.5)
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
    app = build(tmp_path, lookup="rbtree")
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
        for digit in "1352442":  # every digit, from different strategies, and repeated
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


# -- a / d / m: KVM_SET_USER_MEMORY_REGION ------------------------------------------


async def test_a_adds_a_slot_at_a_free_gpa(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        table = screen.query_one(SlotTable)
        generation, before = slot_state(screen)
        rows = len(table_rows(table))
        await pilot.press("a")
        dialog = app.screen
        assert isinstance(dialog, SlotDialog) and dialog.mode == "add"
        # The form proposes a free id and a gpa above every slot.
        used = {s[0] for s in before}
        assert int(dialog.query_one("#slot-id", Input).value) not in used
        await fill(pilot, dialog, {"#slot-id": "10", "#gpa": hex(FREE_GPA), "#size": "0x100000"})
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen, text_of(dialog.query_one("#error", Static))
        new_generation, after = slot_state(screen)
        assert new_generation > generation
        added = [s for s in after if s[0] == 10]
        assert added == [(10, FREE_GPA >> 12, 0x100, 0)]
        assert len(after) == len(before) + 1
        assert len(table_rows(table)) == rows + 1
        assert f"gen {new_generation}" in screen.sub_title
        assert screen.highlight is None  # the shown lookup belonged to the old generation


async def test_a_with_the_defaults_adds_a_slot(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        _, before = slot_state(screen)
        await pilot.press("a", "enter")
        await pilot.pause()
        assert app.screen is screen
        assert len(slot_state(screen)[1]) == len(before) + 1


async def test_a_with_readonly_flag(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press("a")
        dialog = app.screen
        await fill(pilot, dialog, {"#slot-id": "11", "#gpa": hex(FREE_GPA)})
        await pilot.click("#readonly")
        await pilot.pause()
        dialog.query_one("#slot-id", Input).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen
        added = next(s for s in screen.explorer.slots() if s.id == 11)
        assert added.readonly


@pytest.mark.parametrize(
    ("gpa", "size", "errno_name"),
    [
        ("0x1000", "0x100000", "EEXIST"),  # overlaps ram-below-1m (slot 0)
        (hex(0xE000_0000 - 0x1000), "0x2000", "EEXIST"),  # straddles the end of slot 1
        (hex(FREE_GPA + 1), "0x100000", "EINVAL"),  # gpa not page aligned
        (hex(FREE_GPA), "0x1001", "EINVAL"),  # size not page aligned
    ],
)
async def test_a_refused_shows_the_errno_and_changes_nothing(
    tmp_path: Path, gpa: str, size: str, errno_name: str
) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        table = screen.query_one(SlotTable)
        state = slot_state(screen)
        rows = len(table_rows(table))
        await pilot.press("a")
        dialog = app.screen
        await fill(pilot, dialog, {"#slot-id": "10", "#gpa": gpa, "#size": size})
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is dialog, "a refused request closed the dialog"
        error = text_of(dialog.query_one("#error", Static))
        assert error.startswith(errno_name), error
        assert "nothing changed" in error
        assert slot_state(screen) == state
        assert len(table_rows(table)) == rows


async def test_a_bad_number_shows_an_error(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        state = slot_state(screen)
        await pilot.press("a")
        dialog = app.screen
        await fill(pilot, dialog, {"#size": "lots"})
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is dialog
        assert "size: not a number" in text_of(dialog.query_one("#error", Static))
        assert slot_state(screen) == state


async def select_slot_row(pilot: Pilot, screen: MemslotsScreen, row: int) -> int:
    """Move the slot table's cursor with the keyboard; return the selected slot id."""
    table = screen.query_one(SlotTable)
    table.focus()
    await pilot.pause()
    await pilot.press(*["down"] * row)
    slot_id = table.selected_slot_id()
    assert slot_id is not None and table.cursor_row == row
    return slot_id


async def test_d_deletes_the_selected_slot(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        table = screen.query_one(SlotTable)
        generation, before = slot_state(screen)
        rows = len(table_rows(table))
        slot_id = await select_slot_row(pilot, screen, 2)
        assert slot_id == before[2][0]
        await pilot.press("d")
        dialog = app.screen
        assert isinstance(dialog, SlotDialog) and dialog.mode == "delete"
        assert dialog.query_one("#slot-id", Input).value == str(slot_id)
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen
        new_generation, after = slot_state(screen)
        assert new_generation > generation
        assert slot_id not in {s[0] for s in after}
        assert len(after) == len(before) - 1
        assert len(table_rows(table)) == rows - 1


async def test_d_of_a_missing_slot_is_einval(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        state = slot_state(screen)
        await pilot.press("d")
        dialog = app.screen
        await fill(pilot, dialog, {"#slot-id": "99"})
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is dialog
        assert text_of(dialog.query_one("#error", Static)).startswith("EINVAL")
        assert slot_state(screen) == state


async def test_m_moves_the_selected_slot(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        generation, before = slot_state(screen)
        slot_id = await select_slot_row(pilot, screen, 2)
        old = next(s for s in before if s[0] == slot_id)
        await pilot.press("m")
        dialog = app.screen
        assert isinstance(dialog, SlotDialog) and dialog.mode == "move"
        assert dialog.query_one("#slot-id", Input).value == str(slot_id)
        assert int(dialog.query_one("#gpa", Input).value, 0) == old[1] << 12
        await fill(pilot, dialog, {"#gpa": hex(FREE_GPA)})
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen, text_of(dialog.query_one("#error", Static))
        new_generation, after = slot_state(screen)
        assert new_generation > generation
        moved = next(s for s in after if s[0] == slot_id)
        assert moved == (slot_id, FREE_GPA >> 12, old[2], old[3])
        assert len(after) == len(before)
        rows = {row[0]: row for row in table_rows(screen.query_one(SlotTable))}
        assert rows[str(slot_id)][2] == f"{FREE_GPA >> 12:#x}"


async def test_m_onto_another_slot_is_eexist(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        state = slot_state(screen)
        await select_slot_row(pilot, screen, 2)
        await pilot.press("m")
        dialog = app.screen
        await fill(pilot, dialog, {"#gpa": "0x100000"})  # on top of ram-1m-to-hole
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is dialog
        assert text_of(dialog.query_one("#error", Static)).startswith("EEXIST")
        assert slot_state(screen) == state


@pytest.mark.parametrize(
    ("key", "dialog_type"),
    [
        ("a", SlotDialog),
        ("d", SlotDialog),
        ("m", SlotDialog),
        ("g", GfnDialog),
        ("f", FilterDialog),
    ],
)
async def test_escape_cancels_a_dialog(tmp_path: Path, key: str, dialog_type: type) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        state = slot_state(screen)
        await pilot.press(key)
        assert isinstance(app.screen, dialog_type)
        await paste(pilot, "1")  # something typed, then abandoned
        await pilot.press("escape")
        assert app.screen is screen
        assert slot_state(screen) == state
        assert screen.query_one(EventPanel).filter_text == ""
        assert screen.highlight is None and screen.lookups_done == 0


async def test_cancel_button_closes_the_slot_dialog(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        state = slot_state(screen)
        await pilot.press("a")
        assert await pilot.click("#cancel")
        await pilot.pause()
        assert app.screen is screen
        assert slot_state(screen) == state


# -- the drawing --------------------------------------------------------------------


async def test_z_and_shift_z_change_the_zoom(tmp_path: Path) -> None:
    app = build(tmp_path, lookup="rbtree")
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        view = screen.query_one(StructureView)
        await pilot.pause()
        assert view.auto_zoom
        start = view.zoom
        await pilot.press("Z")
        assert not view.auto_zoom
        assert view.zoom == max(0, start - 1)
        await pilot.press("Z", "Z", "Z")
        assert view.zoom == 0
        ids_only = structure_text(view)
        assert ":" not in ids_only and "+" not in ids_only  # labels are bare slot ids
        await pilot.press("z")
        assert view.zoom == 1
        assert ":" in structure_text(view)  # id:base_gfn
        await pilot.press("z", "z", "z")
        assert view.zoom == 2
        assert "+" in structure_text(view)  # id base_gfn+npages


async def test_brackets_change_the_levels_shown(tmp_path: Path) -> None:
    app = build(tmp_path, "assigned-devices", lookup="rbtree")
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        view = screen.query_one(StructureView)
        await pilot.pause()
        depth = view.window_depth
        assert depth >= 2
        await pilot.press("left_square_bracket")
        assert view.levels == depth - 1 and view.window_depth == depth - 1
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert view.levels == depth + 1 and view.window_depth == depth + 1
        await pilot.press(*["left_square_bracket"] * (depth + 3))
        assert view.levels == 1, "levels must stop at one"
        assert "+" in structure_text(view)  # the root alone, with its hidden subtree


async def _follow_down(pilot: Pilot, screen: MemslotsScreen) -> StructureView:
    """A shallow window, then lookups until the window has followed one off the root."""
    view = screen.query_one(StructureView)
    await pilot.pause()
    await pilot.press("c", "v")
    await pilot.press(*["left_square_bracket"] * max(0, view.window_depth - 3))
    assert view.window_depth == 3 and view.follow
    for _ in range(20):
        await pilot.press("n")
        if view.window_root != 0:
            break
    assert view.window_root != 0, "the window never followed a lookup down the tree"
    return view


async def test_u_moves_the_window_up_and_r_back_to_the_root(tmp_path: Path) -> None:
    app = build(tmp_path, "assigned-devices", lookup="rbtree")
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        view = await _follow_down(pilot, screen)
        assert view.index is not None
        root = view.window_root
        parent = view.index.parent[root]
        await pilot.press("u")
        assert view.window_root == parent
        assert not view.follow, "u must stop the window following lookups"
        await pilot.press("r")
        assert view.window_root == 0
        await pilot.press("u")  # at the root already: stays
        assert view.window_root == 0


async def test_shift_f_toggles_follow(tmp_path: Path) -> None:
    app = build(tmp_path, "assigned-devices", lookup="rbtree")
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        view = screen.query_one(StructureView)
        assert view.follow
        await pilot.press("F")
        assert not view.follow
        # Not following: lookups no longer move the window.
        await pilot.press("c", "v", *["left_square_bracket"] * max(0, view.window_depth - 3))
        for _ in range(5):
            await pilot.press("n")
            assert view.window_root == 0
        await pilot.press("F")
        assert view.follow


async def test_x_resets_costs_and_hits(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        explorer = screen.explorer
        await pilot.press("n", "n", "n", "n")
        assert all(cost.lookups == 4 for cost in explorer.costs.values())
        assert explorer.slot_hits
        await pilot.pause()
        rows = table_rows(screen.query_one(SlotTable))
        assert sum(int(row[5]) for row in rows) == sum(explorer.slot_hits.values())
        await pilot.press("x")
        assert all(cost.lookups == 0 for cost in explorer.costs.values())
        assert all(cost.bare == 0 and cost.worst == 0 for cost in explorer.costs.values())
        assert explorer.slot_hits == {}
        assert explorer.misses == 0


async def test_x_zeroes_the_hits_column(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press("n", "n", "n", "n")
        await pilot.pause()
        table = screen.query_one(SlotTable)
        assert any(row[5] != "0" for row in table_rows(table))
        await pilot.press("x")
        await pilot.pause()
        rows = table_rows(table)
        assert len(rows) == len(screen.explorer.slots())
        assert [row[5] for row in rows] == ["0"] * len(rows)


async def test_x_clears_the_cost_table(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press("n", "n", "n", "n")
        await pilot.pause(0.3)  # the cost table is redrawn every 0.25 s at most
        rows = cost_rows(screen)
        assert sorted(rows) == sorted(LOOKUP_STRATEGIES)
        assert rows["rbtree"][0] != "-"
        await pilot.press("x")
        await pilot.pause()
        assert cost_rows(screen) == {name: ["-"] * 4 for name in LOOKUP_STRATEGIES}


# -- f: filter, e: export, S: screenshot, t: theme ----------------------------------


async def test_f_filters_the_counters_and_the_log(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        panel = screen.query_one(EventPanel)
        await pilot.press("n", "n")
        assert {"kvm_page_fault", "kvm_memslot_lookup"} <= set(panel.counters.totals)
        await pilot.press("f")
        dialog = app.screen
        assert isinstance(dialog, FilterDialog)
        await paste(pilot, "lookup")
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen
        assert panel.filter_text == "lookup"
        events = counter_events(screen)
        assert events == ["kvm_memslot_lookup"]
        assert "/lookup/" in str(screen.query_one(EventLog).border_title)
        assert "/lookup/" in str(screen.query_one(CountersTable).border_title)
        log = screen.query_one(EventLog)
        logged = len(log.lines)
        await pilot.press("n", "n")
        await pilot.pause()
        new_lines = log.lines[logged:]
        assert new_lines and all("kvm_memslot_lookup" in line for line in new_lines)

        # f again shows the current filter; clearing it shows every event again.
        await pilot.press("f")
        assert app.screen.query_one("#pattern", Input).value == "lookup"
        await fill(pilot, app.screen, {"#pattern": ""})
        await pilot.press("enter")
        await pilot.pause()
        assert panel.filter_text == ""
        assert set(counter_events(screen)) == set(panel.counters.totals)
        assert len(counter_events(screen)) > 1


async def test_f_bad_regex_keeps_the_dialog_with_an_error(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        panel = screen.query_one(EventPanel)
        await pilot.press("f", "(", "enter")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, FilterDialog)
        assert "bad regular expression" in text_of(dialog.query_one("#error", Static))
        assert panel.filter_text == ""
        await pilot.press("escape")
        assert app.screen is screen


async def test_e_exports_dot_and_pdf(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await pilot.press("e")
        await app.workers.wait_for_complete()
        await pilot.pause()
        dots = list(tmp_path.glob("*.dot"))
        assert len(dots) == 1, list(tmp_path.iterdir())
        assert "pc-4g" in dots[0].name and "rbtree" in dots[0].name
        text = dots[0].read_text()
        assert "digraph" in text
        pdfs = list(tmp_path.glob("*.pdf"))
        if shutil.which("dot") is None:
            assert pdfs == []
            pytest.skip("Graphviz `dot` is not on PATH: the PDF part is not checked")
        assert len(pdfs) == 1
        assert pdfs[0].read_bytes().startswith(b"%PDF")


async def test_e_exports_an_array_strategy(tmp_path: Path) -> None:
    app = build(tmp_path, lookup="linear")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        await app.workers.wait_for_complete()
        await pilot.pause()
        dots = list(tmp_path.glob("*linear*.dot"))
        assert len(dots) == 1, list(tmp_path.iterdir())


async def test_shift_s_saves_an_svg_screenshot(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("S")
        await pilot.pause()
        svgs = list(tmp_path.glob("*.svg"))
        assert len(svgs) == 1, list(tmp_path.iterdir())
        text = svgs[0].read_text()
        assert text.lstrip().startswith("<svg") and "memslots" in text


async def test_t_cycles_the_mmuscope_themes(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        assert app.own_themes == list(BUILTIN_THEMES)
        assert app.theme == DEFAULT_THEME
        start = BUILTIN_THEMES.index(DEFAULT_THEME)
        seen = []
        for k in range(1, len(BUILTIN_THEMES) + 1):
            await pilot.press("t")
            expected = BUILTIN_THEMES[(start + k) % len(BUILTIN_THEMES)]
            assert app.theme == expected
            seen.append(app.theme)
        assert sorted(seen) == sorted(BUILTIN_THEMES)
        assert app.theme == DEFAULT_THEME


async def test_theme_change_restyles_the_structure(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        view = memslots(app).query_one(StructureView)
        before = view.get_component_rich_style("structure--idle")
        await pilot.press("t", "t")  # projector
        assert app.theme == "projector"
        await pilot.pause()
        assert view.get_component_rich_style("structure--idle") != before


# -- ?, the command palette, resizing, the mouse ------------------------------------


async def test_question_mark_lists_every_key(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press("question_mark")
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        table = help_screen.query_one(DataTable)
        rows = [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
        descriptions = {row[1] for row in rows}
        for binding in MemslotsScreen.BINDINGS:
            assert binding.description in descriptions, binding
        for wanted in ("Filter", "Export", "Quit", "Help", "Theme", "Screenshot"):
            assert wanted in descriptions
        keys = {row[1]: row[0] for row in rows}
        assert keys["Play/Pause"] == "space"
        assert keys["Look up"] == "g"
        assert keys["Fewer levels"] == "["
        assert keys["Faster"] == "+"
        assert keys["Help"] == "?"
        tooltips = {row[1]: row[2] for row in rows}
        assert "last_used_slot" in tooltips["VM cache"]
        own = [row for row in rows if row[1] in {b.description for b in MemslotsScreen.BINDINGS}]
        assert len(own) == len({(row[0], row[1]) for row in own}), "a key is listed twice"
        await pilot.press("escape")
        assert app.screen is screen


async def test_help_closes_with_its_other_keys(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        for key in ("question_mark", "q"):
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            await pilot.press(key)
            assert app.screen is screen, key


async def test_command_palette_runs_a_screen_action(tmp_path: Path) -> None:
    app = build(tmp_path, lookup="rbtree")
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press("ctrl+p")
        palette = app.screen
        assert isinstance(palette, CommandPalette)
        await paste(pilot, "Strategy")
        commands = palette.query_one(CommandList)
        await wait_until(pilot, lambda: commands.option_count > 0)
        prompts = [
            str(commands.get_option_at_index(i).prompt) for i in range(commands.option_count)
        ]
        assert any("Strategy (l)" in prompt for prompt in prompts), prompts
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen)
        names = LOOKUP_STRATEGIES
        assert screen.explorer.lookup == names[(names.index("rbtree") + 1) % len(names)]
        assert isinstance(screen.query_one(StructureView).shape, ArrayView)


async def test_too_small_terminal_shows_a_message(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        too_small = screen.query_one(TooSmall)
        assert not too_small.display
        await pilot.resize_terminal(70, 20)
        await pilot.pause()
        assert screen.has_class("-too-small")
        assert too_small.display and too_small.region.area > 0
        message = text_of(too_small)
        assert "80×24" in message and "70×20" in message
        assert screen.query_one("#main").region.area == 0  # the explorer is hidden
        await pilot.resize_terminal(*SIZE)
        await pilot.pause()
        assert not screen.has_class("-too-small")
        assert not too_small.display and too_small.region.area == 0
        assert screen.query_one("#main").region.area > 0


async def test_narrow_terminal_shrinks_the_side_panel(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        right = screen.query_one("#right")
        wide = right.region.width
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        assert screen.has_class("-narrow") and not screen.has_class("-too-small")
        assert right.region.width < wide
        await pilot.resize_terminal(*SIZE)
        await pilot.pause()
        assert not screen.has_class("-narrow")
        assert right.region.width == wide


async def _shallow_tree(pilot: Pilot, screen: MemslotsScreen) -> StructureView:
    view = screen.query_one(StructureView)
    await pilot.pause()
    await pilot.press(*["left_square_bracket"] * max(0, view.window_depth - 3))
    await pilot.press("Z", "Z", "Z")  # bare slot ids: "131 +511" is a node with 511 hidden
    await pilot.pause()
    assert view.window_depth == 3 and view.zoom == 0
    return view


def _hidden_node_cell(view: StructureView) -> tuple[int, int, int]:
    """(node index, column, row) of a node with hidden children ("+N"), on the screen,
    relative to the StructureView's region (its border included)."""
    text = structure_text(view).splitlines()
    content = view.content_region
    for y, line in enumerate(text):
        column = line.find(" +")
        if column <= 0:
            continue
        start = line.rfind(" ", 0, column) + 1  # the slot id before " +N"
        label_id = int(line[start:column])
        node = next(i for i, n in enumerate(view.index.view.nodes) if n.slot.id == label_id)
        if node == view.window_root:
            continue
        return node, content.x - view.region.x + start, content.y - view.region.y + y
    raise AssertionError("no node with hidden children in view:\n" + "\n".join(text))


async def test_click_on_a_hidden_subtree_reroots_the_window(tmp_path: Path) -> None:
    app = build(tmp_path, "assigned-devices", lookup="rbtree")
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        view = await _shallow_tree(pilot, screen)
        assert view.window_root == 0
        node, x, y = _hidden_node_cell(view)
        assert await pilot.click(StructureView, offset=(x, y))
        await pilot.pause()
        assert view.window_root == node
        assert not view.follow
