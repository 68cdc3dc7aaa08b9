"""The shadow-MMU screen's fast-path keys through Pilot (F2): `L` dirty logging, `G`
KVM_GET_DIRTY_LOG, `A` aging; the fault bar, the counters and the event log show
`fast_page_fault` fixing the faults they cause; shadow paging refuses them."""

from __future__ import annotations

from pathlib import Path

from mmuscope.engine.mmu.direct.session import MmuSession
from mmuscope.engine.mmu.shadow.session import ShadowSession
from mmuscope.engine.mmu.spte import SPTE_CONFIGS
from mmuscope.engine.mmu.tdp.session import TdpSession
from mmuscope.tui.screens.shadow_mmu import ShadowMmuScreen
from mmuscope.tui.widgets.lookup_bar import LookupBar
from mmuscope.tui.widgets.mmu_panels import MmuCounters

from tests.tui_pilot import SIZE, build, shadow_mmu

RUNS = 40  # batches of 50 accesses a test may run before the fast path must have fired


def notes(app: object) -> str:
    return " ".join(n.message for n in app._notifications)  # type: ignore[attr-defined]


async def run_to_fast_fix(mmu: ShadowMmuScreen, words: str) -> None:
    for _ in range(RUNS):
        mmu.action_run(50)
        if mmu.last is not None and words in getattr(mmu.last, "fast", ""):
            return
    raise AssertionError(f"no exit fixed by fast_page_fault ({words!r}) in {RUNS * 50}")


async def test_l_and_g_show_dirty_logging_writes_fixed_without_mmu_lock(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2", "p")  # EPT with direct pages (tdp_mmu=N)
        mmu = shadow_mmu(app)
        assert isinstance(mmu.session, MmuSession)
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
        assert mmu.events_panel.counters.totals["fast_page_fault"] >= 1
        await pilot.press("G")
        assert "KVM_GET_DIRTY_LOG slot" in notes(app) and "protected again" in notes(app)


async def test_a_ages_memory_and_the_fast_path_restores_access_tracked_sptes(
    tmp_path: Path,
) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
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
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2", "p", "p")  # shadow paging (EPT off)
        mmu = shadow_mmu(app)
        assert isinstance(mmu.session, ShadowSession)
        await pilot.press("L", "A")
        assert "shadow paging has no fast_page_fault" in notes(app)
        assert "never (FNAME(page_fault))" in str(mmu.query_one(MmuCounters).content)
