"""`mmuscope query DIR "SQL" [--json | --csv]` and `mmuscope query DIR --report NAME`: SQL
in DuckDB over the dataset `--parquet DIR` wrote (engine.dataset.query), printed as a
table, a JSON list of row objects, or CSV (docs/architecture.md §6.3).

Needs the `data` extra; without it, a missing DIR, a DIR with no events or SQL DuckDB
refuses: one line on stderr (DuckDB's own message), exit 2.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import decimal
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from .cliparts import CliError

DESCRIPTION = """\
SQL over the events a fleet's traces left in a Parquet dataset (written by replay, kvm
or simulate with --parquet DIR), run in process by DuckDB.  The view `events` has one
row per event: source (the directory name source=NAME), ts (ns), cpu, pid, comm, system
(kvm, kvmmmu, or mmuscope for the model's own events), event, seq (its number in its
trace), the fields MMU events share as typed columns (vcpu, as_id, gfn, gpa, level,
spte, old_spte, new_spte, sptep, pfn, error_code, role, mmu_valid_gen) and the other
fields in the map `fields` (fields['root_count'], text values).  The view `memslots`
(source, as_id, slot, base_gfn, npages, flags, name) holds the guest's memslots
(replay --layout or --mtree; simulate and kvm write their own).  --report NAME runs a
named report; --report alone lists them."""
EXAMPLES = """examples:
  mmuscope simulate --mmu direct --workload kernbench --zap fast --at 500 --parquet fleet
  mmuscope simulate --mmu shadow --workload fork --accesses 3000 --parquet fleet
  mmuscope query fleet "SELECT source, event, count(*) AS n FROM events GROUP BY ALL ORDER BY n DESC LIMIT 5"
  mmuscope query fleet --report zaps-per-generation --csv
"""  # noqa: E501


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "query",
        help=HELP,
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "dir", nargs="?", type=Path, metavar="DIR",
        help="the dataset: the DIR given to --parquet",
    )  # fmt: skip
    parser.add_argument(
        "sql", nargs="?", metavar="SQL", help="one query over the views events and memslots"
    )
    parser.add_argument(
        "--report", nargs="?", const="", metavar="NAME",
        help="run a named report instead of SQL (alone: list them)",
    )  # fmt: skip
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument(
        "--json", action="store_true", help="a JSON list of row objects (default: a table)"
    )
    shape.add_argument("--csv", action="store_true", help="CSV with a header line")


HELP = "SQL (DuckDB) over a Parquet dataset of events, or a named report"


def run_query(args: argparse.Namespace) -> int:
    from mmuscope.engine.dataset import QUERY_MODULES, MissingExtra, require

    if args.report == "" or (args.report is None and args.dir is None and args.sql is None):
        if args.report is None:
            raise CliError('give DIR and "SQL", or DIR --report NAME (--report alone lists them)')
        return _list_reports(sys.stdout)
    try:
        require(*QUERY_MODULES)
    except MissingExtra as err:
        raise CliError(f"query needs the data extra: {err}") from None
    from mmuscope.engine.dataset.query import QueryError, connect, run
    from mmuscope.engine.dataset.reports import REPORTS

    if args.report is not None:
        if args.report not in REPORTS:
            _list_reports(sys.stdout)
            raise CliError(f"unknown report {args.report!r} (the reports are listed above)")
        if args.sql is not None:
            raise CliError("give SQL or --report NAME, not both")
        sql = REPORTS[args.report].sql
    elif args.sql is None:
        raise CliError('give the query: mmuscope query DIR "SELECT ... FROM events"')
    else:
        sql = args.sql
    if args.dir is None:
        raise CliError("give the dataset's directory: mmuscope query DIR ...")
    try:
        columns, rows = run(connect(args.dir), sql)
        if args.json:
            write_json(columns, rows, sys.stdout)
        elif args.csv:
            write_csv(columns, rows, sys.stdout)
        else:
            write_table(columns, rows, sys.stdout)
    except QueryError as err:
        raise CliError(str(err)) from None
    sys.stdout.flush()
    return 0


def _list_reports(out: TextIO) -> int:
    from mmuscope.engine.dataset.reports import REPORTS

    width = max(len(name) for name in REPORTS)
    out.write("reports (mmuscope query DIR --report NAME):\n")
    for report in REPORTS.values():
        out.write(f"  {report.name:<{width}}  {report.title}\n")
    return 0


def _plain(value: Any) -> Any:
    """A value JSON can write: DECIMAL as int or float, times as ISO text, bytes as hex."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime.date | datetime.time | datetime.timedelta):
        return str(value) if isinstance(value, datetime.timedelta) else value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def write_json(columns: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO) -> None:
    """A JSON list of row objects, written as the rows come."""
    out.write("[")
    first = True
    for row in rows:
        out.write("\n" if first else ",\n")
        out.write(json.dumps(dict(zip(columns, row, strict=True)), default=_plain))
        first = False
    out.write("]\n" if first else "\n]\n")


def _text(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, dict | list):
        return json.dumps(value, default=_plain)
    return str(_plain(value)) if not isinstance(value, str | int | float) else str(value)


def write_csv(columns: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow("" if v is None else _text(v) for v in row)


def write_table(columns: Sequence[str], rows: Iterator[Sequence[Any]], out: TextIO) -> None:
    """Columns padded to their widest value, numbers to the right; the row count last."""
    raw = list(rows)
    cells = [[_text(v) for v in row] for row in raw]
    numeric = [
        all(
            v is None or (isinstance(v, int | float | decimal.Decimal) and not isinstance(v, bool))
            for v in (row[i] for row in raw)
        )
        for i in range(len(columns))
    ]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out.write(line(columns) + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in cells:
        out.write(line(row) + "\n")
    out.write(f"({len(cells)} row{'s' if len(cells) != 1 else ''})\n")
