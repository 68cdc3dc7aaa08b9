"""The panels repaint only the lines a change touches (tui/widgets/panel.py, line_diff.py,
slot_table.py): what they leave on screen must be what a whole repaint draws."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widget import Widget

from tests.tui_pilot import SIZE, build, memslots
from tui.app import MmuscopeApp


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
        shown = app.export_screenshot()
        repaint_whole(app)
        await pilot.pause()
        assert app.export_screenshot() == shown
