"""The kernel against the model on one guest program: one row per quantity.

Each row is (what, kernel, model, explained): `explained` is None where the two agree,
else the mechanism the model lacks, named from evidence in the kernel's own recording
(an event or statistic only that mechanism produces) or in the program (a memslot
flag only that mechanism reacts to).  A difference with no such evidence stays
"unexplained" — a bug to find, never a number to adjust.

Kernel quantities come from its trace (events counted as `replay` parses them) and its
`KVM_GET_STATS_FD` deltas; model quantities from the same program run on
`engine.mmu.shadow.ShadowMmu` (`engine.kvm.model`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..events import Event
from ..memslots.constants import KVM_MEM_LOG_DIRTY_PAGES
from ..mmu.spte import SpteConfig
from .model import ModelRun, model_stats
from .program import GuestProgram, MemslotOp

UNEXPLAINED = "unexplained"
EVENT_ROWS = (
    ("sptes set (kvm_mmu_set_spte)", "kvm_mmu_set_spte"),
    ("shadow pages zapped (kvm_mmu_prepare_zap_page)", "kvm_mmu_prepare_zap_page"),
    ("fast zaps (kvm_mmu_zap_all_fast)", "kvm_mmu_zap_all_fast"),
    ("pages unsynced (kvm_mmu_unsync_page)", "kvm_mmu_unsync_page"),
    ("guest page-table walks (kvm_mmu_pagetable_walk)", "kvm_mmu_pagetable_walk"),
    ("guest ptes read (kvm_mmu_paging_element)", "kvm_mmu_paging_element"),
    ("accessed bits set (kvm_mmu_set_accessed_bit)", "kvm_mmu_set_accessed_bit"),
    ("dirty bits set (kvm_mmu_set_dirty_bit)", "kvm_mmu_set_dirty_bit"),
)
STAT_ROWS = (
    "pf_taken", "pf_fixed", "pf_emulate", "pf_spurious", "pf_fast", "pf_guest",
    "pf_mmio_spte_created",
    "mmu_shadow_zapped", "mmu_cache_miss", "mmu_unsync", "pages_4k",
    "max_mmu_page_hash_collisions",
)  # fmt: skip

MECHANISMS = {
    "unsync": "unsync pages (mmu_try_to_unsync_pages, kvm_mmu_sync_page): the model "
    "write-protects every shadowed table and emulates the store",
    "prefetch": "pte prefetch (FNAME(pte_prefetch)): the kernel maps up to 7 accessed "
    "neighbours of a faulting gpte without a fault",
    "dirty_log": "dirty logging (kvm_mmu_slot_apply_flags write-protects a logged slot, "
    "KVM_GET_DIRTY_LOG write-protects the pages it reports)",
}


@dataclass
class KernelCounts:
    """What the kernel's recording says."""

    events: Counter[str] = field(default_factory=Counter)
    created: Counter[tuple[int, bool]] = field(default_factory=Counter)
    last_gen: int | None = None

    def add(self, events: Iterable[Event]) -> None:
        for event in events:
            self.events[event.name] += 1
            if event.name == "kvm_mmu_get_page":
                self.last_gen = int(event.fields.get("gen", 0))
                if event.fields.get("created"):
                    key = (int(event.fields["level"]), bool(event.fields["direct"]))
                    self.created[key] += 1


@dataclass(frozen=True, slots=True)
class Row:
    what: str
    kernel: int | None
    model: int | None
    explained: str | None

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "kernel": self.kernel, "model": self.model,
                "explained": self.explained}  # fmt: skip


def _evidence(kernel: KernelCounts, program: GuestProgram) -> list[str]:
    """The mechanisms the kernel demonstrably used that the model has not got."""
    found = []
    if kernel.events["kvm_mmu_unsync_page"] or kernel.events["kvm_mmu_sync_page"]:
        found.append("unsync")
    if kernel.events["kvm_mmu_set_spte"] > kernel.events["kvm_mmu_spte_requested"]:
        found.append("prefetch")
    ops = [op for sl in program.slices for op in sl.before]
    if any(isinstance(op, MemslotOp) and op.flags & KVM_MEM_LOG_DIRTY_PAGES for op in ops):
        found.append("dirty_log")
    return found


def compare(
    program: GuestProgram,
    kernel: KernelCounts,
    kernel_stats: dict[str, int],
    kernel_mmio_exits: int,
    model: ModelRun,
    model_missing: Iterable[str] = (),
) -> list[Row]:
    """The rows; `model_missing` names mechanisms the model is known to lack (by key
    of MECHANISMS) — only those with evidence in this run are cited."""
    evidence = [m for m in _evidence(kernel, program) if m in set(model_missing)]
    why = "; ".join(MECHANISMS[m] for m in evidence) or UNEXPLAINED

    def row(what: str, k: int | None, m: int | None) -> Row:
        return Row(what, k, m, None if k == m else why)

    rows = []
    for level, direct in sorted(set(kernel.created) | set(model.created), reverse=True):
        role = "direct" if direct else "indirect"
        what = f"shadow pages created, level {level} {role} (kvm_mmu_get_page new)"
        rows.append(row(what, kernel.created[(level, direct)], model.created[(level, direct)]))
    for what, name in EVENT_ROWS:
        rows.append(row(what, kernel.events[name], model.events[name]))
    rows.append(row("MMIO exits (KVM_EXIT_MMIO)", kernel_mmio_exits, model.mmio_exits))
    rows.append(row("emulated instructions (kvm_emulate_insn)",
                    kernel.events["kvm_emulate_insn"], model.emulated))  # fmt: skip
    rows.append(row("rmap max size (max_mmu_rmap_size)",
                    kernel_stats.get("max_mmu_rmap_size"), model.rmap_max))  # fmt: skip
    rows.append(row("mmu_valid_gen (last kvm_mmu_get_page)", kernel.last_gen, model.last_gen))
    ours = model_stats(model)
    for name in STAT_ROWS:
        if name in kernel_stats and name in ours:
            rows.append(row(f"stat {name}", kernel_stats[name], ours[name]))
    return rows


def host_config(mmio_caching: bool, host_phys_bits: int | None) -> SpteConfig:
    """The model's spte configuration for a shadow-paging host."""
    return SpteConfig(ept=False, host_phys_bits=host_phys_bits or 46, mmio_caching=mmio_caching)


# What the engine's shadow MMU does not model yet: nothing these programs use.  Pte
# prefetch and unsync pages (engine/mmu/shadow/mmu.py) and dirty logging
# (engine/mmu/dirty_log.py) are modelled; MECHANISMS keeps their names for a
# comparison against an older model (ShadowMmu(unsync=False), before 2.6.27).
MODEL_MISSING: tuple[str, ...] = ()
