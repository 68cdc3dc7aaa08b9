"""The emulator after RET_PF_EMULATE, as `x86_emulate_instruction()` (6.18 x86.c) traces
it, written once for every MMU (docs/kvm.md §13):

- decode: `x86_decode_emulated_instruction()` reads the instruction at rip, then
  `trace_kvm_emulate_insn_start()` (`kvm_emulate_insn`);
- the memory operand, `emulator_read_write_onepage()`: its gpa.  With shadow paging
  `vcpu_mmio_gva_to_gpa()`: the vCPU's MMIO info by gva (`vcpu_match_mmio ... GVA`), else
  a guest walk.  With a direct root (EPT/NPT) the exit's gpa (`ctxt->gpa_available`)
  through `vcpu_is_mmio_gpa()`: the APIC's page (APIC_DEFAULT_PHYS_BASE) without a
  tracepoint, else the vCPU's MMIO info by gpa (`vcpu_match_mmio ... GPA`);
- RAM is read or written there; MMIO: `write_mmio()` traces KVM_TRACE_MMIO_WRITE
  (`kvm_mmio`), `read_exit_mmio()` KVM_TRACE_MMIO_READ_UNSATISFIED, and the access is
  offered to the in-kernel devices (`vcpu_mmio_write()`: the local APIC, then
  `kvm_io_bus_write(KVM_MMIO_BUS)`: an ioeventfd, `MmioBus`); when none takes it KVM_RUN
  returns to userspace with KVM_EXIT_MMIO, traced `kvm_userspace_exit` by
  `kvm_vcpu_ioctl()`.
So the order is `kvm_emulate_insn` → `vcpu_match_mmio` → `kvm_mmio` →
`kvm_userspace_exit`, the real trace's (tests/fixtures/trace-kvm-pvm-6.18.txt).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ...events import FieldValue
from ...memslots.vm import Vm
from ...trace.kernel_fields import KVM_TRACE_APIC
from ..spte import kvm_mmio_fields
from .mmio_info import VcpuMmioInfo

PAGE_SHIFT = 12
PAGE_MASK = ~0xFFF
APIC_DEFAULT_PHYS_BASE = 0xFEE0_0000  # arch/x86/include/asm/apicdef.h
APIC_EOI = 0xB0
_APIC_REG_NAMES = {offset: name for name, offset in KVM_TRACE_APIC.items()}
KVM_EXIT_MMIO = 6  # include/uapi/linux/kvm.h
# The EPT guests' MMIO store and where it runs: the model's guests have no code of their
# own, so every emulated store is one 32-bit `mov %eax,(%rdx)` (89 02) at rip 0, and a
# skipped or emulated one resumes at rip 2.
MMIO_STORE = (0, bytes.fromhex("89 02"))
# The guest's linear address of an MMIO page (`vcpu_match_mmio`'s gva): an ioremap()ed
# BAR in a Linux guest's vmalloc area, the gpa's page offset kept.
IOREMAP_BASE = 0xFFFF_C900_0000_0000

Emit = Callable[..., None]  # an MMU's `_emit(name, **fields)`


def trace_kvm_emulate_insn(emit: Emit, rip: int, code: bytes) -> None:
    """`trace_kvm_emulate_insn_start()`: csbase 0 and a 64-bit guest (``prot64``)."""
    emit("kvm_emulate_insn", csbase=0, rip=rip, insn=code.hex(" "), flags="prot64", failed=False)


def trace_vcpu_match_mmio(emit: Emit, gva: int, gpa: int, write: bool, gpa_match: bool) -> None:
    """`trace_vcpu_match_mmio(gva, gpa, write, gpa_match)`: the vCPU's MMIO info gave the
    operand's gpa, matched on the gva (shadow paging) or the gpa (a direct root)."""
    emit("vcpu_match_mmio", gva=gva, gpa=gpa, write=write, gpa_match=gpa_match)


class MmioBus:
    """The in-kernel MMIO devices a store is offered to (6.18 x86.c `vcpu_mmio_write()`,
    virt/kvm/eventfd.c `kvm_assign_ioeventfd_idx()`): the local APIC's page when the
    irqchip is in the kernel, and the ioeventfds.  An ioeventfd of length 0 (QEMU's
    virtio-pci notify doorbells: any value, any width) is on the KVM_FAST_MMIO_BUS as well
    as the KVM_MMIO_BUS, so an EPT misconfiguration on it never reaches the emulator."""

    def __init__(self, lapic_in_kernel: bool = True) -> None:
        self.lapic_in_kernel = lapic_in_kernel
        self.ioeventfds: set[int] = set()  # gpas of length-0 ioeventfds
        self.fast_mmio_writes = self.ioeventfd_writes = self.userspace_exits = 0

    def kvm_assign_ioeventfd(self, gpa: int) -> None:
        """KVM_IOEVENTFD with len 0 at `gpa`: KVM_MMIO_BUS and KVM_FAST_MMIO_BUS."""
        self.ioeventfds.add(gpa)

    def fast_mmio_write(self, gpa: int) -> bool:
        """`kvm_io_bus_write(vcpu, KVM_FAST_MMIO_BUS, gpa, 0, NULL)` == 0."""
        if gpa not in self.ioeventfds:
            return False
        self.fast_mmio_writes += 1
        return True

    def vcpu_mmio(
        self, gpa: int, write: bool, *, vcpu: int = 0, size: int = 4, val: int = 0,
        emit: Emit | None = None,
    ) -> bool:  # fmt: skip
        """`vcpu_mmio_write()`/`vcpu_mmio_read()`: True when an in-kernel device took the
        access (the APIC's page, an ioeventfd on a store); False: KVM_EXIT_MMIO."""
        if self.lapic_in_kernel and gpa & PAGE_MASK == APIC_DEFAULT_PHYS_BASE:
            if write and emit is not None:
                apic_mmio_write(emit, vcpu, gpa & ~PAGE_MASK, size, val)
            return True
        if write and gpa in self.ioeventfds:
            self.ioeventfd_writes += 1
            return True
        self.userspace_exits += 1
        return False


def apic_mmio_write(emit: Emit, vcpu: int, offset: int, size: int, val: int) -> None:
    """The in-kernel local APIC takes a store to its page (6.18 lapic.c):
    `apic_mmio_write()` passes a 4-byte store at a 16-byte-aligned offset to
    `kvm_lapic_reg_write(apic, offset & 0xff0, val)`, which traces `kvm_apic` (apic_write
    and the register's name); an EOI (`APIC_EOI`) is `apic_set_eoi()`, traced `kvm_eoi`
    with the highest vector in service.  The model's guests take no interrupts, so none
    is in service: vector -1, as `apic_find_highest_isr()` gives then.  The APIC ID is
    the vCPU's index (xAPIC, enabled)."""
    if size != 4 or offset & 0xF:
        return
    reg = offset & 0xFF0
    emit("kvm_apic", rw=True, reg=_APIC_REG_NAMES.get(reg, f"{reg:#x}"), val=val)
    if reg == APIC_EOI:
        emit("kvm_eoi", apicid=vcpu, vector=-1)


def x86_emulate_instruction(
    emit: Emit,
    write: bool,
    *,
    decode: Callable[[], bool],
    operand: Callable[[], int | None],
    is_ram: Callable[[int], bool],
    size: int = 4,
    val: int = 0,
    bus: MmioBus | None = None,
    vcpu: int = 0,
) -> tuple[int, bool] | None:
    """The emulation of one memory access, in the kernel's order: `decode` (False: a #PF
    injected on the fetch), `operand` (the gpa; None: a #PF injected), then RAM (the
    caller reads or writes it) or MMIO (`kvm_mmio`, then the in-kernel devices of `bus`
    or `kvm_userspace_exit` KVM_EXIT_MMIO; without a `bus` the caller models what
    follows).  Returns (gpa, MMIO?), or None for a #PF injected."""
    if not decode():
        return None
    gpa = operand()
    if gpa is None:
        return None
    if is_ram(gpa):
        return gpa, False
    emit("kvm_mmio", **kvm_mmio_fields(gpa, write, size, val))
    if bus is not None and not bus.vcpu_mmio(gpa, write, vcpu=vcpu, size=size, val=val, emit=emit):
        emit("kvm_userspace_exit", reason="KVM_EXIT_MMIO", code=KVM_EXIT_MMIO)
    return gpa, True


class EmulatorMmu(Protocol):
    """What the emulator reads of a direct MMU: its VM, its vCPUs' MMIO info, its
    tracepoints."""

    vm: Vm
    mmio_info: VcpuMmioInfo

    def _emit(self, name: str, **fields: FieldValue) -> None: ...


class DirectEmulator:
    """`x86_emulate_instruction()` after a direct MMU's RET_PF_EMULATE (TDP MMU, or the
    shadow MMU's direct pages): the workloads' MMIO stores (`MMIO_STORE`), on the
    exit's gpa, offered to `bus`."""

    def __init__(self, mmu: EmulatorMmu) -> None:
        self.mmu = mmu
        self.bus = MmioBus()

    def emulate(self, vcpu: int, gpa: int, write: bool) -> None:
        emit = self.mmu._emit
        rip, code = MMIO_STORE

        def decode() -> bool:
            trace_kvm_emulate_insn(emit, rip, code)
            return True

        x86_emulate_instruction(
            emit, write, decode=decode, operand=lambda: self.vcpu_is_mmio_gpa(vcpu, gpa, write),
            is_ram=lambda _gpa: False, bus=self.bus, vcpu=vcpu,
        )  # fmt: skip

    def vcpu_is_mmio_gpa(self, vcpu: int, gpa: int, write: bool) -> int:
        """`vcpu_is_mmio_gpa(vcpu, gva, gpa, write)` (6.18 x86.c): the APIC's page needs
        no look (the APIC-access exit's case); else `vcpu_match_mmio_gpa()`, traced."""
        if gpa & PAGE_MASK == APIC_DEFAULT_PHYS_BASE:
            return gpa
        mmu = self.mmu
        as_id = mmu.vm.vcpu(vcpu).as_id
        if mmu.mmio_info.match_gpa(vcpu, gpa, mmu.vm.generation(as_id), count=False):
            trace_vcpu_match_mmio(emit=mmu._emit, gva=IOREMAP_BASE | gpa & ~PAGE_MASK,
                                  gpa=gpa, write=write, gpa_match=True)  # fmt: skip
        return gpa
