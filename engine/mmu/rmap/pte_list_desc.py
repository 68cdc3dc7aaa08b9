"""`struct pte_list_desc`, era by era: the overflow block of x86 KVM's reverse map (a
`kvm_rmap_head` holding more than one sptep points at a chain of them), its layout,
`PTE_LIST_EXT` and the cache lines a walk of one touches.

docs/kvm.md §3 (arch/x86/kvm/mmu/mmu.c).  An sptep is a plain int: an spte's host
physical address, nonzero and 8-byte aligned.  The eras, by name:

* ``"3"`` (to 2021): `{ u64 *sptes[3]; more; }`, 32 bytes, NULL-terminated.
* ``"15"``: Peter Xu's v2 7/9 (the PTE_LIST_EXT thread): the same code, `PTE_LIST_EXT
  15`, 128 bytes.  In mainline as dc1cff969101 ("KVM: X86: MMU: Tune PTE_LIST_EXT to be
  bigger"), which 13236e25ebab made 14 in the same (5.15) merge window: no release had 15.
* ``"14"`` (5.15-6.3, 13236e25ebab): `{ more; u64 spte_count; u64 *sptes[14]; }`.
  VERIFIED (v3 6/7 mail, 9/9 mail).
* ``"6.4"`` (default; Lai Jiangshan, merged for 6.4): `u32 spte_count, tail_count`.
  VERIFIED (kvm-x86 mmu.c, patch mail).

How each era adds, removes, counts and zaps is in head.py (`KvmRmapHead`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

CACHE_LINE = 64
DEFAULT_ERA = "6.4"
_PTR = 8  # sizeof(u64 *)


@dataclass(frozen=True, slots=True)
class PteListEra:
    """One era of `struct pte_list_desc`: `PTE_LIST_EXT`, layout and algorithm."""

    name: str
    ext: int  # PTE_LIST_EXT
    layout: str  # the C struct
    sizeof: int  # bytes
    more_offset: int
    sptes_offset: int
    spte_count_offset: int | None  # None: no counter, sptes[] is NULL-terminated
    tail_count_offset: int | None  # None: append at the chain's end, not a new head

    @property
    def has_spte_count(self) -> bool:
        return self.spte_count_offset is not None

    @property
    def has_tail_count(self) -> bool:
        return self.tail_count_offset is not None


def _member_name(decl: str) -> str:
    return decl.split()[-1].lstrip("*").split("[")[0]


def _member_size(decl: str) -> int:
    """sizeof a C member: pointers and u64 take 8 bytes, u32 takes 4; `[n]` multiplies."""
    size = _PTR if "*" in decl or decl.startswith("u64") else 4
    return size * int(decl[decl.index("[") + 1 : -1]) if decl.endswith("]") else size


def _era(name: str, *members: str) -> PteListEra:
    """Lay `struct pte_list_desc` out member by member (each naturally aligned)."""
    offsets: dict[str, int] = {}
    end = 0
    for decl in members:
        offsets[_member_name(decl)] = end
        end += _member_size(decl)
    sptes = next(decl for decl in members if _member_name(decl) == "sptes")
    layout = "struct pte_list_desc { " + " ".join(f"{decl};" for decl in members) + " }"
    ext, more, at = _member_size(sptes) // _PTR, offsets["more"], offsets["sptes"]
    counters = offsets.get("spte_count"), offsets.get("tail_count")
    return PteListEra(name, ext, layout, end, more, at, *counters)


_MORE = "struct pte_list_desc *more"
ERAS: dict[str, PteListEra] = {
    era.name: era
    for era in (
        _era("3", "u64 *sptes[3]", _MORE),
        _era("15", "u64 *sptes[15]", _MORE),
        _era("14", _MORE, "u64 spte_count", "u64 *sptes[14]"),
        _era("6.4", _MORE, "u32 spte_count", "u32 tail_count", "u64 *sptes[14]"),
    )
}

# Fake slab addresses for descs, so `val` reads like the kernel's (desc address | 1).
_desc_addresses = itertools.count(0xFFFF_8881_0000_0000, 128)


class PteListDesc:
    """`struct pte_list_desc`; `spte_count`/`tail_count` stay 0 in eras without them."""

    __slots__ = ("addr", "era", "more", "spte_count", "sptes", "tail_count")

    def __init__(self, era: PteListEra) -> None:
        self.era = era
        self.addr = next(_desc_addresses)
        self.more: PteListDesc | None = None
        self.spte_count = 0
        self.tail_count = 0
        self.sptes = [0] * era.ext  # 0 is NULL

    def used(self) -> int:
        """Entries held: `spte_count`, or the length of the non-NULL prefix."""
        if self.era.has_spte_count:
            return self.spte_count
        for i, sptep in enumerate(self.sptes):
            if not sptep:
                return i
        return self.era.ext

    def entries(self) -> list[int]:
        return self.sptes[: self.used()]


def check_sptep(sptep: int) -> None:
    """An sptep is the nonzero, 8-byte aligned host physical address of an spte."""
    if not 0 < sptep < 1 << 64 or sptep % 8:
        raise ValueError(f"not an sptep: {sptep:#x} (nonzero and 8-byte aligned)")


def desc_cache_lines(era: PteListEra, used: int) -> int:
    """64-byte lines a walk of one desc with `used` entries touches.

    The walk reads `more` and the entries; with a counter it also reads `spte_count` and
    stops there (pte_list_remove's scan, kvm_zap_all_rmap_sptes), without one it reads
    the NULL slot that ends a partial desc.  Descs are assumed aligned to their size.
    Note `rmap_get_next` (for_each_rmap_spte) reads that NULL slot in every era, so an
    iterator walk of a 6-entry era-14/6.4 desc touches its second line too.
    """
    read = used if era.has_spte_count else min(used + 1, era.ext)
    offsets = [era.more_offset] + [era.sptes_offset + _PTR * k for k in range(read)]
    if era.spte_count_offset is not None:
        offsets.append(era.spte_count_offset)
    return len({offset // CACHE_LINE for offset in offsets})
