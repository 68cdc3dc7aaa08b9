"""The three MMUs' `simulate` output against the 6.18-era sources it models: each test
names the kernel function whose behaviour a user sees in the printed run."""

from __future__ import annotations

import io

from mmuscope.engine.events import Event
from mmuscope.engine.mmu.spte import spte_to_pfn
from mmuscope.tui.simulate_cli import SimulateOptions, make_session, run

DOORBELL, EOI = 0xFEBF_1000, 0xFEE0_00B0  # netperf's MMIO stores (guest/ept.py)
MMUS = ("tdp", "direct", "shadow")


def printed(mmu: str, workload: str, accesses: int) -> list[str]:
    """What `mmuscope simulate --mmu MMU --workload W --accesses N` prints (seed 1)."""
    out = io.StringIO()
    options = SimulateOptions(mmu, workload, accesses)
    run(make_session(options), options, out)
    return out.getvalue().splitlines()[1:]


def events(lines: list[str], name: str) -> list[str]:
    return [line.split(f" {name}:", 1)[1].strip() for line in lines if f" {name}:" in line]


def test_tdp_kvm_page_fault_is_the_ept_violations_exit_qualification() -> None:
    """`handle_ept_violation()` (6.18 vmx.c) traces `kvm_page_fault` with the exit
    qualification, and `handle_ept_misconfig()` traces no `kvm_page_fault`: the TDP MMU
    prints what the direct MMU prints for the same accesses, and each MMIO address's
    only `kvm_page_fault` is the violation that made its MMIO spte."""
    tdp = events(printed("tdp", "netperf", 200), "kvm_page_fault")
    direct = events(printed("direct", "netperf", 200), "kvm_page_fault")
    assert tdp[0] == direct[0] == "vcpu 0 rip 0x0 address 0x00000000fee000b0 error_code 0x182"
    codes = {int(line.rsplit("error_code ", 1)[1], 16) for line in tdp}
    assert all(code & 0x180 == 0x180 for code in codes), codes  # GVA valid and translated
    assert {code & 0x7 for code in codes} == {1, 2, 4}  # EPT_VIOLATION_ACC_{READ,WRITE,INSTR}
    mmio = [line for line in tdp if f"{DOORBELL:016x}" in line or f"{EOI:016x}" in line]
    assert len(mmio) == 2, mmio


def test_tdp_counts_no_fault_for_a_cached_mmio_hit() -> None:
    """`kvm_mmu_page_fault()` (6.18 mmu.c): `handle_mmio_page_fault()` returning
    RET_PF_EMULATE jumps to `emulate:`; `pf_taken` moves only on RET_PF_INVALID and
    `pf_emulate` only for what `kvm_mmu_do_page_fault()` returns.  netperf's stores:
    the two MMIO sptes' first faults are taken and emulated, the rest are not."""
    options = SimulateOptions("tdp", "netperf", 2000)
    session = make_session(options)
    out = io.StringIO()
    run(session, options, out)
    lines = out.getvalue().splitlines()
    stat = session.mmu.stat
    assert stat["pf_emulate"] == len(events(lines, "mark_mmio_spte")) == 2
    assert stat["pf_taken"] == len(events(lines, "kvm_page_fault"))
    assert len(events(lines, "kvm_mmio")) == 1374  # every store emulated


def set_spte_letters(lines: list[str]) -> dict[int, str]:
    """Each `kvm_mmu_set_spte`'s spte and its `(%s%s%s%s)` letters."""
    letters = {}
    for line in events(lines, "kvm_mmu_set_spte"):
        words = line.split()
        letters[int(words[3], 16)] = words[4].strip("()")
    return letters


def test_direct_set_spte_letters_decode_the_ept_layout() -> None:
    """`kvm_mmu_set_spte` (6.18 mmutrace.h) prints `x` from `is_executable_pte()` and
    `u` from `shadow_user_mask`; under EPT (`kvm_mmu_set_ept_masks()`) those are
    VMX_EPT_EXECUTABLE_MASK (bit 2) and VMX_EPT_READABLE_MASK (bit 0), never bit 63.
    The direct MMU prints what the TDP MMU prints for the same sptes."""
    direct = set_spte_letters(printed("direct", "kernbench", 600))
    tdp = set_spte_letters(printed("tdp", "kernbench", 600))
    assert direct and tdp
    for spte, letters in direct.items():
        ept = "r" + "-w"[spte >> 1 & 1] + "-x"[spte >> 2 & 1] + "-u"[spte & 1]
        assert letters == ept, f"{spte:x} ({letters})"
    shared = direct.keys() & tdp.keys()
    assert shared and all(direct[spte] == tdp[spte] for spte in shared)
    assert "rwxu" in direct.values()


def test_every_mmus_kvm_mmio_keeps_the_page_offset() -> None:
    """The emulator traces `kvm_mmio` with the access's whole gpa (`write_mmio()`, 6.18
    x86.c, after `emulator_read_write_onepage()` kept `addr & ~PAGE_MASK`): netperf's
    LAPIC EOI store is at 0xfee000b0 on every MMU."""
    for mmu in MMUS:
        gpas = {
            line.split("gpa ")[1].split()[0]
            for line in events(printed(mmu, "netperf", 300), "kvm_mmio")
        }
        assert gpas == {f"{EOI:#x}", f"{DOORBELL:#x}"}, (mmu, gpas)


def test_no_mmio_spte_for_a_gfn_above_kvm_mmu_max_gfn() -> None:
    """`kvm_handle_noslot_fault()` (6.18 mmu.c) emulates a fault on a gfn above
    `kvm_mmu_max_gfn()` (the host's MAXPHYADDR, 46 bits here) without an MMIO spte; below
    it, an MMIO spte is made.  Both EPT MMUs."""
    from mmuscope.engine import Vm
    from mmuscope.engine.mmu.direct.mmu import DirectMmu
    from mmuscope.engine.mmu.spte import RetPf
    from mmuscope.engine.mmu.tdp.mmu import TdpMmu

    for make in (TdpMmu, DirectMmu):
        vm = Vm()
        vm.set_user_memory_region(0, 0, 0, 1 << 30, 0x7F00_0000_0000)
        seen: list[Event] = []
        mmu = make(vm, emit=seen.append)
        assert mmu.page_fault(0, (1 << 46) + 0xB0, write=True) is RetPf.EMULATE
        assert mmu.stat["pf_emulate"] == 1 and mmu.stat["pf_mmio_spte_created"] == 0
        assert [e.name for e in seen if e.name == "mark_mmio_spte"] == [], make
        assert mmu.page_fault(0, (1 << 46) - 0x1000, write=True) is RetPf.EMULATE
        assert mmu.stat["pf_mmio_spte_created"] == 1, make


def test_tdp_mmio_path_is_handle_mmio_page_faults_with_the_vcpus_mmio_info() -> None:
    """`handle_mmio_page_fault()` (6.18 mmu.c) is one function for both EPT MMUs:
    `mmio_info_in_cache()` first (filled by `kvm_handle_noslot_fault()` and by the last
    hit: no tracepoint), then `check_mmio_spte` and `handle_mmio_page_fault` lines.  The
    TDP MMU prints the direct MMU's MMIO lines, access for access; netperf's two MMIO
    pages alternate, so only a vCPU's switch from one to the other is traced."""
    names = ("check_mmio_spte:", "handle_mmio_page_fault:", "kvm_mmio:")
    tdp, direct = (
        [line for line in printed(mmu, "netperf", 2000) if any(n in line for n in names)]
        for mmu in ("tdp", "direct")
    )
    assert tdp == direct
    hits = len(events(tdp, "handle_mmio_page_fault"))
    assert hits == len(events(tdp, "check_mmio_spte")) == 418
    assert len(events(tdp, "kvm_mmio")) == 1374


def test_shadow_kvm_page_fault_is_the_cpus_error_code() -> None:
    """`kvm_page_fault` prints the #PF error code the CPU reported
    (`kvm_handle_page_fault()`, 6.18 mmu.c), and `FNAME(page_fault)` walks the guest
    tables with that code less PFERR_RSVD_MASK: the walk line after each fault repeats
    its P/W/U/F bits (P on a write to a read-only spte), and a store to an MMIO spte
    carries RSVD|P (0xb)."""
    lines = printed("shadow", "kernbench", 1500)
    pairs, code = [], None
    for line in lines:
        if " kvm_page_fault:" in line:
            code = int(line.rsplit("error_code ", 1)[1], 16)
        elif " kvm_mmu_pagetable_walk:" in line and code is not None:
            pairs.append((code, int(line.split("pferr ")[1].split()[0], 16)))
            code = None
    assert pairs and all(code & ~0x8 == pferr for code, pferr in pairs), pairs
    assert any(code & 1 for code, _ in pairs)  # protection faults: P
    codes = {
        int(x.rsplit("error_code ", 1)[1], 16)
        for x in events(printed("shadow", "netperf", 300), "kvm_page_fault")
    }
    assert 0xB in codes


def requested_pfns(mmu: str, workload: str, accesses: int, seed: int = 1) -> dict[int, int]:
    """gfn -> the 4K host pfn of each `kvm_mmu_spte_requested` of a simulate run."""
    out = io.StringIO()
    options = SimulateOptions(mmu, workload, accesses, seed)
    run(make_session(options), options, out)
    pfns = {}
    for line in events(out.getvalue().splitlines(), "kvm_mmu_spte_requested"):
        words = line.split()
        pfns[int(words[1], 16)] = int(words[3], 16)
    return pfns


def test_host_pfns_are_host_physical_frames_below_maxphyaddr() -> None:
    """`hva_to_pfn()` (6.18 kvm_main.c) gives the host-physical frame of the VMM's page,
    never its virtual address: every pfn simulate prints, and every spte's address, lies
    below the host's MAXPHYADDR (`kvm_host.maxphyaddr`, 46 bits here), though the slots'
    host addresses are 0x7f00_0000_0000 and up.  A seed draws the same frames on every
    MMU, another seed other frames."""
    maxphyaddr_pfns = 1 << (46 - 12)
    tdp, direct, shadow = (requested_pfns(mmu, "kernbench", 300) for mmu in MMUS)
    for pfns in (tdp, direct, shadow):
        assert pfns and all(pfn < maxphyaddr_pfns for pfn in pfns.values()), pfns
    shared = tdp.keys() & direct.keys()
    assert shared and all(tdp[gfn] == direct[gfn] for gfn in shared)
    other = requested_pfns("tdp", "kernbench", 300, seed=2)
    again = other.keys() & tdp.keys()
    assert again and all(other[gfn] != tdp[gfn] for gfn in again)
    sptes = set_spte_letters(printed("tdp", "kernbench", 300))
    assert sptes and all(spte_to_pfn(spte) < maxphyaddr_pfns for spte in sptes)


def test_ept_without_ad_bits_sptes_carry_kvms_own_accessed_and_dirty_bits() -> None:
    """6.18 `kvm_mmu_set_ept_masks(has_ad_bits=false, ...)` (spte.c) still sets
    `shadow_accessed_mask`/`shadow_dirty_mask` to EPT bits 8/9 (only `kvm_ad_enabled` is
    false), and `make_spte()` ORs them unconditionally: `if (!prefetch || synchronizing)
    spte |= shadow_accessed_mask`, and `shadow_dirty_mask` with W.  Under
    kvm_intel.eptad=0 (the TDP and direct MMU screens' "EPT without A/D bits") every spte
    a fault makes has bit 8, every writable one bit 9, beside SPTE_TDP_AD_DISABLED (52)."""
    from mmuscope.engine.layouts import preset
    from mmuscope.engine.mmu.direct.session import MmuSession
    from mmuscope.engine.mmu.tdp.session import TdpSession

    for kind in (TdpSession, MmuSession):
        session = kind(preset("pc-4g"), workload="kernbench", spte_config="ept-no-ad")
        seen: list[Event] = []
        session.subscribe(seen.append)
        session.run(300)
        made = [int(e.fields["spte"]) for e in seen if e.name == "kvm_mmu_set_spte"]
        faulted = [spte for spte in made if spte & 0x7]  # not a prefetch (access-tracked)
        assert faulted and all(spte >> 52 & 1 for spte in faulted), kind
        assert all(spte & 0x100 for spte in faulted), [hex(s) for s in faulted[:4]]
        writable = [spte for spte in faulted if spte & 0x2]
        assert writable and all(spte & 0x200 for spte in writable), kind


def test_an_nx_split_keeps_an_access_tracked_huge_spte_access_tracked() -> None:
    """`make_small_spte()` -> `make_spte_executable()` -> `modify_spte_protections()`
    (6.18 spte.c): splitting an access-tracked huge spte to 4K under the NX huge page
    mitigation restores it, sets X, and access-tracks it again, so X lands in the saved
    copy (bit 56) and the children still fault on their next access.  EPT without A/D
    bits: a 2M page read, aged by `kvm_age_gfn()`, then fetched from (TDP MMU)."""
    from mmuscope.engine import Vm
    from mmuscope.engine.mmu.aging import kvm_age_gfn
    from mmuscope.engine.mmu.params import TdpMmuParams
    from mmuscope.engine.mmu.spte import (
        SPTE_CONFIGS,
        VMX_EPT_EXECUTABLE_MASK,
        VMX_EPT_READABLE_MASK,
        RetPf,
        is_access_track_spte,
        is_large_pte,
    )
    from mmuscope.engine.mmu.tdp.mmu import TdpMmu

    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, 1 << 30, 0x7F00_0000_0000)
    cfg = SPTE_CONFIGS["ept-no-ad"]
    mmu = TdpMmu(vm, cfg, TdpMmuParams(nx_huge_pages="on"))
    assert mmu.page_fault(0, 0x20_0000) is RetPf.FIXED
    sp, index = mmu.last_spte(mmu.roots[0], 0x200)
    assert is_large_pte(sp.spt[index]) and not sp.spt[index] & VMX_EPT_EXECUTABLE_MASK
    slot = vm.slot(0, 0)
    assert slot is not None and kvm_age_gfn(mmu, slot, 0x200, 0x400) == 1
    assert is_access_track_spte(cfg, sp.spt[index])
    assert mmu.page_fault(0, 0x20_5000, exec_=True) is RetPf.FIXED  # splits, maps 0x205
    child = mmu.pages.by_pa[sp.spt[index] & 0xF_FFFF_FFFF_F000]
    saved_rx = (VMX_EPT_READABLE_MASK | VMX_EPT_EXECUTABLE_MASK) << 54  # bits 54 and 56
    for i in (0, 1, 511):
        spte = child.spt[i]
        assert is_access_track_spte(cfg, spte) and not spte & 0x7, hex(spte)
        assert spte & saved_rx == saved_rx, hex(spte)
    mmu.audit()


def test_both_ept_sessions_step_one_access_type() -> None:
    """The TDP and direct MMU sessions draw the same accesses (`EptSession.draws`) and
    step them as one value type, `EptAccess` (guest/ept.py)."""
    from mmuscope.engine.layouts import preset
    from mmuscope.engine.mmu.direct.session import MmuSession
    from mmuscope.engine.mmu.guest.ept import EptAccess
    from mmuscope.engine.mmu.tdp.session import TdpSession

    steps = [kind(preset("pc-2g")).run(5) for kind in (TdpSession, MmuSession)]
    assert all(step is not None and type(step.access) is EptAccess for step in steps)
    assert steps[0].access == steps[1].access  # type: ignore[union-attr]


def test_shadow_unsyncs_a_table_only_inside_the_write_fault_on_it() -> None:
    """`mmu_try_to_unsync_pages()` is called from `make_spte()`, under `mmu_set_spte()`,
    and nowhere else (6.18 spte.c/mmu.c): a page goes unsync inside the write fault on
    its table, as the host's trace of `mmuscope kvm ptwrite` shows it (walk with W,
    `kvm_mmu_spte_requested`, `kvm_mmu_unsync_page`, then the writable
    `kvm_mmu_set_spte` of the table's gfn).  pfault's mprotect and first touches are the
    guest kernel's pte stores, through its direct map."""
    lines = printed("shadow", "pfault", 400)
    unsynced = [i for i, line in enumerate(lines) if " kvm_mmu_unsync_page:" in line]
    assert unsynced
    for i in unsynced:
        start = max(j for j in range(i) if " kvm_page_fault:" in lines[j])
        fault = [line.split(": ", 2)[1].strip() for line in lines[start:i]]
        assert int(lines[start].rsplit("error_code ", 1)[1], 16) & 0x2, lines[start]
        walk = next(line for line in lines[start:i] if " kvm_mmu_pagetable_walk:" in line)
        assert int(walk.split("pferr ")[1].split()[0], 16) & 0x2, walk
        assert "kvm_mmu_spte_requested" in fault and "kvm_mmu_set_spte" not in fault
        gfn = lines[i].split(" gfn ")[1].split()[0]
        assert " kvm_mmu_set_spte:" in lines[i + 1] and f"gfn {gfn} " in lines[i + 1]
        assert "(rw" in lines[i + 1], lines[i + 1]


def run_with(options: SimulateOptions) -> tuple[list[str], object]:
    """The printed run of `options` and its session."""
    session = make_session(options)
    out = io.StringIO()
    run(session, options, out)
    return out.getvalue().splitlines()[1:], session


def test_both_ept_mmus_log_dirty_pages_by_pml_unless_it_is_off() -> None:
    """`kvm_mmu_slot_apply_flags()` (6.18 x86.c): with `kvm->arch.cpu_dirty_log_size`
    (PML: kvm_intel.enable_pml, EPT with A/D bits) `kvm_mmu_slot_leaf_clear_dirty()`
    clears the D bits of the slot's 4K leaves, rmaps (direct MMU) or TDP MMU alike, and
    write protection starts at 2M; KVM_GET_DIRTY_LOG clears D again
    (`kvm_mmu_clear_dirty_pt_masked()`), and the CPU logs the writes in its PML buffer.
    `--pml off` (a host without PML) write-protects from 4K, and `fast_page_fault()`
    fixes the writes.  Either way the same pages reach the dirty bitmap."""
    for mmu in ("direct", "tdp"):
        on, pml = run_with(SimulateOptions(mmu, "migrate", 1500))
        off, wrprot = run_with(SimulateOptions(mmu, "migrate", 1500, pml=False))
        assert pml.dirty_log.pml and not wrprot.dirty_log.pml  # type: ignore[attr-defined]
        assert not events(on, "fast_page_fault"), mmu
        assert len(events(off, "fast_page_fault")) == wrprot.mmu.stat["pf_fast"] > 0  # type: ignore[attr-defined]
        assert pml.dirty_log.pml_logged == wrprot.mmu.stat["pf_fast"]  # type: ignore[attr-defined]
        assert pml.dirty_log.dirty == wrprot.dirty_log.dirty  # type: ignore[attr-defined]


def test_shadow_emulation_traces_kvm_emulate_insn_then_the_operand() -> None:
    """`x86_emulate_instruction()` (6.18 x86.c) decodes first: `trace_kvm_emulate_insn_start()`
    in `x86_decode_emulated_instruction()`, then the operand's gpa (`vcpu_mmio_gva_to_gpa()`:
    `vcpu_match_mmio ... GVA` from the vCPU's MMIO info), then `write_mmio()`'s `kvm_mmio`.
    Under shadow paging each of netperf's MMIO stores prints the three in that order, as
    the real trace (`mmuscope kvm`) does: kvm_emulate_insn → vcpu_match_mmio → kvm_mmio."""
    lines = printed("shadow", "netperf", 300)
    names = [line.split(": ", 2)[1].split(":")[0].strip() for line in lines if ": " in line]
    mmio = [i for i, name in enumerate(names) if name == "kvm_mmio"]
    assert len(mmio) > 100
    for i in mmio:
        assert names[i - 2 : i] == ["kvm_emulate_insn", "vcpu_match_mmio"], names[i - 4 : i + 1]
    insns = {
        line.split("kvm_emulate_insn:")[1].strip() for line in lines if "kvm_emulate_insn:" in line
    }
    assert "0:0:89 02 (prot64)" in insns


def test_shadow_accounts_a_new_page_before_its_kvm_mmu_get_page() -> None:
    """`kvm_mmu_alloc_shadow_page()` (6.18 mmu.c) calls `account_shadowed()` for a page
    with gptes before `__kvm_mmu_get_shadow_page()` traces `kvm_mmu_get_page`: each
    `account_shadowed*` line comes right before the `kvm_mmu_get_page ... new` of its
    gfn and level, and every new indirect page is accounted."""
    lines = printed("shadow", "fork", 600)
    names = [line.split(": ", 2)[1].split(":")[0].strip() for line in lines if ": " in line]
    texts = [line.split(": ", 1)[1] for line in lines if ": " in line]
    accounted = [i for i, name in enumerate(names) if name == "account_shadowed*"]
    assert len(accounted) > 50
    for i in accounted:
        words = dict(w.split("=") for w in texts[i].split(":", 1)[1].split())
        page = texts[i + 1]
        assert names[i + 1] == "kvm_mmu_get_page" and page.endswith(" new"), texts[i : i + 2]
        assert f" gfn {int(words['gfn'], 16):x} l{int(words['level'], 16)} " in page, page
    new = [
        i
        for i, name in enumerate(names)
        if name == "kvm_mmu_get_page" and texts[i].endswith(" new") and " direct " not in texts[i]
    ]
    assert new == [i + 1 for i in accounted]
