"""`fast_page_fault()`: a fault fixed without mmu_lock, by one cmpxchg of the leaf spte.

torvalds/linux 6.18 `arch/x86/kvm/mmu/mmu.c` (`page_fault_can_be_fast`,
`fast_pf_get_last_sptep`, `fast_pf_fix_direct_spte`, `fast_page_fault`), `tdp_mmu.c`
(`kvm_tdp_mmu_fast_pf_get_last_sptep`), `spte.h` (`is_access_allowed`,
`is_mmu_writable_spte`, `restore_acc_track_spte`), `mmutrace.h` (`fast_page_fault`),
`virt/kvm/kvm_main.c` (`mark_page_dirty_in_slot`).

Who calls it (6.18): `direct_page_fault()` — the shadow MMU with direct pages under
EPT/NPT (`tdp_mmu=N`, `DirectMmu`) and a guest without paging under shadow paging — and
`kvm_tdp_mmu_page_fault()` (`TdpMmu`), each right after the page-track check and before
`kvm_mmu_faultin_pfn()`, i.e. before any emulation decision and before mmu_lock is taken.
`FNAME(page_fault)` (paging_tmpl.h, shadow paging of a guest with paging on) does *not*
call it: "fast page fault only works for direct mapping since the gfn is not stable for
indirect shadow page".  So `ShadowMmu` has no fast path, and neither has the kernel
under kvm-pvm (its `pf_fast` statistic stays 0, `mmuscope kvm dirty --compare`).

The rules, in the kernel's order:
- `page_fault_can_be_fast()`: never a reserved-bit fault (an MMIO spte of a stale
  generation must be rebuilt by the slow path); a fault on a not-present entry only when
  KVM runs without A/D bits (`!kvm_ad_enabled`: the entry may be access-tracked); a fault
  on a present entry only for a write (write protection);
- up to 4 retries of: find the last spte of the walk (the vCPU's root, no lock); give up
  (RET_PF_INVALID) unless it is a present leaf; RET_PF_SPURIOUS when the spte already
  allows the access (`is_access_allowed`: a TLB flushed lazily, or another vCPU fixed it);
  restore an access-tracked spte (`restore_acc_track_spte`, and A set: 6.13+); for a
  write to an
  MMU-writable spte set W — but not in a huge spte of a slot that logs dirty pages (only
  the faulting gfn would be marked dirty); give up unless the new spte allows the access;
  `fast_pf_fix_direct_spte()`: `try_cmpxchg64()` from the value read, RET_PF_FIXED and
  `mark_page_dirty_in_slot()` when it made the spte writable; a lost cmpxchg (another
  CPU changed the spte in between) goes round again; past 4 retries, "Fast #PF retrying
  more than 4 times." (pr_warn_once) and RET_PF_INVALID;
- `trace_fast_page_fault` with the spte read (`old_spte`) and the spte's value after the
  exchange (`new_spte = *sptep`), whatever the result; `pf_fast` counts FIXED and
  SPURIOUS.  The change bypasses `tdp_mmu_set_spte_atomic()`, so a TDP MMU fix emits no
  `kvm_tdp_mmu_spte_changed`, and no `kvm_mmu_set_spte` either: those are the slow path's.
Not modelled: private (guest_memfd) faults (`has_private_mem`), PML, the dirty ring.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..events import FieldValue
from ..memslots.memslot import MemorySlot
from .mapping_level import KvmPageFault
from .mmu_pages import KvmMmuPage
from .role import PG_LEVEL_4K
from .spte import (
    PT_PRESENT_MASK,
    PT_WRITABLE_MASK,
    RET_PF_FIXED,
    RET_PF_INVALID,
    RET_PF_SPURIOUS,
    RetPf,
    SpteConfig,
    is_access_track_spte,
    is_executable_pte,
    is_last_spte,
    is_mmio_spte,
    is_shadow_present_pte,
    restore_acc_track_spte,
)
from .vcpu.vmx import (
    PFERR_FETCH_MASK,
    PFERR_PRESENT_MASK,
    PFERR_RSVD_MASK,
    PFERR_WRITE_MASK,
    ept_exit_qualification,
    ept_violation_error_code,
)

FAST_PF_MAX_RETRIES = 4  # "if (++retry_count > 4)"

Sptep = tuple[KvmMmuPage, int]  # `u64 *sptep`: the page table and the index in it
LastSptep = Callable[[int, int], Sptep]  # (vcpu, gfn) -> where the lockless walk ends
Race = Callable[[KvmMmuPage, int], None]


class FastPfMmu(Protocol):
    """What the fast path reads of the MMU that calls it."""

    cfg: SpteConfig
    stat: dict[str, int]

    @property
    def _listener(self) -> object: ...  # None while nobody listens (bare mode)

    #: the VM's dirty bitmaps (`DirtyLogging.mark_page_dirty`), when someone keeps them
    mark_page_dirty: Callable[[MemorySlot, int], None] | None

    def _emit(self, name: str, **fields: FieldValue) -> None: ...


def fault_error_code(cfg: SpteConfig, spte: int, write: bool, fetch: bool = False) -> int:
    """`fault->error_code` for an access that exited on `spte` (6.18): under EPT what
    `__vmx_handle_ept_violation()` derives from the exit qualification (vmx.py; it
    prints as PFERR_GUEST_FINAL's left-over ``0x100000000``), PFERR_RSVD alone for an EPT
    misconfiguration (an MMIO spte: `handle_ept_misconfig()`); NPT/legacy: the #PF/#NPF
    code, P, W, F and RSVD."""
    if cfg.ept:
        if is_mmio_spte(cfg, spte):
            return PFERR_RSVD_MASK
        return ept_violation_error_code(ept_exit_qualification(spte, write, fetch))
    if is_mmio_spte(cfg, spte):
        return (
            PFERR_RSVD_MASK
            | PFERR_PRESENT_MASK
            | (PFERR_WRITE_MASK if write else 0)
            | (PFERR_FETCH_MASK if fetch else 0)
        )
    code = (PFERR_WRITE_MASK if write else 0) | (PFERR_FETCH_MASK if fetch else 0)
    if is_shadow_present_pte(spte) and spte & PT_PRESENT_MASK:
        code |= PFERR_PRESENT_MASK
    return code


def page_fault_can_be_fast(kvm_ad_enabled: bool, fault: KvmPageFault) -> bool:
    """`page_fault_can_be_fast()` (6.18 mmu.c), without private memory."""
    if fault.rsvd:
        return False  # "Refreshing the MMIO generation needs to go down the slow path"
    if not fault.present:
        return not kvm_ad_enabled  # maybe an access-tracked spte
    return fault.write  # write protection; fetches and writes exclude each other


def is_writable_pte(spte: int) -> bool:
    return bool(spte & PT_WRITABLE_MASK)


def is_mmu_writable_spte(cfg: SpteConfig, spte: int) -> bool:
    """`is_mmu_writable_spte()` (spte.h; `spte_can_locklessly_be_made_writable()` before
    its 2022 rename): KVM may make this spte writable without mmu_lock — it was write-
    protected for dirty logging or access tracking, not because the gfn is shadowed."""
    return bool(spte & cfg.shadow_mmu_writable_mask)


def is_access_allowed(cfg: SpteConfig, fault: KvmPageFault, spte: int) -> bool:
    """`is_access_allowed()` (6.18 spte.h): would the access fault on this spte now?"""
    if fault.exec:
        return is_executable_pte(cfg, spte)
    if fault.write:
        return is_writable_pte(spte)
    return bool(spte & PT_PRESENT_MASK)  # a read: P (EPT: the R bit)


def fast_pf_get_last_sptep(child_at: Callable[[KvmMmuPage, int], KvmMmuPage | None],
                           root: KvmMmuPage, gfn: int) -> Sptep:  # fmt: skip
    """`fast_pf_get_last_sptep()` (mmu.c, `for_each_shadow_entry_lockless`): the last
    spte the walk from `root` reads — a leaf, or the first entry that is not a table."""
    sp = root
    while True:
        index = (gfn >> (9 * (sp.role.level - 1))) & 511
        child = child_at(sp, index)
        if child is None:
            return sp, index
        sp = child


class FastPageFault:
    """One MMU's `fast_page_fault()`.  `race`, when set, is "another CPU" changing the
    spte inside the cmpxchg window (tests and the sessions lose races with it)."""

    def __init__(self, mmu: FastPfMmu, last_sptep: LastSptep) -> None:
        self.mmu = mmu
        self.last_sptep = last_sptep
        self.kvm_ad_enabled = not mmu.cfg.ad_disabled  # kvm_ad_enabled (6.12+ a global)
        self.race: Race | None = None
        self.lost_cmpxchg = 0  # model-only: exchanges another CPU made fail
        self.restored = 0  # model-only: access-tracked sptes restored
        self.warned = False  # pr_warn_once("Fast #PF retrying more than 4 times.")
        #: the last call that got past page_fault_can_be_fast: (gfn, old, new, result)
        self.last: tuple[int, int, int, RetPf] | None = None
        mmu.stat.setdefault("pf_fast", 0)

    def page_fault(self, vcpu: int, fault: KvmPageFault) -> RetPf:
        """`fast_page_fault(vcpu, fault)`, `page_fault_can_be_fast()` first, on the fault
        `kvm_mmu_do_page_fault()` made of the exit's error code; FIXED and SPURIOUS are
        counted as `kvm_mmu_do_page_fault()` counts what the handler returns
        (`pf_fixed`, `pf_spurious`), and in `pf_fast`."""
        if not page_fault_can_be_fast(self.kvm_ad_enabled, fault):
            return RET_PF_INVALID
        ret, sp, index, spte = self._loop(vcpu, fault)
        self.last = (fault.gfn, spte, sp.spt[index], ret)
        mmu = self.mmu
        if mmu._listener is not None:
            mmu._emit(
                "fast_page_fault",
                vcpu_id=vcpu,
                cr2_or_gpa=fault.addr,
                error_code=fault.error_code,
                sptep=sp.sptep(index),
                old_spte=spte,
                new_spte=sp.spt[index],
                spurious=ret is RET_PF_SPURIOUS,
                fixed=ret is RET_PF_FIXED,
            )
        if ret is not RET_PF_INVALID:
            stat = mmu.stat
            stat["pf_fast"] += 1
            stat["pf_fixed" if ret is RET_PF_FIXED else "pf_spurious"] += 1
        return ret

    def _loop(self, vcpu: int, fault: KvmPageFault) -> tuple[RetPf, KvmMmuPage, int, int]:
        cfg = self.mmu.cfg
        retry_count = 0
        while True:
            sp, index = self.last_sptep(vcpu, fault.gfn)
            spte = sp.spt[index]
            if not is_shadow_present_pte(spte) or not is_last_spte(spte, sp.role.level):
                return RET_PF_INVALID, sp, index, spte
            if is_access_allowed(cfg, fault, spte):
                return RET_PF_SPURIOUS, sp, index, spte
            new_spte = spte
            if not self.kvm_ad_enabled and is_access_track_spte(cfg, spte):
                # 6.13+: "| shadow_accessed_mask" (0 before without A/D bits)
                new_spte = restore_acc_track_spte(cfg, new_spte) | cfg.shadow_accessed_mask
            if fault.write and is_mmu_writable_spte(cfg, spte):
                new_spte |= PT_WRITABLE_MASK
                slot = fault.slot
                if sp.role.level > PG_LEVEL_4K and slot is not None and slot.dirty_logging:
                    return RET_PF_INVALID, sp, index, spte  # the slow path maps it 4K
            if new_spte == spte or not is_access_allowed(cfg, fault, new_spte):
                return RET_PF_INVALID, sp, index, spte
            if self.fast_pf_fix_direct_spte(fault, sp, index, spte, new_spte):
                return RET_PF_FIXED, sp, index, spte
            retry_count += 1
            if retry_count > FAST_PF_MAX_RETRIES:
                self.warned = True
                return RET_PF_INVALID, sp, index, spte

    def fast_pf_fix_direct_spte(
        self, fault: KvmPageFault, sp: KvmMmuPage, index: int, old_spte: int, new_spte: int
    ) -> bool:
        """`try_cmpxchg64(sptep, &old_spte, new_spte)`; False when another CPU changed the
        spte since it was read.  A spte made writable marks the faulting gfn dirty (the D
        bit is left to the CPU: "we do not do this")."""
        race = self.race
        if race is not None:
            self.race = None  # the other CPU does not race itself
            try:
                race(sp, index)
            finally:
                self.race = race
        if sp.spt[index] != old_spte:
            self.lost_cmpxchg += 1
            return False
        sp.spt[index] = new_spte
        if not self.kvm_ad_enabled and is_access_track_spte(self.mmu.cfg, old_spte):
            self.restored += 1
        if is_writable_pte(new_spte) and not is_writable_pte(old_spte):
            mark_page_dirty_in_slot(self.mmu, fault.slot, fault.gfn)
        return True


def fast_words(cfg: SpteConfig, last: tuple[int, int, int, RetPf] | None) -> str:
    """What the last fast path did, for the screen: '' unless FIXED or SPURIOUS."""
    if last is None or last[3] is RET_PF_INVALID:
        return ""
    _gfn, old, new, ret = last
    if ret is RET_PF_SPURIOUS:
        return f"fast_page_fault: spurious, spte {old:#x} already allows it"
    how = []
    if is_access_track_spte(cfg, old):
        how.append("access tracking undone")
    if new & PT_WRITABLE_MASK and not old & PT_WRITABLE_MASK:
        how.append("W set, gfn marked dirty")
    return f"fast_page_fault, no mmu_lock: spte {old:#x} → {new:#x} ({', '.join(how)})"


def mark_page_dirty_in_slot(mmu: FastPfMmu, slot: MemorySlot | None, gfn: int) -> None:
    """`mark_page_dirty_in_slot()` (virt/kvm/kvm_main.c): the gfn's bit in the slot's
    dirty bitmap, when the slot logs dirty pages (`kvm_slot_dirty_track_enabled`)."""
    if slot is not None and slot.dirty_logging and mmu.mark_page_dirty is not None:
        mmu.mark_page_dirty(slot, gfn)
