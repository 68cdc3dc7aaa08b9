"""Sptes: the 64-bit entries of KVM's shadow/TDP page tables, and MMIO spte caching.

docs/kvm.md §5, §6.1 (RET_PF_*), §6.3 (`kvm_mmu_set_spte`, `mark_mmio_spte`,
`check_mmio_spte`).  Checked against torvalds `arch/x86/kvm/mmu/spte.h`, `spte.c`, `mmu.c`
(`get_mmio_spte_gfn`, `check_mmio_spte`), `mmutrace.h`, `asm/vmx.h`, `vmx_get_mt_mask()`.

Avi Kivity in the memslot-search thread (kvm, 2011): "We could cache the result of a miss
in an spte by using a reserved bit, and checking the page fault error code (or seeing if
we get an ept violation or ept misconfiguration), so if we get repeated mmio on a page,
we don't need to search the slot list/tree."  Today an *MMIO spte* holds
`shadow_mmio_value` (EPT: bits 2:0 = 110b, W+X without R, so an access is an EPT
misconfiguration; else bit 51 + P, a reserved PA bit, so a #PF with PFEC.RSVD), the gpa,
access bits and 19 bits of the memslots generation (spte bits 3-10, 52-62).  A hit counts
only while that generation is current (`check_mmio_spte`); when the 19 bits wrap, KVM
zaps everything (`mmio_gen_wraps`).  With the L1TF mitigation, non-present sptes also set
the top 5 cacheable PA bits, and the gpa bits those hide move up by 5.

Layout modelled: 6.18.  The MMU-present bit is 11; on EPT `shadow_present_mask` and
the MMIO mask include SUPPRESS_VE (bit 63, `kvm_mmu_set_ept_masks()`, added for TDX in 6.10),
`shadow_accessed_mask`/`shadow_dirty_mask` are bits 8/9 even without EPT A/D bits (6.13 on:
the global `kvm_ad_enabled` says whether the CPU sets them, A/D-disabled sptes carry
SPTE_TDP_AD_DISABLED, and KVM itself sets bit 8 on every spte it makes accessed and bit 9 on
every writable one: `SpteConfig.ad_masks_era`), and `FROZEN_SPTE` = BIT(63) | 0x5a0
(formerly REMOVED_SPTE = 0x5a0).  A non-present spte
is `SHADOW_NONPRESENT_VALUE` = BIT(63) from 6.10 on (x86_64; the shadow page cache's
`init_value`, `mmu_spte_clear_no_track()`), 0 before: `SpteConfig.nonpresent_era`
("6.10" or "before-6.10"; the 2011 configurations are the latter) gives
`shadow_nonpresent_value`, which every table of the shadow/direct MMU holds for an
empty entry.  `describe_spte` names both "not present".
An older kvm.git spte.h (commit 22ab7e8b) had 18 generation bits at 3-11 and 54-62,
SPTE_MMIO_MASK = 3 << 52, SPTE_HOST_WRITEABLE = bit 10, SPTE_MMU_WRITEABLE = bit 11.
Sean Christopherson's SPTE-mask series, queued in kvm.git in March 2021 for the 5.13
merge window, made today's layout: "KVM: x86/mmu: Use a dedicated bit to track
shadow/MMU-present SPTEs" (bit 11, the MMIO mask no longer 3 << 52, the generation up to
bit 62), "KVM: x86/mmu: Exclude the MMU_PRESENT bit from MMIO SPTE's generation" (19 bits:
3-10 and 52-62), and "KVM: x86/mmu: Make Host-writable and MMU-writable bit locations
dynamic" with "KVM: x86/mmu: Use high bits for host/mmu writable masks for EPT SPTEs"
(together: 57/58 with EPT, 9/10 without).  Not modelled: SME/TDX bits.

MMIO sptes (docs/kvm.md §5): `make_mmio_spte()` / `check_mmio_spte()` /
`get_mmio_spte_gfn()` (spte.c, mmu.c 6.18), the generation wrap that zaps everything
(`kvm_mmu_invalidate_mmio_sptes()`: `mmio_gen_wraps`, `memslot_update_zaps`; the shadow
MMU's answer to a memslot update is `shadow_mmu_memslot_update` in mmu_pages.py), and the
tracepoint fields of `kvm_mmio`, `mark_mmio_spte` and `kvm_mmu_spte_requested`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum
from types import MappingProxyType

from ..memslots.constants import (
    KVM_MEMSLOT_GEN_UPDATE_IN_PROGRESS as KVM_MEMSLOT_GEN_UPDATE_IN_PROGRESS,
)
from ..memslots.constants import PAGE_SHIFT
from .eras import check_kernel, era_in


def BIT(n: int) -> int:
    return 1 << n


def GENMASK(high: int, low: int) -> int:
    """Bits `low`..`high` inclusive, as the kernel's GENMASK_ULL."""
    return ((1 << (high + 1)) - 1) & ~((1 << low) - 1)


# -- x86 paging bits (arch/x86/include/asm/pgtable_types.h, kvm mmu.h) ---------------------
PT_PRESENT_MASK = BIT(0)
PT_WRITABLE_MASK = BIT(1)
PT_USER_MASK = BIT(2)
PT_ACCESSED_MASK = BIT(5)
PT_DIRTY_MASK = BIT(6)
PT_PAGE_SIZE_MASK = BIT(7)  # a leaf above 4K: 2M in a PDE, 1G in a PDPTE
PT64_NX_MASK = BIT(63)

PG_LEVEL_4K, PG_LEVEL_2M, PG_LEVEL_1G = 1, 2, 3
KVM_MAX_HUGEPAGE_LEVEL = PG_LEVEL_1G
SPTE_LEVEL_BITS = 9

# -- EPT bits (arch/x86/include/asm/vmx.h) --------------------------------------------------
VMX_EPT_READABLE_MASK = 0x1
VMX_EPT_WRITABLE_MASK = 0x2
VMX_EPT_EXECUTABLE_MASK = 0x4
VMX_EPT_RWX_MASK = VMX_EPT_READABLE_MASK | VMX_EPT_WRITABLE_MASK | VMX_EPT_EXECUTABLE_MASK
VMX_EPT_MISCONFIG_WX_VALUE = VMX_EPT_WRITABLE_MASK | VMX_EPT_EXECUTABLE_MASK  # 0b110
VMX_EPT_MT_EPTE_SHIFT = 3
MTRR_TYPE_WRBACK = 6
VMX_EPT_IPAT_BIT = BIT(6)
VMX_EPT_ACCESS_BIT = BIT(8)
VMX_EPT_DIRTY_BIT = BIT(9)
VMX_EPT_SUPPRESS_VE_BIT = BIT(63)
# vmx_get_mt_mask() for RAM when the VM has no non-coherent DMA: WB, ignore guest PAT.
EPT_RAM_MT_MASK = (MTRR_TYPE_WRBACK << VMX_EPT_MT_EPTE_SHIFT) | VMX_EPT_IPAT_BIT  # 0x70

# -- spte.h ----------------------------------------------------------------------------
SPTE_MMU_PRESENT_MASK = BIT(11)  # "MMU present": backed by memory; MMIO sptes are not
SPTE_TDP_AD_SHIFT = 52
SPTE_TDP_AD_MASK = 3 << SPTE_TDP_AD_SHIFT
SPTE_TDP_AD_ENABLED = 0 << SPTE_TDP_AD_SHIFT
SPTE_TDP_AD_DISABLED = 1 << SPTE_TDP_AD_SHIFT
SPTE_TDP_AD_WRPROT_ONLY = 2 << SPTE_TDP_AD_SHIFT
SPTE_BASE_ADDR_MASK = GENMASK(51, PAGE_SHIFT)  # !CONFIG_DYNAMIC_PHYSICAL_MASK; the PFN field

ACC_EXEC_MASK = 1
ACC_WRITE_MASK = PT_WRITABLE_MASK
ACC_USER_MASK = PT_USER_MASK
ACC_ALL = ACC_EXEC_MASK | ACC_WRITE_MASK | ACC_USER_MASK

# Access tracking (EPT without A/D bits): R and X saved at 54/56, RWX cleared.
SHADOW_ACC_TRACK_SAVED_BITS_MASK = VMX_EPT_READABLE_MASK | VMX_EPT_EXECUTABLE_MASK
SHADOW_ACC_TRACK_SAVED_BITS_SHIFT = 54

# Host-/MMU-writable software bits (formerly SPTE_HOST_WRITEABLE/SPTE_MMU_WRITEABLE, 10/11).
DEFAULT_SPTE_HOST_WRITABLE = BIT(9)  # bits 9 and 10 are ignored by all non-EPT PTEs
DEFAULT_SPTE_MMU_WRITABLE = BIT(10)
EPT_SPTE_HOST_WRITABLE = BIT(57)
EPT_SPTE_MMU_WRITABLE = BIT(58)

MMIO_SPTE_GEN_LOW_START = 3
MMIO_SPTE_GEN_LOW_END = 10
MMIO_SPTE_GEN_HIGH_START = 52
MMIO_SPTE_GEN_HIGH_END = 62
MMIO_SPTE_GEN_LOW_MASK = GENMASK(MMIO_SPTE_GEN_LOW_END, MMIO_SPTE_GEN_LOW_START)
MMIO_SPTE_GEN_HIGH_MASK = GENMASK(MMIO_SPTE_GEN_HIGH_END, MMIO_SPTE_GEN_HIGH_START)
MMIO_SPTE_GEN_LOW_BITS = MMIO_SPTE_GEN_LOW_END - MMIO_SPTE_GEN_LOW_START + 1  # 8
MMIO_SPTE_GEN_HIGH_BITS = MMIO_SPTE_GEN_HIGH_END - MMIO_SPTE_GEN_HIGH_START + 1  # 11
MMIO_SPTE_GEN_LOW_SHIFT = MMIO_SPTE_GEN_LOW_START - 0
MMIO_SPTE_GEN_HIGH_SHIFT = MMIO_SPTE_GEN_HIGH_START - MMIO_SPTE_GEN_LOW_BITS  # 44
MMIO_SPTE_GEN_MASK = GENMASK(MMIO_SPTE_GEN_LOW_BITS + MMIO_SPTE_GEN_HIGH_BITS - 1, 0)

SHADOW_NONPRESENT_OR_RSVD_MASK_LEN = 5
# 6.10+ (for TDX; x86_64): every non-present spte holds BIT(63), "suppress #VE" on EPT and
# ignored by AMD/legacy hardware in a non-present entry (spte.h SHADOW_NONPRESENT_VALUE).
SHADOW_NONPRESENT_VALUE = BIT(63)
# The TDP MMU's "frozen" placeholder: REMOVED_SPTE (0x5a0) before, FROZEN_SPTE today.
REMOVED_SPTE = 0x5A0
FROZEN_SPTE = SHADOW_NONPRESENT_VALUE | REMOVED_SPTE
# What an empty entry of a shadow/direct MMU table holds, by kernel era.
NONPRESENT_ERAS: Mapping[str, int] = MappingProxyType(
    {"6.10": SHADOW_NONPRESENT_VALUE, "before-6.10": 0}
)
# What the TDP MMU freezes an spte to, by the same era: REMOVED_SPTE became
# SHADOW_NONPRESENT_VALUE | 0x5a0 with 6.10 and was renamed FROZEN_SPTE (spte.h, 6.11+).
FROZEN_ERAS: Mapping[str, int] = MappingProxyType(
    {"6.10": FROZEN_SPTE, "before-6.10": REMOVED_SPTE}
)
# EPT's Accessed/Dirty masks without EPT A/D bits (`kvm_mmu_set_ept_masks()`): bits 8 and 9
# from 6.13 (Sean Christopherson's A/D cleanups, kvm list, October 2024: "Set
# shadow_{accessed,dirty}_mask for EPT even if A/D bits disabled", "Use Accessed bit even
# when _hardware_ A/D bits are disabled"); 0 before ("has_ad_bits ? VMX_EPT_ACCESS_BIT : 0").
AD_MASKS_ERAS = ("6.13", "before-6.13")

assert MMIO_SPTE_GEN_LOW_BITS == 8 and MMIO_SPTE_GEN_HIGH_BITS == 11  # spte.h static_assert
assert not SPTE_MMU_PRESENT_MASK & (MMIO_SPTE_GEN_LOW_MASK | MMIO_SPTE_GEN_HIGH_MASK)
assert not REMOVED_SPTE & SPTE_MMU_PRESENT_MASK


class RetPf(IntEnum):
    """`RET_PF_*` (mmu_internal.h), current order; `str()` gives the kernel's name.

    All >= 0 so they never alias -errno; CONTINUE is 0 for a cheap test/jnz.  History
    (docs/kvm.md §6.1): originally RETRY = 0, EMULATE, INVALID; FIXED and SPURIOUS came
    later; CONTINUE was inserted at 0 in 2022; WRITE_PROTECTED arrived in 6.12 (Sean
    Christopherson, "KVM: x86/mmu: Trigger unprotect logic only on write-protection page
    faults", the kvm-x86 MMU pull for 6.12).  Numbers differ between eras: compare by name.
    """

    CONTINUE = 0  # keep handling the fault
    RETRY = 1  # let the CPU fault again
    EMULATE = 2  # MMIO: emulate the instruction
    WRITE_PROTECTED = 3  # gfn write-protected: unprotect and retry, or emulate
    INVALID = 4  # spte invalid: take the real page-fault path
    FIXED = 5  # the faulting entry was fixed
    SPURIOUS = 6  # already fixed, e.g. by another vCPU

    def __str__(self) -> str:
        return f"RET_PF_{self.name}"


# The kernel's names of the members, as the fault paths read them (`return RET_PF_RETRY;`);
# also the cheap way to name one: a member read through its class goes through the enum
# metaclass's `__getattr__` hook, ~1k instructions on CPython 3.11
RET_PF_CONTINUE = RetPf.CONTINUE
RET_PF_RETRY = RetPf.RETRY
RET_PF_EMULATE = RetPf.EMULATE
RET_PF_WRITE_PROTECTED = RetPf.WRITE_PROTECTED
RET_PF_INVALID = RetPf.INVALID
RET_PF_FIXED = RetPf.FIXED
RET_PF_SPURIOUS = RetPf.SPURIOUS


@dataclass(frozen=True, slots=True)
class SpteConfig:
    """The host as `kvm_mmu_reset_all_pte_masks()` / `kvm_mmu_set_ept_masks()` see it.

    `ept`: Intel EPT (False: legacy PTE format, i.e. shadow paging or AMD NPT).
    `ad_bits`: EPT A/D bits (`enable_ept_ad_bits`); legacy paging always has them.
    `host_phys_bits`: MAXPHYADDR (`shadow_phys_bits`; also stands in for x86_cache_bits).
    `l1tf`: the CPU has X86_BUG_L1TF, so `shadow_nonpresent_or_rsvd_mask` is in use (the
    kernel only applies it below 47 cache bits).  `mmio_caching`: kvm.mmio_caching.
    `ept_exec_only`: the CPU supports execute-only EPT entries (shadow_present_mask = 0).
    `ad_masks_era`: "6.13" (EPT's A/D masks are bits 8/9 with or without A/D bits) or
    "before-6.13" (0 without them: `AD_MASKS_ERAS`).
    The remaining fields are derived, as the kernel computes them (compared, not shown).
    """

    ept: bool = True
    ad_bits: bool = True
    host_phys_bits: int = 46
    l1tf: bool = False
    mmio_caching: bool = True
    ept_exec_only: bool = True
    nonpresent_era: str = "6.10"
    ad_masks_era: str = "6.13"
    shadow_nonpresent_value: int = field(init=False, repr=False)
    frozen_spte: int = field(init=False, repr=False)
    shadow_present_mask: int = field(init=False, repr=False)
    shadow_user_mask: int = field(init=False, repr=False)
    shadow_x_mask: int = field(init=False, repr=False)
    shadow_nx_mask: int = field(init=False, repr=False)
    shadow_accessed_mask: int = field(init=False, repr=False)
    shadow_dirty_mask: int = field(init=False, repr=False)
    shadow_acc_track_mask: int = field(init=False, repr=False)
    shadow_host_writable_mask: int = field(init=False, repr=False)
    shadow_mmu_writable_mask: int = field(init=False, repr=False)
    shadow_nonpresent_or_rsvd_mask: int = field(init=False, repr=False)
    shadow_nonpresent_or_rsvd_lower_gfn_mask: int = field(init=False, repr=False)
    shadow_mmio_value: int = field(init=False, repr=False)
    shadow_mmio_mask: int = field(init=False, repr=False)
    shadow_mmio_access_mask: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 32 <= self.host_phys_bits <= 52:
            raise ValueError(f"host_phys_bits {self.host_phys_bits} outside 32..52")
        if not self.ept and not self.ad_bits:
            raise ValueError("legacy (non-EPT) paging always has A/D bits")
        if self.nonpresent_era not in NONPRESENT_ERAS:
            raise ValueError(f"nonpresent_era {self.nonpresent_era!r}: one of {NONPRESENT_ERAS}")
        if self.ad_masks_era not in AD_MASKS_ERAS:
            raise ValueError(f"ad_masks_era {self.ad_masks_era!r}: one of {AD_MASKS_ERAS}")
        for name, value in self._masks().items():
            object.__setattr__(self, name, value)  # a frozen dataclass's derived fields

    def _masks(self) -> dict[str, int]:
        era = self.nonpresent_era
        m: dict[str, int] = {
            "shadow_nonpresent_value": NONPRESENT_ERAS[era],
            "frozen_spte": FROZEN_ERAS[era],
        }
        # kvm_mmu_reset_all_pte_masks(): L1TF mask = the top 5 bits below x86_cache_bits.
        low_phys_bits = self.host_phys_bits
        m["shadow_nonpresent_or_rsvd_mask"] = 0
        if self.l1tf and self.host_phys_bits < 52 - SHADOW_NONPRESENT_OR_RSVD_MASK_LEN:
            low_phys_bits = self.host_phys_bits - SHADOW_NONPRESENT_OR_RSVD_MASK_LEN
            m["shadow_nonpresent_or_rsvd_mask"] = GENMASK(self.host_phys_bits - 1, low_phys_bits)
        m["shadow_nonpresent_or_rsvd_lower_gfn_mask"] = GENMASK(low_phys_bits - 1, PAGE_SHIFT)
        if self.ept:  # kvm_mmu_set_ept_masks(has_ad_bits, has_exec_only), 6.18
            # kvm_ad_enabled = has_ad_bits; since 6.13 the masks are bits 8 and 9 either
            # way (software-available bits when the CPU does not set them), before 0
            ad_masks = self.ad_bits or self.ad_masks_era == "6.13"
            m |= {
                "shadow_user_mask": VMX_EPT_READABLE_MASK,
                "shadow_accessed_mask": VMX_EPT_ACCESS_BIT if ad_masks else 0,
                "shadow_dirty_mask": VMX_EPT_DIRTY_BIT if ad_masks else 0,
                "shadow_nx_mask": 0,
                "shadow_x_mask": VMX_EPT_EXECUTABLE_MASK,
                "shadow_present_mask": (0 if self.ept_exec_only else VMX_EPT_READABLE_MASK)
                | VMX_EPT_SUPPRESS_VE_BIT,
                "shadow_acc_track_mask": VMX_EPT_RWX_MASK,
                "shadow_host_writable_mask": EPT_SPTE_HOST_WRITABLE,
                "shadow_mmu_writable_mask": EPT_SPTE_MMU_WRITABLE,
            }
            value, access_mask = VMX_EPT_MISCONFIG_WX_VALUE, 0
            mask = VMX_EPT_RWX_MASK | VMX_EPT_SUPPRESS_VE_BIT
        else:
            m |= {
                "shadow_user_mask": PT_USER_MASK,
                "shadow_accessed_mask": PT_ACCESSED_MASK,
                "shadow_dirty_mask": PT_DIRTY_MASK,
                "shadow_nx_mask": PT64_NX_MASK,
                "shadow_x_mask": 0,
                "shadow_present_mask": PT_PRESENT_MASK,
                "shadow_acc_track_mask": 0,
                "shadow_host_writable_mask": DEFAULT_SPTE_HOST_WRITABLE,
                "shadow_mmu_writable_mask": DEFAULT_SPTE_MMU_WRITABLE,
            }
            # A reserved PA bit makes a #PF with RSVD; 52 PA bits leave no reserved bit.
            value = BIT(51) | PT_PRESENT_MASK if self.host_phys_bits < 52 else 0
            mask, access_mask = value, ACC_WRITE_MASK | ACC_USER_MASK
        # kvm_mmu_set_mmio_spte_mask(): conditions that force value 0 (caching off).
        relocated = m["shadow_nonpresent_or_rsvd_mask"] << SHADOW_NONPRESENT_OR_RSVD_MASK_LEN
        if (
            not self.mmio_caching
            or value & relocated
            or (value & mask) != value
            or (value and (FROZEN_SPTE & mask) == value)
        ):
            value = 0
        m.update(shadow_mmio_value=value, shadow_mmio_mask=mask)
        return m | {"shadow_mmio_access_mask": access_mask}

    @property
    def ad_disabled(self) -> bool:
        """`sp->role.ad_disabled` for this host's TDP pages (`!kvm_ad_enabled`)."""
        return self.ept and not self.ad_bits

    @property
    def mmio_caching_enabled(self) -> bool:
        return self.shadow_mmio_value != 0


SPTE_CONFIGS: Mapping[str, SpteConfig] = MappingProxyType(
    {
        "ept": SpteConfig(ept=True, ad_bits=True, host_phys_bits=46),
        "ept-l1tf": SpteConfig(ept=True, ad_bits=True, host_phys_bits=46, l1tf=True),
        # kvm_intel.eptad=0: no EPT A/D bits, aged sptes access-tracked (fast_pf.py); KVM
        # still sets bits 8/9 itself (6.13+)
        "ept-no-ad": SpteConfig(ept=True, ad_bits=False, host_phys_bits=46),
        "shadow": SpteConfig(ept=False, host_phys_bits=46),
        "shadow-l1tf": SpteConfig(ept=False, host_phys_bits=46, l1tf=True),
        "shadow-52bit": SpteConfig(ept=False, host_phys_bits=52),  # MMIO caching impossible
        # 2011 had no MMIO sptes at all; modelled as today's layout with caching off.
        "2011-no-mmio-cache": SpteConfig(
            ept=True,
            ad_bits=False,
            mmio_caching=False,
            nonpresent_era="before-6.10",
            ad_masks_era="before-6.13",
        ),
        "2011-shadow-no-mmio-cache": SpteConfig(
            ept=False, mmio_caching=False, nonpresent_era="before-6.10"
        ),
    }
)


def spte_config_named(config: str | SpteConfig) -> SpteConfig:
    """A session's `spte_config`: a name in `SPTE_CONFIGS`, or the configuration itself
    (e.g. `kernel_spte_config()`'s)."""
    return SPTE_CONFIGS[config] if isinstance(config, str) else config


def kernel_spte_config(cfg: SpteConfig, kernel: str) -> SpteConfig:
    """`cfg` with the eras `kernel` (params.KERNELS) has: `nonpresent_era` (6.10) and
    `ad_masks_era` (6.13)."""
    check_kernel(kernel)
    return replace(cfg, nonpresent_era=era_in(kernel, "6.10"), ad_masks_era=era_in(kernel, "6.13"))


def is_mmio_spte(cfg: SpteConfig, spte: int) -> bool:
    return bool(cfg.shadow_mmio_value) and spte & cfg.shadow_mmio_mask == cfg.shadow_mmio_value


# -- present sptes ------------------------------------------------------------------------


def is_empty_spte(spte: int) -> bool:
    """An entry nothing was written to, or cleared: `SHADOW_NONPRESENT_VALUE` (6.10+) or 0
    (before), so neither present nor an MMIO spte."""
    return not spte & ~SHADOW_NONPRESENT_VALUE


def is_shadow_present_pte(spte: int) -> bool:
    return bool(spte & SPTE_MMU_PRESENT_MASK)


def is_large_pte(spte: int) -> bool:
    return bool(spte & PT_PAGE_SIZE_MASK)


def is_last_spte(spte: int, level: int) -> bool:
    return level == PG_LEVEL_4K or is_large_pte(spte)


def spte_to_pfn(spte: int) -> int:
    return (spte & SPTE_BASE_ADDR_MASK) >> PAGE_SHIFT


def is_executable_pte(cfg: SpteConfig, spte: int) -> bool:
    return (spte & (cfg.shadow_x_mask | cfg.shadow_nx_mask)) == cfg.shadow_x_mask


def is_access_track_spte(cfg: SpteConfig, spte: int) -> bool:
    """A/D-disabled spte with RWX cleared; the next access faults (fast_page_fault)."""
    ad_disabled = spte & SPTE_TDP_AD_MASK == SPTE_TDP_AD_DISABLED
    return is_shadow_present_pte(spte) and ad_disabled and not spte & cfg.shadow_acc_track_mask


def mark_spte_for_access_track(cfg: SpteConfig, spte: int) -> int:
    """`mark_spte_for_access_track()` (6.18 spte.c): A cleared; without A/D bits also R
    and X saved at bits 54/56 and RWX cleared, so the next access faults."""
    if spte & SPTE_TDP_AD_MASK != SPTE_TDP_AD_DISABLED:
        return spte & ~cfg.shadow_accessed_mask
    if is_access_track_spte(cfg, spte):
        return spte
    saved = spte & SHADOW_ACC_TRACK_SAVED_BITS_MASK
    spte |= saved << SHADOW_ACC_TRACK_SAVED_BITS_SHIFT
    return spte & ~(cfg.shadow_acc_track_mask | cfg.shadow_accessed_mask)


def restore_acc_track_spte(cfg: SpteConfig, spte: int) -> int:
    """`restore_acc_track_spte()` (6.18 spte.h): R and X back from bits 54/56, the saved
    copy cleared.  W is not saved: the fast path sets it again for a write."""
    saved = (spte >> SHADOW_ACC_TRACK_SAVED_BITS_SHIFT) & SHADOW_ACC_TRACK_SAVED_BITS_MASK
    spte &= ~cfg.shadow_acc_track_mask
    spte &= ~(SHADOW_ACC_TRACK_SAVED_BITS_MASK << SHADOW_ACC_TRACK_SAVED_BITS_SHIFT)
    return spte | saved


def modify_spte_protections(cfg: SpteConfig, spte: int, set_: int, clear: int) -> int:
    """`modify_spte_protections()` (6.18 spte.c): an access-tracked spte is restored
    first and access-tracked again after, so the protection bits change in the saved
    copy too and the spte stays one the next access restores."""
    is_access_track = is_access_track_spte(cfg, spte)
    if is_access_track:
        spte = restore_acc_track_spte(cfg, spte)
    spte = (spte | set_) & ~clear
    if is_access_track:
        spte = mark_spte_for_access_track(cfg, spte)
    return spte


def make_spte_executable(cfg: SpteConfig, spte: int) -> int:
    """`make_spte_executable()` (6.18 spte.c)."""
    return modify_spte_protections(cfg, spte, cfg.shadow_x_mask, cfg.shadow_nx_mask)


def make_spte_nonexecutable(cfg: SpteConfig, spte: int) -> int:
    """`make_spte_nonexecutable()` (6.18 spte.c)."""
    return modify_spte_protections(cfg, spte, cfg.shadow_nx_mask, cfg.shadow_x_mask)


def make_huge_spte(cfg: SpteConfig, small_spte: int, level: int, nx_huge_pages: bool) -> int:
    """`make_huge_spte(kvm, small_spte, level)` (6.18 spte.c; 6.13+): a huge spte at
    `level` made from one of the leaves it replaces: PT_PAGE_SIZE set, the address bits
    below the huge page cleared (`KVM_HPAGE_MASK(level) | ~PAGE_MASK`), and under the NX
    huge page mitigation made non-executable."""
    if not is_shadow_present_pte(small_spte) or level == PG_LEVEL_4K:
        raise ValueError(f"make_huge_spte of {small_spte:#x} at level {level} (KVM_BUG_ON)")
    huge_spte = small_spte | PT_PAGE_SIZE_MASK
    huge_spte &= ~(((1 << (SPTE_LEVEL_BITS * (level - 1))) - 1) << PAGE_SHIFT)
    if nx_huge_pages:
        huge_spte = make_spte_nonexecutable(cfg, huge_spte)
    return huge_spte


def make_small_spte(
    cfg: SpteConfig, huge_spte: int, level: int, access: int, index: int, nx_huge_pages: bool
) -> int:
    """`make_small_spte(kvm, huge_spte, role, index)` (6.18 spte.c; 6.13+, formerly
    `make_huge_page_split_spte()`): the `index`-th part, at `level` (`role.level`), of a
    huge spte being split: the huge spte plus the part's offset; a 4K part loses
    PT_PAGE_SIZE and, where the child page allows execution (`role.access`) under the NX
    huge page mitigation, is made executable (`make_spte_executable()`)."""
    child = huge_spte | (index << (SPTE_LEVEL_BITS * (level - 1))) << PAGE_SHIFT
    if level == PG_LEVEL_4K:
        child &= ~PT_PAGE_SIZE_MASK
        if access & ACC_EXEC_MASK and nx_huge_pages:
            child = make_spte_executable(cfg, child)
    return child


def make_spte(
    cfg: SpteConfig,
    pfn: int,
    access: int,
    level: int = PG_LEVEL_4K,
    *,
    writable: bool = True,
    accessed: bool = True,
    dirty: bool = True,
) -> int:
    """`make_spte()`: a leaf mapping `pfn` (RAM) with ACC_* `access` at `level` (1-3).

    `writable` is host_writable (memslot/VMA allow writes); W is set only with
    ACC_WRITE_MASK too.  `accessed=False` is a prefetch (A clear, or access-tracked without
    A/D bits).  KVM itself always sets D on a writable spte; `dirty=False` gives the clean
    state dirty logging leaves behind.  A (`shadow_accessed_mask`) and D
    (`shadow_dirty_mask`) are ORed in whatever `kvm_ad_enabled` says: without EPT A/D bits
    they are bits KVM keeps for itself (6.13+; their masks are 0 before: `ad_masks_era`).
    Raises ValueError where the kernel would WARN, for a pfn that does not fit bits 12-51
    or is misaligned for a huge leaf.  Real pfns sit
    below MAXPHYADDR (the sessions draw them so: `HostPages`, mapping_level.py); larger
    ones are accepted as far as the PFN field reaches.
    """
    if not PG_LEVEL_4K <= level <= KVM_MAX_HUGEPAGE_LEVEL:
        raise ValueError(f"leaf level {level} outside 1..{KVM_MAX_HUGEPAGE_LEVEL}")
    if pfn < 0 or (pfn << PAGE_SHIFT) & ~SPTE_BASE_ADDR_MASK:
        raise ValueError(f"pfn {pfn:#x} does not fit the spte's PFN field (bits 12-51)")
    if pfn & ((1 << (SPTE_LEVEL_BITS * (level - 1))) - 1):
        raise ValueError(f"pfn {pfn:#x} not aligned for a level-{level} leaf")
    spte = SPTE_MMU_PRESENT_MASK
    if cfg.ad_disabled:  # sp->role.ad_disabled
        spte |= SPTE_TDP_AD_DISABLED
    spte |= cfg.shadow_present_mask
    if accessed:  # !prefetch || synchronizing
        spte |= cfg.shadow_accessed_mask
    spte |= cfg.shadow_x_mask if access & ACC_EXEC_MASK else cfg.shadow_nx_mask
    if access & ACC_USER_MASK:
        spte |= cfg.shadow_user_mask
    if level > PG_LEVEL_4K:
        spte |= PT_PAGE_SIZE_MASK
    if cfg.ept:
        spte |= EPT_RAM_MT_MASK
    if writable:
        spte |= cfg.shadow_host_writable_mask
    else:
        access &= ~ACC_WRITE_MASK
    spte |= pfn << PAGE_SHIFT
    if access & ACC_WRITE_MASK:
        spte |= PT_WRITABLE_MASK | cfg.shadow_mmu_writable_mask
        if dirty:
            spte |= cfg.shadow_dirty_mask
    if cfg.ept and spte & VMX_EPT_WRITABLE_MASK and not spte & VMX_EPT_READABLE_MASK:
        # EPT W without R is a misconfiguration; W+X without R would even read as MMIO.
        # For EPT, ACC_USER_MASK means R.
        raise ValueError(f"EPT spte {spte:#x}: writable without read (access {access:#o})")
    if is_mmio_spte(cfg, spte):  # WARN_ON(is_mmio_spte(spte)), e.g. legacy pfn with bit 51
        raise ValueError(f"spte {spte:#x} would read as an MMIO spte")
    return spte if accessed else mark_spte_for_access_track(cfg, spte)


def make_nonleaf_spte(cfg: SpteConfig, child_pa: int, ad_disabled: bool | None = None) -> int:
    """`make_nonleaf_spte(child_pt, ad_disabled)` (6.18 spte.c): a pointer to the shadow
    page at host-physical `child_pa`; `ad_disabled` is the child's `sp_ad_disabled()`
    (default: this host's TDP pages)."""
    if child_pa & ~SPTE_BASE_ADDR_MASK:
        raise ValueError(f"child page address {child_pa:#x} is not a page address")
    if ad_disabled is None:
        ad_disabled = cfg.ad_disabled
    spte = SPTE_MMU_PRESENT_MASK | child_pa | cfg.shadow_present_mask | PT_WRITABLE_MASK
    spte |= cfg.shadow_user_mask | cfg.shadow_x_mask
    return spte | (SPTE_TDP_AD_DISABLED if ad_disabled else cfg.shadow_accessed_mask)


# MMIO sptes: make_mmio_spte() (spte.c), check_mmio_spte() (mmu.c), their tracepoints


class MmioCachingDisabledError(ValueError):
    """make_mmio_spte() on a host whose shadow_mmio_value is 0 (the kernel WARNs; its fault
    path never gets there: with caching off it returns RET_PF_EMULATE without an spte)."""


def generation_mmio_spte_mask(gen: int) -> int:
    """The 19-bit MMIO generation spread over spte bits 3-10 and 52-62."""
    if gen & ~MMIO_SPTE_GEN_MASK:
        raise ValueError(f"generation {gen:#x} wider than 19 bits")
    mask = (gen << MMIO_SPTE_GEN_LOW_SHIFT) & MMIO_SPTE_GEN_LOW_MASK
    return mask | ((gen << MMIO_SPTE_GEN_HIGH_SHIFT) & MMIO_SPTE_GEN_HIGH_MASK)


def get_mmio_spte_generation(spte: int) -> int:
    gen = (spte & MMIO_SPTE_GEN_LOW_MASK) >> MMIO_SPTE_GEN_LOW_SHIFT
    return gen | ((spte & MMIO_SPTE_GEN_HIGH_MASK) >> MMIO_SPTE_GEN_HIGH_SHIFT)


def kvm_mmu_max_gfn(cfg: SpteConfig) -> int:
    """`kvm_mmu_max_gfn()` (6.18 mmu.h) with TDP on: the host's MAXPHYADDR bounds the
    gfns an MMIO spte may hold; `kvm_handle_noslot_fault()` emulates any gfn above it
    without making one."""
    return (1 << (cfg.host_phys_bits - 12)) - 1


def make_mmio_spte(cfg: SpteConfig, gfn: int, access: int, gen: int) -> int:
    """`make_mmio_spte()`; `gen` is the vCPU's memslots generation (masked to 19 bits).

    Raises MmioCachingDisabledError when caching is off, ValueError for a gfn at or above
    host MAXPHYADDR (the kernel refuses to cache those: `kvm_mmu_max_gfn()`).
    """
    if not cfg.shadow_mmio_value:
        raise MmioCachingDisabledError(f"MMIO caching is disabled on {cfg}")
    if gfn < 0 or gfn >> (cfg.host_phys_bits - PAGE_SHIFT):
        raise ValueError(f"gfn {gfn:#x} beyond MAXPHYADDR {cfg.host_phys_bits}")
    gpa = gfn << PAGE_SHIFT
    spte = generation_mmio_spte_mask(gen & MMIO_SPTE_GEN_MASK)
    spte |= cfg.shadow_mmio_value | (access & cfg.shadow_mmio_access_mask)
    spte |= gpa | cfg.shadow_nonpresent_or_rsvd_mask
    relocated = gpa & cfg.shadow_nonpresent_or_rsvd_mask
    return spte | (relocated << SHADOW_NONPRESENT_OR_RSVD_MASK_LEN)


def get_mmio_spte_gfn(cfg: SpteConfig, spte: int) -> int:
    """The gfn of an MMIO spte, putting the L1TF-relocated bits back."""
    gpa = spte & cfg.shadow_nonpresent_or_rsvd_lower_gfn_mask
    relocated = spte >> SHADOW_NONPRESENT_OR_RSVD_MASK_LEN
    return (gpa | (relocated & cfg.shadow_nonpresent_or_rsvd_mask)) >> PAGE_SHIFT


def get_mmio_spte_access(cfg: SpteConfig, spte: int) -> int:
    return spte & cfg.shadow_mmio_access_mask


def check_mmio_spte(cfg: SpteConfig, spte: int, memslots_gen: int) -> bool:
    """`check_mmio_spte()`: may this MMIO spte be trusted under `memslots_gen`?

    False while an update is in flight (IN_PROGRESS: the kernel returns before the
    `check_mmio_spte` tracepoint) or when the 19-bit generations differ (the fault then
    takes the slow path, RET_PF_INVALID, and rebuilds the spte).  The kernel only calls it
    on MMIO sptes; here a non-MMIO spte is simply never a hit.
    """
    if memslots_gen & KVM_MEMSLOT_GEN_UPDATE_IN_PROGRESS or not is_mmio_spte(cfg, spte):
        return False
    return memslots_gen & MMIO_SPTE_GEN_MASK == get_mmio_spte_generation(spte)


def check_mmio_spte_traced(
    cfg: SpteConfig, spte: int, memslots_gen: int
) -> tuple[bool, dict[str, int] | None]:
    """`check_mmio_spte()` with its tracepoint's fields (`kvm_gen`, `spte_gen`, both
    19 bits, `spte`, `valid`), or None where the kernel returns before tracing (an update
    in progress)."""
    if memslots_gen & KVM_MEMSLOT_GEN_UPDATE_IN_PROGRESS:
        return False, None
    kvm_gen, spte_gen = memslots_gen & MMIO_SPTE_GEN_MASK, get_mmio_spte_generation(spte)
    valid = kvm_gen == spte_gen and is_mmio_spte(cfg, spte)
    return valid, {"spte": spte, "kvm_gen": kvm_gen, "spte_gen": spte_gen, "valid": int(valid)}


KVM_PFN_NOSLOT = 1 << 63  # include/linux/kvm_host.h: the pfn of a fault no slot backs


def spte_requested_fields(gfn: int, pfn: int, level: int) -> dict[str, int]:
    """`trace_kvm_mmu_spte_requested(fault)`: `pfn | (gfn & (pages per goal level - 1))`
    (the 4K frame inside a huge mapping) at `fault->goal_level`."""
    pages = 1 << (SPTE_LEVEL_BITS * (level - 1))
    return {"gfn": gfn, "pfn": pfn | (gfn & (pages - 1)), "level": level}


def mmio_gen_wraps(memslots_gen: int, nr_address_spaces: int = 2) -> bool:
    """`kvm_mmu_invalidate_mmio_sptes()`: True when the new generation wrapped the 19-bit
    field ("zapping shadow pages for mmio generation wraparound" -> zap all, fast).

    The address-space id lives in the low bits (AS n starts at n and every update adds
    nr_as), so those are stripped: with 2 address spaces this fires every 2^18 updates.
    """
    if nr_address_spaces < 1 or nr_address_spaces & (nr_address_spaces - 1):
        raise ValueError(f"nr_address_spaces {nr_address_spaces} is not a power of two")
    gen = memslots_gen & MMIO_SPTE_GEN_MASK
    return gen & ~(nr_address_spaces - 1) == 0


def kvm_mmio_fields(gpa: int, write: bool, size: int = 4, val: int = 0) -> dict[str, int | str]:
    """`trace_kvm_mmio()` of an emulated MMIO access of `size` bytes (the operand's):
    KVM_TRACE_MMIO_WRITE of `val`, or a read that userspace completes
    (KVM_TRACE_MMIO_READ_UNSATISFIED, val 0)."""
    return {"type": "write" if write else "unsatisfied-read", "len": size, "gpa": gpa,
            "val": val if write else 0}  # fmt: skip


def mark_mmio_spte_fields(sptep: int, gfn: int, spte: int) -> dict[str, int]:
    """`trace_mark_mmio_spte(sptep, gfn, spte)`: access = spte & ACC_ALL, gen read back
    from the spte (19 bits)."""
    return {
        "sptep": sptep,
        "gfn": gfn,
        "access": spte & ACC_ALL,
        "gen": get_mmio_spte_generation(spte),
    }


def updates_until_mmio_wrap(memslots_gen: int, nr_address_spaces: int = 2) -> int:
    """How many memslot updates of this address space until `mmio_gen_wraps` fires."""
    left = MMIO_SPTE_GEN_MASK + 1 - (memslots_gen & MMIO_SPTE_GEN_MASK)
    return -(-left // nr_address_spaces)  # each update adds nr_address_spaces


def memslot_update_zaps(name: str, gen: int, nr_address_spaces: int) -> bool:
    """Whether a memslot event makes x86 zap every shadow page, fast: a DELETE or MOVE
    (`kvm_arch_flush_shadow_memslot`), or a new generation whose MMIO bits wrap
    (`kvm_mmu_invalidate_mmio_sptes`: "zapping shadow pages for mmio generation
    wraparound")."""
    if name == "kvm_arch_flush_shadow_memslot":
        return True
    return name == "kvm_arch_memslots_updated" and mmio_gen_wraps(gen, nr_address_spaces)


def spte_access_str(cfg: SpteConfig, spte: int) -> str:
    """The `(%s%s%s%s)` letters of `kvm_mmu_set_spte`: r, w, x and, unless shadow_user_mask
    is 0, u.  Today shadow_user_mask is never 0 (EPT uses the R bit), so u always prints;
    for EPT it repeats R.  (A 2025 MBEC RFC splits x into X/x; not modelled.)"""
    r = "r" if cfg.shadow_present_mask or spte & PT_PRESENT_MASK else "-"
    w = "w" if spte & PT_WRITABLE_MASK else "-"
    x = "x" if is_executable_pte(cfg, spte) else "-"
    u = "" if not cfg.shadow_user_mask else "u" if spte & cfg.shadow_user_mask else "-"
    return r + w + x + u


def describe_spte(cfg: SpteConfig, spte: int, level: int) -> str:
    """One line for the UI: what this spte at `level` means."""
    if spte in (0, SHADOW_NONPRESENT_VALUE):
        return "not present"
    if spte in (REMOVED_SPTE, FROZEN_SPTE):
        return "frozen (FROZEN_SPTE: a TDP MMU thread is changing it)"
    if is_mmio_spte(cfg, spte):
        gfn, gen = get_mmio_spte_gfn(cfg, spte), get_mmio_spte_generation(spte)
        access = get_mmio_spte_access(cfg, spte)
        return f"MMIO gfn {gfn:#x} gen {gen:#x} access {access:#x}"
    if not is_shadow_present_pte(spte):
        return f"not present ({spte:#x})"
    pfn = spte_to_pfn(spte)
    if not is_last_spte(spte, level):
        return f"L{level} table -> pfn {pfn:#x} ({spte_access_str(cfg, spte)})"
    size = {PG_LEVEL_4K: "4K", PG_LEVEL_2M: "2M", PG_LEVEL_1G: "1G"}.get(level, f"L{level}")
    flags = [size]
    if is_access_track_spte(cfg, spte):
        flags.append("access-tracked")
    if spte & cfg.shadow_accessed_mask:
        flags.append("A")
    if spte & cfg.shadow_dirty_mask:
        flags.append("D")
    if spte & cfg.shadow_mmu_writable_mask and not spte & PT_WRITABLE_MASK:
        flags.append("wrprot")
    return f"L{level} leaf pfn {pfn:#x} ({spte_access_str(cfg, spte)}) {' '.join(flags)}"
