"""`Vm`: a KVM virtual machine as far as memslots go (`struct kvm`, virt/kvm/kvm_main.c).

Public API (docs/architecture.md §6.2): `Vm(lookup=...)`, `set_user_memory_region()`,
`memslots()`, `gfn_to_memslot()`, `generation()`.  Updates follow `kvm_set_memslot()`
(docs/kvm.md §2.3): DELETE and MOVE first swap in an invalid copy of the slot
(`KVM_MEMSLOT_INVALID`) and flush the shadow MMU, then swap in the result; every swap
adds the number of address spaces to the generation (`kvm_swap_active_memslots()`).
Events report each step to listeners, so later parts of the model (the shadow MMU) and
the app can follow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import AuditError, KvmError
from ..events import Event, Listener
from ..lookup import LOOKUP_STRATEGIES, make_strategy
from ..lookup.base import CacheProbe, LookupTrace
from .constants import (
    KVM_DIRTY_LOG_INITIALLY_SET,
    KVM_MAX_NR_ADDRESS_SPACES,
    KVM_MEMSLOT_INVALID,
    KVM_MR_CREATE,
    KVM_MR_DELETE,
    KVM_MR_MOVE,
)
from .memslot import MemorySlot
from .set_memory_region import (
    KvmSetUserMemoryRegion,
    MemslotChange,
    RegionRequest,
    VmLimits,
    check_max_gfn,
    validate_region,
)
from .slot_set import MemslotSet, try_get_memslot


@dataclass(slots=True)
class Vcpu:
    """The per-vCPU memslot cache: `vcpu->last_used_slot` + `last_used_slot_gen` (§1.3);
    `as_id` is 1 while the vCPU is in SMM (HF_SMM_MASK)."""

    vcpu_id: int
    as_id: int = 0
    last_used_slot: MemorySlot | None = None
    last_used_slot_gen: int = -1


class Vm(KvmSetUserMemoryRegion):
    """Memslots of one VM: address spaces, lookups, caches, generations, events.

    `track_all` (default) keeps every strategy's structure up to date so any of them can
    explain a lookup; `False` keeps only the gfn rbtree and the chosen structure.
    """

    def __init__(
        self,
        lookup: str = "rbtree",
        *,
        address_spaces: int = KVM_MAX_NR_ADDRESS_SPACES,
        last_used_slot: bool = True,
        vcpu_cache: bool = True,
        readonly_mem: bool = True,
        host_phys_bits: int = 52,
        track_all: bool = True,
    ) -> None:
        if lookup not in LOOKUP_STRATEGIES:
            make_strategy(lookup)  # raises the ValueError with the list of names
        if not 1 <= address_spaces <= KVM_MAX_NR_ADDRESS_SPACES:
            raise ValueError(f"address_spaces must be 1 or 2, not {address_spaces}")
        self.limits = VmLimits(address_spaces, readonly_mem, host_phys_bits)
        self._sets = [MemslotSet(as_id, lookup, track_all) for as_id in range(address_spaces)]
        self.nr_memslot_pages = 0
        self.vcpu_cache = vcpu_cache
        self._vcpus: dict[int, Vcpu] = {}
        # KVM_ENABLE_CAP (`kvm_vm_ioctl_enable_cap_generic()`, kvm_main.c): the flags of
        # KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2 and KVM_CAP_DIRTY_LOG_RING's ring size in bytes
        # (`kvm->manual_dirty_log_protect`, `kvm->dirty_ring_size`; engine/mmu/dirty_log.py)
        self.manual_dirty_log_protect = 0
        self.dirty_ring_size = 0
        self.memslot_lookups = 0  # calls of gfn_to_memslot and kvm_vcpu_gfn_to_memslot
        self._listeners: list[Listener] = []
        self._lookup = lookup
        self.set_last_used_slot(last_used_slot)

    # -- configuration ------------------------------------------------------------------

    @property
    def address_spaces(self) -> int:
        return self.limits.nr_address_spaces

    @property
    def lookup(self) -> str:
        """Name of the lookup strategy `gfn_to_memslot()` uses."""
        return self._lookup

    def set_lookup(self, name: str) -> None:
        """Switch strategy; the new structure is built from the current slots."""
        if name not in LOOKUP_STRATEGIES:
            make_strategy(name)
        for slots in self._sets:
            slots.set_lookup(name)
        self._lookup = name

    @property
    def last_used_slot(self) -> bool:
        """Whether the VM-wide `last_used_slot` cache is in front of the structure."""
        return self._sets[0].use_last_used_slot

    def set_last_used_slot(self, enabled: bool) -> None:
        for slots in self._sets:
            slots.use_last_used_slot = enabled
            if not enabled:
                slots.last_used_slot = None

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` with every event; returns a function that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _emit(self, name: str, **fields: int | str | bool) -> None:
        if self._listeners:
            event = Event(name, fields)
            for listener in list(self._listeners):
                listener(event)

    # -- KVM_SET_USER_MEMORY_REGION ------------------------------------------------------

    def kvm_vm_ioctl_set_memory_region(self, req: RegionRequest) -> None:
        """KVM_SET_USER_MEMORY_REGION (v1) once copied in (`set_user_memory_region()`, from
        `KvmSetUserMemoryRegion`).  Raises `KvmError` and changes nothing on refusal."""
        try:
            change = validate_region(
                req,
                self.limits,
                self.slot,
                self._overlapping,
                self.nr_memslot_pages,
            )
        except KvmError as err:
            self._emit_ioctl(req, -(err.errno or 0), "refused")
            raise
        if change is None:
            self._emit_ioctl(req, 0, "none")
            return
        try:
            self._set_memslot(change)
        except KvmError as err:
            self._emit_ioctl(req, -(err.errno or 0), "refused")
            raise
        self._emit_ioctl(req, 0, change.change)

    def x86_set_memory_region(self, slot_id: int, gpa: int, size: int, hva: int) -> None:
        """`__x86_set_memory_region()` (6.18 x86.c): one of KVM's internal memslots (an id
        from KVM_USER_MEM_SLOTS on, e.g. the APIC-access page's) in each address space,
        through `__kvm_set_memory_region()` without the ioctl's checks."""
        for as_id in range(self.address_spaces):
            req = RegionRequest.from_uapi(as_id << 16 | slot_id, 0, gpa, size, hva)
            change = validate_region(
                req, self.limits, self.slot, self._overlapping, self.nr_memslot_pages, True
            )
            if change is not None:
                self._set_memslot(change)
                self._emit_ioctl(req, 0, change.change)

    def _emit_ioctl(self, req: RegionRequest, ret: int, change: str) -> None:
        self._emit(
            "kvm_set_user_memory_region",
            slot=req.slot,
            flags=req.flags,
            guest_phys_addr=req.guest_phys_addr,
            memory_size=req.memory_size,
            userspace_addr=req.userspace_addr,
            change=change,
            ret=ret,
        )

    def _overlapping(self, as_id: int, slot_id: int, start: int, end: int) -> MemorySlot | None:
        return self._sets[as_id].overlapping(slot_id, start, end)

    def _set_memslot(self, change: MemslotChange) -> None:
        """`kvm_set_memslot()`: invalidate first for DELETE/MOVE, then apply and commit."""
        slots = self._sets[change.as_id]
        old = change.old
        if change.change in (KVM_MR_DELETE, KVM_MR_MOVE):
            assert old is not None
            invalid = self._invalidate_memslot(slots, old)
            if change.change == KVM_MR_MOVE:
                assert change.new is not None
                try:
                    check_max_gfn(change.new, self.limits)
                except KvmError:
                    # kvm_set_memslot(): "For DELETE/MOVE, revert the above INVALID change"
                    slots.replace(invalid, old)
                    self._swap_active_memslots(slots, "revert")
                    raise
            old = invalid
        if change.change == KVM_MR_CREATE:
            assert change.new is not None
            slots.install(change.new)
            self.nr_memslot_pages += change.new.npages
        elif change.change == KVM_MR_DELETE:
            assert old is not None
            slots.remove(old)
            self.nr_memslot_pages -= old.npages
        else:
            assert old is not None and change.new is not None
            slots.replace(old, change.new)
        self._swap_active_memslots(slots, change.change)

    def _invalidate_memslot(self, slots: MemslotSet, old: MemorySlot) -> MemorySlot:
        """`kvm_invalidate_memslot()`: swap in an invalid copy, then flush the shadow MMU."""
        invalid = old.with_changes(flags=old.flags | KVM_MEMSLOT_INVALID)
        slots.replace(old, invalid)
        self._swap_active_memslots(slots, "invalidate")
        self._emit(
            "kvm_arch_flush_shadow_memslot",
            as_id=slots.as_id,
            slot=old.id,
            base_gfn=old.base_gfn,
            npages=old.npages,
        )
        return invalid

    def _swap_active_memslots(self, slots: MemslotSet, step: str) -> None:
        """`kvm_swap_active_memslots()`: the generation advances by the number of ASes."""
        slots.generation += self.address_spaces
        self._emit("kvm_arch_memslots_updated", as_id=slots.as_id, gen=slots.generation, step=step)

    def skip_updates(self, updates: int, as_id: int = 0) -> None:
        """Advance the generation as `updates` memslot updates that changed nothing would
        (no events): a classroom fast-forward, e.g. to just before the MMIO generation's
        19 bits wrap, which takes 262,144 real updates with two address spaces."""
        if updates < 0:
            raise ValueError("updates must be >= 0")
        self._memslot_set(as_id).generation += updates * self.address_spaces

    # -- queries -------------------------------------------------------------------------

    def memslots(self, as_id: int = 0) -> list[MemorySlot]:
        """The slots of one address space, sorted by `base_gfn`."""
        return self._memslot_set(as_id).slots()

    def slot(self, as_id: int, slot_id: int) -> MemorySlot | None:
        """`id_to_memslot()`."""
        return self._sets[as_id].id_hash.get(slot_id) if as_id < len(self._sets) else None

    def generation(self, as_id: int = 0) -> int:
        return self._memslot_set(as_id).generation

    def memslot_set(self, as_id: int = 0) -> MemslotSet:
        """The `struct kvm_memslots` of an address space (for views and explanations)."""
        return self._memslot_set(as_id)

    def _memslot_set(self, as_id: int) -> MemslotSet:
        if not 0 <= as_id < len(self._sets):
            raise ValueError(f"address space {as_id} does not exist (0..{len(self._sets) - 1})")
        return self._sets[as_id]

    # -- lookups -------------------------------------------------------------------------

    def gfn_to_memslot(self, gfn: int, as_id: int = 0) -> MemorySlot | None:
        """`__gfn_to_memslot()`: VM-wide `last_used_slot`, then the lookup structure."""
        self.memslot_lookups += 1
        slots = self._sets[as_id]
        base, end, cached = slots.lru
        if base <= gfn < end:
            return cached
        return slots.gfn_to_memslot(gfn)

    def gfn_to_memslot_approx(self, gfn: int, as_id: int = 0) -> MemorySlot | None:
        """`gfn_to_memslot_approx()`: the holding slot, else a neighbour of the hole."""
        slots = self._sets[as_id]
        slot = try_get_memslot(slots.last_used_slot, gfn)
        if slot is None:
            slot = slots.gfn_tree.search_approx(gfn)
            if slot is not None and slots.use_last_used_slot:
                slots.last_used_slot = slot
        return slot

    def vcpu(self, vcpu_id: int) -> Vcpu:
        """The vCPU's memslot cache, created on first use."""
        vcpu = self._vcpus.get(vcpu_id)
        if vcpu is None:
            vcpu = self._vcpus[vcpu_id] = Vcpu(vcpu_id)
        return vcpu

    def vcpu_gfn_to_memslot(self, vcpu_id: int, gfn: int) -> MemorySlot | None:
        """`kvm_vcpu_gfn_to_memslot()`: per-vCPU cache, then search without the VM cache."""
        self.memslot_lookups += 1
        return self.explain(gfn, vcpu=vcpu_id).slot

    def explain(
        self,
        gfn: int,
        as_id: int = 0,
        *,
        vcpu: int | None = None,
        strategy: str | None = None,
        with_probes: bool = True,
    ) -> LookupTrace:
        """The lookup `gfn_to_memslot()` (or, for a vCPU, `kvm_vcpu_gfn_to_memslot()`) makes,
        step by step.  Caches are read and filled exactly as the bare lookup does.
        `with_probes=False` records the cache checks but searches the structure bare."""
        if vcpu is None:
            return self._memslot_set(as_id).explain(gfn, strategy, with_probes=with_probes)
        state = self.vcpu(vcpu)
        if not self.vcpu_cache:  # before 2021 the vCPU path used the VM-wide cache
            return self._memslot_set(state.as_id).explain(gfn, strategy, with_probes=with_probes)
        slots = self._memslot_set(state.as_id)
        note = ""
        if state.last_used_slot_gen != slots.generation:
            # kvm_vcpu_gfn_to_memslot() drops the cached slot when the generation moved;
            # say so only when there was one to drop (not on a vCPU's first lookup)
            if state.last_used_slot is not None:
                note = "generation changed: cache reset"
            state.last_used_slot, state.last_used_slot_gen = None, slots.generation
        cached = try_get_memslot(state.last_used_slot, gfn)
        probe = CacheProbe("vcpu", state.last_used_slot, cached is not None, note)
        if cached is not None:
            return LookupTrace(gfn, slots.as_id, slots.lookup.name, (probe,), (), cached)
        trace = slots.search_explained(gfn, strategy, with_probes=with_probes)
        if trace.slot is not None:
            state.last_used_slot = trace.slot
        return LookupTrace(gfn, slots.as_id, trace.strategy, (probe,), trace.probes, trace.slot)

    # -- audit ---------------------------------------------------------------------------

    def audit(self) -> None:
        """Every structure consistent; page count, generations and caches coherent."""
        total = 0
        for slots in self._sets:
            slots.audit()
            total += sum(s.npages for s in slots.id_hash.values())
            if slots.generation % self.address_spaces != slots.as_id % self.address_spaces:
                raise AuditError(f"as {slots.as_id}: generation {slots.generation} off its lane")
            if any(s.invalid for s in slots.id_hash.values()):
                raise AuditError(f"as {slots.as_id}: an invalid slot outlived its update")
        if total != self.nr_memslot_pages:
            raise AuditError(f"nr_memslot_pages {self.nr_memslot_pages} != {total}")
        for vcpu in self._vcpus.values():
            cached = vcpu.last_used_slot
            if cached is None or vcpu.last_used_slot_gen != self.generation(vcpu.as_id):
                continue
            if self.slot(vcpu.as_id, cached.id) is not cached:
                raise AuditError(f"vcpu {vcpu.vcpu_id}: fresh cache holds a dead slot")


def kvm_dirty_log_manual_protect_and_init_set(vm: Vm) -> bool:
    """kvm_host.h (6.18): KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2 was enabled with
    KVM_DIRTY_LOG_INITIALLY_SET (engine/mmu/dirty_log.py reads it)."""
    return bool(vm.manual_dirty_log_protect & KVM_DIRTY_LOG_INITIALLY_SET)
