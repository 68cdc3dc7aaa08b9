"""`KeptLines`: a widget that nothing asked to repaint hands the compositor the lines it
handed it the frame before.

Textual's compositor asks every visible widget whose clip overlaps the frame's dirty
regions for all its lines (`render_lines`), and a widget directly on the screen has the
screen as its clip: each frame of the memslots screen draws eighteen widgets, most with
no line to repaint (the containers, the header, the key bar, a panel that did not
change).  For each, `StylesCache.render_widget` works out its background from every
ancestor, its regions, its border titles' styles and padding, and then hands back the
lines it cached, passed through the line filters again: about a millisecond a frame in
all.  A widget's cached lines stay valid until Textual marks a line dirty or clears the
cache (`StylesCache.set_dirty`, `clear`: what every repaint, resize, scroll and style or
theme change does, and what Textual's own cache relies on), so `KeptStylesCache` keeps
the list its last `render()` returned, with the crop and filters it was made for, until
then; `KeptLines.render_lines` hands that list back.

`KeptLines.refresh` widens the rows it is asked to repaint to the widget's whole width,
border included: a row repaints whole anyway (the styles cache draws lines), and a dirty
region narrower than the widget made the compositor cut every repainted row to the
content's width before writing it (a new strip a row, and its terminal bytes again).

A container whose shown children cover every cell of it, none over another (the
memslots screen's columns, the main row, the event panel, the screen itself) hands the
compositor no lines at all (`Tiled`): the compositor paints front to back and keeps the
first strip each cell gets, so a tiled container's own lines were cut at every cell
boundary of each row it spans and then thrown away (some eighty rows a frame, about a
tenth of a frame of the memslots screen).  Where anything of it shows (a border,
padding, a gap, a child over another: a notification over the screen), it draws as
Textual does; tests/test_tui_kept_lines.py compares the composed screen both ways.

`KeptStylesCache` is a subclass of `textual._styles_cache.StylesCache`, a private class
(its `render`, `set_dirty` and `clear` as of Textual 8.2.8): pyproject.toml pins Textual to
the 8.2 series for it, and tests/test_tui_kept_lines.py compares every kept line with the
line Textual draws from scratch, so a Textual that changed it fails there first.
"""

from __future__ import annotations

from itertools import combinations
from typing import TYPE_CHECKING

from rich.terminal_theme import TerminalTheme
from textual._ansi_theme import DEFAULT_TERMINAL_THEME
from textual._styles_cache import RenderLineCallback, StylesCache
from textual.color import Color
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.filter import LineFilter
from textual.geometry import Region, Size, Spacing
from textual.screen import Screen
from textual.strip import Strip
from textual.style import Style
from textual.widget import Widget
from typing_extensions import Self

if TYPE_CHECKING:
    from collections.abc import Sequence

    from textual.css.styles import StylesBase

BorderLabel = tuple[Content, Color, Color, Style] | None


class KeptStylesCache(StylesCache):
    def __init__(self) -> None:
        super().__init__()
        # the lines the last render returned, for (crop, filters); None once dirty
        self._kept: tuple[Region, tuple[LineFilter, ...], list[Strip]] | None = None

    def clear(self) -> None:
        self._kept = None
        super().clear()

    def set_dirty(self, *regions: Region) -> None:
        self._kept = None
        super().set_dirty(*regions)

    def kept_lines(self, crop: Region, filters: Sequence[LineFilter]) -> list[Strip] | None:
        """The lines rendered last for `crop` and `filters`, if no line was set dirty and
        the cache was not cleared since."""
        kept = self._kept
        if kept is None or kept[0] != crop or kept[1] != tuple(filters):
            return None
        return kept[2]

    def render(
        self,
        styles: StylesBase,
        size: Size,
        base_background: Color,
        background: Color,
        render_content_line: RenderLineCallback,
        filters: Sequence[LineFilter],
        border_title: BorderLabel,
        border_subtitle: BorderLabel,
        content_size: Size | None = None,
        padding: Spacing | None = None,
        crop: Region | None = None,
        opacity: float = 1.0,
        ansi_theme: TerminalTheme = DEFAULT_TERMINAL_THEME,
        native_ansi: bool = False,
    ) -> list[Strip]:
        lines = super().render(
            styles,
            size,
            base_background,
            background,
            render_content_line,
            filters,
            border_title,
            border_subtitle,
            content_size=content_size,
            padding=padding,
            crop=crop,
            opacity=opacity,
            ansi_theme=ansi_theme,
            native_ansi=native_ansi,
        )
        self._kept = (crop or size.region, tuple(filters), lines)
        return lines


if TYPE_CHECKING:
    _Mixin = Widget
else:
    _Mixin = object  # not a DOMNode: the widget's CSS type names stay its Textual base's


class KeptLines(_Mixin):
    """Mixin (first in the bases) of a widget whose styles cache is a KeptStylesCache."""

    def render_lines(self, crop: Region) -> list[Strip]:
        cache = self._styles_cache
        if isinstance(cache, KeptStylesCache) and not self.BLANK:
            lines = cache.kept_lines(crop, self.get_line_filters())
            if lines is not None:
                return lines
        return super().render_lines(crop)

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Self:
        if regions:
            regions = whole_rows(self, regions)
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)


def whole_rows(widget: Widget, regions: Sequence[Region]) -> tuple[Region, ...]:
    """`regions` (relative to the content, as Widget.refresh takes them) widened to the
    widget's rows from its left edge to its right, border and padding included."""
    left, width = widget.styles.gutter.left, widget.outer_size.width
    return tuple(Region(-left, region.y, width, region.height) for region in regions)


def tiled_by_children(widget: Widget, visible: dict[Widget, tuple[Region, Region]]) -> bool:
    """Whether the shown part of `widget` (in the compositor's `visible` map: region and
    clip) is covered cell for cell by the shown parts of its children, none over another."""
    placed = visible.get(widget)
    if placed is None:
        return False
    shown = placed[0].intersection(placed[1])
    parts = []
    for child in widget.children:
        if (found := visible.get(child)) is not None:
            part = found[0].intersection(found[1]).intersection(shown)
            if part.area:
                parts.append(part)
    if not shown.area or sum(part.area for part in parts) != shown.area:
        return False
    return not any(a.overlaps(b) for a, b in combinations(parts, 2))


class Tiled(_Mixin):
    """Mixin (first in the bases) of a container that hands the compositor no lines
    while its children tile it (`tiled_by_children`, worked out once per map of the
    compositor's visible widgets: a layout or a scroll makes a new one)."""

    _tiled_for: tuple[object, bool] | None = None
    draw_tiled = False  # tests: draw the lines anyway, as Textual does

    def render_lines(self, crop: Region) -> list[Strip]:
        if self.children and not self.draw_tiled:
            screen = self if isinstance(self, Screen) else self.screen
            visible = screen._compositor.visible_widgets
            known = self._tiled_for
            if known is None or known[0] is not visible:
                known = self._tiled_for = (visible, tiled_by_children(self, visible))
            if known[1]:
                return []
        return super().render_lines(crop)


def use_kept_cache(widget: Widget) -> None:
    """Give `widget` a KeptStylesCache (call in its __init__, after Widget's)."""
    widget._styles_cache = KeptStylesCache()


class KeptHorizontal(Tiled, KeptLines, Horizontal):
    """Textual's Horizontal, its lines kept (CSS that names Horizontal applies)."""

    def __init__(self, *children: Widget, id: str | None = None) -> None:
        super().__init__(*children, id=id)
        use_kept_cache(self)


class KeptVertical(Tiled, KeptLines, Vertical):
    """Textual's Vertical, its lines kept (CSS that names Vertical applies)."""

    def __init__(self, *children: Widget, id: str | None = None) -> None:
        super().__init__(*children, id=id)
        use_kept_cache(self)
