"""One bench table drawn as horizontal bars in the terminal (the Experiments screen).

The same chart as `mmuscope bench --svg` (engine/claims/chart.py decides the rows, the
bars, the pairing of the thread's numbers and the scale), laid out in character cells:
the table's name and verdict, the claim, a legend, then per row its label and one bar
per drawn value, the model's band as an error bar under it (├──┤), the thread's
number as a grey bar under that, and the note.  A line-API `ScrollView`: long tables
(memslot_lookup's 60 rows) scroll, and the layout follows the widget's width.  Colours
come from component classes over the theme's variables.
"""

from __future__ import annotations

import textwrap

from mmuscope.engine.claims.chart import (
    Bar,
    ChartSpec,
    Group,
    band_room,
    bar_fraction,
    group_top,
    groups,
    infer_spec,
    log_scale,
    top_value,
    usable,
)
from mmuscope.engine.claims.table import ClaimTable, fmt_number
from mmuscope.engine.threads import THREADS
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

Line = list[tuple[str, str]]  # (text, component) runs
EIGHTHS = " ▏▎▍▌▋▊▉"
VALUE_WIDTH = 11
SERIES_CLASSES = 4


def bar_cells(fraction: float, width: int) -> str:
    """A bar `fraction` of `width` cells long, to an eighth of a cell."""
    eighths = round(max(0.0, min(fraction, 1.0)) * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + (EIGHTHS[part] if part else "")


def _value(value: float | None) -> str:
    """A number whole (the band's ends too): never cut to 4 digits."""
    return "—" if value is None else fmt_number(value)


class BarChart(ScrollView, can_focus=False):
    """A `ClaimTable` as bars; `show()` draws one, `show_message()` a line of text."""

    COMPONENT_CLASSES = {
        "bar-chart--title",
        "bar-chart--yes",
        "bar-chart--no",
        "bar-chart--label",
        "bar-chart--muted",
        "bar-chart--thread",
        "bar-chart--series-0",
        "bar-chart--series-1",
        "bar-chart--series-2",
        "bar-chart--series-3",
    }

    DEFAULT_CSS = """
    BarChart { background: $surface; border: round $panel; border-title-color: $primary;
        padding: 0 1; }
    BarChart > .bar-chart--title { color: $primary; text-style: bold; }
    BarChart > .bar-chart--yes { color: $success; text-style: bold; }
    BarChart > .bar-chart--no { color: $error; text-style: bold; }
    BarChart > .bar-chart--label { color: $accent; text-style: bold; }
    BarChart > .bar-chart--muted { color: $text-muted; }
    BarChart > .bar-chart--thread { color: $node-idle; }
    BarChart > .bar-chart--series-0 { color: $node-path; }
    BarChart > .bar-chart--series-1 { color: $node-compare; }
    BarChart > .bar-chart--series-2 { color: $node-hit; }
    BarChart > .bar-chart--series-3 { color: $node-cache-hit; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.table: ClaimTable | None = None
        self.spec: ChartSpec | None = None
        self.message = "select a table (↑/↓) and press enter to run it"
        self.lines: list[Line] = []
        self._styles: dict[str, Style] = {}

    # -- what to draw ---------------------------------------------------------------

    def show(self, table: ClaimTable, spec: ChartSpec | None = None) -> None:
        self.table, self.spec = table, spec
        self.scroll_to(0, 0, animate=False)
        self._relayout()

    def show_message(self, message: str) -> None:
        self.table, self.message = None, message
        self._relayout()

    def text(self) -> str:
        """Everything the chart holds, as plain text (for tests and the log)."""
        return "\n".join("".join(run for run, _ in line) for line in self.lines)

    # -- layout ---------------------------------------------------------------------

    def on_resize(self, event: events.Resize) -> None:
        self._relayout()

    def notify_style_update(self) -> None:
        self._styles.clear()
        super().notify_style_update()

    def _relayout(self) -> None:
        width = max(self.scrollable_content_region.width, 20)
        if self.table is None:
            self.lines = [[(line, "muted")] for line in textwrap.wrap(self.message, width)]
        else:
            self.lines = chart_lines(self.table, self.spec, width)
        self.virtual_size = Size(0, len(self.lines))  # laid out to the width: no x scroll
        self.refresh()

    # -- drawing --------------------------------------------------------------------

    def _style(self, component: str) -> Style:
        style = self._styles.get(component)
        if style is None:
            base = self.rich_style
            style = (
                base
                if not component
                else base + self.get_component_rich_style(f"bar-chart--{component}", partial=True)
            )
            self._styles[component] = style
        return style

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        base = self._style("")
        row = y + scroll_y
        if not 0 <= row < len(self.lines):
            return Strip.blank(width, base)
        segments = [Segment(text, self._style(component)) for text, component in self.lines[row]]
        return Strip(segments).crop_extend(scroll_x, scroll_x + width, base)


def chart_lines(table: ClaimTable, spec: ChartSpec | None, width: int) -> list[Line]:
    """The chart laid out for `width` cells."""
    spec = usable(spec, table) if spec is not None else infer_spec(table)
    all_groups = groups(table, spec)
    log = log_scale(spec, all_groups)
    top = top_value(all_groups)
    verdict = (table.headline(), "yes" if table.reproduced else "no")
    lines: list[Line] = [[(table.name, "title"), ("  ", ""), verdict]]
    lines += [
        [(text, "muted")]
        for text in textwrap.wrap(f"{THREADS[table.thread].title}: {table.claim}", width)
    ]
    lines.append(_legend(spec, log))
    names = [*spec.values, "thread"]
    name_width = min(max(len(n) for n in names) + 1, max(width // 3, 6))
    values = [_value(bar.value) for group in all_groups for bar in group.bars]
    value_width = max([VALUE_WIDTH, *(len(v) + 1 for v in values)])
    bar_width = max(width - name_width - value_width - 1, 4)
    for group in all_groups:
        scale = (group_top(group) if spec.per_row else top) * band_room(spec)
        lines += _group_lines(
            group, spec, scale, log and not spec.per_row, name_width, bar_width, width
        )
    lines.append([])
    lines += [[(text, "muted")] for text in textwrap.wrap(table.note, width)]
    return lines


def _legend(spec: ChartSpec, log: bool) -> Line:
    line: Line = []
    for n, name in enumerate(spec.values):
        line += [("■ ", f"series-{n % SERIES_CLASSES}"), (f"{name}  ", "muted")]
    if spec.threads:
        line += [("■ ", "thread"), ("thread  ", "muted")]
    if spec.bands:
        line += [("├┤ ", ""), ("band  ", "muted")]
    scale = "log scale" if log else ""
    unit = " · ".join(part for part in (spec.unit, scale) if part)
    if unit:
        line.append((f"({unit})", "muted"))
    return line


def _group_lines(
    group: Group,
    spec: ChartSpec,
    top: float,
    log: bool,
    name_width: int,
    bar_width: int,
    width: int,
) -> list[Line]:
    lines: list[Line] = [[]]
    lines += [[(text, "label")] for text in _wrap(group.label, width)]
    lines += [[(text, "muted")] for text in _wrap(group.thread_text, width)]
    series = {name: n % SERIES_CLASSES for n, name in enumerate(spec.values)}
    for bar in group.bars:
        name = "thread" if bar.thread else bar.series
        component = "thread" if bar.thread else f"series-{series[bar.series]}"
        cells = bar_cells(bar_fraction(bar.value, top, log), bar_width)
        lines.append(
            [
                (name[: name_width - 1].ljust(name_width), "muted"),
                (cells, component),
                (" " + _value(bar.value), "thread" if bar.thread else ""),
            ]
        )
        if bar.has_band:
            lines += _band_lines(bar, top, log, name_width, bar_width, width)
    return lines


def _wrap(text: str, width: int) -> list[str]:
    """Wrapped at spaces, a word never cut (one wider than the chart keeps its line)."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


def band_cells(low: float, high: float, top: float, log: bool, width: int) -> str:
    """`├───┤` from `low` to `high` on a bar of `width` cells."""
    start = round(bar_fraction(low, top, log) * width)
    end = max(start + 1, round(bar_fraction(high, top, log) * width))
    return " " * start + "├" + "─" * (end - start - 1) + "┤"


def _band_lines(
    bar: Bar, top: float, log: bool, name_width: int, bar_width: int, width: int
) -> list[Line]:
    """The band as `├──┤`, its ends after it when they fit, else on the next line."""
    assert bar.low is not None and bar.high is not None
    cells = band_cells(bar.low, bar.high, top, log, bar_width)
    ends = f" {_value(bar.low)}–{_value(bar.high)}"
    line: Line = [("band".ljust(name_width), "muted"), (cells, "")]
    if name_width + len(cells) + len(ends) <= width:
        return [[*line, (ends, "muted")]]
    return [line, [(" " * name_width + ends.strip(), "muted")]]
