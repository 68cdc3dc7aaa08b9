"""MMIO sptes: a gfn no memslot backs, cached in the spte itself with the memslots
generation, so a repeated access is emulated without a memslot search (docs/kvm.md §5,
tracepoints §6.3; the memslot-search thread (kvm, 2011)).  `make_mmio_spte()` /
`check_mmio_spte()` / `get_mmio_spte_gfn()` (spte.c, mmu.c 6.17/6.18), the generation
wrap that zaps everything (`kvm_mmu_invalidate_mmio_sptes()`) and the shadow MMU's answer
to a memslot update (`shadow_mmu_memslot_update`), and the tracepoint fields of
`kvm_mmio`, `mark_mmio_spte` and `kvm_mmu_spte_requested`.  The layout constants and
`is_mmio_spte()` live in spte.py, which re-exports the spte helpers here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..memslots.constants import PAGE_SHIFT
from .role import ACC_ALL
from .spte import (
    KVM_MEMSLOT_GEN_UPDATE_IN_PROGRESS,
    MMIO_SPTE_GEN_HIGH_MASK,
    MMIO_SPTE_GEN_HIGH_SHIFT,
    MMIO_SPTE_GEN_LOW_MASK,
    MMIO_SPTE_GEN_LOW_SHIFT,
    MMIO_SPTE_GEN_MASK,
    SHADOW_NONPRESENT_OR_RSVD_MASK_LEN,
    SPTE_LEVEL_BITS,
    SpteConfig,
    is_mmio_spte,
)

if TYPE_CHECKING:  # annotations only: spte.py imports this module, mmu_pages.py imports spte
    from ..events import Event
    from ..memslots.vm import Vm
    from .mmu_pages import MmuPages


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


def kvm_mmio_fields(gpa: int, write: bool) -> dict[str, int | str]:
    """`trace_kvm_mmio()` of an emulated MMIO access: KVM_TRACE_MMIO_WRITE, or a read
    that userspace completes (KVM_TRACE_MMIO_READ_UNSATISFIED); the value is not modelled."""
    return {"type": "write" if write else "unsatisfied-read", "len": 4, "gpa": gpa, "val": 0}


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


def shadow_mmu_memslot_update(event: Event, vm: Vm, pages: MmuPages) -> None:
    """The shadow MMU's (direct or indirect pages) answer to a memslot event: a DELETE/MOVE
    flush (`kvm_arch_flush_shadow_memslot`) or an MMIO generation wrap
    (`kvm_mmu_invalidate_mmio_sptes`) zaps everything, fast (`memslot_update_zaps`); a
    CREATE or DELETE that went through resizes the page budget
    (`kvm_arch_commit_memory_region`)."""
    fields = event.fields
    if event.name == "kvm_set_user_memory_region":
        if fields.get("ret") == 0:
            pages.commit_memory_region(str(fields.get("change", "")), vm.nr_memslot_pages)
        return
    if memslot_update_zaps(event.name, int(fields.get("gen", 0)), vm.address_spaces):
        pages.zap_all_fast()
