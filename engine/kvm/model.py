"""The same guest program on the engine's shadow MMU (`engine.mmu.shadow.ShadowMmu`),
configured as the host is: one address space when the kernel has no
KVM_CAP_MULTI_ADDRESS_SPACE, MMIO caching as `kvm.mmio_caching` says, MAXPHYADDR from
/proc/cpuinfo, 4K pages.

The adapter plays the CPU and the VMM, nothing of KVM: for every instruction the CPU
fetches it (a fault with `PFERR_FETCH_MASK` while the code page has no leaf), and for
every load and store walks the vCPU's shadow root (a present leaf that allows it: no
exit, the access goes to guest RAM), else it takes a page fault into
`ShadowMmu.page_fault()` and retries until the fault is fixed or the instruction is
emulated (`ShadowMmu.emulate_instruction()`: the decode's fetch walk at the
instruction's own rip, `kvm_emulate_insn`, the operand, `kvm_mmio`).  It keeps `%rbx`
and the bytes the guest stored, so an emulated store carries the value the kernel
traces; userspace answers MMIO reads with zeros, and the next KVM_RUN completes them.
A slice's CR3 load by the VMM is `KVM_SET_SREGS`' `kvm_mmu_reset_context()`: every
root, the `prev_roots` included, is put and one is loaded again (`kvm_mmu_get_page`,
existing when the process ran before); a CPL-0 slice runs in the emulator, one
instruction at a time, and its `mov %rax,%cr3` keeps the roots (`fast_pgd_switch()`).  The
memslot operations go to an `engine.Vm` with the program's host addresses replaced by
fixed fake ones; the MMU runs with `FNAME(pte_prefetch)` on, dirty logging
(`engine.mmu.dirty_log`) following the slots, and a freed obsolete root zapped (traced)
once more, as the kernel always does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..events import Event
from ..memslots.vm import Vm
from ..mmu.dirty_log import DirtyLogging
from ..mmu.mmu_pages import kvm_page_table_hashfn
from ..mmu.params import TdpMmuParams
from ..mmu.role import PG_LEVEL_2M, PG_LEVEL_4K
from ..mmu.shadow.cpu import leaf_allows
from ..mmu.shadow.mmu import ShadowMmu
from ..mmu.spte import RET_PF_EMULATE, RET_PF_RETRY, RetPf, SpteConfig
from .asm import loads_cr3
from .program import DOORBELL_GVA, PAGE, DirtyLogOp, GuestProgram, Insn, MemslotOp, Slice

FAKE_HVA = (0x7F00_0000_0000, 0x7E00_0000_0000)  # host addresses of the two backings
MAX_FAULTS = 4  # one access faulting more often than this is a model bug
VCPU = 0


class ModelError(RuntimeError):
    """The model could not run the program (a guest fault the kernel would not take)."""


@dataclass
class ModelRun:
    program: GuestProgram
    mmu: ShadowMmu
    vm: Vm
    events: Counter[str] = field(default_factory=Counter)
    created: Counter[tuple[int, bool]] = field(default_factory=Counter)  # (level, direct)
    mmio_exits: int = 0
    emulated: int = 0
    rmap_max: int = 0  # max_mmu_rmap_size: the rmap's length before an add, at most
    last_gen: int | None = None


class _Cpu:
    """The vCPU: instruction fetches, loads and stores of `%bl`/`%rbx`, guest RAM."""

    def __init__(self, run: ModelRun) -> None:
        self.run = run
        self.mmu = run.mmu
        self.cr3: int | None = None
        self.rbx = 0  # KVM_SET_REGS zeroes it at every slice
        self.memory: dict[int, int] = {}  # gpa -> a byte the guest stored in RAM (else 0)

    def leaf_allows(self, gva: int, write: bool, fetch: bool = False) -> bool:
        """The CPU's walk of the shadow tables at CPL 3 (the one `ShadowSession` and the
        guest kernel's stores make: engine/mmu/shadow/cpu.py)."""
        return leaf_allows(self.mmu, VCPU, gva, write, True, fetch)

    def _fault(self, gva: int, write: bool, fetch: bool = False) -> RetPf:
        assert self.cr3 is not None
        ret = self.mmu.page_fault(VCPU, self.cr3, gva, write, user=True, fetch=fetch)
        if ret is RET_PF_RETRY and VCPU in self.mmu.injected:
            raise ModelError(f"the guest took a #PF at {gva:#x}: a program bug")
        return ret

    def fetch(self, rip: int) -> None:
        """The instruction fetch at `rip`: a fault with `PFERR_FETCH_MASK` (EFER.NX) while
        the code page has no executable leaf."""
        for _ in range(MAX_FAULTS):
            if self.leaf_allows(rip, False, fetch=True):
                return
            self._fault(rip, False, fetch=True)
        raise ModelError(f"rip {rip:#x} still faults after {MAX_FAULTS} faults")

    def execute(self, gva: int, write: bool, insn: Insn, width: int, last: bool = False) -> None:
        """`insn`'s load or store of `width` bytes at `gva`: native once a leaf allows
        it, else faults until one does or the instruction is emulated (then the next
        instruction is fetched, unless `last`: the VMM stops the guest there)."""
        rip, code = insn
        for _ in range(MAX_FAULTS):
            self.fetch(rip)
            if self.leaf_allows(gva, write):
                walk = self.mmu.guest.translate(self.cr3 or 0, gva)
                assert walk.gfn is not None
                self._ram(walk.gfn << 12 | gva & 0xFFF, write, width)
                return
            if self._fault(gva, write) is not RET_PF_EMULATE:
                continue
            self.run.emulated += 1
            value = self.rbx & ((1 << 8 * width) - 1)
            gpa = self.mmu.emulate_instruction(VCPU, gva, write, True, insn=insn, size=width,
                                               val=value)  # fmt: skip
            if gpa is not None:
                self._ram(gpa, write, width)
            else:  # MMIO: userspace answers a read with zeros (the runner's complete_io)
                self.run.mmio_exits += 1
                if not write:
                    self.mmu.complete_emulated_mmio(VCPU, 0)
                    self.rbx &= ~((1 << 8 * width) - 1)
            if not last:
                self.fetch(rip + len(code))
            return
        raise ModelError(f"gva {gva:#x} still faults after {MAX_FAULTS} faults")

    def _ram(self, gpa: int, write: bool, width: int) -> None:
        """A load into or a store from `%rbx`; a store into one of the guest's own tables
        is its `write_pte` (KVM sees it as the table's shadow says: unsync, or
        `kvm_mmu_track_write()` when emulated)."""
        mask = (1 << 8 * width) - 1
        gfn, offset = gpa >> 12, gpa & 0xFFF
        if gfn in self.mmu.guest.tables:
            index, shift = offset // 8, 8 * (offset % 8)
            pte = self.mmu.guest.pte(gfn, index)
            if write:
                new = pte & ~(mask << shift) | (self.rbx & mask) << shift
                self.mmu.guest.write_pte(gfn, index, new)
            else:
                self.rbx = self.rbx & ~mask | pte >> shift & mask
            return
        if write:
            for i in range(width):
                byte = self.rbx >> 8 * i & 0xFF
                if byte or gpa + i in self.memory:
                    self.memory[gpa + i] = byte
        else:
            value = sum(self.memory.get(gpa + i, 0) << 8 * i for i in range(width))
            self.rbx = self.rbx & ~mask | value

    def run_slice(self, sl: Slice, doorbell_gva: int) -> Iterator[None]:
        """The slice, a step (`None`) after each access: a caller may pause between
        them (the comparison runs the model as far as the kernel's events go)."""
        if sl.cr3 != self.cr3:  # KVM_SET_SREGS, then the next KVM_RUN's kvm_mmu_load()
            self.cr3 = sl.cr3
            self.mmu.reset_context(VCPU)
            self.mmu.cr3_load(VCPU, sl.cr3)
        self.rbx = 0
        if sl.cpl == 0:
            self.run_emulated(sl, doorbell_gva)
            return
        self.fetch(sl.rip)
        for sweep, load, store in sl.accesses():
            for gva in sweep.addresses():
                if load is not None:
                    self.execute(gva, False, load, sweep.width)
                if store is not None:
                    self.execute(gva, True, store, sweep.width)
                yield
        self.execute(doorbell_gva, True, sl.doorbell, 1, last=True)

    def run_emulated(self, sl: Slice, doorbell_gva: int) -> None:
        """A CPL-0 slice: kvm-pvm runs the guest's kernel mode in its emulator, every
        instruction decoded (its fetch walk without PFERR_USER_MASK, `kvm_emulate_insn`)
        and executed there (docs/kvm.md §11.3): `mov %rax,%cr3` is `kvm_set_cr3()` ->
        `kvm_mmu_new_pgd()` (`ShadowMmu.cr3_load`: the root from `prev_roots`, or a new
        one at the next entry), the doorbell store an emulated MMIO write."""
        for insn in sl.insns:
            self.run.emulated += 1
            if insn == sl.doorbell:
                self.run.mmio_exits += 1
                self.mmu.emulate_instruction(VCPU, doorbell_gva, True, False, insn=insn,
                                             size=1, val=self.rbx & 0xFF)  # fmt: skip
                return
            if not self.mmu.decode_instruction(VCPU, insn, user=False):
                raise ModelError(f"the guest took a #PF fetching {insn[0]:#x}: a program bug")
            if loads_cr3(insn[1]):
                assert sl.loads_cr3 is not None
                self.cr3 = sl.loads_cr3
                self.mmu.cr3_load(VCPU, sl.loads_cr3)


def model_vm(address_spaces: int, host_phys_bits: int = 52) -> Vm:
    """`engine.Vm` as this host's: `address_spaces` from KVM_CAP_MULTI_ADDRESS_SPACE
    (0 means one), memslot gfns up to `kvm_mmu_max_gfn()` (52 bits without TDP)."""
    return Vm(address_spaces=max(1, address_spaces), host_phys_bits=host_phys_bits)


def _apply(vm: Vm, op: MemslotOp | DirtyLogOp, dirty: DirtyLogging | None = None) -> None:
    if isinstance(op, MemslotOp):
        hva = FAKE_HVA[op.backing] + op.offset
        vm.set_user_memory_region(op.slot, op.flags, op.guest_phys_addr, op.memory_size, hva)
    elif dirty is not None:
        dirty.get_dirty_log(op.slot)


class ModelRunner:
    """`program` on a shadow MMU configured as the host, one slice at a time (the app's
    comparison follows the kernel's run slice by slice)."""

    def __init__(
        self,
        program: GuestProgram,
        cfg: SpteConfig,
        *,
        address_spaces: int = 1,
        listen: Callable[[Event], None] | None = None,
    ) -> None:
        vm = model_vm(address_spaces)
        for setup in program.setup:
            _apply(vm, setup)
        self.run = run = ModelRun(program, None, vm)  # type: ignore[arg-type]

        def observe(event: Event) -> None:
            if listen is not None:
                listen(event)
            run.events[event.name] += 1
            if event.name == "kvm_mmu_get_page":
                run.last_gen = int(event.fields["gen"])
                if event.fields.get("created"):
                    key = (int(event.fields["level"]), bool(event.fields["direct"]))
                    run.created[key] += 1
            elif event.name == "kvm_mmu_set_spte":
                count = run.mmu.rmap_count(int(event.fields["gfn"]))
                run.rmap_max = max(run.rmap_max, count - 1)
                self.dirty.observe(event)

        # guest memory is anonymous 4K pages (no MADV_HUGEPAGE): host_pfn_mapping_level()
        # is 4K, so a guest 2M page is shadowed by 4K sptes under a direct page; a
        # program whose memslot 1 is in transparent huge pages (`thp`) has 2M there, and
        # its guest 2M pages get 2M sptes (memslot 0 has only 4K guest pages: its host
        # level never matters)
        host_level = PG_LEVEL_2M if program.data_huge else PG_LEVEL_4K
        params = TdpMmuParams(tdp_mmu=False, host_level=host_level)
        run.mmu = ShadowMmu(vm, cfg, guest=program.tables, emit=observe, pte_prefetch=True,
                            params=params)  # fmt: skip
        run.mmu.pages.rezap_freed_roots = True  # as mmu_free_root_page() does
        self.dirty = DirtyLogging(run.mmu)
        self.cpu = _Cpu(run)

    def zapped_page(self, event: Event) -> int | None:
        """The host page (the `sptep`s' page) of the shadow page a
        `kvm_mmu_prepare_zap_page` being emitted zaps: the page is freed with it."""
        f, pages = event.fields, self.run.mmu.pages
        hashed = pages.mmu_page_hash[kvm_page_table_hashfn(int(f["gfn"]))]
        for sp in (*hashed, *pages.invalid_roots.values()):
            role = sp.role
            if (sp.gfn, sp.mmu_valid_gen, role.level, role.quadrant, role.access,
                    bool(role.direct), sp.root_count) == (f["gfn"], f["gen"], f["level"],
                    f["quadrant"], f["access"], f["direct"], f["root_count"]):  # fmt: skip
                return sp.spt_pa >> 12
        return None

    def run_slice(self, sl: Slice) -> None:
        for _ in self.steps(sl):
            pass

    def steps(self, sl: Slice) -> Iterator[None]:
        """`run_slice` a step at a time: the VMM's operations, then one per access."""
        for op in sl.before:
            _apply(self.run.vm, op, self.dirty)
        yield from self.cpu.run_slice(sl, DOORBELL_GVA)


def run_on_model(
    program: GuestProgram,
    cfg: SpteConfig,
    *,
    address_spaces: int = 1,
    listen: Callable[[Event], None] | None = None,
) -> ModelRun:
    """Run `program` (a fresh one: the walks set A/D bits in its tables); `listen`
    hears every event."""
    runner = ModelRunner(program, cfg, address_spaces=address_spaces, listen=listen)
    for sl in program.slices:
        runner.run_slice(sl)
    return runner.run


def pages_4k(run: ModelRun, level: int = 1) -> int:
    """The 4K leaves present now (`pages_4k`; `level` 2: the 2M ones, `pages_2m`)."""
    return sum(tr.level == level for tr in run.mmu.shadowed_translation.values())


def model_stats(run: ModelRun) -> dict[str, int]:
    """The model's counters under the kernel's statistic names."""
    stats = dict(run.mmu.stat)
    stats.update(run.mmu.pages.stat)
    # FNAME(page_fault) never calls fast_page_fault() (6.18 paging_tmpl.h, fast_pf.py):
    # the shadow MMU fixes every fault under mmu_lock, so its pf_fast stays 0
    stats.setdefault("pf_fast", 0)
    stats["pages_4k"] = pages_4k(run)
    stats["pages_2m"] = pages_4k(run, 2)
    stats["max_mmu_rmap_size"] = run.rmap_max
    stats["mmio_exits"] = run.mmio_exits
    stats["insn_emulation"] = run.emulated
    return stats


__all__ = [
    "PAGE",
    "ModelError",
    "ModelRun",
    "ModelRunner",
    "model_stats",
    "model_vm",
    "run_on_model",
]
