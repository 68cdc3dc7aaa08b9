"""MMIO sptes on the direct MMU (EPT/NPT with tdp_mmu=N), mmu.c 6.17/6.18: the RSVD /
EPT-misconfiguration path (`handle_mmio_page_fault(vcpu, addr, direct=true)`: the vCPU's
MMIO info first, then `check_mmio_spte()` of the spte the lockless walk ends at) and
`mark_mmio_spte()` when a fault finds no memslot and MMIO caching is on, each with its
tracepoint (`check_mmio_spte`, `handle_mmio_page_fault`, `mark_mmio_spte`, `kvm_mmio`).
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
    check_mmio_spte_traced,
    get_mmio_spte_access,
    kvm_mmio_fields,
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

    def _handle_mmio_page_fault(self, vcpu: int, root: KvmMmuPage, gfn: int, spte: int) -> bool:
        """`handle_mmio_page_fault(vcpu, addr, direct=true)`: True (RET_PF_EMULATE) when
        the vCPU's MMIO info holds this gpa (`vcpu_match_mmio_gpa`), or the MMIO spte's
        generation is current.  The trace prints `addr` 0 (direct) and
        `get_mmio_spte_access(spte)` = spte & shadow_mmio_access_mask (0 on EPT)."""
        gen = self.vm.generation(root.role.smm)
        if self.mmio_info.match_gpa(vcpu, gfn << PAGE_SHIFT, gen) is not None:
            return True
        valid, fields = check_mmio_spte_traced(self.cfg, spte, gen)
        if fields is not None:
            self._emit("check_mmio_spte", **fields)
        if not valid:
            return False
        access = get_mmio_spte_access(self.cfg, spte)
        self._emit("handle_mmio_page_fault", addr=0, gfn=gfn, access=access)
        self.mmio_info.cache(vcpu, 0, gfn, access, gen)
        return True

    def _emit_mmio(self, gpa: int, write: bool) -> None:
        """What the emulator traces for the access: `kvm_mmio` with the whole gpa, page
        offset included (`write_mmio()`/`read_exit_mmio()`, 6.18 x86.c, through
        `emulator_read_write_onepage()`, which keeps `addr & ~PAGE_MASK`)."""
        if self._listener is not None:
            self._emit("kvm_mmio", **kvm_mmio_fields(gpa, write))

    def _mark_mmio_spte(self, root: KvmMmuPage, sp: KvmMmuPage, index: int, gfn: int) -> RetPf:
        self.stat["pf_emulate"] += 1
        gen = self.vm.generation(root.role.smm)
        sp.spt[index] = spte = make_mmio_spte(self.cfg, gfn, ACC_ALL, gen)
        self.stat["pf_mmio_spte_created"] += 1
        self._emit("mark_mmio_spte", **mark_mmio_spte_fields(sp.sptep(index), gfn, spte))
        return RetPf.EMULATE
