"""The event log widget (tui/widgets/event_log.py): rows appended never lay the screen
out again, the last `max_lines` are kept, the view follows the newest row (also once
full, where Textual's Log kept drawing stale rows), and a view scrolled back stays."""

from __future__ import annotations

from textual.app import App, ComposeResult

from tests.tui_pilot import drawn_lines
from tui.widgets.event_log import EventLog


class LogApp(App[None]):
    def compose(self) -> ComposeResult:
        yield EventLog(max_lines=50, id="log")


async def test_rows_append_without_a_layout_and_the_view_follows_the_end() -> None:
    app = LogApp()
    async with app.run_test(size=(40, 8)) as pilot:
        log = app.query_one(EventLog)
        await pilot.pause()
        for batch in range(12):
            log.write_lines(f"row {batch * 10 + i}" for i in range(10))
            assert not log._layout_required, "an append asked for a layout"
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
