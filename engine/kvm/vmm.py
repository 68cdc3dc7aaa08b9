"""A minimal VMM over `/dev/kvm`: `fcntl.ioctl` and `mmap`, no QEMU, no C extension.

- `Kvm`: the device (`KVM_GET_API_VERSION`, `KVM_CHECK_EXTENSION`, `KVM_CREATE_VM`).
- `KvmVm`: a VM fd; `set_user_memory_region()` is `engine.Vm`'s own (both are a
  `KvmSetUserMemoryRegion`) and raises `KvmError` with the kernel's errno, so the two
  are interchangeable in tests;
  `get_dirty_log()`; `stats()` opens `KVM_GET_STATS_FD`.
- `KvmVcpu`: a vCPU fd and its `kvm_run` mapping; registers by `KVM_GET/SET_REGS` and
  `KVM_GET/SET_SREGS`; `run(timeout)` is `KVM_RUN` bounded in time by `SIGALRM` (the
  kernel leaves KVM_RUN with -EINTR on a pending signal), so it needs the main thread.
- `GuestMemory`: an anonymous mapping whose address is a slot's `userspace_addr`.

Every resource is closed by `close()` or the `with` block, on success, error and
Ctrl+C alike; a VM closes its vCPUs, mappings and stats fds.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import signal
import struct
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from ..errors import KvmError
from ..memslots.set_memory_region import KvmSetUserMemoryRegion, RegionRequest
from .stats import StatsFd
from .uapi import (
    CAPABILITIES,
    DIRTY_LOG,
    KVM_API_VERSION,
    KVM_CHECK_EXTENSION,
    KVM_CREATE_VCPU,
    KVM_CREATE_VM,
    KVM_GET_API_VERSION,
    KVM_GET_DIRTY_LOG,
    KVM_GET_REGS,
    KVM_GET_SREGS,
    KVM_GET_STATS_FD,
    KVM_GET_VCPU_MMAP_SIZE,
    KVM_RUN,
    KVM_SET_REGS,
    KVM_SET_SREGS,
    KVM_SET_USER_MEMORY_REGION,
    MEMORY_REGION,
    REGS_SIZE,
    RUN_EXIT_REASON,
    RUN_IMMEDIATE_EXIT,
    RUN_MMIO_IS_WRITE,
    RUN_MMIO_LEN,
    RUN_MMIO_PHYS_ADDR,
    SREGS_SIZE,
)

KVM_DEVICE = "/dev/kvm"
PAGE_SIZE = 4096
HUGE_SIZE = 2 << 20
MADV_POPULATE_WRITE = 23  # include/uapi/asm-generic/mman-common.h (Linux 5.14)


class KvmUnavailableError(Exception):
    """No usable /dev/kvm (missing, no permission, wrong API): one line for the user."""


class GuestTimeoutError(Exception):
    """A KVM_RUN did not return within its time bound."""


def kvm_unavailable_reason(path: str = KVM_DEVICE) -> str | None:
    """Why this machine cannot run guests here (None: it can)."""
    if not os.path.exists(path):
        return f"no {path} on this machine"
    if not os.access(path, os.R_OK | os.W_OK):
        return f"{path} is not accessible to this user"
    return None


class Kvm:
    """The open `/dev/kvm`."""

    def __init__(self, path: str = KVM_DEVICE) -> None:
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise KvmUnavailableError(f"no {path}: this machine has no KVM "
                                      "(modprobe kvm_intel or kvm_amd)") from None  # fmt: skip
        except PermissionError:
            raise KvmUnavailableError(f"cannot open {path}: permission denied "
                                      "(use sudo, or join the kvm group)") from None  # fmt: skip
        except OSError as err:
            raise KvmUnavailableError(f"cannot open {path}: {err.strerror}") from None
        version = fcntl.ioctl(self.fd, KVM_GET_API_VERSION, 0)
        if version != KVM_API_VERSION:
            self.close()
            raise KvmUnavailableError(f"{path}: KVM API version {version}, expected 12")
        self.vcpu_mmap_size = fcntl.ioctl(self.fd, KVM_GET_VCPU_MMAP_SIZE, 0)

    def check_extension(self, cap: int) -> int:
        return int(fcntl.ioctl(self.fd, KVM_CHECK_EXTENSION, cap))

    def capabilities(self) -> dict[str, int]:
        return {name: self.check_extension(cap) for name, cap in CAPABILITIES.items()}

    def create_vm(self) -> KvmVm:
        try:
            fd = fcntl.ioctl(self.fd, KVM_CREATE_VM, 0)
        except OSError as err:
            raise KvmUnavailableError(f"KVM_CREATE_VM: {err.strerror}") from None
        return KvmVm(self, fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Kvm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GuestMemory:
    """Anonymous, private memory for one memslot, `MADV_DONTFORK` as QEMU's
    `ram_block_add` makes guest RAM: a fork of the VMM process (any subprocess its
    host program starts) would otherwise write-protect the pages for copy-on-write, and
    the MMU notifier's invalidation would drop the guest's sptes behind the trace's back
    (the pid-filtered instance does not see it), so a run would no longer match the
    model.  It is populated up front (`MAP_POPULATE`, as QEMU's `-mem-prealloc`): a
    writable private mapping is populated with write faults, so every gfn has a page of
    its own from the start.  Unpopulated, a guest read maps the host's shared zero page
    read-only (`hva_to_pfn()` cannot make it writable: no `SPTE_HOST_WRITABLE` in the
    spte, one pfn for every page read), and the guest's first write to it then
    copies it on write behind KVM's back (an MMU-notifier invalidation)."""

    def __init__(self, size: int, huge: bool = False) -> None:
        if size <= 0 or size % PAGE_SIZE:
            raise ValueError(f"guest memory of {size} bytes is not a whole number of pages")
        self.size = size
        self.offset = 0  # where the guest's memory starts in the mapping
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        if not huge:
            self.map = mmap.mmap(-1, size, flags=flags | mmap.MAP_POPULATE)
            self.map.madvise(mmap.MADV_DONTFORK)
            self.address = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
            return
        # Transparent huge pages: a 2M-aligned range (mapped 2M longer, the start
        # rounded up), `MADV_HUGEPAGE`, then populated by writes (`MADV_POPULATE_WRITE`,
        # Linux 5.14), each 2M a huge page when the host has one free
        self.map = mmap.mmap(-1, size + HUGE_SIZE, flags=flags)
        self.map.madvise(mmap.MADV_DONTFORK)
        start = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        self.offset = -start % HUGE_SIZE
        self.address = start + self.offset
        self.map.madvise(mmap.MADV_HUGEPAGE, self.offset, size)
        try:
            self.map.madvise(MADV_POPULATE_WRITE, self.offset, size)
        except OSError:  # before 5.14: a write to every page
            for at in range(self.offset, self.offset + size, PAGE_SIZE):
                self.map[at] = 0

    def huge_pages(self) -> int:
        """How many of its 2M ranges are one huge page now (`AnonHugePages` of its
        mapping in /proc/self/smaps, in 2M)."""
        start = self.address - self.offset
        with open("/proc/self/smaps", encoding="ascii", errors="replace") as smaps:
            mine = False
            for line in smaps:
                head = line.split(None, 1)[0]
                if "-" in head and not head.endswith(":"):
                    low = int(head.split("-")[0], 16)
                    mine = low == start
                elif mine and head == "AnonHugePages:":
                    return int(line.split()[1]) * 1024 // HUGE_SIZE
        return 0

    def write(self, offset: int, data: bytes) -> None:
        offset += self.offset
        self.map[offset : offset + len(data)] = data

    def write_u64s(self, offset: int, values: Sequence[int]) -> None:
        struct.pack_into(f"<{len(values)}Q", self.map, self.offset + offset, *values)

    def read(self, offset: int, size: int) -> bytes:
        offset += self.offset
        return self.map[offset : offset + size]

    def close(self) -> None:
        if not self.map.closed:
            self.map.close()


class KvmVm(KvmSetUserMemoryRegion):
    """A VM fd and everything made from it."""

    def __init__(self, kvm: Kvm, fd: int) -> None:
        self.kvm = kvm
        self.fd = fd
        self.vcpus: list[KvmVcpu] = []
        self.memory: list[GuestMemory] = []
        self._stats: list[StatsFd] = []

    # -- memslots ----------------------------------------------------------------------

    def kvm_vm_ioctl_set_memory_region(self, mem: RegionRequest) -> None:
        """KVM_SET_USER_MEMORY_REGION with `mem` (truncated to the UAPI widths by
        `set_user_memory_region()`); `KvmError` with the kernel's errno on refusal."""
        arg = MEMORY_REGION.pack(
            mem.slot, mem.flags, mem.guest_phys_addr, mem.memory_size, mem.userspace_addr
        )
        try:
            fcntl.ioctl(self.fd, KVM_SET_USER_MEMORY_REGION, arg)
        except OSError as err:
            raise KvmError(err.errno or errno.EIO, "refused by the kernel") from None

    def get_dirty_log(self, slot: int, npages: int) -> list[int]:
        """KVM_GET_DIRTY_LOG: the slot's dirty gfns (offsets in the slot), cleared."""
        bitmap = ctypes.create_string_buffer(((npages + 63) // 64) * 8)
        arg = DIRTY_LOG.pack(slot, 0, ctypes.addressof(bitmap))
        fcntl.ioctl(self.fd, KVM_GET_DIRTY_LOG, arg)
        raw = bitmap.raw
        return [i for i in range(npages) if raw[i >> 3] >> (i & 7) & 1]

    def alloc_memory(self, size: int, huge: bool = False) -> GuestMemory:
        memory = GuestMemory(size, huge)
        self.memory.append(memory)
        return memory

    # -- vCPUs and statistics -------------------------------------------------------------

    def create_vcpu(self, vcpu_id: int = 0) -> KvmVcpu:
        fd = fcntl.ioctl(self.fd, KVM_CREATE_VCPU, vcpu_id)
        vcpu = KvmVcpu(fd, self.kvm.vcpu_mmap_size)
        self.vcpus.append(vcpu)
        return vcpu

    def stats(self) -> StatsFd:
        return self._open_stats(self.fd)

    def vcpu_stats(self, vcpu: KvmVcpu) -> StatsFd:
        return self._open_stats(vcpu.fd)

    def _open_stats(self, fd: int) -> StatsFd:
        stats = StatsFd(fcntl.ioctl(fd, KVM_GET_STATS_FD, 0))
        self._stats.append(stats)
        return stats

    def close(self) -> None:
        """vCPUs, stats fds, the VM fd, then guest memory (nothing maps it any more)."""
        for vcpu in self.vcpus:
            vcpu.close()
        for stats in self._stats:
            stats.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for memory in self.memory:
            memory.close()

    def __enter__(self) -> KvmVm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KvmVcpu:
    """A vCPU fd and its shared `struct kvm_run`."""

    def __init__(self, fd: int, mmap_size: int) -> None:
        self.fd = fd
        self.run_map = mmap.mmap(fd, mmap_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def get_regs(self) -> bytearray:
        regs = bytearray(REGS_SIZE)
        fcntl.ioctl(self.fd, KVM_GET_REGS, regs)
        return regs

    def set_regs(self, regs: bytes | bytearray) -> None:
        fcntl.ioctl(self.fd, KVM_SET_REGS, bytes(regs))

    def get_sregs(self) -> bytearray:
        sregs = bytearray(SREGS_SIZE)
        fcntl.ioctl(self.fd, KVM_GET_SREGS, sregs)
        return sregs

    def set_sregs(self, sregs: bytes | bytearray) -> None:
        fcntl.ioctl(self.fd, KVM_SET_SREGS, bytes(sregs))

    @property
    def exit_reason(self) -> int:
        return int(struct.unpack_from("<I", self.run_map, RUN_EXIT_REASON)[0])

    def mmio(self) -> tuple[int, int, bool]:
        """(phys_addr, len, is_write) of the last KVM_EXIT_MMIO."""
        addr, length = struct.unpack_from("<QI", self.run_map, RUN_MMIO_PHYS_ADDR)
        _ = length
        size = struct.unpack_from("<I", self.run_map, RUN_MMIO_LEN)[0]
        return addr, size, bool(self.run_map[RUN_MMIO_IS_WRITE])

    def run(self, timeout: float) -> int:
        """KVM_RUN until the next exit to userspace, at most `timeout` seconds."""
        with _time_bound(timeout):
            fcntl.ioctl(self.fd, KVM_RUN, 0)
        return self.exit_reason

    def complete_io(self) -> None:
        """KVM_RUN with `immediate_exit` set: the kernel finishes the pending MMIO/PIO
        (`complete_userspace_io`) and returns -EINTR before entering the guest, so the
        registers read or written next are consistent (api.rst, KVM_RUN)."""
        self.run_map[RUN_IMMEDIATE_EXIT] = 1
        try:
            fcntl.ioctl(self.fd, KVM_RUN, 0)
        except InterruptedError:
            pass
        finally:
            self.run_map[RUN_IMMEDIATE_EXIT] = 0

    def close(self) -> None:
        if not self.run_map.closed:
            self.run_map.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@contextmanager
def _time_bound(timeout: float) -> Iterator[None]:
    """Raise `GuestTimeoutError` in the block after `timeout` seconds (SIGALRM)."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("KVM_RUN is bounded by SIGALRM: run guests on the main thread")

    def expired(_signum: int, _frame: FrameType | None) -> None:
        raise GuestTimeoutError(f"the guest ran longer than {timeout:g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
