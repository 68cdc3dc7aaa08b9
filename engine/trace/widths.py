"""Which tracepoint fields are 64 bits wide in the kernel, for `replay --jsonl --hex64`.

JSON readers that hold numbers as doubles (jq 1.6, JavaScript) round integers above
2**53: an spte such as 0x8600000123456867 and its successor print equal.  `--jsonl`
(docs/architecture.md §6.3) keeps fields as ints; `--hex64` writes the fields below,
whose `TP_STRUCT__entry` type is `u64`, `gfn_t`, `gpa_t`, `unsigned long` or a pointer,
as `"0x…"` strings instead, every value of them (not only large ones), so a field has one
JSON type throughout a trace.

Sources: arch/x86/kvm/mmu/mmutrace.h (KVM_MMU_PAGE_FIELDS `__u64 gfn`; mark_mmio_spte
`void *sptep`, `gfn_t gfn`; kvm_mmu_set_spte `u64 gfn, spte, sptep`; fast_page_fault
`gpa_t cr2_or_gpa`, `u64 error_code`, `u64 *sptep`, `u64 old_spte, new_spte`; …),
arch/x86/kvm/trace.h (kvm_page_fault `unsigned long guest_rip`, `u64 fault_address,
error_code`; kvm_entry `unsigned long rip`; kvm_exit `info1, info2` u64, `intr_info,
error_code` u32) and
include/trace/events/kvm.h (kvm_mmio `u64 gpa, val`), Linux 6.x.  Field names are the
ones `engine.trace.tracepoints` gives (the printk's labels, with the earlier names
docs/architecture.md §6.3 keeps).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_SP = frozenset({"gfn"})  # KVM_MMU_PAGE_FIELDS: the rest are role bits and counts (u32)

HEX64_FIELDS: Mapping[str, frozenset[str]] = {
    "kvm_mmu_get_page": _SP,
    "kvm_mmu_prepare_zap_page": _SP,
    "kvm_mmu_sync_page": _SP,
    "kvm_mmu_unsync_page": _SP,
    "kvm_tdp_mmu_spte_changed": frozenset({"gfn", "old_spte", "new_spte"}),
    "mark_mmio_spte": frozenset({"sptep", "gfn"}),
    "kvm_mmu_set_spte": frozenset({"gfn", "spte", "sptep"}),
    "kvm_mmu_spte_requested": frozenset({"gfn", "pfn"}),
    "fast_page_fault": frozenset(
        {"cr2_or_gpa", "error_code", "sptep", "old_spte", "new_spte", "gva", "old", "new"}
    ),
    "handle_mmio_page_fault": frozenset({"addr", "gfn"}),
    "check_mmio_spte": frozenset({"spte"}),
    "kvm_mmu_pagetable_walk": frozenset({"addr"}),
    "kvm_mmu_paging_element": frozenset({"pte"}),
    "kvm_mmu_set_accessed_bit": frozenset({"gpa"}),
    "kvm_mmu_set_dirty_bit": frozenset({"gpa"}),
    "kvm_mmu_split_huge_page": frozenset({"gfn", "spte"}),
    "kvm_page_fault": frozenset(
        {"guest_rip", "fault_address", "error_code", "rip", "address"}  # earlier names last
    ),
    "kvm_mmio": frozenset({"gpa", "val"}),
    "kvm_exit": frozenset({"guest_rip", "info1", "info2"}),
    "kvm_entry": frozenset({"rip"}),
}


def hex64(event_json: dict[str, Any]) -> dict[str, Any]:
    """`event_json` (the shape of docs/architecture.md §6.3) with its 64-bit fields as
    `"0x…"` strings."""
    wide = HEX64_FIELDS.get(event_json["event"])
    if wide:
        fields = event_json["fields"]
        for name in wide.intersection(fields):
            value = fields[name]
            if isinstance(value, int) and not isinstance(value, bool):
                fields[name] = f"{value:#x}"
    return event_json
