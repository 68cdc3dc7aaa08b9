"""The same guest program on the engine's shadow MMU (`engine.mmu.shadow.ShadowMmu`),
configured as the host is: one address space when the kernel has no
KVM_CAP_MULTI_ADDRESS_SPACE, MMIO caching as `kvm.mmio_caching` says, MAXPHYADDR from
/proc/cpuinfo, 4K pages.

The adapter plays the CPU and the VMM, nothing of KVM: for every access the CPU walks
the vCPU's shadow root (a present leaf that allows it: no exit), else it takes a page
fault into `ShadowMmu.page_fault()` and retries until the fault is fixed or the
instruction is emulated.  An emulated instruction is first fetched by the emulator
through the guest's tables (`x86_decode_insn` -> `kvm_fetch_guest_virt` ->
`mmu->gva_to_gpa`: one guest walk of the code page); its memory operand needs no walk
when the fault left MMIO info (`vcpu_match_mmio_gva`).  A slice's CR3 load is
`KVM_SET_SREGS`' `kvm_mmu_reset_context()`: the root is dropped and loaded again.  The
memslot operations go to an `engine.Vm` with the program's host addresses replaced by
fixed fake ones; the MMU runs with `FNAME(pte_prefetch)` on, dirty logging
(`engine.mmu.dirty_log`) following the slots, and a freed obsolete root zapped (traced)
once more, as the kernel always does.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..events import Event
from ..memslots.vm import Vm
from ..mmu.dirty_log import DirtyLogging
from ..mmu.shadow.mmu import ShadowMmu
from ..mmu.spte import (
    PT_USER_MASK,
    PT_WRITABLE_MASK,
    RetPf,
    SpteConfig,
    is_shadow_present_pte,
)
from ..mmu.walk import last_on_path
from .asm import READ, RMW, WRITE
from .program import PAGE, DirtyLogOp, GuestProgram, MemslotOp, Slice

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
    def __init__(self, run: ModelRun) -> None:
        self.run = run
        self.mmu = run.mmu
        self.cr3: int | None = None

    def leaf_allows(self, gva: int, write: bool) -> bool:
        root = self.mmu.roots.get(VCPU)
        if root is None or self.mmu.pages.is_obsolete(root):
            return False
        sp, index = last_on_path(self.mmu.pages, root, gva >> 12)
        spte = sp.spt[index] if sp.role.level == 1 else self.mmu.pages.nonpresent
        if not is_shadow_present_pte(spte):  # empty or an MMIO spte
            return False
        return bool(spte & PT_USER_MASK) and (not write or bool(spte & PT_WRITABLE_MASK))

    def access(self, gva: int, write: bool, rip: int) -> None:
        for _ in range(MAX_FAULTS):
            if self.leaf_allows(gva, write):
                return
            assert self.cr3 is not None
            mmio_before = self.run.events["kvm_mmio"]
            ret = self.mmu.page_fault(VCPU, self.cr3, gva, write, user=True)
            if ret is RetPf.EMULATE:
                self.run.emulated += 1
                self.mmu.gva_to_gpa(VCPU, rip, False, True)  # the emulator's fetch
                if self.run.events["kvm_mmio"] > mmio_before:
                    self.run.mmio_exits += 1
                return
            if ret is RetPf.RETRY and VCPU in self.mmu.injected:
                raise ModelError(f"the guest took a #PF at {gva:#x}: a program bug")
        raise ModelError(f"gva {gva:#x} still faults after {MAX_FAULTS} faults")

    def run_slice(self, sl: Slice, doorbell_gva: int) -> None:
        if sl.cr3 != self.cr3:
            self.cr3 = sl.cr3
            self.mmu.cr3_load(VCPU, sl.cr3 << 12 >> 12)
        self.access(sl.rip, False, sl.rip)  # the first instruction fetch
        for sweep in sl.sweeps:
            for gva in sweep.addresses():
                if sweep.kind in (READ, RMW):
                    self.access(gva, False, sl.rip)
                if sweep.kind in (WRITE, RMW):
                    self.access(gva, True, sl.rip)
                    if sweep.kind == RMW:
                        self._guest_store(gva)
        self.access(doorbell_gva, True, sl.rip)

    def _guest_store(self, gva: int) -> None:
        """A store into one of the guest's own tables (ptwrite): the same pte again."""
        assert self.cr3 is not None
        walk = self.mmu.guest.translate(self.cr3, gva)
        if walk.gfn is not None and walk.gfn in self.mmu.guest.tables:
            index = (gva & 0xFFF) // 8
            self.mmu.guest.write_pte(walk.gfn, index, self.mmu.guest.pte(walk.gfn, index))


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

    def __init__(self, program: GuestProgram, cfg: SpteConfig, *, address_spaces: int = 1):
        vm = model_vm(address_spaces)
        for setup in program.setup:
            _apply(vm, setup)
        self.run = run = ModelRun(program, None, vm)  # type: ignore[arg-type]

        def observe(event: Event) -> None:
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

        run.mmu = ShadowMmu(vm, cfg, guest=program.tables, emit=observe, pte_prefetch=True)
        run.mmu.pages.rezap_freed_roots = True  # as mmu_free_root_page() does
        self.dirty = DirtyLogging(run.mmu)
        self.cpu = _Cpu(run)

    def run_slice(self, sl: Slice) -> None:
        from .program import DOORBELL_GVA

        for op in sl.before:
            _apply(self.run.vm, op, self.dirty)
        self.cpu.run_slice(sl, DOORBELL_GVA)


def run_on_model(
    program: GuestProgram,
    cfg: SpteConfig,
    *,
    address_spaces: int = 1,
) -> ModelRun:
    """Run `program` (a fresh one: the walks set A/D bits in its tables)."""
    runner = ModelRunner(program, cfg, address_spaces=address_spaces)
    for sl in program.slices:
        runner.run_slice(sl)
    return runner.run


def pages_4k(run: ModelRun) -> int:
    """The 4K leaves present now (`pages_4k`)."""
    return sum(tr.level == 1 for tr in run.mmu.shadowed_translation.values())


def model_stats(run: ModelRun) -> dict[str, int]:
    """The model's counters under the kernel's statistic names."""
    stats = dict(run.mmu.stat)
    stats.update(run.mmu.pages.stat)
    # FNAME(page_fault) never calls fast_page_fault() (6.18 paging_tmpl.h, fast_pf.py):
    # the shadow MMU fixes every fault under mmu_lock, so its pf_fast stays 0
    stats.setdefault("pf_fast", 0)
    stats["pages_4k"] = pages_4k(run)
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
