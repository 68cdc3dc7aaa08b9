"""Tables behind `DirectMmu`'s speed: the constant bits of each kind of RAM leaf
(`spte_constants`), and the read-only views that decode the stored `kvm_rmap_head.val`s
into heads (`SlotRmaps`, `RmapsView`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..rmap import KvmRmapHead, PteListEra, RmapVal, rmap_val_head
from ..role import ACC_ALL, PG_LEVEL_1G, PG_LEVEL_4K
from ..spte import SPTE_BASE_ADDR_MASK, SpteConfig, make_spte

PAGE_SHIFT = 12
LEVEL_BITS = 9
_PFN_BITS = 40  # bits 12-51 of an spte

RmapKey = tuple[int, int, int]  # (as_id, slot id, level)


def level_shift(level: int) -> int:
    """gfn bits below one entry of a page table of `level` (0 for 4K leaves)."""
    return LEVEL_BITS * (level - 1)


def _spte_key(level: int, writable: bool, dirty: bool) -> int:
    return level << 2 | (2 if writable else 0) | (1 if dirty else 0)


def spte_constants(cfg: SpteConfig) -> dict[int, tuple[int, int]]:
    """For each (level, writable, dirty) of a RAM leaf with ACC_ALL, accessed: the bits
    `make_spte()` sets whatever the pfn, and the pfn bits that send a pfn back to
    `make_spte()` (outside bits 12-51, misaligned for the level, or in the MMIO mask).
    Keyed by `_spte_key`; a combination `make_spte()` refuses for pfn 0 has forbidden -1."""
    mmio_pfn_bits = 0
    if cfg.shadow_mmio_value:
        mmio_pfn_bits = (cfg.shadow_mmio_mask & SPTE_BASE_ADDR_MASK) >> PAGE_SHIFT
    table: dict[int, tuple[int, int]] = {}
    for level in range(PG_LEVEL_4K, PG_LEVEL_1G + 1):
        forbidden = -(1 << _PFN_BITS) | ((1 << level_shift(level)) - 1) | mmio_pfn_bits
        for writable in (False, True):
            for dirty in (False, True):
                try:
                    const = make_spte(
                        cfg, 0, ACC_ALL, level, writable=writable, accessed=True, dirty=dirty
                    )
                except ValueError:
                    const, forbidden = 0, -1
                if const & SPTE_BASE_ADDR_MASK:
                    const, forbidden = 0, -1  # never: pfn 0 sets no address bit
                table[_spte_key(level, writable, dirty)] = (const, forbidden)
    return table


class SlotRmaps(Mapping[int, KvmRmapHead]):
    """One slot's rmap at one level, `gfn_to_index` -> head, decoded from stored vals (a
    single sptep becomes a new one-entry head; a desc chain is the live head)."""

    def __init__(self, vals: dict[int, RmapVal], era: PteListEra) -> None:
        self._vals, self._era = vals, era

    def __getitem__(self, key: int) -> KvmRmapHead:
        return rmap_val_head(self._vals[key], self._era)

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
