"""The explorer's drawing and display keys, driven through Textual's Pilot: zoom, levels,
window and follow (z/Z, [ ], u, r, F, clicks), `f` filter, `e` export, `S` screenshot,
`t` themes, `?` help, the command palette and resizing. Each test presses what a user
presses and checks what the user would see change (drawing, tables, files, screens).

Apps come from `tests.tui_pilot.build`, paused (deterministic), with exports going to the
test's tmp_path and no user config read.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from mmuscope.engine.lookup import LOOKUP_STRATEGIES
from mmuscope.tui.messages import WindowMoved
from mmuscope.tui.screens.base import TooSmall
from mmuscope.tui.screens.dialogs import FilterDialog
from mmuscope.tui.screens.help import HelpScreen
from mmuscope.tui.screens.memslots import MemslotsScreen
from mmuscope.tui.themes import BUILTIN_THEMES, DEFAULT_THEME
from mmuscope.tui.widgets.events import CountersTable, EventLog, EventPanel, shown_name
from mmuscope.tui.widgets.structure import StructureView
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static

from tests.tui_pilot import (
    SIZE,
    build,
    drawn_table,
    fill,
    memslots,
    paste,
    press_export,
    structure_text,
    text_of,
    toasts,
    until,
)


def counter_events(screen: MemslotsScreen) -> list[str]:
    """The event names kvm_stat's table shows."""
    return [words[0] for words in drawn_table(screen.query_one(CountersTable))]


async def wait_until(pilot: Pilot, condition: Callable[[], bool], timeout: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out waiting for the app"
        await pilot.pause(0.02)


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
        assert f"below slot {view.index.view.nodes[root].slot.id}" in str(view.border_title)
        await pilot.press("u")
        assert view.window_root == parent
        assert not view.follow, "u must stop the window following lookups"
        await pilot.pause()
        slot_id = view.index.view.nodes[parent].slot.id
        assert f"below slot {slot_id}, " in str(view.border_title)  # the title says where
        await pilot.press("r")
        assert view.window_root == 0
        await pilot.pause()
        assert "levels 0-" in str(view.border_title) and "slots hidden" in str(view.border_title)
        await pilot.press("u")  # at the root already: stays
        assert view.window_root == 0


async def test_the_title_follows_the_window_in_the_lookups_own_frame(tmp_path: Path) -> None:
    """`n` titles the drawing with the window it moved to before Textual draws (one
    frame, not a second one for the title); a WindowMoved that arrives late is stale."""
    app = build(tmp_path, "assigned-devices", lookup="rbtree")
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        view = await _follow_down(pilot, screen)
        assert view.index is not None
        for _ in range(10):
            screen.action_next_lookup()  # no pause: no message handled yet
            root = view.index.view.nodes[view.window_root]
            words = f"levels {root.depth}-{root.depth + view.window_depth - 1} below slot"
            assert f"{words} {root.slot.id}, " in str(view.border_title)
        await pilot.pause()
        title = str(view.border_title)
        view.post_message(WindowMoved(root.slot.id + 1000, 0, 1, 0))  # an old window
        await pilot.pause()
        assert str(view.border_title) == title


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
        assert events == ["kvm_memslot_lookup*"]  # * mmuscope's own event
        assert "/lookup/" in str(screen.query_one(EventLog).border_title)
        assert "/lookup/" in str(screen.query_one(CountersTable).border_title)
        log = screen.query_one(EventLog)
        logged = len(log.lines)
        await pilot.press("n", "n")
        await pilot.pause()
        new_lines = log.lines[logged:]
        text = "\n".join(new_lines)  # a long event wraps onto rows of its own fields
        assert "kvm_memslot_lookup" in text and "kvm_page_fault" not in text

        # f again shows the current filter; clearing it shows every event again.
        await pilot.press("f")
        assert app.screen.query_one("#pattern", Input).value == "lookup"
        await fill(pilot, app.screen, {"#pattern": ""})
        await pilot.press("enter")
        await pilot.pause()
        assert panel.filter_text == ""
        assert set(counter_events(screen)) == set(map(shown_name, panel.counters.totals))
        assert len(counter_events(screen)) > 1


async def test_f_redraws_the_log_under_the_new_filter(tmp_path: Path) -> None:
    """No line the filter hides stays on screen, and clearing it brings them back."""
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = memslots(app)
        await pilot.press("n", "n", "n")
        await pilot.pause()
        screen.flush_events(force=True)  # the log now, not at the next COUNTER_REDRAW
        log = screen.query_one(EventLog)
        everything = list(log.lines)
        assert any("kvm_page_fault" in line for line in everything)
        for pattern in ("lookup", ""):
            await pilot.press("f")
            dialog = app.screen
            dialog.query_one(Input).value = pattern
            await pilot.press("enter")
            await pilot.pause()
            if pattern:
                heads = [line for line in log.lines if not line.startswith(" ")]  # not wraps
                assert heads and all("kvm_memslot_lookup" in line for line in heads), heads
            else:
                assert list(log.lines) == everything  # the older lines, back


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
        await press_export(pilot)
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
        await press_export(pilot)
        dots = list(tmp_path.glob("*linear*.dot"))
        assert len(dots) == 1, list(tmp_path.iterdir())


async def test_shift_s_leaves_the_notifications_out_of_the_picture(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        app.notify("a note that belongs to no screenshot", timeout=30)
        await pilot.pause()
        assert "belongs" in app.export_screenshot().replace("&#160;", " ")
        await pilot.pause()
        await pilot.press("S")
        await pilot.pause()
        await pilot.pause()
        svgs = list(tmp_path.glob("*.svg"))
        assert len(svgs) == 1, list(tmp_path.iterdir())
        text = svgs[0].read_text().replace("&#160;", " ")
        assert "memslots" in text and "belongs" not in text
        assert any("wrote" in note for note in toasts(app))  # said after the shot


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


@pytest.mark.parametrize("screen_key", ["f1", "f2", "f4"])
async def test_help_at_120_columns_says_every_key_whole(tmp_path: Path, screen_key: str) -> None:
    """At 120×40 every row says what its key does (tab, shift+tab and ^c too), the
    descriptions wrap instead of being cut (nothing lies to the right: no sideways
    scroll), and End goes to the last key, not sideways."""
    app = build(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press(screen_key)
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        table = help_screen.query_one(DataTable)
        rows = [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
        empty = [row[:2] for row in rows if not row[2].strip()]
        assert not empty, f"keys without a word on what they do: {empty}"
        keys = {row[0] for row in rows}
        assert {"tab", "shift+tab", "^c"} <= keys
        assert table.max_scroll_x == 0, "the table reaches past the window's right edge"
        column = list(table.columns.values())[2].get_render_width(table) - 2 * table.cell_padding
        for key, row in zip(table.rows.values(), rows, strict=True):
            assert key.height * column >= len(row[2]), f"cut: {row}"
            assert len(row[2]) <= column or key.height > 1, f"not wrapped: {row}"
        await pilot.press("end")
        await pilot.pause()
        assert table.cursor_row == table.row_count - 1 and table.scroll_x == 0
        await pilot.press("home")
        assert table.cursor_row == 0


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
        assert screen.query_one(StructureView).shape.strategy == screen.explorer.lookup


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


# -- ctrl+q ------------------------------------------------------------------------


async def test_ctrl_q_quits_cleanly_even_while_playing(tmp_path: Path) -> None:
    app = build(tmp_path, playing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: memslots(app).lookups_done > 0)
        assert memslots(app).lookups_done > 0
        assert app.return_code is None and app.is_running
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert app.return_code == 0  # inside the context: the key, not run_test, ended it
        assert not app.is_running


async def test_e_exports_the_window_on_screen_and_shift_e_the_whole(tmp_path: Path) -> None:
    """512 slots: `e` writes the tree's window of levels the screen shows (cut-off
    subtrees as `+N slots` stubs, the lookup's hit in it), a picture a few screens
    wide; `E` writes the whole tree."""
    app = build(tmp_path, "assigned-devices")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n", "n")
        view = app.screen.query_one(StructureView)
        window = view.window_nodes()
        assert window is not None and 3 <= len(window) < 64
        await press_export(pilot)
        (dot,) = tmp_path.glob("*.dot")
        text = dot.read_text()
        nodes = set(re.findall(r"^  (s0_\d+) \[", text, re.MULTILINE))
        assert len(nodes) == len(window)
        assert "+" in text and " slots" in text and "style=dashed" in text
        assert "levels" in text and "below slot" in text  # the title says which window
        dot.rename(tmp_path / "window.dot.txt")
        for pdf in tmp_path.glob("*.pdf"):
            pdf.unlink()
        await pilot.press("E")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        (whole,) = tmp_path.glob("*-whole-*.dot")
        assert len(set(re.findall(r"^  (s0_\d+) \[", whole.read_text(), re.MULTILINE))) == 512
    if shutil.which("dot") is None:
        pytest.skip("Graphviz `dot` is not on PATH: the pictures' widths are not checked")
    widths = []
    for source in (tmp_path / "window.dot.txt", whole):
        svg = subprocess.run(["dot", "-Tsvg", str(source)], capture_output=True, text=True,
                             check=True, timeout=120).stdout  # fmt: skip
        found = re.search(r'<svg width="(\d+)pt"', svg)
        assert found is not None
        widths.append(int(found[1]))
    assert widths[0] < 2000 < 10000 < widths[1], widths
