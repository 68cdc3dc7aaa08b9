"""The constants of the paravirt TLB flush model (the PV-flush thread) and where each one
comes from.

Times are integer nanoseconds (the model never uses a wall clock).

* The host scheduler's numbers are CFS's defaults of the thread's era
  (kernel/sched/fair.c, v3.2/v3.3, early 2012): `sysctl_sched_latency` 6 ms,
  `sysctl_sched_min_granularity` 0.75 ms and `sysctl_sched_wakeup_granularity` 1 ms, each
  multiplied by `1 + ilog2(min(ncpus, 8))` (SCHED_TUNABLESCALING_LOG), i.e. by 4 on the
  thread's 8 pCPUs; `sched_nr_latency` 8.  A pCPU with n runnable vCPUs (n <= 8) gives
  each a slice of latency / n: 12 ms with 2 VMs, 6 ms with 4, 3 ms with 8.  A waking
  vCPU's vruntime is placed at least at `min_vruntime - latency / 2` (place_entity,
  GENTLE_FAIR_SLEEPERS) and preempts the running one when it is behind by more than the
  wakeup granularity (check_preempt_wakeup).  A slice ends only on the scheduler tick
  (check_preempt_tick), every CPU ticking at once: HOST_HZ, a config range in
  engine/costs.py.  When the VMs' vCPUs woke as ebizzy began is not in the thread: each
  pCPU's rotation starts at a phase drawn over one CFS period (SCHED_LATENCY_NS), nothing
  fitted.  An idle pCPU pulls a queued vCPU (`idle_balance()`, the nohz idle balancer on
  the next tick) unless it ran within `sysctl_sched_migration_cost` (0.5 ms), and a waking
  vCPU goes to an idle pCPU (`select_idle_sibling()`): scheduler.py.
* The patch's spin: `int loop = 1024;` and `while (... && --loop) cpu_relax();` — at most
  1023 PAUSE iterations before `halt()` (the PV-flush thread, Nikunj A Dadhania, 20 Feb
  2012).  What one iteration costs is not in the thread: PAUSE_LOOP_NS is an assumption
  (about 10 ns on a 2012 Xeon; PAUSE took about 10 cycles before Skylake), so the spin
  lasts about 10 µs.
* The hardware costs (EXIT_NS and friends) are orders of magnitude for a 2012 Xeon without
  pause-loop exiting (the thread's "non-PLE hardware"), UNVERIFIED, and not fitted to the
  thread's table: an x2APIC IPI in physical mode is one ICR write (one exit) per target,
  delivery costs the target an exit and an injection, the handler's EOI another exit.
  Their values, with a low and a high each, are engine/costs.py's estimates; a run reads
  them at its `TlbConfig.level` (every claim is computed at low, central and high).
* The guest tick matters only to the patch's `halt()`, which returns on any interrupt:
  GUEST_HZ is the kernel's Kconfig default (HZ_250); the thread's guest config is unknown.
* The workload is ebizzy 0.3 (ltp utils/benchmark/ebizzy-0.3/ebizzy.c), 2 threads a CPU
  by default (`threads = 2 * sysconf(_SC_NPROCESSORS_ONLN)`), both of one mm, so the
  model runs one record stream per vCPU: each record is
  `alloc_mem(chunk_size)`, a memcpy of a 512 KiB chunk (the default chunk_size is 64 Ki
  records of 8 bytes), a bsearch, and `free_mem()`.  The model takes the free to be a
  munmap under mmap_sem held for write, the flush inside it (mmap_sem.py: glibc serves a
  512 KiB malloc with mmap, above its 128 KiB M_MMAP_THRESHOLD; a glibc whose dynamic
  threshold moved it into a thread's arena would trim with MADV_DONTNEED under the read
  lock instead, and threads would never sleep — which one the thread's guest ran is
  UNVERIFIED), so each record ends in a remote TLB flush of the process's mm and the next
  one refaults the buffer.  WORK_NS (memcpy + 128 refaults + search, about 250 µs) is an
  estimate, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..costs import at

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

# -- the host: CFS of early 2012 on 8 pCPUs ---------------------------------------------
SCHED_FACTOR = 4  # 1 + ilog2(8)
SCHED_LATENCY_NS = 6 * NS_PER_MS * SCHED_FACTOR  # 24 ms
SCHED_MIN_GRANULARITY_NS = 750 * NS_PER_US * SCHED_FACTOR  # 3 ms
SCHED_WAKEUP_GRANULARITY_NS = 1 * NS_PER_MS * SCHED_FACTOR  # 4 ms
SCHED_NR_LATENCY = 8

# -- the hardware (UNVERIFIED orders of magnitude, non-PLE 2012 Xeon), central values ----
CONTEXT_SWITCH_NS = int(at("CONTEXT_SWITCH_NS"))  # schedule(), vcpu_put/load, VM entry
EXIT_NS = int(at("EXIT_NS"))  # one VM exit, KVM's handling and the re-entry
IPI_SEND_NS = EXIT_NS  # one ICR write per destination (x2APIC physical mode)
IPI_DELIVER_NS = EXIT_NS  # the host IPI to the target's pCPU, its exit and injection
HANDLER_NS = EXIT_NS + int(at("HANDLER_EXTRA_NS"))  # local_flush_tlb + the EOI's exit
KICK_NS = EXIT_NS  # the KVM_HC_KICK_CPU hypercall of the last acknowledger
FLUSH_ON_ENTRY_NS = int(at("FLUSH_ON_ENTRY_NS"))  # kvm_vcpu_flush_tlb_guest() at entry
PAUSE_LOOP_NS = int(at("PAUSE_LOOP_NS"))  # one cpu_relax() iteration of the patch's loop

# -- the patch (the PV-flush thread)
# ------------------------------------------------------------------
PV_FLUSH_LOOP = 1024  # `int loop = 1024;`
PV_FLUSH_SPIN_NS = (PV_FLUSH_LOOP - 1) * PAUSE_LOOP_NS  # `--loop`: 1023 iterations

# -- the guest -------------------------------------------------------------------------------
GUEST_HZ = 250
TICK_NS = NS_PER_S // GUEST_HZ
WORK_NS = int(at("EBIZZY_RECORD_NS"))  # one ebizzy record (estimate, see above)
WORK_JITTER = 0.1  # each record takes WORK_NS × U(0.9, 1.1)

VM_COUNTS = (1, 2, 4, 8)
VCPUS_PER_VM = 8
PCPUS = 8


def sched_period(nr_running: int) -> int:
    """`__sched_period()`: the latency, stretched when more than sched_nr_latency run."""
    if nr_running > SCHED_NR_LATENCY:
        return nr_running * SCHED_MIN_GRANULARITY_NS
    return SCHED_LATENCY_NS


def sched_slice(nr_running: int) -> int:
    """`sched_slice()` for equal weights: the period shared by the runnable tasks."""
    n = max(1, nr_running)
    return sched_period(n) // n


@dataclass(frozen=True, slots=True)
class TlbCosts:
    """The model's time costs at one level of engine/costs.py's estimates."""

    exit_ns: int
    context_switch_ns: int
    handler_ns: int
    flush_on_entry_ns: int
    pause_loop_ns: int
    work_ns: int
    host_tick_ns: int  # 1 s / HOST_HZ: CFS ends a slice only on a tick

    @classmethod
    def at(cls, level: str = "central") -> TlbCosts:
        exit_ns = int(at("EXIT_NS", level))
        return cls(
            exit_ns=exit_ns,
            context_switch_ns=int(at("CONTEXT_SWITCH_NS", level)),
            handler_ns=exit_ns + int(at("HANDLER_EXTRA_NS", level)),
            flush_on_entry_ns=int(at("FLUSH_ON_ENTRY_NS", level)),
            pause_loop_ns=int(at("PAUSE_LOOP_NS", level)),
            work_ns=int(at("EBIZZY_RECORD_NS", level)),
            host_tick_ns=NS_PER_S // int(at("HOST_HZ", level)),
        )

    @property
    def spin_ns(self) -> int:
        """The patch's spin: `--loop` from 1024, 1023 cpu_relax() iterations."""
        return (PV_FLUSH_LOOP - 1) * self.pause_loop_ns


@dataclass(frozen=True, slots=True)
class TlbConfig:
    """One run: `vms` VMs of 8 vCPUs on 8 pCPUs, one flush protocol, one seed."""

    vms: int = 2
    protocol: str = "baseline"
    seed: int = 1
    duration_ns: int = 500 * NS_PER_MS
    warmup_ns: int = SCHED_LATENCY_NS  # records before this are not counted
    vcpus_per_vm: int = VCPUS_PER_VM
    pcpus: int = PCPUS
    level: str = "central"  # which of engine/costs.py's values the costs take
    work_jitter: float = WORK_JITTER
    tick_ns: int = TICK_NS
    phase_spread_ns: int = SCHED_LATENCY_NS  # the pCPUs' start phases: over one period

    @property
    def costs(self) -> TlbCosts:
        return TlbCosts.at(self.level)

    @property
    def work_ns(self) -> int:
        return self.costs.work_ns

    @property
    def spin_ns(self) -> int:
        return self.costs.spin_ns

    def __post_init__(self) -> None:
        if self.vms < 1 or self.vcpus_per_vm < 1 or self.pcpus < 1:
            raise ValueError("a run needs at least one VM, one vCPU and one pCPU")
        if self.vcpus_per_vm > self.pcpus:
            raise ValueError("each vCPU of a VM starts on its own pCPU")
        if self.duration_ns <= self.warmup_ns:
            raise ValueError("the run must last longer than its warm-up")
