"""x86 rmap lists (docs/kvm.md §3.1-§3.4) in every era, and debugfs `mmu_rmaps_stat`
(§3.5).

Property tests drive random add/remove sequences against a plain Python list, auditing
after every step; unit tests pin the kernel's exact moves (1->2, overflow, hole filling,
freeing) era by era; the debugfs text is compared byte for byte with hand-written
fixtures, one of them Peter Xu's 6G-guest table from the PTE_LIST_EXT thread (kvm, 2021).
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mmuscope.engine.errors import AuditError
from mmuscope.engine.mmu.rmap import (
    DEFAULT_ERA,
    ERAS,
    RMAP_RECYCLE_THRESHOLD,
    KvmRmapHead,
    RmapHead,
    desc_cache_lines,
    rmap_add,
    rmap_add_would_recycle,
)
from mmuscope.engine.mmu.rmap.stat import (
    LOG2_BANNER,
    RMAP_LOG_SIZE,
    RmapHistogram,
    bucket_kernel,
    bucket_log2,
    format_mmu_rmaps_stat,
)

from tests.datafiles import FIXTURES

SPTE_BASE = 0x1_2345_6000


def sp(n: int) -> int:
    """The n-th sptep: 8-byte aligned host physical addresses inside one page table."""
    return SPTE_BASE + 8 * n


def filled(era: str, n: int) -> KvmRmapHead:
    head = KvmRmapHead(era)
    for k in range(n):
        head.add(sp(k))
    return head


# -- property tests ----------------------------------------------------------------

# Bursts of up to 16 adds or removes over 64 sptes, two add bursts per remove burst:
# chains grow to several 14-entry descs and shrink again, one audited step at a time.
bursts = st.lists(
    st.tuples(st.sampled_from(["add", "add", "remove"]), st.integers(0, 63), st.integers(1, 16)),
    max_size=30,
)


def steps_of(plan: list[tuple[str, int, int]]) -> list[tuple[str, int]]:
    return [(op, (k + 5 * j) % 64) for op, k, n in plan for j in range(n)]


def check_add(head: KvmRmapHead, ref: list[int], sptep: int) -> None:
    before = head.add(sptep)
    if head.era.has_tail_count or len(ref) < 2:
        assert before == len(ref)
    else:  # a partial desc mid-chain stops the walk and its count (pre-6.4)
        assert before <= len(ref)
    ref.append(sptep)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(ERAS)), bursts)
def test_random_add_remove_matches_a_list(era: str, plan: list[tuple[str, int, int]]) -> None:
    head, ref = KvmRmapHead(era), list[int]()
    for op, k in steps_of(plan):
        if op == "add" and sp(k) not in ref:
            check_add(head, ref, sp(k))
        elif op == "add":
            with pytest.raises(AuditError):
                head.add(sp(k))
        elif ref:
            victim = ref[k % len(ref)]
            head.remove(victim)
            ref.remove(victim)
        else:
            with pytest.raises(AuditError):
                head.remove(sp(k))
        head.audit()
        assert head.count() == len(ref)
        assert sorted(head) == sorted(ref)
        assert head.is_empty == (not ref)
        if head.era.has_tail_count and head.is_many:  # full tails: the fewest descs
            assert len(head.descs) == -(-len(ref) // 14)
    assert sorted(head.clear()) == sorted(ref)
    head.audit()
    assert head.is_empty and head.memory_bytes() == 0


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(ERAS)), st.integers(2, 60), st.randoms(use_true_random=False))
def test_removals_keep_desc_accounting(era: str, n: int, rnd: random.Random) -> None:
    head = filled(era, n)
    order = [sp(k) for k in range(n)]
    rnd.shuffle(order)
    for sptep in order:
        head.remove(sptep)
        head.audit()
    assert head.is_empty
    assert head.stats.desc_allocs == head.stats.desc_frees > 0


# -- encoding and the 6.4 algorithm (§3.2-§3.3) ---------------------------------------


@pytest.mark.parametrize("era", sorted(ERAS))
def test_zero_to_one_to_two(era: str) -> None:
    head = KvmRmapHead(era)
    assert head.is_empty and head.val == 0 and head.count() == 0
    assert head.add(sp(0)) == 0
    assert head.is_single and head.val == sp(0) and not head.descs
    assert head.add(sp(1)) == 1
    (desc,) = head.descs
    assert head.is_many and head.val == desc.addr | 1 and desc.more is None
    assert desc.sptes[:2] == [sp(0), sp(1)] and not any(desc.sptes[2:])
    assert desc.spte_count == (2 if ERAS[era].has_spte_count else 0)
    assert desc.tail_count == 0 and head.stats.desc_allocs == 1


@pytest.mark.parametrize("era", sorted(ERAS))
def test_two_to_one_keeps_the_desc(era: str) -> None:
    head = filled(era, 2)
    head.remove(sp(0))
    assert head.is_many and not head.is_single and list(head) == [sp(1)]
    head.remove(sp(1))
    assert head.is_empty and head.val == 0 and head.stats.desc_frees == 1


def test_6_4_overflow_makes_a_new_head() -> None:
    head = filled("6.4", 14)
    (old,) = head.descs
    assert old.spte_count == 14
    assert head.add(sp(14)) == 14
    new, tail = head.descs
    assert tail is old and new.more is old and head.val == new.addr | 1
    assert (new.spte_count, new.tail_count, old.tail_count) == (1, 14, 0)
    assert new.sptes[0] == sp(14)
    assert head.count() == 15 and head.descs_read_by_count() == 1
    assert list(head) == [sp(14)] + [sp(k) for k in range(14)]


def test_6_4_removal_fills_the_hole_from_the_head_and_frees_it() -> None:
    head = filled("6.4", 16)  # head [s14 s15], tail [s0..s13]
    head.remove(sp(3))
    new, tail = head.descs
    assert tail.sptes[3] == sp(15) and new.spte_count == 1 and tail.spte_count == 14
    assert new.tail_count == 14 and head.stats.entries_moved == 1
    head.remove(sp(14))  # the head's last entry, removed in place: nothing moves
    assert head.stats.entries_moved == 1
    assert head.descs == (tail,) and head.val == tail.addr | 1
    assert head.stats.desc_frees == 1
    head.remove(sp(0))
    assert tail.sptes[0] == sp(13) and tail.spte_count == 13
    head.audit()


def test_6_4_add_is_o1() -> None:
    head = filled("6.4", 100)
    visited = head.stats.add_descs_visited
    head.add(sp(100))
    assert head.stats.add_descs_visited - visited == 1
    assert head.stats.add_slots_read == 0


# -- the older eras -------------------------------------------------------------------


@pytest.mark.parametrize("era", ["3", "15", "14"])
def test_pre_6_4_removal_fills_from_the_same_desc(era: str) -> None:
    ext = ERAS[era].ext
    head = filled(era, 2 * ext + 1)
    first, second, last = head.descs
    head.remove(sp(0))
    assert first.sptes[0] == sp(ext - 1)  # the desc's own last entry, not the chain's
    assert last.sptes[0] == sp(2 * ext) and head.count() == 2 * ext
    assert head.stats.entries_moved == 1
    head.remove(sp(2 * ext))  # the last desc empties and is unlinked from `second`
    assert head.descs == (first, second) and second.more is None
    assert head.stats.desc_frees == 1
    head.audit()


@pytest.mark.parametrize("era", ["3", "15", "14"])
def test_pre_6_4_add_fills_a_hole_and_undercounts(era: str) -> None:
    ext = ERAS[era].ext
    head = filled(era, 2 * ext + 1)
    head.remove(sp(1))
    # The walk stops at the first non-full desc and counts only what it passed.
    assert head.add(sp(100)) == ext - 1
    assert head.count() == 2 * ext + 1
    assert head.descs[0].sptes[ext - 1] == sp(100)


def test_era_3_first_desc_freed_relinks_the_head() -> None:
    head = filled("3", 4)  # [s0 s1 s2] -> [s3]
    _first, second = head.descs
    for k in range(3):
        head.remove(sp(k))
    assert head.descs == (second,) and head.val == second.addr | 1
    head.audit()


def test_pre_6_4_add_walks_the_chain() -> None:
    head = filled("3", 9)  # three full descs
    visited, reads = head.stats.add_descs_visited, head.stats.add_slots_read
    assert head.add(sp(9)) == 9
    assert head.stats.add_descs_visited - visited == 3
    assert head.stats.add_slots_read - reads == 3 + 1  # sptes[2] of each, then sptes[0]
    assert len(head.descs) == 4 and list(head)[-1] == sp(9)


def test_zap_order_by_era() -> None:
    # Eras 3/15 zap with rmap_get_first + pte_list_remove: each removal pulls the
    # desc's last entry into slot 0, so the first desc empties back to front.
    assert filled("3", 5).clear() == [sp(0), sp(2), sp(1), sp(3), sp(4)]
    assert filled("14", 5).clear() == [sp(k) for k in range(5)]
    six = filled("6.4", 16)
    assert six.clear() == [sp(14), sp(15)] + [sp(k) for k in range(14)]
    assert six.stats.desc_frees == 2 and six.stats.entries_moved == 0
    three = filled("3", 5)
    three.clear()
    assert three.stats.entries_moved == 3 and three.stats.desc_frees == 2  # s2, s1, s4


# -- memory and cache lines -------------------------------------------------------------


def test_layouts_match_the_kernel_structs() -> None:
    eras = [ERAS[name] for name in ("3", "15", "14", "6.4")]
    assert [e.ext for e in eras] == [3, 15, 14, 14]
    assert [e.sizeof for e in eras] == [32, 128, 128, 128]
    assert [(e.more_offset, e.sptes_offset) for e in eras] == [(24, 0), (120, 0), (0, 16), (0, 16)]
    assert [(e.spte_count_offset, e.tail_count_offset) for e in eras] == [
        (None, None), (None, None), (8, None), (8, 12)
    ]  # fmt: skip
    assert ERAS["6.4"].layout == (
        "struct pte_list_desc { struct pte_list_desc *more; u32 spte_count; "
        "u32 tail_count; u64 *sptes[14]; }"
    )
    assert ERAS["3"].layout == "struct pte_list_desc { u64 *sptes[3]; struct pte_list_desc *more; }"
    assert DEFAULT_ERA == "6.4" and RmapHead is KvmRmapHead


@pytest.mark.parametrize(
    ("era", "descs", "nbytes", "lines"),
    [("3", 7, 7 * 32, 7), ("15", 2, 2 * 128, 4), ("14", 2, 2 * 128, 3), ("6.4", 2, 2 * 128, 3)],
)
def test_twenty_entries_per_era(era: str, descs: int, nbytes: int, lines: int) -> None:
    head = filled(era, 20)
    assert len(head.descs) == descs
    assert head.memory_bytes() == nbytes
    assert head.cache_lines_touched_by_walk() == lines


def test_metadata_first_keeps_six_entries_in_one_line() -> None:
    for name in ("14", "6.4"):
        era = ERAS[name]
        assert [desc_cache_lines(era, n) for n in range(1, 15)] == [1] * 6 + [2] * 8
    # Sean's point in the PTE_LIST_EXT thread: with `more` after sptes[15], every walk
    # touches 2 lines.
    assert {desc_cache_lines(ERAS["15"], n) for n in range(1, 16)} == {2}
    assert {desc_cache_lines(ERAS["3"], n) for n in range(1, 4)} == {1}


# -- failures -----------------------------------------------------------------------------


@pytest.mark.parametrize("era", sorted(ERAS))
def test_removing_an_absent_sptep_is_data_corruption(era: str) -> None:
    head = KvmRmapHead(era)
    with pytest.raises(AuditError):
        head.remove(sp(1))
    head.add(sp(1))
    with pytest.raises(AuditError):
        head.remove(sp(2))
    head.add(sp(2))
    with pytest.raises(AuditError):
        head.remove(sp(3))
    head.audit()


@pytest.mark.parametrize("bad", [0, 4, sp(0) + 1, -8, 1 << 64])
def test_bad_sptep(bad: int) -> None:
    with pytest.raises(ValueError):
        KvmRmapHead().add(bad)


def test_audit_catches_broken_invariants() -> None:
    head = filled("6.4", 20)
    head.descs[0].tail_count = 13
    with pytest.raises(AuditError, match="tail_count"):
        head.audit()
    head = filled("6.4", 20)
    tail = head.descs[1]
    tail.sptes[13], tail.spte_count = 0, 13
    head.descs[0].tail_count = 13
    with pytest.raises(AuditError):
        head.audit()
    head = filled("3", 5)
    head.descs[0].sptes[1] = 0
    with pytest.raises(AuditError, match="packed"):
        head.audit()


# -- __rmap_add recycling ---------------------------------------------------------------------


def test_rmap_recycle_threshold() -> None:
    assert RMAP_RECYCLE_THRESHOLD == 1000
    assert not rmap_add_would_recycle(1000) and rmap_add_would_recycle(1001)
    head = KvmRmapHead("6.4")
    assert all(rmap_add(head, sp(k)) == [] for k in range(1001))  # up to 1000 before
    zapped = rmap_add(head, sp(1001))  # held 1001 > 1000: zap everything, the new one too
    assert len(zapped) == 1002 and sp(1001) in zapped
    assert head.is_empty and head.stats.desc_allocs == head.stats.desc_frees
    head.audit()


# -- mmu_rmaps_stat (§3.5) ----------------------------------------------------------------------


def test_ffs_bucketing_quirk() -> None:
    cases = {0: 0, 1: 1, 2: 2, 3: 1, 4: 3, 5: 1, 6: 2, 7: 1, 8: 4, 12: 3, 512: 10, 1024: 10}
    assert {c: bucket_kernel(c) for c in cases} == cases
    assert bucket_kernel(1536) == 10 and bucket_kernel(1025) == 1


def test_log2_bucketing() -> None:
    cases = {0: 0, 1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 3, 7: 3, 12: 4, 1023: 10, 5000: 10}
    assert {c: bucket_log2(c) for c in cases} == cases
    with pytest.raises(ValueError):
        bucket_log2(-1)


SMALL = {"4K": [0, 0, 0, 1, 1, 3, 2, 6, 12, 5, 700, 1024, 1536, 2048], "2M": [0, 0, 1]}


def test_format_small_fixture_bytes() -> None:
    expected = (FIXTURES / "mmu_rmaps_stat-small.txt").read_bytes()
    assert format_mmu_rmaps_stat(SMALL).encode() == expected


def peterx_6g_counts() -> dict[str, itertools.chain[int]]:
    """Rmap heads whose ffs buckets give Peter Xu's 6G-guest table (the PTE_LIST_EXT
    thread)."""

    def heads(per_bucket: list[int]) -> itertools.chain[int]:
        # Bucket i >= 1 holds exactly the counts whose lowest set bit is 2^(i-1).
        return itertools.chain.from_iterable(
            itertools.repeat(0 if i == 0 else 1 << (i - 1), n) for i, n in enumerate(per_bucket)
        )

    return {
        "4K": heads([3089171, 49005, 14016, 1363, 235, 212, 15, 7]),
        "2M": heads([5951, 227]),
        "1G": heads([32]),
    }


def test_format_peterx_table_bytes() -> None:
    expected = (FIXTURES / "mmu_rmaps_stat-peterx-6g.txt").read_bytes()
    assert format_mmu_rmaps_stat(peterx_6g_counts()).encode() == expected
    # Powers of two sit in the same bucket either way, so log2 mode differs by the banner.
    log2 = format_mmu_rmaps_stat(peterx_6g_counts(), log2=True)
    assert log2 == LOG2_BANNER + expected.decode()


def test_log2_mode_cannot_pass_for_the_kernel() -> None:
    kernel, log2 = format_mmu_rmaps_stat(SMALL), format_mmu_rmaps_stat(SMALL, log2=True)
    assert log2.startswith("# ") and not kernel.startswith("#")
    assert log2.splitlines()[1:2] == kernel.splitlines()[:1]
    # 3 -> "2-3", 5 and 6 -> "4-7", 12 -> "8-15", 700 -> "512-1023" (and the clamped).
    assert log2.splitlines()[2] == "Level=4K:\t3\t2\t2\t2\t1\t0\t0\t0\t0\t0\t4\t"


def test_histogram_for_the_ui() -> None:
    histogram = RmapHistogram.from_counts(SMALL)
    assert [level for level, _ in histogram.rows()] == ["4K", "2M", "1G"]
    assert histogram.rows()[0][1] == [3, 4, 2, 2, 0, 0, 0, 0, 0, 0, 3]
    assert histogram.clamped == 2  # 1024 and 2048: ffs 11 and 12 hit the WARN_ON_ONCE
    histogram.add("1G", 4, heads=5)
    assert histogram.buckets["1G"][3] == 5 and len(histogram.buckets["1G"]) == RMAP_LOG_SIZE
    with pytest.raises(ValueError):
        histogram.add("512G", 1)
    assert format_mmu_rmaps_stat({}, have_rmaps=False) == ""
    assert format_mmu_rmaps_stat({}).count("\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t\n") == 3


def test_histogram_of_live_rmaps() -> None:
    heads = [filled(era, n) for era, n in [("6.4", 0), ("6.4", 3), ("3", 6), ("14", 40)]]
    text = format_mmu_rmaps_stat({"4K": (h.count() for h in heads)})
    # 0 -> "0", 3 -> "1", 6 -> "2-3", 40 (0b101000) -> "8-15": ffs, not log2.
    assert text.splitlines()[1] == "Level=4K:\t1\t1\t1\t0\t1\t0\t0\t0\t0\t0\t0\t"
