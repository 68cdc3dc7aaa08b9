"""`Layout`: a guest's memory map as the list of memslots userspace registers.

A layout is what QEMU's `kvm_set_phys_mem()` would hand to KVM_SET_USER_MEMORY_REGION,
in registration order, with a name per slot so views can say "pc.bios" rather than
"slot 5".  `build_vm()` replays it into a `Vm`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..memslots.constants import KVM_MEM_READONLY, PAGE_SIZE
from ..memslots.vm import Vm

HOST_BASE = 0x7F00_0000_0000  # where the model's "QEMU" mmaps guest RAM
HUGE_2M = 1 << 21


@dataclass(frozen=True, slots=True)
class RegionSpec:
    """One KVM_SET_USER_MEMORY_REGION call that creates a slot (`slot`: uapi, as_id << 16 | id)."""

    name: str
    slot: int
    gpa: int
    size: int
    flags: int = 0
    userspace_addr: int = 0

    @property
    def as_id(self) -> int:
        return self.slot >> 16

    @property
    def id(self) -> int:
        return self.slot & 0xFFFF

    @property
    def readonly(self) -> bool:
        return bool(self.flags & KVM_MEM_READONLY)


@dataclass(frozen=True, slots=True)
class Layout:
    """A guest's memory layout: the regions QEMU registers as memslots, by name."""

    name: str
    title: str
    regions: tuple[RegionSpec, ...]

    def name_of(self, as_id: int, slot_id: int) -> str:
        """The region name of a slot, or '' when the layout does not know it."""
        for region in self.regions:
            if region.as_id == as_id and region.id == slot_id:
                return region.name
        return ""

    def names(self) -> dict[tuple[int, int], str]:
        return {(r.as_id, r.id): r.name for r in self.regions}


def _align_up(value: int, align: int = PAGE_SIZE) -> int:
    return (value + align - 1) // align * align


def assign_host_addresses(
    regions: Iterable[tuple[str, int, int, int, int]], host_base: int = HOST_BASE
) -> tuple[RegionSpec, ...]:
    """Give (name, slot, gpa, size, flags) regions consecutive host mappings.

    Address-space-1 (SMM) regions that repeat an address-space-0 range reuse its host
    memory, as QEMU's SMRAM address space aliases the same RAM blocks.
    """
    out: list[RegionSpec] = []
    by_range: dict[tuple[int, int], int] = {}
    cursor = host_base
    for name, slot, gpa, size, flags in regions:
        ua = by_range.get((gpa, size))
        if ua is None:
            # Congruent to the gpa modulo 2 MiB, as a slot carved out of a QEMU RAM block
            # is (hva - gpa is the block's offset): KVM maps 2M pages only then.
            ua = cursor + gpa % HUGE_2M
            cursor = _align_up(ua + size, HUGE_2M)
            by_range[(gpa, size)] = ua
        out.append(RegionSpec(name, slot, gpa, size, flags, ua))
    return tuple(out)


def build_vm(
    layout: Layout,
    lookup: str = "rbtree",
    *,
    last_used_slot: bool = True,
    vcpu_cache: bool = True,
    track_all: bool = True,
) -> Vm:
    """A new `Vm` with every region of `layout` registered in order (`track_all`: as
    `Vm`'s, every strategy's structure kept, or only the rbtree and `lookup`'s)."""
    vm = Vm(lookup, last_used_slot=last_used_slot, vcpu_cache=vcpu_cache, track_all=track_all)
    for r in layout.regions:
        vm.set_user_memory_region(r.slot, r.flags, r.gpa, r.size, r.userspace_addr)
    return vm


def layout_from_ram_regions(
    name: str, regions: Iterable[tuple[str, int, int, bool]], as_id: int = 0
) -> Layout:
    """A layout from (name, gpa, size, readonly) ranges, e.g. parsed from `info mtree`.

    QEMU's KVM memory listener adds sections in address order and takes the first free
    slot id for each (`kvm_get_free_slot()`), so ids follow gpa order.  Read-only ranges
    (rom, romd) get KVM_MEM_READONLY.
    """
    specs = [
        (region_name, as_id << 16 | index, gpa, size, KVM_MEM_READONLY if readonly else 0)
        for index, (region_name, gpa, size, readonly) in enumerate(sorted(regions, key=_gpa))
    ]
    return Layout(name, f"{name} ({len(specs)} slots from QEMU)", assign_host_addresses(specs))


def layout_from_address_spaces(
    name: str, spaces: dict[int, list[tuple[str, int, int, bool]]], title: str
) -> Layout:
    """A layout with the (name, gpa, size, readonly) ranges of several address spaces,
    as_id 0 first; ids follow gpa order within each (one KVM memory listener each)."""
    specs = [
        (region_name, as_id << 16 | index, gpa, size, KVM_MEM_READONLY if readonly else 0)
        for as_id in sorted(spaces)
        for index, (region_name, gpa, size, readonly) in enumerate(sorted(spaces[as_id], key=_gpa))
    ]
    return Layout(name, title, assign_host_addresses(specs))


def _gpa(region: tuple[str, int, int, bool]) -> int:
    return region[1]
