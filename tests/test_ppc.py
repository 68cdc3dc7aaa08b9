"""POWER hash page table and the POWER-keys thread's key faults (engine/ppc, docs/kvm.md
§8).

Unit tests pin the kernel's bits (keys in HPTE dword 1, the AMR pairs, the hash and its
secondary), the search's HPTE counts, H_ENTER's marks per era and the pfault program's
fault count.  Property tests drive random guest/host operations on both eras in lockstep
and audit after every step: a key-31 HPTE is never forwarded to the guest, the keys
classify every fault as the hash search does, a NO_HPTE fault under keys never searches,
and a run is a function of its seed.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mmuscope.engine.claims.ppc_keys import COLUMNS
from mmuscope.engine.claims.table import ClaimTable
from mmuscope.engine.errors import AuditError
from mmuscope.engine.ppc.faults import (
    CACHED,
    CLASSIFY,
    EMULATED,
    FORWARDED,
    LOCATE,
    NO_SEARCH,
    PAGED_IN,
    FaultRecord,
    classify_by_search,
)
from mmuscope.engine.ppc.guest import LinuxGuest
from mmuscope.engine.ppc.hpt import HashPageTable
from mmuscope.engine.ppc.hpte import (
    ABSENT,
    DSISR_KEYFAULT,
    DSISR_NOHPTE,
    HPTE_R_KEY_HI,
    HPTE_R_KEY_LO,
    HPTE_V_ABSENT,
    HPTE_V_SECONDARY,
    HPTE_V_VALID,
    MMIO,
    SWAPPED,
    VALID,
    Hpte,
    hpte_key,
    key_to_r,
)
from mmuscope.engine.ppc.keys import (
    ERAS,
    H_PARAMETER,
    H_PTEG_FULL,
    H_SUCCESS,
    Amr,
    amr_bits,
    key_conflict,
)
from mmuscope.engine.ppc.machine import PpcMachine
from mmuscope.engine.ppc.pfault import DEMO, DEMO_ORDER, PFAULT, PRESSURE, PfaultProgram, PfaultRun
from mmuscope.engine.ppc.views import searched_groups_dot

from tests.test_bench_claims import tables  # noqa: F401  (the shared quick run)

KEYS, TODAY = "2014-keys", "today"
SHIFT = 16
MMIO_GPA = 1 << 40


def hpte(hpt: HashPageTable, vpn: int, v: int, key: int = 0, guest_key: int = 0) -> Hpte:
    return Hpte.make(vpn, v, key_to_r(key), key_to_r(guest_key))


# -- bits: keys, AMR, hash ---------------------------------------------------------------


def test_key_bits_round_trip_as_hpte_get_skey_perm_reads_them() -> None:
    assert key_to_r(31) == HPTE_R_KEY_HI | HPTE_R_KEY_LO
    assert key_to_r(30) == HPTE_R_KEY_HI | 0xC00
    for key in range(32):
        assert hpte_key(key_to_r(key) | 0x1234_5000 | 0x3) == key
    with pytest.raises(ValueError):
        key_to_r(32)


def test_amr_pairs_deny_loads_with_bit_0_and_stores_with_bit_1() -> None:
    assert amr_bits(31) == 0x3 and amr_bits(30) == 0xC and amr_bits(0) == 0xC << 60
    keyed = Amr(ERAS[KEYS])
    assert keyed.value == 0xF
    for key in (30, 31):
        assert keyed.denies(key, store=False) and keyed.denies(key, store=True)
    assert not keyed.denies(0, store=True)
    keyed.guest_write(0)  # the guest tries to allow everything: AMOR keeps the host's bits
    assert keyed.value == 0xF
    keyed.guest_write(amr_bits(5, read=False))
    assert keyed.denies(5, store=True) and not keyed.denies(5, store=False)
    keyed.audit()
    today = Amr(ERAS[TODAY])
    today.guest_write(amr_bits(31))
    assert today.value == 0x3  # the guest owns key 31 today
    today.audit()


def test_guests_lose_keys_30_and_31_with_the_keys_era() -> None:
    assert len(ERAS[KEYS].guest_keys) == 30 and 30 not in ERAS[KEYS].guest_keys
    assert ERAS[TODAY].guest_keys == tuple(range(32))
    assert "host-swapped" in key_conflict(ERAS[KEYS], 30)
    assert "MMIO" in key_conflict(ERAS[KEYS], 31)
    assert key_conflict(ERAS[KEYS], 29) == "" and key_conflict(ERAS[TODAY], 31) == ""
    for era, refused in ((KEYS, True), (TODAY, False)):
        machine = PpcMachine(era, order=12, ram_pages=64)
        vpn = machine.hpt.vpn(0x1234, 0)
        ret, _ = machine.h_enter(machine.hpt.hash_of(vpn), vpn, 0, True, key=30)
        assert (ret == H_PARAMETER) == refused
        machine.audit()


def test_hash_is_vsid_xor_page_and_the_secondary_its_complement() -> None:
    hpt = HashPageTable(order=14, page_shift=SHIFT)  # 128 groups
    vsid, ea = 0x2F5_A3C1, 0x3FF0_0123_4567
    vpn = hpt.vpn(vsid, ea)
    want = (vsid ^ ((ea & ((1 << 28) - 1)) >> SHIFT)) & 0x7F  # kvmppc_hv_find_lock_hpte
    assert hpt.groups_of(vpn) == (want, want ^ 0x7F)
    assert HashPageTable().n_groups == 1 << 17  # KVM_DEFAULT_HPT_ORDER 24: 16 MB


def test_search_counts_hptes_as_the_kernel_loop_does() -> None:
    hpt = HashPageTable(order=12, page_shift=SHIFT)
    vpn = hpt.vpn(0x77, 0x5_0000)
    primary, secondary = hpt.groups_of(vpn)
    miss = hpt.search(vpn, trace=True)
    assert (miss.slot, miss.examined, miss.groups_read) == (-1, 16, 2)
    assert miss.probes == tuple(range(primary * 8, primary * 8 + 8)) + tuple(
        range(secondary * 8, secondary * 8 + 8)
    )
    hpt.insert(secondary * 8 + 2, hpte(hpt, vpn, HPTE_V_ABSENT | HPTE_V_SECONDARY))
    found = hpt.search(vpn, trace=True)
    assert (found.slot, found.examined, found.groups_read) == (secondary * 8 + 2, 11, 2)
    assert found.probes[-1] == found.slot
    assert hpt.search(vpn, HPTE_V_VALID).examined == 16  # absent: no match for valid only
    hpt.remove(secondary * 8 + 2)
    hpt.insert(primary * 8 + 5, hpte(hpt, vpn, HPTE_V_VALID))
    assert hpt.search(vpn).examined == 6
    hpt.audit()


def test_audit_catches_a_broken_table() -> None:
    hpt = HashPageTable(order=12, page_shift=SHIFT)
    vpn = hpt.vpn(0x77, 0)
    primary, _ = hpt.groups_of(vpn)
    hpt.insert(primary * 8, hpte(hpt, vpn, HPTE_V_VALID))
    hpt.audit()
    with pytest.raises(ValueError):
        hpt.insert(primary * 8 + 1, hpte(hpt, vpn, HPTE_V_VALID))  # a second HPTE, same VA
    hpt.slots[primary * 8 + 1] = hpte(hpt, vpn, HPTE_V_VALID)  # forced past the checks
    with pytest.raises(AuditError):
        hpt.audit()
    hpt.slots[primary * 8 + 1] = None
    other = (primary + 1) % hpt.n_groups
    hpt.slots[primary * 8] = None
    hpt.slots[other * 8] = hpte(hpt, vpn, HPTE_V_VALID)  # in a group its hash does not name
    hpt.used[primary], hpt.used[other] = 0, 1
    hpt.index[vpn] = other * 8
    with pytest.raises(AuditError, match="hash group"):
        hpt.audit()


# -- H_ENTER marks and the handler, era by era ----------------------------------------------


def entered(era: str, gpa: int, swapped: bool = False) -> tuple[PpcMachine, int, Hpte]:
    machine = PpcMachine(era, order=12, ram_pages=64)
    if swapped:
        machine.host_swap_out(gpa >> SHIFT)
    vpn = machine.hpt.vpn(0x99, 0x3_0000)
    ret, slot = machine.h_enter(machine.hpt.hash_of(vpn), vpn, gpa, True)
    assert ret == H_SUCCESS
    entry = machine.hpt.entry(slot)
    assert entry is not None
    machine.audit()
    return machine, vpn, entry


def test_mmio_is_key_31_absent_today_and_valid_with_keys() -> None:
    _, _, today = entered(TODAY, MMIO_GPA)
    assert today.absent and not today.valid and today.key == 31 and today.kind == MMIO
    assert today.guest_key == 0  # rev->guest_rpte keeps the guest's own key
    _, _, keyed = entered(KEYS, MMIO_GPA)
    assert keyed.valid and not keyed.absent and keyed.key == 31 and keyed.kind == MMIO


def test_a_host_swapped_page_is_absent_key_0_today_and_valid_key_30_with_keys() -> None:
    _, _, today = entered(TODAY, 5 << SHIFT, swapped=True)
    assert today.absent and today.key == 0 and today.kind == ABSENT
    _, _, keyed = entered(KEYS, 5 << SHIFT, swapped=True)
    assert keyed.valid and keyed.key == 30 and keyed.kind == SWAPPED
    machine, vpn, _ = entered(KEYS, 6 << SHIFT)
    machine.host_swap_out(6)  # kvm_unmap_rmapp on a valid HPTE
    entry = machine.hpt.entry(machine.hpt.lookup(vpn))
    assert entry is not None and entry.kind == SWAPPED and machine.counters.unmaps == 1
    machine.audit()


@pytest.mark.parametrize(
    ("era", "gpa", "swapped", "dsisr", "outcome", "purpose"),
    [
        (TODAY, MMIO_GPA, False, DSISR_NOHPTE, EMULATED, CLASSIFY),
        (TODAY, 5 << SHIFT, True, DSISR_NOHPTE, PAGED_IN, CLASSIFY),
        (KEYS, MMIO_GPA, False, DSISR_KEYFAULT, EMULATED, LOCATE),
        (KEYS, 5 << SHIFT, True, DSISR_KEYFAULT, PAGED_IN, LOCATE),
    ],
)
def test_the_host_cases(
    era: str, gpa: int, swapped: bool, dsisr: int, outcome: str, purpose: str
) -> None:
    machine, vpn, _ = entered(era, gpa, swapped)
    assert machine.hw_access(vpn, store=True) == dsisr
    record = machine.hdsi(0x3_0000, vpn, True, dsisr)
    assert (record.outcome, record.purpose, record.examined) == (outcome, purpose, 1)
    if outcome == PAGED_IN:
        assert machine.hw_access(vpn, store=True) == 0 and not machine.swapped[5]
    machine.audit()


def test_a_guest_miss_is_searched_today_and_forwarded_at_once_with_keys() -> None:
    for era, purpose, examined in ((TODAY, CLASSIFY, 16), (KEYS, NO_SEARCH, 0)):
        machine = PpcMachine(era, order=12, ram_pages=64)
        vpn = machine.hpt.vpn(0x42, 0)
        record = machine.hdsi(0, vpn, False, machine.hw_access(vpn, False))
        assert record.outcome == FORWARDED and record.purpose == purpose
        assert record.examined == examined and machine.counters.hptes_examined == examined
        assert machine.counters.saved_searches == (1 if era == KEYS else 0)
        machine.audit()


def test_todays_mmio_cache_skips_the_search_until_an_mmio_hpte_goes() -> None:
    machine, vpn, _ = entered(TODAY, MMIO_GPA)
    purposes = [machine.hdsi(0, vpn, True, DSISR_NOHPTE).purpose for _ in range(3)]
    assert purposes == [CLASSIFY, CACHED, CACHED] and machine.counters.searches == 1
    slot = machine.hpt.lookup(vpn)
    machine.h_remove(slot)  # bumps mmio_update
    machine.h_enter(machine.hpt.hash_of(vpn), vpn, MMIO_GPA, True)
    assert machine.hdsi(0, vpn, True, DSISR_NOHPTE).purpose == CLASSIFY
    machine.audit()


def test_full_groups_answer_h_pteg_full_and_the_guest_evicts() -> None:
    machine = PpcMachine(TODAY, order=10, ram_pages=256)  # 8 groups
    guest = LinuxGuest(machine, seed=3)
    vma = guest.mmap(0x1000_0000, 200)
    for ea in guest.eas(vma):
        guest.touch(ea, store=True)
        machine.audit()
    assert machine.counters.h_pteg_full > 0 and guest.evictions > 0
    assert machine.hpt.occupied == 64  # every slot of the 8 groups in use
    vpn = guest.vpn(0x2000_0000)  # a page of another segment
    primary, secondary = machine.hpt.groups_of(vpn)
    assert machine.h_enter(primary, vpn, 0, True)[0] == H_PTEG_FULL
    wrong = next(g for g in range(8) if g not in (primary, secondary))
    assert machine.h_enter(wrong, vpn, 0, True)[0] == H_PARAMETER


# -- the pfault program --------------------------------------------------------------------


def test_pfault_is_three_passes_of_page_touches_each_a_guest_miss() -> None:
    program = PFAULT.scaled(256, 3)
    ops = list(program.ops())
    assert sum(1 for op in ops if op[0] in ("store", "load")) == 3 * 256 * 3
    assert [op[0] for op in ops if op[0] not in ("store", "load")][:4] == [
        "mmap", "mprotect_w", "mprotect_r", "munmap",
    ]  # fmt: skip
    assert PFAULT.pages == 40 * 1024 and PFAULT.iterations == 10
    for era, searches, saved in ((TODAY, 2304, 0), (KEYS, 0, 2304)):
        run = PfaultRun(era, program, order=16)
        c = run.run()
        run.audit()
        assert c.faults == c.no_hpte == c.forwarded == 3 * 256 * 3
        assert c.searches == searches and c.hptes_examined == 16 * searches
        assert c.saved_searches == saved and c.saved_hptes == 16 * saved
        assert run.guest.page_faults == 256 * 3  # the first pass; the others only rehash


def test_the_demo_run_shows_every_kind() -> None:
    for era, kinds in ((TODAY, {VALID, ABSENT, MMIO}), (KEYS, {VALID, SWAPPED, MMIO})):
        run = PfaultRun(era, DEMO.scaled(896, 2), order=DEMO_ORDER)
        seen: set[str] = set()
        while run.next_fault() is not None:
            seen |= {kind for kind, n in run.machine.hpt.kind_counts.items() if n}
        assert kinds <= seen


# -- property tests -------------------------------------------------------------------------

PAGES = 48
operations = st.lists(
    st.one_of(
        st.tuples(st.just("touch"), st.integers(0, PAGES - 1), st.booleans()),
        st.tuples(st.just("reclaim"), st.integers(0, 2 * PAGES - 1), st.just(False)),
        st.tuples(st.just("doorbell"), st.just(0), st.just(True)),
        st.tuples(st.just("flush"), st.just(0), st.just(False)),
    ),
    max_size=60,
)


def lockstep() -> dict[str, tuple[PpcMachine, LinuxGuest, int]]:
    """Both eras on a 16-group table, one mapping of PAGES pages and an MMIO doorbell."""
    out = {}
    for era in ERAS:
        machine = PpcMachine(era, order=11, page_shift=SHIFT, ram_pages=2 * PAGES)
        guest = LinuxGuest(machine, seed=5)
        guest.mmap(0x3FF0_0000_0000, PAGES)
        guest.mmap(0x3FE0_0000_0000, 1, mmio_gpa=MMIO_GPA)
        out[era] = (machine, guest, 0)
    return out


def ea_of(op: str, page: int) -> int:
    return 0x3FE0_0000_0000 if op == "doorbell" else 0x3FF0_0000_0000 + (page << SHIFT)


def checked_touch(machine: PpcMachine, guest: LinuxGuest, ea: int, store: bool) -> list[str]:
    """Touch `ea`, checking the first fault against what the hash search would say."""
    vpn = guest.vpn(ea)
    slot = machine.hpt.lookup(vpn)
    before = machine.hpt.entry(slot) if slot >= 0 else None
    hw = machine.hw_access(vpn, store)
    machine.counters.accesses -= 1  # a peek, not an access
    oracle = None if hw == 0 else classify_by_search(machine.hpt, vpn)[0]
    records = guest.touch(ea, store)
    if records:
        first = records[0]
        assert first.outcome == oracle  # keys or not: the hash search's class
        if before is not None and before.key == 31 and before.kind == MMIO:
            assert first.outcome == EMULATED  # a key-31 HPTE is never forwarded
        check_record(first)
    for record in records:
        check_record(record)
    return [r.outcome for r in records]


def check_record(record: FaultRecord) -> None:
    if record.era == KEYS:
        if record.dsisr & DSISR_NOHPTE:
            assert record.search is None and record.purpose == NO_SEARCH
            assert record.outcome == FORWARDED
        else:
            assert record.purpose == LOCATE and record.outcome != FORWARDED
    else:
        assert record.dsisr == DSISR_NOHPTE and record.purpose in (CLASSIFY, CACHED)
    if record.outcome == FORWARDED:
        assert record.kind not in (MMIO, ABSENT, SWAPPED)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_keys_classify_as_the_hash_search_and_never_forward_mmio(
    plan: list[tuple[str, int, bool]],
) -> None:
    machines = lockstep()
    for op, page, store in plan:
        outcomes = {}
        for era, (machine, guest, _) in machines.items():
            if op == "reclaim":
                machine.host_swap_out(page)
            elif op == "flush":
                guest.flush(guest.vmas[0])
            else:
                outcomes[era] = checked_touch(machine, guest, ea_of(op, page), store)
            machine.audit()
        if outcomes:
            assert outcomes[KEYS] == outcomes[TODAY]
    today, keyed = machines[TODAY][0].counters, machines[KEYS][0].counters
    assert keyed.searches <= today.searches + today.mmio_cache_hits
    assert keyed.faults == today.faults and keyed.saved_searches == keyed.no_hpte


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(sorted(ERAS)), st.integers(0, 2**16))
def test_a_run_is_a_function_of_its_seed(era: str, seed: int) -> None:
    program = PfaultProgram(pages=64, iterations=2, reclaim=0.05, mmio_every=7)

    def trace() -> tuple[list[tuple[int, str, int]], dict[str, int]]:
        run = PfaultRun(era, program, seed=seed, order=11)
        seen = []
        while (record := run.next_fault()) is not None:
            seen.append((record.vpn, record.outcome, record.examined))
        run.audit()
        return seen, run.counters.as_dict()

    assert trace() == trace()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40), st.booleans()), max_size=80))
def test_the_table_matches_a_plain_dict(plan: list[tuple[bool, int, bool]]) -> None:
    hpt = HashPageTable(order=10, page_shift=SHIFT)  # 8 groups: they fill up
    ref: dict[int, int] = {}
    for add, n, secondary in plan:
        vpn = hpt.vpn(0x5A5 + n % 3, n << SHIFT)
        if add and vpn not in ref:
            group = hpt.groups_of(vpn)[secondary]
            slot = hpt.free_slot(group)
            if slot >= 0:
                hpt.insert(slot, hpte(hpt, vpn, HPTE_V_VALID | (HPTE_V_SECONDARY * secondary)))
                ref[vpn] = slot
        elif not add and vpn in ref:
            hpt.remove(ref.pop(vpn))
        hpt.audit()
        assert hpt.index == ref
        found = hpt.search(vpn)
        assert found.slot == ref.get(vpn, -1)
        if found.slot >= 0:
            in_secondary = found.slot // 8 != hpt.groups_of(vpn)[0]
            assert found.examined == found.slot % 8 + 1 + 8 * in_secondary


# -- the bench table and the export ---------------------------------------------------------


def test_ppc_keys_table_quick(tables: dict[str, Any]) -> None:  # noqa: F811
    """The table of the shared `bench --json --quick` run (tests/test_bench.py), read
    back: a run of its own here repeated it (~2.3 s of CPU)."""
    table = ClaimTable.from_json("ppc_keys", tables["ppc_keys"])
    assert table.name == "ppc_keys" and table.columns == COLUMNS
    assert table.thread == "power-keys" and all(table.checks.values())
    at = table.columns.index
    rows = {
        (row[at("variant")], row[at("era")]): dict(zip(table.columns, row, strict=True))
        for row in table.rows
    }
    without, with_keys = rows["pfault (scaled)", "2014"], rows["pfault (scaled)", KEYS]
    assert without["searches_per_fault"] == 1.0 and with_keys["hash_searches"] == 0
    assert without["hptes_per_fault"] == 16.0
    assert (without["thread_time_s"], with_keys["thread_time_s"]) == (8.438, 7.833)
    assert (without["guest_keys"], with_keys["guest_keys"]) == (32, 30)
    variant = rows["pfault+reclaim+mmio (model)", KEYS]
    assert 0 < variant["keyfaults"] == variant["hash_searches"]
    assert table.checks["same_classification"] is True
    assert table.extra["thread_program_faults_model"] == 3 * 40 * 1024 * 10
    assert with_keys["low"] <= with_keys["central"] <= with_keys["high"] < 8.438
    assert with_keys["verdict"] in ("within noise", "within 25 %", "direction only")
    assert (without["role"], with_keys["role"]) == ("input", "predicted")
    assert (without["kernel"], with_keys["kernel"]) == (
        "2014, without the series",  # the thread's "Without Fix": a 2014 kernel, not today's
        "2014, with the series",
    )
    assert without["verdict"] is None  # the input: the thread's run without keys
    assert table.to_json()["verdict"] == table.verdict
    assert PRESSURE.reclaim > 0


def test_the_searched_groups_as_dot() -> None:
    run = PfaultRun(TODAY, DEMO, order=DEMO_ORDER, trace=True)
    record = run.next_fault()
    assert record is not None and record.groups
    text, nodes = searched_groups_dot(run.machine.hpt, record)
    assert text.startswith("digraph hpt_search {") and nodes == 3
    assert text.count("group 0x") == 2 and "16: ·" in text
