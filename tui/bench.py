"""`mmuscope bench [--json] [--quick]`: the engine's speed and memory (engine/mmu/bench.py).

`--json` prints one object, `{"engine": {"columns": ["name", "value", "unit"], "rows":
[[name, value, unit], ...]}}`; later benchmarks add tables beside `engine`.  Without it a
table for people, with the issue's bars.  Timings depend on the machine, so each one comes
with a baseline measured in the same run (a dict insert per gfn) and a `*_vs_dict_insert`
row: the fault's speed as a fraction of the baseline's.

`--quick` keeps every row name and measures less (50k faults, a 1 GiB populate, 20k
pages zapped); the rows `quick` (1), `populate_gib` and `fast_zap_pages` say so, and the
6 GiB bars are not judged.  The lock-hold bar holds at any size.
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from engine.mmu.bench import BARS, FULL_ONLY_BARS, Row, bar_met, engine_rows

COLUMNS = ["name", "value", "unit"]


def bench_json(rows: list[Row]) -> str:
    return json.dumps({"engine": {"columns": COLUMNS, "rows": [list(row) for row in rows]}})


def _value(value: float | int) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def bench_table(rows: list[Row]) -> Table:
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


def run_bench(args: argparse.Namespace) -> int:
    rows = engine_rows(quick=args.quick)
    if args.json:
        print(bench_json(rows))
    else:
        Console().print(bench_table(rows))
    return 0
