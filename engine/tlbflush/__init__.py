"""Paravirt remote TLB flush in overcommitted KVM guests (the PV-flush thread,
docs/kvm.md §7).

A seeded discrete-event model of VMs of 8 vCPUs on 8 pCPUs running ebizzy (whose threads
sleep on their guest's mmap_sem while a flush holds it, mmap_sem.py), the host scheduling
the vCPU threads (idle pCPUs pull waiting ones), and four flush protocols: `baseline`,
`gang`, `pv_flush` (the thread's patch) and `flush_on_enter` (Peter Zijlstra's proposal,
today's KVM_VCPU_FLUSH_TLB).  `tlb_flush_table()` (claims/tlb_flush.py) is the bench table.
"""

from __future__ import annotations

from .config import VM_COUNTS, TlbConfig
from .metrics import TlbMetrics
from .protocols import PROTOCOL_NAMES, PROTOCOLS, FlushProtocol, protocol
from .sim import TlbSim
from .vcpu import VIS_NAMES, Flush, VCpu

__all__ = [
    "PROTOCOLS",
    "PROTOCOL_NAMES",
    "VIS_NAMES",
    "VM_COUNTS",
    "Flush",
    "FlushProtocol",
    "TlbConfig",
    "TlbMetrics",
    "TlbSim",
    "VCpu",
    "protocol",
]
