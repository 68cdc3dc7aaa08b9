"""`mmuscope bench`'s claim tables: the JSON of every table (docs/architecture.md §6.3),
verdicts computed from rows, the SVG charts, `--svg` errors, missing tables.

The console script runs `--json --quick` once for the whole test process (shared with
tests/test_bench.py: every table together is the slow part); everything else runs the
engine in-process on small sizes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine.claims import memslot_lookup, rmap_ext, slot_cache, zap
from mmuscope.engine.claims.chart import chart_dot, chart_svg, infer_spec, write_chart
from mmuscope.engine.claims.registry import (
    CHART_SPECS,
    RUNNERS,
    TABLES,
    MissingTable,
    engine_verdict,
    run_table,
    run_tables,
)
from mmuscope.engine.claims.table import ClaimTable
from mmuscope.engine.lookup import LOOKUP_STRATEGIES
from mmuscope.engine.mmu.rmap import ERAS, KvmRmapHead
from mmuscope.engine.threads import THREADS
from mmuscope.tui.bench import render

from tests.test_bench import mmuscope, quick_json_run

REQUIRED_COLUMNS = {
    "memslot_lookup": {"strategy", "workload", "layout", "visited_cached", "visited_bare", "role"},
    "slot_cache": {"workload", "vm_cache_hit_ratio", "thread_hit_ratio", "role"},
    "rmap_ext": {
        "role",
        "pte_list_ext",
        "descriptors",
        "bytes",
        "lines_per_add",
        "lines_per_remove",
        "lines_per_walk",
        "relative_cost",
    },
    "zap": {"method", "max_lock_hold_pages", "total_work_pages", "vcpu_stall_mean_pages", "role"},
    "tlb_flush": {"vms", "quantity", "thread", "role"},
    "ppc_keys": {"searches_per_fault", "kernel", "role"},
    "shadow_2011": {"quantity", "unit", "role", "thread"},
    "engine": {"name", "value", "unit"},
}
TIMED = {"shadow_2011", "rmap_ext", "zap", "tlb_flush", "ppc_keys"}  # timed: a thread's times
BAND = {"low", "central", "high", "verdict"}


@pytest.fixture(scope="module")
def tables() -> dict[str, Any]:
    done = quick_json_run()
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def as_table(name: str, data: dict[str, Any]) -> ClaimTable:
    return ClaimTable.from_json(name, data)


def column(data: dict[str, Any], name: str) -> list[Any]:
    index = data["columns"].index(name)
    return [row[index] for row in data["rows"]]


# -- the JSON contract -------------------------------------------------------------------


def test_json_has_every_table_in_order(tables: dict[str, Any]) -> None:
    assert list(tables) == list(TABLES)


@pytest.mark.parametrize("name", TABLES)
def test_every_table_has_its_columns_thread_claim_and_verdict(
    tables: dict[str, Any], name: str
) -> None:
    data = tables[name]
    assert REQUIRED_COLUMNS[name] <= set(data["columns"])
    assert data["rows"] and all(len(row) == len(data["columns"]) for row in data["rows"])
    assert data["thread"] in THREADS and data["seed"] == data["thread"]  # seed: older name
    assert isinstance(data["claim"], str) and data["claim"]
    assert isinstance(data["reproduced"], bool) and data["checks"]
    assert (name in TIMED) == (set(data["columns"]) >= BAND)
    table = as_table(name, data)  # the headline recomputed from the JSON alone
    assert (data["verdict"], data["reproduced"]) == (table.verdict, table.reproduced)


def test_memslot_lookup_covers_strategies_workloads_and_layouts(tables: dict[str, Any]) -> None:
    data = tables["memslot_lookup"]
    assert set(column(data, "strategy")) == set(LOOKUP_STRATEGIES)
    assert set(column(data, "workload")) == {"ram", "mmio", "mixed"}
    assert {"pc-4g", "assigned-devices", "max"} <= set(column(data, "layout"))
    theirs = {v for v in column(data, "thread_visited") if v is not None}
    assert theirs == {32.0, 6.5}  # Alex's "full 32 entries" and "6-7 tree nodes"


def test_the_threads_numbers_sit_beside_the_models(tables: dict[str, Any]) -> None:
    rmap = tables["rmap_ext"]
    assert set(column(rmap, "pte_list_ext")) == {3, 14, 15}
    assert {367.2, 302.0} <= set(column(rmap, "thread_fork_time"))
    assert set(column(tables["zap"], "method")) == {"slow", "fast", "previous"}
    assert {2405434959, 2323016424, 2368810003} <= set(column(tables["zap"], "thread_ns"))
    assert set(column(tables["slot_cache"], "thread_hit_ratio")) == {0.35}
    assert {2, 4, 8} <= set(column(tables["tlb_flush"], "vms"))


def test_engine_table_keeps_its_rows(tables: dict[str, Any]) -> None:
    engine = tables["engine"]
    assert engine["columns"] == ["name", "value", "unit"]
    assert isinstance(engine["bars"], dict) and "fast_zap_max_lock_hold_pages" in engine["bars"]
    assert "populate_6g_s" not in engine["bars"]  # not judged on a quick run


@pytest.mark.parametrize("name", TABLES)
def test_human_output_shows_the_verdict_and_thread_columns(
    tables: dict[str, Any], name: str
) -> None:
    if name == "engine":
        return  # its bars table: tests/test_bench.py
    text = render(as_table(name, tables[name]), 240)
    assert f"mmuscope bench: {name}" in text and tables[name]["verdict"] in text
    assert THREADS[tables[name]["thread"]].title in text  # the thread by its short name
    assert not re.search(r"\d{3}_[0-9a-f]{16}", text)  # never a file name
    for thread_column in (c for c in tables[name]["columns"] if c.startswith("thread_")):
        assert thread_column in text


# -- verdicts from rows (small sizes) ----------------------------------------------------


SMALL_LAYOUTS = ("pc-4g", memslot_lookup.ALEX_LAYOUT, "assigned-devices")


@pytest.fixture(scope="module")
def lookup_rows() -> list[list[Any]]:
    return memslot_lookup.measure(SMALL_LAYOUTS, {"lookups": 60, "warmup": 20})


def test_memslot_lookup_verdict_comes_from_the_rows(lookup_rows: list[list[Any]]) -> None:
    checks = memslot_lookup.judge(lookup_rows)
    assert all(checks.values()), checks
    broken = [list(row) for row in lookup_rows]
    at = memslot_lookup.COLUMNS.index
    for row in broken:  # a tree that scanned like an array
        if row[at("strategy")] == "rbtree" and row[at("workload")] == "mmio":
            row[at("visited_bare")] = float(row[at("slots")])
    assert not memslot_lookup.judge(broken)["bare_tree_log_n"]


def test_caches_never_cost_more_than_one_look_over_the_bare_search(
    lookup_rows: list[list[Any]],
) -> None:
    at = memslot_lookup.COLUMNS.index
    for row in lookup_rows:
        assert row[at("visited_cached")] <= row[at("visited_bare")] + 1.0
        if row[at("workload")] == "mmio":
            assert row[at("visited_cached")] == 1.0  # the MMIO spte, after warm-up
            if row[at("strategy")] == "linear":
                assert row[at("visited_bare")] >= row[at("slots")]


def test_alex_layout_has_the_2011_private_slots() -> None:
    layout = memslot_lookup.alex_layout()
    ids = sorted(r.id for r in layout.regions)
    assert ids[-3:] == [32, 33, 34] and len(ids) == 10


def test_slot_cache_verdict_comes_from_the_rows() -> None:
    rows = slot_cache.measure(300)
    checks = slot_cache.judge(rows)
    assert isinstance(checks["above_35_percent"], bool)
    at = slot_cache.COLUMNS.index
    low = [[*row] for row in rows]
    for row in low:
        row[at("vm_cache_hit_ratio")] = 0.2
    assert not slot_cache.judge(low)["above_35_percent"]
    high = [[*row] for row in rows]
    for row in high:
        row[at("vm_cache_hit_ratio")] = 0.9
    assert slot_cache.judge(high)["above_35_percent"]


def test_rmap_storm_costs_and_verdict() -> None:
    storms = {era: rmap_ext.fork_storm(era, children=60) for era in ERAS}
    assert max(storms["6.4"].adds) <= 3  # the head only, whatever the chain's length
    assert storms["3"].adds[-1] > storms["3"].adds[5]  # era 3 walks the whole chain
    assert storms["15"].total_lines < storms["3"].total_lines
    rows, _ = rmap_ext.measure(pages=1, children=60)
    assert rmap_ext.judge(rows)["ext15_cheaper_than_ext3"]
    at = rmap_ext.COLUMNS.index
    worse = [[*row] for row in rows]
    worse[1][at("relative_cost")] = 1.5  # era 15 costing more than era 3
    assert not rmap_ext.judge(worse)["ext15_cheaper_than_ext3"]


@settings(max_examples=40, deadline=None)
@given(
    era=st.sampled_from(sorted(ERAS)),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 63)), min_size=1, max_size=80),
)
def test_line_counts_follow_any_add_remove_sequence(era: str, ops: list[tuple[bool, int]]) -> None:
    head = KvmRmapHead(era)
    held: list[int] = []
    fresh = iter(range(0x1000, 0x100000, 8))
    for add, pick in ops:
        descs = len(head.descs)
        if add or not held:
            lines = rmap_ext.add_lines(head)
            head.add(sptep := next(fresh))
            held.append(sptep)
        else:
            sptep = held.pop(pick % len(held))
            lines = rmap_ext.remove_lines(head, sptep)
            head.remove(sptep)
        assert 0 <= lines <= 3 * (descs + 1)  # at most 2 lines a desc, plus a new one
        head.audit()


def test_zap_verdict_and_stall() -> None:
    assert zap.stall([100]) == (50.0, 100)
    assert zap.stall([10, 10, 4]) == ((100 + 100 + 16) / 48, 10)
    rows = zap.measure((1, 2))
    checks = zap.judge(rows)
    assert checks["fast_stalls_less"] and checks["same_work"] and checks["fast_hold_bounded"]
    at = zap.COLUMNS.index
    assert {row[at("lock_holds")] for row in rows if row[at("method")] == "slow"} == {1}
    slow_only = [row for row in rows if row[at("method")] == "slow"]
    assert not zap.judge(slow_only)["fast_stalls_less"]


def test_engine_verdict_judges_the_bars() -> None:
    rows = [("faults_per_s", 150_000, "faults/s"), ("fast_zap_max_lock_hold_pages", 10, "pages")]
    assert engine_verdict(rows, quick=True) == {
        "faults_per_s": False,
        "fast_zap_max_lock_hold_pages": True,
    }


# -- charts ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TABLES)
def test_every_table_charts_as_valid_svg(tables: dict[str, Any], name: str, tmp_path: Path) -> None:
    table = as_table(name, tables[name])
    path = write_chart(table, tmp_path, CHART_SPECS.get(name))
    assert path == tmp_path / f"{name}.svg"
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert name in texts and table.headline() in texts
    bands = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "band"]
    assert bool(bands) == (name in TIMED)  # error bars beside the thread's marks
    assert len(list(root.iter("{http://www.w3.org/2000/svg}rect"))) > len(table.rows)


def test_chart_text_is_escaped_and_thread_bars_drawn() -> None:
    table = ClaimTable(
        "odd",
        ["label", "value", "thread_value", "thread_note"],
        [["<a&b>", 3.0, 4.0, 'say "hi"\x01'], ["ok", None, None, None]],
        "memslot-search",
        "claim with <tags> & 'quotes'",
        {"odd_holds": False},
        "note \x00 with a control character",
    )
    root = ET.fromstring(chart_svg(table).encode())
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "<a&b>" in texts and "not reproduced · 1 of 1 sub-claims fail" in texts
    assert any(t.startswith("thread 4") for t in texts)  # the thread's bar
    assert infer_spec(table).threads == {"value": "thread_value"}
    dot = chart_dot(table)
    assert dot.startswith("digraph bench {") and "&lt;a&amp;b&gt;" in dot


# the two cheapest tables (~1.5 s of CPU each with --quick; zap takes ~4.5 s): the
# charts' content is checked on every table above, from the shared run


def test_svg_option_writes_one_chart_per_table(tmp_path: Path) -> None:
    done = mmuscope(
        "bench",
        "--quick",
        "--table",
        "slot_cache",
        "--table",
        "shadow_2011",
        "--svg",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shadow_2011.svg", "slot_cache.svg"]
    for path in tmp_path.iterdir():
        ET.parse(path)
    assert "slot_cache" in done.stdout and "holds" in done.stdout


def test_svg_option_creates_its_directory(tmp_path: Path) -> None:
    charts = tmp_path / "charts" / "today"
    done = mmuscope("bench", "--quick", "--table", "slot_cache", "--svg", str(charts))
    assert done.returncode == 0, done.stderr
    assert [p.name for p in charts.iterdir()] == ["slot_cache.svg"]


@pytest.mark.parametrize("where", ["under-a-file", "file"])
def test_bad_svg_directory_is_one_line_exit_2(tmp_path: Path, where: str) -> None:
    target = tmp_path / "a-file"
    target.write_text("x")
    if where == "under-a-file":
        target = target / "charts"
    done = mmuscope("bench", "--quick", "--svg", str(target))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.startswith("mmuscope") and done.stderr.count("\n") == 1


# -- missing tables ----------------------------------------------------------------------


def _fake_table(quick: bool = False) -> ClaimTable:
    return ClaimTable("tlb_flush", ["vms", "baseline"], [[2, 1.0]], "pv-flush",
                      "c", {"fake": True})  # fmt: skip


def test_a_missing_table_is_reported_and_the_others_run(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("fake_claims")
    fake.tlb_flush_table = _fake_table  # type: ignore[attr-defined]

    def broken(quick: bool = False) -> ClaimTable:
        raise ImportError("no module named engine.ppc.hpt")

    fake.ppc_keys_table = broken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_claims", fake)
    monkeypatch.setitem(RUNNERS, "tlb_flush", ("fake_claims", "tlb_flush_table"))
    monkeypatch.setitem(RUNNERS, "ppc_keys", ("fake_claims", "ppc_keys_table"))
    monkeypatch.setitem(RUNNERS, "zap", ("mmuscope.engine.claims.not_there", "zap_table"))
    missing: list[MissingTable] = []
    out = run_tables(["zap", "tlb_flush", "ppc_keys"], quick=True, on_missing=missing.append)
    assert list(out) == ["tlb_flush"]
    assert [m.name for m in missing] == ["zap", "ppc_keys"]
    with pytest.raises(ValueError, match="unknown table"):
        run_table("nope")


def test_the_cli_reports_a_missing_table_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mmuscope.tui.cli import main

    fake = types.ModuleType("fake_claims2")
    fake.tlb_flush_table = _fake_table  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_claims2", fake)
    monkeypatch.setitem(RUNNERS, "tlb_flush", ("fake_claims2", "tlb_flush_table"))
    monkeypatch.setitem(
        RUNNERS, "ppc_keys", ("mmuscope.engine.ppc.not_written_yet", "ppc_keys_table")
    )
    assert main(["bench", "--json", "--table", "tlb_flush", "--table", "ppc_keys"]) == 0
    captured = capsys.readouterr()
    assert list(json.loads(captured.out)) == ["tlb_flush"]
    assert captured.err.count("\n") == 1 and "ppc_keys missing" in captured.err


def test_bench_help_lists_the_tables() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mmuscope.tui", "bench", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "--svg" in done.stdout and "memslot_lookup" in done.stdout
