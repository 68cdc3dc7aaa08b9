"""`mmuscope rmaps-stat`: debugfs's mmu_rmaps_stat after a workload, byte for byte in the
kernel's format (docs/kvm.md §3.5), through the installed command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MMUSCOPE = Path(sys.executable).with_name("mmuscope")
HEADER = "Rmap_Count:\t0\t1\t2-3\t4-7\t8-15\t16-31\t32-63\t64-127\t128-255\t256-511\t512-1023\t\n"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MMUSCOPE), "rmaps-stat", *args], capture_output=True, text=True, check=False
    )


def rows(out: str) -> dict[str, list[int]]:
    return {
        line.split(":")[0]: [int(v) for v in line.split("\t")[1:-1]]
        for line in out.splitlines()
        if line.startswith("Level=")
    }


def test_fork_storm_puts_every_shared_page_in_the_children_bucket() -> None:
    done = run("--children", "7", "--pages", "5")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith(HEADER)
    assert [line.split("\t")[0] for line in out.splitlines()[1:]] == [
        "Level=4K:", "Level=2M:", "Level=1G:",
    ]  # fmt: skip
    assert all(line.endswith("\t") for line in out.splitlines())  # the kernel's trailing tab
    four_k = rows(out)["Level=4K"]
    assert four_k[4] == 5  # 8 sptes each (parent + 7): ffs(8) = 4, the "8-15" column
    assert sum(four_k[1:]) == 5


def test_the_kernel_ffs_quirk_and_log2() -> None:
    kernel = rows(run("--children", "500", "--pages", "4").stdout)["Level=4K"]
    log2 = run("--children", "500", "--pages", "4", "--log2").stdout
    assert kernel[1] == 4  # 501 = 0b111110101: ffs() is 1, so "1" — the real code's quirk
    assert log2.startswith("# log2 buckets")
    assert rows(log2)["Level=4K"][9] == 4  # 256-511


def test_kernbench_has_one_spte_per_page() -> None:
    four_k = rows(run("--workload", "kernbench", "--children", "4", "--pages", "8").stdout)
    assert four_k["Level=4K"][1] == 32 and sum(four_k["Level=4K"][2:]) == 0


@pytest.mark.parametrize(
    "args", [["--children", "99999"], ["--pages", "0"], ["--workload", "nope"], ["--era", "7"]]
)
def test_bad_input_is_one_line_and_exit_2(args: list[str]) -> None:
    done = run(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--children", "-5"], "--children -5: give 0 to 3000"),
        (["--children", "5000"], "--children 5000: give 0 to 3000"),
        (["--pages", "0"], "--pages 0: give 1 to 512"),
        (["--pages", "513"], "--pages 513: give 1 to 512"),
    ],
)
def test_a_count_out_of_range_is_named_with_its_range(args: list[str], said: str) -> None:
    """One form for every count, as `kvm --pages` says it; 5000 children once ran a
    minute and ended in a traceback (the guest's page-table pool ran out)."""
    done = run(*args)
    assert done.returncode == 2 and done.stderr.strip() == f"mmuscope: error: {said}"


def test_the_most_processes_fit_the_guests_page_table_pool() -> None:
    """MAX_PROCESSES is what the pool holds: each process's tables, as two forks take
    them, times the largest workload (a parent and MAX_PROCESSES children)."""
    from mmuscope.engine.mmu.guest.page_tables import DEFAULT_POOL_PAGES
    from mmuscope.engine.mmu.shadow.rmap_workloads import (
        MAX_PAGES,
        MAX_PROCESSES,
        run_rmap_workload,
    )

    for workload in ("fork", "kernbench"):
        one = len(run_rmap_workload(workload, children=1, pages=MAX_PAGES).guest.allocated)
        two = len(run_rmap_workload(workload, children=2, pages=MAX_PAGES).guest.allocated)
        each = two - one
        assert each >= 4 and one + (MAX_PROCESSES - 1) * each <= DEFAULT_POOL_PAGES, each
