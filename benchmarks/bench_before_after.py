"""The before/after table of every thread number the bench holds, from two `mmuscope bench
--json` outputs (docs/bench.md §7 is this script's output):

    mmuscope bench --json > after.json                # the checkout to judge
    mmuscope bench --json --quick > after-quick.json  # optional: where --quick judges otherwise
    (in a checkout of the older commit) mmuscope bench --json > before.json
    .venv/bin/python benchmarks/bench_before_after.py before.json after.json \\
        [--quick after-quick.json] > table.md

One row per number of the five threads that a claim table holds (the tables with a thread's
column: `thread`, `thread_ns`, `thread_fork_time`, `thread_time_s`): the thread's number,
then before and after its model [band], its role and its verdict; after also the band's
width, the noise (the thread's own spread and the seeds', docs/bench.md §2) and the error on
the effect (§1).  A row of the older run is found by the table and the thread's number, so a
row relabelled between the two runs (an era, a kernel) is still matched.  An older run
without a `role` column prints `—` there: its rows did not say what they were.  Then the
verdicts counted, and each table's headline before and after.  Last, the thread numbers
held by the tables without a band (Alex's 32 entries and 6-7 tree nodes, Xiao's 35 % hit
ratio): the model's number and the sub-claim that judges it.

The script reads JSON only and runs nothing; the two runs are the slow part (docs/bench.md §6).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from mmuscope.engine.claims.band import FITTED, INPUT, PREDICTED, VERDICTS
from mmuscope.engine.claims.slot_cache import JUDGED_WORKLOADS
from mmuscope.engine.claims.table import ClaimTable, fmt_cell, fmt_number
from mmuscope.engine.threads import THREADS

THREAD_COLUMNS = ("thread", "thread_ns", "thread_fork_time", "thread_time_s")
# Thread numbers held by tables without a band: the thread's column, the model's, the
# columns naming a row, and the sub-claim the number is judged in (slot_cache: on the
# workloads it judges, JUDGED_WORKLOADS).
UNBANDED = {
    "memslot_lookup": (
        "thread_visited",
        "visited_bare",
        ("strategy", "workload", "layout"),
        {"linear": "alex_tree_fraction_of_array", "wbtree": "alex_tree_fraction_of_array"},
    ),
    "slot_cache": (
        "thread_hit_ratio",
        "vm_cache_hit_ratio",
        ("workload", "layout"),
        {"": "above_35_percent"},
    ),
}
HEADER = (
    "| table | row | thread | before: model [band] | before: role | before: verdict "
    "| role | model [band] ×width | noise | error | verdict |"
)


def rows_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    columns = data["columns"]
    return [dict(zip(columns, row, strict=True)) for row in data["rows"]]


def thread_column(data: dict[str, Any]) -> str | None:
    return next((c for c in THREAD_COLUMNS if c in data.get("columns", ())), None)


def claim_tables(run: dict[str, Any]) -> list[str]:
    """The tables holding a thread's numbers, in the threads' order (docs/threads.md)."""
    order = list(THREADS)
    names = [n for n, d in run.items() if isinstance(d, dict) and thread_column(d)]
    return sorted(names, key=lambda n: (order.index(run[n]["thread"]), n))


def label(name: str, row: dict[str, Any]) -> str | None:
    """How docs/bench.md §7 names a row (None: not one of the thread's numbers)."""
    if name == "tlb_flush":
        return f"{row['vms']} VMs {row['quantity']}"
    if name == "zap":
        return str(row["method"]) if row.get("guest_gib") == 32 else None
    if name == "rmap_ext":
        return f"PTE_LIST_EXT {row['era']}"
    if name == "ppc_keys":
        return str(row.get("kernel", row["era"])) if "+" not in str(row["variant"]) else None
    return str(row["quantity"])


def fmt_plain(value: Any) -> str:
    """A number of the older run as it stands in its JSON, whole."""
    return fmt_cell(value) if not isinstance(value, float) else fmt_number(value)


def before_cells(data: dict[str, Any] | None, measured: float) -> tuple[str, str, str]:
    """The older run's model [band], role and verdict for the thread's number `measured`."""
    if data is None:
        return "—", "—", "—"
    column = thread_column(data)
    found = [r for r in rows_of(data) if column and r.get(column) == measured]
    if not found:
        return "—", "—", "—"
    row = next((r for r in found if r.get("verdict") is not None), found[0])
    role = str(row["role"]) if row.get("role") is not None else "—"
    if row.get("central") is None:
        return "—", role, "—"
    band = f"{fmt_plain(row['central'])} [{fmt_plain(row['low'])}–{fmt_plain(row['high'])}]"
    return band, role, str(row.get("verdict") or "—")


def after_cells(table: ClaimTable, n: int, row: dict[str, Any]) -> tuple[str, str, str, str]:
    """model [band] ×width, noise, error and verdict of the newer run's row `n`."""
    if row.get("central") is None or row.get("role") == INPUT:
        return "—", "—", "—", "—"

    def cell(column: str) -> str:
        return fmt_cell(row.get(column), table.places(column, n))

    band = f"{cell('central')} [{cell('low')}–{cell('high')}]"
    if row.get("band_x") is not None:
        band += f" ×{cell('band_x')}"
    noise = f"±{cell('noise')}" if row.get("noise") is not None else "—"
    error = f"{row['error_pct']:+.1f} %" if row.get("error_pct") is not None else "—"
    return band, noise, error, str(row.get("verdict") or "—")


def quick_verdicts(quick: dict[str, Any] | None) -> dict[tuple[str, str], str | None]:
    if quick is None:
        return {}
    out: dict[tuple[str, str], str | None] = {}
    for name in claim_tables(quick):
        for row in rows_of(quick[name]):
            key = label(name, row)
            if key is not None:
                out[name, key] = row.get("verdict")
    return out


def before_headline(data: dict[str, Any] | None) -> str:
    """The older run's headline from its JSON: the verdict, failed sub-claims, wide bands."""
    if data is None:
        return "—"
    parts = [str(data["verdict"])]
    failed = sum(1 for held in data.get("checks", {}).values() if not held)
    if failed:
        parts.append(f"{failed} of {len(data['checks'])} sub-claims fail")
    if data.get("wide_bands"):
        parts.append(f"{data['wide_bands']} band(s) wider than 3×")
    return " · ".join(parts)


def render(
    before: dict[str, Any], after: dict[str, Any], quick: dict[str, Any] | None = None
) -> str:
    """The markdown: the rows, the verdicts counted, the headlines."""
    lines = [HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    quick_of = quick_verdicts(quick)
    before_judged: Counter[str] = Counter()
    after_judged: Counter[str] = Counter()
    fitted = 0
    names = claim_tables(after)
    for name in names:
        table = ClaimTable.from_json(name, after[name])
        column = thread_column(after[name])
        assert column is not None
        for n, row in enumerate(rows_of(after[name])):
            key, measured = label(name, row), row.get(column)
            if key is None or measured is None:
                continue
            old_band, old_role, old_verdict = before_cells(before.get(name), measured)
            band, noise, error, verdict = after_cells(table, n, row)
            quick_verdict = quick_of.get((name, key), row.get("verdict"))
            if (name, key) in quick_of and quick_verdict != row.get("verdict"):
                verdict += f" (--quick: {quick_verdict or '—'})"
            role = str(row.get("role") or "—")
            thread = fmt_cell(measured, table.places(column, n))
            cells = [f"`{name}`", key, thread, old_band, old_role, old_verdict, role, band]
            lines.append("| " + " | ".join([*cells, noise, error, verdict]) + " |")
            if old_verdict != "—":
                before_judged[old_verdict] += 1
            if row.get("role") == PREDICTED and row.get("verdict") is not None:
                after_judged[str(row["verdict"])] += 1
            fitted += row.get("role") == FITTED

    def counted(judged: Counter[str]) -> str:
        order = [v for v in ("in band", *VERDICTS) if judged[v]]
        order += sorted(v for v in judged if v not in order)
        return ", ".join(f"{judged[v]} `{v}`" for v in order)

    lines += [
        "",
        f"Before: {sum(before_judged.values())} judged rows, {counted(before_judged)}.",
        f"After: {sum(after_judged.values())} predicted rows and {fitted} fitted: "
        f"{counted(after_judged)}.",
        "",
        "| table | thread | before | after |",
        "|---|---|---|---|",
    ]
    for name in names:
        thread = THREADS[after[name]["thread"]].name
        headline = ClaimTable.from_json(name, after[name]).headline()
        lines.append(f"| `{name}` | {thread} | {before_headline(before.get(name))} | {headline} |")
    return "\n".join(lines) + "\n"


class BadInput(Exception):
    """A file that is not `mmuscope bench --json`'s output."""


def render_unbanded(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The thread numbers of the tables without a band: the model's number and the sub-claim
    it is judged in, before and after."""
    lines = [
        "| table | row | thread | before: model | role | model | error | sub-claim | "
        "before: holds | holds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (theirs, ours, keys, claims) in UNBANDED.items():
        if name not in after:
            continue
        old = (
            {tuple(r[k] for k in keys): r for r in rows_of(before[name])} if name in before else {}
        )
        for row in rows_of(after[name]):
            if row.get(theirs) is None or (
                name == "slot_cache" and row["workload"] not in JUDGED_WORKLOADS
            ):
                continue
            key = tuple(row[k] for k in keys)
            claim = claims.get(str(row[keys[0]]), claims.get("", ""))
            was = old.get(key, {})
            error = f"{row['error_pct']:+.1f} %" if row.get("error_pct") is not None else "—"
            held_before = before.get(name, {}).get("checks", {}).get(claim)
            cells = [
                f"`{name}`",
                " · ".join(str(k) for k in key),
                fmt_cell(row[theirs]),
                fmt_plain(was.get(ours)),
                str(row.get("role") or "—"),
                fmt_cell(row[ours]),
                error,
                f"`{claim}`" if claim else "—",
                fmt_cell(held_before),
                fmt_cell(after[name]["checks"].get(claim)),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def load(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise BadInput(f"{path}: {err}") from None
    if not isinstance(data, dict) or not claim_tables(data):
        raise BadInput(f"{path}: no claim table of `mmuscope bench --json` in it")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", help="`mmuscope bench --json` of the older checkout")
    parser.add_argument("after", help="`mmuscope bench --json` of the newer checkout")
    parser.add_argument("--quick", help="`mmuscope bench --json --quick` of the newer checkout")
    args = parser.parse_args(argv)
    try:
        quick = load(args.quick) if args.quick else None
        before, after = load(args.before), load(args.after)
        text = render(before, after, quick) + "\n" + render_unbanded(before, after)
    except BadInput as err:
        print(f"bench_before_after: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
