"""The dataset's columns, as data: what a row of `DIR/source=NAME/part-*.parquet` holds.

One row per trace record (the events `replay --summary` counts, in file order):

- the record's head: `ts` (nanoseconds, int64: ``12.345678`` is 12345678000; a trace
  whose clock prints a bare counter keeps the counter), `cpu`, `pid`, `comm`, `seq`
  (the record's number in its trace, from 0: ties of `ts` keep the file's order);
- `system`: the tracepoint's system, ``kvm`` or ``kvmmmu`` (arch/x86/kvm/trace.h,
  include/trace/events/kvm.h, arch/x86/kvm/mmu/mmutrace.h), ``mmuscope`` for the
  model's own events (named after the kernel function, no tracepoint: `MODEL_EVENTS`
  of `engine.events`, docs/model-events.md), NULL for any other system's (a trace's
  text does not name the system; `sched_switch` is NULL);
- `event`: the tracepoint's name;
- the typed columns of the fields MMU events share (`TYPED`), NULL where the event
  has no such field;
- `fields`: every other field, ``MAP(VARCHAR, VARCHAR)``, by the names the templates
  parse them with, as ``replay --jsonl`` prints them (ints in decimal, bools
  ``true``/``false``; ``--jsonl`` adds what the kernel's record holds that the text
  only implies, ``kvm_mmu_set_spte``'s ``r, x, u``, ``kvm_mmio``'s ``type`` as a number:
  `engine.trace.kernel_fields`); an event whose text no template matches has one field,
  ``text``.

A typed column takes the kernel's field of the same name, except two renamings:
``vcpu`` is ``vcpu_id`` (kvm_page_fault, fast_page_fault, kvm_exit, ...), and the
shadow-page events' ``gen`` (``sp gen``, `kvm_mmu_page`'s ``mmu_valid_gen``) is
``mmu_valid_gen``; ``mark_mmio_spte``'s ``gen`` is the MMIO generation, not the
MMU's, and stays in `fields`.  A value its column cannot hold (a negative gfn, a pid
past 2**31) stays in `fields` too, so no value is ever lost.

The partition column `source` is not stored in the files: readers take it from the
directory name (``source=NAME``), as Hive partitioning does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..events import MODEL_EVENTS
from ..trace.tracepoints import TRACEPOINTS

PARTITION = "source"
PART_GLOB = "part-*.parquet"  # the event files of one source
MEMSLOTS_FILE = "_memslots.parquet"  # a source's memslots, when a layout was given


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its name and its Arrow/Parquet type (`int32`, `int64`, `uint64`,
    `string`), and the range of ints it holds."""

    name: str
    type: str

    @property
    def bounds(self) -> tuple[int, int]:
        bits = {"int32": 32, "int64": 64, "uint64": 64}[self.type]
        return (
            (0, (1 << bits) - 1)
            if self.type.startswith("u")
            else (-(1 << bits - 1), (1 << bits - 1) - 1)
        )

    def holds(self, value: object) -> bool:
        """Whether a field's value fits this (integer) column."""
        low, high = self.bounds
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


HEAD = (
    Column("ts", "int64"),
    Column("cpu", "int32"),
    Column("pid", "int32"),
    Column("comm", "string"),
    Column("system", "string"),
    Column("event", "string"),
    Column("seq", "int64"),
)
# u64 in the kernel and often above 2**63 (bit 63 is NX, SPTE_MMU_PRESENT_MASK sits
# high, sptep is a kernel pointer): uint64; gfns and gpas (52 bits), pfns and error
# codes fit int64
TYPED = (
    Column("vcpu", "int32"),
    Column("as_id", "int32"),
    Column("gfn", "int64"),
    Column("gpa", "int64"),
    Column("level", "int32"),
    Column("spte", "uint64"),
    Column("old_spte", "uint64"),
    Column("new_spte", "uint64"),
    Column("sptep", "uint64"),
    Column("pfn", "int64"),
    Column("error_code", "int64"),
    Column("role", "int64"),
    Column("mmu_valid_gen", "int64"),
)
FIELDS = "fields"  # MAP(VARCHAR, VARCHAR): the other fields
COLUMNS = (*HEAD, *TYPED)
TYPED_BY_NAME = {c.name: c for c in TYPED}

# KVM_MMU_PAGE_FIELDS' events (mmutrace.h): their `sp gen` is the page's mmu_valid_gen
SHADOW_PAGE_EVENTS = frozenset(
    {"kvm_mmu_get_page", "kvm_mmu_prepare_zap_page", "kvm_mmu_sync_page", "kvm_mmu_unsync_page"}
)
RENAMED = {"vcpu_id": "vcpu"}


def column_of(event: str, field: str) -> Column | None:
    """The typed column that holds `event`'s field `field`, or None (then `fields`)."""
    if field == "gen":
        return TYPED_BY_NAME["mmu_valid_gen"] if event in SHADOW_PAGE_EVENTS else None
    return TYPED_BY_NAME.get(RENAMED.get(field, field))


# The x86 kernel's tracepoints by system, as 6.18's tracefs lists them (events/kvm,
# events/kvmmmu), with the names older kernels used (kvm_mmu_invalidate_zap_all_pages:
# 3.11 to 5.0, the fast-zap thread (kvm, 2013); kvm_mmu_audit: before mmu_audit.c went
# in 5.14; kvm_set_spte_hva, kvm_age_page: before 5.x's memslot-range notifiers).
_KVMMMU = {
    *(name for name, tp in TRACEPOINTS.items() if tp.system == "kvmmmu"),
    "check_mmio_spte", "fast_page_fault", "handle_mmio_page_fault", "kvm_mmu_get_page",
    "kvm_mmu_pagetable_walk", "kvm_mmu_paging_element", "kvm_mmu_prepare_zap_page",
    "kvm_mmu_set_accessed_bit", "kvm_mmu_set_dirty_bit", "kvm_mmu_set_spte",
    "kvm_mmu_split_huge_page", "kvm_mmu_spte_requested", "kvm_mmu_sync_page",
    "kvm_mmu_unsync_page", "kvm_mmu_walker_error", "kvm_mmu_zap_all_fast",
    "kvm_tdp_mmu_spte_changed", "mark_mmio_spte",
    "kvm_mmu_invalidate_zap_all_pages", "kvm_mmu_audit",
}  # fmt: skip
_KVM = {
    *(name for name, tp in TRACEPOINTS.items() if tp.system == "kvm"),
    "kvm_ack_irq", "kvm_age_hva", "kvm_apic", "kvm_apic_accept_irq", "kvm_apic_ipi",
    "kvm_apicv_accept_irq", "kvm_apicv_inhibit_changed", "kvm_async_pf_completed",
    "kvm_async_pf_not_present", "kvm_async_pf_ready", "kvm_async_pf_repeated_fault",
    "kvm_avic_doorbell", "kvm_avic_ga_log", "kvm_avic_incomplete_ipi",
    "kvm_avic_kick_vcpu_slowpath", "kvm_avic_unaccelerated_access", "kvm_cpuid", "kvm_cr",
    "kvm_dirty_ring_exit", "kvm_dirty_ring_push", "kvm_dirty_ring_reset",
    "kvm_emulate_insn", "kvm_entry", "kvm_eoi", "kvm_exit", "kvm_fast_mmio", "kvm_fpu",
    "kvm_halt_poll_ns", "kvm_hv_flush_tlb", "kvm_hv_flush_tlb_ex", "kvm_hv_hypercall",
    "kvm_hv_hypercall_done", "kvm_hv_notify_acked_sint", "kvm_hv_send_ipi",
    "kvm_hv_send_ipi_ex", "kvm_hv_stimer_callback", "kvm_hv_stimer_cleanup",
    "kvm_hv_stimer_expiration", "kvm_hv_stimer_set_config", "kvm_hv_stimer_set_count",
    "kvm_hv_stimer_start_one_shot", "kvm_hv_stimer_start_periodic",
    "kvm_hv_syndbg_get_msr", "kvm_hv_syndbg_set_msr", "kvm_hv_synic_send_eoi",
    "kvm_hv_synic_set_irq", "kvm_hv_synic_set_msr", "kvm_hv_timer_state", "kvm_hypercall",
    "kvm_inj_exception", "kvm_inj_virq", "kvm_invlpga", "kvm_ioapic_delayed_eoi_inj",
    "kvm_ioapic_set_irq", "kvm_mmio", "kvm_msi_set_irq", "kvm_msr", "kvm_nested_intercepts",
    "kvm_nested_intr_vmexit", "kvm_nested_vmenter", "kvm_nested_vmenter_failed",
    "kvm_nested_vmexit", "kvm_nested_vmexit_inject", "kvm_page_fault",
    "kvm_pi_irte_update", "kvm_pic_set_irq", "kvm_pio", "kvm_ple_window_update",
    "kvm_pml_full", "kvm_pv_eoi", "kvm_pv_tlb_flush", "kvm_pvclock_update",
    "kvm_rmp_fault", "kvm_set_irq", "kvm_skinit", "kvm_smm_transition",
    "kvm_test_age_hva", "kvm_track_tsc", "kvm_try_async_get_page", "kvm_unmap_hva_range",
    "kvm_update_master_clock", "kvm_userspace_exit", "kvm_vcpu_wakeup",
    "kvm_vmgexit_enter", "kvm_vmgexit_exit", "kvm_vmgexit_msr_protocol_enter",
    "kvm_vmgexit_msr_protocol_exit", "kvm_wait_lapic_expire", "kvm_write_tsc_offset",
    "kvm_xen_hypercall", "vcpu_match_mmio",
    "kvm_set_spte_hva", "kvm_age_page",
}  # fmt: skip
SYSTEM_OF: dict[str, str] = {
    **dict.fromkeys(MODEL_EVENTS, "mmuscope"),
    **dict.fromkeys(_KVM, "kvm"),
    **dict.fromkeys(_KVMMMU, "kvmmmu"),
}
SYSTEMS = ("kvm", "kvmmmu", "mmuscope")


def system_of(event: str) -> str | None:
    """``kvm``, ``kvmmmu``, ``mmuscope`` (the model's own event), or None."""
    return SYSTEM_OF.get(event)
