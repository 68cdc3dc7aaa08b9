"""Bands and verdicts and the headline computed from every sub-claim: the arithmetic, and
the quick `bench --json` run held against the threads' own numbers, written here as the
threads print them."""

from __future__ import annotations

from typing import Any

import pytest
from mmuscope.engine.claims.band import (
    DIRECTION_ONLY,
    IN_BAND,
    NOT_REPRODUCED,
    Band,
    band_of,
    corners,
)
from mmuscope.engine.claims.table import ClaimTable

from tests.test_bench_claims import tables  # noqa: F401  (the shared quick run)

THREAD_TIMES: dict[str, dict[str, float]] = {
    # table -> quantity (the row's label) -> the thread's number
    "zap": {"fast": 2_323_016_424, "previous": 2_368_810_003},  # ns, the fast-zap thread
    "rmap_ext": {"15": 302.00},  # ./rmap_fork 500, the PTE_LIST_EXT thread
    "ppc_keys": {"2014-keys": 7.833},  # time ./pfault, real, the POWER-keys thread
    "tlb_flush": {
        "2 baseline": 3979.50,
        "2 gang": 8818.00,
        "2 pv_flush": 11002.50,
        "4 baseline": 1817.50,
        "4 gang": 6236.50,
        "4 pv_flush": 6196.75,
        "8 baseline": 922.12,
        "8 gang": 4043.00,
        "8 pv_flush": 4001.38,
    },
    "shadow_2011": {
        "kernbench elapsed, wbtree": 42.305,
        "kernbench elapsed, reorder": 42.160,
        "netperf TCP_RR transactions/s, wbtree / array": 1.03,
        "perf share of gfn_to_memslot": 0.81,
        "perf share of paging64_walk_addr_generic": 1.80,
        "Unixbench column 1, after the vtlb": 2237.4,
        "Unixbench column 1, after sorted memslots": 2392.5,
        "Unixbench column 2, after sorted memslots": 2485.9,
        "Unixbench column 3, after sorted memslots": 2416.1,
    },
}


def test_verdicts() -> None:
    band = Band(90.0, 95.0, 98.0, base=100.0)
    assert band.verdict(97.0) == IN_BAND
    assert band.verdict(80.0) == DIRECTION_ONLY  # a 20-point drop against the model's 5
    assert band.verdict(101.0) == NOT_REPRODUCED  # the wrong sign
    assert band.verdict(99.0) == DIRECTION_ONLY  # a 1-point drop: the same order
    assert band.verdict(99.9) == NOT_REPRODUCED and band.verdict(0.0) == NOT_REPRODUCED
    assert band.factor == pytest.approx(10 / 2) and band.wide
    assert Band(2.0, 3.0, 5.0).factor == 2.5 and not Band(2.0, 3.0, 5.0).wide
    assert Band(99.0, 100.0, 101.0, base=100.0).factor == float("inf")


def test_bands_cover_every_corner() -> None:
    """Two estimates pulling apart: the all-low and all-high runs meet in the middle, the
    corners do not."""
    names = ("FORK_PAGE_NS", "DESC_LINE_NS")
    assert len(corners(names)) == 4
    band = band_of(lambda v: v["DESC_LINE_NS"] / v["FORK_PAGE_NS"], names)
    assert band.low == pytest.approx(4 / 6000) and band.high == pytest.approx(40 / 1500)


def _key(name: str, row: dict[str, Any]) -> str:
    if name == "tlb_flush":
        return f"{row['vms']} {row['quantity']}"
    if name == "zap":
        return str(row["method"]) if row["guest_gib"] == 32 else ""
    if name == "rmap_ext":
        return str(row["era"])
    if name == "ppc_keys":
        return (
            str(row["era"]) if "scaled" in str(row["variant"]) or row["variant"] == "pfault" else ""
        )
    return str(row["quantity"])


@pytest.mark.parametrize("name", sorted(THREAD_TIMES))
def test_the_json_bands_hold_the_threads_numbers(tables: dict[str, Any], name: str) -> None:  # noqa: F811
    data = tables[name]
    rows = [dict(zip(data["columns"], r, strict=True)) for r in data["rows"]]
    found = {}
    for row in rows:
        key = _key(name, row)
        if key in THREAD_TIMES[name]:
            found[key] = row
    assert set(found) == set(THREAD_TIMES[name])
    for key, row in found.items():
        measured = THREAD_TIMES[name][key]
        thread_cell = row.get(
            "thread", row.get("thread_ns", row.get("thread_fork_time", row.get("thread_time_s")))
        )
        assert thread_cell == pytest.approx(measured)
        low, central, high = row["low"], row["central"], row["high"]
        assert low <= central <= high
        inside = low <= measured <= high
        assert (row["verdict"] == IN_BAND) is inside, (key, row)
        assert row["verdict"] in (IN_BAND, DIRECTION_ONLY, NOT_REPRODUCED)
        assert row["wide"] is (row["band_x"] is None or row["band_x"] > 3)


@pytest.mark.parametrize("name", sorted(THREAD_TIMES))
def test_the_headline_follows_every_sub_claim(tables: dict[str, Any], name: str) -> None:  # noqa: F811
    data = tables[name]
    verdicts = [v for v in (r[data["columns"].index("verdict")] for r in data["rows"]) if v]
    if not all(data["checks"].values()) or NOT_REPRODUCED in verdicts:
        assert data["verdict"] == NOT_REPRODUCED
    elif DIRECTION_ONLY in verdicts:
        assert data["verdict"] == DIRECTION_ONLY
    else:
        assert data["verdict"] == IN_BAND
    assert data["reproduced"] is (data["verdict"] == IN_BAND and data["wide_bands"] == 0)


def test_no_green_headline_over_a_failed_sub_claim() -> None:
    """Two sub-claims fail, the note says so: the headline says so too."""
    table = ClaimTable("t", ["a"], [[1]], "memslot-search", "c",
                       {"one": True, "two": False, "three": False}, "two fail")  # fmt: skip
    assert table.verdict == NOT_REPRODUCED and not table.reproduced
    assert table.headline() == "not reproduced · 2 of 3 sub-claims fail"
    with pytest.raises(ValueError):
        ClaimTable("t", ["a"], [[1]], "memslot-search", "c", {})
