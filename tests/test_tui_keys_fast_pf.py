"""The shadow-MMU screen's fast-path keys through Pilot (F2): `L` dirty logging, `G`
KVM_GET_DIRTY_LOG, `A` aging; the fault bar, the counters and the event log show
`fast_page_fault` fixing the faults they cause; shadow paging refuses them."""

from __future__ import annotations

from pathlib import Path

from mmuscope.engine.mmu.direct.session import MmuSession
from mmuscope.engine.mmu.shadow.session import ShadowSession
from mmuscope.engine.mmu.spte import SPTE_CONFIGS
from mmuscope.engine.mmu.tdp.session import TdpSession
from mmuscope.tui.app import MmuscopeApp
from mmuscope.tui.screens.shadow_mmu import ShadowMmuScreen
from mmuscope.tui.widgets.lookup_bar import LookupBar
from mmuscope.tui.widgets.mmu_panels import MmuCounters

from tests.tui_pilot import SIZE, build, shadow_mmu, toasts

RUNS = 40  # batches of 50 accesses a test may run before the fast path must have fired


def notes(app: MmuscopeApp) -> str:
    """The notifications on screen, their titles and messages."""
    return " ".join(toasts(app))


async def run_to_fast_fix(mmu: ShadowMmuScreen, words: str) -> None:
    for _ in range(RUNS):
        mmu.action_run(50)
        if mmu.last is not None and words in getattr(mmu.last, "fast", ""):
            return
    raise AssertionError(f"no exit fixed by fast_page_fault ({words!r}) in {RUNS * 50}")


async def test_l_and_g_show_dirty_logging_writes_fixed_without_mmu_lock(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("f2", "p", "M")  # EPT with direct pages (tdp_mmu=N), PML off
        mmu = shadow_mmu(app)
        assert isinstance(mmu.session, MmuSession) and not mmu.session.dirty_log.pml
        assert "kvm_intel.enable_pml=N" in notes(app)
        mmu.action_set_workload("migrate")  # a working set, KVM_GET_DIRTY_LOG passes
        mmu.action_run(150)  # dirty logging on at the first access
        await pilot.press("L")  # off again
        assert "dirty logging off" in notes(app)
        await pilot.press("L")  # on: every spte of the slot write-protected
        assert "takes fast_page_fault" in notes(app)
        await run_to_fast_fix(mmu, "W set, gfn marked dirty")
        await pilot.pause()
        bar = str(mmu.query_one(LookupBar).content)
        assert "RET_PF_FIXED · fast_page_fault, no mmu_lock: spte" in bar
        counters = str(mmu.query_one(MmuCounters).content)
        assert "dirty logging" in counters and "pf_fast" in counters
        assert "PML off: write protection" in counters
        assert mmu.events_panel.counters.totals["fast_page_fault"] >= 1
        await pilot.press("G")
        assert "KVM_GET_DIRTY_LOG slot" in notes(app) and "write-protected again" in notes(app)


async def test_with_pml_dirty_logging_clears_d_bits_and_takes_no_fault(tmp_path: Path) -> None:
    """The default (kvm_intel.enable_pml=Y, EPT with A/D bits), on both EPT MMUs:
    `kvm_mmu_slot_leaf_clear_dirty()` at L, the CPU logs the writes, KVM_GET_DIRTY_LOG
    clears D again (`kvm_mmu_clear_dirty_pt_masked()`): no fast_page_fault at all."""
    app = build(tmp_path)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("f2")
        mmu = shadow_mmu(app)
        for paging in (0, 1):  # the TDP MMU, direct pages
            mmu.action_set_paging(paging)
            mmu.action_set_workload("migrate")  # logging on, KVM_GET_DIRTY_LOG every 200
            mmu.action_run(600)
            await pilot.pause()
            counters = str(mmu.query_one(MmuCounters).content)
            assert "PML on: D bits cleared" in counters
            session = mmu.session
            assert isinstance(session, (MmuSession, TdpSession))
            assert session.dirty_pages and session.dirty_log.pml_logged
            assert not session.mmu.stat["pf_fast"]
            await pilot.press("G")
            assert "D bits cleared again" in notes(app)
            await pilot.press("L", "L")  # off, and on again
            assert "PML: D bits cleared" in notes(app)


async def test_a_ages_memory_and_the_fast_path_restores_access_tracked_sptes(
    tmp_path: Path,
) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("f2")
        mmu = shadow_mmu(app)
        mmu.action_set_paging(5)  # EPT without A/D bits, the TDP MMU
        session = mmu.session
        assert isinstance(session, TdpSession) and session.mmu.cfg == SPTE_CONFIGS["ept-no-ad"]
        mmu.action_run(300)
        await pilot.press("A")
        assert "now access-tracked" in notes(app)
        await run_to_fast_fix(mmu, "access tracking undone")
        counters = str(mmu.query_one(MmuCounters).content)
        assert "restored" in counters and session.mmu.fast_pf.restored >= 1


async def test_shadow_paging_has_no_fast_path_to_show(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("f2", "p", "p")  # shadow paging (EPT off)
        mmu = shadow_mmu(app)
        assert isinstance(mmu.session, ShadowSession)
        await pilot.press("L", "A")
        assert "shadow paging has no fast_page_fault" in notes(app)
        assert "never (FNAME(page_fault))" in str(mmu.query_one(MmuCounters).content)
