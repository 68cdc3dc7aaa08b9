"""`fast_page_fault()` (engine/mmu/fast_pf.py, 6.18 mmu.c) in the two MMUs that call it
(the direct MMU, tdp_mmu=N, and the TDP MMU), and not in the shadow MMU: dirty logging's
write protection fixed without the slow path, access-tracked sptes restored, spurious
faults, lost cmpxchgs retried, reserved-bit faults never fast, huge pages of a logged
slot left to the slow path; aging (aging.py), the dirty bitmaps, and a property run."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine import KVM_MEM_LOG_DIRTY_PAGES, Vm
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import preset
from mmuscope.engine.mmu.aging import kvm_age_gfn
from mmuscope.engine.mmu.direct.mmu import DirectMmu
from mmuscope.engine.mmu.direct.session import MmuSession
from mmuscope.engine.mmu.dirty_log import DirtyLogging
from mmuscope.engine.mmu.fast_pf import FAST_PF_MAX_RETRIES, fault_error_code
from mmuscope.engine.mmu.mapping_level import KvmPageFault
from mmuscope.engine.mmu.mmu_pages import KvmMmuPage
from mmuscope.engine.mmu.params import TdpMmuParams
from mmuscope.engine.mmu.spte import (
    PT_PRESENT_MASK,
    PT_WRITABLE_MASK,
    SHADOW_NONPRESENT_VALUE,
    SPTE_CONFIGS,
    RetPf,
    is_access_track_spte,
    is_shadow_present_pte,
    restore_acc_track_spte,
)
from mmuscope.engine.mmu.tdp.mmu import TdpMmu
from mmuscope.engine.mmu.tdp.session import TdpSession
from mmuscope.engine.mmu.vcpu.vmx import PFERR_PRESENT_MASK, PFERR_RSVD_MASK, PFERR_WRITE_MASK

MIB = 1 << 20
UA = 0x7F00_0000_0000
SLOW_PATH = {"kvm_mmu_spte_requested", "kvm_mmu_set_spte", "kvm_tdp_mmu_spte_changed"}
Mmu = DirectMmu | TdpMmu


def make(kind: str, config: str = "ept", mib: int = 8) -> tuple[Mmu, list[Event]]:
    """A VM with one RAM slot (id 0 at gpa 0) and an MMU of `kind`: `direct` or `tdp`,
    PML off (starting dirty logging write-protects 4K leaves, as on AMD)."""
    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, mib * MIB, UA)
    events: list[Event] = []
    mmu: Mmu
    if kind == "direct":
        params = TdpMmuParams(tdp_mmu=False, enable_pml=False)
        mmu = DirectMmu(
            vm, SPTE_CONFIGS[config], huge_pages=False, emit=events.append, params=params
        )
    else:
        params = TdpMmuParams(enable_pml=False, host_level=1)
        mmu = TdpMmu(vm, SPTE_CONFIGS[config], params, emit=events.append)
    mmu.root(0)
    return mmu, events


def make_logged(kind: str) -> tuple[Mmu, list[Event]]:
    """`make(kind)` with gfn 3 mapped, then write-protected by dirty logging: the next
    write to it is the fast path's."""
    mmu, events = make(kind)
    DirtyLogging(mmu)
    mmu.page_fault(0, 0x3000)
    set_logging(mmu.vm, True)
    return mmu, events


def set_logging(vm: Vm, on: bool) -> None:
    slot = vm.slot(0, 0)
    assert slot is not None
    flags = KVM_MEM_LOG_DIRTY_PAGES if on else 0
    vm.set_user_memory_region(0, flags, 0, slot.npages << 12, slot.userspace_addr)


def leaf(mmu: Mmu, gfn: int, vcpu: int = 0) -> tuple[KvmMmuPage, int]:
    if isinstance(mmu, TdpMmu):
        return mmu.kvm_tdp_mmu_fast_pf_get_last_sptep(vcpu, gfn)
    return mmu._fast_pf_last_sptep(vcpu, gfn)


def spte_of(mmu: Mmu, gfn: int) -> int:
    sp, index = leaf(mmu, gfn)
    return sp.spt[index]


def fast_events(events: list[Event]) -> list[Event]:
    return [e for e in events if e.name == "fast_page_fault"]


@pytest.mark.parametrize("kind", ["direct", "tdp"])
def test_a_write_to_a_page_dirty_logging_protected_is_fixed_without_the_slow_path(
    kind: str,
) -> None:
    mmu, events = make(kind)
    dirty = DirtyLogging(mmu)
    gpa = 0x5000
    assert mmu.page_fault(0, gpa, write=False) is RetPf.FIXED  # a writable spte
    made = spte_of(mmu, 5)
    set_logging(mmu.vm, True)
    protected = spte_of(mmu, 5)
    assert protected == made & ~PT_WRITABLE_MASK  # still MMU-writable
    assert dirty.dirty[(0, 0)] == set()
    stat = dict(mmu.stat)
    events.clear()
    assert mmu.page_fault(0, gpa, write=True) is RetPf.FIXED
    assert [e.name for e in events] == ["fast_page_fault"]  # no mmu_lock path at all
    fields = events[0].fields
    assert fields["old_spte"] == protected and fields["new_spte"] == protected | PT_WRITABLE_MASK
    assert fields["fixed"] and not fields["spurious"] and fields["cr2_or_gpa"] == gpa
    assert fields["error_code"] & (PFERR_PRESENT_MASK | PFERR_WRITE_MASK) == 3
    assert spte_of(mmu, 5) == made  # W back; D as it was (the CPU sets it)
    assert mmu.stat["pf_fast"] == stat["pf_fast"] + 1
    assert mmu.stat["pf_fixed"] == stat["pf_fixed"] + 1
    assert dirty.dirty[(0, 0)] == {5}  # mark_page_dirty_in_slot()
    assert dirty.get_dirty_log(0) == [5]
    assert spte_of(mmu, 5) == protected  # KVM_GET_DIRTY_LOG protects it again
    mmu.audit()


@pytest.mark.parametrize("kind", ["direct", "tdp"])
def test_an_aged_spte_without_ad_bits_is_access_tracked_and_restored(kind: str) -> None:
    mmu, events = make(kind, "ept-no-ad")
    assert mmu.page_fault(0, 0x7000, write=True) is RetPf.FIXED
    made = spte_of(mmu, 7)
    slot = mmu.vm.slot(0, 0)
    assert slot is not None
    assert kvm_age_gfn(mmu, slot, 0, slot.npages) == 1
    tracked = spte_of(mmu, 7)
    assert is_access_track_spte(mmu.cfg, tracked) and is_shadow_present_pte(tracked)
    assert not tracked & 0x7  # RWX cleared, R and X saved at 54/56
    assert kvm_age_gfn(mmu, slot, 0, slot.npages) == 0  # already old
    events.clear()
    assert mmu.page_fault(0, 0x7000, write=False) is RetPf.FIXED
    assert [e.name for e in events] == ["fast_page_fault"]
    restored = spte_of(mmu, 7)
    # restore_acc_track_spte() | shadow_accessed_mask (6.13+): A (bit 8) is set again
    accessed = restore_acc_track_spte(mmu.cfg, tracked) | mmu.cfg.shadow_accessed_mask
    assert restored == accessed == made & ~PT_WRITABLE_MASK
    assert restored & PT_PRESENT_MASK and mmu.fast_pf.restored == 1
    # W is not saved: the next write is fixed by the fast path too
    assert mmu.page_fault(0, 0x7000, write=True) is RetPf.FIXED
    assert spte_of(mmu, 7) == made and mmu.stat["pf_fast"] == 2
    mmu.audit()


@pytest.mark.parametrize("kind", ["direct", "tdp"])
def test_a_fault_on_a_spte_that_allows_the_access_is_spurious(kind: str) -> None:
    mmu, events = make(kind)
    mmu.page_fault(0, 0x9000, write=True)
    mmu.root(1)
    events.clear()
    # vCPU 1 faulted on the write before vCPU 0's fix reached its TLB: already writable
    assert mmu.page_fault(1, 0x9000, write=True) is RetPf.SPURIOUS
    (event,) = events
    assert event.fields["spurious"] and event.fields["old_spte"] == event.fields["new_spte"]
    assert mmu.stat["pf_spurious"] == 1 and mmu.stat["pf_fast"] == 1


@pytest.mark.parametrize("kind", ["direct", "tdp"])
def test_a_lost_cmpxchg_goes_round_again(kind: str) -> None:
    mmu, events = make_logged(kind)
    calls = []

    def other_cpu_fixes_it(sp: KvmMmuPage, index: int) -> None:
        calls.append(index)
        if len(calls) == 1:
            sp.spt[index] |= PT_WRITABLE_MASK  # another vCPU's fast path won

    mmu.fast_pf.race = other_cpu_fixes_it
    events.clear()
    assert mmu.page_fault(0, 0x3000, write=True) is RetPf.SPURIOUS  # the retry saw it
    assert len(calls) == 1 and mmu.fast_pf.lost_cmpxchg == 1
    assert [e.name for e in events] == ["fast_page_fault"]


@pytest.mark.parametrize("kind", ["direct", "tdp"])
def test_past_four_retries_the_fast_path_gives_up_to_the_slow_path(kind: str) -> None:
    mmu, events = make_logged(kind)
    calls = []

    def always_changes_it(sp: KvmMmuPage, index: int) -> None:
        calls.append(index)
        sp.spt[index] ^= 1 << 60  # a bit no path looks at, toggled each time

    mmu.fast_pf.race = always_changes_it
    events.clear()
    assert mmu.page_fault(0, 0x3000, write=True) is RetPf.FIXED
    assert len(calls) == FAST_PF_MAX_RETRIES + 1 and mmu.fast_pf.warned
    names = [e.name for e in events]
    assert names[0] == "fast_page_fault" and not events[0].fields["fixed"]
    assert "kvm_mmu_set_spte" in names  # the slow path made it writable
    assert spte_of(mmu, 3) & PT_WRITABLE_MASK and mmu.stat["pf_fast"] == 0


@pytest.mark.parametrize("kind", ["direct", "tdp"])
def test_reserved_bit_faults_and_not_present_faults_with_ad_bits_are_never_fast(
    kind: str,
) -> None:
    mmu, events = make(kind)
    mmu.vm.set_user_memory_region(1, 0, 64 * MIB, 1 * MIB, UA + 64 * MIB)
    mmu.vm.set_user_memory_region(1, 0, 0, 0, 0)  # gone: an MMIO gfn
    assert mmu.page_fault(0, 64 * MIB, write=True) is RetPf.EMULATE  # mark_mmio_spte
    mmu.vm.set_user_memory_region(2, 0, 80 * MIB, 1 * MIB, UA + 80 * MIB)  # new gen
    events.clear()
    assert mmu.page_fault(0, 64 * MIB, write=True) is RetPf.EMULATE  # stale: rebuilt
    assert fast_events(events) == [] and mmu.stat["pf_fast"] == 0
    spte = spte_of(mmu, (64 * MIB) >> 12)
    assert fault_error_code(mmu.cfg, spte, True) & PFERR_RSVD_MASK
    fault = KvmPageFault((64 * MIB) >> 12, True, False, None, error_code=PFERR_RSVD_MASK | 3)
    assert mmu.fast_pf.page_fault(0, fault) is RetPf.INVALID
    assert mmu.page_fault(0, 0x20000, write=True) is RetPf.FIXED  # a first touch
    assert fast_events(events) == []


@pytest.mark.parametrize("kind", ["direct", "tdp"])
def test_without_ad_bits_every_not_present_fault_tries_the_fast_path(kind: str) -> None:
    mmu, events = make(kind, "ept-no-ad")
    assert mmu.page_fault(0, 0x4000) is RetPf.FIXED
    first = fast_events(events)
    assert len(first) == 1 and not first[0].fields["fixed"] and not first[0].fields["spurious"]
    # the walk's last spte: SHADOW_NONPRESENT_VALUE (6.10+) in either MMU's tables
    # (the page cache's init_value, tdp_mmu_alloc_sp() included)
    assert first[0].fields["old_spte"] == SHADOW_NONPRESENT_VALUE
    assert SLOW_PATH & {e.name for e in events}


def test_a_huge_spte_of_a_logged_slot_is_left_to_the_slow_path() -> None:
    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, 8 * MIB, UA)
    events: list[Event] = []
    mmu = DirectMmu(vm, emit=events.append)
    DirtyLogging(mmu)
    mmu.page_fault(0, 0x20_1000)
    huge_page, index = mmu._fast_pf_last_sptep(0, 0x201)
    assert huge_page.role.level == 2  # a 2M leaf
    set_logging(vm, True)  # write-protects every level (no eager split here)
    assert not huge_page.spt[index] & PT_WRITABLE_MASK
    events.clear()
    assert mmu.page_fault(0, 0x20_1000, write=True) is RetPf.FIXED
    fast = fast_events(events)
    assert len(fast) == 1 and not fast[0].fields["fixed"]  # only one gfn would be dirty
    sp, i = mmu._fast_pf_last_sptep(0, 0x201)
    assert sp.role.level == 1 and sp.spt[i] & PT_WRITABLE_MASK  # mapped 4K instead
    mmu.audit()


def test_the_2011_direct_mmu_has_no_fast_path() -> None:
    session = MmuSession(preset("pc-2g"), workload="kernbench", spte_config="2011-no-mmio-cache")
    seen = []
    session.subscribe(lambda e: seen.append(e.name))
    session.run(200)
    assert session.mmu.fast_pf is None and "fast_page_fault" not in seen


def test_the_shadow_mmu_never_takes_the_fast_path_as_the_kernel_under_kvm_pvm() -> None:
    """FNAME(page_fault) does not call fast_page_fault() (6.18 paging_tmpl.h): the model
    of `mmuscope kvm dirty`, dirty logging and all, fixes every write under mmu_lock."""
    from mmuscope.engine.kvm.compare import STAT_ROWS
    from mmuscope.engine.kvm.model import model_stats, run_on_model
    from mmuscope.engine.kvm.program import build_program

    program = build_program("dirty", pages=8)
    run = run_on_model(program, SPTE_CONFIGS["shadow"])
    assert not hasattr(run.mmu, "fast_pf") and run.events["fast_page_fault"] == 0
    assert "pf_fast" in STAT_ROWS and model_stats(run)["pf_fast"] == 0
    assert run.events["kvm_mmu_set_spte"] > 8  # rewrites after each KVM_GET_DIRTY_LOG


# -- the property ------------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("access"), st.integers(0, 1), st.integers(0, 2047), st.booleans()),
        st.tuples(st.sampled_from(["log", "get", "age", "race"])),
    ),
    max_size=40,
)


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(["direct", "tdp"]),
    config=st.sampled_from(["ept", "ept-no-ad", "shadow"]),
    ops=OPS,
)
def test_property_a_writable_spte_of_a_logged_slot_is_in_the_dirty_bitmap(
    kind: str, config: str, ops: list[tuple[object, ...]]
) -> None:
    """After each step: audit(); the vCPU's access no longer faults; and every writable
    leaf of the logged slot has its gfn in the bitmap (else KVM_GET_DIRTY_LOG would miss
    a write).  The reference model: the pages written since the last report, which the
    bitmap must hold and the report must return.  `race` arms another vCPU fixing the
    spte (and marking it dirty) inside the next cmpxchg window."""
    mmu, _ = make(kind, config)
    dirty = DirtyLogging(mmu)
    mmu.root(1)
    logging = False
    written: set[int] = set()
    touched: set[int] = set()
    for op in ops:
        if op[0] == "access":
            _, vcpu, gfn, write = op
            assert isinstance(vcpu, int) and isinstance(gfn, int)
            assert mmu.page_fault(vcpu, gfn << 12, write=bool(write)) in (
                RetPf.FIXED,
                RetPf.SPURIOUS,
            )
            sp, index = leaf(mmu, gfn, vcpu)
            spte = sp.spt[index]
            assert spte & PT_PRESENT_MASK and (not write or spte & PT_WRITABLE_MASK)
            touched.add(gfn)
            if write and logging:
                written.add(gfn)
        elif op[0] == "log":
            logging = not logging
            set_logging(mmu.vm, logging)
            written.clear()
        elif op[0] == "get":
            assert written <= set(dirty.get_dirty_log(0))
            written.clear()
        elif op[0] == "age":
            slot = mmu.vm.slot(0, 0)
            assert slot is not None
            kvm_age_gfn(mmu, slot, 0, slot.npages)
        else:
            mmu.fast_pf.race = _one_other_vcpu(dirty)
        mmu.audit()
        if logging:
            bits = dirty.dirty[(0, 0)]
            assert written <= bits
            for gfn in touched:
                sp, index = leaf(mmu, gfn)
                spte = sp.spt[index]
                if is_shadow_present_pte(spte) and spte & PT_WRITABLE_MASK:
                    assert gfn in bits, (gfn, hex(spte))


def _one_other_vcpu(dirty: DirtyLogging) -> Callable[[KvmMmuPage, int], None]:
    fired: list[bool] = []

    def race(sp: KvmMmuPage, index: int) -> None:
        spte = sp.spt[index]
        if fired or not spte & dirty.mmu.cfg.shadow_mmu_writable_mask:
            return
        fired.append(True)
        if is_access_track_spte(dirty.mmu.cfg, spte):
            cfg = dirty.mmu.cfg
            spte = restore_acc_track_spte(cfg, spte) | cfg.shadow_accessed_mask
        sp.spt[index] = spte | PT_WRITABLE_MASK
        slot = dirty.mmu.vm.slot(0, 0)
        if slot is not None and slot.dirty_logging:
            dirty.mark_page_dirty(slot, sp.gfn + index)

    return race


def test_sessions_toggle_logging_get_the_log_and_age_memory() -> None:
    """Both MMUs' sessions (the same accesses for a seed) report the same dirty pages,
    by write protection (PML off: the direct MMU on EPT with enable_pml=0, the TDP MMU on
    NPT)."""
    seen = []
    no_pml = TdpMmuParams(tdp_mmu=False, enable_pml=False)
    for session in (
        MmuSession(preset("pc-2g"), workload="kernbench", seed=3, params=no_pml),
        TdpSession(preset("pc-2g"), workload="kernbench", seed=3, spte_config="shadow"),
    ):
        session.run(100)
        assert session.toggle_dirty_logging() == "dirty logging on"
        session.set_workload("migrate")
        updates = [step.update for step in (session.step() for _ in range(500)) if step.update]
        assert len(updates) == 2 and all(u.startswith("KVM_GET_DIRTY_LOG: ") for u in updates)
        seen.append(updates)
        assert session.mmu.stat["pf_fast"] > 50 and session.dirty_pages > 0
        assert session.results.get("FIXED", 0) > session.mmu.stat["pf_fast"]
        reported = session.get_dirty_log()
        logged = session.logged_slot()
        assert len(reported) > 0 and session.dirty_log.dirty[(0, logged.id)] == set()
        assert session.age_memory() > 0
        assert session.toggle_dirty_logging() == "dirty logging off"
        session.audit()
    assert seen[0] == seen[1]


@pytest.mark.parametrize("config", ["shadow", "ept-no-ad"])
def test_a_printed_run_with_fast_faults_replays_to_the_same_sptes(config: str) -> None:
    """`mmuscope simulate`'s text of a TDP MMU run (NPT dirty logging; EPT without A/D
    bits, aged) read back by the replay model: every spte it shows is the live one, the
    fast path's among them (its new_spte applied where no other event says so)."""
    from mmuscope.tui.simulate_cli import LinePrinter

    from tests.tdp_replay import assert_shown_sptes_are_live, replay_audited

    session = TdpSession(preset("pc-2g"), workload="migrate", seed=2, spte_config=config)
    lines: list[str] = []
    LinePrinter().listen(session, lines.append)  # type: ignore[arg-type]
    session.run(300)
    session.age_memory()
    session.run(300)
    model = replay_audited("cpus=2\n" + "\n".join(lines) + "\n")
    fast = sum(1 for line in lines if "fast_page_fault:" in line and "fixed 1" in line)
    assert fast > 20 and model.fast_sptes > 20
    assert_shown_sptes_are_live(model, session.mmu.pages.pages())


@settings(max_examples=6, deadline=None)
@given(
    kind=st.sampled_from(["direct", "tdp"]),
    seed=st.integers(1, 1000),
    passes=st.lists(st.integers(20, 250), min_size=1, max_size=4),
)
def test_property_pml_and_write_protection_log_the_same_pages(
    kind: str, seed: int, passes: list[int]
) -> None:
    """The same guest (seed) with PML on and off: after each stretch of accesses and the
    KVM_GET_DIRTY_LOG that ends it, the bitmaps agree (write protection, the reference,
    marks a page at its fast fix; PML at the CPU's first write after its D bit was
    cleared), and every write PML logged is one fault write protection took."""
    runs = []
    for pml in (True, False):
        params = TdpMmuParams(tdp_mmu=kind == "tdp", enable_pml=pml)
        cls = TdpSession if kind == "tdp" else MmuSession
        session = cls(preset("pc-2g"), workload="migrate", seed=seed, params=params)
        reports = []
        for n in passes:
            session.run(n)
            reports.append(session.get_dirty_log())
        session.audit()
        runs.append((session, reports))
    (pml_on, logged), (pml_off, protected) = runs
    assert logged == protected
    assert pml_on.mmu.stat["pf_fast"] == 0
    assert pml_on.dirty_log.pml_logged == pml_off.mmu.stat["pf_fast"]
