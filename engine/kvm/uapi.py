"""KVM's userspace ABI as x86-64 Linux defines it (include/uapi/linux/kvm.h,
arch/x86/include/uapi/asm/kvm.h): ioctl numbers and the byte layout of the structs the
VMM passes.  Values measured on the project's host are in docs/kvm.md §11.1.

Everything here is packing and unpacking with `struct`; nothing opens a device.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# -- ioctl numbers (_IO/_IOR/_IOW(KVMIO=0xAE, nr, size)) ----------------------------------
KVM_GET_API_VERSION = 0xAE00
KVM_CREATE_VM = 0xAE01
KVM_CHECK_EXTENSION = 0xAE03
KVM_GET_VCPU_MMAP_SIZE = 0xAE04
KVM_CREATE_VCPU = 0xAE41
KVM_GET_DIRTY_LOG = 0x4010AE42  # _IOW(KVMIO, 0x42, struct kvm_dirty_log)
KVM_SET_USER_MEMORY_REGION = 0x4020AE46  # _IOW(KVMIO, 0x46, kvm_userspace_memory_region)
KVM_RUN = 0xAE80
KVM_GET_REGS = 0x8090AE81
KVM_SET_REGS = 0x4090AE82
KVM_GET_SREGS = 0x8138AE83
KVM_SET_SREGS = 0x4138AE84
KVM_GET_STATS_FD = 0xAECE

KVM_API_VERSION = 12

# -- capabilities (KVM_CHECK_EXTENSION) ---------------------------------------------------
KVM_CAP_USER_MEMORY = 3
KVM_CAP_NR_MEMSLOTS = 10
KVM_CAP_READONLY_MEM = 81
KVM_CAP_MULTI_ADDRESS_SPACE = 118
KVM_CAP_BINARY_STATS_FD = 203
CAPABILITIES = {
    "KVM_CAP_USER_MEMORY": KVM_CAP_USER_MEMORY,
    "KVM_CAP_NR_MEMSLOTS": KVM_CAP_NR_MEMSLOTS,
    "KVM_CAP_READONLY_MEM": KVM_CAP_READONLY_MEM,
    "KVM_CAP_MULTI_ADDRESS_SPACE": KVM_CAP_MULTI_ADDRESS_SPACE,
    "KVM_CAP_BINARY_STATS_FD": KVM_CAP_BINARY_STATS_FD,
}

# -- struct kvm_run ------------------------------------------------------------------------
RUN_IMMEDIATE_EXIT = 1  # __u8 immediate_exit
RUN_EXIT_REASON = 8  # __u32 exit_reason
RUN_MMIO_PHYS_ADDR = 32  # union: mmio.phys_addr (u64), data[8], len (u32), is_write (u8)
RUN_MMIO_LEN = 48
RUN_MMIO_IS_WRITE = 52
KVM_EXIT_IO = 2
KVM_EXIT_HLT = 5
KVM_EXIT_MMIO = 6
KVM_EXIT_SHUTDOWN = 8
KVM_EXIT_FAIL_ENTRY = 9
KVM_EXIT_INTERNAL_ERROR = 17
EXIT_REASONS = {
    KVM_EXIT_IO: "IO",
    KVM_EXIT_HLT: "HLT",
    KVM_EXIT_MMIO: "MMIO",
    KVM_EXIT_SHUTDOWN: "SHUTDOWN",
    KVM_EXIT_FAIL_ENTRY: "FAIL_ENTRY",
    KVM_EXIT_INTERNAL_ERROR: "INTERNAL_ERROR",
}

# -- struct kvm_regs (144 bytes) and kvm_sregs (312 bytes) -------------------------------
REGS_SIZE = 144
REGS_RIP, REGS_RFLAGS = 128, 136
REGS_RSP = 6 * 8  # rax rbx rcx rdx rsi rdi rsp rbp r8..r15
SREGS_SIZE = 312
SEGMENT = struct.Struct("<QIHBBBBBBBBBx")  # struct kvm_segment, 24 bytes
SREGS_SEGMENTS = ("cs", "ds", "es", "fs", "gs", "ss", "tr", "ldt")
SREGS_CR0, SREGS_CR3, SREGS_CR4, SREGS_EFER = 224, 240, 248, 264

X86_CR0_PE, X86_CR0_MP, X86_CR0_ET, X86_CR0_NE = 1 << 0, 1 << 1, 1 << 4, 1 << 5
X86_CR0_WP, X86_CR0_AM, X86_CR0_PG = 1 << 16, 1 << 18, 1 << 31
X86_CR4_PAE = 1 << 5
EFER_LME, EFER_LMA = 1 << 8, 1 << 10

MEMORY_REGION = struct.Struct("<IIQQQ")  # struct kvm_userspace_memory_region
DIRTY_LOG = struct.Struct("<IIQ")  # struct kvm_dirty_log: slot, padding, bitmap pointer


@dataclass(frozen=True, slots=True)
class Segment:
    """`struct kvm_segment`."""

    base: int
    limit: int
    selector: int
    type: int
    present: int = 1
    dpl: int = 0
    db: int = 0
    s: int = 1
    l: int = 0  # noqa: E741 - the kernel's field name
    g: int = 0

    def pack_into(self, buffer: bytearray, offset: int) -> None:
        SEGMENT.pack_into(
            buffer, offset, self.base, self.limit, self.selector, self.type, self.present,
            self.dpl, self.db, self.s, self.l, self.g, 0, 0,
        )  # fmt: skip


# Long mode at CPL 3 (docs/kvm.md §11.3: what kvm-pvm runs natively): a 64-bit code
# segment and data segments of DPL 3 with RPL-3 selectors, a busy 64-bit TSS.
USER_CS = Segment(0, 0xFFFF_FFFF, 0x33, 0xB, dpl=3, l=1, g=1)
USER_DS = Segment(0, 0xFFFF_FFFF, 0x2B, 0x3, dpl=3, db=1, g=1)
TSS = Segment(0, 0x67, 0x40, 0xB, s=0)
# CPL 0: the same with DPL 0 and RPL-0 selectors (a guest's kernel code; kvm-pvm runs it
# in its emulator, one instruction at a time, docs/kvm.md §11.3)
KERNEL_CS = Segment(0, 0xFFFF_FFFF, 0x08, 0xB, dpl=0, l=1, g=1)
KERNEL_DS = Segment(0, 0xFFFF_FFFF, 0x10, 0x3, dpl=0, db=1, g=1)
LONG_MODE_CR0 = X86_CR0_PE | X86_CR0_MP | X86_CR0_ET | X86_CR0_NE | X86_CR0_WP | X86_CR0_AM
LONG_MODE_CR0 |= X86_CR0_PG
LONG_MODE_CR4 = X86_CR4_PAE
LONG_MODE_EFER = EFER_LME | EFER_LMA
RFLAGS_FIXED = 1 << 1


def long_mode_user_sregs(sregs: bytearray, cr3: int, cpl: int = 3) -> None:
    """Set segments, CR0/CR3/CR4/EFER of a `kvm_sregs` for 4-level paging at CPL 3 (or
    0).  KVM_SET_SREGS resets the MMU context only when CR0, CR3, CR4 or EFER change
    (`__set_sregs_common()`, x86.c 6.18): a change of CPL alone keeps every root."""
    code, data = (USER_CS, USER_DS) if cpl == 3 else (KERNEL_CS, KERNEL_DS)
    code.pack_into(sregs, 0)
    for i, name in enumerate(SREGS_SEGMENTS):
        if name in ("ds", "es", "fs", "gs", "ss"):
            data.pack_into(sregs, 24 * i)
    TSS.pack_into(sregs, 24 * SREGS_SEGMENTS.index("tr"))
    struct.pack_into("<Q", sregs, SREGS_CR0, LONG_MODE_CR0)
    struct.pack_into("<Q", sregs, SREGS_CR3, cr3)
    struct.pack_into("<Q", sregs, SREGS_CR4, LONG_MODE_CR4)
    struct.pack_into("<Q", sregs, SREGS_EFER, LONG_MODE_EFER)


def user_regs(rip: int) -> bytes:
    """A `kvm_regs` with only rip and rflags (bit 1 is always set) given."""
    regs = bytearray(REGS_SIZE)
    struct.pack_into("<Q", regs, REGS_RIP, rip)
    struct.pack_into("<Q", regs, REGS_RFLAGS, RFLAGS_FIXED)
    return bytes(regs)


# -- KVM_GET_STATS_FD (Documentation/virt/kvm/api.rst, "KVM_GET_STATS_FD") ----------------
STATS_HEADER = struct.Struct("<IIIIII")  # flags name_size num_desc id_off desc_off data_off
STATS_DESC = struct.Struct("<IhHII")  # flags exponent size offset bucket_size, then name
KVM_STATS_TYPE_MASK = 0xF
KVM_STATS_TYPE_CUMULATIVE, KVM_STATS_TYPE_INSTANT, KVM_STATS_TYPE_PEAK = 0, 1, 2
