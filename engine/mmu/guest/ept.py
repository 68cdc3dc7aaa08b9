"""What the two running guests under EPT/NPT share: `MmuSession` on the older direct MMU
(tdp_mmu=N) and `TdpSession` on the TDP MMU (tdp_mmu=Y, the default).

Both draw the same guest accesses for the same seed (so a run on either MMU can be
compared access by access) and make the same memslot updates:
- `kernbench`: RAM accesses across the RAM slots (a slot, then one of its pages, each
  drawn uniformly: `uniform_below`), 30% of them writes; a tenth of the reads are instruction
  fetches, drawn from a second generator (`seed ^ FETCH_SEED`) so that the accesses are
  those of before fetches existed;
- `netperf`: 70% MMIO stores, to an emulated NIC's doorbell (80%) or the LAPIC's EOI.
  The doorbell is QEMU's: each store exits to userspace (KVM_EXIT_MMIO), unless
  `assign_ioeventfd()` gave it a length-0 ioeventfd (virtio-pci's notify, QEMU's
  `ioeventfd=on`), which the fast MMIO bus takes without emulation.  The EOI goes to the
  in-kernel LAPIC as emulated MMIO: a host without APIC virtualization
  (kvm_intel.flexpriority=0, enable_apicv=0), unless `enable_apicv()`: the EPT maps the
  APIC-access page and the CPU virtualizes the EOI, with no exit;
- `churn`: kernbench plus a 1 MiB BAR-like slot created and deleted every `CHURN_EVERY`
  accesses (`churn_update`: generations advance, DELETE zaps);
- `dirty`: kernbench with dirty logging toggled on the largest RAM slot every
  `DIRTY_EVERY` accesses;
- `migrate`: a live migration's dirty logging passes (below);
- `balloon`: kernbench while the host takes pages back through a virtio balloon: every
  `BALLOON_EVERY` accesses an MMU-notifier invalidation (balloon.py), racing a fault.
`set_up_guest()` is the part of both constructors after the MMU is made: the RAM slots
the draws choose from, dirty logging, the fetch generator and the NX recovery worker's
first wake-up (`recovery_period_ns` of guest time).  The shadow-paging session
(`ShadowSession`, guest processes) shares only `churn_update` and the MMIO addresses.

What makes `fast_page_fault()` fire (fast_pf.py) in these guests, the sessions' controls:
- dirty logging on the largest RAM slot (`KVM_SET_USER_MEMORY_REGION` with
  KVM_MEM_LOG_DIRTY_PAGES toggled, flags only): the slot's sptes are write-protected
  but stay MMU-writable, so the next write to each page is fixed without mmu_lock and
  marks the page in the dirty bitmap (`DirtyLogging`);
- `KVM_GET_DIRTY_LOG` on that slot: the bitmap is returned and cleared, and the pages
  it reported are write-protected again (the next round of a live migration);
- the MMU notifier's clear_young over every RAM slot (`kvm_age_hva`, `kvm_age_gfn()`:
  aging.py): with A/D bits off the sptes become access-tracked and the next access of
  each is restored by the fast path;
- the `migrate` workload: a live migration's view of a guest — dirty logging on from the
  first access, `HOT_SHARE` of the accesses (`HOT_WRITES` of them writes) in a working
  set of `HOT_PAGES` pages of the logged slot, and a sync of the dirty pages every
  `GET_DIRTY_EVERY` accesses (KVM_GET_DIRTY_LOG, with manual protect and KVM_CLEAR_DIRTY_LOG,
  or the dirty rings collected and reset: `harvest_dirty_pages`), so the same pages are
  protected and fixed again.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, NamedTuple

from ...errors import KvmError
from ...memslots.constants import APIC_ACCESS_PAGE_PRIVATE_MEMSLOT, KVM_MEM_LOG_DIRTY_PAGES
from ...memslots.memslot import MemorySlot
from ...memslots.vm import Vm
from ..dirty_log import DIRTY_RING_ENTRIES, KVM_EXIT_DIRTY_RING_FULL, DirtyLogging
from ..spte import RET_PF_EMULATE, RetPf
from ..vcpu.emulate import APIC_DEFAULT_PHYS_BASE, MMIO_STORE
from ..vcpu.vmx import (
    EPT_VIOLATION,
    NPF,
    PFERR_RSVD_MASK,
    ept_exit_qualification,
    ept_violation_error_code,
    exit_reason,
    npf_error_code,
)
from .balloon import BALLOON_EVERY, HostBalloon
from .session import FETCH_RATE, GuestSession, StepT, uniform_below

if TYPE_CHECKING:
    from ..direct.mmu import DirectMmu
    from ..tdp.mmu import TdpMmu

PAGE_SHIFT = 12
CHURN_EVERY = 50
CHURN_SLOT = 500  # the slot id the churn workload creates and deletes
NIC_DOORBELL, LAPIC_EOI = 0xFEBF_1000, 0xFEE0_00B0
APIC_ACCESS_PAGE_HVA = 0x7FFF_F000_0000  # the page `__x86_set_memory_region()` vm_mmap()s
DIRTY_EVERY = 400  # the dirty workload toggles dirty logging this often
EPT_WORKLOADS = ("kernbench", "netperf", "churn", "dirty", "migrate", "balloon")
HOT_PAGES = 256  # migrate: the working set, in pages of the logged slot
HOT_SHARE = 0.9  # migrate: the accesses that go to it
HOT_WRITES = 0.4  # migrate: the writes among them
GET_DIRTY_EVERY = 200  # migrate: a sync of the dirty pages this often
FETCH_SEED = 0x7D9  # the fetch generator's seed is the session's seed ^ this
Access = tuple[int, int, bool, bool]  # vcpu, gpa, write, fetch


class EptAccess(NamedTuple):
    """One guest access as both EPT sessions step it (`MmuSession`, `TdpSession`): an
    `Access` of `EptSession.draws()` with names."""

    vcpu: int
    gpa: int
    write: bool
    fetch: bool = False

    @property
    def label(self) -> str:
        return f"gpa {self.gpa:#x}" + (" (fetch)" if self.fetch else "")


class EptSession(GuestSession[StepT]):
    """The workloads of a guest whose MMU maps guest-physical addresses (EPT/NPT)."""

    workloads = EPT_WORKLOADS
    mmu: DirectMmu | TdpMmu  # type: ignore[assignment]  # both read like RootedMmu

    if TYPE_CHECKING:  # each session's

        def leaf_spte(self, vcpu: int, gfn: int) -> int: ...

    def ept_exit(
        self, vcpu: int, gpa: int, write: bool, fetch: bool, spte: int | None = None
    ) -> int | None:
        """The VM exit of an access the CPU's walk did not let through, on the spte the
        walk ends at, as 6.18 vmx.c takes it (vmx.py): `kvm_exit`, then an EPT violation
        traces `kvm_page_fault` with the exit qualification and hands
        `kvm_mmu_page_fault()` the PFERR_* error code `__vmx_handle_ept_violation()` makes
        of it (`handle_ept_violation()`); an EPT misconfiguration (an MMIO spte) traces no
        fault (`handle_ept_misconfig()`) and first offers the store to the fast MMIO bus:
        an ioeventfd doorbell there traces `kvm_fast_mmio`, the instruction is skipped
        and the vCPU re-enters (None: no `kvm_mmu_page_fault()`); else its error code is
        PFERR_RSVD_MASK.  Under NPT every #NPF is traced and its error code handed over
        (`npf_interception()`, 6.18 svm.c).  The error code: the fault path runs next,
        then `vm_entry`.  `spte`: the leaf the CPU's walk ended at, when the caller's walk
        just read it (else `leaf_spte` walks)."""
        cfg = self.mmu.cfg
        if spte is None:
            spte = self.leaf_spte(vcpu, gpa >> PAGE_SHIFT)
        reason = exit_reason(cfg, spte)
        if reason == NPF:
            code = npf_error_code(cfg, spte, write, fetch)
            self.trace_kvm_exit(vcpu, reason, info1=code, info2=gpa)
            self._vm_exit(vcpu, gpa, code)
            return code
        if reason == EPT_VIOLATION:
            qual = ept_exit_qualification(spte, write, fetch)
            self.trace_kvm_exit(vcpu, reason, info1=qual)
            self._vm_exit(vcpu, gpa, qual)
            return ept_violation_error_code(qual)
        self.trace_kvm_exit(vcpu, reason)  # EPT_MISCONFIG: no exit qualification
        self._vm_exit(vcpu, gpa, PFERR_RSVD_MASK, traced=False)
        if self.mmu.emulator.bus.fast_mmio_write(gpa):  # (a load too: it cannot tell)
            self._emit("kvm_fast_mmio", gpa=gpa)
            self.vm_entry(vcpu, RET_PF_EMULATE)  # kvm_skip_emulated_instruction()
            return None
        return PFERR_RSVD_MASK

    def assign_ioeventfd(self) -> None:
        """QEMU's KVM_IOEVENTFD of length 0 at the NIC's doorbell (virtio-pci's modern
        notify with `ioeventfd=on`): on KVM_FAST_MMIO_BUS and KVM_MMIO_BUS
        (`kvm_assign_ioeventfd()`, 6.18 virt/kvm/eventfd.c), so a store on the cached MMIO
        spte is `kvm_fast_mmio`, with no emulation and no exit to userspace."""
        self.mmu.emulator.bus.kvm_assign_ioeventfd(NIC_DOORBELL)

    def enable_apicv(self) -> None:
        """kvm_intel.enable_apicv: the CPU virtualizes the local APIC.
        `kvm_alloc_apic_access_page()` (6.18 lapic.c, from `vmx_vcpu_create()`) makes the
        APIC-access page a KVM-internal memslot at APIC_DEFAULT_PHYS_BASE, so the EPT maps
        0xfee00000 as it maps RAM: the first access is an EPT violation that maps it, and
        from then on an EOI store is virtualized (EOI virtualization, SDM 30.1.3) and exits
        not at all.  (An access the CPU does not virtualize would exit with APIC_ACCESS,
        `handle_apic_access()`; netperf makes none.)"""
        self.vm.x86_set_memory_region(
            APIC_ACCESS_PAGE_PRIVATE_MEMSLOT, APIC_DEFAULT_PHYS_BASE, 1 << PAGE_SHIFT,
            APIC_ACCESS_PAGE_HVA,
        )  # fmt: skip

    def vm_entry(self, vcpu: int, ret: RetPf | None) -> None:
        """The vCPU's next VM entry after an exit (`kvm_entry`): past the store when KVM
        emulated or skipped it (RET_PF_EMULATE), else at it again (the MMU mapped the
        page, or the fault is retried).  A dirty ring the exit made soft full exits to
        userspace first (`dirty_ring_exit`), and the entry is the next KVM_RUN's."""
        self.dirty_ring_exit(vcpu)
        rip, code = MMIO_STORE
        self.trace_kvm_entry(vcpu, rip + len(code) if ret is RET_PF_EMULATE else rip)

    def exit_code(self, spte: int, write: bool, fetch: bool = False) -> int:
        """What `kvm_page_fault` prints as its code: under EPT the exit qualification
        (`handle_ept_violation()`, 6.18 vmx.c: `trace_kvm_page_fault(vcpu, gpa,
        exit_qualification)`); under NPT the #NPF error code, RSVD|P on an MMIO spte."""
        if not self.mmu.cfg.ept:
            return npf_error_code(self.mmu.cfg, spte, write, fetch)
        return ept_exit_qualification(spte, write, fetch)

    def set_up_guest(
        self, seed: int, dirty_log: str = "legacy", dirty_ring: int | None = None
    ) -> None:
        """After `self.mmu` is made: what the draws and the workloads' updates use;
        `dirty_log` the way userspace logs dirty pages (dirty_log.py `DIRTY_LOG_MODES`),
        `dirty_ring` the entries of each vCPU's ring (default `DIRTY_RING_ENTRIES`)."""
        self._ram = [s for s in self.vm.memslots(0) if not s.readonly]
        entries = DIRTY_RING_ENTRIES if dirty_ring is None else dirty_ring
        self.dirty_log = DirtyLogging(self.mmu, dirty_log, entries, self.nr_vcpus)
        self.dirty_log.running_vcpu = lambda: self.vcpu  # kvm_get_running_vcpu()
        self.dirty_log.emit = self._forward_fields
        self._fetch_rng = random.Random(seed ^ FETCH_SEED)
        period = self.mmu.params.recovery_period_ns
        self._next_recovery = period if period else -1
        from ..mmu_notifier import KvmMmuNotifier  # (it imports every MMU)

        self.notifier = KvmMmuNotifier(self.vm, self.mmu)
        self.balloon = HostBalloon(self.notifier, seed)
        self.mmu.levels.faultin_race = self.balloon.faultin_race

    def draw(self) -> Access:
        """The workload's next access (its random draws)."""
        return self.draws(self.steps, self.steps + 1)[0]

    def draws(self, first: int, stop: int) -> list[Access]:
        """The workload's accesses `first` up to `stop`, drawn at once: nothing an access
        does changes the draws of the next (only a memslot update does, and they come
        between draws, `workload_update`)."""
        rng, ram, slots, nr_vcpus = self._rng, self._ram, len(self._ram), self.nr_vcpus
        # the generators' methods, and the list's, looked up once for the whole draw
        getrandbits, draw, draw_fetch = rng.getrandbits, rng.random, self._fetch_rng.random
        netperf, migrate = self.workload == "netperf", self.workload == "migrate"
        accesses: list[Access] = []
        add = accesses.append
        for at in range(first, stop):
            vcpu = at % nr_vcpus
            if netperf and draw() < 0.7:
                gpa = NIC_DOORBELL if draw() < 0.8 else LAPIC_EOI
                add((vcpu, gpa, True, False))
                continue
            if migrate and (hot := self.hot_access(rng)) is not None:
                add((vcpu, hot[0] << PAGE_SHIFT, hot[1], False))
                continue
            slot = ram[uniform_below(getrandbits, slots)]  # rng.choice(ram)
            gfn = slot.base_gfn + uniform_below(getrandbits, slot.npages)  # + randrange(npages)
            write = draw() < 0.3
            fetch = not write and draw_fetch() < FETCH_RATE
            add((vcpu, gfn << PAGE_SHIFT, write, fetch))
        return accesses

    # -- dirty logging, KVM_GET_DIRTY_LOG and aging (what makes fast_page_fault() fire)

    def logged_slot(self) -> MemorySlot:
        """The largest RAM slot, as it is now (the one dirty logging is toggled on)."""
        slot = max(self._ram, key=lambda s: s.npages)
        return self.vm.slot(slot.as_id, slot.id) or slot

    def toggle_dirty_logging(self) -> str:
        """KVM_MEM_LOG_DIRTY_PAGES on the largest RAM slot, on or off (flags only)."""
        slot = self.logged_slot()
        flags = slot.flags ^ KVM_MEM_LOG_DIRTY_PAGES
        self.vm.set_user_memory_region(
            slot.uapi_slot, flags, slot.base_gfn << PAGE_SHIFT, slot.npages << PAGE_SHIFT,
            slot.userspace_addr,
        )  # fmt: skip
        self._ram = [s for s in self.vm.memslots(0) if not s.readonly]
        return f"dirty logging {'on' if flags & KVM_MEM_LOG_DIRTY_PAGES else 'off'}"

    def get_dirty_log(self) -> list[int]:
        """KVM_GET_DIRTY_LOG of the logged slot: the dirty gfn offsets (write-protected
        again in the legacy mode); [] when the slot does not log."""
        slot = self.logged_slot()
        return self.dirty_log.get_dirty_log(slot.id, slot.as_id)

    def harvest_dirty_pages(self) -> str:
        """A migration round's sync of the dirty pages (QEMU's
        `kvm_physical_sync_dirty_bitmap()` or, with a ring, `kvm_dirty_ring_flush()`), in
        the VM's dirty logging mode (dirty_log.py): legacy KVM_GET_DIRTY_LOG; manual
        protect KVM_GET_DIRTY_LOG and KVM_CLEAR_DIRTY_LOG of the pages it reported (QEMU
        clears each chunk before it sends it); a ring collected and reset."""
        log = self.dirty_log
        if log.mode == "ring":
            got = log.harvest_rings()
            log.reset_dirty_rings()
            return f"KVM_RESET_DIRTY_RINGS: {len(got)} pages"
        pages = self.get_dirty_log()
        if log.mode == "legacy" or not self.logged_slot().dirty_logging:
            return f"KVM_GET_DIRTY_LOG: {len(pages)} pages"
        slot = self.logged_slot()
        cleared = log.clear_dirty_log(slot.id, pages, as_id=slot.as_id)
        return f"KVM_GET_DIRTY_LOG: {len(pages)} pages, KVM_CLEAR_DIRTY_LOG: {len(cleared)}"

    def dirty_ring_exit(self, vcpu: int) -> str:
        """The vCPU's entry after an exit: a soft-full dirty ring exits to userspace
        instead (`vcpu_enter_guest()` checks KVM_REQ_DIRTY_RING_SOFT_FULL before
        `trace_kvm_entry`, 6.18 x86.c: `kvm_dirty_ring_exit`, then `kvm_vcpu_ioctl()`'s
        `kvm_userspace_exit` with KVM_EXIT_DIRTY_RING_FULL, 31, which the 6.18 symbol
        table lacks: `reason 0x1f (31)`); userspace collects every ring and resets them
        (QEMU's `kvm_dirty_ring_reap()` + KVM_RESET_DIRTY_RINGS) before its next KVM_RUN;
        the words, "" when not full."""
        log = self.dirty_log
        if not log.soft_full_requests or not log.kvm_dirty_ring_check_request(vcpu):
            return ""
        if log.emit is not None:
            reason = f"{KVM_EXIT_DIRTY_RING_FULL:#x}"
            log.emit("kvm_userspace_exit", {"reason": reason, "code": KVM_EXIT_DIRTY_RING_FULL})
        got = log.harvest_rings()
        log.reset_dirty_rings()
        return f"KVM_EXIT_DIRTY_RING_FULL: {len(got)} pages"

    def age_memory(self) -> int:
        """Page reclaim's `clear_young` over each RAM slot's host range
        (`kvm_mmu_notifier_clear_young()`, traced `kvm_age_hva`: `kvm_age_gfn()`,
        mmu_notifier.py): how many sptes were young."""
        return sum(
            self.notifier.clear_young(s.userspace_addr, s.userspace_addr + s.size)
            for s in self._ram
        )

    def migrate_update(self, steps: int) -> str:
        """The `migrate` workload's update before access `steps`, if any."""
        if steps == 0 and not self.logged_slot().dirty_logging:
            return self.toggle_dirty_logging()
        if steps and not steps % GET_DIRTY_EVERY:
            return self.harvest_dirty_pages()
        return ""

    def hot_access(self, rng: random.Random) -> tuple[int, bool] | None:
        """A `migrate` access in the working set, (gfn, write), or None for a kernbench
        one.  The working set starts 1 MiB into the logged slot."""
        if rng.random() >= HOT_SHARE:
            return None
        slot = self.logged_slot()
        gfn = slot.base_gfn + (256 + uniform_below(rng.getrandbits, HOT_PAGES)) % slot.npages
        return gfn, rng.random() < HOT_WRITES

    @property
    def dirty_pages(self) -> int:
        """Pages in the dirty bitmaps now."""
        return sum(len(bits) for bits in self.dirty_log.dirty.values())

    def set_workload(self, workload: str) -> None:
        self.check_workload(workload)
        self.workload = workload


def workload_update(session: EptSession[StepT]) -> str:
    """The workload's update before access `session.steps`, if any, for both MMUs with a
    fast path (`MmuSession`, `TdpSession`): churn's BAR, dirty's logging toggle, migrate's
    KVM_GET_DIRTY_LOG passes, the balloon's inflations."""
    workload, steps = session.workload, session.steps
    if workload == "churn" and not steps % CHURN_EVERY:
        return churn_update(session.vm)
    if workload == "dirty" and steps and not steps % DIRTY_EVERY:
        return session.toggle_dirty_logging()
    if workload == "balloon" and steps and not steps % BALLOON_EVERY:
        return session.balloon.inflate(session._ram)
    return session.migrate_update(steps) if workload == "migrate" else ""


def churn_update(vm: Vm) -> str:
    """The churn workload's memslot update: create a 1 MiB BAR-like slot, or delete it."""
    exists = vm.slot(0, CHURN_SLOT) is not None
    try:
        if exists:
            vm.set_user_memory_region(CHURN_SLOT, 0, 0, 0, 0)
            return "delete"
        vm.set_user_memory_region(CHURN_SLOT, 0, 0xFD00_0000, 1 << 20, 0x7E00_0000_0000)
        return "create"
    except KvmError as err:  # a layout that already uses that range
        return f"refused: {err.errno_name}"
