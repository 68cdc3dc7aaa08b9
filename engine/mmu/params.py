"""The kvm module parameters that shape the TDP MMU, as one immutable options object.

`arch/x86/kvm/mmu/mmu.c` (torvalds/linux, ≈6.10; version of each parameter UNVERIFIED):
- `tdp_mmu` (bool, 0444, default Y where the host has EPT/NPT): Y is today's TDP MMU
  (`tdp_mmu.c`), N the older shadow MMU with direct pages (`engine.mmu.direct`).
- `eager_page_split` (bool, 0644, default Y): when dirty logging starts on a memslot, split
  its huge pages down to 4K at once (`kvm_mmu_slot_try_split_huge_pages`) instead of on the
  first write fault of each.
- `nx_huge_pages` (`off`/`on`/`force`/`auto`, default `auto`: on when the CPU has
  X86_BUG_ITLB_MULTIHIT): executable huge pages are not allowed; an instruction fetch in a
  huge page splits it and the guest gets 4K mappings there.
- `nx_huge_pages_recovery_ratio` (uint, default 60): each recovery run zaps
  1/ratio of the split pages (`kvm_recover_nx_huge_pages`), so they can come back huge.
- `nx_huge_pages_recovery_period_ms` (uint, default 0: derived, 60 s / ratio = 1 s).
- `enable_pml` (kvm_intel, default Y): with Page Modification Logging the CPU logs dirty
  4K pages itself, so starting dirty logging clears D bits instead of write-protecting
  every 4K leaf (`kvm_mmu_slot_leaf_clear_dirty`); huge leaves are still write-protected.
- Host backing (not a parameter): the largest page the host maps the memslot's memory
  with (`host_pfn_mapping_level`): 4K, 2M (THP) or 1G (hugetlbfs 1G pages).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .role import PG_LEVEL_1G, PG_LEVEL_2M, PG_LEVEL_4K

if TYPE_CHECKING:
    from .spte import SpteConfig

NX_HUGE_PAGES_MODES = ("off", "on", "force", "auto")
PML_LOG_NR_ENTRIES = 512  # a vCPU's PML buffer: one 4K page of gpas (6.18 vmx.h)
HOST_LEVELS = {"4k": PG_LEVEL_4K, "2m": PG_LEVEL_2M, "1g": PG_LEVEL_1G}


@dataclass(frozen=True, slots=True)
class TdpMmuParams:
    """The parameters above (`itlb_multihit`: X86_BUG_ITLB_MULTIHIT, what `auto` looks at)."""

    tdp_mmu: bool = True
    eager_page_split: bool = True
    nx_huge_pages: str = "auto"
    itlb_multihit: bool = False
    nx_huge_pages_recovery_ratio: int = 60
    nx_huge_pages_recovery_period_ms: int = 0
    enable_pml: bool = True
    host_level: int = PG_LEVEL_2M

    def __post_init__(self) -> None:
        if self.nx_huge_pages not in NX_HUGE_PAGES_MODES:
            raise ValueError(
                f"nx_huge_pages={self.nx_huge_pages!r}: one of {', '.join(NX_HUGE_PAGES_MODES)}"
            )
        if self.nx_huge_pages_recovery_ratio < 0 or self.nx_huge_pages_recovery_period_ms < 0:
            raise ValueError("nx_huge_pages_recovery_ratio and _period_ms are unsigned")
        if self.host_level not in HOST_LEVELS.values():
            raise ValueError(f"host_level {self.host_level}: 1 (4K), 2 (2M) or 3 (1G)")

    @property
    def nx_huge_page_workaround_enabled(self) -> bool:
        """`is_nx_huge_page_enabled()`: on, force, or auto on a CPU with ITLB multihit."""
        mode = self.nx_huge_pages
        return mode in ("on", "force") or (mode == "auto" and self.itlb_multihit)

    @property
    def recovery_period_ns(self) -> int:
        """`calc_nx_huge_pages_recovery_period()`: the period, or 60 s / ratio when 0;
        0 when recovery is off (ratio 0)."""
        ratio = self.nx_huge_pages_recovery_ratio
        if not ratio or not self.nx_huge_page_workaround_enabled:
            return 0
        period_ms = self.nx_huge_pages_recovery_period_ms or 60_000 // ratio
        return period_ms * 1_000_000


def cpu_dirty_log_size(params: TdpMmuParams, cfg: SpteConfig) -> int:
    """`kvm->arch.cpu_dirty_log_size` (6.18 x86.c, vmx.c `hardware_setup()`): the PML
    buffer's entries when the host logs dirty pages with PML (`enable_pml`, EPT with A/D
    bits), else 0: dirty logging by write protection (engine/mmu/dirty_log.py)."""
    pml = params.enable_pml and cfg.ept and not cfg.ad_disabled
    return PML_LOG_NR_ENTRIES if pml else 0


def host_level(name: str) -> int:
    """`4k`, `2m` or `1g` as a page level; ValueError otherwise."""
    try:
        return HOST_LEVELS[name.lower()]
    except KeyError:
        raise ValueError(f"host pages {name!r}: one of {', '.join(HOST_LEVELS)}") from None
