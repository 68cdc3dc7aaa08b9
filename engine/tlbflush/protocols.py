"""The four remote TLB flush protocols the thread-001 thread compares.

* `baseline` — x86 `flush_tlb_others_ipi()` of 2012 (arch/x86/mm/tlb.c): write the
  targets (`mm_cpumask(mm)` but the sender) into its `flush_cpumask`, IPI every target, then
  `while (!cpumask_empty(...)) cpu_relax();`.  A target acknowledges in
  `smp_invalidate_interrupt()` when it runs: a preempted target stalls the sender
  ("the whole wake and wait for flush thing seems daft", Ingo Molnar).
* `gang` — the same IPIs and spin, with the host gang-scheduling each VM's vCPUs (the
  "gang scheduling hack" of the thread): a target never sits preempted while its sender
  runs, at the price of strict time slots (a halted vCPU's pCPU idles in its VM's slot).
* `pv_flush` — the thread's patch (Nikunj A Dadhania, 20 Feb 2012): spin at most 1023
  cpu_relax(), then `halt()`; the acknowledger that empties the mask calls
  `kvm_kick_cpu(f->sender_cpu)` (KVM_HC_KICK_CPU, from Raghavendra K T's pv-spinlock
  series).  `halt()` returns on any interrupt, and the patch does not re-check the mask
  afterwards: the model counts such returns as `early_returns`.  Preempted targets get
  the IPI like any other (the patch sets no flag for them).
* `flush_on_enter` — Peter Zijlstra's reply ("you don't need to wait for it, all you need
  to make sure is that when that vcpu wakes up it does the flush") and today's
  `kvm_flush_tlb_multi()` (docs/kvm.md §7): a target whose steal-time `preempted` byte
  says KVM_VCPU_PREEMPTED gets KVM_VCPU_FLUSH_TLB set instead of an IPI, and the host
  flushes its TLB in `record_steal_time()` before the next entry; a CPU in lazy TLB mode
  (idle) gets no IPI either (`native_flush_tlb_multi()`'s `tlb_is_not_lazy()`).  The
  sender re-checks its mask while it waits, as in Peter's `goto again` loop, so a target
  preempted after the IPI was sent is flagged too (today's kernel checks only once, before
  the IPIs).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FlushProtocol:
    name: str
    gang: bool  # the host gang-schedules each VM's vCPUs
    halt_after_spin: bool  # spin PV_FLUSH_SPIN_NS, then halt() (the thread's patch)
    kick_sender: bool  # the last acknowledger kicks the sender (kvm_kick_cpu)
    flag_preempted: bool  # KVM_VCPU_FLUSH_TLB for preempted targets, no IPI
    summary: str


PROTOCOLS: dict[str, FlushProtocol] = {
    "baseline": FlushProtocol(
        "baseline", False, False, False, False, "IPI every target, spin until all ack"
    ),
    "gang": FlushProtocol(
        "gang", True, False, False, False, "IPI and spin; host gang-schedules each VM"
    ),
    "pv_flush": FlushProtocol(
        "pv_flush", False, True, True, False, "spin 1023 cpu_relax(), halt(); last ack kicks"
    ),
    "flush_on_enter": FlushProtocol(
        "flush_on_enter",
        False,
        False,
        False,
        True,
        "no IPI to preempted vCPUs: flag, flush on entry",
    ),
}
PROTOCOL_NAMES: tuple[str, ...] = tuple(PROTOCOLS)


def protocol(name: str) -> FlushProtocol:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"unknown flush protocol {name!r}: {', '.join(PROTOCOLS)}") from None
