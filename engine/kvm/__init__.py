"""The host's own KVM, driven from Python: a minimal VMM (`vmm`), guest programs that
run on the kernel and on the engine's MMU alike (`program`, `runner`, `model`), and the
kernel's tracepoints and statistics recorded while they run (`tracing`, `stats`).

Nothing here imports textual or rich.  Facts about the host it was built on:
docs/kvm.md §11.3 (kvm-pvm, shadow MMU, MMIO caching off, one address space).
"""

from __future__ import annotations

from .host import HostMmu, kernel_release, read_host_mmu
from .program import PROGRAMS, GuestProgram, build_program
from .vmm import GuestTimeoutError, Kvm, KvmUnavailableError, KvmVcpu, KvmVm

__all__ = [
    "PROGRAMS",
    "GuestProgram",
    "GuestTimeoutError",
    "HostMmu",
    "Kvm",
    "KvmUnavailableError",
    "KvmVcpu",
    "KvmVm",
    "build_program",
    "kernel_release",
    "read_host_mmu",
]
