"""tui/widgets/row_cache.py: the panels' rows, framed once per render, are the strips
Textual's own styles cache draws, segment for segment (styles included), on every panel
of the memslots screen (bordered, padded, scrolled, focused), in two themes, and on the
replay screen's panels."""

from __future__ import annotations

import random
from pathlib import Path

from mmuscope.tui.app import make_app
from mmuscope.tui.widgets.cost_panel import CostPanel
from mmuscope.tui.widgets.event_log import EventLog
from mmuscope.tui.widgets.line_templates import _split
from mmuscope.tui.widgets.panel import TextPanel
from mmuscope.tui.widgets.replay_panels import ReplayPanel
from mmuscope.tui.widgets.row_cache import RowStylesCache
from mmuscope.tui.widgets.steady_scrollbar import SteadyScrollBar
from mmuscope.tui.widgets.structure import StructureView
from rich.text import Text
from textual._styles_cache import StylesCache
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.visual import Visual, visualize
from textual.widget import Widget

from tests.datafiles import FIXTURES
from tests.tui_pilot import build, memslots


def _both_ways(widget: Widget) -> tuple[list[object], list[object]]:
    """The widget's rows drawn whole by its RowStylesCache and by Textual's StylesCache."""
    crop = Region(0, 0, *widget.outer_size)
    ours = widget._styles_cache
    assert isinstance(ours, RowStylesCache)
    ours.clear()
    fast = [list(strip) for strip in widget.render_lines(crop)]
    widget._styles_cache = StylesCache()
    try:
        plain = [list(strip) for strip in widget.render_lines(crop)]
    finally:
        widget._styles_cache = ours
        ours.clear()
    return fast, plain


async def test_rows_are_textuals_own_on_every_panel(tmp_path: Path) -> None:
    app = build(tmp_path, "assigned-devices")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        screen = memslots(app)
        for _ in range(3):
            screen.action_next_lookup()
        app.screen.query_one(EventLog).focus()  # the focused border and tint
        await pilot.pause()
        for theme in ("textual-dark", "textual-light"):
            app.theme = theme
            await pilot.pause()
            checked = 0
            for widget in screen.walk_children(Widget):
                if isinstance(widget._styles_cache, RowStylesCache) and widget.outer_size:
                    fast, plain = _both_ways(widget)
                    assert fast == plain, f"{type(widget).__name__} in {theme}"
                    checked += 1
            assert checked >= 7  # bar, drawing, path, slots, costs, log, counters


async def test_rows_are_textuals_own_on_the_replay_panels(tmp_path: Path) -> None:
    trace = FIXTURES / "trace-kvmmmu-sample.txt"
    app = make_app(trace=trace, playing=False, export_dir=tmp_path)
    app.animation_level = "none"
    async with app.run_test(size=(120, 40)) as pilot:
        index = app.screen.timeline.index  # type: ignore[attr-defined]
        for _ in range(200):  # bounded: the sample's 29 events index at once
            if index.done:
                break
            await pilot.pause(0.02)
        await pilot.press("end")  # pages, sptes, a flip, MMIO sptes: every panel drawn
        await pilot.pause()
        assert index.done and app.screen.timeline.position == 29  # type: ignore[attr-defined]
        panels = list(app.screen.query(ReplayPanel))
        assert len(panels) == 4  # timeline, pages, grid, state
        for widget in panels:
            fast, plain = _both_ways(widget)
            assert fast == plain, type(widget).__name__


async def test_panel_lines_from_templates_are_textuals_own(tmp_path: Path) -> None:
    """tui/widgets/line_templates.py: a panel's lines poured into the segments Textual
    drew the frame before are the strips Textual draws from scratch, in two themes and
    after a resize (cost panel, lookup bar, path panel, counters)."""
    app = build(tmp_path, "assigned-devices")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        screen = memslots(app)
        for size, theme in (((120, 36), "textual-dark"), ((100, 30), "textual-light")):
            await pilot.resize_terminal(*size)
            app.theme = theme
            await pilot.pause()
            panels = [w for w in screen.walk_children(TextPanel) if w.size.width]
            poured = {id(panel): panel._templates.poured for panel in panels}
            for _ in range(4):
                screen.action_next_lookup()
                await pilot.pause()
                for panel in panels:
                    width, height = panel.size
                    visual = visualize(panel, panel.render(), markup=panel._render_markup)
                    scratch = Visual.to_strips(panel, visual, width, height, panel.visual_style)
                    assert panel._draw() == scratch, f"{type(panel).__name__} in {theme}"
            costs = screen.query_one(CostPanel)
            assert costs._templates.poured > poured[id(costs)]  # the templates were used


def test_template_lines_cut_spans_as_rich_splits_them() -> None:
    """line_templates._split: each line and the part of each span on it, as Rich's
    `Text.split` gives them (spans left empty by the cut dropped), for random texts."""
    rng = random.Random(13)
    for _ in range(500):
        plain = "".join(rng.choice("ab\n") for _ in range(rng.randint(0, 16)))
        text = Text(plain)
        for _ in range(rng.randint(0, 4)):
            start = rng.randint(0, len(plain))
            text.stylize(rng.choice(["bold", "red", "reverse"]), start, rng.randint(start, 16))
        height = rng.randint(1, 6)
        lines, spans = _split(text, height)
        rich = [
            (line.plain, [(s.start, s.end, s.style) for s in line.spans if s.end > s.start])
            for line in text.split("\n", allow_blank=True)[:height]
        ]
        assert list(zip(lines, spans, strict=False))[: len(rich)] == rich, repr(plain)


async def test_scrollbar_rows_are_textuals_own_as_its_thumb_moves(tmp_path: Path) -> None:
    """The drawing's scrollbar (SteadyScrollBar): its rows go through a RowStylesCache
    that hands back the framed row it made for a row of the same segments; after the
    thumb moved with lookups (binary search scrolls the array to each probe), in two
    themes and after a resize, they are the rows Textual's StylesCache draws afresh."""
    app = build(tmp_path, "assigned-devices", lookup="binary")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        screen = memslots(app)
        view = screen.query_one(StructureView)
        for size, theme in (((120, 36), "textual-dark"), ((100, 30), "textual-light")):
            await pilot.resize_terminal(*size)
            app.theme = theme
            await pilot.pause()
            bar = view.vertical_scrollbar
            assert isinstance(bar, SteadyScrollBar) and bar.display
            cache = bar._styles_cache
            assert isinstance(cache, RowStylesCache)
            reused, offsets = cache.reused, set()
            for _ in range(6):
                screen.action_next_lookup()
                await pilot.pause()
                offsets.add(view.scroll_offset.y)
                fast, plain = _both_ways(bar)
                assert fast == plain, f"scrollbar in {theme} at {size}"
            assert len(offsets) > 1  # the thumb moved
            assert cache.reused > reused  # and rows of known segments were handed back


async def test_known_rows_framed_afresh_when_the_frame_changes(tmp_path: Path) -> None:
    """A border of another colour around the same content: the rows kept for the content
    (by strip or by its segments) were framed with the old border and are not handed
    back (the cost panel's text does not change while paused)."""
    app = build(tmp_path, "assigned-devices")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        costs = memslots(app).query_one(CostPanel)
        before, _ = _both_ways(costs)
        for colour in ("red", "green"):
            costs.styles.border = ("round", colour)
            await pilot.pause()
            fast, plain = _both_ways(costs)
            assert fast == plain, colour
            assert fast[1:-1] != before[1:-1]  # the content rows' edges changed


class _AnsiText(App[None]):
    """A panel whose text has ANSI colours in a truecolour theme: the app's
    ANSIToTruecolor filter changes its rows."""

    CSS = "TextPanel { height: 4; border: round $primary; }"

    def compose(self) -> ComposeResult:
        yield TextPanel(id="ansi")


async def test_rows_the_truecolour_filter_changes_are_filtered() -> None:
    """A framed row is its own filtered row only where the filter changes nothing."""
    app = _AnsiText()
    async with app.run_test(size=(30, 5)) as pilot:
        panel = app.query_one(TextPanel)
        text = Text("red ", style="red")
        text.append("on blue", style="on blue")
        text.append("\ntruecolour only")
        panel.show_content(text)
        await pilot.pause()
        fast, plain = _both_ways(panel)
        assert fast == plain
        colours = [s.style.color for row in fast for s in row if s.style and s.style.color]
        assert colours and all(c.triplet is not None for c in colours)  # no ANSI left
        lines = panel.render_lines(Region(0, 0, 30, 4))
        filters, background = app.get_line_filters(), panel.background_colors[1]
        assert filters
        as_is = [all(row.apply_filter(f, background) is row for f in filters) for row in lines]
        assert as_is == [True, False, True, True]  # all but the row with ANSI colours


async def test_border_rows_are_textuals_own_as_titles_themes_and_sizes_change(
    tmp_path: Path,
) -> None:
    """The kept top and bottom border rows: a title of the same text in other styles, a
    subtitle, a theme, a size and a border colour each draw them as Textual does."""
    app = build(tmp_path, "assigned-devices", lookup="binary")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        view = memslots(app).query_one(StructureView)
        cache = view._styles_cache
        assert isinstance(cache, RowStylesCache)
        titles = ("binary · [b]window[/b]", "binary · window", "binary · [i]window[/i]")
        for size, theme in (((120, 36), "textual-dark"), ((100, 30), "textual-light")):
            await pilot.resize_terminal(*size)
            app.theme = theme
            for title in (*titles, titles[0]):
                view.border_title = title
                view.border_subtitle = title.replace("binary", "legend")
                await pilot.pause()
                fast, plain = _both_ways(view)
                assert fast[0] == plain[0], f"title {title!r} in {theme} at {size}"
                assert fast[-1] == plain[-1], f"subtitle {title!r} in {theme} at {size}"
        kept = dict(cache._borders)
        assert kept
        _both_ways(view)
        assert all(cache._borders[key] is row for key, row in kept.items())  # handed back
        view.styles.border = ("round", "red")
        await pilot.pause()
        fast, plain = _both_ways(view)
        assert fast == plain
