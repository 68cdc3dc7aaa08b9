"""The direct-paging fault path (EPT on, legacy shadow MMU): leaves and rmaps, MMIO sptes
with generations, zaps on memslot updates, under random sequences with an audit."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine import AuditError, KvmError, Vm
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import build_vm, preset
from mmuscope.engine.mmu.direct.mmu import DirectMmu, gfn_to_index
from mmuscope.engine.mmu.rmap import (
    ERAS,
    KvmRmapHead,
    rmap_val_add,
    rmap_val_count,
    rmap_val_remove,
    rmap_val_sptes,
)
from mmuscope.engine.mmu.role import ACC_ALL, PG_LEVEL_2M, PG_LEVEL_4K
from mmuscope.engine.mmu.spte import (
    SPTE_CONFIGS,
    RetPf,
    is_empty_spte,
    is_shadow_present_pte,
    make_spte,
)

MiB, GiB = 1 << 20, 1 << 30
LAPIC = 0xFEE0_0000


def guest(cfg: str = "ept", huge: bool = True) -> tuple[Vm, DirectMmu, list[Event]]:
    vm = build_vm(preset("pc-4g"))
    events: list[Event] = []
    return vm, DirectMmu(vm, SPTE_CONFIGS[cfg], huge_pages=huge, emit=events.append), events


def test_a_ram_fault_maps_a_leaf_and_rmaps_it() -> None:
    _, mmu, events = guest(huge=False)
    assert mmu.page_fault(0, 0x1234_5000) == RetPf.FIXED
    assert mmu.page_fault(0, 0x1234_5000) == RetPf.SPURIOUS  # already there
    heads = mmu.rmaps[(0, 1, PG_LEVEL_4K)]  # slot 1 = ram-1m-to-hole
    # the fault's leaf and, by direct_pte_prefetch(), the other 7 of its aligned group
    assert sum(h.count() for h in heads.values()) == 8
    names = [e.name for e in events]
    assert names.count("kvm_mmu_get_page") == 4  # root, then levels 3, 2, 1
    # direct_map() traces the request first, the spurious second fault too
    assert names[1] == "kvm_mmu_spte_requested"
    assert names[-2:] == ["kvm_mmu_set_spte", "kvm_mmu_spte_requested"]
    assert names.count("kvm_mmu_set_spte") == 8 and mmu.stat["pf_fixed"] == 1
    mmu.audit()


def test_a_2m_aligned_slot_gets_2m_leaves() -> None:
    vm, mmu, _ = guest()
    assert mmu.page_fault(0, 0x4000_0000) == RetPf.FIXED
    assert (0, 1, PG_LEVEL_2M) in mmu.rmaps and (0, 1, PG_LEVEL_4K) not in mmu.rmaps
    assert mmu.max_level(vm.slot(0, 0), 0x10) == PG_LEVEL_4K  # 640 KiB slot: no 2M range
    mmu.audit()


def test_mmio_is_cached_then_hit_without_a_memslot_search() -> None:
    vm, mmu, events = guest()
    assert mmu.page_fault(0, LAPIC) == RetPf.EMULATE
    # then emulated: the in-kernel LAPIC takes the store (no vcpu_match_mmio for its page)
    assert [e.name for e in events][-3:] == ["mark_mmio_spte", "kvm_emulate_insn", "kvm_mmio"]
    searches = 0
    search = vm.vcpu_gfn_to_memslot

    def counting(vcpu: int, gfn: int) -> object:
        nonlocal searches
        searches += 1
        return search(vcpu, gfn)

    vm.vcpu_gfn_to_memslot = counting  # type: ignore[method-assign]
    for _ in range(5):
        assert mmu.page_fault(0, LAPIC) == RetPf.EMULATE
    assert searches == 0
    assert mmu.stat["pf_mmio_spte_created"] == 1
    # the noslot fault filled vCPU 0's MMIO info: vcpu_match_mmio_gpa() answers first
    assert [e.name for e in events][-4:] == ["kvm_emulate_insn", "kvm_mmio"] * 2
    assert mmu.mmio_info.gpa_hits == 5
    assert mmu.page_fault(1, LAPIC) == RetPf.EMULATE  # another vCPU: the spte is checked
    assert [e.name for e in events][-4:] == [
        "check_mmio_spte",
        "handle_mmio_page_fault",
        "kvm_emulate_insn",
        "kvm_mmio",
    ]


def test_a_memslot_update_makes_mmio_sptes_stale() -> None:
    vm, mmu, events = guest()
    mmu.page_fault(0, LAPIC)
    vm.set_user_memory_region(20, 0, 8 * GiB, 2 * MiB, 0x7F10_0000_0000)  # any CREATE
    assert mmu.page_fault(0, LAPIC) == RetPf.EMULATE
    assert mmu.stat["pf_mmio_spte_created"] == 2  # the stale one was rebuilt
    gens = [e.fields["gen"] for e in events if e.name == "mark_mmio_spte"]
    assert gens == [vm.generation() - 2, vm.generation()]
    mmu.audit()


def test_no_mmio_caching_in_2011() -> None:
    _, mmu, _ = guest("2011-no-mmio-cache")
    for _ in range(3):
        assert mmu.page_fault(0, LAPIC) == RetPf.EMULATE
    assert mmu.stat["pf_mmio_spte_created"] == 0


def test_delete_zaps_everything_fast() -> None:
    vm, mmu, events = guest()
    for gpa in range(0, 64 * MiB, 2 * MiB):
        mmu.page_fault(0, 0x1_0000_0000 + gpa)
    used = mmu.pages.n_used_mmu_pages
    vm.set_user_memory_region(2, 0, 0, 0, 0)  # delete ram-above-4g
    assert [e.name for e in events if e.name == "kvm_mmu_zap_all_fast"]
    # vCPU 0's root stays accounted until the vCPU lets go of it
    assert mmu.pages.n_used_mmu_pages == 1 and used > 1
    assert not any(mmu.rmaps.values())
    mmu.audit()
    assert mmu.free_obsolete_roots() == 1 and mmu.pages.n_used_mmu_pages == 0
    mmu.audit()
    assert mmu.page_fault(0, 0x1_0000_0000) == RetPf.EMULATE  # now MMIO
    mmu.audit()


def test_the_19_bit_generation_wraps_into_a_fast_zap() -> None:
    vm, mmu, events = guest()
    mmu.page_fault(0, LAPIC)
    vm.memslot_set(0).generation = (1 << 19) - 2  # just before the wrap
    vm.memslot_set(1).generation = (1 << 19) - 1
    vm.set_user_memory_region(20, 0, 8 * GiB, 2 * MiB, 0x7F10_0000_0000)
    assert any(e.name == "kvm_mmu_zap_all_fast" for e in events)
    mmu.audit()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("ram"), st.integers(0, 4 * GiB // 4096 - 1)),
            st.tuples(st.just("mmio"), st.sampled_from([LAPIC, 0xFEC0_0000, 0xE800_0000])),
            st.tuples(st.just("add"), st.integers(20, 24)),
            st.tuples(st.just("delete"), st.integers(0, 24)),
            st.tuples(st.just("move"), st.integers(20, 24)),
            st.tuples(st.just("zap"), st.just(0)),
        ),
        max_size=40,
    ),
    st.booleans(),
)
def test_random_faults_and_updates_keep_the_invariants(
    ops: list[tuple[str, int]], huge: bool
) -> None:
    vm, mmu, _ = guest(huge=huge)
    for op, arg in ops:
        try:
            if op == "ram":
                mmu.page_fault(arg % 2, arg * 4096 % (4 * GiB), write=bool(arg & 1))
            elif op == "mmio":
                mmu.page_fault(1, arg)
            elif op == "add":
                vm.set_user_memory_region(arg, 0, arg * GiB, 4 * MiB, 0x7F00_0000_0000 + arg * GiB)
            elif op == "delete":
                vm.set_user_memory_region(arg, 0, 0, 0, 0)
            elif op == "move":
                slot = vm.slot(0, arg)
                if slot is not None:
                    vm.set_user_memory_region(
                        arg, 0, (arg + 40) * GiB, slot.npages * 4096, slot.userspace_addr
                    )
            else:
                mmu.zap_all_fast()
        except KvmError:
            pass
        mmu.audit()
        vm.audit()


@pytest.mark.parametrize("cfg", ["ept", "shadow"])
def test_faults_on_every_slot_of_the_guest(cfg: str) -> None:
    vm, mmu, _ = guest(cfg)
    for slot in vm.memslots():
        for gfn in (slot.base_gfn, slot.end_gfn - 1):
            assert mmu.page_fault(0, gfn << 12) == RetPf.FIXED
    mmu.audit()


# -- the fast paths: exact, and the rmap encoding ------------------------------------------


@functools.cache
def _mmu_for(cfg: str) -> DirectMmu:
    return DirectMmu(build_vm(preset("pc-2g")), SPTE_CONFIGS[cfg])


@pytest.mark.parametrize("cfg", sorted(SPTE_CONFIGS))
def test_every_installed_leaf_is_make_spte(cfg: str) -> None:
    """Bare faults, reads and writes, RO and dirty-logged slots, 4K and 2M: each leaf in
    the tables is what `make_spte()` makes for its gfn's pfn."""
    vm = build_vm(preset("pc-4g"))
    mmu = DirectMmu(vm, SPTE_CONFIGS[cfg], pte_prefetch=False)  # fault leaves only
    expected: dict[int, int] = {}  # sptep -> spte
    for n, slot in enumerate(vm.memslots()):
        for gfn in (slot.base_gfn, slot.base_gfn + 1, slot.end_gfn - 1, slot.base_gfn + 777):
            if gfn >= slot.end_gfn:
                continue
            write = bool(n & 1) != bool(gfn & 1)
            if mmu.page_fault(0, gfn << 12, write=write) != RetPf.FIXED:
                continue  # already mapped by this slot's earlier gfn (same 2M leaf)
            level = mmu.max_level(slot, gfn)
            base = gfn & ~((1 << (9 * (level - 1))) - 1)
            pfn = mmu.levels.host.hva_to_pfn(slot.userspace_addr + ((base - slot.base_gfn) << 12))
            spte = make_spte(
                SPTE_CONFIGS[cfg],
                pfn,
                ACC_ALL,
                level,
                writable=not slot.readonly,
                accessed=True,
            )
            val = mmu.rmap_vals[(0, slot.id, level)][gfn_to_index(gfn, slot.base_gfn, level)]
            assert type(val) is int
            expected[val] = spte
    found = {
        sp.sptep(i): spte
        for sp in mmu.pages.pages()
        for i, spte in enumerate(sp.spt)
        if is_shadow_present_pte(spte) and mmu.pages.child_at(sp, i) is None
    }
    assert found == expected
    mmu.audit()


def test_one_spte_is_a_bare_sptep_and_a_second_makes_a_head() -> None:
    """`kvm_rmap_head.val`: a single sptep is stored as itself; the second sptep for the
    gfn makes a head with a desc (1 -> many), which stays a desc down to one entry.

    Direct pages give a gfn one spte per root role, so a second spte in the *same* rmap
    needs a second root of the same address space: a fast zap that has not reached the
    old pages yet (the kernel drops mmu_lock every BATCH_ZAP_PAGES, and vCPUs fault in
    new roots meanwhile; the fast-zap thread (kvm, 2013) defers it to the page budget),
    modelled with `defer_obsolete_zap`."""
    _, mmu, _ = guest(huge=False)
    gpa = 0x1234_5000
    key, index = (0, 1, PG_LEVEL_4K), (0x1234_5000 >> 12) - (1 << 8)
    assert mmu.page_fault(0, gpa) == RetPf.FIXED
    first = mmu.rmap_vals[key][index]
    assert type(first) is int and first & 1 == 0
    assert mmu.rmaps[key][index].is_single and mmu.rmaps[key][index].val == first
    mmu.audit()

    mmu.pages.defer_obsolete_zap = True
    assert mmu.zap_all_fast() == 0  # a new generation, the old pages still there
    assert mmu.page_fault(1, gpa, write=True) == RetPf.FIXED  # vCPU 1: a new root
    head = mmu.rmap_vals[key][index]
    assert isinstance(head, KvmRmapHead) and head.is_many and head.val & 1
    assert head.count() == 2 and first in head and head.stats.desc_allocs == 1
    assert mmu.rmaps[key][index] is head
    mmu.audit()

    mmu.zap_all_fast()  # with the 0/1 flip the deferred zap clears the old pages first
    assert mmu.rmap_vals[key][index] is head  # 2 -> 1 keeps the desc
    assert head.count() == 1 and head.is_many and first not in head
    mmu.audit()

    mmu.pages.zap_all()
    assert index not in mmu.rmap_vals[key]
    mmu.audit()


def test_smm_aliases_of_one_gfn_live_in_two_rmaps() -> None:
    """SMRAM's RAM aliases are separate memslots (address space 1), so the same gfn mapped
    by a normal and an SMM root is two single-sptep rmaps, one per memslot."""
    vm = build_vm(preset("q35-16g"))
    mmu = DirectMmu(vm, huge_pages=False)
    vm.vcpu(1).as_id = 1  # in SMM before its root is loaded
    gfn = 0x12345
    assert mmu.page_fault(0, gfn << 12) == RetPf.FIXED
    assert mmu.page_fault(1, gfn << 12) == RetPf.FIXED
    normal, smm = vm.gfn_to_memslot(gfn, 0), vm.gfn_to_memslot(gfn, 1)
    assert normal is not None and smm is not None and normal is not smm
    a = mmu.rmap_vals[(0, normal.id, PG_LEVEL_4K)][gfn - normal.base_gfn]
    b = mmu.rmap_vals[(1, smm.id, PG_LEVEL_4K)][gfn - smm.base_gfn]
    assert type(a) is int and type(b) is int and a != b
    mmu.audit()


@pytest.mark.parametrize("era", sorted(ERAS))
def test_stored_vals_follow_pte_list_add_and_remove(era: str) -> None:
    sptes = [0x1_0000_0000 + 8 * i for i in range(40)]
    val = None
    ref = KvmRmapHead(era)
    for sptep in sptes:
        assert rmap_val_count(val) == ref.count()
        val = rmap_val_add(val, sptep, era)
        ref.add(sptep)
        assert rmap_val_sptes(val) == list(ref)
    assert isinstance(val, KvmRmapHead)
    for sptep in sptes[::3] + sptes[1::3] + sptes[2::3]:
        ref.remove(sptep)
        val = rmap_val_remove(val, sptep)
        assert rmap_val_sptes(val) == list(ref)
    assert val is None
    assert rmap_val_remove(rmap_val_add(None, sptes[0]), sptes[0]) is None
    with pytest.raises(AuditError):
        rmap_val_remove(sptes[0], sptes[1])


def test_faults_after_a_zap_walk_into_the_pages_made_again() -> None:
    """A fault never installs its leaf into a level-1 page that a zap took out of the
    paging structure: after any zap the walk from the root makes the pages again."""
    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, 64 * MiB, 0x7F00_0000_0000)
    mmu = DirectMmu(vm, huge_pages=False, pte_prefetch=False)  # the neighbours fault
    assert mmu.page_fault(0, 0x1000) == RetPf.FIXED
    used = mmu.pages.n_used_mmu_pages
    assert mmu.page_fault(0, 0x2000) == RetPf.FIXED
    assert mmu.pages.n_used_mmu_pages == used  # the same level-1 page
    (l1,) = [sp for sp in mmu.pages.pages() if sp.role.level == PG_LEVEL_4K]
    mmu.pages.prepare_zap(l1)  # its leaves go, its parent no longer points at it
    assert mmu.page_fault(0, 0x2000) == RetPf.FIXED  # not into the zapped page
    (new,) = [sp for sp in mmu.pages.pages() if sp.role.level == PG_LEVEL_4K]
    assert new is not l1 and is_shadow_present_pte(new.spt[2])
    assert all(is_empty_spte(s) for s in l1.spt)
    mmu.audit()
    mmu.zap_all_fast()
    assert mmu.page_fault(0, 0x3000) == RetPf.FIXED
    assert mmu.pages.n_used_mmu_pages == used  # all made again under a new root
    assert mmu.page_fault(0, 0x3000) == RetPf.SPURIOUS
    mmu.pages.defer_obsolete_zap = True
    mmu.zap_all_fast()  # a new generation, no page zapped: the vCPU needs a new root
    assert mmu.page_fault(0, 0x4000) == RetPf.FIXED
    sp = mmu.roots[0]
    while sp.role.level > PG_LEVEL_4K:
        child = mmu.pages.child_at(sp, (0x4 >> (9 * (sp.role.level - 1))) & 511)
        assert child is not None and not mmu.pages.is_obsolete(child)
        sp = child
    assert is_shadow_present_pte(sp.spt[4])
    mmu.audit()


def test_a_2m_leaf_over_a_page_table_unlinks_it() -> None:
    """4K leaves made while the slot logged dirty pages, then a 2M fault there once it no
    longer does: `mmu_set_spte()` drops the parent pte of the level-1 page (which keeps
    its leaves until it is zapped) and installs the 2M leaf."""
    vm, mmu, _ = guest()
    slot = vm.slot(0, 1)
    assert slot is not None
    vm.set_user_memory_region(1, 1, slot.gpa, slot.size, slot.userspace_addr)  # LOG_DIRTY
    assert mmu.page_fault(0, 0x200 << 12) == RetPf.FIXED
    (l1,) = [sp for sp in mmu.pages.pages() if sp.role.level == PG_LEVEL_4K]
    assert mmu.page_fault(0, 0x201 << 12) == RetPf.FIXED  # the same level-1 page
    vm.set_user_memory_region(1, 0, slot.gpa, slot.size, slot.userspace_addr)
    assert mmu.page_fault(0, 0x202 << 12) == RetPf.FIXED
    assert not l1.parent_ptes and is_shadow_present_pte(l1.spt[0])
    assert is_shadow_present_pte(l1.spt[1])
    assert (0, 1, PG_LEVEL_2M) in mmu.rmaps
    assert mmu.page_fault(0, 0x203 << 12) == RetPf.SPURIOUS  # under the 2M leaf
    mmu.audit()
    mmu.zap_all_fast()
    assert not any(mmu.rmaps.values())
    mmu.audit()


def _state(mmu: DirectMmu) -> tuple[object, ...]:
    pages = [
        (sp.seq, sp.gfn, sp.role.word, sp.mmu_valid_gen, tuple(sp.spt), sp.root_count)
        for sp in mmu.pages.pages()
    ]
    rmaps = {
        key: {index: rmap_val_sptes(val) for index, val in vals.items()}
        for key, vals in mmu.rmap_vals.items()
    }
    return pages, rmaps, dict(mmu.stat), dict(mmu.pages.stat), mmu.pages.lock_holds


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("ram"), st.integers(0, 4 * GiB // 4096 - 1)),
        st.tuples(st.just("near"), st.integers(0, 3000)),
        st.tuples(st.just("mmio"), st.sampled_from([LAPIC, 0xFEC0_0000, 0xE800_0000])),
        st.tuples(st.just("add"), st.integers(20, 24)),
        st.tuples(st.just("delete"), st.integers(0, 24)),
        st.tuples(st.just("dirty"), st.integers(0, 6)),
        st.tuples(st.just("zap"), st.integers(0, 2)),
    ),
    max_size=60,
)


def _apply(vm: Vm, mmu: DirectMmu, op: str, arg: int) -> object:
    try:
        if op in ("ram", "near"):
            gfn = arg if op == "ram" else 0x100 + arg
            return mmu.page_fault(arg % 3, gfn << 12, write=bool(arg & 2))
        if op == "mmio":
            return mmu.page_fault(1, arg)
        if op == "add":
            return vm.set_user_memory_region(
                arg, 0, arg * GiB, 4 * MiB, 0x7F00_0000_0000 + arg * GiB
            )
        if op == "delete":
            return vm.set_user_memory_region(arg, 0, 0, 0, 0)
        if op == "dirty":
            slot = vm.slot(0, arg)
            if slot is None or slot.readonly:
                return None
            flags = slot.flags ^ 1  # KVM_MEM_LOG_DIRTY_PAGES
            return vm.set_user_memory_region(arg, flags, slot.gpa, slot.size, slot.userspace_addr)
        if arg == 0:
            return mmu.zap_all_fast()
        if arg == 1:
            return mmu.pages.zap_oldest(7)
        return mmu.pages.zap_all()
    except KvmError as err:
        return err.errno


@settings(max_examples=60, deadline=None)
@given(OPS, st.booleans())
def test_bare_faults_match_the_traced_ones(ops: list[tuple[str, int]], huge: bool) -> None:
    """The same operations on a traced MMU and on a bare one (no listener: no event is
    made): same answers, same tables, same rmaps, same stats."""
    vm_a, traced, _ = guest(huge=huge)
    vm_b = build_vm(preset("pc-4g"))
    bare = DirectMmu(vm_b, SPTE_CONFIGS["ept"], huge_pages=huge)
    for op, arg in ops:
        assert _apply(vm_a, traced, op, arg) == _apply(vm_b, bare, op, arg)
        assert _state(traced) == _state(bare)
    traced.audit()
    bare.audit()


def test_a_tight_budget_never_zaps_the_page_being_linked() -> None:
    """The budget is made available once per fault, before the walk (a regression: it
    used to run per level and could zap the parent the walk was about to link)."""
    vm = build_vm(preset("pc-4g"))
    mmu = DirectMmu(vm, huge_pages=False)
    mmu.pages.change_mmu_pages(8)
    for gpa in range(0, 64 * MiB, 2 * MiB + 4096):
        mmu.page_fault(0, 0x1000_0000 + gpa)
        mmu.audit()
