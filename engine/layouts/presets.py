"""Preset guest layouts: the RFC's 2/4/8 GB pc guests, a q35 guest, device assignment, max.

`pc-2g`, `pc-4g`, `pc-8g` follow the slot configuration Alex Williamson gives in the
memslot-search thread (kvm, 2011) ("0: <1M, 1: 1M - 3.5G, 2: 4G+") for qemu-kvm of early
2011, whose pc machine put the PCI hole at 3.5 GiB, plus the ROM, BIOS and VGA slots QEMU
registers (read-only as today's QEMU registers them; 2011 had no KVM_MEM_READONLY yet).
`q35-16g` is today's q35 with SMM (address space 1), shaped like a real q35
`info mtree -f` dump. `assigned-devices` adds 505 small BAR slots of 64 assigned devices
to pc-4g, filling the 512 slots of the RFC's KVM_MAX_MEM_SLOTS ("supporting 64 assigned
devices with plenty of slots left over"): the case Avi said arrays handle worst.  `max`
is the selftest `test_add_max_memory_regions`: KVM_USER_MEM_SLOTS slots of 2 MiB each.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ..memslots.constants import KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY, KVM_USER_MEM_SLOTS
from .layout import Layout, assign_host_addresses

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
RO, DIRTY = KVM_MEM_READONLY, KVM_MEM_LOG_DIRTY_PAGES
PCI_HOLE_2011 = 0xE000_0000  # qemu-kvm 0.14 pc: RAM below 4G ends at 3.5 GiB

Region = tuple[str, int, int, int, int]  # name, uapi slot, gpa, size, flags


def _pc_2011_regions(ram: int) -> list[Region]:
    """Slots of a 2011 qemu-kvm pc guest with `ram` bytes of memory."""
    below_4g = min(ram, PCI_HOLE_2011)
    regions: list[Region] = [
        ("ram-below-1m", 0, 0, 640 * KiB, 0),
        ("ram-1m-to-hole", 1, 1 * MiB, below_4g - 1 * MiB, 0),
    ]
    if ram > below_4g:
        regions.append(("ram-above-4g", 2, 4 * GiB, ram - below_4g, 0))
    regions += [
        ("pc.rom", 3, 0xC0000, 128 * KiB, RO),
        ("isa-bios", 4, 0xE0000, 128 * KiB, RO),
        ("vga.vram", 5, 0xF000_0000, 16 * MiB, DIRTY),
        ("pc.bios", 6, 0xFFFC_0000, 256 * KiB, RO),
    ]
    return regions


def _pc(ram_gib: int) -> Callable[[], Layout]:
    def build() -> Layout:
        return Layout(
            f"pc-{ram_gib}g",
            f"{ram_gib} GiB pc guest, qemu-kvm 2011 (wbtree RFC's {ram_gib}G.pdf)",
            assign_host_addresses(_pc_2011_regions(ram_gib * GiB)),
        )

    return build


def q35_16g() -> Layout:
    """q35 with 16 GiB (2 GiB below 4G, 14 above) and SMM: SMRAM in address space 1.

    Address space 1 is QEMU's KVM-SMRAM: SMRAM (0xa0000-0xbffff, RAM where normal mode
    sees the VGA window) over the system memory.  QEMU registers the RAM below 640K and
    SMRAM as one slot, 0-0xbffff (one flat range: both are pc.ram at consecutive
    offsets), as a recorded SMM-on run shows (`Slot#65536 gpa=0x0 size=0xc0000`): it is
    named for both, smm-ram-below-768k."""
    normal: list[Region] = [
        ("ram-below-640k", 0, 0, 640 * KiB, 0),
        ("pc.rom", 1, 0xC0000, 128 * KiB, RO),
        ("isa-bios", 2, 0xE0000, 128 * KiB, RO),
        ("ram-below-4g", 3, 1 * MiB, 2 * GiB - 1 * MiB, 0),
        ("vga.vram", 4, 0xFD00_0000, 16 * MiB, DIRTY),
        ("pc.bios", 5, 0xFFFC_0000, 256 * KiB, RO),
        ("ram-above-4g", 6, 4 * GiB, 14 * GiB, 0),
    ]
    smm: list[Region] = [
        ("smm-ram-below-768k", 1 << 16 | 0, 0, 768 * KiB, 0),  # with SMRAM at 0xa0000
        ("smm-pc.rom", 1 << 16 | 1, 0xC0000, 128 * KiB, RO),
        ("smm-isa-bios", 1 << 16 | 2, 0xE0000, 128 * KiB, RO),
        ("smm-ram-below-4g", 1 << 16 | 3, 1 * MiB, 2 * GiB - 1 * MiB, 0),
        ("smm-pc.bios", 1 << 16 | 5, 0xFFFC_0000, 256 * KiB, RO),
        ("smm-ram-above-4g", 1 << 16 | 6, 4 * GiB, 14 * GiB, 0),
    ]
    return Layout(
        "q35-16g",
        "16 GiB q35 guest with SMM (address space 1)",
        assign_host_addresses(normal + smm),
    )


BAR_SIZES = (4 * KiB, 16 * KiB, 64 * KiB, 128 * KiB, 1 * MiB, 4 * MiB, 16 * MiB)


def _bar_regions(first_id: int, count: int, seed: int = 2011) -> list[Region]:
    """`count` BAR slots of 64 devices, packed into the PCI hole and then above RAM.

    Each device's BARs are registered together, largest first (as firmware assigns
    them), naturally aligned; sizes come from a fixed-seed generator.
    """
    rng = random.Random(seed)
    per_device = [count // 64 + (1 if d < count % 64 else 0) for d in range(64)]
    regions: list[Region] = []
    cursor, limit = PCI_HOLE_2011, 0xF000_0000  # below the VGA and BIOS slots
    slot_id = first_id
    for device, bars in enumerate(per_device):
        for bar, size in enumerate(
            sorted((rng.choice(BAR_SIZES) for _ in range(bars)), reverse=True)
        ):
            gpa = (cursor + size - 1) // size * size
            if gpa + size > limit:
                cursor, limit = 0x80_0000_0000, 1 << 46  # the 64-bit window (512 GiB up)
                gpa = cursor
            regions.append((f"dev{device:02d}.bar{bar}", slot_id, gpa, size, 0))
            cursor = gpa + size
            slot_id += 1
    return regions


def assigned_devices() -> Layout:
    base = _pc_2011_regions(4 * GiB)
    return Layout(
        "assigned-devices",
        "pc-4g plus 64 assigned devices: 512 slots, most of them small BARs",
        assign_host_addresses(base + _bar_regions(len(base), 512 - len(base))),
    )


def max_slots() -> Layout:
    regions = [(f"region{i}", i, i * 2 * MiB, 2 * MiB, 0) for i in range(KVM_USER_MEM_SLOTS)]
    return Layout(
        "max",
        f"{KVM_USER_MEM_SLOTS} slots of 2 MiB (selftest test_add_max_memory_regions)",
        assign_host_addresses(regions),
    )


PRESETS: dict[str, Callable[[], Layout]] = {
    "pc-2g": _pc(2),
    "pc-4g": _pc(4),
    "pc-8g": _pc(8),
    "q35-16g": q35_16g,
    "assigned-devices": assigned_devices,
    "max": max_slots,
}
DEFAULT_LAYOUT = "pc-4g"


def preset(name: str) -> Layout:
    """The named preset; unknown names raise ValueError listing the choices."""
    try:
        return PRESETS[name]()
    except KeyError:
        raise ValueError(f"unknown layout {name!r}: choose one of {', '.join(PRESETS)}") from None
