"""A guest on shadow paging (EPT off): processes, demand paging through injected #PFs,
CR3 loads, the vtlb, and the five workloads, all deterministic for a seed."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import preset
from mmuscope.engine.mmu.guest.page_tables import GuestPageTables
from mmuscope.engine.mmu.shadow.session import (
    FORK_LIVE,
    FORK_PAGES,
    HEAP,
    PFAULT_PAGES,
    SHADOW_WORKLOADS,
    ShadowSession,
)
from mmuscope.engine.mmu.spte import RetPf


def session(workload: str, **kw: object) -> ShadowSession:
    return ShadowSession(preset("pc-4g"), workload=workload, **kw)  # type: ignore[arg-type]


def recorded(s: ShadowSession) -> list[Event]:
    events: list[Event] = []
    s.subscribe(events.append)
    return events


@pytest.mark.parametrize("workload", SHADOW_WORKLOADS)
def test_workloads_are_deterministic_and_audited(workload: str) -> None:
    runs = []
    for _ in range(2):
        s = session(workload, seed=5)
        events = recorded(s)
        steps = []
        for n in range(400):
            steps.append(s.step())
            if n % 50 == 0:
                s.audit()
        s.audit()
        runs.append(([(x.access, x.ret, x.update, x.guest) for x in steps], events))
    assert runs[0] == runs[1]


def test_a_first_touch_costs_two_exits_then_none() -> None:
    """Anonymous memory: KVM's walk fails, the #PF goes to the guest, which maps the
    page; the retried access faults once more and gets its spte; then the CPU alone."""
    s = session("pfault")
    first, second = s.step(), s.step()
    assert first.ret is RetPf.RETRY and first.guest == "do_anonymous_page"
    assert second.access == first.access and second.ret is RetPf.FIXED
    assert not s.needs_exit(first.access)
    assert "mov cr3" in first.update and "pfault" in first.update


def test_pfault_round_follows_the_power_keys_threads_program() -> None:
    s = session("pfault")
    updates: list[str] = []
    rets: Counter[str] = Counter()
    while True:
        step = s.step()
        updates += [step.update] if step.update else []
        if "munmap" in step.update:
            break  # the next round's first access
        rets[step.ret.name if step.ret else "none"] += 1
    joined = " | ".join(updates)
    assert "mprotect(PROT_WRITE): 0 ptes changed" in joined  # x86: W implies R
    assert f"mprotect(PROT_READ): {PFAULT_PAGES} ptes changed" in joined
    # first writes: RETRY + FIXED each; the second writes hit; PROT_READ's pte stores go
    # to the unsync table and each INVLPG syncs its spte read-only: the reads hit too
    assert rets["RETRY"] == PFAULT_PAGES
    assert rets["FIXED"] == PFAULT_PAGES
    assert s.mmu.pages.stat["mmu_unsync"] >= 1 and s.mmu.stat["synced_sptes"] >= PFAULT_PAGES
    s.audit()


def test_netperf_mmio_is_walked_once_then_hit() -> None:
    s = session("netperf", seed=2)
    events = recorded(s)
    s.run(600)
    names = Counter(e.name for e in events)
    assert names["mark_mmio_spte"] == 2  # the NIC doorbell and the LAPIC
    # each hit is handle_mmio_page_fault or, for the same gva again on that vCPU, the
    # vCPU's MMIO info (mmio_info_in_cache(): no line at all)
    hits = names["handle_mmio_page_fault"] + s.mmu.mmio_info.gva_hits
    assert hits > 300 and s.mmu.mmio_info.gva_hits > 100
    # walks: first touches of the 16 buffer pages (twice each) and the two MMIO misses
    assert names["kvm_mmu_pagetable_walk"] <= 2 * 16 + 2 + 2
    s.audit()


def test_without_mmio_sptes_the_vtlb_saves_the_emulators_walk() -> None:
    """The memslot-search thread (kvm, 2011): with no MMIO caching (2011) each MMIO exit
    walks the guest tables in the fault and again in the emulator; the vtlb answers the
    second."""
    walks = {}
    for vtlb in (False, True):
        s = session("netperf", seed=2, spte_config="2011-shadow-no-mmio-cache", vtlb=vtlb)
        events = recorded(s)
        s.run(600)
        walks[vtlb] = sum(e.name == "kvm_mmu_pagetable_walk" for e in events)
        if vtlb:
            assert s.mmu.vtlbs is not None
            assert s.mmu.vtlbs.walks_saved == walks[False] - walks[True]
    assert walks[True] < 0.6 * walks[False]


def test_fork_grows_each_shared_gfns_rmap_to_the_live_children() -> None:
    s = session("fork")
    s.run(FORK_PAGES * (FORK_LIVE + 10) * 2)
    parent = next(p for p in s.os.processes.values() if p.comm == "rmap_fork")
    gfn = parent.pages[HEAP]
    live = sum(1 for p in s.os.processes.values() if p.pages.get(HEAP) == gfn)
    assert live == FORK_LIVE + 1
    # the parent's own spte stays (the fork's COW store unsynced its table, the flush
    # synced the spte read-only), and the newest child may not have read that page yet
    user = [p for p in s.mmu._rmap_of(0, gfn) if not s.mmu.pages.page_of_sptep(p).role.direct]
    assert FORK_LIVE <= len(user) <= FORK_LIVE + 1
    # data pages share the pool with the tables: the guest kernel's direct map (its pte
    # stores fault, and FNAME(pte_prefetch) maps their neighbours) may map it once more
    assert len(user) <= s.mmu.rmap_count(gfn) <= len(user) + 1
    s.audit()


def test_kernbench_jobs_exit_and_free_their_tables() -> None:
    s = session("kernbench", seed=3)
    events = recorded(s)
    s.run(3000)
    assert len(s.os.processes) == 2 * s.nr_vcpus  # every exit is replaced
    assert s.cr3_loads > 50
    assert any(e.name == "kvm_mmu_unprotect_page" for e in events)  # torn-down tables
    pool = s.mmu.guest
    assert len(pool.tables) == sum(len(t) for t in pool.processes.values())
    s.audit()


def test_churn_zaps_and_every_vcpu_reloads_its_root() -> None:
    s = session("churn", seed=3)
    events = recorded(s)
    gen = s.mmu.pages.mmu_valid_gen
    s.run(500)
    assert any(e.name == "kvm_mmu_zap_all_fast" for e in events)
    assert s.mmu.pages.mmu_valid_gen != gen or s.mmu.pages.gen_era == "2019"
    for root in s.mmu.roots.values():
        assert not s.mmu.pages.is_obsolete(root)
    s.audit()


def test_set_workload_ends_the_old_processes() -> None:
    s = session("fork")
    s.run(200)
    s.set_workload("netperf")
    assert [p.comm for p in s.os.processes.values()] == []
    s.run(50)
    assert [p.comm for p in s.os.processes.values()] == ["netperf"]
    (netperf,) = s.os.processes.values()
    assert len(s.mmu.guest.allocated) == len(s.mmu.guest.tables) + len(netperf.pages)
    with pytest.raises(ValueError, match="unknown workload"):
        s.set_workload("nope")
    s.audit()


def test_events_are_stamped_with_the_vcpu() -> None:
    s = session("kernbench")
    events = recorded(s)
    s.run(50)
    walks = [e for e in events if e.name == "kvm_mmu_pagetable_walk"]
    assert walks and all(e.comm == "qemu-kvm" for e in walks)
    assert {e.cpu for e in walks} == {0, 1}
    assert s.last_walk and s.last_walk[0][0] == 4


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("run"), st.integers(1, 60)),
        st.tuples(st.just("workload"), st.sampled_from(SHADOW_WORKLOADS)),
        st.tuples(st.just("zap"), st.sampled_from(("fast", "slow"))),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(ops=OPS, seed=st.integers(0, 50), vtlb=st.booleans())
def test_random_sessions_keep_every_invariant(
    ops: list[tuple[str, object]], seed: int, vtlb: bool
) -> None:
    s = session("kernbench", seed=seed, vtlb=vtlb)
    for op, arg in ops:
        if op == "run":
            assert isinstance(arg, int)
            s.run(arg)
        elif op == "workload":
            s.set_workload(str(arg))
        elif arg == "fast":
            s.mmu.zap_all_fast()
        else:
            s.mmu.pages.zap_all()
        s.audit()


def test_guest_pool_is_where_the_tables_are() -> None:
    s = session("kernbench")
    assert isinstance(s.mmu.guest, GuestPageTables)
    s.run(100)
    assert all(gfn in s.mmu.guest.pool for gfn in s.mmu.guest.tables)


def test_kernel_2m_gives_guest_2m_leaves_fetches_and_nx_splits() -> None:
    """kernel_2m: the guest kernel's 2M text and direct map (engine/mmu/shadow/kernel.py) in every
    process; a fetch maps a 2M spte on a THP host, 4K on a 4K host, and splits under
    nx_huge_pages; the direct map over the page tables stays 4K (disallow_lpage)."""
    from mmuscope.engine.mmu.params import TdpMmuParams
    from mmuscope.engine.mmu.shadow.kernel import DIRECT_MAP_GVA, KERNEL_TEXT_GVA
    from mmuscope.engine.mmu.spte import PT_PAGE_SIZE_MASK, is_shadow_present_pte

    def run(**params: object) -> tuple[ShadowSession, int]:
        s = session("fork", kernel_2m=True, params=TdpMmuParams(tdp_mmu=False, **params))  # type: ignore[arg-type]
        s.run(300)
        s.audit()
        huge = [x for sp in s.mmu.pages.pages() if sp.role.level > 1 for x in sp.spt]
        return s, sum(1 for x in huge if x & PT_PAGE_SIZE_MASK and is_shadow_present_pte(x))

    thp, huge = run()
    assert huge and thp.mmu.pages.stat["nx_lpage_splits"] == 0
    assert thp.mmu.why_level(0, thp.mmu.cr3s[0], DIRECT_MAP_GVA).endswith("table in the 2M")
    small, huge = run(host_level=1)
    assert thp.exits < small.exits and not huge
    why = small.mmu.why_level(0, small.mmu.cr3s[0], KERNEL_TEXT_GVA, True)
    assert why == "4K: host 4K pages"
    nx, huge = run(nx_huge_pages="on")
    assert nx.mmu.pages.stat["nx_lpage_splits"] >= 1 and not huge
    assert session("fork").kernel is None  # the default guest: 4K pages, no kernel work
