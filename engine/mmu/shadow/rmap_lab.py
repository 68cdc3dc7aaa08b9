"""A fork storm to watch one rmap grow (the PTE_LIST_EXT thread), for the rmap screen.

A parent process maps `pages` guest pages on the shadow MMU (EPT off); each `fork()`
adds a child that touches all of them, so every shared gfn's rmap gains one spte;
`exit()` drops the oldest child (`pte_list_remove` fills the holes).  `with_era()`
replays the same storm under another PTE_LIST_EXT era, so the chains can be compared.
"""

from __future__ import annotations

from collections.abc import Callable

from ...events import Event
from ...layouts import build_vm, preset
from ..rmap import KvmRmapHead
from ..rmap.stat import RmapHistogram
from ..spte import SPTE_CONFIGS
from .mmu import ShadowMmu
from .rmap_workloads import DATA_GFN, GVA


class ForkLab:
    def __init__(
        self,
        era: str = "6.4",
        *,
        pages: int = 4,
        layout: str = "pc-4g",
        emit: Callable[[Event], None] | None = None,
    ) -> None:
        self.era = era
        self.pages = pages
        self.layout = layout
        self._emit = emit
        vm = build_vm(preset(layout))
        self.mmu = ShadowMmu(vm, SPTE_CONFIGS["shadow"], pte_list_era=era, emit=emit)
        self.parent = self.mmu.guest.spawn()
        for i in range(pages):
            self.mmu.guest.map(self.parent, GVA + i * 4096, DATA_GFN + i)
        self._touch(self.parent, 0)
        self.children: list[int] = []

    def _touch(self, cr3: int, vcpu: int) -> None:
        for i in range(self.pages):
            self.mmu.page_fault(vcpu, cr3, GVA + i * 4096)

    def fork(self) -> int:
        """`fork()`: a child that reads every shared page (one more spte per gfn)."""
        child = self.mmu.guest.fork(self.parent)
        self._touch(child, 1 + len(self.children) % 3)
        self.children.append(child)
        return child

    def exit(self) -> int | None:
        """The oldest child exits: its sptes leave the rmaps."""
        if not self.children:
            return None
        child = self.children.pop(0)
        self.mmu.drop_process(child)
        return child

    def head(self, page: int = 0) -> KvmRmapHead | None:
        """The rmap head of the `page`-th shared gfn."""
        gfn = DATA_GFN + page
        slot = self.mmu.vm.gfn_to_memslot(gfn)
        if slot is None:
            return None
        return self.mmu.rmaps.get((0, slot.id, 1), {}).get(gfn - slot.base_gfn)

    def histogram(self, *, log2: bool = False) -> RmapHistogram:
        return self.mmu.rmaps_stat(log2=log2)

    def with_era(self, era: str) -> ForkLab:
        """The same storm (as many children) under another era."""
        lab = ForkLab(era, pages=self.pages, layout=self.layout, emit=self._emit)
        for _ in self.children:
            lab.fork()
        return lab
