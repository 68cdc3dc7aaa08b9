"""A vCPU as the host and its guest see it, and one remote flush in flight (the PV-flush
thread).

The host side is the vCPU thread's scheduler state (running on its pCPU, runnable but
descheduled, or blocked in `kvm_vcpu_block()` after a HLT) plus the steal-time
`preempted` byte of docs/kvm.md §7 (KVM_VCPU_PREEMPTED, KVM_VCPU_FLUSH_TLB).  The guest
side is what the vCPU's ebizzy thread does: a record's work, spinning in its own flush,
halted in the thread patch's `halt()`, or asleep on the VM's mmap_sem (mmap_sem.py) with
the vCPU idle in HLT; the interrupts pending in its local APIC; and whether the vCPU is in
the mm's `mm_cpumask` (a vCPU idling lazily keeps the mm loaded until a flush IPI makes it
`leave_mm()`, v3.2 arch/x86/mm/tlb.c).

A `Flush` is the sender's `union smp_flush_state` slot of 2012 arch/x86/mm/tlb.c: one per
sender, whose `flush_cpumask` the targets clear as they acknowledge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# what the host does with the vCPU thread
RUNNING, RUNNABLE, BLOCKED = "running", "runnable", "blocked"
# what the guest thread does
WORK, SPIN, HALT, IDLE = "work", "spin", "halt", "idle"  # IDLE: asleep on mmap_sem
# the four states a lane shows, one at a time
VIS_RUNNING, VIS_SPINNING, VIS_PREEMPTED, VIS_HALTED = range(4)
VIS_NAMES = ("running", "spinning", "preempted", "halted")


@dataclass(slots=True, eq=False)
class Flush:
    """One remote flush: its targets, who got an IPI or a flag, who still owes an ack."""

    fid: int
    sender: int  # global vCPU id
    vm: int
    start: int
    targets: tuple[int, ...]
    mask: set[int] = field(default_factory=set)  # f->flush_cpumask
    ipis: list[int] = field(default_factory=list)
    flagged: list[int] = field(default_factory=list)  # KVM_VCPU_FLUSH_TLB, no IPI
    acks: dict[int, tuple[int, str]] = field(default_factory=dict)  # target -> (ns, how)
    waited_on_preempted: bool = False
    done_at: int | None = None  # the mask emptied
    returned_at: int | None = None  # the sender went on
    early: bool = False  # the sender went on with targets still in the mask
    superseded: bool = False  # the sender's next flush overwrote the mask

    @property
    def in_progress(self) -> bool:
        return self.returned_at is None


@dataclass(slots=True, eq=False)
class VCpu:
    vm: int
    index: int  # the vCPU id inside its VM (vcpu_id)
    gid: int  # vm * vcpus_per_vm + index
    pcpu: int  # pinned: vCPU i of every VM runs on pCPU i
    host: str = RUNNABLE
    entered: bool = False  # in guest mode (between VM entry and the next exit)
    mode: str = WORK
    guest_left: int = 0  # ns of work (or of the patch's spin) left when descheduled
    done_at: int = 0  # when the current work or spin ends, while entered
    token: int = 0  # invalidates the vCPU's scheduled guest events
    halt_seq: int = 0
    halted_at: int = 0
    vruntime: int = 0
    st_preempted: bool = False  # steal_time.preempted & KVM_VCPU_PREEMPTED
    st_flush: bool = False  # steal_time.preempted & KVM_VCPU_FLUSH_TLB
    pending: set[int] = field(default_factory=set)  # senders whose IPI waits in the IRR
    in_masks: set[int] = field(default_factory=set)  # senders whose mask holds this vCPU
    flush: Flush | None = None  # its own flush, while it spins or halts in it
    in_mm: bool = True  # its bit in mm_cpumask(mm): the flush targets it
    wants_write: bool = False  # asleep on mmap_sem for the munmap (else for the refault)
    granted: bool = False  # __rwsem_do_wake() gave it mmap_sem; it goes on when it runs
    vis: int = VIS_PREEMPTED
    vis_since: int = 0
    state_ns: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    records: int = 0  # ebizzy records after the warm-up
    records_all: int = 0
    flushes: int = 0
    flags_received: int = 0
    flag_sets: int = 0  # times KVM_VCPU_FLUSH_TLB went from clear to set
    late_acks: int = 0  # IPIs handled at entry, after waiting preempted or halted

    @property
    def name(self) -> str:
        return f"vm{self.vm}/vcpu{self.index}"

    @property
    def visible(self) -> int:
        """The one state a lane shows now."""
        if self.host == BLOCKED:
            return VIS_HALTED
        if not self.entered:
            return VIS_PREEMPTED
        return VIS_SPINNING if self.mode in (SPIN, HALT) else VIS_RUNNING

    def time_in_states(self, now: int) -> list[int]:
        """Nanoseconds spent in each visible state up to `now`."""
        times = list(self.state_ns)
        times[self.vis] += now - self.vis_since
        return times
