"""The shadow MMU's rmaps: each present leaf on the rmap of its (slot, level, gfn) (4K,
or the 2M/1G frame of a huge leaf: `gfn_to_rmap()`), and its `shadowed_translation`
(`sp->shadowed_translation`), for `ShadowMmu`; `rmap_count` is `pte_list_count()`,
`rmaps_stat` the debugfs `mmu_rmaps_stat` histogram."""

from __future__ import annotations

from typing import NamedTuple

from ...errors import AuditError
from ...memslots.vm import Vm
from ..direct.rmap import gfn_to_index
from ..mmu_pages import KvmMmuPage, MmuPages
from ..rmap import KvmRmapHead
from ..rmap.stat import KVM_LPAGE_STR, RmapHistogram
from ..spte import SpteConfig, is_mmio_spte


class Translation(NamedTuple):
    """What a present leaf maps (`sp->shadowed_translation`) and where its rmap is."""

    as_id: int
    slot_id: int
    gfn: int  # the first gfn of a huge leaf
    rmap_index: int
    level: int = 1


class ShadowRmaps:
    """The rmap half of `ShadowMmu` (its attributes are set by `ShadowMmu.__init__`)."""

    vm: Vm
    cfg: SpteConfig
    rmaps: dict[tuple[int, int, int], dict[int, KvmRmapHead]]
    shadowed_translation: dict[int, Translation]
    pages: MmuPages

    def _rmap(self, as_id: int, slot_id: int, level: int = 1) -> dict[int, KvmRmapHead]:
        return self.rmaps.setdefault((as_id, slot_id, level), {})

    def _rmap_of(self, as_id: int, gfn: int, levels: range = range(1, 2)) -> list[int]:
        """The sptes on `gfn`'s rmaps at `levels` (4K: those mapping the gfn alone;
        2M/1G: the huge leaves whose frame holds it), one memslot lookup."""
        slot = self.vm.gfn_to_memslot(gfn, as_id)
        if slot is None:
            return []
        out: list[int] = []
        for level in levels:
            heads = self.rmaps.get((as_id, slot.id, level), {})
            head = heads.get(gfn_to_index(gfn, slot.base_gfn, level))
            out += head if head is not None else []
        return out

    def rmap_count(self, gfn: int, as_id: int = 0) -> int:
        """`pte_list_count()` of the gfn's 4K rmap: how many sptes map it."""
        return len(self._rmap_of(as_id, gfn))

    def rmaps_stat(self, *, log2: bool = False) -> RmapHistogram:
        """debugfs `mmu_rmaps_stat`: every rmap head of every slot, empty ones included
        (`kvm_mmu_slot_lpages()` heads per level)."""
        histogram = RmapHistogram(log2=log2)
        for as_id in range(self.vm.address_spaces):
            for slot in self.vm.memslots(as_id):
                for level, name in enumerate(KVM_LPAGE_STR, start=1):
                    shift = 9 * (level - 1)
                    nheads = ((slot.end_gfn - 1) >> shift) - (slot.base_gfn >> shift) + 1
                    counts = [
                        h.count() for h in self.rmaps.get((as_id, slot.id, level), {}).values()
                    ]
                    histogram.add(name, 0, nheads - len(counts))
                    histogram.add_counts(name, counts)
        return histogram

    def _zap_leaf(self, sp: KvmMmuPage, index: int) -> None:
        self._drop_leaf(sp, index, sp.spt[index])
        sp.spt[index] = self.pages.nonpresent

    def _drop_leaf(self, sp: KvmMmuPage, index: int, spte: int) -> None:
        """`drop_spte()`: a present leaf leaves its gfn's rmap."""
        if is_mmio_spte(self.cfg, spte):
            return
        tr = self.shadowed_translation.pop(sp.sptep(index), None)
        if tr is None:
            raise AuditError(f"leaf {sp.sptep(index):#x} has no shadowed translation")
        heads = self.rmaps[(tr.as_id, tr.slot_id, tr.level)]
        heads[tr.rmap_index].remove(sp.sptep(index))
        if not heads[tr.rmap_index].count():
            del heads[tr.rmap_index]
