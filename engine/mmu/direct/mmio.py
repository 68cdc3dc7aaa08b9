"""MMIO sptes on the direct MMU (EPT/NPT with tdp_mmu=N), mmu.c 6.18:
`mark_mmio_spte()` when a fault finds no memslot and MMIO caching is on (the emulator
after it, with `kvm_mmio` of the whole gpa, page offset included: emulate.py).  The
RSVD / EPT-misconfiguration path, `handle_mmio_page_fault(vcpu, addr, direct=true)`, is
the TDP MMU's too (mmio_info.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ...events import Event, FieldValue
from ...memslots.vm import Vm
from ..mmio_info import VcpuMmioInfo
from ..mmu_pages import KvmMmuPage
from ..role import ACC_ALL
from ..spte import (
    RetPf,
    SpteConfig,
    make_mmio_spte,
    mark_mmio_spte_fields,
)

PAGE_SHIFT = 12


class DirectMmio:
    vm: Vm
    cfg: SpteConfig
    mmio_info: VcpuMmioInfo
    stat: dict[str, int]
    _listener: Callable[[Event], None] | None

    if TYPE_CHECKING:  # DirectMmu's

        def _emit(self, name: str, **fields: FieldValue) -> None: ...

    def _mark_mmio_spte(self, root: KvmMmuPage, sp: KvmMmuPage, index: int, gfn: int) -> RetPf:
        self.stat["pf_emulate"] += 1
        gen = self.vm.generation(root.role.smm)
        sp.spt[index] = spte = make_mmio_spte(self.cfg, gfn, ACC_ALL, gen)
        self.stat["pf_mmio_spte_created"] += 1
        self._emit("mark_mmio_spte", **mark_mmio_spte_fields(sp.sptep(index), gfn, spte))
        return RetPf.EMULATE
