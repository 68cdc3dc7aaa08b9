"""The event log widget (tui/widgets/event_log.py): rows appended never lay the screen
out again, the last `max_lines` rows are kept, the view follows the newest row (also once
full, where Textual's Log kept drawing stale rows), a view scrolled back stays, and rows
drawn before are drawn as they were."""

from __future__ import annotations

import pytest
from mmuscope.tui.widgets.event_log import ROW_STRIPS_KEPT, EventLog
from textual.app import App, ComposeResult
from textual.geometry import Region

from tests.tui_pilot import drawn_lines


class LogApp(App[None]):
    def compose(self) -> ComposeResult:
        yield EventLog(max_lines=50, id="log")


async def test_rows_append_without_a_layout_and_the_view_follows_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = LogApp()
    async with app.run_test(size=(40, 8)) as pilot:
        log = app.query_one(EventLog)
        await pilot.pause()
        layouts = []
        repaint = log.refresh

        def refresh(*regions: Region, **options: bool) -> EventLog:
            if options.get("layout"):
                layouts.append(regions)
            return repaint(*regions, **options)

        monkeypatch.setattr(log, "refresh", refresh)
        for batch in range(12):
            log.write_lines(f"row {batch * 10 + i}" for i in range(10))
            assert not layouts, "an append asked for a layout"
            await pilot.pause()
            shown = [line.strip("│ ▁▇█▔▂") for line in drawn_lines(log)[1:-1]]
            assert shown[-1] == f"row {batch * 10 + 9}", shown  # the newest, at the bottom
        assert log.line_count == 50 and log.lines[0] == "row 70" and log.lines[-1] == "row 119"
        log.scroll_home(animate=False, immediate=True)
        await pilot.pause()
        log.write_lines(["row 120\tand a tab"])
        await pilot.pause()
        assert log.scroll_y == 0  # scrolled back: stays there
        assert log.lines[-1] == "row 120 and a tab"
        log.clear()
        await pilot.pause()
        assert log.line_count == 0 and log.virtual_size.height == 0


class LongLogApp(App[None]):
    def compose(self) -> ComposeResult:
        yield EventLog(max_lines=1000, id="log")


async def test_rows_kept_past_the_bound_are_drawn_again_as_they_were() -> None:
    """The log keeps the strips of its last ROW_STRIPS_KEPT rows drawn (the first drawn
    go first): scrolled back past them, and at the end again, every row is the strip
    drawn from scratch."""
    app = LongLogApp()
    async with app.run_test(size=(40, 8)) as pilot:
        log = app.query_one(EventLog)
        await pilot.pause()
        for batch in range(30):
            log.write_lines(f"row {batch * 10 + i}" for i in range(10))
            await pilot.pause()
        assert len(log._row_strips) <= ROW_STRIPS_KEPT < log.line_count
        for y in (0.0, 150.0, float(log.max_scroll_y)):
            log.scroll_to(y=y, animate=False, immediate=True)
            await pilot.pause()
            kept = [list(log.render_line(row)) for row in range(log.size.height)]
            log._row_strips.clear()
            assert kept == [list(log.render_line(row)) for row in range(log.size.height)]
            assert len(log._row_strips) <= ROW_STRIPS_KEPT


async def test_a_cleared_log_shows_the_rows_written_next() -> None:
    """A log cleared while scrolled back (a replay's seek with End or `g`, a new filter:
    both write the log afresh) shows the rows written after it, not the blank rows at
    the old scroll offset."""
    app = LogApp()
    async with app.run_test(size=(40, 8)) as pilot:
        log = app.query_one(EventLog)
        await pilot.pause()
        log.write_lines(f"row {i}" for i in range(50))
        log.scroll_to(y=20, animate=False, immediate=True)
        await pilot.pause()
        log.clear()
        log.write_lines(f"new {i}" for i in range(3))
        await pilot.pause()
        shown = [line.strip("│ ▁▇█▔▂") for line in drawn_lines(log)[1:-1]]
        assert shown[:3] == ["new 0", "new 1", "new 2"], shown
