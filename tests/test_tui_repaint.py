"""The panels repaint only the lines a change touches (tui/widgets/panel.py, line_diff.py,
slot_table.py): what they leave on screen must be what a whole repaint draws."""

from __future__ import annotations

from pathlib import Path

import pytest
from mmuscope.tui.app import MmuscopeApp
from mmuscope.tui.widgets.event_log import EventLog
from mmuscope.tui.widgets.structure import StructureView
from textual.widget import Widget

from tests.tui_pilot import SIZE, build, memslots


def repaint_whole(app: MmuscopeApp) -> None:
    """Every widget draws all its lines again at the next frame."""
    for widget in app.screen.walk_children(Widget):
        widget.refresh()


@pytest.mark.parametrize(
    ("layout", "lookup"),
    [("pc-4g", "rbtree"), ("pc-4g", "binary"), ("assigned-devices", "wbtree")],
)
async def test_lines_repainted_alone_are_those_a_whole_repaint_draws(
    tmp_path: Path, layout: str, lookup: str
) -> None:
    app = build(tmp_path, layout, lookup=lookup)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = memslots(app)
        for step in range(10):  # lookups shown whole, then probe by probe, caches on/off
            if step == 5:
                await pilot.press("c", "v")
            screen.action_next_lookup() if step % 2 else screen.action_step()
            await pilot.pause()
        # kvm_stat's CurAvg/s moves with the clock: no sample between the two pictures
        assert screen._counter_timer is not None
        screen._counter_timer.pause()
        await pilot.pause()
        shown = app.export_screenshot()
        repaint_whole(app)
        await pilot.pause()
        assert app.export_screenshot() == shown


@pytest.mark.parametrize("lookup", ["linear", "binary", "rbtree"])
async def test_rows_kept_for_what_they_show_are_the_rows_drawn_afresh(
    tmp_path: Path, lookup: str
) -> None:
    """The drawing and the log hand back a strip drawn before for a row that shows the
    same (scrolled to follow lookups at 512 slots, a window back at a root, the log grown
    by its new rows): each is the strip drawn from scratch, segment for segment."""
    app = build(tmp_path, "assigned-devices", lookup=lookup)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = memslots(app)
        view, log = screen.query_one(StructureView), screen.query_one(EventLog)
        for step in range(16):
            screen.action_next_lookup() if step % 3 else screen.action_step()
            await pilot.pause()
            kept_view = [list(view.draw_line(y)) for y in range(view.size.height)]
            kept_log = [list(log.render_line(y)) for y in range(log.size.height)]
            view._drawn_rows.clear()
            log._row_strips.clear()
            assert kept_view == [list(view.draw_line(y)) for y in range(view.size.height)]
            assert kept_log == [list(log.render_line(y)) for y in range(log.size.height)]
