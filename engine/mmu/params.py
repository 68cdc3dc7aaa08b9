"""The kvm module parameters that shape the TDP MMU, and the kernel eras the model offers,
as one immutable options object.

The model follows torvalds/linux 6.18 (`MODEL_KERNEL`: `arch/x86/kvm/mmu/{mmu,tdp_mmu,
spte}.c`, `x86.c`, `vmx/vmx.c`).  A behaviour an older kernel had is offered beside it,
named by the kernel that changed it: `"6.13"` is 6.13 and later, `"before-6.13"` the
kernels before (docs/kvm.md, "Kernel eras"):
- `huge_recovery_era`: when dirty logging stops, "6.13" replaces each page table a huge
  page can stand for by a huge spte in place (`kvm_mmu_recover_huge_pages()` →
  `kvm_tdp_mmu_recover_huge_pages()`, "KVM: x86/mmu: Recover TDP MMU huge page mappings
  in-place instead of zapping", David Matlack, kvm list, 2024); "before-6.13" zaps them
  (`kvm_tdp_mmu_zap_collapsible_sptes()`) and the next faults map huge pages again;
- `spurious_era`: "6.13" ends a fault whose leaf is present and already allows the access
  as RET_PF_SPURIOUS before making an spte, with no `kvm_mmu_set_spte` line
  (`tdp_mmu_map_handle_target_level()`, "KVM: x86/mmu: Treat TDP MMU faults as spurious if
  access is already allowed", Sean Christopherson, kvm list, December 2024); before, the
  spte was made again and written when it differed;
- `tdp_mmu_pages_era`: "6.15" counts `kvm->arch.tdp_mmu_pages` only with
  CONFIG_KVM_PROVE_MMU (`prove_mmu`; "KVM: x86/mmu: Wrap sanity check on number of TDP MMU
  pages with KVM_PROVE_MMU", kvm list, March 2025, in 6.15-rc2); "before-6.15" always;
- `nx_recovery_era`: "6.18" recovers NX huge pages of the TDP MMU under mmu_lock held for
  read, from a list of its own (`possible_nx_huge_pages[KVM_TDP_MMU]`), each page
  unaccounted before `kvm_tdp_mmu_zap_possible_nx_huge_page()` zaps it atomically ("KVM:
  x86/mmu: Recover TDP MMU NX huge pages using MMU read lock", Vipin Sharma, kvm x86 MMU
  changes for 6.18); "before-6.18" holds it for write, one list for both MMUs,
  `kvm_tdp_mmu_zap_sp()`.

Module parameters (`mmu.c`, `vmx.c`):
- `tdp_mmu` (bool, 0444, default Y where the host has EPT/NPT): Y is the TDP MMU
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

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .eras import KERNELS as KERNELS
from .eras import MODEL_KERNEL as MODEL_KERNEL
from .eras import check_kernel, era_in
from .role import PG_LEVEL_1G, PG_LEVEL_2M, PG_LEVEL_4K

if TYPE_CHECKING:
    from .spte import SpteConfig

NX_HUGE_PAGES_MODES = ("off", "on", "force", "auto")
PML_LOG_NR_ENTRIES = 512  # a vCPU's PML buffer: one 4K page of gpas (6.18 vmx.h)
HOST_LEVELS = {"4k": PG_LEVEL_4K, "2m": PG_LEVEL_2M, "1g": PG_LEVEL_1G}

HUGE_RECOVERY_ERAS = ("6.13", "before-6.13")
SPURIOUS_ERAS = ("6.13", "before-6.13")
TDP_MMU_PAGES_ERAS = ("6.15", "before-6.15")
NX_RECOVERY_ERAS = ("6.18", "before-6.18")
_ERAS = {
    "huge_recovery_era": HUGE_RECOVERY_ERAS,
    "spurious_era": SPURIOUS_ERAS,
    "tdp_mmu_pages_era": TDP_MMU_PAGES_ERAS,
    "nx_recovery_era": NX_RECOVERY_ERAS,
}


def kernel_eras(kernel: str) -> dict[str, str]:
    """`TdpMmuParams`' era options as `kernel` (one of `KERNELS`) has them; ValueError
    for another.  The model differs between kernels only in these (and `SpteConfig`'s,
    `kernel_spte_config()`): docs/kvm.md §12."""
    check_kernel(kernel)
    return {name: era_in(kernel, eras[0]) for name, eras in _ERAS.items()}


def kernel_params(kernel: str, params: TdpMmuParams | None = None) -> TdpMmuParams:
    """`params` (default: the defaults) with the eras `kernel` has (`kernel_eras()`)."""
    eras = kernel_eras(kernel)
    return replace(
        params or TdpMmuParams(),
        huge_recovery_era=eras["huge_recovery_era"],
        spurious_era=eras["spurious_era"],
        tdp_mmu_pages_era=eras["tdp_mmu_pages_era"],
        nx_recovery_era=eras["nx_recovery_era"],
    )


@dataclass(frozen=True, slots=True)
class TdpMmuParams:
    """The parameters and eras above (`itlb_multihit`: X86_BUG_ITLB_MULTIHIT, what `auto`
    looks at; `prove_mmu`: CONFIG_KVM_PROVE_MMU, off in a distribution's kernel)."""

    tdp_mmu: bool = True
    eager_page_split: bool = True
    nx_huge_pages: str = "auto"
    itlb_multihit: bool = False
    nx_huge_pages_recovery_ratio: int = 60
    nx_huge_pages_recovery_period_ms: int = 0
    enable_pml: bool = True
    host_level: int = PG_LEVEL_2M
    prove_mmu: bool = False
    huge_recovery_era: str = "6.13"
    spurious_era: str = "6.13"
    tdp_mmu_pages_era: str = "6.15"
    nx_recovery_era: str = "6.18"

    def __post_init__(self) -> None:
        for name, eras in _ERAS.items():
            if getattr(self, name) not in eras:
                raise ValueError(f"{name} {getattr(self, name)!r}: one of {', '.join(eras)}")
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
    def counts_tdp_mmu_pages(self) -> bool:
        """`atomic64_inc(&kvm->arch.tdp_mmu_pages)` in `tdp_account_mmu_page()`: 6.15+ only
        under CONFIG_KVM_PROVE_MMU, always before."""
        return self.prove_mmu or self.tdp_mmu_pages_era == "before-6.15"

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
