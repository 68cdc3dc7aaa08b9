"""Shadow paging (EPT off): guest page tables, indirect shadow pages, write protection of
shadowed tables, rmaps under a fork storm (the PTE_LIST_EXT thread), MMIO sptes, the vtlb
(the memslot-search thread)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine import KvmError, Vm
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import build_vm, preset
from mmuscope.engine.mmu.guest import page_tables as gpt
from mmuscope.engine.mmu.guest.page_tables import GuestOutOfMemoryError, GuestPageTables
from mmuscope.engine.mmu.params import TdpMmuParams
from mmuscope.engine.mmu.rmap.stat import bucket_labels, format_mmu_rmaps_stat
from mmuscope.engine.mmu.shadow.mmu import ShadowMmu
from mmuscope.engine.mmu.shadow.vtlb import Vtlb
from mmuscope.engine.mmu.spte import PT_WRITABLE_MASK, SPTE_CONFIGS, RetPf, is_empty_spte

MiB, GiB = 1 << 20, 1 << 30
LAPIC_GFN = 0xFEE00
GVA = 0x40_0000  # 4 MiB: PML4[0] PDPT[0] PD[2]
DATA = [0x1000 + i for i in range(4)]  # guest RAM (slot 1)


def guest(cfg: str = "shadow", **kw: object) -> tuple[Vm, ShadowMmu, list[Event]]:
    vm = build_vm(preset("pc-4g"))
    events: list[Event] = []
    return vm, ShadowMmu(vm, SPTE_CONFIGS[cfg], emit=events.append, **kw), events  # type: ignore[arg-type]


def leaf(mmu: ShadowMmu, vcpu: int, gva: int) -> int:
    """The spte the vCPU's shadow tables hold for `gva` (0 when none)."""
    sp = mmu.roots[vcpu]
    while (child := mmu.pages.child_at(sp, gpt.pt_index(gva, sp.role.level))) is not None:
        sp = child
    spte = sp.spt[gpt.pt_index(gva, 1)] if sp.role.level == 1 else 0
    return 0 if is_empty_spte(spte) else spte


def test_one_fault_walks_four_levels_then_sets_the_leaf() -> None:
    _, mmu, events = guest()
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, DATA[0])
    assert mmu.page_fault(0, p, GVA) == RetPf.FIXED
    walk = [e for e in events if e.name.startswith("kvm_mmu_pag") or e.name == "kvm_mmu_set_spte"]
    assert [e.name for e in walk] == [
        "kvm_mmu_pagetable_walk",
        *["kvm_mmu_paging_element"] * 4,
        "kvm_mmu_set_spte",
    ]
    assert walk[0].fields == {"addr": GVA, "pferr": 0}
    assert [e.fields["level"] for e in walk[1:5]] == [4, 3, 2, 1]
    assert gpt.pte_gfn(int(walk[4].fields["pte"])) == DATA[0]
    assert walk[5].fields["gfn"] == DATA[0] and walk[5].fields["level"] == 1
    gets = [e for e in events if e.name == "kvm_mmu_get_page"]
    assert [(e.fields["level"], e.fields["direct"]) for e in gets] == [
        (4, False),
        (3, False),
        (2, False),
        (1, False),
    ]
    assert gets[0].fields["gfn"] == p  # the root shadows the guest's PML4
    assert sum(e.name == "kvm_mmu_set_accessed_bit" for e in events) == 4
    assert not leaf(mmu, 0, GVA) & PT_WRITABLE_MASK  # a read of a clean gpte: read-only
    assert mmu.page_fault(0, p, GVA) == RetPf.SPURIOUS
    assert mmu.page_fault(0, p, GVA, write=True) == RetPf.FIXED  # sets D, then W
    assert any(e.name == "kvm_mmu_set_dirty_bit" for e in events)
    assert leaf(mmu, 0, GVA) & PT_WRITABLE_MASK
    mmu.audit()


def test_a_guest_page_fault_is_injected_and_retried() -> None:
    _, mmu, events = guest()
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, DATA[0], writable=False, user=False)
    assert mmu.page_fault(0, p, GVA + 4096) == RetPf.RETRY  # not present: no P bit
    assert mmu.injected[0] == (GVA + 4096, 0)
    assert mmu.page_fault(0, p, GVA, write=True) == RetPf.RETRY
    assert mmu.injected[0] == (GVA, gpt.PFERR_PRESENT_MASK | gpt.PFERR_WRITE_MASK)
    assert mmu.page_fault(0, p, GVA, user=True) == RetPf.RETRY
    assert mmu.injected[0][1] == gpt.PFERR_PRESENT_MASK | gpt.PFERR_USER_MASK
    assert mmu.stat["pf_guest"] == 3
    assert [e.name for e in events].count("kvm_mmu_walker_error") == 3
    mmu.audit()


@pytest.mark.parametrize("children", [1, 3, 7, 15, 31])
def test_a_fork_storm_moves_the_rmap_histogram_right(children: int) -> None:
    _, mmu, _ = guest()
    parent = mmu.guest.spawn()
    for i, gfn in enumerate(DATA):  # all mapped before KVM shadows the table: no store
        mmu.guest.map(parent, GVA + i * 4096, gfn)  # faults through the direct map
    for i in range(len(DATA)):
        mmu.page_fault(0, parent, GVA + i * 4096)
    for _ in range(children):
        child = mmu.guest.fork(parent)
        for i in range(len(DATA)):
            assert mmu.page_fault(1, child, GVA + i * 4096) == RetPf.FIXED
    assert [mmu.rmap_count(gfn) for gfn in DATA] == [children + 1] * len(DATA)
    histogram = mmu.rmaps_stat()
    row = dict(histogram.rows())["4K"]
    bucket = (children + 1).bit_length()  # a power of two: ffs() is exact
    assert row[bucket] == len(DATA) and sum(row[1:]) == len(DATA)
    text = histogram.format()
    assert text.splitlines()[0].split("\t")[bucket + 1] == bucket_labels()[bucket]
    mmu.audit()


def test_fifty_children_and_what_mmu_rmaps_stat_prints() -> None:
    _, mmu, _ = guest()
    parent = mmu.guest.spawn()
    for i, gfn in enumerate(DATA):  # all mapped before KVM shadows the table: no store
        mmu.guest.map(parent, GVA + i * 4096, gfn)  # faults through the direct map
    for i in range(len(DATA)):
        mmu.page_fault(0, parent, GVA + i * 4096)
    before = mmu.rmaps_stat(log2=True).rows()[0][1]
    for n in range(50):
        child = mmu.guest.fork(parent)
        for i in range(len(DATA)):
            mmu.page_fault(n % 4, child, GVA + i * 4096)
    assert [mmu.rmap_count(gfn) for gfn in DATA] == [51] * 4
    counts = [h.count() for heads in mmu.rmaps.values() for h in heads.values()]
    assert sorted(counts) == [51] * 4
    # The kernel's ffs() puts 51 (0b110011) in bucket "1"; log2 buckets say "32-63".
    assert format_mmu_rmaps_stat({"4K": counts}).split("\n")[1].split("\t")[2] == "4"
    after = mmu.rmaps_stat(log2=True).rows()[0][1]
    assert before[1] == 4 and after[1] == 0 and after[6] == 4  # moved right
    assert mmu.rmaps_stat().format().startswith("Rmap_Count:\t0\t1\t2-3\t")
    mmu.audit()
    mmu.drop_process(parent)
    assert [mmu.rmap_count(gfn) for gfn in DATA] == [50] * 4
    mmu.audit()


def test_shadowing_a_table_write_protects_it_and_a_write_is_emulated() -> None:
    _, mmu, events = guest()
    p, q = mmu.guest.spawn(), mmu.guest.spawn()
    mmu.guest.map(q, GVA, DATA[0])
    mmu.guest.map(p, GVA, q)  # p maps q's PML4 (a kernel's direct map would)
    assert mmu.page_fault(0, p, GVA, write=True) == RetPf.FIXED
    assert leaf(mmu, 0, GVA) & PT_WRITABLE_MASK  # q's tables are not shadowed yet
    mmu.cr3_load(1, q)  # account_shadowed(q's PML4): the leaf loses W
    assert not leaf(mmu, 0, GVA) & PT_WRITABLE_MASK
    assert [e.fields for e in events if e.name == "account_shadowed"][-1]["wrprot"] == 1
    mmu.audit()
    assert mmu.page_fault(1, q, GVA) == RetPf.FIXED  # shadows q's lower tables too
    assert mmu.shadow_pages_of(q)
    assert mmu.page_fault(0, p, GVA) == RetPf.SPURIOUS  # reads are fine
    assert mmu.page_fault(0, p, GVA, write=True) == RetPf.EMULATE
    # RET_PF_WRITE_PROTECTED, emulated: the store (the guest's write_pte) is tracked,
    # kvm_mmu_track_write zaps that spte only; the third in a row floods the page
    assert mmu.shadow_pages_of(q)
    index = gpt.pt_index(GVA, 4)
    for store in range(3):
        mmu.guest.write_pte(q, index, mmu.guest.pte(q, index))
        assert mmu.pages.stat["mmu_pte_write"] == store + 1
        assert bool(mmu.shadow_pages_of(q)) == (store < 2)
    assert mmu.pages.stat["mmu_flooded"] == 1
    zaps = [e for e in events if e.name == "kvm_mmu_prepare_zap_page"]
    assert zaps[-1].fields["gfn"] == q and zaps[-1].fields["level"] == 4
    mmu.audit()
    # The root is reloaded (shadowing q's PML4 again) and relinked to the lower pages,
    # which kept their leaf: nothing left to fix.
    assert mmu.page_fault(1, q, GVA) == RetPf.SPURIOUS
    assert mmu.shadow_pages_of(q) and not leaf(mmu, 0, GVA) & PT_WRITABLE_MASK
    mmu.audit()


def test_a_write_that_would_map_its_own_table_is_emulated() -> None:
    _, mmu, _ = guest()
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, p)  # the PML4 mapped into itself
    # mmu_set_spte() made the spte read-only (write-tracked gfn) before emulating
    assert mmu.page_fault(0, p, GVA, write=True) == RetPf.EMULATE
    assert mmu.page_fault(0, p, GVA) == RetPf.SPURIOUS
    assert not leaf(mmu, 0, GVA) & PT_WRITABLE_MASK
    mmu.audit()


def test_guest_pte_stores_zap_the_shadowed_spte() -> None:
    _, mmu, _ = guest()
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, DATA[0])
    mmu.page_fault(0, p, GVA, write=True)
    # mprotect: the level-1 table goes unsync at the store; the guest's INVLPG syncs the
    # spte (FNAME(sync_spte)): read-only now, still on its rmap
    mmu.guest.protect(p, GVA, writable=False)
    assert leaf(mmu, 0, GVA) and not leaf(mmu, 0, GVA) & PT_WRITABLE_MASK
    assert mmu.rmap_count(DATA[0]) == 1 and mmu.pages.stat["mmu_unsync"] == 1
    assert mmu.page_fault(0, p, GVA, write=True) == RetPf.RETRY
    mmu.guest.protect(p, GVA, writable=True)  # the INVLPG's sync made it writable again
    assert mmu.page_fault(0, p, GVA, write=True) == RetPf.SPURIOUS
    mmu.guest.map(p, GVA, DATA[1])  # remap: the old leaf goes
    assert mmu.rmap_count(DATA[0]) == 0
    assert mmu.page_fault(0, p, GVA) == RetPf.FIXED and mmu.rmap_count(DATA[1]) == 1
    mmu.guest.unmap(p, GVA)
    assert mmu.page_fault(0, p, GVA) == RetPf.RETRY
    mmu.audit()


def test_a_cow_fork_write_protects_the_parent() -> None:
    _, mmu, _ = guest()
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, DATA[0])
    mmu.page_fault(0, p, GVA, write=True)
    child = mmu.guest.fork(p, cow=True)
    # the parent's pte lost W: its table went unsync, the flush synced the spte read-only
    assert leaf(mmu, 0, GVA) and not leaf(mmu, 0, GVA) & PT_WRITABLE_MASK
    assert mmu.page_fault(0, p, GVA, write=True) == RetPf.RETRY  # the guest's COW fault
    assert mmu.page_fault(1, child, GVA) == RetPf.FIXED
    assert mmu.rmap_count(DATA[0]) == 2
    mmu.audit()


def test_a_guest_huge_page_is_shadowed_by_direct_pages() -> None:
    """On 4K host pages (`host_pfn_mapping_level`): a direct level-1 page below it."""
    _, mmu, events = guest(params=TdpMmuParams(tdp_mmu=False, host_level=1))
    p = mmu.guest.spawn()
    mmu.guest.map(p, 0x4000_0000, 0x10_0000, level=2)  # 2M at 1 GiB -> gfn 0x100000 (4G)
    assert mmu.page_fault(0, p, 0x4000_0000 + 5 * 4096) == RetPf.FIXED
    last = [e for e in events if e.name == "kvm_mmu_get_page"][-1]
    assert last.fields["direct"] and last.fields["gfn"] == 0x10_0000
    assert mmu.rmap_count(0x10_0005) == 1
    mmu.audit()


def test_mmio_is_cached_with_its_generation_then_hit_without_a_walk() -> None:
    vm, mmu, events = guest()
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, LAPIC_GFN, user=False)
    assert mmu.page_fault(0, p, GVA, write=True) == RetPf.EMULATE
    assert [e.name for e in events][-1] == "mark_mmio_spte"  # then the emulator's kvm_mmio:
    assert mmu.emulate_instruction(0, GVA, True) is None
    assert [e.name for e in events][-2:] == ["vcpu_match_mmio", "kvm_mmio"]
    walks = sum(e.name == "kvm_mmu_pagetable_walk" for e in events)
    for _ in range(3):
        assert mmu.page_fault(0, p, GVA, write=True) == RetPf.EMULATE
    assert sum(e.name == "kvm_mmu_pagetable_walk" for e in events) == walks
    # the noslot fault filled the vCPU's MMIO info: mmio_info_in_cache() answers first
    assert not [e for e in events if e.name == "handle_mmio_page_fault"]
    assert mmu.mmio_info.gva_hits == 1 + 3  # the emulator's, then three faults
    mmu.invlpg(0, GVA)  # vcpu_clear_mmio_info(): now the spte itself is checked
    assert mmu.page_fault(0, p, GVA, write=True) == RetPf.EMULATE
    assert [e.name for e in events if e.name.endswith("mmio_spte")][-1] == "check_mmio_spte"
    hit = [e for e in events if e.name == "handle_mmio_page_fault"][-1]
    assert hit.fields["addr"] == GVA and hit.fields["gfn"] == LAPIC_GFN
    # handle_mmio_page_fault() emulates whatever the access: the
    # emulator, not the fault path, finds that a user access to a supervisor page faults
    assert mmu.page_fault(0, p, GVA, user=True) == RetPf.EMULATE
    vm.set_user_memory_region(20, 0, 8 * GiB, 2 * MiB, 0x7F10_0000_0000)  # any CREATE
    assert mmu.page_fault(0, p, GVA) == RetPf.EMULATE
    assert mmu.stat["pf_mmio_spte_created"] == 2
    gens = [e.fields["gen"] for e in events if e.name == "mark_mmio_spte"]
    assert gens == [vm.generation() - 2, vm.generation()]
    mmu.audit()


@pytest.mark.parametrize("policy", ["round-robin", "hash"])
def test_the_vtlb_saves_walks_until_cr3_load_or_invlpg(policy: str) -> None:
    # no MMIO sptes, and 2011's kernel: no per-vCPU MMIO info either (3.1)
    _, mmu, events = guest("shadow-52bit", vtlb=True, vtlb_policy=policy, mmio_info_cache=False)
    p, other = mmu.guest.spawn(), mmu.guest.spawn()
    mmu.guest.map(p, GVA, DATA[0])
    mmu.guest.map(p, GVA + 4096, LAPIC_GFN)
    mmu.guest.map(other, GVA, DATA[1])

    def walks() -> int:
        return sum(e.name == "kvm_mmu_pagetable_walk" for e in events)

    assert mmu.page_fault(0, p, GVA) == RetPf.FIXED  # builds the shadow path
    assert mmu.vtlbs is not None
    vtlb = mmu.vtlbs[0]
    before = walks()
    for _ in range(5):
        assert mmu.page_fault(0, p, GVA + 4096) == RetPf.EMULATE  # uncached MMIO
    assert walks() == before + 1 and vtlb.hits == 4 and vtlb.walks_saved == 4
    assert mmu.gva_to_gpa(0, GVA + 4096 + 0x30) == LAPIC_GFN << 12 | 0x30
    assert vtlb.hits == 5
    mmu.page_fault(0, other, GVA)  # CR3 load: flushed
    mmu.page_fault(0, p, GVA + 4096)
    assert walks() == before + 3 and vtlb.flushes >= 2
    mmu.page_fault(0, p, GVA + 4096)
    assert walks() == before + 3
    mmu.invlpg(0, GVA + 4096)
    mmu.page_fault(0, p, GVA + 4096)
    assert walks() == before + 4
    mmu.guest.unmap(p, GVA + 4096)  # the guest's own INVLPG drops the entry
    assert mmu.page_fault(0, p, GVA + 4096) == RetPf.RETRY
    mmu.audit()


def test_without_the_vtlb_every_uncached_mmio_fault_walks() -> None:
    _, mmu, events = guest("shadow-52bit")
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, LAPIC_GFN)
    for _ in range(5):
        assert mmu.page_fault(0, p, GVA) == RetPf.EMULATE
    assert sum(e.name == "kvm_mmu_pagetable_walk" for e in events) == 5
    assert mmu.vtlbs is None


def test_vtlb_replacement_and_access() -> None:
    rr, hashed = Vtlb(), Vtlb(policy="hash")
    for page in range(17):
        rr.insert(page << 12, page, 7)
        hashed.insert(page << 12, page, 7)
    assert rr.lookup(0) is None and rr.lookup(16 << 12) is not None  # oldest slot reused
    assert hashed.lookup(0) is None and hashed.lookup(1 << 12) is not None  # 16 % 16 == 0
    assert rr.evictions == 1 and hashed.evictions == 1
    rr.insert(5 << 12, 99, 0)  # same page: replaced in place, read-only, supervisor
    assert rr.lookup(5 << 12, write=True) is None and rr.lookup(5 << 12, user=True) is None
    entry = rr.lookup(5 << 12)
    assert entry is not None and entry.frame_number == 99
    rr.audit()
    hashed.audit()
    with pytest.raises(ValueError):
        Vtlb(policy="lru")


def test_an_rmap_past_the_recycle_threshold_is_zapped() -> None:
    _, mmu, _ = guest()
    p = mmu.guest.spawn()
    for i in range(1002):
        mmu.guest.map(p, GVA + i * 4096, DATA[0])
        mmu.page_fault(0, p, GVA + i * 4096)
    # the last add zapped the whole rmap, its own spte too; then FNAME(pte_prefetch)
    # mapped gva 1000 of the group 1000-1007 back (1002 on are not mapped: it stops)
    assert mmu.stat["rmap_recycled"] == 1002 and mmu.rmap_count(DATA[0]) == 1
    mmu.audit()


def test_deleting_the_slot_of_the_tables_makes_walks_fail() -> None:
    vm, mmu, events = guest()
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, DATA[0])
    mmu.page_fault(0, p, GVA)
    slot = vm.slot(0, 1)
    assert slot is not None and p in range(slot.base_gfn, slot.end_gfn)
    vm.set_user_memory_region(1, 0, 0, 0, 0)
    assert any(e.name == "kvm_mmu_zap_all_fast" for e in events)
    assert mmu.page_fault(0, p, GVA) == RetPf.RETRY  # the PML4 is in no memslot
    mmu.audit()
    vm.set_user_memory_region(1, 0, slot.gpa, slot.size, slot.userspace_addr)
    assert mmu.page_fault(0, p, GVA) == RetPf.FIXED
    mmu.audit()


def test_the_guest_tables_audit_and_allocator() -> None:
    tables = GuestPageTables(range(0x100, 0x108))
    p = tables.spawn()
    tables.map(p, GVA, 0x5000)
    child = tables.fork(p)
    assert tables.translate(child, GVA + 0x123).gfn == 0x5000
    with pytest.raises(GuestOutOfMemoryError):
        tables.fork(p)
    tables.audit()
    freed = tables.exit(child)
    assert len(freed) == 4 and tables.translate(p, GVA).gfn == 0x5000
    with pytest.raises(ValueError):
        tables.map(p, GVA, 0x5001, level=2)  # misaligned huge gfn
    tables.audit()


# -- the property test -------------------------------------------------------------------

GVAS = [GVA + i * 4096 for i in range(4)] + [0x80_0000_0000, 0x4000_0000, 0x4000_5000]
TARGETS = [0x1000, 0x1001, 0x10_0000, 0x10_0001, 0x50_0000, LAPIC_GFN, 0xFEC00, -1, -2]
HUGE_GVAS = [0x4000_0000, 0x4000_5000, 0x40_0000_0000, 0x40_0020_5000]  # 2M, 2M, 1G, 1G
Op = tuple[str, int, int, int, bool, bool]  # name, process, gva, target/vcpu, flag, flag


def _run(mmu: ShadowMmu, vm: Vm, op: Op, slot2: tuple[int, int, int]) -> None:
    name, a, b, c, x, y = op
    guest = mmu.guest
    procs = sorted(guest.processes) or [guest.spawn()]
    proc, gva = procs[a % len(procs)], GVAS[b % len(GVAS)]
    if name == "map":
        target = TARGETS[c % len(TARGETS)]
        if target == -1:  # a table: the guest maps one of its page tables
            target = sorted(guest.tables)[c % len(guest.tables)]
        elif target == -2:  # a page the allocator hands out soon: a table later, then
            target = max(guest.allocated) + 4 + c % 4  # write-protected by account_shadowed
        guest.map(proc, gva, target, writable=x, user=y)
    elif name == "map2m":  # 0x4000_0000: a 2M page of slot 2 (or of nothing, or tables)
        target = [0x10_0000, 0x10_0200, 0x50_0000, max(guest.allocated) & ~511][c % 4]
        guest.map(proc, 0x4000_0000, target, x, y, level=2, nx=c > 7)
    elif name == "map1g":  # a 1G page over slot 2 (2M sptes at most)
        guest.map(proc, HUGE_GVAS[2], 0x10_0000, x, y, level=3, nx=c > 11)
    elif name == "unmap":
        guest.unmap(proc, gva)
    elif name == "protect":
        guest.protect(proc, gva, writable=x)
    elif name == "fork":
        guest.fork(proc, cow=x)
    elif name == "spawn":
        guest.spawn()
    elif name == "exit":
        mmu.drop_process(proc)
    elif name == "fault":
        mmu.page_fault(c % 3, proc, gva, write=x, user=y)
    elif name == "fetch":  # an instruction fetch: NX huge pages split
        mmu.page_fault(c % 3, proc, HUGE_GVAS[b % 4], user=y, fetch=True)
    elif name == "fault_huge":
        mmu.page_fault(c % 3, proc, HUGE_GVAS[b % 4], write=x, user=y)
    elif name == "recover":
        mmu.kvm_recover_nx_huge_pages()
    elif name == "invlpg":
        mmu.invlpg(c % 3, gva)
    elif name == "cr3":
        mmu.cr3_load(c % 3, proc)
    elif name == "slot":
        if c % 5 == 0:
            vm.set_user_memory_region(20, 0, 20 * GiB, 4 * MiB, 0x7F00_0000_0000)
        elif c % 5 == 1:
            vm.set_user_memory_region(20, 0, 0, 0, 0)
        elif c % 5 == 2 and vm.slot(0, 20) is not None:
            vm.set_user_memory_region(20, 0, (20 + b % 3) * GiB, 4 * MiB, 0x7F00_0000_0000)
        elif c % 5 == 3:
            vm.set_user_memory_region(2, 0, 0, 0, 0)
        else:
            vm.set_user_memory_region(2, 0, *slot2)
    else:
        mmu.zap_all_fast()


OPS = st.tuples(
    st.sampled_from(
        ["map"] * 3
        + ["fault"] * 8
        + ["map2m", "unmap", "protect", "fork", "fork", "spawn", "exit", "invlpg", "cr3"]
        + ["slot", "zap", "map2m", "map1g", "map1g", "recover"]
        + ["fetch", "fault_huge"] * 3
    ),
    st.integers(0, 3),
    st.integers(0, len(GVAS) - 1),
    st.integers(0, 15),
    st.booleans(),
    st.booleans(),
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(OPS, min_size=10, max_size=60),
    st.sampled_from([None, "round-robin", "hash"]),
    st.sampled_from([(2, "off"), (1, "off"), (2, "on"), (3, "on")]),
)
def test_random_guests_keep_every_invariant(
    ops: list[Op], vtlb: str | None, host: tuple[int, str]
) -> None:
    """Map (4K, 2M, 1G)/unmap/protect/fork/exit and faults (read/write/fetch, user or
    not) on 3 vCPUs, with memslot updates, fast zaps and NX recovery, on host pages of
    4K/2M/1G with nx_huge_pages off or on, `audit()` after every step."""
    vm = build_vm(preset("pc-4g"))
    params = TdpMmuParams(tdp_mmu=False, host_level=host[0], nx_huge_pages=host[1])
    mmu = ShadowMmu(vm, vtlb=vtlb is not None, vtlb_policy=vtlb or "round-robin", params=params)
    slot2 = vm.slot(0, 2)
    assert slot2 is not None
    first = mmu.guest.spawn()
    for gva, gfn in zip(GVAS[:5], TARGETS, strict=False):
        mmu.guest.map(first, gva, gfn)
    # GVAS[4] -> the next page the allocator hands out: a table of the next process, so a
    # writable leaf for it must lose W when that table is shadowed (account_shadowed).
    mmu.guest.map(first, GVAS[4], max(mmu.guest.allocated) + 1)
    for op in ops:
        # KvmError: a refused memslot update; ValueError: a map over a huge page or a table.
        with contextlib.suppress(KvmError, ValueError):
            _run(mmu, vm, op, (slot2.gpa, slot2.size, slot2.userspace_addr))
        mmu.audit()
        vm.audit()


def test_zapping_a_table_zaps_its_unsync_children_first() -> None:
    """`__kvm_mmu_prepare_zap_page()` → `mmu_zap_unsync_children()` (6.18 mmu.c): the
    level-1 page the guest's mprotect left unsync is zapped right after its level-2
    parent's own `kvm_mmu_prepare_zap_page` line, before the parent lets go of it."""
    _, mmu, events = guest()
    p = mmu.guest.spawn()
    mmu.guest.map(p, GVA, DATA[0])
    mmu.page_fault(0, p, GVA, write=True)
    mmu.guest.protect(p, GVA, writable=False)  # the level-1 table goes unsync
    assert mmu.pages.stat["mmu_unsync"] == 1
    sp = mmu.roots[0]
    while sp.role.level > 2:
        child = mmu.pages.child_at(sp, gpt.pt_index(GVA, sp.role.level))
        assert child is not None
        sp = child
    l1 = mmu.pages.child_at(sp, gpt.pt_index(GVA, 2))
    assert l1 is not None and l1.unsync
    used, seen = mmu.pages.n_used_mmu_pages, len(events)
    assert mmu.pages.prepare_zap(sp) == 2  # nr_zapped: the unsync child, then itself
    zaps = [e.fields for e in events[seen:] if e.name == "kvm_mmu_prepare_zap_page"]
    assert [(z["level"], z["unsync"]) for z in zaps] == [(2, False), (1, True)]
    assert l1.seq not in mmu.pages.active_mmu_pages and l1.role.invalid
    assert mmu.pages.stat["mmu_unsync"] == 0 and mmu.pages.n_used_mmu_pages == used - 2
    assert leaf(mmu, 0, GVA) == 0 and mmu.rmap_count(DATA[0]) == 0
    mmu.audit()
