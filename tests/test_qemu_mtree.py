"""QEMU `info mtree` import: our fixtures, inline cases, the real dumps, and fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mmuscope.engine.layouts.qemu_mtree import (
    MtreeError,
    RamRegion,
    list_address_spaces,
    parse_mtree,
)

from tests.datafiles import fixture_text, realdata_path

R = RamRegion


def fixture(name: str) -> str:
    return fixture_text(name)


def realdata(name: str) -> str:
    return realdata_path(name).read_text()


def tree(*lines: str, name: str = "memory") -> str:
    return "\n".join([f"address-space: {name}", *lines]) + "\n"


# --- our fixtures ---------------------------------------------------------------------

# The low megabyte of a pc guest as QEMU's FlatView has it: PAM aliases of pc.ram at prio 1
# beat the prio -1 pci container's pc.rom/isa-bios; kvmvapic-rom (prio 1000) splits them.
PC_TREE_MEMORY = [
    R("ram-below-4g", 0x0, 0xA0000, False),
    R("pam-rom", 0xC0000, 0xB000, False),
    R("kvmvapic-rom", 0xCB000, 0x3000, False),
    R("pam-rom", 0xCE000, 0x2000, False),
    R("pam-ram", 0xD0000, 0x10000, False),
    R("pam-rom", 0xE0000, 0x20000, False),
    R("ram-below-4g", 0x100000, 0x9FF00000, False),
    R("vga.vram", 0xFD000000, 0x1000000, False),
    R("0000:00:05.0 BAR 0 mmaps[0]", 0xFE100000, 0x100000, False),  # ramd
    R("system.flash0", 0xFF800000, 0x40000, True),  # romd
    R("pc.bios", 0xFFFC0000, 0x40000, True),
    R("ram-above-4g", 0x100000000, 0x60000000, False),
    R("nvdimm-mem", 0x180000000, 0x20000000, False),  # nv-ram, alias target not printed
    R("tiny-ram", 0x1C0000000, 0x1000, False),  # ...-0x1c00017ff: end rounded down
    R("odd-ram", 0x1C0003000, 0x1000, False),  # 0x1c0002800-...: start rounded up
]


def test_tree_fixture_memory() -> None:
    assert parse_mtree(fixture("qemu-mtree-pc-tree.txt")) == PC_TREE_MEMORY


def test_tree_fixture_shared_headers_share_the_body() -> None:
    text = fixture("qemu-mtree-pc-tree.txt")
    assert parse_mtree(text, "cpu-memory-0") == PC_TREE_MEMORY
    assert parse_mtree(text, "cpu-memory-1") == PC_TREE_MEMORY


def test_tree_fixture_smram_renders_through_the_system_alias() -> None:
    """mem-smram aliases 'system' (printed in a memory-region block): SMRAM sees all RAM
    plus smram-low where normal mode sees the VGA window."""
    got = parse_mtree(fixture("qemu-mtree-pc-tree.txt"), "KVM-SMRAM")
    assert got == sorted([*PC_TREE_MEMORY, R("smram-low", 0xA0000, 0x20000, False)], key=_gpa)


def _gpa(r: RamRegion) -> int:
    return r.gpa


def test_tree_fixture_io_space_has_no_ram() -> None:
    assert parse_mtree(fixture("qemu-mtree-pc-tree.txt"), "I/O") == []


def test_list_address_spaces_fixtures() -> None:
    assert list_address_spaces(fixture("qemu-mtree-pc-tree.txt")) == [
        "I/O",
        "cpu-memory-0",
        "cpu-memory-1",
        "memory",
        "KVM-SMRAM",
    ]
    assert list_address_spaces(fixture("qemu-mtree-f-pc-kvm.txt")) == [
        "i440FX",
        "PIIX3",
        "memory",
        "cpu-memory-0",
        "e1000",
        "cpu-smm-0",
        "I/O",
    ]


def test_flat_fixture_memory() -> None:
    assert parse_mtree(fixture("qemu-mtree-f-pc-kvm.txt")) == [
        R("pc.ram", 0x0, 0xA0000, False),
        # 'rom' for pc.ram through PAM's read-only alias: a writable memslot, as
        # kvm_mem_flags() reads pc.ram's own flags (the ranges stay apart, as QEMU's do)
        R("pc.ram", 0xC0000, 0xB000, False),
        R("pc.ram", 0xCB000, 0x3000, False),
        R("pc.ram", 0xCE000, 0x32000, False),
        R("pc.ram", 0x100000, 0x7FF00000, False),
        R("vga.vram", 0xFD000000, 0x1000000, False),
        R("0000:00:05.0 BAR 0 mmaps[0]", 0xFE100000, 0x100000, False),
        R("system.flash0", 0xFF800000, 0x40000, True),
        R("pc.bios", 0xFFFC0000, 0x40000, True),
        R("nvdimm-mem", 0x100000000, 0x20000000, False),
    ]  # tiny-ram (0xfe200000-0xfe2007ff) is less than a page: dropped


def test_flat_fixture_smm_and_errors() -> None:
    text = fixture("qemu-mtree-f-pc-kvm.txt")
    assert parse_mtree(text, "cpu-smm-0") == [
        R("pc.ram", 0x0, 0xC0000, False),
        R("pc.ram", 0xC0000, 0x40000, False),
        R("pc.ram", 0x100000, 0x7FF00000, False),
    ]
    assert parse_mtree(text, "I/O") == []
    with pytest.raises(MtreeError, match="'PIIX3' in the input has no rendered ranges"):
        parse_mtree(text, "PIIX3")


def test_old_bare_header_fixture() -> None:
    """QEMU 1.x/2.0 headers; a RAM container (cirrus-pci-bar0) fills around its child;
    both pam-rom aliases continue pc.ram and merge, as flatview_simplify does."""
    text = fixture("qemu-mtree-old-bare-header.txt")
    assert list_address_spaces(text) == ["memory", "I/O"]
    assert parse_mtree(text) == [
        R("ram-below-4g", 0x0, 0xA0000, False),
        R("pam-rom", 0xC0000, 0x40000, False),
        R("ram-below-4g", 0x100000, 0x3FF00000, False),
        R("vga.vram", 0xFC000000, 0x800000, False),
        R("cirrus-pci-bar0", 0xFC800000, 0x1800000, False),
        R("pc.bios", 0xFFFE0000, 0x20000, True),
    ]


# --- rendering rules on small trees ---------------------------------------------------

SYSTEM = "  0000000000000000-ffffffffffffffff (prio 0, i/o): system"


def test_equal_priority_first_printed_wins() -> None:
    text = tree(
        SYSTEM,
        "    0000000000000000-0000000000003fff (prio 0, ram): a",
        "    0000000000002000-0000000000005fff (prio 0, rom): b",
    )
    assert parse_mtree(text) == [R("a", 0, 0x4000, False), R("b", 0x4000, 0x2000, True)]


def test_priority_only_counts_among_siblings() -> None:
    """A prio 100 child of a prio -1 container still loses to the container's prio 0
    sibling; an i/o leaf hides RAM below it; a pure i/o container claims nothing."""
    text = tree(
        SYSTEM,
        "    0000000000000000-0000000000007fff (prio 0, ram): alias low @ram 0-7fff",
        "    0000000000000000-ffffffffffffffff (prio -1, i/o): pci",
        "      0000000000004000-000000000000bfff (prio 100, ram): bar",
        "      0000000000020000-000000000002ffff (prio 1, i/o): mmio-container",
        "        0000000000020000-0000000000020fff (prio 0, i/o): mmio",
        "    0000000000002000-0000000000002fff (prio 1, i/o): hole",
        "    0000000000020000-0000000000023fff (prio -2, nv-ram): under",
    )
    assert parse_mtree(text) == [
        R("low", 0x0, 0x2000, False),
        R("low", 0x3000, 0x5000, False),
        R("bar", 0x8000, 0x4000, False),
        R("under", 0x21000, 0x3000, False),
    ]


def test_disabled_subtree_and_alias_to_container() -> None:
    text = tree(
        SYSTEM,
        "    0000000000000000-000000000000ffff (prio 1, i/o): off [disabled]",
        "      0000000000000000-000000000000ffff (prio 0, i/o): mmio",
        "    0000000000000000-000000000000ffff (prio 0, ram): ram",
        "    0000000000100000-000000000010ffff (prio 0, i/o): alias win @bar 0-ffff",
        "    0000000000200000-000000000020ffff (prio 0, i/o): alias gone @nowhere 0-ffff",
        "    0000000000200000-000000000020ffff (prio -1, ram): shadowed",
        "memory-region: bar",
        "  0000000000c00000-0000000000c1ffff (prio 0, i/o): bar",
        "    0000000000c04000-0000000000c04fff (prio 0, romd): flash",
    )
    assert parse_mtree(text) == [
        R("ram", 0x0, 0x10000, False),
        R("flash", 0x104000, 0x1000, True),  # bar's child, moved by the alias
    ]  # 'gone' has no printed target: it claims its range as printed (i/o)


def test_noise_lines_are_ignored() -> None:
    text = (
        "QEMU 8.2.0 monitor - type 'help' for more information\n"
        "(qemu) info mtree\n"
        "Memory:\n"
        "  0000000000000000-0000000000000fff (prio 0, ram): not-an-address-space\n"
        "# a comment\n"
        + tree(SYSTEM, "\t0000000000000000-0000000000000fff (prio 0, ram): r\r")
        + "(qemu)\n"
    )
    assert parse_mtree(text) == [R("r", 0, 0x1000, False)]
    assert list_address_spaces(text) == ["memory"]


# --- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not QEMU 'info mtree' output"),
        ("hello\nworld\n", "not QEMU 'info mtree' output"),
        (tree(SYSTEM, name="I/O"), r"no address space 'memory' in the input \(found 'I/O'\)"),
        ("address-space: memory\n\n", "no address spaces found"),
        (tree("  0000000000000000-000000000000ffff (prio 0, RW): system"), "access flags"),
    ],
)
def test_errors(text: str, message: str) -> None:
    with pytest.raises(MtreeError, match=message) as info:
        parse_mtree(text)
    assert "\n" not in str(info.value)


def test_error_names_the_source_and_deep_nesting_is_refused() -> None:
    with pytest.raises(MtreeError, match=r"no address space 'smm' in vm\.txt"):
        parse_mtree(tree(SYSTEM), "smm", source="vm.txt")
    deep = [f"{' ' * (2 * i)}0000000000000000-0000000000000fff (prio 0, i/o): r" for i in range(99)]
    with pytest.raises(MtreeError, match="nested deeper"):
        parse_mtree(tree(*deep))
    with pytest.raises(MtreeError):
        list_address_spaces("garbage")


# --- fuzzing: only MtreeError or a valid result ---------------------------------------

FIXTURE_TEXTS = [
    fixture(n)
    for n in ("qemu-mtree-pc-tree.txt", "qemu-mtree-f-pc-kvm.txt", "qemu-mtree-old-bare-header.txt")
]


def _check_valid(text: str, address_space: str = "memory") -> None:
    try:
        regions = parse_mtree(text, address_space)
    except MtreeError as err:
        assert "\n" not in str(err)
        return
    assert regions == sorted(regions, key=_gpa)
    for r in regions:
        assert r.gpa % 0x1000 == 0 and r.size % 0x1000 == 0 and r.size > 0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    _check_valid(text)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(FIXTURE_TEXTS), st.integers(0, 40_000), st.integers(0, 40_000))
def test_fuzz_truncated_fixtures(text: str, cut: int, start: int) -> None:
    _check_valid(text[:cut])
    _check_valid(text[start : start + cut], "KVM-SMRAM")


LINE_PIECES = st.sampled_from(
    [
        "address-space: memory",
        "memory-region: system",
        "FlatView #0",
        ' AS "memory", root: system',
        "aliases",
        "memory",
        "  0000000000000000-ffffffffffffffff (prio 0, i/o): system",
        "    0000000000000000-0000000000ffffff (prio 0, ram): alias a @system 0-fff",
        "    0000000000001000-0000000000001fff (prio 9, rom): r [disabled]",
        "      00000000000000ff-0000000000000000 (prio -3, nv-romd): empty",
        "0000000000000800-00000000000027ff (prio 1, ramd): top",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(LINE_PIECES, max_size=30))
def test_fuzz_shuffled_lines(lines: list[str]) -> None:
    _check_valid("\n".join(lines))


# --- the real dumps in shared/realdata ---------------------------------------------------

# pc, 6 GiB, KVM.  smram-region (prio 1, i/o alias of pci) renders pci's vga-lowmem over
# 0xa0000-0xbffff; the prio 1 pam aliases beat pci's pc.rom and isa-bios (pci is prio -1);
# kvmvapic-rom (prio 1000) cuts 0xcb000-0xcdfff out of them; neighbouring aliases of the
# same name continue pc.ram and merge (flatview_simplify).
PC_6G = [
    R("ram-below-4g", 0x0, 0xA0000, False),
    R("pam-rom", 0xC0000, 0xB000, False),
    R("kvmvapic-rom", 0xCB000, 0x3000, False),
    R("pam-rom", 0xCE000, 0x16000, False),
    R("pam-ram", 0xE4000, 0xC000, False),
    R("pam-rom", 0xF0000, 0x10000, False),
    R("ram-below-4g", 0x100000, 0xBFF00000, False),
    R("vga.vram", 0xFE000000, 0x800000, False),
    R("pc.bios", 0xFFFC0000, 0x40000, True),
    R("ram-above-4g", 0x100000000, 0xC0000000, False),
]
Q35_16G = [
    R("ram-below-4g", 0x0, 0xA0000, False),
    R("pam-rom", 0xC0000, 0xB000, False),
    R("kvmvapic-rom", 0xCB000, 0x3000, False),
    R("pam-rom", 0xCE000, 0x16000, False),
    R("pam-ram", 0xE4000, 0xC000, False),
    R("pam-rom", 0xF0000, 0x10000, False),
    R("ram-below-4g", 0x100000, 0x7FF00000, False),
    R("vga.vram", 0xFD000000, 0x1000000, False),
    R("pc.bios", 0xFFFC0000, 0x40000, True),
    R("ram-above-4g", 0x100000000, 0x380000000, False),
]
SMRAM_LOW = R("smram-low", 0xA0000, 0x20000, False)


def test_realdata_pc_kvm_6g() -> None:
    text = realdata("qemu-info-mtree-x86-pc-kvm-6g.txt")
    assert parse_mtree(text) == PC_6G
    assert parse_mtree(text, "cpu-memory-1") == PC_6G
    assert parse_mtree(text, "KVM-SMRAM") == sorted([*PC_6G, SMRAM_LOW], key=_gpa)
    assert parse_mtree(text, "I/O") == []
    assert list_address_spaces(text)[:4] == ["memory", "I/O", "cpu-memory-0", "cpu-memory-1"]
    assert "pc.ram" not in list_address_spaces(text)  # memory-region blocks are not spaces


def test_realdata_q35_16g() -> None:
    text = realdata("qemu-info-mtree-x86-q35-kvm-intel-iommu-pt.txt")
    assert parse_mtree(text) == Q35_16G
    names = list_address_spaces(text)
    assert [f"cpu-memory-{i}" in names for i in range(12)] == [True] * 12
    for i in (0, 7, 11):  # the twelve body-less headers share memory's body
        assert parse_mtree(text, f"cpu-memory-{i}") == Q35_16G
    assert parse_mtree(text, "KVM-SMRAM") == sorted([*Q35_16G, SMRAM_LOW], key=_gpa)


def test_pam_rom_is_writable_in_both_forms_as_kvm_registers_it() -> None:
    """`info mtree` prints pam-rom with pc.ram's type (ram), `info mtree -f` prints the
    flat range `rom` (its alias is read-only); KVM gets the same writable slot from
    both, since kvm_mem_flags() reads only the MemoryRegion's (pc.ram's) own flags."""
    tree = [
        r for r in parse_mtree(realdata("qemu-info-mtree-x86-pc-kvm-6g.txt")) if r.gpa == 0xC0000
    ]
    flat = [r for r in parse_mtree(fixture("qemu-mtree-f-pc-kvm.txt")) if r.gpa == 0xC0000]
    assert tree == [R("pam-rom", 0xC0000, 0xB000, False)]
    assert flat == [R("pc.ram", 0xC0000, 0xB000, False)]
    bios = [r for r in parse_mtree(fixture("qemu-mtree-f-pc-kvm.txt")) if r.name == "pc.bios"]
    assert [r.readonly for r in bios] == [True]  # a ROM region stays read-only


def test_realdata_pc_tcg_flatview() -> None:
    text = realdata("qemu-info-mtree-f-x86-pc-tcg-flatview.txt")
    tail = [
        R("pc.ram", 0xC0000, 0xB000, False),
        R("pc.ram", 0xCB000, 0x3000, False),
        R("pc.ram", 0xCE000, 0x16000, False),
        R("pc.ram", 0xE4000, 0xC000, False),
        R("pc.ram", 0xF0000, 0x10000, False),
        R("pc.ram", 0x100000, 0xBFF00000, False),
        R("vga.vram", 0xFD000000, 0x1000000, False),
        R("pc.bios", 0xFFFC0000, 0x40000, True),
        R("pc.ram", 0x100000000, 0xC0000000, False),
    ]
    assert parse_mtree(text) == [R("pc.ram", 0x0, 0xA0000, False), *tail]
    assert parse_mtree(text, "cpu-smm-0") == [R("pc.ram", 0x0, 0xC0000, False), *tail]
    with pytest.raises(MtreeError, match="'VGA' in the input has no rendered ranges"):
        parse_mtree(text, "VGA")
