"""The MMU notifier (engine/mmu/mmu_notifier.py, docs/kvm.md §6.7): the host unmaps guest
pages, KVM zaps their sptes (the TDP MMU's roots, valid and invalid; the rmaps of the
direct and shadow MMUs), and a page fault racing an invalidation retries."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import preset
from mmuscope.engine.mmu.direct.session import MmuSession
from mmuscope.engine.mmu.mapping_level import KvmPageFault, gfn_to_hva_memslot
from mmuscope.engine.mmu.mmu_notifier import leaves
from mmuscope.engine.mmu.shadow.session import ShadowSession
from mmuscope.engine.mmu.spte import RetPf
from mmuscope.engine.mmu.tdp.session import TdpSession

from tests.cli_run import run

PAGE = 0x1000
HUGE = 0x20_0000
UNMAP_RE = re.compile(
    r"kvm_unmap_hva_range: +mmu notifier unmap range: (0x[0-9a-f]{14}) -- (0x[0-9a-f]{14})$"
)


@pytest.mark.parametrize("mmu", ["tdp", "direct", "shadow"])
def test_simulate_balloon_unmaps_pages_and_the_racing_fault_retries(mmu: str) -> None:
    """`simulate --workload balloon`: each inflation is the kernel's `kvm_unmap_hva_range`
    line for the 4K page, the first in a THP followed by its 2M split; its sptes go (the
    TDP MMU traces each, the rmap zap nothing), and the fault it raced exits again."""
    result = run("simulate", "--mmu", mmu, "--workload", "balloon", "--accesses", "600")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    unmaps = [(i, UNMAP_RE.search(line)) for i, line in enumerate(lines)]
    ranges = [(i, int(m[1], 16), int(m[2], 16)) for i, m in unmaps if m]
    assert len(ranges) >= 12  # 11 inflations, at least one with a THP split
    sizes = {end - start for _, start, end in ranges}
    assert sizes == {PAGE, HUGE}
    for i, start, end in ranges:
        if end - start == HUGE:  # the split, nested in the page's own invalidation
            _, page, page_end = ranges[[r[0] for r in ranges].index(i - 1)]
            assert start <= page < page_end <= end
    # the fault in whose window the first inflation landed is taken again at once
    first = ranges[0][0]
    faults = [i for i, line in enumerate(lines) if "kvm_page_fault:" in line]
    raced = lines[max(i for i in faults if i < first)]
    again = lines[min(i for i in faults if i > first)]
    assert raced.split("kvm_page_fault:")[1] == again.split("kvm_page_fault:")[1]
    # the TDP MMU traces each zap (handle_changed_spte); the rmap zap traces nothing
    zaps = [
        line
        for i, _, _ in ranges
        for line in lines[i + 1 : i + 3]
        if "kvm_tdp_mmu_spte_changed" in line and "new_spte 8000000000000000" in line
    ]
    assert bool(zaps) == (mmu == "tdp")


def test_no_spte_maps_a_page_the_balloon_gave_back() -> None:
    """After the balloon workload's inflations every spte maps a page the host still
    maps, at no more than the host's level (split THPs: 4K), and faults retried."""
    for cls in (TdpSession, MmuSession, ShadowSession):
        session = cls(preset("pc-4g"), workload="balloon", seed=3)
        session.run(1200)
        session.audit()
        assert session.balloon.inflated >= 20 and session.balloon.raced >= 10
        assert session.mmu.levels.mmu_invalidate.stale_retries >= session.balloon.raced
        # one move per invalidation: the page, and the THP split when it cut one
        assert session.mmu.levels.mmu_invalidate.seq > session.balloon.inflated


def _mapped_gfn(session: TdpSession | MmuSession) -> tuple[int, int]:
    """A gfn the session has mapped with a huge spte, and its host address."""
    as_id, gfn, _ = next(leaf for leaf in leaves(session.mmu) if leaf[2] == 2)
    slot = session.vm.memslot_set(as_id).gfn_tree.search(gfn)
    assert slot is not None
    return gfn, gfn_to_hva_memslot(slot, gfn)


@pytest.mark.parametrize("cls", [TdpSession, MmuSession])
def test_a_fault_racing_an_invalidation_retries_then_maps_4k(
    cls: type[TdpSession | MmuSession],
) -> None:
    """`kvm_mmu_faultin_pfn()` reads `mmu_invalidate_seq`; an invalidation that ends
    while the fault asks the host for the pfn makes it RET_PF_RETRY; the next fault maps
    the page with a 4K spte, the host having split its THP."""
    session = cls(preset("pc-4g"), workload="kernbench", seed=1)
    session.run(300)
    gfn, hva = _mapped_gfn(session)
    gpa = (gfn + 7) << 12
    session.notifier.madvise_dontneed(hva)  # the THP split zapped the 2M spte
    assert not any(leaf[1] <= gfn + 7 < leaf[1] + 512 for leaf in leaves(session.mmu))
    fired = []

    def race(fault: KvmPageFault) -> None:
        fired.append(fault.gfn)
        session.notifier.madvise_dontneed(hva + 3 * PAGE)  # another page of the 2M

    session.mmu.levels.faultin_race = race
    assert session.mmu.page_fault(0, gpa) is RetPf.RETRY
    session.mmu.levels.faultin_race = None
    assert fired == [gfn + 7]
    session.audit()
    assert session.mmu.page_fault(0, gpa) is RetPf.FIXED
    assert (0, gfn + 7, 1) in set(leaves(session.mmu))
    session.audit()


def test_the_tdp_unmap_zaps_invalid_roots_too() -> None:
    """`kvm_tdp_mmu_unmap_gfn_range()` walks the invalid roots as well: a vCPU still on
    an invalidated root (before its next entry reloads) keeps no mapping of the page."""
    session = TdpSession(preset("pc-4g"), workload="kernbench", seed=2)
    session.run(300)
    mmu = session.mmu
    old_root = mmu.roots[0]
    mmu.kvm_tdp_mmu_invalidate_all_roots()  # invalidated, not yet zapped
    assert old_root.role.invalid and old_root in mmu.pages.tdp_mmu_roots
    gfn, hva = _mapped_gfn(session)
    session.notifier.invalidate_range_start(hva, hva + PAGE)
    assert all(not (leaf[1] <= gfn < leaf[1] + 512) for leaf in leaves(mmu))
    session.audit()
    session.notifier.invalidate_range_end(hva, hva + PAGE)


def test_young_is_tested_without_change_and_cleared() -> None:
    """`test_young` (`kvm_tdp_mmu_test_age_gfn`) says a mapped page is young and changes
    nothing; `clear_young` makes it old; `test_young` then says no.  Each traces the
    kernel's line."""
    for cls in (TdpSession, MmuSession):
        session = cls(preset("pc-4g"), workload="kernbench", seed=1)
        session.run(200)
        events: list[Event] = []
        session.subscribe(events.append)
        _, hva = _mapped_gfn(session)
        before = sorted(leaves(session.mmu))
        assert session.notifier.test_young(hva)
        assert sorted(leaves(session.mmu)) == before
        assert session.notifier.clear_young(hva, hva + HUGE)
        assert not session.notifier.test_young(hva)
        names = [e.name for e in events]
        assert names[:1] == ["kvm_test_age_hva"] and "kvm_age_hva" in names
        session.audit()


# -- random interleavings against a reference model ------------------------------------


class Reference:
    """What the notifier promises, as sets: the gfns of the open invalidations (a fault
    on one must retry), and whether an invalidation began or ended during a fault."""

    def __init__(self) -> None:
        self.open: list[tuple[int, int]] = []  # gfn ranges of invalidations under way
        self.seen: list[tuple[int, int]] = []  # every range since none was open

    def start(self, gfns: tuple[int, int]) -> None:
        if not self.open:
            self.seen.clear()
        self.open.append(gfns)
        self.seen.append(gfns)

    def end(self, gfns: tuple[int, int]) -> None:
        self.open.remove(gfns)

    def covered(self, gfn: int) -> bool:
        return any(start <= gfn < end for start, end in self.open)

    def hull(self, gfn: int) -> bool:
        """The kernel keeps one range for the open ones and all invalidated while they
        were ("will accumulate and persist"): a fault in it may retry."""
        return bool(self.open) and min(s for s, _ in self.seen) <= gfn < max(
            e for _, e in self.seen
        )


OPS = st.lists(
    st.tuples(
        st.sampled_from(["fault", "start", "end", "dontneed", "race-full", "race-start"]),
        st.integers(0, 7),  # which 2M region of the slot
        st.integers(0, 511),  # which page of it
        st.booleans(),  # 4K or 2M invalidation
    ),
    min_size=1,
    max_size=25,
)


@pytest.mark.parametrize("cls", [TdpSession, MmuSession])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_random_fault_invalidate_interleavings(
    cls: type[TdpSession | MmuSession], ops: list[tuple[str, int, int, bool]]
) -> None:
    """Faults, invalidation starts and ends, MADV_DONTNEEDs and invalidations inside a
    fault's window, in any order: after each step the MMU, memslots and notifier audit
    (no spte maps a page the host zapped or a gfn an open invalidation covers); a fault
    on a gfn an open invalidation covers, or one an invalidation ended during, retries;
    one outside every open invalidation with no race maps its gfn."""
    session = cls(preset("pc-4g"), workload="kernbench", seed=5)
    mmu, notifier = session.mmu, session.notifier
    slot = max(session.vm.memslots(0), key=lambda s: s.npages)
    base = slot.base_gfn + 0x1000  # 16 MiB into the slot (host 2M pages lie 1 MiB off gfns)
    ref = Reference()
    opened: list[tuple[int, int, int, int]] = []  # hva range, gfn range
    for op, region, page, small in ops:
        gfn = base + region * 512 + page
        hva = gfn_to_hva_memslot(slot, gfn)
        # the host invalidates at least what it maps a page with: a 4K range only where
        # it maps 4K pages (a THP changes whole: "the primary MMU must invalidate the
        # entire huge page"), so a fault beside a 4K range may map a huge spte
        size = PAGE if small and notifier.host.huge_page_of(hva) is None else HUGE
        hva_start = hva & -size
        gfn_start = slot.base_gfn + ((hva_start - slot.userspace_addr) >> 12)
        span = (hva_start, hva_start + size, gfn_start, gfn_start + (size >> 12))
        if op == "start":
            notifier.invalidate_range_start(span[0], span[1])
            opened.append(span)
            ref.start(span[2:])
        elif op == "end" and opened:
            done = opened.pop(0)
            notifier.invalidate_range_end(done[0], done[1])
            ref.end(done[2:])
        elif op == "dontneed":  # its ranges lie in the host's 2M around the page
            region = slot.base_gfn + (((hva & -HUGE) - slot.userspace_addr) >> 12)
            ref.start((region, region + 512))
            notifier.madvise_dontneed(hva)
            ref.end((region, region + 512))
        elif op == "fault" or op.startswith("race"):
            seq = mmu.levels.mmu_invalidate.seq
            if op == "race-full":

                def full(fault: KvmPageFault, s: tuple[int, int, int, int] = span) -> None:
                    ref.start(s[2:])
                    notifier.invalidate_range_start(s[0], s[1])
                    notifier.invalidate_range_end(s[0], s[1])
                    ref.end(s[2:])

                mmu.levels.faultin_race = full
            elif op == "race-start":

                def start(fault: KvmPageFault, s: tuple[int, int, int, int] = span) -> None:
                    notifier.invalidate_range_start(s[0], s[1])
                    opened.append(s)
                    ref.start(s[2:])

                mmu.levels.faultin_race = start
            covered_before = ref.covered(gfn)
            ret = mmu.page_fault(0, gfn << 12, False)
            mmu.levels.faultin_race = None
            if covered_before or ref.covered(gfn) or mmu.levels.mmu_invalidate.seq != seq:
                assert ret is RetPf.RETRY, (op, hex(gfn))
            elif not ref.hull(gfn):
                assert ret in (RetPf.FIXED, RetPf.SPURIOUS), (op, hex(gfn), ret)
                sizes = ((g, 1 << 9 * (lv - 1)) for a, g, lv in leaves(mmu) if a == 0)
                assert any(g <= gfn < g + size for g, size in sizes)
        session.audit()
    for done in opened:
        notifier.invalidate_range_end(done[0], done[1])
    session.audit()
    assert mmu.levels.mmu_invalidate.in_progress == 0


def test_ageing_guest_memory_is_the_notifiers_clear_young() -> None:
    """The session's `age_memory` (the screen's `A`) is page reclaim's clear_young: one
    `kvm_age_hva` line per RAM slot's host range, then the sptes it makes old (EPT
    without A/D bits: access-tracked, each a `kvm_tdp_mmu_spte_changed`)."""
    session = TdpSession(preset("pc-4g"), workload="kernbench", seed=1, spte_config="ept-no-ad")
    session.run(200)
    events: list[Event] = []
    session.subscribe(events.append)
    young = session.age_memory()
    ages = [e for e in events if e.name == "kvm_age_hva"]
    assert [(e.fields["start"], e.fields["end"]) for e in ages] == [
        (s.userspace_addr, s.userspace_addr + s.size) for s in session._ram
    ]
    changed = [e for e in events if e.name == "kvm_tdp_mmu_spte_changed"]
    assert young == len(changed) > 50
    assert session.age_memory() == 0  # already old
    session.audit()
