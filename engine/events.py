"""Events: what the engine did, shaped like a kernel tracepoint record.

Everything the engine does reaches the screens as one stream of events
(docs/architecture.md §2).  An event is small immutable data with the fields of the
tracepoint it imitates (or of the kernel function, where KVM has no tracepoint), and the
`ts`/`cpu`/`pid`/`comm` columns a `trace-cmd report` line carries.  The engine hands
events to a listener; the app and the trace parser both speak this type.

It is also the one place that knows which events are the model's own (docs/architecture.md
§2.2, docs/model-events.md): `MODEL_EVENTS` (names no kernel has a tracepoint for, each
with why the model emits it) and `KERNEL_SHAPES` (kernel tracepoints the model also emits
with fields of its own).  Every view asks `is_model_event` (or `model_name`) and marks
such an event: a `*` after its name in text, ``"model_only": true`` in JSON, the system
``mmuscope`` in the dataset.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

FieldValue = int | str | bool

# Fields the kernel's TP_printk prints with %u/%d (counts and ids); the rest in hex.
DECIMAL_FIELDS = frozenset({"vcpu", "vcpu_id", "slot", "visited", "len", "as_id", "step"})


@dataclass(frozen=True, slots=True)
class Event:
    """One record: the tracepoint's name and fields, and trace-cmd's columns (frozen)."""

    name: str
    fields: Mapping[str, FieldValue] = field(default_factory=dict)
    ts: float = 0.0
    cpu: int = 0
    pid: int = 0
    comm: str = "mmuscope"

    def to_json(self) -> dict[str, Any]:
        """The JSON shape of docs/architecture.md §6.3: event, ts, cpu, pid, comm,
        fields, and ``"model_only": true`` for the model's own (`is_model_event`)."""
        obj: dict[str, Any] = {
            "event": self.name,
            "ts": self.ts,
            "cpu": self.cpu,
            "pid": self.pid,
            "comm": self.comm,
            "fields": dict(self.fields),
        }
        if is_model_event(self.name, self.fields):
            obj["model_only"] = True
        return obj

    def format_fields(self) -> str:
        """`key=value` pairs, addresses and gfns in hex as kvm tracepoints print them."""
        return " ".join(
            f"{k}={v:#x}"
            if isinstance(v, int) and not isinstance(v, bool) and k not in DECIMAL_FIELDS
            else f"{k}={v}"
            for k, v in self.fields.items()
        )


Listener = Callable[[Event], None]

#: the mark after a model event's name, wherever text shows it (docs/model-events.md)
MODEL_MARK = "*"
MODEL_NOTE = "* mmuscope's own event, no tracepoint"

#: The model's own events: no kernel has a tracepoint of the name (none is in a 6.18
#: host's ``events/*/*/format``; tests/test_model_events.py checks it where tracefs is).
#: Each is named after the kernel function (or the guest's, or POWER's) that does what it
#: reports; the value says why the model emits it.  docs/model-events.md lists them.
MODEL_EVENTS: Mapping[str, str] = {
    # the shadow MMU (arch/x86/kvm/mmu/mmu.c)
    "account_shadowed": "account_shadowed(): a guest page table became a shadow page's gfn"
    " and was write-protected (wrprot: sptes made read-only) - why a guest write to it faults",
    "kvm_mmu_unprotect_page": "kvm_mmu_unprotect_gfn_and_retry(): a write to a shadowed"
    " guest page table zapped its shadow pages (zapped: how many) instead of emulating it",
    # memslots (virt/kvm/kvm_main.c)
    "kvm_memslot_lookup": "search_memslots() and the caches in front of it: the slot a gfn"
    " is in and the nodes the lookup visited - the 2011 memslot-search thread's cost",
    "kvm_set_user_memory_region": "the KVM_SET_USER_MEMORY_REGION ioctl"
    " (kvm_set_memory_region()), its kind of change and its return value (ret)",
    "kvm_arch_memslots_updated": "kvm_swap_active_memslots(): the memslots generation moved"
    " (step: which part of the update), what invalidates cached MMIO sptes",
    "kvm_arch_flush_shadow_memslot": "kvm_invalidate_memslot(): a deleted or moved slot's"
    " sptes zapped before the slot goes",
    # the guest's side of a remote TLB flush (the PV-flush thread, lkml 2012)
    "flush_tlb_others_ipi": "the 2012 guest's native_flush_tlb_others(): a flush sends"
    " IPIs to the vCPUs in ipi_mask and spins until all acknowledge",
    "kvm_flush_tlb_multi": "the guest's kvm_flush_tlb_multi() (arch/x86/kernel/kvm.c):"
    " IPIs to running vCPUs, the KVM_VCPU_FLUSH_TLB flag for preempted ones",
    "smp_invalidate_interrupt": "the 2012 guest's IPI handler (arch/x86/mm/tlb.c): a"
    " target flushes and acknowledges the sender",
    "kvm_kick_cpu": "the PV-flush patch's kvm_kick_cpu(): the last acknowledger wakes the"
    " halted sender with the KVM_HC_KICK_CPU hypercall",
    # POWER Book3S HV, hash MMU (arch/powerpc/kvm/book3s_hv_rm_mmu.c, book3s_64_mmu_hv.c)
    "kvmppc_hpte_hv_fault": "kvmppc_hpte_hv_fault(): real mode classifies a guest fault"
    " (ret: forwarded, paged in, emulated) after searching the hash table",
    "kvmppc_hv_find_lock_hpte": "kvmppc_hv_find_lock_hpte(): the HPTE groups searched for"
    " a faulting address and the entries examined",
    "kvmppc_hv_emulate_mmio": "kvmppc_hv_emulate_mmio(): an MMIO access emulated",
    "kvmppc_hdsi": "the hypervisor data storage interrupt's outcome (virtual mode)",
    "kvmppc_book3s_hv_page_fault": "kvmppc_book3s_hv_page_fault(): a page the host"
    " paged out brought back and its HPTE made valid",
    "kvmppc_h_enter": "the H_ENTER hypercall (kvmppc_h_enter()): the guest adds an HPTE",
    "kvmppc_h_remove": "the H_REMOVE hypercall (kvmppc_h_remove()): the guest removes one",
    "kvmppc_h_bulk_remove": "the H_BULK_REMOVE hypercall: up to four HPTEs removed",
    "kvm_unmap_rmapp": "kvm_unmap_rmapp(): the host unmaps a guest page through its rmap",
}

#: Kernel tracepoints that the model also emits with fields of its own (the TLB-flush
#: simulation's, where the kernel's record lacks what the screen shows): each name's
#: kernel fields, as 6.18's ``events/*/*/format`` lists them.  An event of such a name
#: with any other field (but a parsed trace's ``text``) is the model's own.
KERNEL_SHAPES: Mapping[str, frozenset[str]] = {
    "sched_switch": frozenset(
        {"prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid", "next_prio"}
    ),
    "kvm_apic_accept_irq": frozenset({"apicid", "dm", "tm", "vec"}),
    "kvm_vcpu_wakeup": frozenset({"ns", "waited", "valid"}),
}
_TEXT = "text"  # the one field of an event parsed from a trace without its template


def is_model_event(name: str, fields: Mapping[str, FieldValue] | None = None) -> bool:
    """Whether the event is the model's own: a name no kernel has (`MODEL_EVENTS`), or a
    kernel tracepoint's name with a field the kernel's record lacks (`KERNEL_SHAPES`)."""
    if name in MODEL_EVENTS:
        return True
    kernel = KERNEL_SHAPES.get(name)
    return (
        kernel is not None
        and fields is not None
        and any(key not in kernel and key != _TEXT for key in fields)
    )


def model_name(event: Event) -> str:
    """The event's name as text shows it: with `MODEL_MARK` after the model's own."""
    return event.name + MODEL_MARK if is_model_event(event.name, event.fields) else event.name
