"""`mmuscope bench [--json] [--quick] [--table NAME]... [--svg DIR]`: the threads' claims
measured, one table each (engine/claims/registry.py), and the engine's speed.

`--json` prints one object, `{TABLE: {"columns": [...], "rows": [[...], ...], "thread":
THREAD_ID, "seed": THREAD_ID, "claim": str, "checks": {...}, "verdict": str, "reproduced":
bool, "fitted": null | {...}, "decimals": {...}, "note": str, ...}}`, every table in
registry order (docs/architecture.md §6.3); every row of a table with a thread's numbers
has a `role` (input, fitted, predicted), and tables with a thread's time carry the band
columns `low, central, high, noise, error_pct, verdict, band_x, sources`
(engine/claims/band.py); the `engine` table keeps its columns `name, value, unit` and its
rows.  Without it, a table for people per claim: the computed headline in the title, the
thread's short name and the claim under it, the fitted parameter if any, the rows, the
note; and the engine table with its bars.  `--svg DIR` also writes `DIR/<table>.svg`,
one bar chart per table (a DIR that is not a writable directory: one line, exit 2,
nothing run).  `--table NAME` (repeatable) runs only those tables.  A table whose module
cannot be imported is left out with one line on stderr; the others still run.

The text never cuts a number or an identifier.  It is laid out for the terminal's width
(in a pipe: $COLUMNS, else 200): a table whose columns fit is printed as a table, the
long texts (claims, sources) wrapped inside their column at spaces; one that does not is
printed row by row, each row a heading of its identifying columns and then `column value`
pairs, wrapped between pairs.  Numbers print as the thread printed them (11002.50,
42.305, 2,405,434,959: `decimals` in the JSON), never in exponent form.

`--quick` keeps every table and column and measures less (each table says how in its
note); the engine's timings depend on the machine, so they come with baselines measured
in the same run (a dict insert per gfn) and `*_vs_dict_insert` ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mmuscope.engine.claims.band import BAND_COLUMNS, DIRECTION_ONLY, GREEN
from mmuscope.engine.claims.engine_speed import BARS, FULL_ONLY_BARS, bar_met
from mmuscope.engine.claims.registry import TABLES, MissingTable, chart_spec, run_tables
from mmuscope.engine.claims.table import HOLDS, ClaimTable, fmt_cell, fmt_number
from mmuscope.engine.threads import THREADS
from rich.console import Console
from rich.text import Text

from .cliparts import CliError
from .progress import steps, watched

PIPE_WIDTH = 200  # a pipe or a file without $COLUMNS
MIN_WIDTH = 40
GAP = "  "  # between columns
INDENT = "    "  # a stacked row's pairs
MODEL = "model [band] ×width"
ID_STYLE, THEIR_STYLE = "bold", "italic cyan"


def bench_json(tables: dict[str, ClaimTable]) -> str:
    """Every table as one JSON object on one line."""
    return json.dumps({name: table.to_json() for name, table in tables.items()})


# -- the columns people read -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    cells: list[str]
    ident: bool  # identifies the row: never wrapped, repeated as a stacked row's heading
    text: bool  # free text: may wrap at spaces
    style: str | None = None


def human_columns(table: ClaimTable) -> list[Column]:
    """The columns people read: a timed table's band columns become `model [band]
    ×width` (central, low–high, band_x), `noise`, `error %`, `verdict` and `sources`."""
    spec = chart_spec(table)
    ident = set(spec.label) if spec is not None else {table.columns[0]}
    out: list[Column] = []
    banded = set(BAND_COLUMNS) <= set(table.columns)
    at = {name: i for i, name in enumerate(table.columns)}
    for name in table.columns:
        if banded and name in BAND_COLUMNS:
            continue
        cells = [fmt_cell(row[at[name]], table.places(name, n)) for n, row in enumerate(table.rows)]
        values = [row[at[name]] for row in table.rows if row[at[name]] not in (None, "")]
        text = all(isinstance(v, str) for v in values) and name not in ident and name != "role"
        text = text and any(" " in v for v in values if isinstance(v, str))
        style = THEIR_STYLE if name.startswith("thread") else ID_STYLE if name in ident else None
        out.append(Column(name, cells, name in ident, text, style))
    if banded:
        out += _band_columns(table)
    return out


def _band_columns(table: ClaimTable) -> list[Column]:
    at = {name: i for i, name in enumerate(table.columns)}
    model: list[str] = []
    for n, row in enumerate(table.rows):
        central = row[at["central"]]
        if central is None:
            model.append("—")
            continue
        text = fmt_cell(central, table.places("central", n))
        low, high = row[at["low"]], row[at["high"]]
        if low is not None and high is not None and (low != central or high != central):
            text += f" [{fmt_cell(low, table.places('low', n))}–"
            text += f"{fmt_cell(high, table.places('high', n))}]"
        factor = row[at["band_x"]]
        text += f" ×{fmt_cell(factor)}" if factor is not None else " ×∞"
        model.append(text)

    def plain(name: str) -> list[str]:
        return [fmt_cell(row[at[name]], table.places(name, n)) for n, row in enumerate(table.rows)]

    errors = [
        "—" if row[at["error_pct"]] is None else f"{row[at['error_pct']]:+,.1f} %"
        for row in table.rows
    ]
    return [
        Column(MODEL, model, False, False),
        Column("noise", plain("noise"), False, False),
        Column("error", errors, False, False),
        Column("verdict", plain("verdict"), False, False),
        Column("sources", plain("sources"), False, True),
    ]


# -- layout ----------------------------------------------------------------------------------


def _longest_word(cells: Sequence[str]) -> int:
    return max((len(w) for c in cells for w in c.split()), default=1)


def _natural(column: Column) -> int:
    return max(len(column.name), *(len(c) for c in column.cells))


def _minimum(column: Column) -> int:
    if column.text:
        return max(len(column.name), _longest_word(column.cells))
    return _natural(column)


def column_widths(columns: Sequence[Column], width: int) -> list[int] | None:
    """Each column's width when the table fits `width` (texts wrapped at spaces, never a
    number or an identifier), else None."""
    gaps = len(GAP) * (len(columns) - 1)
    widths = [_minimum(c) for c in columns]
    if sum(widths) + gaps > width:
        return None
    room = width - gaps - sum(widths)
    for i, column in enumerate(columns):  # give the texts what they want, in order
        if column.text:
            extra = min(room, _natural(column) - widths[i])
            widths[i] += extra
            room -= extra
    return widths


def _style(column: Column, cell: str) -> str | None:
    if column.name == "verdict":
        return verdict_style(cell)
    return column.style


def verdict_style(verdict: str) -> str | None:
    if verdict in (*GREEN, HOLDS):
        return "green"
    if verdict == DIRECTION_ONLY:
        return "yellow"
    if verdict == "not reproduced":
        return "red"
    return None


def table_lines(columns: Sequence[Column], widths: Sequence[int]) -> list[Text]:
    """The columns as a table: a header, a rule, then each row (texts wrapped)."""
    header = Text()
    rule = Text()
    for i, (column, w) in enumerate(zip(columns, widths, strict=True)):
        sep = GAP if i else ""
        header.append(sep + column.name.ljust(w), style=column.style or "bold")
        rule.append(sep + "─" * w)
    lines = [header, rule]
    for n in range(len(columns[0].cells)):
        parts = []
        for column, w in zip(columns, widths, strict=True):
            cell = column.cells[n]
            wrapped = _wrap(cell, w) if column.text else [cell]
            parts.append(wrapped)
        for k in range(max(len(p) for p in parts)):
            line = Text()
            for i, (column, w, part) in enumerate(zip(columns, widths, parts, strict=True)):
                piece = part[k] if k < len(part) else ""
                numeric = not column.text and not column.ident and _numeric(column)
                line.append(GAP if i else "")
                cell = piece.rjust(w) if numeric else piece.ljust(w)
                line.append(cell, style=_style(column, piece))
            line.rstrip()
            lines.append(line)
    return lines


def _numeric(column: Column) -> bool:
    return column.name not in ("verdict", "role", "sources", MODEL)


def _wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` (a word longer than that keeps its own line
    whole)."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def stacked_lines(columns: Sequence[Column], width: int) -> list[Text]:
    """Row by row: the identifying cells as a heading, then `name value` pairs wrapped
    between pairs (a text value longer than a line wraps at spaces)."""
    idents = [c for c in columns if c.ident]
    rest = [c for c in columns if not c.ident]
    lines: list[Text] = []
    for n in range(len(columns[0].cells)):
        heading = Text()
        for i, column in enumerate(idents):
            heading.append(" · " if i else "")
            heading.append(f"{column.name} ", style="dim")
            heading.append(column.cells[n], style=ID_STYLE)
        lines += _wrap_text(heading, width, "")
        line = Text(INDENT)
        for column in rest:
            cell = column.cells[n]
            pair = Text()
            pair.append(f"{column.name} ", style="dim")
            pair.append(cell, style=_style(column, cell))
            if line.plain.strip() and len(line) + len(GAP) + len(pair) > width:
                lines.append(line)
                line = Text(INDENT)
            if len(INDENT) + len(pair) > width:  # a long text: wrapped on lines of its own
                lines += _wrap_text(pair, width, INDENT)
                continue
            if line.plain.strip():
                line.append(GAP)
            line.append_text(pair)
        if line.plain.strip():
            lines.append(line)
    return lines


def _wrap_text(text: Text, width: int, indent: str) -> list[Text]:
    """A styled line wrapped at spaces to `width` (words never split)."""
    out: list[Text] = []
    plain = text.plain
    start = 0
    for piece in _wrap(plain, width - len(indent)):
        at = plain.index(piece, start)
        out.append(Text(indent) + text[at : at + len(piece)])
        start = at + len(piece)
    return out


def claim_lines(table: ClaimTable, width: int) -> list[Text]:
    """A claim table for people, laid out for `width` columns."""
    width = max(width, MIN_WIDTH)
    title = Text(f"mmuscope bench: {table.name} — ", style="bold")
    title.append(table.headline(), style=verdict_style(table.verdict))
    lines = _wrap_text(title, width, "")
    caption = f"{THREADS[table.thread].title}: {table.claim}"
    lines += [Text(line) for line in _wrap(caption, width)]
    if table.fitted is not None:
        lines += [
            Text(line, style="yellow") for line in _wrap(f"fitted: {table.fitted.text()}", width)
        ]
    lines.append(Text(""))
    columns = human_columns(table)
    widths = column_widths(columns, width)
    lines += table_lines(columns, widths) if widths else stacked_lines(columns, width)
    lines.append(Text(""))
    lines += [Text(line, style="dim") for line in _wrap(table.note, width)]
    lines.append(Text(""))
    return lines


def engine_lines(table: ClaimTable, width: int) -> list[Text]:
    """The engine table, with its bars."""
    rows = table.rows
    quick = any(row[0] == "quick" and row[1] for row in rows)
    bars: list[str] = []
    for name, value, _ in rows:
        bar = ""
        if name in BARS:
            op, limit = BARS[name]
            assert isinstance(value, int | float)
            met = bar_met(str(name), value)
            verdict = "ok" if met else "MISSED"
            if quick and name in FULL_ONLY_BARS:
                verdict = "n/a (quick)"
            bar = f"{'≥' if op == '>=' else '≤'} {fmt_number(limit)} {verdict}"
        bars.append(bar)
    columns = [
        Column("name", [str(r[0]) for r in rows], True, False, ID_STYLE),
        Column("value", [fmt_cell(r[1]) for r in rows], False, False),
        Column("unit", [str(r[2]) for r in rows], False, False),
        Column("bar", bars, False, False),
    ]
    title = "mmuscope bench: engine" + (" (--quick: smaller runs)" if quick else "")
    lines = _wrap_text(Text(title, style="bold"), max(width, MIN_WIDTH), "")
    widths = column_widths(columns, max(width, MIN_WIDTH))
    lines += table_lines(columns, widths) if widths else stacked_lines(columns, width)
    lines.append(Text("*_vs_dict_insert: speed / a dict insert's speed", style="dim"))
    lines += [Text(line, style="dim") for line in _wrap(table.note, max(width, MIN_WIDTH))]
    return lines


def human_lines(table: ClaimTable, width: int) -> list[Text]:
    return engine_lines(table, width) if table.name == "engine" else claim_lines(table, width)


def render(table: ClaimTable, width: int) -> str:
    """The table's text at `width`, without colours (what a pipe gets)."""
    return "\n".join(line.plain.rstrip() for line in human_lines(table, width)) + "\n"


def output_width() -> int:
    """The terminal's width; in a pipe $COLUMNS, else PIPE_WIDTH."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH


# -- the command -----------------------------------------------------------------------------


def check_svg_dir(directory: Path) -> None:
    """`--svg DIR` before anything runs: created if missing (with its parents), refused
    when it is not a writable directory."""
    if not directory.exists():
        try:
            directory.mkdir(parents=True)
        except OSError as err:
            raise CliError(f"--svg {directory}: cannot create it: {err.strerror or err}") from None
    if not directory.is_dir():
        raise CliError(f"--svg {directory}: not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CliError(f"--svg {directory}: not writable")


def write_charts(tables: dict[str, ClaimTable], directory: Path) -> list[Path]:
    from mmuscope.engine.claims.chart import write_chart
    from mmuscope.engine.export.render import ExportError

    written = []
    for table in tables.values():
        try:
            written.append(write_chart(table, directory, chart_spec(table)))
        except ExportError as err:
            raise CliError(str(err)) from None
    return written


def _report_missing(missing: MissingTable) -> None:
    print(f"mmuscope: bench: table {missing.name} missing: {missing.reason}", file=sys.stderr)


def run_bench(args: argparse.Namespace) -> int:
    svg_dir: Path | None = getattr(args, "svg", None)
    if svg_dir is not None:
        check_svg_dir(svg_dir)
    names = getattr(args, "table", None) or list(TABLES)
    names = [name for name in TABLES if name in names]  # registry order, no repeats
    with steps("bench", len(names), shown=watched(json_output=args.json)) as progress:
        tables = run_tables(names, args.quick, on_missing=_report_missing, on_start=progress.start)
    written = write_charts(tables, svg_dir) if svg_dir is not None else []
    if args.json:
        print(bench_json(tables))
        for path in written:
            print(f"wrote {path}", file=sys.stderr)
        return 0
    width = output_width()
    console = Console(width=max(width, MIN_WIDTH), soft_wrap=True)
    for table in tables.values():
        for line in human_lines(table, width):
            console.print(line, overflow="ignore", crop=False, no_wrap=True)
    for path in written:
        console.print(f"wrote {path}", overflow="ignore", crop=False)
    return 0
