"""What the two running guests share (`MmuSession` under EPT, `ShadowSession` with EPT
off): the guest built from a `Layout`, a seeded workload generator, the counts of
accesses, VM exits and RET_PF_* results, and events stamped with the virtual clock and
the vCPU that caused them, as a `trace-cmd` record of the vCPU thread would be."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Generic, Protocol, TypeVar

from ...events import Event, FieldValue
from ...layouts.layout import Layout, build_vm
from ..mmu_pages import KvmMmuPage, MmuPages
from ..spte import RetPf, SpteConfig
from ..walk import fault_path, last_on_path

ACCESS_NS = 1000  # virtual time between two guest accesses, for event timestamps
FETCH_RATE = 0.1  # share of RAM reads that are instruction fetches (EPT sessions)
PFERR_WRITE = 1 << 1  # the error code bits of the emitted kvm_page_fault
PFERR_USER = 1 << 2
StepT = TypeVar("StepT", covariant=True)  # what step() returns
_RET_NAMES = {ret: ret.name for ret in RetPf}
RawListener = Callable[[str, Mapping[str, FieldValue]], None]


def after_2011(spte_config: str | SpteConfig) -> bool:
    """Whether the sessions' MMU has what came after the 2011 configs (`SPTE_CONFIGS`
    "2011-..."): the MMIO info cache (3.1), fast_page_fault (3.6), the prev_roots LRU
    (4.19).  A configuration given as such is a kernel's of `params.KERNELS` (6.10+)."""
    return not isinstance(spte_config, str) or not spte_config.startswith("2011")


def uniform_below(getrandbits: Callable[[int], int], n: int) -> int:
    """A number drawn uniformly from 0 to n - 1 by a generator's `getrandbits`: draws of
    `n.bit_length()` bits until one is below n.  What `rng.randrange(n)` and `rng.choice`
    draw in CPython, written out so that a seed gives the same accesses on every Python:
    the random module keeps the sequence of `random()` across versions, not its other
    methods' algorithms ("Notes on Reproducibility" in its documentation)."""
    k = n.bit_length()
    r = getrandbits(k)
    while r >= n:
        r = getrandbits(k)
    return r


class RootedMmu(Protocol):
    """What the sessions read of either MMU: the vCPUs' roots and the pages."""

    roots: dict[int, KvmMmuPage]
    pages: MmuPages


class GuestSession(Generic[StepT]):
    """A guest, its counters and its event listeners; subclasses add the MMU and steps."""

    mmu: RootedMmu

    paging = ""
    workloads: tuple[str, ...] = ()

    def __init__(self, layout: Layout, workload: str, seed: int, nr_vcpus: int) -> None:
        self.check_workload(workload)
        self.layout = layout
        self.workload = workload
        # the MMU's lookups are the rbtree's (gfn_to_memslot), and no view explains one
        # under another strategy: the other five structures are not kept (nor their
        # modules imported: `mmuscope simulate`'s start-up)
        self.vm = build_vm(layout, track_all=False)
        self.nr_vcpus = nr_vcpus
        self._rng = random.Random(seed)
        self._listeners: list[Callable[[Event], None]] = []
        self._raw: RawListener | None = None  # raw_listener
        self._observes = type(self)._observe is not GuestSession._observe
        #: where the session's own events go (`fields_listener()`), None: nowhere
        self._fields: RawListener | None = self.fields_listener()
        self.steps = self.exits = 0
        self.results: dict[str, int] = {}
        #: the vCPU whose access or exit runs now: with `steps`, what stamps its events
        self.vcpu = 0

    def step(self) -> StepT:
        raise NotImplementedError

    def run(self, count: int) -> StepT | None:
        last = None
        for _ in range(count):
            last = self.step()
        return last

    def check_workload(self, workload: str) -> None:
        if workload not in self.workloads:
            raise ValueError(f"unknown workload {workload!r}; choose from {self.workloads}")

    # -- events -----------------------------------------------------------------------

    def subscribe(self, listener: Callable[[Event], None]) -> Callable[[], None]:
        self._listeners.append(listener)
        self._listeners_changed()

        def unsubscribe() -> None:
            self._listeners.remove(listener)
            self._listeners_changed()

        return unsubscribe

    @property
    def raw_listener(self) -> RawListener | None:
        """Called with (name, fields) of each event: a printer that needs no Event and
        reads the stamp itself (`stamp()`, which changes only with `steps` and `vcpu`).
        The session's own events and those of an MMU that hands out names and fields
        reach it directly while no Event listener or `_observe` wants them."""
        return self._raw

    @raw_listener.setter
    def raw_listener(self, listener: RawListener | None) -> None:
        self._raw = listener
        self._listeners_changed()

    def _listeners_changed(self) -> None:
        """The session's own events go where `fields_listener()` says; a subclass whose
        MMU calls it directly refreshes the MMU's too."""
        self._fields = self.fields_listener()

    def _forward(self, event: Event) -> None:
        """The MMU's events (and the session's own), stamped and handed out."""
        self._observe(event)
        if self._raw is not None:
            self._raw(event.name, event.fields)
        if self._listeners:
            self._hand_out(event.name, event.fields, event.pid)

    def _hand_out(self, name: str, fields: Mapping[str, FieldValue], pid: int = 0) -> None:
        """The event, stamped, to each listener."""
        ts, cpu = self.stamp()
        stamped = Event(name, fields, ts, cpu, pid, "qemu-kvm")
        for listener in list(self._listeners):
            listener(stamped)

    def _forward_fields(self, name: str, fields: Mapping[str, FieldValue]) -> None:
        """`_forward` for an MMU that hands out names and fields: an `Event` is built
        only when a listener or `_observe` wants one, and the stamped one alone when no
        `_observe` does (a zap hands out one per spte of each freed page table)."""
        if self._observes:
            self._forward(Event(name, fields))
            return
        if self._raw is not None:
            self._raw(name, fields)
        if self._listeners:
            self._hand_out(name, fields)

    def stamp(self) -> tuple[float, int]:
        """The timestamp (virtual time: ACCESS_NS per access) and CPU of an event now."""
        return self.steps * ACCESS_NS / 1e9, self.vcpu

    def fields_listener(self) -> RawListener | None:
        """What an MMU that hands out names and fields should call: `raw_listener` itself
        while nothing needs an `Event`, else `_forward_fields`; None when nobody listens
        (bare mode: no fields are built)."""
        if self._listeners or self._observes:
            return self._forward_fields
        return self._raw

    def _observe(self, event: Event) -> None:
        """A subclass's look at every event before it is handed out."""

    def _emit(self, name: str, **fields: FieldValue) -> None:
        if self._fields is not None:
            self._fields(name, fields)

    def _vm_exit(self, vcpu: int, address: int, error_code: int, traced: bool = True) -> None:
        """A VM exit for a page fault: counted, and traced as `kvm_page_fault` unless
        `traced` is False (an EPT misconfiguration: `handle_ept_misconfig()` has no
        such tracepoint)."""
        self.exits += 1
        if traced and self._fields is not None:  # the guest's rip: the model's guests run at 0
            fields = {
                "vcpu_id": vcpu, "guest_rip": 0, "fault_address": address, "error_code": error_code,
            }  # fmt: skip
            self._fields("kvm_page_fault", fields)

    def trace_kvm_exit(self, vcpu: int, reason: str, info1: int = 0, info2: int = 0) -> None:
        """`trace_kvm_exit(vcpu, isa)` after a VM exit (6.18 vmx.c `vmx_vcpu_run()`,
        svm.c `svm_vcpu_run()`), every field its TP_fast_assign fills: the reason as
        printed (not a failed VM entry), info1/info2 as the vendor's `get_exit_info()`
        reads them; the guest's rip (the model's guests run at 0), no event delivery
        (intr_info, error_code 0) and no pending request."""
        if self._fields is None:
            return
        fields: dict[str, FieldValue] = {
            "vcpu_id": vcpu, "exit_reason": reason, "failed_vmentry": False, "guest_rip": 0,
            "info1": info1, "info2": info2, "intr_info": 0, "error_code": 0, "requests": 0,
        }  # fmt: skip
        self._fields("kvm_exit", fields)

    def trace_kvm_entry(self, vcpu: int, rip: int) -> None:
        """`trace_kvm_entry(vcpu, force_immediate_exit)` before the VM entry
        (`vcpu_enter_guest()`, 6.18 x86.c), every field its TP_fast_assign fills: no event
        injected (intr_info, error_code 0), no immediate exit."""
        if self._fields is None:
            return
        fields: dict[str, FieldValue] = {
            "vcpu_id": vcpu, "rip": rip, "intr_info": 0, "error_code": 0, "immediate_exit": False,
        }  # fmt: skip
        self._fields("kvm_entry", fields)

    def _result(self, ret: RetPf) -> RetPf:
        name = _RET_NAMES[ret]  # (an enum's .name is a property)
        self.results[name] = self.results.get(name, 0) + 1
        return ret

    # -- the vCPU's shadow tables -----------------------------------------------------

    def _live_root(self, vcpu: int) -> KvmMmuPage | None:
        root = self.mmu.roots.get(vcpu)
        return None if root is None or self.mmu.pages.is_obsolete(root) else root

    def _leaf(self, vcpu: int, number: int) -> tuple[KvmMmuPage, int] | None:
        """Where the CPU's walk of page `number` ends in the vCPU's current root."""
        root = self._live_root(vcpu)
        return None if root is None else last_on_path(self.mmu.pages, root, number)

    def _path(self, vcpu: int, number: int) -> list[tuple[KvmMmuPage, int]]:
        root = self.mmu.roots.get(vcpu)
        return fault_path(self.mmu.pages, root, number) if root else []
