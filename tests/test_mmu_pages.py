"""Shadow pages (docs/kvm.md §4): role words, the page hash, the budget, slow and fast
zap with lock breaks, under random operation sequences with an audit after each step."""

from __future__ import annotations

import errno
import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine.errors import KvmError
from mmuscope.engine.events import FieldValue
from mmuscope.engine.export.mmu_dot import pages_to_dot
from mmuscope.engine.mmu.mmu_pages import (
    BATCH_ZAP_PAGES,
    KVM_MIN_ALLOC_MMU_PAGES,
    KvmMmuPage,
    MmuPages,
    default_mmu_pages,
    hash_64,
)
from mmuscope.engine.mmu.role import ACC_ALL, KvmMmuPageRole, tdp_root_role
from mmuscope.engine.mmu.spte import is_empty_spte


def test_role_word_packs_the_kernel_bit_order() -> None:
    role = KvmMmuPageRole(level=4, direct=1, access=7, smm=1, ad_disabled=1)
    # level 4 | direct << 7 | access 7 << 8 | efer_nx << 12 | cr0_wp << 13 | ad << 16 | smm << 24
    assert role.word == 4 | 1 << 7 | 7 << 8 | 1 << 12 | 1 << 13 | 1 << 16 | 1 << 24
    assert KvmMmuPageRole.from_word(role.word) == role
    assert role.access_str == "wux"
    child = role.child(access=3, direct=True)
    assert (child.level, child.access, child.passthrough) == (3, 3, 0)
    with pytest.raises(ValueError):
        KvmMmuPageRole(level=16)


@given(st.integers(0, (1 << 32) - 1))
def test_role_words_round_trip(word: int) -> None:
    word &= ~(0x1F << 19)  # the 5 unused bits
    assert KvmMmuPageRole.from_word(word).word == word


def test_hash_64_is_the_golden_ratio_multiply() -> None:
    assert hash_64(0, 12) == 0
    assert hash_64(1, 12) == 0x61C8864680B583EB >> 52
    assert all(0 <= hash_64(g, 12) < 4096 for g in range(0, 1 << 20, 4099))


def test_default_budget() -> None:
    assert default_mmu_pages(1000) == KVM_MIN_ALLOC_MMU_PAGES
    assert default_mmu_pages(41945090) == 838901  # docs/kvm.md §4.5, from a crash dump


def build_tree(pages: MmuPages, roots: int, fanout: int) -> list[KvmMmuPage]:
    made = []
    for r in range(roots):
        root, _ = pages.get_page(r, tdp_root_role())
        made.append(root)
        for i in range(fanout):
            child, _ = pages.get_page(r * 1000 + i, root.role.child(ACC_ALL, True))
            pages.link(root, i, child)
            made.append(child)
    return made


def test_get_page_finds_before_it_creates_and_says_so() -> None:
    events: list[tuple[str, dict[str, FieldValue]]] = []
    pages = MmuPages(emit=lambda name, **f: events.append((name, f)))
    a, created = pages.get_page(0x100, tdp_root_role())
    b, again = pages.get_page(0x100, tdp_root_role())
    assert created and not again and a is b
    c, _ = pages.get_page(0x100, tdp_root_role(smm=True))  # another role word: another page
    assert c is not a
    assert [e[1]["created"] for e in events] == [True, False, True]
    assert events[0][1] == {
        "gen": 0, "gfn": 0x100, "level": 4, "gpte_bytes": 8, "quadrant": 0, "direct": True,
        "access": 7, "invalid": False, "nxe": True, "ad": True, "root_count": 0,
        "unsync": False, "created": True,
    }  # fmt: skip
    pages.audit()


@pytest.mark.parametrize("era", ["2019", "2013"])
def test_fast_zap_breaks_the_lock_every_ten_pages(era: str) -> None:
    pages = MmuPages(10_000, gen_era=era)
    build_tree(pages, roots=5, fanout=20)  # 105 pages
    pages.audit()
    zapped = pages.zap_all_fast()
    assert zapped == 105 and pages.n_used_mmu_pages == 0
    assert max(pages.lock_holds) == BATCH_ZAP_PAGES and sum(pages.lock_holds) == 105
    assert pages.mmu_valid_gen == 1
    pages.zap_all_fast()
    assert pages.mmu_valid_gen == (2 if era == "2013" else 0)
    pages.audit()


def test_slow_zap_holds_the_lock_for_everything() -> None:
    pages = MmuPages(10_000)
    build_tree(pages, roots=3, fanout=30)
    assert pages.zap_all() == 93 and pages.lock_holds == [93]
    pages.audit()


def test_obsolete_pages_are_skipped_by_lookups() -> None:
    pages = MmuPages(1000)
    old, _ = pages.get_page(7, tdp_root_role())
    old.root_count = 1  # a vCPU still runs on it
    pages.zap_all_fast()
    assert old.role.invalid and old.seq in pages.invalid_roots
    new, created = pages.get_page(7, tdp_root_role())
    assert created and new is not old
    pages.put_root(old)
    assert not pages.invalid_roots
    pages.audit()


def test_budget_zaps_the_oldest_then_refuses() -> None:
    pages = MmuPages(30)
    made = build_tree(pages, roots=1, fanout=26)  # 27 pages: 3 free
    pages.make_mmu_pages_available()  # 3 < 5: zap 22 of the oldest
    assert pages.available() == 25 and pages.stat["mmu_recycled"] == 22
    assert made[0].role.invalid  # the root was the oldest
    pages.audit()
    tight = MmuPages(6)
    for gfn in range(6):
        root, _ = tight.get_page(gfn, tdp_root_role())
        root.root_count = 1  # in use: cannot be reclaimed
    with pytest.raises(KvmError) as refused:
        tight.make_mmu_pages_available()
    assert refused.value.errno == errno.ENOSPC


def test_deferred_fast_zap_reclaims_obsolete_pages_on_demand() -> None:
    """The fast-zap thread's suggestion: the fast zap only starts a generation; the
    budget then frees obsolete pages instead of valid ones."""
    pages = MmuPages(40, defer_obsolete_zap=True)
    old = build_tree(pages, roots=1, fanout=19)  # 20 pages
    assert pages.zap_all_fast() == 0 and pages.lock_holds == []
    assert pages.n_used_mmu_pages == 20 and all(pages.is_obsolete(sp) for sp in old)
    new = build_tree(pages, roots=1, fanout=16)  # 17 valid pages: 3 free
    pages.audit()
    pages.make_mmu_pages_available()  # frees 22 pages: all 20 obsolete ones, then 2 valid
    assert all(sp.role.invalid for sp in old)
    assert sum(sp.role.invalid for sp in new) == 2
    pages.audit()
    pages.zap_all_fast()  # gen 0 again: leftovers of gen 0 must not come back to life
    pages.zap_all_fast()
    assert not any(sp.mmu_valid_gen == pages.mmu_valid_gen for sp in new if not sp.role.invalid)
    pages.audit()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("get"), st.integers(0, 40), st.integers(1, 4)),
            st.tuples(st.just("link"), st.integers(0, 200), st.integers(0, 511)),
            st.tuples(st.just("zap"), st.integers(0, 200), st.just(0)),
            st.tuples(st.just("fast"), st.just(0), st.just(0)),
            st.tuples(st.just("slow"), st.just(0), st.just(0)),
            st.tuples(st.just("avail"), st.just(0), st.just(0)),
            st.tuples(st.just("root"), st.integers(0, 200), st.booleans()),
        ),
        max_size=60,
    ),
    st.sampled_from(["2019", "2013"]),
    st.booleans(),
)
def test_random_operations_keep_the_invariants(
    ops: list[tuple[str, int, int]], era: str, defer: bool
) -> None:
    pages = MmuPages(24, gen_era=era, defer_obsolete_zap=defer)
    for op, a, b in ops:
        live = list(pages.pages())
        try:
            if op == "get":
                pages.make_mmu_pages_available()
                pages.get_page(a, KvmMmuPageRole(level=b, direct=1))
            elif op == "link" and len(live) >= 2:
                parent = max(live, key=lambda sp: sp.role.level)
                child = live[a % len(live)]
                fits = child.role.level < parent.role.level and is_empty_spte(parent.spt[b])
                if fits and not pages.is_obsolete(parent) and not pages.is_obsolete(child):
                    pages.link(parent, b, child)
            elif op == "zap" and live:
                pages.prepare_zap(live[a % len(live)])
            elif op == "fast":
                pages.zap_all_fast()
                assert all(hold <= BATCH_ZAP_PAGES for hold in pages.lock_holds)
                assert defer or not any(pages.is_obsolete(sp) for sp in pages.pages())
            elif op == "slow":
                pages.zap_all()
            elif op == "avail":
                pages.make_mmu_pages_available()
            elif op == "root" and live:
                sp = live[a % len(live)]
                if b:
                    sp.root_count += 1
                elif sp.root_count:
                    pages.put_root(sp)
        except KvmError as err:
            assert err.errno == errno.ENOSPC
        pages.audit()


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot not installed")
def test_the_page_graph_renders_with_graphviz() -> None:
    pages = MmuPages(10_000)
    made = build_tree(pages, roots=2, fanout=3)
    pages.mmu_valid_gen ^= 1  # all obsolete: drawn dashed
    text = pages_to_dot(pages, title="test", path=made[:2])
    assert text.count("->") == 6 and "dashed" in text
    done = subprocess.run(["dot", "-Tplain"], input=text, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sum(line.startswith("node ") for line in done.stdout.splitlines()) == len(made)
