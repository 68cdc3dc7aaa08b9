"""The event log widget (tui/widgets/event_log.py): rows appended never lay the screen
out again, the last `max_lines` are kept, the view follows the newest row (also once
full, where Textual's Log kept drawing stale rows), a view scrolled back stays, and the
scrollbar repaints when its thumb moves, not at every append."""

from __future__ import annotations

from mmuscope.tui.widgets.event_log import ROW_STRIPS_KEPT, EventLog, row_strip
from mmuscope.tui.widgets.steady_scrollbar import SteadyScrollBar
from rich.console import RenderableType
from rich.segment import Segment
from rich.style import Style
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.strip import Strip

from tests.tui_pilot import drawn_lines


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


def _thumb_rows(log: EventLog) -> list[int]:
    """The rows of the log's scrollbar where its thumb is drawn (as the compositor paints
    them: the bar's cached lines, so a repaint the bar skipped would show here)."""
    bar = log.vertical_scrollbar
    strips = bar.render_lines(Region(0, 0, *bar.outer_size))
    return [y for y, strip in enumerate(strips) if any(s.style and s.style.reverse for s in strip)]


async def test_the_scrollbar_repaints_when_its_thumb_moves_and_only_then() -> None:
    app = LogApp()
    async with app.run_test(size=(40, 8)) as pilot:
        log = app.query_one(EventLog)
        await pilot.pause()
        log.write_lines(f"row {i}" for i in range(45))
        await pilot.pause()
        bar = log.vertical_scrollbar
        assert isinstance(bar, SteadyScrollBar)
        bottom = _thumb_rows(log)
        assert bottom and bottom[-1] == bar.size.height - 1, bottom  # following the end
        repaints = 0
        original = SteadyScrollBar.render

        def counted(self: SteadyScrollBar) -> RenderableType:
            nonlocal repaints
            repaints += 1
            return original(self)

        SteadyScrollBar.render = counted  # type: ignore[method-assign]
        try:
            log.write_lines(["row 45", "row 46"])  # the thumb stays in the bottom cell
            await pilot.pause()
            assert repaints == 0 and _thumb_rows(log) == bottom
            assert bar.position == log.scroll_y  # what a drag reads is up to date
            log.scroll_home(animate=False, immediate=True)
            await pilot.pause()
            assert repaints == 1 and _thumb_rows(log)[0] == 0  # moved: drawn at the top
        finally:
            SteadyScrollBar.render = original  # type: ignore[method-assign]


def test_a_row_is_the_strip_textual_makes_of_its_text() -> None:
    """row_strip makes at once what Strip([Segment]).crop_extend().apply_offsets() makes
    (segments, styles and the selection offsets in their meta), also for an empty row,
    a full one, one cut at the width, wide characters and a null style."""
    styles = [Style(color="red", bgcolor="black"), Style.null()]
    texts = ["", "x", "kvm_mmu_get_page gfn 1000", "a" * 20, "a" * 27, "日本語の行", "é" * 5]
    for style in styles:
        for text in texts:
            for width, row in ((20, 0), (24, 7), (3, 41)):
                made = Strip([Segment(text, style)])
                expected = made.crop_extend(0, width, style).apply_offsets(0, row)
                strip = row_strip(text, width, style, row)
                assert list(strip) == list(expected), (text, width)
                assert strip.cell_length == expected.cell_length


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
