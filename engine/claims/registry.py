"""Every `mmuscope bench` table, in order, and how to run and chart each one.

Tables come from their own modules (one per table, named after it) and are imported only
when run; when one of them cannot be imported the others still run — `run_tables`
reports it through `on_missing` and leaves it out.  `engine` is the engine's own
speed and memory table (engine_speed.py) as a `ClaimTable`, its rows unchanged.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

from .chart import ChartSpec
from .table import Cell, ClaimTable

TableRunner = Callable[..., ClaimTable]

RUNNERS: dict[str, tuple[str, str]] = {
    "memslot_lookup": ("mmuscope.engine.claims.memslot_lookup", "memslot_lookup_table"),
    "slot_cache": ("mmuscope.engine.claims.slot_cache", "slot_cache_table"),
    "shadow_2011": ("mmuscope.engine.claims.shadow_2011", "shadow_2011_table"),
    "rmap_ext": ("mmuscope.engine.claims.rmap_ext", "rmap_ext_table"),
    "zap": ("mmuscope.engine.claims.zap", "zap_table"),
    "tlb_flush": ("mmuscope.engine.claims.tlb_flush", "tlb_flush_table"),
    "ppc_keys": ("mmuscope.engine.claims.ppc_keys", "ppc_keys_table"),
    "engine": ("mmuscope.engine.claims.registry", "engine_table"),
}
TABLES: tuple[str, ...] = tuple(RUNNERS)
BAND = {"central": ("low", "high")}  # the model's band around its central value

CHART_SPECS: dict[str, ChartSpec] = {
    "memslot_lookup": ChartSpec(
        ("layout", "workload", "strategy"),
        ("visited_bare", "visited_cached"),
        {"visited_bare": "thread_visited"},
        "slots or nodes per lookup",
    ),
    "slot_cache": ChartSpec(
        ("layout", "workload"),
        ("vm_cache_hit_ratio", "vcpu_cache_hit_ratio"),
        {"vm_cache_hit_ratio": "thread_hit_ratio"},
        "hit ratio",
        log=False,
    ),
    "shadow_2011": ChartSpec(
        ("quantity", "unit"),
        ("central",),
        {"central": "thread"},
        "each row in its unit",
        log=False,
        bands=BAND,
        per_row=True,
    ),
    "rmap_ext": ChartSpec(
        ("era",),
        ("central",),
        {"central": "thread_fork_time"},
        "rmap_fork time (the thread's unit)",
        log=False,
        bands=BAND,
    ),
    "zap": ChartSpec(
        ("guest_gib", "method"),
        ("central",),
        {"central": "thread_ns"},
        "benchmark ns",
        log=False,
        bands=BAND,
    ),
    "tlb_flush": ChartSpec(
        ("vms", "quantity"),
        ("central",),
        {"central": "thread"},
        "records/s per VM, or a ratio",
        log=False,
        bands=BAND,
        per_row=True,
    ),
    "ppc_keys": ChartSpec(
        ("variant", "era"),
        ("central",),
        {"central": "thread_time_s"},
        "time ./pfault, s",
        log=False,
        bands=BAND,
    ),
    "engine": ChartSpec(("name", "unit"), ("value",), {}, "each row in its own unit"),
}


class MissingTable(Exception):
    """A table whose module or function cannot be imported (yet)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


def load_runner(name: str) -> TableRunner:
    """The function that makes table `name`; `MissingTable` when it cannot be imported."""
    if name not in RUNNERS:
        raise ValueError(f"unknown table {name!r}: choose from {', '.join(TABLES)}")
    module_name, function = RUNNERS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise MissingTable(name, f"cannot import {module_name} ({err})") from err
    runner = getattr(module, function, None)
    if not callable(runner):
        raise MissingTable(name, f"{module_name} has no {function}()")
    return runner  # type: ignore[no-any-return]


def run_table(name: str, quick: bool = False) -> ClaimTable:
    """Run one table; `MissingTable` when its code cannot be imported, even mid-run."""
    runner = load_runner(name)
    try:
        table = runner(quick=quick)
    except ImportError as err:
        raise MissingTable(name, f"import failed while running ({err})") from err
    if not isinstance(table, ClaimTable):
        raise TypeError(f"{name}: the runner returned {type(table).__name__}, not a ClaimTable")
    return table


def run_tables(
    names: Iterable[str] = TABLES,
    quick: bool = False,
    *,
    on_missing: Callable[[MissingTable], None] | None = None,
    on_start: Callable[[str], None] | None = None,
) -> dict[str, ClaimTable]:
    """Run the named tables in order; missing ones are reported and left out."""
    out: dict[str, ClaimTable] = {}
    for name in names:
        if on_start is not None:
            on_start(name)
        try:
            out[name] = run_table(name, quick)
        except MissingTable as missing:
            if on_missing is not None:
                on_missing(missing)
    return out


def chart_spec(table: ClaimTable) -> ChartSpec | None:
    """The chart layout of a known table (None: let the chart infer one)."""
    return CHART_SPECS.get(table.name)


# -- the engine table ----------------------------------------------------------------

ENGINE_THREAD = "fast-zap"  # the lock-break technique its zap bar holds the engine to
ENGINE_CLAIM = (
    "The engine meets its speed and memory bars: >= 200,000 faults/s, a 6 GiB populate "
    "in <= 10 s and <= 1024 MB, and a fast zap that never holds mmu_lock for more than "
    "BATCH_ZAP_PAGES (10) pages (the lock-break technique of the fast-zap thread)"
)


def engine_verdict(rows: Iterable[tuple[str, float | int, str]], quick: bool) -> dict[str, bool]:
    """Each bar judged on this run (the 6 GiB bars only on a full run)."""
    from .engine_speed import BARS, FULL_ONLY_BARS, bar_met

    values = {name: value for name, value, _ in rows}
    return {
        name: bool(bar_met(name, values[name]))
        for name in BARS
        if name in values and not (quick and name in FULL_ONLY_BARS)
    }


def engine_table(quick: bool = False) -> ClaimTable:
    """`engine_rows()` as a ClaimTable: columns name, value, unit, rows unchanged."""
    from .engine_speed import QUICK, engine_rows

    rows = engine_rows(quick=quick)
    bars = engine_verdict(rows, quick)
    missed = [name for name, met in bars.items() if not met]
    note = (
        "Every bar judged on this run is met."
        if not missed
        else f"Missed on this machine: {', '.join(missed)}."
    )
    if quick:
        note += (
            " --quick: the 6 GiB populate bars are not judged"
            f" (a {QUICK.populate_gib:g} GiB populate runs)."
        )
    table_rows: list[list[Cell]] = [list(row) for row in rows]
    return ClaimTable(
        name="engine",
        columns=["name", "value", "unit"],
        rows=table_rows,
        thread=ENGINE_THREAD,
        claim=ENGINE_CLAIM,
        checks={f"bar_{name}": met for name, met in bars.items()},
        note=note,
        extra={"bars": bars},
    )
