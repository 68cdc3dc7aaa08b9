"""The kernel against the model on one guest program: event by event (`align`), and one
row per quantity, as the summary.

Each row is (what, kernel, model, explained): `explained` is None where the two agree,
else the mechanism the model lacks, named from evidence in the kernel's own recording
(an event or statistic only that mechanism produces) or in the program (a memslot
flag only that mechanism reacts to).  A difference with no such evidence stays
"unexplained" — a bug to find, never a number to adjust.

Kernel quantities come from its trace (events counted as `replay` parses them) and its
`KVM_GET_STATS_FD` deltas; model quantities from the same program run on
`engine.mmu.shadow.ShadowMmu` (`engine.kvm.model`).  `Comparison` follows a recording
as it goes: the kernel's events as each drain brings them, the model one slice at a time;
`Verdict` is the outcome: equal only when every event and every row is, and the ring
buffer lost nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..events import Event
from ..memslots.constants import KVM_MEM_LOG_DIRTY_PAGES
from ..mmu.spte import SpteConfig
from ..trace.reader import iter_events
from .align import Alignment, Difference
from .host import HostMmu, host_phys_bits
from .model import ModelRun, ModelRunner, model_stats
from .program import GuestProgram, MemslotOp, build_program

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
    "mmu_shadow_zapped", "mmu_cache_miss", "mmu_unsync", "pages_4k", "pages_2m",
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


@dataclass
class Verdict:
    """The outcome of a comparison (`mmuscope kvm --compare --json`'s object)."""

    rows: list[Row]
    alignment: Alignment
    lost: int
    first: Difference | None

    @property
    def equal(self) -> bool:
        return (
            self.first is None
            and self.lost == 0
            and self.alignment.equal
            and all(r.explained is None for r in self.rows)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "events": self.alignment.events(),
            "lost": self.lost,
            "first_difference": None if self.first is None else self.first.to_json(),
            "rows": [r.to_json() for r in self.rows],
            "kinds": self.alignment.kinds(),
        }


class Comparison:
    """A recording of `program` against the model, fed as the run goes: `kernel_text`
    with each drain of the instance, `run_slice` after each slice the kernel ran."""

    def __init__(self, program: GuestProgram, host: HostMmu, address_spaces: int = 1) -> None:
        self.program = build_program(program.name, program.pages, program.children)
        cfg = host_config(host.mmio_caching, host_phys_bits())
        self.alignment = Alignment()
        self.kernel = KernelCounts()
        self.model = ModelRunner(self.program, cfg, address_spaces=address_spaces,
                                 listen=self._model_event)  # fmt: skip
        self._rest = ""
        self._kernel_slices = 0  # slices the kernel has run (their events drained)
        self._model_slices = 0  # slices the model has finished
        self._steps: Iterator[None] | None = None  # the model's slice under way

    def _model_event(self, event: Event) -> None:
        freed = None
        if event.name == "kvm_mmu_prepare_zap_page":
            freed = self.model.zapped_page(event)
        self.alignment.add_model(event, freed=freed)

    def kernel_events(self, events: list[Event]) -> None:
        """The kernel's events, as the ring buffers' drains bring them (`record`): the
        model goes on, an access at a time within the slice the kernel ran, until
        none of them waits, so that neither side's events pile up."""
        self.kernel.add(events)
        self.alignment.add_kernel(events)
        while self.alignment.kernel_waiting() and self._model_step(self._kernel_slices + 1):
            pass

    def _model_step(self, slices: int) -> bool:
        """One step of the model within its first `slices` slices (False: none left)."""
        while True:
            if self._steps is None:
                if self._model_slices >= min(slices, len(self.program.slices)):
                    return False
                self._steps = self.model.steps(self.program.slices[self._model_slices])
            if next(self._steps, False) is None:
                return True
            self._steps = None
            self._model_slices += 1

    def kernel_text(self, text: str) -> None:
        """Kernel trace text (a kept `--trace-out`); a line cut at the end waits for the
        rest."""
        *lines, self._rest = (self._rest + text).split("\n")
        self.kernel_events(list(iter_events(line + "\n" for line in lines)))

    def run_slice(self, index: int) -> None:
        """The kernel ran slice `index` (and its events were drained): the model runs it
        to its end."""
        self._kernel_slices = index + 1
        while self._model_step(self._kernel_slices):
            pass

    def rows(self, stats: dict[str, int], mmio_exits: int) -> list[Row]:
        return compare(self.program, self.kernel, stats, mmio_exits, self.model.run,
                       MODEL_MISSING)  # fmt: skip

    def so_far(self, stats: dict[str, int], mmio_exits: int) -> Verdict:
        """The verdict after the slices run so far (nothing lost yet known)."""
        return Verdict(self.rows(stats, mmio_exits), self.alignment, 0, self.alignment.first)

    def verdict(self, stats: dict[str, int], mmio_exits: int, lost: int) -> Verdict:
        """After the run: the rest of the text, then every event paired or not."""
        if self._rest:
            self.kernel_text("\n")
        first = self.alignment.finish()
        return Verdict(self.rows(stats, mmio_exits), self.alignment, lost, first)
