"""Dirty logging's three modes (engine/mmu/dirty_log.py, docs/kvm.md §6.8): the legacy
GET-only mode, manual protect with initially-set (KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2,
KVM_CLEAR_DIRTY_LOG: QEMU's default since 4.2) and the dirty ring (KVM_CAP_DIRTY_LOG_RING),
on the TDP MMU and the direct MMU, with PML and without; a property run of random guest
accesses, harvests and clears against a reference model, audited at every step."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mmuscope.engine.errors import KvmError
from mmuscope.engine.layouts.layout import Layout, assign_host_addresses
from mmuscope.engine.mmu.direct.session import MmuSession
from mmuscope.engine.mmu.dirty_log import DIRTY_LOG_MODES
from mmuscope.engine.mmu.params import TdpMmuParams
from mmuscope.engine.mmu.spte import PT_WRITABLE_MASK, is_shadow_present_pte
from mmuscope.engine.mmu.tdp.session import TdpSession

PAGE = 4096
RAM_GPA = 0x100000  # the logged slot, 1 MiB in (not 2M-aligned, as QEMU's ram-1m-to-hole)
RAM_PAGES = 2048  # 8 MiB: four 2M pages' worth, 32 words of the bitmap
LAYOUT = Layout(
    "dirty-log-test",
    "1 MiB low RAM and 8 MiB above it",
    assign_host_addresses(
        [("ram-below-1m", 0, 0, 0x100000, 0), ("ram", 1, RAM_GPA, RAM_PAGES * PAGE, 0)]
    ),
)
Mmu = Literal["tdp", "direct"]


def session(mmu: Mmu, mode: str, pml: bool) -> TdpSession | MmuSession:
    if mmu == "tdp":
        return TdpSession(
            LAYOUT, workload="kernbench", params=TdpMmuParams(enable_pml=pml), dirty_log=mode
        )
    params = TdpMmuParams(tdp_mmu=False, enable_pml=pml)
    return MmuSession(LAYOUT, workload="kernbench", params=params, dirty_log=mode)


def gpa(page: int) -> int:
    return RAM_GPA + page * PAGE


def writable_leaves(s: TdpSession | MmuSession, pages: range) -> int:
    """How many of the pages vCPU 0's walk finds writable (present, W)."""
    count = 0
    for page in pages:
        spte = s.leaf_spte(0, gpa(page) >> 12)
        count += is_shadow_present_pte(spte) and bool(spte & PT_WRITABLE_MASK)
    return count


def warm(s: TdpSession | MmuSession, pages: range) -> None:
    for page in pages:
        s.access(0, gpa(page), write=True)


@pytest.mark.parametrize("mmu", ["tdp", "direct"])
@pytest.mark.parametrize("pml", [False, True])
def test_manual_init_set_enables_logging_without_protecting(mmu: Mmu, pml: bool) -> None:
    """`kvm_mmu_slot_apply_flags()` returns before any split or protection with
    initially-set; the bitmap is all ones (`kvm_prepare_memory_region()`); the legacy
    mode write-protects (or, with PML, cleans) every 4K leaf of the slot."""
    legacy, manual = session(mmu, "legacy", pml), session(mmu, "manual", pml)
    for s in (legacy, manual):
        warm(s, range(64, 192))
    assert writable_leaves(manual, range(64, 192)) == 128
    legacy.toggle_dirty_logging()
    manual.toggle_dirty_logging()
    assert writable_leaves(manual, range(64, 192)) == 128  # nothing protected
    assert manual.dirty_log.dirty[(0, 1)] == set(range(RAM_PAGES))
    assert legacy.dirty_log.dirty[(0, 1)] == set()
    if not pml:
        assert writable_leaves(legacy, range(64, 192)) == 0
    for s in (legacy, manual):
        s.audit()


@pytest.mark.parametrize("mmu", ["tdp", "direct"])
def test_manual_get_only_copies_and_clear_protects_what_it_clears(mmu: Mmu) -> None:
    """`kvm_get_dirty_log_protect()` with manual protect returns early: the same bitmap
    again and nothing protected; KVM_CLEAR_DIRTY_LOG protects just the pages it clears
    (`kvm_arch_mmu_enable_log_dirty_pt_masked()`), and the next write to one faults."""
    s = session(mmu, "manual", pml=False)
    warm(s, range(0, 256))
    s.toggle_dirty_logging()
    first = s.get_dirty_log()
    assert first == list(range(RAM_PAGES))
    assert s.get_dirty_log() == first  # not cleared
    assert writable_leaves(s, range(0, 256)) == 256
    slot = s.logged_slot()
    cleared = s.dirty_log.clear_dirty_log(slot.id, first, first_page=64, num_pages=64)
    assert cleared == list(range(64, 128))
    assert writable_leaves(s, range(0, 256)) == 192  # only the 64 cleared pages
    exits = s.exits
    s.access(0, gpa(70), write=True)  # protected: it faults, and is dirty again
    assert s.exits == exits + 1
    assert 70 in s.get_dirty_log() and 71 not in s.get_dirty_log()
    s.audit()


def test_clear_dirty_log_refuses_what_the_kernel_refuses() -> None:
    """`kvm_clear_dirty_log_protect()`: EINVAL for a first page not a multiple of 64 and
    for a count not a multiple of 64 short of the slot's end; without manual protect
    KVM_CLEAR_DIRTY_LOG is refused, with a dirty ring KVM_GET_DIRTY_LOG is (ENXIO)."""
    s = session("tdp", "manual", pml=False)
    s.toggle_dirty_logging()
    slot = s.logged_slot()
    for first, count in ((32, 64), (0, 40), (RAM_PAGES, 64)):
        with pytest.raises(KvmError) as err:
            s.dirty_log.clear_dirty_log(slot.id, [0], first_page=first, num_pages=count)
        assert err.value.errno_name == "EINVAL"
    legacy = session("tdp", "legacy", pml=False)
    legacy.toggle_dirty_logging()
    with pytest.raises(KvmError):
        legacy.dirty_log.clear_dirty_log(slot.id, [0])
    ring = session("tdp", "ring", pml=False)
    ring.toggle_dirty_logging()
    with pytest.raises(KvmError) as err:
        ring.get_dirty_log()
    assert err.value.errno_name == "ENXIO"


@pytest.mark.parametrize("mmu", ["tdp", "direct"])
def test_manual_clear_write_protects_the_huge_page_around_it(mmu: Mmu) -> None:
    """Initially-set leaves huge pages mapped writable; the first CLEAR in one
    write-protects it (`kvm_mmu_slot_gfn_write_protect(..., PG_LEVEL_2M)`), or splits it
    first on the TDP MMU (`kvm_mmu_try_split_huge_pages`, eager_page_split), so the
    next write maps 4K."""
    s = session(mmu, "manual", pml=False)
    huge = 0x200000 // PAGE - RAM_GPA // PAGE  # the slot's first 2M-aligned page
    s.access(0, gpa(huge), write=True)
    assert s.mmu.stat.get("pf_fixed", 0) >= 0
    level = _level(s, huge)
    assert level == 2  # a 2M leaf
    s.toggle_dirty_logging()
    assert _level(s, huge) == 2 and writable_leaves(s, range(huge, huge + 512)) == 512
    s.dirty_log.clear_dirty_log(s.logged_slot().id, [huge + 1], first_page=huge, num_pages=64)
    assert writable_leaves(s, range(huge + 1, huge + 2)) == 0
    if mmu == "tdp":  # split eagerly: the other 511 stay writable 4K leaves
        assert _level(s, huge) == 1 and writable_leaves(s, range(huge, huge + 512)) == 511
    else:
        assert writable_leaves(s, range(huge, huge + 512)) == 0
    s.audit()


def _level(s: TdpSession | MmuSession, page: int) -> int:
    leaf = s._leaf(0, gpa(page) >> 12)
    assert leaf is not None
    return leaf[0].role.level


# -- the property run ---------------------------------------------------------------------

# mostly the two words each side of the slot's first 2M boundary (page 256), so that
# writes, harvests and clears meet; sometimes anywhere in the slot
PAGES = st.integers(192, 319) | st.integers(0, RAM_PAGES - 1)
OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "write", "write", "read", "harvest", "clear"]),
        PAGES,
        st.integers(0, 1),
    ),
    max_size=60,
)
WARM = st.lists(st.tuples(PAGES, st.booleans()), max_size=20)


def _harvest(s: TdpSession | MmuSession, mode: str) -> list[int]:
    """What userspace gets: KVM_GET_DIRTY_LOG, or the rings collected (and reset)."""
    if mode != "ring":
        return s.get_dirty_log()
    got = [offset for _slot, offset in s.dirty_log.harvest_rings()]
    s.dirty_log.reset_dirty_rings()
    return got


@pytest.mark.parametrize("mode", DIRTY_LOG_MODES)
@pytest.mark.parametrize("mmu", ["tdp", "direct"])
@pytest.mark.parametrize("pml", [False, True])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(warm_ops=WARM, ops=OPS)
def test_every_write_is_reported_once(
    mode: str,
    mmu: Mmu,
    pml: bool,
    warm_ops: list[tuple[int, bool]],
    ops: list[tuple[str, int, int]],
) -> None:
    """Against a reference (`must`: the pages written since they were last reported,
    `may`: those accessed, or never reported in initially-set): every harvest reports
    each page of `must` and nothing outside `may`, a ring never twice in one harvest;
    with manual protect a page stays reported until KVM_CLEAR_DIRTY_LOG clears it.  The
    session's audit (dirty_log.py `audit`: no leaf lets a clean page be written
    unlogged) holds after every step."""
    s = session(mmu, mode, pml)
    for page, write in warm_ops:  # 4K and 2M mappings before logging starts
        s.access(0, gpa(page), write=write)
    s.toggle_dirty_logging()
    slot = s.logged_slot()
    must: set[int] = set()
    may: set[int] = set(range(RAM_PAGES)) if mode == "manual" else set()
    got: list[int] = []
    s.audit()
    for op, page, vcpu in ops:
        if op in ("write", "read"):
            s.access(vcpu, gpa(page), write=op == "write")
            may.add(page)
            if op == "write":
                must.add(page)
        elif op == "harvest" or mode != "manual":
            got = _harvest(s, mode)
            if mode == "ring":
                assert len(got) == len(set(got)), "a page reported twice in one harvest"
            assert must <= set(got) <= may
            if mode != "manual":
                must, may = set(), set()
        else:  # KVM_CLEAR_DIRTY_LOG of the 64-page word around `page`, of what GET gave
            first = page // 64 * 64
            cleared = s.dirty_log.clear_dirty_log(slot.id, got, first, 64)
            assert set(cleared) <= set(got)
            must -= set(cleared)
            may -= set(cleared)
        s.audit()


# -- through the command line ---------------------------------------------------------------


@functools.cache
def _simulate(*args: str) -> tuple[str, ...]:
    """The run's lines, once per worker for the same options (the soft-limit tests share
    their 2000-access ring run: ~436,000 lines)."""
    from tests.cli_run import run

    done = run("simulate", "--pml", "off", *args)
    assert done.returncode == 0, done.stderr
    return tuple(done.stdout.splitlines())


def _named(lines: Sequence[str], name: str) -> list[str]:
    return [line for line in lines if f" {name}: " in line]


@pytest.mark.parametrize("mmu", ["tdp", "direct"])
def test_simulate_manual_protect_takes_no_write_faults_when_logging_starts(mmu: str) -> None:
    """`simulate --workload dirty` turns logging on at access 400: the legacy mode
    protects the slot, so writes after it are fixed by `fast_page_fault`; manual protect
    (initially set, no CLEAR in this workload) protects nothing and none fault."""
    common = ("--mmu", mmu, "--workload", "dirty", "--accesses", "800")
    legacy = _named(_simulate(*common, "--dirty-log", "legacy"), "fast_page_fault")
    manual = _named(_simulate(*common, "--dirty-log", "manual"), "fast_page_fault")
    assert legacy and not manual


def test_simulate_dirty_ring_exits_at_the_soft_limit() -> None:
    """`--dirty-log ring --dirty-ring-size 256`: each logged page pushed
    (`kvm_dirty_ring_push`, the kernel's text), the vCPU exits
    (`kvm_dirty_ring_exit`) once its ring holds 256 - KVM_DIRTY_RING_RSVD_ENTRIES, and
    the reset (`kvm_dirty_ring_reset`) empties it."""
    from mmuscope.engine.trace.lines import parse_line

    lines = _simulate(
        "--mmu", "tdp", "--workload", "dirty", "--accesses", "2000",
        "--dirty-log", "ring", "--dirty-ring-size", "256",
    )  # fmt: skip
    ring = [line for line in lines[1:] if " kvm_dirty_ring_" in line]  # of ~436,000 lines
    events = [e for e in map(parse_line, ring) if e is not None]
    names = [e.name for e in events]
    assert "kvm_dirty_ring_exit" in names
    at = names.index("kvm_dirty_ring_exit")
    vcpu = events[at].fields["vcpu_id"]
    pushes = [e for e in events[:at] if e.name == "kvm_dirty_ring_push"]
    last = [e for e in pushes if e.fields["index"] == vcpu][-1]
    assert last.fields["used"] == 256 - 64
    assert all(e.fields["used"] < 192 for e in pushes if e is not last)
    reset = [e for e in events[at:] if e.name == "kvm_dirty_ring_reset"]
    assert reset and all(e.fields["used"] == 0 for e in reset)


@pytest.mark.parametrize("mmu", ["tdp", "direct"])
def test_a_soft_full_ring_exits_to_userspace_before_the_entry(mmu: str) -> None:
    """`vcpu_enter_guest()` (6.18 x86.c) checks KVM_REQ_DIRTY_RING_SOFT_FULL before it
    traces `kvm_entry`: the exit whose fault filled the ring ends in
    `kvm_dirty_ring_exit` and `kvm_userspace_exit` (KVM_EXIT_DIRTY_RING_FULL, 31, printed
    `0x1f` as 6.18's symbol table has no name for it), not in an entry; userspace's
    KVM_RESET_DIRTY_RINGS (`kvm_dirty_ring_reset`) comes next, and the vCPU's
    `kvm_entry` only after it, at the next KVM_RUN."""
    from mmuscope.engine.trace.lines import parse_line

    lines = _simulate(
        "--mmu", mmu, "--workload", "dirty", "--accesses", "2000",
        "--dirty-log", "ring", "--dirty-ring-size", "256",
    )[1:]  # fmt: skip
    # Every line is one event (the TDP run's ~427,000 kvm_tdp_mmu_spte_changed of eager
    # huge page splits among them); only the lines of the events checked are parsed, at
    # their place in the whole run, and the line after an exit whatever it holds.
    checked = ("kvm_exit", "kvm_entry", "kvm_dirty_ring_exit", "kvm_dirty_ring_reset")
    events = {
        i: parse_line(line)
        for i, line in enumerate(lines)
        if any(f" {name}: " in line for name in checked)
    }
    assert all(e is not None and e.name in checked for e in events.values())
    names = {i: e.name for i, e in events.items() if e is not None}
    exits = [i for i, name in names.items() if name == "kvm_dirty_ring_exit"]
    assert exits
    for at in exits:
        vcpu = events[at].fields["vcpu_id"]  # type: ignore[union-attr]
        before = [i for i in names if i < at and names[i] in ("kvm_exit", "kvm_entry")]
        assert names[before[-1]] == "kvm_exit"
        assert events[before[-1]].fields["vcpu_id"] == vcpu  # type: ignore[union-attr]
        user = parse_line(lines[at + 1])
        assert user is not None
        assert user.name == "kvm_userspace_exit" and user.fields["code"] == 31
        assert lines[at + 1].endswith("kvm_userspace_exit:   reason 0x1f (31)")
        entry = next(i for i in names if i > at and names[i] == "kvm_entry")
        assert events[entry].fields["vcpu_id"] == vcpu  # type: ignore[union-attr]
        assert "kvm_dirty_ring_reset" in [names[i] for i in names if at < i < entry]


@pytest.mark.parametrize(
    "args",
    [
        ("--mmu", "shadow", "--workload", "fork", "--dirty-log", "manual"),
        ("--mmu", "tdp", "--workload", "migrate", "--dirty-log", "bitmap"),
        ("--mmu", "tdp", "--workload", "migrate", "--dirty-ring-size", "4096"),
        (
            "--mmu",
            "tdp",
            "--workload",
            "migrate",
            "--dirty-log",
            "ring",
            "--dirty-ring-size",
            "100",
        ),
    ],
)
def test_simulate_refuses_dirty_log_options_that_do_not_fit(args: tuple[str, ...]) -> None:
    from tests.cli_run import run

    done = run("simulate", *args)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr
