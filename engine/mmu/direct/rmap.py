"""The rmaps of the direct MMU (EPT/NPT with tdp_mmu=N) as they are read: per memslot and
level, each gfn's `kvm_rmap_head` of the present leaves that map it.  `DirectMmu`
(mmu.py) keeps and changes them (`rmap_add()`, `drop_spte()` → `rmap_remove()`, mmu.c
6.18) and audits leaves against them; this module has their key and their read-only view.

Rmaps hold `kvm_rmap_head.val` as the kernel does (`rmap.RmapVal`): one sptep is a bare
int in the per-slot, per-level dict; the second sptep of a gfn makes a `KvmRmapHead`
(1 -> many), which keeps its desc down to one entry.  `rmaps` decodes them into heads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..mapping_level import gfn_to_index as gfn_to_index  # the rmap slot of a gfn
from ..rmap import (
    KvmRmapHead,
    PteListEra,
    RmapVal,
    rmap_val_head,
)

LEVEL_BITS = 9
RmapKey = tuple[int, int, int]  # (as_id, slot id, level)


def level_shift(level: int) -> int:
    """gfn bits below one entry of a page table of `level` (0 for 4K leaves)."""
    return LEVEL_BITS * (level - 1)


class SlotRmaps(Mapping[int, KvmRmapHead]):
    """One slot's rmap at one level, `gfn_to_index` -> head, decoded from stored vals (a
    single sptep becomes a new one-entry head; a desc chain is the live head)."""

    def __init__(self, vals: dict[int, RmapVal], era: PteListEra) -> None:
        self._vals, self._era = vals, era

    def __getitem__(self, key: int) -> KvmRmapHead:
        return rmap_val_head(self._vals[key], self._era)

    def __contains__(self, key: object) -> bool:  # (Mapping's decodes the head)
        return key in self._vals

    def __iter__(self) -> Iterator[int]:
        return iter(self._vals)

    def __len__(self) -> int:
        return len(self._vals)


class RmapsView(Mapping[RmapKey, SlotRmaps]):
    """`DirectMmu.rmaps`: (as_id, slot id, level) -> that slot's rmap (read-only)."""

    def __init__(self, vals: dict[RmapKey, dict[int, RmapVal]], era: PteListEra) -> None:
        self._vals, self._era = vals, era

    def __getitem__(self, key: RmapKey) -> SlotRmaps:
        return SlotRmaps(self._vals[key], self._era)

    def __iter__(self) -> Iterator[RmapKey]:
        return iter(self._vals)

    def __len__(self) -> int:
        return len(self._vals)
