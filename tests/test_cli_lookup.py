"""`mmuscope lookup`: one gfn's walk through the memslots by each lookup strategy, every
probe numbered, on the presets and on a real QEMU `info mtree`: each command through
its entry point, `main(argv)`, in the test process (tests/cli_run.py `here`).
"""

from __future__ import annotations

import re

import pytest

from tests.cli_run import PC_6G, STRATEGIES, ok_here, realdata

PROBE_RE = re.compile(r"^\s+#(\d+)\s", re.MULTILINE)


@pytest.mark.parametrize(
    "args",
    [["0xfee00"], ["--gpa", "0xfee00000"], ["--gpa", str(0xFEE00000)], ["1043968"]],
    ids=["gfn-hex", "gpa-hex", "gpa-decimal", "gfn-decimal"],
)
def test_lookup_wbtree_apic_miss(args: list[str]) -> None:
    out = ok_here("lookup", *args, "--lookup", "wbtree")
    assert "gfn 0xfee00 " in out
    assert "wbtree" in out
    assert re.search(r"^\s+miss: .* after 4 visited", out, re.MULTILINE), out
    assert [int(n) for n in PROBE_RE.findall(out)] == [1, 2, 3, 4]


def test_lookup_compare_lists_every_strategy() -> None:
    out = ok_here("lookup", "0xfee00", "--compare")
    _, _, table = out.partition("every strategy")
    costs = dict(re.findall(r"^\s+(\S+)\s+(\d+) visited", table, re.MULTILINE))
    assert set(costs) == set(STRATEGIES), table
    assert costs["wbtree"] == "4"
    assert costs["linear"] == "7"  # a miss scans every entry of pc-4g's 7 slots


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_lookup_hit_in_ram(strategy: str) -> None:
    out = ok_here("lookup", "--gpa", "0x12345000", "--lookup", strategy)
    assert re.search(r"^\s+hit slot 1 \(ram-1m-to-hole\)", out, re.MULTILINE), out


def test_lookup_long_linear_scan_is_elided() -> None:
    out = ok_here("lookup", "--layout", "max", "--lookup", "linear", "0x50000")
    assert "hit slot 640" in out
    assert "after 641 visited" in out
    assert re.search(r"^\s+\.\.\. \d+ more probes", out, re.MULTILINE), out
    probes = [int(n) for n in PROBE_RE.findall(out)]
    assert probes[0] == 1 and probes[-1] == 641
    assert len(probes) < 100


def test_lookup_all_prints_every_probe() -> None:
    out = ok_here("lookup", "--layout", "max", "--lookup", "linear", "0x50000", "--all")
    assert "more probes" not in out
    assert [int(n) for n in PROBE_RE.findall(out)] == list(range(1, 642))
    assert "after 641 visited" in out


def test_lookup_no_cache_skips_last_used_slot() -> None:
    cached = ok_here("lookup", "0x12345")
    bare = ok_here("lookup", "0x12345", "--no-cache")
    assert "last_used_slot" in cached
    assert "last_used_slot" not in bare
    for out in (cached, bare):
        assert "hit slot 1 (ram-1m-to-hole)" in out


def test_lookup_smm_address_space() -> None:
    out = ok_here("lookup", "--layout", "q35-16g", "--as", "1", "0x10")
    assert "address space 1" in out
    assert "hit slot 0 (smm-ram-below-768k)" in out


def test_lookup_on_realdata_mtree() -> None:
    path = realdata(PC_6G)
    hit = ok_here("lookup", "--mtree", path, "--gpa", "0x150000000", "--lookup", "wbtree")
    assert re.search(r"hit slot \d+ \(ram-above-4g\)", hit), hit
    miss = ok_here("lookup", "--mtree", path, "--gpa", "0xfee00000", "--compare")
    assert "miss: no slot holds gfn 0xfee00" in miss
    assert set(re.findall(r"^\s+(\S+)\s+\d+ visited", miss, re.MULTILINE)) == set(STRATEGIES)
