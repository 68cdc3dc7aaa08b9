"""`mmuscope layout`: the memslots of a preset, or those QEMU would register from an
`info mtree` dump (flat view or tree, fixture or real), as text or JSON
(docs/architecture.md §6.3) (tests/cli_run.py).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from tests.cli_run import MTREE_FLAT, MTREE_TREE, PC_6G, Q35, TCG_FLAT, layout_json, ok, realdata

GiB = 1 << 30


def assert_memslot_shape(rows: list[dict[str, Any]]) -> None:
    """docs/architecture.md §6.3: [{"name": str, "gpa": int, "size": int, "readonly":
    bool}] sorted by gpa."""
    assert rows, "no RAM ranges found"
    for row in rows:
        assert set(row) == {"name", "gpa", "size", "readonly"}, row
        assert isinstance(row["name"], str) and row["name"]
        assert type(row["gpa"]) is int and type(row["size"]) is int
        assert type(row["readonly"]) is bool
        assert row["gpa"] % 4096 == 0 and row["size"] % 4096 == 0 and row["size"] > 0, row
    gpas = [row["gpa"] for row in rows]
    assert gpas == sorted(gpas)
    for low, high in itertools.pairwise(rows):
        assert low["gpa"] + low["size"] <= high["gpa"], (low, high)


def entry(rows: list[dict[str, Any]], gpa: int) -> dict[str, Any]:
    matches = [row for row in rows if row["gpa"] == gpa]
    assert len(matches) == 1, f"no single range at {gpa:#x}: {rows}"
    return matches[0]


def test_layout_preset_json() -> None:
    rows = layout_json("--preset", "pc-4g")
    assert [row["gpa"] for row in rows] == sorted(row["gpa"] for row in rows)
    names = {row["name"]: row for row in rows}
    assert names["pc.bios"]["readonly"] is True
    assert names["pc.bios"]["gpa"] == 0xFFFC0000
    assert names["ram-1m-to-hole"]["readonly"] is False
    assert len(rows) == 7


def test_layout_preset_with_smm_heads_each_address_space() -> None:
    """q35-16g's slots in two address spaces: a header before each, `as_id` in JSON, and
    address space 1's first slot as QEMU registers it (RAM below 640K and SMRAM,
    0-0xbffff, one slot: `Slot#65536 gpa=0x0 size=0xc0000` in a recorded SMM run)."""
    lines = ok("layout", "--preset", "q35-16g").splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("#")]
    assert [lines[i] for i in heads] == [
        "# address space 0: memory",
        "# address space 1: SMM (QEMU's KVM-SMRAM)",
    ]
    assert heads[0] == 0 and lines[heads[1] + 1] == (
        "0x0000000000000000-0x00000000000bffff         786432 smm-ram-below-768k"
    )
    rows = layout_json("--preset", "q35-16g")
    assert [row["as_id"] for row in rows] == [0] * 7 + [1] * 6
    assert not any(line.startswith("#") for line in ok("layout", "--preset", "pc-4g").splitlines())


def test_layout_default_text() -> None:
    out = ok("layout")
    bios = r"^0x00000000fffc0000-0x00000000ffffffff\s+262144 pc\.bios readonly$"
    assert re.search(bios, out, re.MULTILINE), out


def test_layout_mtree_flat_view_fixture() -> None:
    rows = layout_json("--mtree", MTREE_FLAT)
    assert_memslot_shape(rows)
    assert [(r["name"], r["gpa"], r["size"], r["readonly"]) for r in rows] == [
        ("pc.ram", 0x0, 0xA0000, False),
        ("pc.ram", 0xC0000, 0xA000, False),  # printed 'rom' (PAM): kvm_mem_flags() reads
        ("pc.ram", 0xCA000, 0x3000, False),  # pc.ram's own flags, so KVM's slot is
        ("pc.ram", 0xCD000, 0x33000, False),  # writable
        ("pc.ram", 0x100000, 0x3FF00000, False),
        ("vga.vram", 0xFD000000, 0x1000000, False),
        ("0000:00:05.0 BAR 0 mmaps[0]", 0xFE000000, 0x1000, False),  # ramd
        ("unaligned.ram", 0xFE003000, 0x1000, False),  # trimmed to whole pages
        ("system.flash0", 0xFFC00000, 0x400000, True),  # romd
        ("pc.ram", 0x100000000, 0x40000000, False),
    ]


def test_layout_mtree_flat_view_other_address_space() -> None:
    rows = layout_json("--mtree", MTREE_FLAT, "--address-space", "cpu-smm-0")
    assert_memslot_shape(rows)
    assert (rows[0]["gpa"], rows[0]["size"]) == (0, 0xC0000)  # SMRAM open: RAM up to 768K


def test_layout_mtree_tree_fixture() -> None:
    rows = layout_json("--mtree", MTREE_TREE)
    assert_memslot_shape(rows)
    assert [(r["name"], r["gpa"], r["size"], r["readonly"]) for r in rows] == [
        ("ram-below-4g", 0x0, 0xA0000, False),
        ("pc.rom", 0xC0000, 0x20000, True),
        ("isa-bios", 0xE0000, 0x20000, True),
        ("ram-below-4g", 0x100000, 0x7FF00000, False),
        ("vga.vram", 0xFD000000, 0x1000000, False),
        ("pc.bios", 0xFFFC0000, 0x40000, True),
        ("ram-above-4g", 0x100000000, 0x40000000, False),
    ]


REALDATA_LAYOUTS = {
    PC_6G: [("ram-below-4g", 0x100000, 0xBFF00000), ("ram-above-4g", 0x100000000, 3 * GiB)],
    Q35: [("ram-below-4g", 0x100000, 0x7FF00000), ("ram-above-4g", 0x100000000, 14 * GiB)],
    TCG_FLAT: [("pc.ram", 0x100000, 0xBFF00000), ("pc.ram", 0x100000000, 3 * GiB)],
}


@pytest.mark.parametrize("name", REALDATA_LAYOUTS)
def test_layout_mtree_realdata(name: str) -> None:
    rows = layout_json("--mtree", realdata(name))
    assert_memslot_shape(rows)
    for ram_name, gpa, size in REALDATA_LAYOUTS[name]:
        ram = entry(rows, gpa)
        assert (ram["name"], ram["size"], ram["readonly"]) == (ram_name, size, False)
    bios = entry(rows, 0xFFFC0000)
    assert (bios["name"], bios["size"], bios["readonly"]) == ("pc.bios", 0x40000, True)
    assert entry(rows, 0)["size"] == 0xA0000  # the VGA window is MMIO
    for row in rows:  # the local APIC is never RAM
        assert not row["gpa"] <= 0xFEE00000 < row["gpa"] + row["size"]
