"""A live memslot session: a guest, its workload, every strategy's cost, and the events.

This is the model behind the explorer's memslots screen (and its tests and benchmarks):
one `Vm` built from a `Layout`, a seeded `Workload` of guest accesses, and for each
access the lookup KVM makes — `kvm_vcpu_gfn_to_memslot()` with the per-vCPU cache, or
`gfn_to_memslot()` with the VM-wide `last_used_slot` (docs/kvm.md §1.3) — costed under
every strategy at once (the memslot-search thread's argument: slots looked at per lookup,
with and without the cache).  Slot changes go through KVM_SET_USER_MEMORY_REGION with its
errors.

Events, stamped with a virtual clock (no wall clock in the engine):
- `kvm_page_fault` (vcpu_id, fault_address, error_code) for every access, as the tracepoint;
- `kvm_memslot_lookup` (no tracepoint in KVM): gfn, slot, strategy, visited, cache;
- `kvm_mmio` (type, len, gpa, val) when no slot holds the gfn: userspace emulates it;
- the `Vm`'s own update events (`kvm_set_user_memory_region`, ...).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import KvmError
from ..events import Event, Listener
from ..layouts.layout import Layout, build_vm
from ..lookup import LOOKUP_STRATEGIES
from ..lookup.base import LookupTrace
from ..lookup.views import Shape
from ..stats import LookupCost
from .constants import KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY, PAGE_SHIFT, PAGE_SIZE
from .memslot import MemorySlot
from .vm import Vm
from .workload import DEFAULT_WORKLOAD, MMIO, RAM, Access, Workload

if TYPE_CHECKING:
    from ..layouts.qemu_trace import MemoryRegionCall, ReplayResult

ACCESS_NS = 1000  # virtual time between two accesses, for event timestamps
PF_WRITE, PF_USER = 0x2, 0x4  # error-code bits of the emitted kvm_page_fault


@dataclass(frozen=True, slots=True)
class LookupRecord:
    """One access and the lookup it caused (probes of the current strategy on demand)."""

    access: Access
    trace: LookupTrace  # cache probes and the result; `probes` may be empty (bare search)
    visits: dict[str, int]  # structure visits per strategy for the same gfn
    generation: int

    @property
    def slot(self) -> MemorySlot | None:
        return self.trace.slot

    @property
    def cache_hit(self) -> bool:
        return self.trace.cache_hit


class MemslotExplorer:
    """The memslots of one guest under a running workload, costed under every strategy."""

    def __init__(
        self,
        layout: Layout,
        lookup: str = "rbtree",
        *,
        workload: str = DEFAULT_WORKLOAD,
        seed: int = 1,
        nr_vcpus: int = 2,
        as_id: int = 0,
    ) -> None:
        self.layout = layout
        self.vm: Vm = build_vm(layout, lookup)
        self.as_id = as_id
        self.names: dict[tuple[int, int], str] = layout.names()
        self.workload = Workload(self.vm.memslots(as_id), workload, seed=seed, nr_vcpus=nr_vcpus)
        self.costs = {name: LookupCost(name) for name in LOOKUP_STRATEGIES}
        self.slot_hits: dict[int, int] = {}
        self.misses = 0
        self.last: LookupRecord | None = None
        self.clock_ns = 0
        self._listeners: list[Listener] = []
        self._cpu = 0
        self._shapes: dict[str, Shape] = {}
        self._shapes_gen = -1
        self.vm.subscribe(self._forward_vm_event)

    # -- events ---------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _emit(self, name: str, **fields: int | str | bool) -> None:
        if self._listeners:
            event = Event(name, fields, ts=self.clock_ns / 1e9, cpu=self._cpu, comm="qemu-kvm")
            for listener in list(self._listeners):
                listener(event)

    def _forward_vm_event(self, event: Event) -> None:
        stamped = replace(event, ts=self.clock_ns / 1e9, cpu=self._cpu, comm="qemu-kvm")
        for listener in list(self._listeners):
            listener(stamped)

    # -- configuration --------------------------------------------------------------

    @property
    def lookup(self) -> str:
        return self.vm.lookup

    def set_lookup(self, name: str) -> None:
        self.vm.set_lookup(name)

    def set_vm_cache(self, enabled: bool) -> None:
        """The VM-wide `slots->last_used_slot` (2011 onwards)."""
        self.vm.set_last_used_slot(enabled)

    def set_vcpu_cache(self, enabled: bool) -> None:
        """The per-vCPU `vcpu->last_used_slot` (2021 onwards)."""
        self.vm.vcpu_cache = enabled

    @property
    def generation(self) -> int:
        return self.vm.generation(self.as_id)

    def slots(self) -> list[MemorySlot]:
        return self.vm.memslots(self.as_id)

    def slot_name(self, slot: MemorySlot) -> str:
        return self.names.get((slot.as_id, slot.id), "")

    def shape(self) -> Shape:
        """The current structure's view, kept per strategy until the next update (a
        32764-node tree takes ~50 ms to flatten; switching back is then free)."""
        if self._shapes_gen != self.generation:
            self._shapes.clear()
            self._shapes_gen = self.generation
        shape = self._shapes.get(self.lookup)
        if shape is None:
            shape = self._shapes[self.lookup] = self.vm.memslot_set(self.as_id).lookup.shape()
        return shape

    def reset_costs(self) -> None:
        self.costs = {name: LookupCost(name) for name in LOOKUP_STRATEGIES}
        self.slot_hits.clear()
        self.misses = 0

    # -- lookups --------------------------------------------------------------------

    def step(self) -> LookupRecord:
        """The workload's next access and its lookup."""
        return self.access(self.workload.next())

    def run(self, count: int) -> LookupRecord | None:
        record = None
        for _ in range(count):
            record = self.step()
        return record

    def lookup_gfn(self, gfn: int, vcpu: int = 0) -> LookupRecord:
        """A lookup the user asked for (same path and costs as the workload's)."""
        held = self.vm.memslot_set(self.as_id).gfn_tree.search(gfn)
        kind = RAM if held is not None else MMIO
        return self.access(Access(-1, vcpu % self.workload.nr_vcpus, gfn, kind))

    def access(self, access: Access) -> LookupRecord:
        self.clock_ns += ACCESS_NS
        self._cpu = access.vcpu
        self._emit(
            "kvm_page_fault",
            vcpu_id=access.vcpu,
            fault_address=access.gpa,
            error_code=PF_USER | (PF_WRITE if access.seq % 3 == 0 else 0),
        )
        vm = self.vm
        vm.vcpu(access.vcpu).as_id = self.as_id  # a session on address space 1 runs in SMM
        trace = vm.explain(access.gfn, self.as_id, vcpu=access.vcpu, with_probes=False)
        slot = trace.slot
        slots = vm.memslot_set(self.as_id)
        visits = {s.name: s.visits(access.gfn, slot) for s in slots.structures()}
        checks = len(trace.cache_probes)
        for name, cost in self.costs.items():
            cost.add(visits[name], checks, trace.cache_hit, slot is not None)
        if slot is None:
            self.misses += 1
        else:
            self.slot_hits[slot.id] = self.slot_hits.get(slot.id, 0) + 1
        record = LookupRecord(access, trace, visits, self.generation)
        self.last = record
        self._emit_lookup(record)
        return record

    def _emit_lookup(self, record: LookupRecord) -> None:
        if not self._listeners:
            return
        trace, access = record.trace, record.access
        cache = next((c.cache for c in trace.cache_probes if c.hit), "miss")
        if not trace.cache_probes:
            cache = "off"
        self._emit(
            "kvm_memslot_lookup",
            vcpu=access.vcpu,
            gfn=access.gfn,
            slot=trace.slot.id if trace.slot else -1,
            strategy=self.lookup,
            visited=0 if trace.cache_hit else record.visits[self.lookup],
            cache=cache,
        )
        if trace.slot is None:
            self._emit("kvm_mmio", type="unsatisfied-read", len=4, gpa=access.gpa, val=0)

    def explain(self, record: LookupRecord) -> LookupTrace:
        """The record's lookup probe by probe under the current strategy (no cache side
        effects: the structure alone, then the record's cache probes in front)."""
        trace = record.trace
        if trace.cache_hit:
            return trace._replace(strategy=self.lookup, probes=())
        searched = self.vm.memslot_set(self.as_id).search_explained(trace.gfn)
        return searched._replace(cache_probes=trace.cache_probes)

    # -- KVM_SET_USER_MEMORY_REGION -------------------------------------------------

    def _uapi(self, slot_id: int) -> int:
        return self.as_id << 16 | slot_id

    def _fresh_userspace_addr(self, size: int) -> int:
        top = max(
            (s.userspace_addr + (s.npages << PAGE_SHIFT) for s in self.vm.memslots(self.as_id)),
            default=0x7F00_0000_0000,
        )
        align = 2 << 20
        return (top + align - 1) // align * align

    def add_slot(
        self, slot_id: int, gpa: int, size: int, *, readonly: bool = False, dirty: bool = False
    ) -> MemorySlot | None:
        """Create a slot; raises `KvmError` with the kernel's errno (nothing changes)."""
        flags = (KVM_MEM_READONLY if readonly else 0) | (KVM_MEM_LOG_DIRTY_PAGES if dirty else 0)
        self.vm.set_user_memory_region(
            self._uapi(slot_id), flags, gpa, size, self._fresh_userspace_addr(size)
        )
        self.names.setdefault((self.as_id, slot_id), f"user-{slot_id}")
        return self._after_update(slot_id)

    def delete_slot(self, slot_id: int) -> None:
        self._existing(slot_id)
        self.vm.set_user_memory_region(self._uapi(slot_id), 0, 0, 0, 0)
        self._after_update(slot_id)

    def move_slot(self, slot_id: int, gpa: int) -> MemorySlot | None:
        """KVM_MR_MOVE: same size and userspace address, new base (flags unchanged)."""
        old = self._existing(slot_id)
        self.vm.set_user_memory_region(
            self._uapi(slot_id), old.flags, gpa, old.npages * PAGE_SIZE, old.userspace_addr
        )
        return self._after_update(slot_id)

    def set_flags(self, slot_id: int, flags: int) -> MemorySlot | None:
        """KVM_MR_FLAGS_ONLY (dirty logging on or off; read-only cannot change: EINVAL)."""
        old = self._existing(slot_id)
        self.vm.set_user_memory_region(
            self._uapi(slot_id),
            flags,
            old.base_gfn << PAGE_SHIFT,
            old.npages * PAGE_SIZE,
            old.userspace_addr,
        )
        return self._after_update(slot_id)

    def replay_call(self, call: MemoryRegionCall) -> ReplayResult:
        """A recorded KVM_SET_USER_MEMORY_REGION call, as QEMU made it (any address
        space); a refusal changes nothing and comes back with its errno."""
        from ..layouts.qemu_trace import replay_one  # on first use: it costs start-up time

        result = replay_one(self.vm, call)
        slot_id = call.slot & 0xFFFF
        if result.ret == 0:
            self.names.setdefault((call.as_id, slot_id), f"slot{slot_id}")
            if call.as_id == self.as_id:
                self._after_update(slot_id)
        return result

    def _existing(self, slot_id: int) -> MemorySlot:
        """The slot to change; KVM answers EINVAL for deleting a slot that is not there."""
        slot = self.vm.slot(self.as_id, slot_id)
        if slot is None:
            reason = f"slot {slot_id} does not exist in address space {self.as_id}"
            raise KvmError(errno.EINVAL, reason)
        return slot

    def _after_update(self, slot_id: int) -> MemorySlot | None:
        """Follow a successful update: the workload sees the new holes; the shown lookup
        belongs to the old generation and is dropped."""
        self.workload.rebuild(self.vm.memslots(self.as_id))
        self.last = None
        return self.vm.slot(self.as_id, slot_id)

    def audit(self) -> None:
        self.vm.audit()
