"""The per-vCPU MMIO info cache: `vcpu->arch.mmio_gva`, `mmio_gfn`, `mmio_access`,
`mmio_gen` (arch/x86/kvm/x86.h, 6.18; Xiao Guangrong's "cache mmio info", 3.1, 2011).

`vcpu_cache_mmio_info()` remembers the last MMIO translation of a vCPU: from
`handle_mmio_page_fault()` after a current MMIO spte, and from
`kvm_handle_noslot_fault()` on every fault no memslot covers (MMIO caching on or off).
It holds while the memslots generation is the one it was filled under:
- `mmio_info_in_cache()`: a fault on a cached MMIO spte for that gva (shadow paging) or
  gpa (TDP) is RET_PF_EMULATE at once, before the spte is even read (no
  `check_mmio_spte`, no `handle_mmio_page_fault` line);
- `vcpu_match_mmio_gva()` in the emulator's `vcpu_mmio_gva_to_gpa()`: the gva's gpa
  without a guest walk (the `vcpu_match_mmio` tracepoint).
`vcpu_clear_mmio_info()`: INVLPG of that gva, or any gva at `kvm_mmu_sync_roots()`.
Not before 3.1: the 2011 eras (`enabled=False`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...events import FieldValue
from ...memslots.constants import KVM_MEMSLOT_GEN_UPDATE_IN_PROGRESS
from ..spte import (
    SpteConfig,
    check_mmio_spte_traced,
    get_mmio_spte_access,
    get_mmio_spte_gfn,
)

PAGE_MASK = ~0xFFF


@dataclass(slots=True)
class MmioInfo:
    gva: int  # page-aligned; 0 under TDP (no gva) and never matches
    gfn: int
    access: int
    gen: int


class VcpuMmioInfo:
    """Each vCPU's `mmio_gva/gfn/access/gen`, and how often it answered."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.info: dict[int, MmioInfo] = {}
        self.gva_hits = self.gpa_hits = 0

    def cache(self, vcpu: int, gva: int, gfn: int, access: int, gen: int) -> None:
        """`vcpu_cache_mmio_info()`: not while a memslot update is in flight."""
        if self.enabled and not gen & KVM_MEMSLOT_GEN_UPDATE_IN_PROGRESS:
            self.info[vcpu] = MmioInfo(gva & PAGE_MASK, gfn, access, gen)

    def match_gva(self, vcpu: int, gva: int, gen: int) -> MmioInfo | None:
        """`vcpu_match_mmio_gva()`."""
        info = self.info.get(vcpu)
        if info is None or info.gen != gen or not info.gva or info.gva != gva & PAGE_MASK:
            return None
        self.gva_hits += 1
        return info

    def match_gpa(self, vcpu: int, gpa: int, gen: int, count: bool = True) -> MmioInfo | None:
        """`vcpu_match_mmio_gpa()`; `gpa_hits` counts the faults it answers
        (`mmio_info_in_cache()`), not the emulator's looks (`count=False`, traced as
        `vcpu_match_mmio`)."""
        info = self.info.get(vcpu)
        if info is None or info.gen != gen or not info.gfn or info.gfn != gpa >> 12:
            return None
        if count:
            self.gpa_hits += 1
        return info

    def clear(self, vcpu: int, gva: int | None = None) -> None:
        """`vcpu_clear_mmio_info(vcpu, gva)`; None is MMIO_GVA_ANY (`mmio_gen = 0`)."""
        info = self.info.get(vcpu)
        if info is not None and (gva is None or info.gva == gva & PAGE_MASK):
            info.gen = 0

    def describe(self, vcpu: int, gen: int) -> str:
        info = self.info.get(vcpu)
        if not self.enabled:
            return "none before 3.1"
        if info is None:
            return "empty"
        state = "" if info.gen == gen else " (stale)"
        return f"gva {info.gva:#x} gfn {info.gfn:#x}{state}"


class MmioMmu(Protocol):
    """What `handle_mmio_page_fault()` reads of an MMU: its spte layout, its vCPUs' MMIO
    info, and its tracepoints."""

    cfg: SpteConfig
    mmio_info: VcpuMmioInfo

    def _emit(self, name: str, **fields: FieldValue) -> None: ...


def handle_mmio_page_fault(
    mmu: MmioMmu, vcpu: int, addr: int, spte: int, gen: int, direct: bool
) -> bool:
    """`handle_mmio_page_fault(vcpu, addr, direct)` (6.18 mmu.c) on the spte the lockless
    walk ends at; True is RET_PF_EMULATE.  `mmio_info_in_cache()` answers first, before
    the spte is read and with no tracepoint (`vcpu_match_mmio_gpa` for a direct MMU,
    `vcpu_match_mmio_gva` for shadow paging); then `check_mmio_spte()` (traced) of the
    spte, False (RET_PF_INVALID) for a stale generation; a current one traces
    `handle_mmio_page_fault` (addr 0 when direct) and `vcpu_cache_mmio_info()`s it."""
    info = mmu.mmio_info
    if (info.match_gpa if direct else info.match_gva)(vcpu, addr, gen) is not None:
        return True
    valid, fields = check_mmio_spte_traced(mmu.cfg, spte, gen)
    if fields is not None:
        mmu._emit("check_mmio_spte", **fields)
    if not valid:
        return False
    gfn, access = get_mmio_spte_gfn(mmu.cfg, spte), get_mmio_spte_access(mmu.cfg, spte)
    if direct:
        addr = 0
    mmu._emit("handle_mmio_page_fault", addr=addr, gfn=gfn, access=access)
    info.cache(vcpu, addr, gfn, access, gen)
    return True
