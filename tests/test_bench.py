"""`mmuscope bench`: the installed console script in a subprocess (as tests/test_cli.py
runs it), and the engine's benchmark pieces on small sizes.

No timing is asserted anywhere: speed is measured by the benchmark itself, as ratios
against a baseline of the same run.  What is asserted is the shape of the output and
behaviour that does not depend on the machine (a fast zap never holds the lock for more
than BATCH_ZAP_PAGES pages; every gfn of the populate gets faulted).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mmuscope.engine.claims.engine_speed import (
    GFNS_PER_2M,
    QUICK,
    bare_mmu,
    fast_zap,
    faults_per_s,
    one_slot_guest,
    populate,
    populate_here,
    sparse_guest_with_pages,
    zap_all,
)
from mmuscope.engine.claims.table import ClaimTable
from mmuscope.engine.mmu.mmu_pages import BATCH_ZAP_PAGES
from mmuscope.engine.mmu.spte import RetPf
from mmuscope.tui.bench import PIPE_WIDTH, render

MMUSCOPE = Path(sys.executable).parent / "mmuscope"
REQUIRED = {
    "faults_per_s": "faults/s",
    "dict_inserts_per_s": "inserts/s",
    "faults_vs_dict_insert": "ratio",
    "populate_6g_s": "s",
    "populate_6g_peak_rss_mb": "MB",
    "populate_vs_dict_insert": "ratio",
    "fast_zap_max_lock_hold_pages": "pages",
    "zap_all_lock_hold_pages": "pages",
    "quick": "flag",
}


def mmuscope(*args: str) -> subprocess.CompletedProcess[str]:
    """The command, bounded: `bench --quick` takes ~30 s on an idle 2-core machine and
    several times that on a loaded one, so the bound only catches a hang."""
    assert MMUSCOPE.exists(), f"console script not installed next to {sys.executable}"
    return subprocess.run(
        [str(MMUSCOPE), *args], capture_output=True, text=True, timeout=600, check=False
    )


@functools.cache
def quick_json_run() -> subprocess.CompletedProcess[str]:
    """`mmuscope bench --json --quick`, run once per test process (every table: slow)
    and shared with tests/test_bench_claims.py."""
    return mmuscope("bench", "--json", "--quick")


@pytest.fixture(scope="module")
def quick_json() -> dict[str, Any]:
    done = quick_json_run()
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.count("\n") == 1  # one JSON object, one line
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def test_bench_json_has_the_engine_table(quick_json: dict[str, Any]) -> None:
    engine = quick_json["engine"]
    assert engine["columns"] == ["name", "value", "unit"]
    rows = engine["rows"]
    assert all(isinstance(row, list) and len(row) == 3 for row in rows)
    names = [row[0] for row in rows]
    assert len(names) == len(set(names))
    units = {name: unit for name, _, unit in rows}
    for name, unit in REQUIRED.items():
        assert units.get(name) == unit, name
    for name, value, unit in rows:
        assert isinstance(name, str) and isinstance(unit, str) and unit
        assert isinstance(value, int | float) and not isinstance(value, bool), name
        assert value >= 0, name


def test_bench_quick_says_what_it_measured(quick_json: dict[str, Any]) -> None:
    values = {name: value for name, value, _ in quick_json["engine"]["rows"]}
    assert values["quick"] == 1
    assert values["faults_n"] == QUICK.faults
    assert values["populate_gib"] == QUICK.populate_gib
    assert values["populate_gfns"] == values["populate_gib"] * 262_144  # 4K gfns a GiB
    assert values["fast_zap_pages"] == values["zap_all_lock_hold_pages"] >= 10_000
    assert 1 <= values["fast_zap_max_lock_hold_pages"] <= 10  # the bar: a behaviour
    assert values["fast_zap_lock_holds"] * 10 >= values["fast_zap_pages"]
    assert values["populate_6g_peak_rss_mb"] >= values["populate_start_rss_mb"] > 0
    for name in ("faults_per_s", "dict_inserts_per_s", "faults_vs_dict_insert"):
        assert values[name] > 0


def test_bench_prints_a_table_without_json(quick_json: dict[str, Any]) -> None:
    """The engine table as `bench` prints it without --json (tui/bench.py render: the
    lines the command prints, without colours), drawn from the shared run's table: a
    second `bench --quick --table engine` (~17 s of CPU) would measure the same rows.
    The command's own text output, in a pipe, is tests/test_bench_text.py's."""
    text = render(ClaimTable.from_json("engine", quick_json["engine"]), PIPE_WIDTH)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    for name in REQUIRED:
        assert name in text
    assert "quick" in text and "≤ 10" in text


@pytest.mark.parametrize("args", [("--bogus",), ("--quick", "extra"), ("--json=1",)])
def test_bench_bad_options_are_one_line_exit_2(args: tuple[str, ...]) -> None:
    done = mmuscope("bench", *args)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.startswith("mmuscope") and done.stderr.count("\n") == 1


# -- the engine pieces, small ------------------------------------------------------------


def test_the_bench_guest_is_one_slot_rounded_to_2m() -> None:
    vm = one_slot_guest(1000)
    (slot,) = vm.memslots()
    assert slot.base_gfn == 0 and slot.npages == 1024
    mmu = bare_mmu(vm)
    assert mmu.page_fault(0, 1023 << 12) == RetPf.FIXED
    assert mmu.stat["pf_fixed"] == 1 and mmu.pages.n_used_mmu_pages == 4


def test_faults_per_s_faults_every_gfn_in_either_order() -> None:
    assert faults_per_s(2000, repeat=1) > 0  # it raises when a fault is not fixed
    assert faults_per_s(2000, shuffled=True, repeat=1) > 0


def test_populate_faults_every_gfn() -> None:
    here = populate_here(1 / 256)  # 4 MiB
    assert here.gfns == 1024 and here.peak_rss_mb >= here.start_rss_mb > 0
    child = populate(1 / 512)  # in a fresh interpreter
    assert child.gfns == 512 and child.peak_rss_mb > 0


def test_the_sparse_guest_has_the_pages_asked_for() -> None:
    mmu = sparse_guest_with_pages(600)
    assert 600 <= mmu.pages.n_used_mmu_pages <= 601
    assert mmu.stat["pf_fixed"] == mmu.pages.n_used_mmu_pages - 4  # root, L3, two L2
    assert len(mmu.rmap_vals[(0, 0, 1)]) == mmu.stat["pf_fixed"]
    assert all(index % GFNS_PER_2M == 0 for index in mmu.rmap_vals[(0, 0, 1)])
    mmu.audit()


def test_fast_zap_holds_the_lock_for_a_batch_and_zap_all_for_everything() -> None:
    fast = fast_zap(250)
    # the root vCPU 0 runs on adds nothing to a batch (nr_zapped 0): 249 counted
    assert fast.pages >= 249 and fast.max_lock_hold == BATCH_ZAP_PAGES
    assert fast.lock_holds == -(-fast.pages // BATCH_ZAP_PAGES)
    slow = zap_all(250)
    assert slow.lock_holds == 1 and slow.max_lock_hold == slow.pages == fast.pages


def test_every_module_of_the_shared_run_is_in_its_worker_group() -> None:
    """quick_json_run is cached per test process: a module that uses it (or the `tables`
    fixture built on it) outside the `bench-json` group runs the slow command again."""
    from tests.conftest import _group

    users = [
        path.name
        for path in Path(__file__).parent.glob("test_*.py")
        if "quick_json_run" in path.read_text() or "import tables" in path.read_text()
    ]
    assert len(users) >= 5
    assert {name: _group(name) for name in users} == dict.fromkeys(users, "bench-json")
