"""Huge pages on the shadow-MMU screen in shadow paging: `H` gives the guest kernel's 2M
text and direct map (guest PDEs with PS set), `B` the host's backing and `X`
nx_huge_pages; a fetch maps a 2M spte where guest and host allow, the counters say why
not otherwise, and nx_lpage_splits counts the splits."""

from __future__ import annotations

from pathlib import Path

from mmuscope.engine.mmu.shadow.kernel import KERNEL_TEXT_GVA
from mmuscope.engine.mmu.shadow.session import ShadowSession, ShadowStep
from mmuscope.engine.mmu.spte import PT_PAGE_SIZE_MASK
from mmuscope.tui.screens.shadow_mmu import ShadowMmuScreen
from mmuscope.tui.widgets.mmu_panels import MmuCounters
from textual.pilot import Pilot

from tests.tui_pilot import build, shadow_mmu

WIDE = (150, 44)  # the counters keep a long `level (why)` on one row


def fetch_fault(step: object) -> bool:
    return isinstance(step, ShadowStep) and step.exited and step.access.fetch


def direct_map_fault(step: object) -> bool:
    access = step.access if isinstance(step, ShadowStep) else None
    return access is not None and step.exited and not access.user and not access.fetch  # type: ignore[union-attr]


async def counters_after(pilot: Pilot[None], mmu: ShadowMmuScreen, wanted: object) -> str:
    mmu._run_until(wanted)  # type: ignore[arg-type]
    await pilot.pause()
    assert mmu.last is not None and wanted(mmu.last)  # type: ignore[operator]
    return str(mmu.query_one(MmuCounters).content)


def session_of(mmu: ShadowMmuScreen) -> ShadowSession:
    assert isinstance(mmu.session, ShadowSession)
    return mmu.session


async def test_h_b_x_in_shadow_paging_map_2m_sptes_and_split_them(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("f2")
        mmu = shadow_mmu(app)
        await pilot.press("p", "p")  # shadow paging: 4K guest pages, no kernel accesses
        assert session_of(mmu).kernel is None
        await pilot.press("H")  # the guest kernel's 2M text and direct map
        session = session_of(mmu)
        assert session.kernel is not None and session.steps == 0
        counters = await counters_after(pilot, mmu, fetch_fault)
        assert "nx_huge_pages=off · host 2M" in counters
        assert "2M: slot and host allow" in counters
        access = mmu.last.access  # type: ignore[union-attr]
        spte = session.leaf_spte(access.vcpu, access.gva)
        assert spte & PT_PAGE_SIZE_MASK  # the CPU's walk ends at the 2M leaf: no exit now
        assert not session.needs_exit(access)
        text = session.mmu.why_level(access.vcpu, access.cr3, KERNEL_TEXT_GVA, fetch=True)
        assert text.startswith("2M")
        counters = await counters_after(pilot, mmu, direct_map_fault)
        assert "4K: guest page table in the 2M" in counters  # account_shadowed()
        await pilot.press("B", "B")  # hugetlbfs 1G, then 4K: host_pfn_mapping_level
        assert session_of(mmu).mmu.params.host_level == 1
        counters = await counters_after(pilot, mmu, fetch_fault)
        assert "4K: host 4K pages" in counters and "host 4K" in counters
        await pilot.press("B", "X")  # THP 2M again, nx_huge_pages on
        session = session_of(mmu)
        assert session.mmu.nx and session.kernel is not None
        counters = await counters_after(pilot, mmu, fetch_fault)
        assert "4K: NX huge page (fetch, req 2M)" in counters
        splits = session.mmu.pages.stat["nx_lpage_splits"]
        assert splits >= 1 and f"nx_lpage_splits {splits}" in " ".join(counters.split())
        session.audit()
        await pilot.press("H")  # back to 4K guest pages: the default guest
        assert session_of(mmu).kernel is None
