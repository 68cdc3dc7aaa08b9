"""Running a `GuestProgram` on the host's KVM: memslots, guest memory, one vCPU in long
mode at CPL 3 (docs/kvm.md §11.3), slice after slice, each ending at the doorbell.

Per slice: the VMM applies the slice's memslot or dirty-log operations, loads CR3 with
`KVM_SET_SREGS` when the process changes (KVM sees a CR3 load and resets the MMU
context) or the slice's CPL does (CPL 0: code that loads CR3 itself; the same CR3 keeps
the MMU context), sets rip with `KVM_SET_REGS`, and runs until the doorbell store exits with
`KVM_EXIT_MMIO`; other MMIO exits (the `mmio` program's loads and stores, accesses to a
deleted slot) are completed with zeros and the guest goes on.  Each `KVM_RUN` is bounded
in time.  The VM's and vCPU's `KVM_GET_STATS_FD` counters are read before and after each
slice, and `on_slice` is called with the slice's `SliceResult` (the recorder drains its
tracefs instance there).  Everything is closed on success, error and Ctrl+C.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import KvmError
from .program import DOORBELL_GPA, PAGE, DirtyLogOp, GuestProgram, MemslotOp, Op, Slice
from .uapi import EXIT_REASONS, KVM_EXIT_MMIO, long_mode_user_sregs, user_regs
from .vmm import HUGE_SIZE, GuestMemory, Kvm, KvmVcpu, KvmVm

THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
RUN_TIMEOUT = 10.0  # seconds one KVM_RUN may take
MAX_EXITS_PER_SLICE = 1 << 20


class GuestError(Exception):
    """The guest stopped anywhere but at its doorbell (a shutdown, a kernel refusal)."""


@dataclass
class SliceResult:
    index: int
    slice: Slice
    mmio_exits: int  # KVM_EXIT_MMIO exits, the doorbell included
    seconds: float
    vm_stats: dict[str, int]  # after the slice
    vcpu_stats: dict[str, int]
    dirty: list[int] = field(default_factory=list)  # pages KVM_GET_DIRTY_LOG returned


@dataclass
class KernelRun:
    program: GuestProgram
    slices: list[SliceResult] = field(default_factory=list)
    vm_before: dict[str, int] = field(default_factory=dict)
    vcpu_before: dict[str, int] = field(default_factory=dict)
    peaks: frozenset[str] = frozenset()
    capabilities: dict[str, int] = field(default_factory=dict)  # KVM_CHECK_EXTENSION

    @property
    def address_spaces(self) -> int:
        """KVM_CAP_MULTI_ADDRESS_SPACE (0 on a kernel without: one address space)."""
        return max(1, self.capabilities.get("KVM_CAP_MULTI_ADDRESS_SPACE", 1))

    @property
    def mmio_exits(self) -> int:
        return sum(s.mmio_exits for s in self.slices)

    @property
    def vm_after(self) -> dict[str, int]:
        return self.slices[-1].vm_stats if self.slices else self.vm_before

    @property
    def vcpu_after(self) -> dict[str, int]:
        return self.slices[-1].vcpu_stats if self.slices else self.vcpu_before


SliceHook = Callable[[SliceResult], None]


class _Machine:
    """The VM of one run: memory, slots, the vCPU, stats fds."""

    def __init__(self, kvm: Kvm, vm: KvmVm, program: GuestProgram) -> None:
        self.vm = vm
        self.program = program
        self.backing: list[GuestMemory] = [vm.alloc_memory(program.ram_pages * PAGE)]
        if program.data_pages:
            data = vm.alloc_memory(program.data_pages * PAGE, program.data_huge)
            self.backing.append(data)
            wanted = program.data_pages * PAGE // HUGE_SIZE
            if program.data_huge and data.huge_pages() < wanted:
                raise GuestError(
                    f"the host gave {data.huge_pages()} of {wanted} transparent huge pages "
                    f"for memslot 1 (is {THP_ENABLED} 'never', or memory fragmented?)"
                )
        ram = self.backing[0]
        for gfn, ptes in program.tables.tables.items():
            ram.write_u64s(gfn * PAGE, ptes)
        for gfn, code in program.code.items():
            ram.write(gfn * PAGE, code)
        for op in program.setup:
            self.apply(op)
        self.vcpu: KvmVcpu = vm.create_vcpu(0)
        self.stats = vm.stats()
        self.vcpu_stats = vm.vcpu_stats(self.vcpu)
        self.sregs = self.vcpu.get_sregs()
        self.cr3: int | None = None
        self.cpl = 3

    def apply(self, op: Op) -> list[int]:
        if isinstance(op, MemslotOp):
            address = self.backing[op.backing].address + op.offset
            try:
                self.vm.set_user_memory_region(
                    op.slot, op.flags, op.guest_phys_addr, op.memory_size, address
                )
            except KvmError as err:
                raise GuestError(f"{op.describe()}: {err.errno_name}") from None
            return []
        assert isinstance(op, DirtyLogOp)
        return self.vm.get_dirty_log(op.slot, op.npages)

    def run_slice(self, sl: Slice, timeout: float) -> tuple[int, list[int]]:
        dirty: list[int] = []
        for op in sl.before:
            dirty += self.apply(op)
        if sl.cr3 != self.cr3 or sl.cpl != self.cpl:
            long_mode_user_sregs(self.sregs, sl.cr3 * PAGE, sl.cpl)
            self.vcpu.set_sregs(self.sregs)
            self.cr3, self.cpl = sl.cr3, sl.cpl
        self.vcpu.set_regs(user_regs(sl.rip))
        exits = 0
        while exits < MAX_EXITS_PER_SLICE:
            reason = self.vcpu.run(timeout)
            if reason != KVM_EXIT_MMIO:
                name = EXIT_REASONS.get(reason, str(reason))
                raise GuestError(f"slice {sl.label!r}: KVM_EXIT_{name}, not the doorbell")
            exits += 1
            addr, _size, _write = self.vcpu.mmio()
            if addr == DOORBELL_GPA:
                self.vcpu.complete_io()
                if sl.loads_cr3 is not None:  # the guest loaded CR3 itself
                    self.cr3 = sl.loads_cr3
                return exits, dirty
        raise GuestError(f"slice {sl.label!r}: {exits} MMIO exits without the doorbell")


def run_on_kernel(
    program: GuestProgram,
    *,
    on_slice: SliceHook | None = None,
    on_ready: Callable[[KernelRun], None] | None = None,
    timeout: float = RUN_TIMEOUT,
    before_close: Callable[[], None] | None = None,
) -> KernelRun:
    """Run `program` on /dev/kvm.  `on_ready` is called once the VM exists and its
    statistics were read (start tracing there), `before_close` before its fds are
    closed (stop tracing there: the kernel zaps every shadow page when the VM goes)."""
    with Kvm() as kvm, kvm.create_vm() as vm:
        try:
            machine = _Machine(kvm, vm, program)
            run = KernelRun(program, peaks=frozenset(d.name for d in machine.stats.descs
                                                     if d.peak))  # fmt: skip
            run.capabilities = kvm.capabilities()
            run.vm_before = machine.stats.read()
            run.vcpu_before = machine.vcpu_stats.read()
            if on_ready is not None:
                on_ready(run)
            for i, sl in enumerate(program.slices):
                start = time.perf_counter()
                exits, dirty = machine.run_slice(sl, timeout)
                result = SliceResult(
                    i, sl, exits, time.perf_counter() - start,
                    machine.stats.read(), machine.vcpu_stats.read(), dirty,
                )  # fmt: skip
                run.slices.append(result)
                if on_slice is not None:
                    on_slice(result)
        finally:
            if before_close is not None:
                before_close()
    return run
