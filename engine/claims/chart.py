"""Bar charts of bench tables: SVG written by hand, and a Graphviz dot version.

One chart per `ClaimTable` (`mmuscope bench --svg DIR`, the Experiments screen's `e`):
a title with the table's name, its claim and "reproduced: yes/no", then one group of
horizontal bars per row — the model's values, and the thread's own number drawn beside
the value it is paired with (grey), where the thread has one.  Thread numbers that pair
with no model value (a time where the model counts work) are printed under the row's
label.  A `ChartSpec` says which columns label a row, which are drawn and which thread
column goes with which; `infer_spec()` guesses one for tables it does not know.  When
the values span more than two decades the scale is logarithmic (log10(1 + v)), and the
chart says so.  A drawn column with a band (`bands`: its `low` and `high` columns,
engine/claims/band.py) gets an error bar from low to high beside the thread's mark;
tables whose rows are in different units (`per_row`) scale each row on its own.

No third-party package: the SVG is text, every string escaped for XML; files are written
atomically (`engine.export.render.write_atomically`).
"""

from __future__ import annotations

import math
import pathlib
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..export.render import write_atomically
from ..threads import THREADS
from .band import GREEN
from .table import HOLDS, Cell, ClaimTable, fmt_cell

WIDTH = 1000
LABEL_W = 330
BAR_X = LABEL_W + 10
VALUE_W = 120
BAR_MAX = WIDTH - BAR_X - VALUE_W
BAR_H = 12
BAR_GAP = 2
GROUP_GAP = 10
LINE_H = 16
WRAP = 140  # characters per title or note line
LABEL_CHARS = 50  # characters of a row's label that fit left of the bars
NOTE_LINES = 12
LOG_DECADES = 2  # beyond a max/min ratio of 10**2 the scale is logarithmic
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948", "#76b7b2")
THREAD_COLOUR = "#9d9d9d"
YES, NO, AMBER = "#2e7d32", "#c62828", "#b26a00"
BAND_COLOUR = "#222222"
XML_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("'", "&apos;"))


@dataclass(frozen=True, slots=True)
class ChartSpec:
    """Which columns label a row, which are drawn, and each drawn column's thread
    column."""

    label: tuple[str, ...]
    values: tuple[str, ...]
    threads: dict[str, str] = field(default_factory=dict)  # value -> the thread's column
    unit: str = ""
    log: bool | None = None  # None: logarithmic when the values span > 2 decades
    bands: dict[str, tuple[str, str]] = field(default_factory=dict)  # value -> (low, high)
    per_row: bool = False  # each row on its own scale (rows in different units)


@dataclass(frozen=True, slots=True)
class Bar:
    series: str
    value: float | None
    thread: bool  # the thread's number, drawn grey beside the model's
    low: float | None = None  # the model's band, where it has one
    high: float | None = None

    @property
    def has_band(self) -> bool:
        return self.low is not None and self.high is not None


@dataclass(frozen=True, slots=True)
class Group:
    label: str
    bars: tuple[Bar, ...]
    thread_text: str  # the thread's numbers that pair with no drawn value


def _number(cell: Cell) -> float | None:
    if isinstance(cell, bool) or not isinstance(cell, int | float):
        return None
    return float(cell) if math.isfinite(cell) else None


def infer_spec(table: ClaimTable) -> ChartSpec:
    """A spec from the cells: the first column labels a row; numeric columns are drawn,
    `thread_X` beside `X`."""
    first = table.rows[0] if table.rows else []
    numeric = [
        name
        for index, name in enumerate(table.columns)
        if index < len(first) and _number(first[index]) is not None
    ]
    label = (table.columns[0],) if table.columns else ()
    values = tuple(n for n in numeric if not n.startswith("thread_") and n not in label)
    threads = {v: f"thread_{v}" for v in values if f"thread_{v}" in table.columns}
    return ChartSpec(label, values, threads)


def usable(spec: ChartSpec, table: ClaimTable) -> ChartSpec:
    """`spec` when every column it names exists in `table`, else `infer_spec(table)`."""
    names = set(spec.label) | set(spec.values) | set(spec.threads.values())
    names |= {c for pair in spec.bands.values() for c in pair}
    return spec if names <= set(table.columns) else infer_spec(table)


def groups(table: ClaimTable, spec: ChartSpec) -> list[Group]:
    """The bars of each row: each value, followed by the thread's where the thread has
    one."""
    at = {name: index for index, name in enumerate(table.columns)}
    paired = set(spec.threads.values())
    loose = [c for c in table.columns if c.startswith("thread_") and c not in paired]
    out: list[Group] = []
    for row in table.rows:
        label = " · ".join(_fmt(row[at[c]]) for c in spec.label)
        bars: list[Bar] = []
        for column in spec.values:
            low = high = None
            if column in spec.bands:
                low_column, high_column = spec.bands[column]
                low, high = _number(row[at[low_column]]), _number(row[at[high_column]])
            bars.append(Bar(column, _number(row[at[column]]), False, low, high))
            thread_column = spec.threads.get(column)
            if thread_column is not None and _number(row[at[thread_column]]) is not None:
                bars.append(Bar(column, _number(row[at[thread_column]]), thread=True))
        if spec.bands and all(bar.value is None for bar in bars):
            continue  # a row with nothing modelled and nothing to compare
        texts = [_loose(c[7:], row[at[c]]) for c in loose if row[at[c]] not in (None, "")]
        out.append(Group(label, tuple(bars), "thread: " + ", ".join(texts) if texts else ""))
    return out


def band_room(spec: ChartSpec) -> float:
    """Scale headroom so a band's end and its label fit beside the longest bar."""
    return 1.3 if spec.bands else 1.0


def group_top(group: Group) -> float:
    """The largest value, band end or thread's number of one row (its own scale)."""
    return top_value([group])


def _loose(name: str, cell: Cell) -> str:
    """A thread's cell shown as text: a number with its column's name, a text as it is."""
    return cell if isinstance(cell, str) else f"{name} {_fmt(cell)}"


def _fmt(cell: Cell) -> str:
    """A number whole (never cut to 4 digits, never an exponent)."""
    return fmt_cell(cell)


def log_scale(spec: ChartSpec, all_groups: Sequence[Group]) -> bool:
    if spec.log is not None:
        return spec.log
    values = [b.value for g in all_groups for b in g.bars if b.value is not None and b.value > 0]
    return bool(values) and max(values) / min(values) > 10**LOG_DECADES


def top_value(all_groups: Sequence[Group]) -> float:
    """The longest bar's value or band end (1.0 when nothing is positive)."""
    values = [v for g in all_groups for b in g.bars for v in (b.value, b.high) if v is not None]
    return max([v for v in values if v > 0], default=1.0)


def verdict_colour(table: ClaimTable) -> str:
    if table.verdict in (*GREEN, HOLDS):
        return YES
    return AMBER if table.verdict == "direction only" else NO


def bar_fraction(value: float | None, top: float, log: bool) -> float:
    """Length of a bar as a fraction of the longest (0 for none or non-positive)."""
    if value is None or value <= 0 or top <= 0:
        return 0.0
    if log:
        return math.log10(1 + value) / math.log10(1 + top)
    return min(value / top, 1.0)


def series_colours(spec: ChartSpec) -> dict[str, str]:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(spec.values)}


# -- SVG --------------------------------------------------------------------------------


def _xml_char(ch: str) -> bool:
    """A character XML 1.0 allows (no C0 controls but tab/newlines, no surrogates)."""
    code = ord(ch)
    if code < 0x20:
        return ch in "\t\n\r"
    return not (0xD800 <= code <= 0xDFFF or code in (0xFFFE, 0xFFFF))


def _clean(text: str) -> str:
    """Text fit for XML 1.0: control characters dropped, then escaped (quotes too)."""
    kept = "".join(ch for ch in text if _xml_char(ch))
    for raw, entity in XML_ENTITIES:
        kept = kept.replace(raw, entity)
    return kept


def _text(
    x: float, y: float, text: str, *, size: int = 12, fill: str = "#222", **attrs: str
) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{_clean(v)}"' for k, v in attrs.items())
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}"{extra}>'
        f"{_clean(text)}</text>"
    )


def _header(table: ClaimTable, spec: ChartSpec, log: bool) -> tuple[list[str], float]:
    parts = [
        _text(12, 24, f"{table.name}", size=18, font_weight="bold"),
        _text(
            WIDTH - 12,
            24,
            table.headline(),
            size=16,
            fill=verdict_colour(table),
            font_weight="bold",
            text_anchor="end",
        ),
    ]
    y = 44.0
    for line in textwrap.wrap(f"{THREADS[table.thread].title}: {table.claim}", WRAP):
        parts.append(_text(12, y, line, size=12))
        y += LINE_H
    x = 12.0
    for name, colour in series_colours(spec).items():
        parts.append(f'<rect x="{x:.1f}" y="{y - 10:.1f}" width="12" height="10" fill="{colour}"/>')
        parts.append(_text(x + 16, y, name, size=11))
        x += 30 + 7 * len(name)
    if spec.threads:
        parts.append(
            f'<rect x="{x:.1f}" y="{y - 10:.1f}" width="12" height="10" fill="{THREAD_COLOUR}"/>'
        )
        parts.append(_text(x + 16, y, "the thread's number", size=11))
        x += 200
    if spec.bands:
        parts.append(_error_bar(x, x + 14, y - 5))
        parts.append(_text(x + 20, y, "model's band (low–high)", size=11))
        x += 170
    scale = "log scale: log10(1 + value)" if log else "linear scale"
    if spec.per_row:
        scale = "each row on its own scale"
    unit = f"{spec.unit} · " if spec.unit else ""
    parts.append(_text(WIDTH - 12, y, f"{unit}{scale}", size=11, fill="#555", text_anchor="end"))
    return parts, y + 14


def _group_svg(
    group: Group, y: float, top: float, log: bool, colours: dict[str, str]
) -> tuple[list[str], float]:
    """One row's bars; its label (and the thread's loose numbers) wrapped at spaces
    left of them, never cut."""
    label = textwrap.wrap(group.label, LABEL_CHARS, break_long_words=False) or [""]
    loose = textwrap.wrap(group.thread_text, LABEL_CHARS + 4, break_long_words=False)
    parts = [_text(12, y + BAR_H - 2 + k * 12, line, size=11) for k, line in enumerate(label)]
    base = y + BAR_H - 2 + len(label) * 12
    parts += [_text(12, base + k * 12, line, size=10, fill="#666") for k, line in enumerate(loose)]
    text_height = (len(label) + len(loose)) * 12
    height = max(len(group.bars) * (BAR_H + BAR_GAP), text_height)
    for n, bar in enumerate(group.bars):
        by = y + n * (BAR_H + BAR_GAP)
        width = BAR_MAX * bar_fraction(bar.value, top, log)
        colour = THREAD_COLOUR if bar.thread else colours[bar.series]
        title = f"{'thread ' if bar.thread else ''}{bar.series} {_fmt(bar.value)}"
        parts.append(
            f'<rect x="{BAR_X}" y="{by:.1f}" width="{width:.1f}" height="{BAR_H}" '
            f'fill="{colour}"><title>{_clean(title)}</title></rect>'
        )
        value = ("thread " if bar.thread else "") + _fmt(bar.value)
        end = width
        if bar.has_band:
            x0 = BAR_X + BAR_MAX * bar_fraction(bar.low, top, log)
            x1 = BAR_X + BAR_MAX * bar_fraction(bar.high, top, log)
            parts.append(_error_bar(x0, x1, by + BAR_H / 2))
            value += f" [{_fmt(bar.low)}–{_fmt(bar.high)}]"
            end = max(width, x1 - BAR_X)
        parts.append(_text(BAR_X + end + 4, by + BAR_H - 2, value, size=10, fill="#333"))
    return parts, y + height + GROUP_GAP


def _error_bar(x0: float, x1: float, y: float) -> str:
    """A horizontal error bar with end caps (the model's band)."""
    caps = "".join(
        f'<line x1="{x:.1f}" y1="{y - 5:.1f}" x2="{x:.1f}" y2="{y + 5:.1f}" '
        f'stroke="{BAND_COLOUR}" stroke-width="1.5"/>'
        for x in (x0, x1)
    )
    return (
        f'<g class="band"><line x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" '
        f'stroke="{BAND_COLOUR}" stroke-width="1.5"/>{caps}</g>'
    )


def _footer(table: ClaimTable, y: float) -> tuple[list[str], float]:
    lines = textwrap.wrap(table.note, WRAP)
    if len(lines) > NOTE_LINES:
        lines = [*lines[: NOTE_LINES - 1], lines[NOTE_LINES - 1] + " …"]
    parts = []
    for line in lines:
        parts.append(_text(12, y, line, size=10, fill="#444"))
        y += LINE_H - 3
    return parts, y


def chart_svg(table: ClaimTable, spec: ChartSpec | None = None) -> str:
    """The whole chart as an SVG document."""
    spec = usable(spec, table) if spec is not None else infer_spec(table)
    all_groups = groups(table, spec)
    log = log_scale(spec, all_groups)
    top = top_value(all_groups)
    parts, y = _header(table, spec, log)
    y += 6
    colours = series_colours(spec)
    for group in all_groups:
        scale = (group_top(group) if spec.per_row else top) * band_room(spec)
        drawn, y = _group_svg(group, y, scale, log and not spec.per_row, colours)
        parts += drawn
    notes, y = _footer(table, y + 8)
    parts += notes
    height = int(y + 12)
    title = f"mmuscope bench: {table.name}"
    return "\n".join(
        [
            '<?xml version="1.0" encoding="UTF-8"?>',
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, sans-serif">',
            f"<title>{_clean(title)}</title>",
            f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>',
            *parts,
            "</svg>",
            "",
        ]
    )


def write_chart(
    table: ClaimTable, directory: pathlib.Path, spec: ChartSpec | None = None
) -> pathlib.Path:
    """`directory/<name>.svg`, written atomically; `ExportError` when it cannot be."""
    path = pathlib.Path(directory) / f"{table.name}.svg"
    write_atomically(path, chart_svg(table, spec).encode())
    return path


# -- dot --------------------------------------------------------------------------------

DOT_BAR_MAX = 360  # points


def chart_dot(table: ClaimTable, spec: ChartSpec | None = None) -> str:
    """The same chart as one Graphviz node: an HTML-like table of bars."""
    spec = usable(spec, table) if spec is not None else infer_spec(table)
    all_groups = groups(table, spec)
    log = log_scale(spec, all_groups)
    top = top_value(all_groups)
    colours = series_colours(spec)
    rows: list[str] = []
    for group in all_groups:
        scale = group_top(group) if spec.per_row else top
        for n, bar in enumerate(group.bars):
            label = group.label if n == 0 else ""
            width = max(1, round(DOT_BAR_MAX * bar_fraction(bar.value, scale, log)))
            colour = THREAD_COLOUR if bar.thread else colours[bar.series]
            value = ("thread " if bar.thread else f"{bar.series} ") + _fmt(bar.value)
            if bar.has_band:
                value += f" [{_fmt(bar.low)}–{_fmt(bar.high)}]"
            rest = max(1, DOT_BAR_MAX - width)
            rows.append(
                f'<TR><TD ALIGN="LEFT">{_clean(label)}</TD>'
                '<TD ALIGN="LEFT" CELLPADDING="0">'
                '<TABLE BORDER="0" CELLSPACING="0" CELLPADDING="0"><TR>'
                f'<TD BGCOLOR="{colour}" WIDTH="{width}" HEIGHT="10" FIXEDSIZE="TRUE"></TD>'
                f'<TD WIDTH="{rest}" HEIGHT="10" FIXEDSIZE="TRUE"></TD>'
                "</TR></TABLE></TD>"
                f'<TD ALIGN="LEFT">{_clean(value)}</TD></TR>'
            )
    if not rows:
        rows.append("<TR><TD>no rows</TD></TR>")
    title = f"{table.name} — {table.headline()}" + (" (log scale)" if log else "")
    claim = "\\n".join(_dot_string(line) for line in textwrap.wrap(table.claim, 100))
    return (
        "digraph bench {\n"
        f'  graph [label="{_dot_string(title)}\\n{claim}", labelloc=t, fontname="Helvetica"];\n'
        '  node [shape=plaintext, fontname="Helvetica", fontsize=10];\n'
        '  edge [fontname="Helvetica", fontsize=9];\n'
        '  chart [label=<<TABLE BORDER="0" CELLSPACING="0" CELLPADDING="1">'
        + "".join(rows)
        + "</TABLE>>];\n}\n"
    )


def _dot_string(text: str) -> str:
    """Inside a dot double-quoted string."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
