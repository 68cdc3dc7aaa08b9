"""Guests pasted from the wild and both KVM address spaces from one dump: a flat view
without its FlatView/AS header lines, QEMU's trailing ` KVM` memslot markers, and
`--mtree` loading `memory` as as_id 0 and `KVM-SMRAM` as 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mmuscope.engine.layouts import build_vm
from mmuscope.engine.layouts.mtree_guest import mtree_guest
from mmuscope.engine.layouts.qemu_mtree import (
    RULE_FLAT,
    RULE_MARKED,
    RULE_TREE,
    RamRegion,
    list_address_spaces,
    parse_mtree,
    read_mtree,
)
from mmuscope.tui.cli import build_parser
from mmuscope.tui.explorer_cli import explorer_app

from tests.datafiles import FIXTURES, fixture_text, realdata_path

MMUSCOPE = Path(sys.executable).parent / "mmuscope"
R = RamRegion

# QEMU 8.x `info mtree -f`, FlatView of the system address space, as a user pastes it:
# from "Root memory region: system" on.  The BAR piece at 0xfe002800 holds whole pages
# but does not start on one, so kvm_lookup_matching_slot finds no slot there: no marker.
PASTED = """\
 Root memory region: system
  0000000000000000-000000000009ffff (prio 0, ram): pc.ram KVM
  00000000000a0000-00000000000bffff (prio 1, i/o): vga-lowmem
  00000000000c0000-00000000000fffff (prio 0, rom): pc.ram @00000000000c0000 KVM
  0000000000100000-000000007fffffff (prio 0, ram): pc.ram @0000000000100000 KVM
  00000000fe000000-00000000fe0027ff (prio 0, i/o): 0000:00:05.0 BAR 0
  00000000fe002800-00000000fe005fff (prio 0, ramd): 0000:00:05.0 BAR 0 mmaps[0]
  00000000fffc0000-00000000ffffffff (prio 0, rom): pc.bios KVM
"""
MARKED = [
    R("pc.ram", 0x0, 0xA0000, False),
    R("pc.ram", 0xC0000, 0x40000, False),  # 'rom' through PAM's alias: KVM sees pc.ram
    R("pc.ram", 0x100000, 0x7FF00000, False),
    R("pc.bios", 0xFFFC0000, 0x40000, True),
]


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MMUSCOPE), *map(str, args)], capture_output=True, text=True, timeout=60
    )


def unmarked(text: str) -> str:
    return text.replace(" KVM\n", "\n")


@pytest.mark.parametrize("indent", ["", " ", "\t"])
def test_a_flat_view_pasted_without_its_header_is_the_system_address_space(indent: str) -> None:
    text = indent + PASTED.lstrip()
    assert list_address_spaces(text) == ["memory"]
    slots = read_mtree(text, source="paste.txt")
    assert (slots.regions, slots.rule, slots.headerless) == (MARKED, RULE_MARKED, True)
    assert "pasted without its FlatView/AS header" in slots.describe()


def test_without_markers_the_ram_like_ranges_are_trimmed_to_pages() -> None:
    slots = read_mtree(unmarked(PASTED))
    assert slots.rule == RULE_FLAT
    bar = R("0000:00:05.0 BAR 0 mmaps[0]", 0xFE003000, 0x3000, False)  # kvm_align_section
    assert slots.regions == sorted([*MARKED, bar], key=lambda r: r.gpa)


def test_the_header_less_view_equals_the_same_view_with_its_headers() -> None:
    full = fixture_text("qemu-mtree-f-pc-kvm.txt")
    body = full[full.index("FlatView #1") :]
    body = body[body.index(" Root memory region: system") : body.index("FlatView #2")]
    assert read_mtree(body).regions == parse_mtree(full)
    assert read_mtree(full).headerless is False and read_mtree(body).headerless is True


def test_a_smram_root_pasted_alone_is_kvm_smram() -> None:
    text = PASTED.replace("Root memory region: system", "Root memory region: mem-container-smram")
    assert list_address_spaces(text) == ["KVM-SMRAM"]


def test_the_tree_rule_is_named() -> None:
    assert read_mtree(fixture_text("qemu-mtree-pc-tree.txt")).rule == RULE_TREE


def test_both_kvm_address_spaces_of_a_dump_get_their_as_id() -> None:
    text = fixture_text("qemu-mtree-pc-tree.txt")
    guest = mtree_guest(text, "pc", source="pc.txt")
    assert guest.missing == {}
    memory, smram = parse_mtree(text), parse_mtree(text, "KVM-SMRAM")
    vm = build_vm(guest.layout)
    for as_id, regions in ((0, memory), (1, smram)):
        slots = vm.memslots(as_id)
        assert [(s.id, s.base_gfn << 12, s.npages << 12) for s in slots] == [
            (i, r.gpa, r.size) for i, r in enumerate(regions)
        ]  # one KVM memory listener each: ids from 0 in gpa order
    assert "smram-low" in {guest.layout.name_of(1, s.id) for s in vm.memslots(1)}
    assert guest.notes()[1].startswith("as 1 KVM-SMRAM: ") and "slots" in guest.notes()[1]


def test_a_dump_without_smram_says_so_and_leaves_as_1_empty() -> None:
    guest = mtree_guest(PASTED, "paste", source="paste.txt")
    assert 1 in guest.missing and "not in paste.txt" in guest.missing[1]
    assert "no KVM-SMRAM" in guest.layout.title
    assert build_vm(guest.layout).memslots(1) == []
    assert guest.notes()[1] == f"as 1 KVM-SMRAM: {guest.missing[1]}"


def test_realdata_q35_loads_smram_as_address_space_1() -> None:
    text = realdata_path("qemu-info-mtree-x86-q35-kvm-intel-iommu-pt.txt").read_text()
    vm = build_vm(mtree_guest(text, "q35").layout)
    smram = parse_mtree(text, "KVM-SMRAM")
    assert [(s.base_gfn << 12, s.npages << 12) for s in vm.memslots(1)] == [
        (r.gpa, r.size) for r in smram
    ]
    assert len(vm.memslots(0)) == len(parse_mtree(text))


def test_the_explorer_on_a_q35_dump_opens_address_space_1_with_its_slots() -> None:
    tree = FIXTURES / "qemu-mtree-pc-tree.txt"
    args = build_parser().parse_args(["--mtree", str(tree), "--as", "1", "--paused"])
    app = explorer_app(args)
    assert app.config.as_id == 1
    assert "smram-low" in {r.name for r in app.config.layout.regions if r.as_id == 1}


def test_cli_as_1_of_a_dump_without_smram_is_one_line(tmp_path: Path) -> None:
    paste = tmp_path / "paste.txt"
    paste.write_text(PASTED)
    for command in (["lookup", "0xa0"], ["export", "-o", str(tmp_path / "x.dot")], []):
        done = run(*command, "--mtree", paste, "--as", "1")
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "--as 1: KVM-SMRAM is not in" in done.stderr and "SMM" in done.stderr


def test_cli_lookup_in_smram_and_layout_says_which_rule(tmp_path: Path) -> None:
    done = run("lookup", "0xa0", "--mtree", FIXTURES / "qemu-mtree-pc-tree.txt", "--as", "1")
    assert done.returncode == 0 and "hit slot" in done.stdout and "smram-low" in done.stdout
    paste = tmp_path / "paste.txt"
    paste.write_text(PASTED)
    done = run("layout", "--mtree", paste)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith(f"# memory: {RULE_MARKED} (pasted without")
    assert len(done.stdout.splitlines()) == 1 + len(MARKED)
    done = run(
        "layout", "--mtree", paste, "--json"
    )  # docs/architecture.md §6.3: the list of slots only
    rows = json.loads(done.stdout)
    assert [(r["name"], r["gpa"], r["size"], r["readonly"]) for r in rows] == [
        (r.name, r.gpa, r.size, r.readonly) for r in MARKED
    ]
