"""The shadow-MMU screen's keys through Pilot (F2): faults revealed level by level, VM
exits, workloads, fast and slow zaps with their lock holds, and switching screens."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from mmuscope.engine.mmu.direct.session import MMU_WORKLOADS, MmuSession
from mmuscope.engine.mmu.guest.ept import EptAccess
from mmuscope.engine.mmu.mapping_level import MappingLevels
from mmuscope.engine.mmu.mmu_pages import BATCH_ZAP_PAGES
from mmuscope.engine.mmu.shadow.session import SHADOW_WORKLOADS, ShadowSession
from mmuscope.engine.mmu.spte import FROZEN_SPTE, SPTE_CONFIGS
from mmuscope.engine.mmu.tdp.session import TDP_WORKLOADS, TdpSession
from mmuscope.tui.screens.memslots import MemslotsScreen
from mmuscope.tui.screens.shadow_mmu import ShadowMmuScreen
from mmuscope.tui.widgets.lookup_bar import LookupBar
from mmuscope.tui.widgets.mmu_panels import GuestPanel, MmuCounters, PageLevels
from mmuscope.tui.widgets.spt_grid import SptGrid
from textual.pilot import Pilot

from tests.tui_pilot import SIZE, build, memslots, press_export, shadow_mmu, until


async def test_f2_opens_the_screen_and_f1_returns_with_state_kept(tmp_path: Path) -> None:
    app = build(tmp_path, playing=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        slots = memslots(app)
        await pilot.press("f2")
        await pilot.pause()
        mmu = shadow_mmu(app)
        assert not slots.pacer.playing, "the hidden memslots screen must stop playing"
        await pilot.press("n")
        await pilot.press("f1")
        await pilot.pause()
        assert app.screen is slots
        await pilot.press("f2")
        await pilot.pause()
        assert app.screen is mmu and mmu.session.exits == 1


async def test_n_runs_to_the_next_exit_and_s_reveals_levels(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        mmu = shadow_mmu(app)
        await pilot.press("n")
        assert mmu.session.exits == 1 and mmu.last is not None and mmu.last.exited
        assert mmu.shown == len(mmu.path) >= 2
        await pilot.press("s")  # a new exit, first level only
        assert mmu.session.exits == 2 and mmu.shown == 1
        await pilot.press("s")
        assert mmu.shown == 2
        assert "RET_PF_" in str(mmu.query_one(LookupBar).content)


async def test_space_plays_and_speed_keys(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        mmu = shadow_mmu(app)
        speed = mmu.pacer.speed
        await pilot.press("plus")
        assert mmu.pacer.speed > speed
        await pilot.press("minus", "minus")
        assert mmu.pacer.speed < speed
        await pilot.press("plus", "plus", "plus", "space")
        await until(pilot, lambda: mmu.session.steps > 0)
        assert mmu.pacer.playing and mmu.session.steps > 0
        await pilot.press("space")
        steps = mmu.session.steps
        await pilot.pause(0.2)
        assert not mmu.pacer.playing and mmu.session.steps == steps


async def test_w_cycles_the_workloads(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        mmu = shadow_mmu(app)
        seen = [mmu.session.workload]
        for _ in TDP_WORKLOADS:  # the TDP MMU's, today's default
            await pilot.press("w")
            seen.append(mmu.session.workload)
        assert set(seen) == set(TDP_WORKLOADS) and seen[0] == seen[-1]
        await pilot.press("p")  # EPT with direct pages (tdp_mmu=N)
        assert mmu.session.workloads == MMU_WORKLOADS
        assert mmu.session.workload in str(mmu.sub_title)


async def replay_ends(pilot: Pilot[None], mmu: ShadowMmuScreen) -> None:
    """Let frames pass until the zap replay is over (bounded: a loaded machine is slower)."""
    for _ in range(400):
        if not mmu.zap_replay:
            return
        await pilot.pause(0.05)
    raise AssertionError("the zap replay did not end")


async def next_exits(
    pilot: Pilot[None], mmu: ShadowMmuScreen, most: int, done: Callable[[], bool] = lambda: False
) -> None:
    """`n` up to `most` times, stopping once `done()`: the first through the key, the rest
    through its action (action_next_exit, which draws each exit's panels as it goes) with
    one frame at the end, since a frame per exit is what made these walks slow."""
    await pilot.press("n")
    for _ in range(most - 1):
        if done():
            break
        mmu.action_next_exit()
    await pilot.pause()


async def test_z_zaps_fast_in_batches_and_shift_z_in_one_hold(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2", "p", "H")  # the direct MMU (tdp_mmu=N), 4K only: 2013's batches
        mmu = shadow_mmu(app)
        assert isinstance(mmu.session, MmuSession)
        pages = mmu.session.mmu.pages
        await next_exits(pilot, mmu, 40)
        # three holds at least (bounded: a wrong model must not hang)
        await next_exits(pilot, mmu, 400, lambda: pages.n_used_mmu_pages > 2 * BATCH_ZAP_PAGES + 2)
        assert pages.n_used_mmu_pages > 2 * BATCH_ZAP_PAGES + 2, pages.n_used_mmu_pages
        used, gen = pages.n_used_mmu_pages, pages.mmu_valid_gen
        roots = len({root.seq for root in mmu.session.mmu.roots.values()})
        mmu.action_fast_zap()  # z's action, looked at before any frame (a loaded machine)
        # roots the vCPUs still run on stay accounted, and add nothing to a batch
        assert pages.mmu_valid_gen != gen and pages.n_used_mmu_pages == roots
        assert sum(pages.lock_holds) == used - roots
        assert max(pages.lock_holds) == BATCH_ZAP_PAGES
        await replay_ends(pilot, mmu)
        await next_exits(pilot, mmu, 40)
        used = pages.n_used_mmu_pages
        mmu.action_fast_zap()  # no await before the look: no frame can replay a hold yet
        levels, zapping_now = mmu._zap_levels()  # the zapped pages stay, dimmed, till their hold
        assert sum(len(level.pages) for level in levels) == used
        assert sum(level.obsolete for level in levels) == used
        assert len(zapping_now) == BATCH_ZAP_PAGES
        assert min(zapping_now) == min(sp.seq for level in levels for sp in level.pages)
        await replay_ends(pilot, mmu)
        for _ in range(10):
            await pilot.press("n")
        used = pages.n_used_mmu_pages - len(pages.invalid_roots)
        roots = len({root.seq for root in mmu.session.mmu.roots.values()})
        await pilot.press("Z")
        assert pages.lock_holds == [used - roots]


async def test_brackets_select_a_level_of_the_path(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        mmu = shadow_mmu(app)
        await pilot.press("n")
        deepest, _ = ShadowMmuScreen._selected(mmu)  # the screen's own, not Textual's
        await pilot.press("left_square_bracket")
        upper, _ = ShadowMmuScreen._selected(mmu)
        assert upper is not None and deepest is not None
        assert upper.role.level == deepest.role.level + 1
        await pilot.press("right_square_bracket")
        assert ShadowMmuScreen._selected(mmu)[0] is deepest


async def test_the_memslots_screen_is_untouched_by_the_mmu_screen(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.screen, MemslotsScreen)
        lookups = app.screen.lookups_done
        await pilot.press("f2", "n", "n", "f1")
        await pilot.pause()
        assert memslots(app).lookups_done == lookups


async def test_e_exports_the_shadow_pages(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        for _ in range(5):
            await pilot.press("n")
        await press_export(pilot)
    dots = list(tmp_path.glob("mmuscope-mmu-pc-4g-*.dot"))
    assert len(dots) == 1
    text = dots[0].read_text()
    assert text.startswith("digraph shadow_pages {") and "->" in text
    assert "fillcolor" in text  # the last fault's path
    if shutil.which("dot"):
        assert len(list(tmp_path.glob("mmuscope-mmu-pc-4g-*.pdf"))) == 1


async def test_p_switches_to_shadow_paging_with_guest_walks_and_the_vtlb(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        mmu = shadow_mmu(app)
        assert isinstance(mmu.session, TdpSession)
        assert "TDP MMU (today's default)" in str(mmu.sub_title)
        await pilot.press("p")
        assert isinstance(mmu.session, MmuSession) and "tdp_mmu=N" in str(mmu.sub_title)
        assert "EPT on" in str(mmu.query_one(GuestPanel).content)
        await pilot.press("p")
        session = mmu.session
        assert isinstance(session, ShadowSession) and session.mmu.vtlbs is not None
        assert "shadow paging" in str(mmu.sub_title)
        await pilot.press("n")
        assert mmu.last is not None and "cr3" in str(mmu.query_one(LookupBar).content)
        panel = str(mmu.query_one(GuestPanel).content)
        assert "PML4E" in panel and "vtlb vcpu" in panel
        assert session.last_walk and session.last_walk[0][0] == 4
        # the fault's level and why (the guest's own level first), NX splits
        counters = str(mmu.query_one(MmuCounters).content)
        assert "nx_lpage_splits" in counters and "nx_huge_pages=off" in counters
        assert "4K: guest leaf is 4K" in counters
        await pilot.press("V")  # the vtlb off: a new guest
        assert mmu.session is not session and mmu.session.mmu.vtlbs is None  # type: ignore[union-attr]
        assert mmu.session.steps == 0 and mmu.last is None
        await pilot.press("p")  # 2011: no MMIO sptes
        assert mmu.session.mmu.cfg == SPTE_CONFIGS["2011-shadow-no-mmio-cache"]
        await pilot.press("p")
        assert mmu.session.mmu.cfg == SPTE_CONFIGS["2011-no-mmio-cache"]
        assert isinstance(mmu.session, MmuSession)
        await pilot.press("p")  # EPT without A/D bits (kvm_intel.eptad=0): the TDP MMU
        assert mmu.session.mmu.cfg == SPTE_CONFIGS["ept-no-ad"]
        assert isinstance(mmu.session, TdpSession)
        await pilot.press("p")
        assert mmu.session.mmu.cfg == SPTE_CONFIGS["ept"]
        assert isinstance(mmu.session, TdpSession)


async def test_w_cycles_the_shadow_workloads_and_each_runs(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2", "p", "p")
        mmu = shadow_mmu(app)
        seen = []
        for _ in SHADOW_WORKLOADS:
            seen.append(mmu.session.workload)
            await pilot.press("n", "n", "n")
            assert mmu.last is not None and mmu.last.exited
            await pilot.press("w")
        assert seen == list(SHADOW_WORKLOADS) and mmu.session.workload == seen[0]
        mmu.session.audit()


async def test_the_roots_line_counts_pages_below_each_root(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2", "p", "p")
        mmu = shadow_mmu(app)
        for _ in range(6):
            await pilot.press("n")
        assert mmu.reach and all(r.per_level[0] == 1 for r in mmu.reach)
        assert "root [" in mmu.query_one(PageLevels).all_rows


async def test_a_slow_zap_stalls_the_guest_while_its_one_hold_replays(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2", "p", "H")  # tdp_mmu=N, 4K leaves: a hold of seconds
        mmu = shadow_mmu(app)
        mmu.action_run(300)
        await pilot.press("Z", "space")  # play: the vCPUs would run, but mmu_lock is held
        steps = mmu.session.steps
        assert mmu.zap_replay and "every vCPU waits" in mmu._zap_caption()
        for _ in range(6):  # frames while the hold replays (a wall-clock hold: bounded look)
            await pilot.pause(0.05)
            if not mmu.zap_replay:
                break
            assert "every vCPU waits" in mmu._zap_caption()
            assert mmu.session.steps == steps  # the guest does not run under the held lock
        await pilot.press("space")


async def test_z_under_the_tdp_mmu_invalidates_roots_and_frees_tables_through_rcu(
    tmp_path: Path,
) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        mmu = shadow_mmu(app)
        session = mmu.session
        assert isinstance(session, TdpSession)
        mmu.action_run(200)
        (root,) = session.mmu.pages.tdp_mmu_roots
        levels = mmu.query_one(PageLevels).all_rows
        assert "tdp_mmu_root_count 3 (valid; vCPUs 0,1)" in levels and "count 3 vcpu 0,1" in levels
        mmu.action_fast_zap()  # no await before the look: no frame can replay a hold yet
        assert root.role.invalid and mmu.zap_replay and "every root invalid" in mmu._zap_caption()
        levels = mmu.query_one(PageLevels).all_rows
        assert "tdp_mmu_root_count 2 (invalid; vCPUs 0,1)" in levels
        assert "RCU pending:" in levels and "sptes frozen" in levels
        grid = str(mmu.query_one(SptGrid).content)
        assert (
            "RCU pending" in str(mmu.query_one(SptGrid).border_title) and grid.count("✱") == 512 + 1
        )  # and the legend
        assert all(
            s == FROZEN_SPTE for sp in session.mmu.pages.rcu_pending.values() for s in sp.spt
        )
        await pilot.press("n", "n")  # both vCPUs load a new root; the old one is put for good
        assert root not in session.mmu.pages.tdp_mmu_roots
        await pilot.press("i")  # today's roots invalidation alone, no generation flip
        gen = session.mmu.pages.mmu_valid_gen
        assert all(r.role.invalid for r in session.mmu.pages.tdp_mmu_roots)
        assert session.mmu.pages.mmu_valid_gen == gen
        session.audit()


async def test_shadow_paging_shows_an_unsync_page_and_its_sync(tmp_path: Path) -> None:
    """A guest's store into a shadowed level-1 table unsyncs it (marked ~
    on the levels, counted in mmu_unsync); the next CR3 load syncs it."""
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        mmu = shadow_mmu(app)
        await pilot.press("p", "p")  # TDP MMU -> direct pages -> shadow paging
        session = mmu.session
        assert isinstance(session, ShadowSession)
        await next_exits(
            pilot, mmu, 200, lambda: any(sp.unsync for sp in session.mmu.pages.pages())
        )
        levels = mmu.query_one(PageLevels).all_rows
        assert "unsync~" in levels
        counters = str(mmu.query_one(MmuCounters).content)
        assert "unsync/pte_wr/flooded" in counters and "prev_roots vcpu" in counters
        await next_exits(
            pilot, mmu, 400, lambda: "kvm_mmu_sync_page" in str(mmu.query_one(LookupBar).content)
        )
        assert "kvm_mmu_sync_page ×" in str(mmu.query_one(LookupBar).content)
        assert session.mmu.stat["synced_pages"] > 0


async def test_direct_pages_show_prefetch_levels_and_nx_splits(tmp_path: Path) -> None:
    """On the screen: with direct pages (tdp_mmu=N) a fault's prefetched
    neighbours are □ (A clear), the counters give the level and the kernel's reason,
    `B` changes the host backing and `X` turns nx_huge_pages on (a fetch splits)."""
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        mmu = shadow_mmu(app)
        await pilot.press("p")  # EPT, direct pages
        session = mmu.session
        assert isinstance(session, MmuSession) and session.mmu.pte_prefetch
        await pilot.press("H")  # 4K leaves only: every RAM fault prefetches
        mmu.action_next_result("FIXED")
        await pilot.pause()
        counters = str(mmu.query_one(MmuCounters).content)
        assert "prefetched (A clear)" in counters and "level (why)" in counters
        assert "4K: huge pages off" in counters
        mmu.action_select(10)  # the last level: the 4K page with the fault's leaf
        await pilot.pause()
        assert "□" in str(mmu.query_one(SptGrid).content)
        await pilot.press("H", "B")  # huge pages back, the host in hugetlbfs 1G pages
        assert isinstance(mmu.session, MmuSession)
        assert mmu.session.mmu.params.host_level == 3 and mmu.session.mmu.levels.host_level == 3
        await pilot.press("X")
        session = mmu.session
        assert isinstance(session, MmuSession) and session.mmu.nx
        mmu._run_until(lambda step: bool(getattr(step.access, "fetch", False)))
        await pilot.pause()
        counters = str(mmu.query_one(MmuCounters).content)
        assert "nx_huge_pages=on" in counters
        assert mmu.last is not None and isinstance(mmu.last.access, EptAccess)
        gfn = mmu.last.access.gpa >> 12
        slot = session.vm.memslot_set(0).gfn_tree.search(gfn)
        huge, _ = MappingLevels(3, nx_huge_pages=False).why(slot, gfn)  # without the mitigation
        if huge > 1:
            assert (
                "4K: NX huge page (fetch" in counters and session.mmu.pages.stat["nx_lpage_splits"]
            )
        session.audit()
