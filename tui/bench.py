"""`mmuscope bench [--json] [--quick] [--table NAME]... [--svg DIR]`: the threads' claims
measured, one table each (engine/claims/registry.py), and the engine's speed.

`--json` prints one object, `{TABLE: {"columns": [...], "rows": [[...], ...], "thread":
THREAD_ID, "seed": THREAD_ID, "claim": str, "checks": {...}, "verdict": str, "reproduced":
bool, "wide_bands": int, "note": str, ...}}`, every table in registry order
(docs/architecture.md §6.3); tables with a thread's time carry `low`, `central`, `high`
and `verdict` columns (engine/claims/band.py); the `engine` table keeps its columns `name,
value, unit` and its rows.  Without it, a table for people per claim — the thread's
numbers in the `thread*` columns beside the model's, the thread's short name and the claim
under it, the computed headline in the title (in band, holds, direction only or not
reproduced, with the failed sub-claims and the bands wider than 3× counted), the note
under it — and the engine table with its bars.  `--svg DIR` also writes
`DIR/<table>.svg`, one bar chart per table (a DIR that is not a writable directory: one
line, exit 2, nothing run). `--table NAME` (repeatable) runs only those tables.  A table
whose module cannot be imported is left out with one line on stderr; the others still run.

`--quick` keeps every table and column and measures less (each table says how in its
note); the engine's timings depend on the machine, so they come with baselines measured
in the same run (a dict insert per gfn) and `*_vs_dict_insert` ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from mmuscope.engine.claims.band import BAND_COLUMNS
from mmuscope.engine.claims.engine_speed import BARS, FULL_ONLY_BARS, Row, bar_met
from mmuscope.engine.claims.registry import TABLES, MissingTable, chart_spec, run_tables
from mmuscope.engine.claims.table import Cell, ClaimTable
from mmuscope.engine.threads import THREADS
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .cliparts import CliError

COLUMNS = ["name", "value", "unit"]
KEEP_WHOLE = ("model [band]", "verdict")  # never wrapped
PIPE_WIDTH = 210  # a pipe or a file has no width: wide enough that no number breaks


def bench_json(tables: dict[str, ClaimTable]) -> str:
    """Every table as one JSON object on one line."""
    return json.dumps({name: table.to_json() for name, table in tables.items()})


def _value(value: float | int) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def bench_table(rows: list[Row]) -> Table:
    """The engine table, with its bars."""
    quick = any(name == "quick" and value for name, value, _ in rows)
    title = "mmuscope bench: engine" + (" (--quick: smaller runs)" if quick else "")
    table = Table(
        title=title, caption="*_vs_dict_insert: speed / a dict insert's speed", show_edge=False
    )
    table.add_column("name", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("unit", no_wrap=True)
    table.add_column("bar", no_wrap=True)
    for name, value, unit in rows:
        bar = ""
        if name in BARS:
            op, limit = BARS[name]
            met = bar_met(name, value)
            verdict = "[green]ok[/]" if met else "[red]MISSED[/]"
            if quick and name in FULL_ONLY_BARS:
                verdict = "n/a (quick)"
            bar = f"{'≥' if op == '>=' else '≤'} {_value(limit)} {verdict}"
        table.add_row(name, _value(value), unit, bar)
    return table


def _cell(cell: Cell) -> str:
    if cell is None:
        return "—"
    if isinstance(cell, bool):
        return "yes" if cell else "no"
    if isinstance(cell, int | float):
        return _value(cell)
    return cell


def claim_table(table: ClaimTable) -> Group:
    """A claim table for people: the verdict in the title, the thread's columns set
    apart."""
    colour = {"in band": "green", "holds": "green", "direction only": "yellow"}
    headline = escape(table.headline())
    verdict = f"[{colour.get(table.verdict, 'red')}]{headline}[/]"
    out = Table(
        title=f"mmuscope bench: {table.name} — {verdict}",
        caption=f"{THREADS[table.thread].title}: {table.claim}",
        caption_justify="left",
        show_edge=False,
    )
    columns, rows = human_columns(table)
    for index, column in enumerate(columns):
        theirs = column.startswith("thread")
        cells = [row[index] for row in rows if row[index] is not None]
        text_column = all(isinstance(cell, str) for cell in cells) and column not in KEEP_WHOLE
        out.add_column(
            column,
            justify="left" if text_column else "right",
            style="italic cyan" if theirs else None,
            header_style="bold cyan" if theirs else "bold",
            overflow="fold",
            no_wrap=not text_column,  # numbers never break; long texts wrap
            ratio=1 if text_column else None,
            min_width=min(max((len(str(c)) for c in cells), default=1), 12),
        )
    for row in rows:
        out.add_row(*(_cell(cell) for cell in row))
    return Group(out, Text(table.note, style="dim"), Text(""))


def human_columns(table: ClaimTable) -> tuple[list[str], list[list[Cell]]]:
    """The columns people read: a timed table's `low, central, high, verdict, band_x,
    wide` become `model [band]` (central, then low–high, `>3×` when wide) and `verdict`."""
    if not set(BAND_COLUMNS) <= set(table.columns):
        return list(table.columns), [list(row) for row in table.rows]
    at = {name: table.columns.index(name) for name in BAND_COLUMNS}
    kept = [i for i, name in enumerate(table.columns) if name not in at]
    rows: list[list[Cell]] = []
    for row in table.rows:
        band: Cell = None
        if row[at["central"]] is not None:
            band = _cell(row[at["central"]])
            if row[at["low"]] is not None:
                band += f" [{_cell(row[at['low']])}–{_cell(row[at['high']])}]"
            if row[at["wide"]] is True:
                band += " >3×"
        rows.append([*(row[i] for i in kept), band, row[at["verdict"]]])
    return [*(table.columns[i] for i in kept), "model [band]", "verdict"], rows


def _human(table: ClaimTable) -> Table | Group:
    if table.name == "engine":
        rows: list[Row] = []
        for name, value, unit in table.rows:
            assert isinstance(value, int | float)
            rows.append((str(name), value, str(unit)))
        return bench_table(rows)
    return claim_table(table)


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
    tables = run_tables(names, args.quick, on_missing=_report_missing)
    written = write_charts(tables, svg_dir) if svg_dir is not None else []
    if args.json:
        print(bench_json(tables))
        for path in written:
            print(f"wrote {path}", file=sys.stderr)
        return 0
    console = Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH)
    for table in tables.values():
        console.print(_human(table))
    for path in written:
        console.print(f"wrote {path}")
    return 0
