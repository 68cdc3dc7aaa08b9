"""A running guest on shadow paging (EPT off): processes, CR3 loads, guest walks, vtlb.

The shadow-paging twin of `MmuSession` (the memslot-search, PTE_LIST_EXT and POWER-keys
threads): guest processes (`GuestOs`) run on the vCPUs, each access checks the vCPU's
shadow root the way the CPU walks it, and anything the shadow tables cannot satisfy exits
to `ShadowMmu.page_fault()`.  A #PF that KVM injects into the guest is handled by the
guest's own handler (it maps the page) and the access is retried, so a first touch
costs two exits, as it does under shadow paging.  A context switch is a MOV to CR3: an
exit that loads another root and flushes the vtlb.

Workloads, deterministic for a seed:
- `kernbench`: short-lived compile jobs, `JOBS_PER_VCPU` per vCPU, time-sliced; each
  faults in its own heap and exits after `JOB_ACCESSES` accesses (multi-process churn:
  tables torn down, shadow pages zapped, new roots built);
- `netperf`: a netperf process with an emulated NIC's BAR mapped, 70% MMIO stores (the
  first caches an MMIO spte, the rest hit it: no walk, no memslot search);
- `fork`: the PTE_LIST_EXT thread's rmap_fork: a parent faults in `FORK_PAGES` pages and
  forks children that read them all; up to `FORK_LIVE` children live at once, so every
  shared gfn's rmap holds about `FORK_LIVE` + 1 sptes;
- `pfault`: the POWER-keys thread's program, scaled from 40*1024 to `PFAULT_PAGES` pages:
  mmap, write every page, mprotect(PROT_WRITE), write again, mprotect(PROT_READ), read
  every page, munmap; ten rounds, then a new process;
- `churn`: `kernbench` plus the memslot update `MmuSession` makes every `CHURN_EVERY`
  accesses (a slot created, then deleted: DELETE zaps everything);
- `balloon`: `kernbench` while the guest's balloon driver gives a page it allocated back
  to the host every `BALLOON_EVERY` accesses (guest/balloon.py): the MMU notifier zaps
  through the rmaps the 4K sptes of the THP it splits, and the fault it raced runs again.

Every process maps the guest kernel's direct map of the page-table pool, and the guest
kernel writes its ptes through it on the vCPU that ran last (`GuestKernel`, kernel.py):
a store into a table KVM shadows hits a write-protected spte, so it exits (counted in
`exits`, traced as `kvm_page_fault`), and that fault unsyncs a last-level table or, for
an upper-level one, is emulated (`mmu_try_to_unsync_pages()`, 6.18 mmu.c).
`kernel_2m=True` adds the guest kernel's 2M text and makes every `KERNEL_EVERY`-th
access kernel work there or in the direct map (kernel.py): guest 2M leaves and
instruction fetches, so faults map 2M sptes where the host (`params.
host_level`) and `disallow_lpage` allow, and split under `nx_huge_pages`.  Off (the
default), the workloads map 4K guest pages only.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from ...events import Event
from ...layouts.layout import Layout
from ...words import count
from ..guest.balloon import BALLOON_EVERY, HostBalloon
from ..guest.ept import CHURN_EVERY, LAPIC_EOI, NIC_DOORBELL, churn_update
from ..guest.linux import GuestOs, GuestProcess
from ..guest.session import GuestSession, after_2011
from ..mmu_notifier import KvmMmuNotifier
from ..mmu_pages import KvmMmuPage
from ..params import TdpMmuParams
from ..spte import RET_PF_EMULATE, RET_PF_RETRY, RetPf, SpteConfig, spte_config_named
from ..vcpu.emulate import MmioBus
from .cpu import exit_error_code, leaf_allows, leaf_spte
from .kernel import KERNEL_EVERY, KernelMaps, kernel_access
from .mmu import ShadowMmu

PAGE = 4096
HEAP = 0x40_0000  # 4 MiB: where every process's data starts
NIC_GVA, LAPIC_GVA = 0x7F00_0000, 0x7F01_0000  # where netperf maps the BAR and the LAPIC
SHADOW_WORKLOADS = ("kernbench", "netperf", "fork", "pfault", "churn", "balloon")
JOBS_PER_VCPU, JOB_PAGES, JOB_ACCESSES, SLICE = 2, 32, 160, 12
FORK_PAGES, FORK_LIVE = 16, 64
PFAULT_PAGES, PFAULT_ROUNDS = 64, 10
MAX_RETRIES = 3  # the same access faulting more often than this is a model bug


@dataclass(frozen=True, slots=True)
class ShadowAccess:
    vcpu: int
    cr3: int
    gva: int
    write: bool
    user: bool = True
    fetch: bool = False  # an instruction fetch (PFERR_FETCH_MASK)

    @property
    def label(self) -> str:
        return f"cr3 {self.cr3:#x} gva {self.gva:#x}"


@dataclass(frozen=True, slots=True)
class ShadowStep:
    """One guest access: no exit, or the fault's RET_PF_* result and what the guest did."""

    access: ShadowAccess
    exited: bool
    ret: RetPf | None
    update: str = ""  # guest or memslot activity before the access (fork, mov cr3, ...)
    guest: str = ""  # the guest's #PF handler, when KVM injected the fault


Program = Iterator["ShadowAccess | str"]


class ShadowSession(GuestSession[ShadowStep]):
    """A guest on `ShadowMmu` with a vtlb, driven by a seeded workload."""

    paging = "shadow"
    workloads = SHADOW_WORKLOADS
    mmu: ShadowMmu

    def __init__(
        self,
        layout: Layout,
        *,
        workload: str = "kernbench",
        seed: int = 1,
        nr_vcpus: int = 2,
        spte_config: str | SpteConfig = "shadow",
        pte_list_era: str = "6.4",
        gen_era: str = "2019",
        vtlb: bool = True,
        params: TdpMmuParams | None = None,
        kernel_2m: bool = False,
    ) -> None:
        super().__init__(layout, workload, seed, nr_vcpus)
        self.mmu = ShadowMmu(
            self.vm,
            spte_config_named(spte_config),
            pte_list_era=pte_list_era,
            gen_era=gen_era,
            vtlb=vtlb,
            emit=self._forward,
            mmio_info_cache=after_2011(spte_config),  # cache mmio info: 3.1
            prev_roots=after_2011(spte_config),  # the prev_roots LRU: 4.19
            params=params,
            host_seed=seed,  # which host pages back guest memory (mapping_level.py)
        )
        self.os = GuestOs(self.mmu.guest)
        assert self.mmu.kernel is not None  # the guest kernel's pte stores (kernel.py)
        self.mmu.kernel.on_exit = self._kernel_store_exit
        self.mmu.kernel.on_result = self._result
        self.kernel: KernelMaps | None = None
        if kernel_2m:
            self.kernel = kernel = KernelMaps.for_guest(self.vm, self.mmu.guest)
            self.os.on_spawn = lambda cr3: kernel.map_into(self.mmu.guest, cr3)
        self._kernel_rng = random.Random(seed)
        self.bus = MmioBus()  # the in-kernel LAPIC; the NIC's doorbell is QEMU's
        self.cr3_loads = 0
        self.last_walk: list[tuple[int, int]] = []  # (level, pte) read by the last walk
        self._retry: ShadowAccess | None = None
        self._retries = 0
        self._notes: list[str] = []
        self._mmio_hit = False
        self.emulator_walks = 0  # the emulator's own gva->gpa translations
        self.guest_walks = 0  # FNAME(walk_addr) runs: the fault's and the emulator's
        self.notifier = KvmMmuNotifier(self.vm, self.mmu)  # the host's mm (mmu_notifier.py)
        self.balloon = HostBalloon(self.notifier, seed)
        self.mmu.levels.faultin_race = self.balloon.faultin_race
        self._program = self._start(workload)

    def _kernel_store_exit(self, vcpu: int, address: int, error_code: int) -> None:
        self._vm_exit(vcpu, address, error_code)

    def _observe(self, event: Event) -> None:
        """The walk KVM just made (for the screen: the access's, not the guest kernel's
        pte stores'), and whether an MMIO spte was hit."""
        assert self.mmu.kernel is not None
        if self.mmu.kernel.storing:
            if event.name == "kvm_mmu_pagetable_walk":
                self.guest_walks += 1
            return
        if event.name == "handle_mmio_page_fault":
            self._mmio_hit = True
        elif event.name == "kvm_mmu_pagetable_walk":
            self.last_walk = []
            self.guest_walks += 1
        elif event.name == "kvm_mmu_paging_element":
            self.last_walk.append((int(event.fields["level"]), int(event.fields["pte"])))

    # -- running ----------------------------------------------------------------------

    def set_workload(self, workload: str) -> None:
        """End every process of the running workload and start `workload`."""
        self.check_workload(workload)
        for proc in list(self.os.processes.values()):
            self._exit(proc)
        self._retry, self._notes = None, []
        self.workload = workload
        self._program = self._start(workload)

    def step(self) -> ShadowStep:
        if self.workload == "churn" and self.steps % CHURN_EVERY == 0:
            self._note(churn_update(self.vm))
        if self.workload == "balloon" and self.steps and not self.steps % BALLOON_EVERY:
            self._note(self._inflate())
        access = self._retry or self._kernel_access() or self._next_access()
        self.vcpu = self.mmu.kernel.vcpu = access.vcpu  # type: ignore[union-attr]
        if self.mmu.cr3s.get(access.vcpu) != access.cr3:
            synced = self.mmu.stat["synced_pages"]
            self.mmu.cr3_load(access.vcpu, access.cr3)  # MOV to CR3 exits
            self.cr3_loads += 1
            synced = self.mmu.stat["synced_pages"] - synced
            sync = f" (kvm_mmu_sync_page ×{synced})" if synced else ""
            self._note(f"vcpu {access.vcpu}: mov cr3 {access.cr3:#x}{sync}")
        update = "; ".join(self._notes)
        self._notes = []
        self.steps += 1
        if not self.needs_exit(access):
            self._retry = None
            return ShadowStep(access, False, None, update)
        self._mmio_hit = False
        self._vm_exit(access.vcpu, access.gva, self.exit_error_code(access))
        mmu = self.mmu
        stale = mmu.levels.mmu_invalidate.stale_retries
        ret = self._result(
            mmu.page_fault(
                access.vcpu, access.cr3, access.gva, access.write, access.user, access.fetch
            )
        )
        if ret is RET_PF_EMULATE:
            self._emulate(access)
        guest = ""
        if ret is RET_PF_RETRY and access.vcpu in self.mmu.injected:
            del self.mmu.injected[access.vcpu]
            guest = self.os.handle_fault(access.cr3, access.gva, access.write)
        # the guest runs the instruction again: after its #PF handler, or at once when an
        # MMU-notifier invalidation made the fault stale
        stale = mmu.levels.mmu_invalidate.stale_retries != stale
        self._retry = access if (guest and guest != "SIGSEGV") or stale else None
        self._retries = self._retries + 1 if self._retry else 0
        if self._retries > MAX_RETRIES:
            raise RuntimeError(f"{access.label}: the guest keeps faulting ({guest})")
        return ShadowStep(access, True, ret, update, guest)

    def _emulate(self, access: ShadowAccess) -> None:
        """The emulator (`ShadowMmu.emulate_instruction`; the workloads have no code: it
        decodes a `mov`, `kvm_emulate_insn`): the `gva_to_gpa` of the instruction's
        operand, a second guest walk unless the vtlb (the memslot-search thread, patch
        7/7) has the page, then `kvm_mmio` for MMIO, which the in-kernel LAPIC takes
        (`kvm_apic`, `kvm_eoi`) or userspace (`kvm_userspace_exit`).  A cached MMIO spte
        hit needs no translation of its own: it handed the emulator the gfn
        (`vcpu_cache_mmio_info`)."""
        if not self._mmio_hit:
            self.emulator_walks += 1
        self.mmu.emulate_instruction(
            access.vcpu, access.gva, access.write, access.user, bus=self.bus
        )

    def _kernel_access(self) -> ShadowAccess | None:
        """Every `KERNEL_EVERY`-th step with `kernel_2m`: the running process's kernel
        work on the vCPU that ran last (kernel.py)."""
        if self.kernel is None or self.steps % KERNEL_EVERY != KERNEL_EVERY - 1:
            return None
        cr3 = self.mmu.cr3s.get(self.vcpu)
        if cr3 is None or cr3 not in self.os.processes:
            return None
        gva, fetch = kernel_access(self._kernel_rng)
        return ShadowAccess(self.vcpu, cr3, gva, False, user=False, fetch=fetch)

    def _next_access(self) -> ShadowAccess:
        for item in self._program:
            if isinstance(item, ShadowAccess):
                return item
            self._note(item)
        raise RuntimeError("a workload program ended")  # pragma: no cover - they loop

    def _note(self, text: str) -> None:
        if text:
            self._notes.append(text)

    def exit_error_code(self, access: ShadowAccess) -> int:
        """The #PF error code `kvm_page_fault` prints for the access (cpu.py)."""
        a = access
        return exit_error_code(self.mmu, a.vcpu, a.gva, a.write, a.user, a.fetch)

    def needs_exit(self, access: ShadowAccess) -> bool:
        """False when the CPU's walk of the shadow tables finds a present leaf that
        allows the access (no VM exit; cpu.py)."""
        a = access
        return not leaf_allows(self.mmu, a.vcpu, a.gva, a.write, a.user, a.fetch)

    def leaf_spte(self, vcpu: int, gva: int) -> int:
        return leaf_spte(self.mmu, vcpu, gva)

    def path_of(self, step: ShadowStep) -> list[tuple[KvmMmuPage, int]]:
        """The shadow pages the access's gva walks through, root first."""
        return self._path(step.access.vcpu, step.access.gva >> 12)

    def _exit(self, proc: GuestProcess) -> str:
        self.mmu.drop_process(proc.cr3)
        self.os.exit(proc)
        return f"exit pid {proc.pid} ({proc.comm})"

    def audit(self) -> None:
        self.mmu.audit()
        self.os.audit()
        self.mmu.guest.audit()
        self.vm.audit()
        self.notifier.audit()

    def _inflate(self) -> str:
        """The `balloon` workload: the guest's balloon driver allocates a page and gives
        it back (guest/balloon.py)."""
        gfn = self.mmu.guest.alloc_page()
        slot = self.vm.memslot_set(0).gfn_tree.search(gfn)
        assert slot is not None
        return self.balloon.give_back(slot, gfn)

    # -- workload programs ------------------------------------------------------------

    def _start(self, workload: str) -> Program:
        programs = {
            "kernbench": self._kernbench,
            "churn": self._kernbench,
            "balloon": self._kernbench,
            "netperf": self._netperf,
            "fork": self._fork,
            "pfault": self._pfault,
        }
        return programs[workload]()

    def _job(self) -> GuestProcess:
        proc = self.os.spawn("cc1")
        self.os.mmap(proc, HEAP, JOB_PAGES)
        return proc

    def _kernbench(self) -> Program:
        rng = self._rng
        queue = deque(self._job() for _ in range(JOBS_PER_VCPU * self.nr_vcpus))
        running: list[GuestProcess] = [queue.popleft() for _ in range(self.nr_vcpus)]
        left = {proc.cr3: JOB_ACCESSES for proc in [*queue, *running]}
        n = 0
        while True:
            vcpu = n % self.nr_vcpus
            n += 1
            proc = running[vcpu]
            if left[proc.cr3] == 0:
                yield self._exit(proc)
                queue.append(self._job())
                left[queue[-1].cr3] = JOB_ACCESSES
                running[vcpu] = proc = queue.popleft()
            elif n % (SLICE * self.nr_vcpus) < self.nr_vcpus and queue:
                queue.append(proc)  # the time slice is over
                running[vcpu] = proc = queue.popleft()
            left[proc.cr3] -= 1
            page = rng.randrange(JOB_PAGES)
            yield ShadowAccess(vcpu, proc.cr3, HEAP + page * PAGE, rng.random() < 0.4)

    def _netperf(self) -> Program:
        rng = self._rng
        proc = self.os.spawn("netperf")
        self.os.mmap(proc, HEAP, 16)
        self.os.map_now(proc, NIC_GVA, NIC_DOORBELL >> 12)
        self.os.map_now(proc, LAPIC_GVA, LAPIC_EOI >> 12)
        yield f"spawn pid {proc.pid} (netperf): NIC BAR at gva {NIC_GVA:#x}"
        n = 0
        while True:
            vcpu = n % self.nr_vcpus  # netperf's threads on every vCPU: one cr3, one root
            n += 1
            if rng.random() < 0.7:
                mmio = NIC_GVA | NIC_DOORBELL & 0xFFF
                if rng.random() >= 0.8:
                    mmio = LAPIC_GVA | LAPIC_EOI & 0xFFF
                yield ShadowAccess(vcpu, proc.cr3, mmio, True, user=False)
            else:
                yield ShadowAccess(vcpu, proc.cr3, HEAP + rng.randrange(16) * PAGE, True)

    def _fork(self) -> Program:
        parent = self.os.spawn("rmap_fork")
        self.os.mmap(parent, HEAP, FORK_PAGES)
        for i in range(FORK_PAGES):
            yield ShadowAccess(0, parent.cr3, HEAP + i * PAGE, True)
        children: deque[GuestProcess] = deque()
        while True:
            if len(children) >= FORK_LIVE:
                yield self._exit(children.popleft())
            child = self.os.fork(parent)
            children.append(child)
            yield f"fork: pid {child.pid}, {count(len(children), 'child', 'children')}"
            vcpu = 1 + (child.pid % (self.nr_vcpus - 1)) if self.nr_vcpus > 1 else 0
            for i in range(FORK_PAGES):
                yield ShadowAccess(vcpu, child.cr3, HEAP + i * PAGE, False)

    def _pfault(self) -> Program:
        while True:
            proc = self.os.spawn("pfault")
            yield f"spawn pid {proc.pid} (pfault, {PFAULT_PAGES} pages a round)"
            for _ in range(PFAULT_ROUNDS):
                yield from self._pfault_round(proc)
            yield self._exit(proc)

    def _pfault_round(self, proc: GuestProcess) -> Program:
        vma = self.os.mmap(proc, HEAP, PFAULT_PAGES)
        pages = [HEAP + i * PAGE for i in range(PFAULT_PAGES)]
        yield "mmap(PROT_READ|PROT_WRITE)"
        yield from (ShadowAccess(0, proc.cr3, gva, True) for gva in pages)
        changed = self.os.mprotect(proc, vma, writable=True)
        yield f"mprotect(PROT_WRITE): {changed} ptes changed (x86: W implies R)"
        yield from (ShadowAccess(0, proc.cr3, gva, True) for gva in pages)
        changed = self.os.mprotect(proc, vma, writable=False)
        yield f"mprotect(PROT_READ): {changed} ptes changed"
        yield from (ShadowAccess(0, proc.cr3, gva, False) for gva in pages)
        yield f"munmap: {self.os.munmap(proc, vma)} pages"
