"""The rmaps of the direct MMU (EPT/NPT with tdp_mmu=N): per memslot and level, each
gfn's `kvm_rmap_head` of the present leaves that map it (`rmap_add()`, `drop_spte()` →
`rmap_remove()`, mmu.c 6.18), and the audit of leaves against rmaps.

Rmaps hold `kvm_rmap_head.val` as the kernel does (`rmap.RmapVal`): one sptep is a bare
int in the per-slot, per-level dict; the second sptep of a gfn makes a `KvmRmapHead`
(1 -> many), which keeps its desc down to one entry.  `rmaps` decodes them into heads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ...errors import AuditError
from ...memslots.memslot import MemorySlot
from ...memslots.vm import Vm
from ..mapping_level import gfn_to_index as gfn_to_index  # the rmap slot of a gfn
from ..mmu_pages import KvmMmuPage, MmuPages
from ..rmap import (
    KvmRmapHead,
    PteListEra,
    RmapVal,
    check_sptep,
    rmap_val_add,
    rmap_val_head,
    rmap_val_remove,
    rmap_val_sptes,
)
from ..spte import SpteConfig, is_mmio_spte

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


class DirectRmaps:
    vm: Vm
    cfg: SpteConfig
    pages: MmuPages
    era: PteListEra
    rmap_vals: dict[RmapKey, dict[int, RmapVal]]

    @property
    def rmaps(self) -> RmapsView:
        """The rmaps as heads, (as_id, slot id, level) -> gfn_to_index -> KvmRmapHead."""
        return RmapsView(self.rmap_vals, self.era)

    def rmap_add(self, slot: MemorySlot, gfn: int, level: int, sptep: int) -> None:
        """`rmap_add()`: `sptep` onto the rmap of (slot, level, gfn)."""
        vals = self.rmap_vals.setdefault((slot.as_id, slot.id, level), {})
        key = gfn_to_index(gfn, slot.base_gfn, level)
        old = vals.get(key)
        if old is None:
            vals[key] = sptep  # pte_list_add 0 -> 1: val is the sptep itself
        else:
            vals[key] = rmap_val_add(old, sptep, self.era)

    def _drop_leaf(self, sp: KvmMmuPage, index: int, spte: int) -> None:
        """A present leaf goes away: take it off its gfn's rmap (`drop_spte`)."""
        if is_mmio_spte(self.cfg, spte):
            return
        gfn = sp.gfn + (index << level_shift(sp.role.level))
        as_id, level = sp.role.smm, sp.role.level
        slot = self.vm.memslot_set(as_id).gfn_tree.search(gfn)
        if slot is None:
            raise AuditError(f"present leaf {sp.sptep(index):#x} maps gfn {gfn:#x} of no slot")
        vals = self.rmap_vals.get((as_id, slot.id, level), {})
        key = gfn_to_index(gfn, slot.base_gfn, level)
        sptep = sp.spt_pa + 8 * index
        old = vals.get(key)
        if type(old) is int and old == sptep:
            del vals[key]  # pte_list_remove 1 -> 0
            return
        if rmap_val_remove(old, sptep) is None:
            del vals[key]

    def audit(self) -> None:
        """Pages consistent; every rmap entry is a present leaf of its gfn and level, and
        every present leaf is in exactly one rmap; rmap vals encoded as the kernel's."""
        self.pages.audit()
        leaves: dict[int, KvmMmuPage] = {}
        nonpresent = self.pages.nonpresent
        for sp in self.pages.pages():
            for index, spte in enumerate(sp.spt):
                leaf = spte != nonpresent and self.pages.child_at(sp, index) is None
                if leaf and not is_mmio_spte(self.cfg, spte):
                    leaves[sp.sptep(index)] = sp
        seen: set[int] = set()
        for (as_id, slot_id, level), vals in self.rmap_vals.items():
            for key, val in vals.items():
                self._audit_val(key, val)
                for sptep in rmap_val_sptes(val):
                    holder = leaves.get(sptep)
                    if holder is None or holder.role.level != level or sptep in seen:
                        raise AuditError(f"rmap entry {sptep:#x} is not a present leaf once")
                    gfn = holder.gfn + (((sptep & 0xFFF) >> 3) << level_shift(level))
                    slot = self.vm.memslot_set(as_id).gfn_tree.search(gfn)
                    if (
                        holder.role.smm != as_id
                        or slot is None
                        or slot.id != slot_id
                        or gfn_to_index(gfn, slot.base_gfn, level) != key
                    ):
                        raise AuditError(f"rmap entry {sptep:#x} is in the rmap of another gfn")
                    seen.add(sptep)
        if seen != set(leaves):
            raise AuditError(f"{len(set(leaves) - seen)} present leaves are in no rmap")

    def _audit_val(self, key: int, val: RmapVal) -> None:
        if isinstance(val, KvmRmapHead):
            val.audit()
            if val.era is not self.era or not val.is_many:
                raise AuditError(f"rmap val of {key} is a head without descs")
        else:
            try:
                check_sptep(val)
            except ValueError as err:
                raise AuditError(f"rmap val {val:#x} of {key}: {err}") from None
