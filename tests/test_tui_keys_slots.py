"""The explorer's slot keys, driven through Textual's Pilot: `a`, `d` and `m`
(KVM_SET_USER_MEMORY_REGION), escape/cancel of the dialogs, and `x` (reset the counts).
Each test presses what a user presses and checks what the user would see change (model
state, header, tables).

Apps come from `tests.tui_pilot.build`, paused (deterministic), with no user config read.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mmuscope.engine.lookup import LOOKUP_STRATEGIES
from mmuscope.tui.screens.dialogs import FilterDialog, GfnDialog, SlotDialog
from mmuscope.tui.screens.memslots import MemslotsScreen
from mmuscope.tui.widgets.events import EventPanel
from mmuscope.tui.widgets.slot_table import SlotTable
from textual.pilot import Pilot
from textual.widgets import Input, Static

from tests.tui_pilot import SIZE, build, cost_rows, fill, memslots, paste, table_rows, text_of

FREE_GPA = 0x2_0000_0000  # 8 GiB: above every slot of pc-4g (RAM above 4G ends at 4.5 GiB)


def slot_state(screen: MemslotsScreen) -> tuple[int, list[tuple[int, int, int, int]]]:
    explorer = screen.explorer
    slots = [(s.id, s.base_gfn, s.npages, s.flags) for s in explorer.slots()]
    return explorer.generation, slots


async def refused(pilot: Pilot, screen: MemslotsScreen, key: str, fields: dict[str, str]) -> str:
    """Open the dialog of `key`, fill it in and submit: the request must be refused — the
    dialog stays open and the slots and generation are unchanged.  Returns the error."""
    app = screen.app
    state = slot_state(screen)
    rows = len(table_rows(screen.query_one(SlotTable)))
    await pilot.press(key)
    dialog = app.screen
    await fill(pilot, dialog, fields)
    await pilot.press("enter")
    await pilot.pause()
    assert app.screen is dialog, "a refused request closed the dialog"
    assert slot_state(screen) == state
    assert len(table_rows(screen.query_one(SlotTable))) == rows
    return text_of(dialog.query_one("#error", Static))


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
        error = await refused(
            pilot, memslots(app), "a", {"#slot-id": "10", "#gpa": gpa, "#size": size}
        )
        assert error.startswith(errno_name), error
        assert "nothing changed" in error


async def test_a_bad_number_shows_an_error(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        error = await refused(pilot, memslots(app), "a", {"#size": "lots"})
        assert "size: not a number" in error


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
        error = await refused(pilot, memslots(app), "d", {"#slot-id": "99"})
        assert error.startswith("EINVAL")


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
        await select_slot_row(pilot, screen, 2)
        error = await refused(pilot, screen, "m", {"#gpa": "0x100000"})  # onto ram-1m-to-hole
        assert error.startswith("EEXIST")


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


# -- x: reset the counts ------------------------------------------------------------


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


async def test_a_strategy_switch_does_not_claim_a_generation_change(tmp_path: Path) -> None:
    """The first lookup after `l` runs on a fresh vCPU cache: nothing was reset."""
    from mmuscope.tui.widgets.path_panel import PathPanel

    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n", "l", "n")
        await pilot.pause()
        shown = str(memslots(app).query_one(PathPanel).render())
        assert "vcpu" in shown.lower() or "cache" in shown.lower(), shown
        assert "generation changed" not in shown, shown


def test_a_real_generation_change_still_says_so() -> None:
    from mmuscope.engine import Vm

    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, 1 << 20, 0x7F0000000000)
    assert vm.explain(1, vcpu=0).cache_probes[0].note == ""  # first lookup: nothing cached
    assert vm.explain(2, vcpu=0).cache_probes[0].hit
    vm.set_user_memory_region(1, 0, 1 << 20, 1 << 20, 0x7F0000100000)  # generation + 2
    probe = vm.explain(3, vcpu=0).cache_probes[0]
    assert not probe.hit and probe.note == "generation changed: cache reset"
