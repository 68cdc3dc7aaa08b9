"""tui/widgets/kept_lines.py: a widget nothing asked to repaint hands the compositor the
lines it handed it before; they must be the lines Textual's styles cache draws from
scratch for it now, after lookups, a theme change and a resize, on every widget of the
memslots screen that keeps them."""

from __future__ import annotations

from pathlib import Path

from mmuscope.tui.app import MmuscopeApp
from mmuscope.tui.widgets.kept_lines import KeptStylesCache, KeptVertical, Tiled
from mmuscope.tui.widgets.row_cache import RowStylesCache
from textual._styles_cache import StylesCache
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from tests.tui_pilot import build, memslots


def _keeping(app: MmuscopeApp) -> list[Widget]:
    """The screen's widgets (scrollbars too) with a KeptStylesCache, shown."""
    widgets = list(app.screen.walk_children(Widget))
    for widget in list(widgets):
        widgets += [b for b in (widget._vertical_scrollbar, widget._horizontal_scrollbar) if b]
    return [
        w
        for w in widgets
        if isinstance(w._styles_cache, KeptStylesCache) and w.outer_size and w.display
    ]


def _scratch(widget: Widget, crop: Region) -> list[list[object]]:
    """The widget's lines drawn by a new Textual StylesCache (a RowStylesCache's framed
    rows forgotten too: Textual frames each row)."""
    ours = widget._styles_cache
    widget._styles_cache = StylesCache()
    try:
        return [list(strip) for strip in widget.render_lines(crop)]
    finally:
        widget._styles_cache = ours


def _check(app: MmuscopeApp, when: str) -> int:
    """Compare each kept list with the scratch drawing; the number of lists kept."""
    kept = 0
    for widget in _keeping(app):
        if isinstance(widget, Tiled):
            continue  # its lines are not the compositor's while its children tile it
        cache = widget._styles_cache
        assert isinstance(cache, KeptStylesCache)
        crop = Region(0, 0, *widget.outer_size)
        lines: list[Strip] = widget.render_lines(crop)
        if cache._kept is not None and cache._kept[2] is lines:
            kept += 1
        assert [list(s) for s in lines] == _scratch(widget, crop), (
            f"{type(widget).__name__}#{widget.id} {when}"
        )
    return kept


async def test_kept_lines_are_the_lines_drawn_from_scratch(tmp_path: Path) -> None:
    app = build(tmp_path, "assigned-devices", lookup="binary")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        screen = memslots(app)
        assert len(_keeping(app)) >= 12  # containers, header, panels, log, key bar, bars
        kept = 0
        for size, theme in (((120, 36), "textual-dark"), ((100, 30), "textual-light")):
            await pilot.resize_terminal(*size)
            app.theme = theme
            await pilot.pause()
            kept += _check(app, f"after {theme} at {size}")
            for step in range(4):
                screen.action_next_lookup() if step % 2 else screen.action_step()
                await pilot.pause()
                kept += _check(app, f"after lookup {step} in {theme} at {size}")
        assert kept > 40  # lists were handed back, not drawn again
        rows = [w for w in _keeping(app) if isinstance(w._styles_cache, RowStylesCache)]
        assert rows  # the panels keep theirs through their RowStylesCache


def _tiled(app: App[object]) -> list[Widget]:
    widgets = [app.screen, *app.screen.walk_children(Widget)]
    return [w for w in widgets if isinstance(w, Tiled)]


def _composed(app: App[object]) -> tuple[list[list[object]], list[list[object]]]:
    """The screen as the compositor composes it, and as it does with every tiled
    container drawing its own lines as Textual does."""
    tiled = _tiled(app)
    fast = [list(strip) for strip in app.screen._compositor.render_strips()]
    for widget in tiled:
        widget.draw_tiled = True
    try:
        slow = [list(strip) for strip in app.screen._compositor.render_strips()]
    finally:
        for widget in tiled:
            widget.draw_tiled = False
    return fast, slow


async def test_tiled_containers_compose_the_screen_textual_composes(tmp_path: Path) -> None:
    """The memslots screen, its columns, its main row and its event panel hand the
    compositor no lines while their children tile them; the composed screen is the one
    composed from their own lines, in two themes, after a resize and lookups."""
    app = build(tmp_path, "assigned-devices", lookup="binary")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        screen = memslots(app)
        tiled = {w.id or type(w).__name__ for w in _tiled(app)}
        assert {"MemslotsScreen", "main", "left", "right"} <= tiled
        for size, theme in (((120, 36), "textual-dark"), ((100, 30), "textual-light")):
            await pilot.resize_terminal(*size)
            app.theme = theme
            await pilot.pause()
            for step in range(3):
                screen.action_next_lookup()
                await pilot.pause()
                fast, slow = _composed(app)
                assert fast == slow, f"lookup {step} in {theme} at {size}"
            for widget in _tiled(app):
                assert widget.render_lines(Region(0, 0, *widget.outer_size)) == [], widget


class _Gaps(App[None]):
    """Containers their children do not tile: a short child, padding, a border."""

    CSS = """
    #short { height: 12; background: red; } #short Static { height: 3; }
    #padded { height: 6; padding: 1 2; background: blue; } #padded Static { height: 1fr; }
    #boxed { height: 1fr; border: round green; } #boxed Static { height: 1fr; }
    """

    def compose(self) -> ComposeResult:
        for name in ("short", "padded", "boxed"):
            with KeptVertical(id=name):
                yield Static(name)


async def test_containers_their_children_do_not_tile_draw_their_own_lines() -> None:
    app = _Gaps()
    async with app.run_test(size=(40, 30)) as pilot:
        await pilot.pause()
        fast, slow = _composed(app)
        assert fast == slow
        assert any("│" in str(segment) for row in fast for segment in row)  # the border
        for name in ("short", "padded", "boxed"):
            container = app.query_one(f"#{name}", KeptVertical)
            assert container.render_lines(Region(0, 0, *container.outer_size)), name
