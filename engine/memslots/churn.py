"""Recorded memslot churn: QEMU's KVM_SET_USER_MEMORY_REGION calls replayed one at a time
on the explorer's guest: slots appearing and moving, the generation ticking, refusals
with their errno.

A recording (QEMU's ``kvm_set_user_memory`` trace event or ``strace -e ioctl``, see
`layouts.qemu_trace`) starts with the machine being built.  The guest the explorer opens
on is the state after the calls up to the first RAM slot of address space 0 — before it
there is nothing to look up — and every later call is replayed live by
`MemslotExplorer.replay_call`, with our `Vm`'s answer compared to the recorded one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..layouts.layout import Layout, RegionSpec
from ..layouts.qemu_trace import (
    MemoryRegionCall,
    ReplayResult,
    parse_memory_region_calls,
    replay_one,
)
from .constants import PAGE_SHIFT
from .vm import Vm


@dataclass
class RecordedChurn:
    name: str
    calls: tuple[MemoryRegionCall, ...]
    boot: Layout  # the guest after calls[:next_index]
    next_index: int
    results: list[ReplayResult] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.next_index >= len(self.calls)

    def next_call(self) -> MemoryRegionCall | None:
        """The next call to replay (the caller replays it and calls `record`)."""
        return None if self.done else self.calls[self.next_index]

    def record(self, result: ReplayResult) -> None:
        self.results.append(result)
        self.next_index += 1

    @property
    def position(self) -> str:
        return f"ioctl {self.next_index}/{len(self.calls)}"


def recorded_churn(text: str, name: str = "recorded") -> RecordedChurn:
    """Parse a recording; raises `TraceFormatError` (one line) when nothing is in it."""
    calls = tuple(parse_memory_region_calls(text))
    vm = Vm()
    boot_end = len(calls)
    for index, call in enumerate(calls):
        replay_one(vm, call)
        if any(not s.readonly for s in vm.memslots(0)):
            boot_end = index + 1
            break
    return RecordedChurn(name, calls, _layout_of(vm, name), boot_end)


def _layout_of(vm: Vm, name: str) -> Layout:
    regions = tuple(
        RegionSpec(
            f"slot{slot.id}",
            as_id << 16 | slot.id,
            slot.base_gfn << PAGE_SHIFT,
            slot.npages << PAGE_SHIFT,
            slot.flags,
            slot.userspace_addr,
        )
        for as_id in range(vm.address_spaces)
        for slot in sorted(vm.memslots(as_id), key=lambda s: s.id)
    )
    return Layout(name, f"{name}: as QEMU built it, before the recorded churn", regions)


def describe_call(call: MemoryRegionCall) -> str:
    """The call as QEMU's trace event prints it."""
    slot = f"Slot#{call.slot & 0xFFFF}"
    if call.as_id:
        slot = f"AddrSpace#{call.as_id} {slot}"
    return (
        f"{slot} flags={call.flags:#x} gpa={call.guest_phys_addr:#x} "
        f"size={call.memory_size:#x} ua={call.userspace_addr:#x}"
    )
