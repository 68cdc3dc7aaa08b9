"""`SteadyScrollBar`: Textual's scrollbar, repainted only when what it draws changes.

A log that grows by a few rows a frame sets its scrollbar's `window_virtual_size` and
`position` every frame, and Textual repaints the whole bar for each (eight rows of the
event log's: about a millisecond a frame), although past some seventy rows the thumb
is one cell at the bottom and the bar draws the same cells every time.  This bar keeps
the drawing it last rendered (its size, colours and the cells `ScrollBarRender` puts
the thumb in) and lets a plain repaint through only when that changes; the reactives
themselves (what a drag or a click reads) are always up to date.

When it does repaint (a drawing scrolled to follow a lookup moves its thumb), only the
rows around the thumb are new: its rows go through a RowStylesCache, which hands back
the framed row it made before for a row of the same cells, so the track's rows cost no
new strips (nor the line filter's nor the compositor's work on them).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from math import ceil

from rich.console import RenderableType
from textual.geometry import Region
from textual.scrollbar import ScrollBar
from textual.widget import Widget
from typing_extensions import Self

from .kept_lines import KeptLines
from .row_cache import use_row_cache


class SteadyScrollBar(KeptLines, ScrollBar):
    _drawn: tuple[object, ...] | None = None  # the drawing last rendered
    _holding = 0  # depth of `holding()` blocks
    _held = False  # a repaint was asked for while holding

    def __init__(
        self, vertical: bool = True, name: str | None = None, *, thickness: int = 1
    ) -> None:
        super().__init__(vertical, name, thickness=thickness)
        use_row_cache(self)

    def _drawing(self) -> tuple[object, ...]:
        """What `render()` draws from: the colours it picks and the cells of the thumb."""
        parent = self.parent
        assert isinstance(parent, Widget)
        styles = parent.styles
        if self.grabbed:
            colours = (styles.scrollbar_background_active, styles.scrollbar_color_active)
        elif self.mouse_over:
            colours = (styles.scrollbar_background_hover, styles.scrollbar_color_hover)
        else:
            colours = (styles.scrollbar_background, styles.scrollbar_color)
        window = self.window_size if self.window_size < self.window_virtual_size else 0
        length = self.size.height if self.vertical else self.size.width
        bar = self.renderer.render_bar(
            size=length,
            virtual_size=ceil(self.window_virtual_size),
            window_size=ceil(window),
            position=self.position,
            thickness=self.thickness,
            vertical=self.vertical,
        )
        transparent = self.screen.styles.scrollbar_color.a == 0
        background = parent.background_colors[0] if colours[0].a < 1 else None
        return self.size, colours, background, transparent, self.renderer, bar.segments

    def render(self) -> RenderableType:
        self._drawn = self._drawing()
        return super().render()

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Self:
        plain = repaint and not (regions or layout or recompose)
        if plain and self._holding:
            self._held = True  # decided once the owner has set every reactive
            return self
        if plain and self._unmoved():
            return self  # the same cells: nothing to repaint
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def _unmoved(self) -> bool:
        return self._drawn is not None and self.is_mounted and self._drawing() == self._drawn

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Repaint once at the end, if the drawing then differs from the one shown: the
        owner sets `window_virtual_size`, then `position`, and the bar in between (the
        old position in the new range) is never shown."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding and self._held:
                self._held = False
                if not self._unmoved():
                    super().refresh()


def steady_vertical_scrollbar(widget: Widget) -> ScrollBar:
    """`widget.vertical_scrollbar` made as Widget.vertical_scrollbar makes it (Textual 8),
    a SteadyScrollBar: for a widget's `vertical_scrollbar` property."""
    return _steady_scrollbar(widget, vertical=True)


def steady_horizontal_scrollbar(widget: Widget) -> ScrollBar:
    """`widget.horizontal_scrollbar` as Widget.horizontal_scrollbar makes it, a
    SteadyScrollBar: for a widget's `horizontal_scrollbar` property."""
    return _steady_scrollbar(widget, vertical=False)


def _steady_scrollbar(widget: Widget, vertical: bool) -> ScrollBar:
    """The widget's scrollbar of that direction, made (hidden, started) on first use."""
    name = "vertical" if vertical else "horizontal"
    bar: ScrollBar | None = getattr(widget, f"_{name}_scrollbar")
    if bar is None:
        thickness = widget.scrollbar_size_vertical if vertical else widget.scrollbar_size_horizontal
        bar = SteadyScrollBar(vertical=vertical, name=name, thickness=thickness)
        bar.display = False
        setattr(widget, f"_{name}_scrollbar", bar)
        widget.app._start_widget(widget, bar)
    return bar
