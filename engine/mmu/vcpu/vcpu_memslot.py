"""`kvm_vcpu_gfn_to_memslot()` as the x86 fault paths call it (the direct MMU's
`direct_page_fault` and the TDP MMU's `kvm_tdp_page_fault`, via `kvm_faultin_pfn`).

6.18 virt/kvm/kvm_main.c: the vCPU's own `last_used_slot` is tried first, and used
while it holds the gfn and its `last_used_slot_gen` is the address space's generation;
anything else goes through the search, which resets and refills it (what
`Vm.vcpu_gfn_to_memslot` does, docs/kvm.md §1.3, here without recording the search's
probes).  The hit is counted as a lookup too.
"""

from __future__ import annotations

from ...memslots.memslot import MemorySlot
from ...memslots.slot_set import MemslotSet
from ...memslots.vm import Vcpu, Vm


class VcpuMemslotCache:
    """The hit test of `kvm_vcpu_gfn_to_memslot()`, with the vCPUs' states and the
    address spaces' memslot sets looked up once."""

    __slots__ = ("_sets", "_vcpus", "vm")

    def __init__(self, vm: Vm) -> None:
        self.vm = vm
        self._vcpus: dict[int, Vcpu] = {}
        self._sets: dict[int, MemslotSet] = {
            as_id: vm.memslot_set(as_id) for as_id in range(vm.address_spaces)
        }

    def lookup(self, vcpu: int, gfn: int) -> MemorySlot | None:
        vm = self.vm
        if not vm.vcpu_cache:  # before 2021 the vCPU path used the VM-wide cache
            return vm.vcpu_gfn_to_memslot(vcpu, gfn)
        state = self._vcpus.get(vcpu)
        if state is None:
            state = self._vcpus[vcpu] = vm.vcpu(vcpu)
        slots = self._sets.get(state.as_id)
        if slots is None:
            return vm.vcpu_gfn_to_memslot(vcpu, gfn)  # (an address space that is not)
        vm.memslot_lookups += 1
        if state.last_used_slot_gen != slots.generation:
            state.last_used_slot, state.last_used_slot_gen = None, slots.generation
        cached = state.last_used_slot
        if cached is not None and cached.base_gfn <= gfn < cached.base_gfn + cached.npages:
            return cached
        slot = slots.lookup.search(gfn)  # search_memslots(), as Vm.explain without probes
        if slot is not None:
            state.last_used_slot = slot
        return slot
