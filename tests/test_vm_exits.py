"""The VM exits around the MMU's tracepoints in `mmuscope simulate --mmu tdp|direct`, as
a 6.18 VMX host with EPT prints them (engine/mmu/vcpu/vmx.py, emulate.py; docs/kvm.md §13):
`kvm_exit` (the host's format: info1 the exit qualification), then `kvm_page_fault` for an
EPT violation only, the emulator's `kvm_emulate_insn` → `vcpu_match_mmio` → `kvm_mmio`
→ `kvm_userspace_exit`, and `kvm_entry` when the vCPU re-enters; accesses the EPT maps run
without an exit.  Through the installed entry point, and back through our own parser
and `mmuscope replay`."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from mmuscope.engine.events import Event
from mmuscope.engine.mmu.vcpu.vmx import (
    PFERR_FETCH_MASK,
    PFERR_GUEST_FINAL_MASK,
    PFERR_GUEST_PAGE_MASK,
    PFERR_PRESENT_MASK,
    PFERR_USER_MASK,
    PFERR_WRITE_MASK,
    ept_violation_error_code,
)
from mmuscope.engine.trace.lines import parse_trace

from tests.test_simulate_cli import MMUSCOPE, simulate

# kvm_exit's print fmt on this 6.18 host (events/kvm/kvm_exit/format), written out
EXIT_RE = re.compile(
    r"vcpu (\d+) reason (EPT_VIOLATION|EPT_MISCONFIG) rip 0x0 info1 0x([0-9a-f]{16}) info2"
    r" 0x0000000000000000 intr_info 0x00000000 error_code 0x00000000 requests"
    r" 0x0000000000000000"
)
ENTRY_RE = re.compile(r"vcpu (\d+), rip 0x([02]) intr_info 0x00000000 error_code 0x00000000")
EMULATOR = ("kvm_emulate_insn", "vcpu_match_mmio", "kvm_mmio", "kvm_userspace_exit")


def exits_of(text: str) -> list[list[Event]]:
    """The printed run cut at each kvm_exit: each part an exit's events, kvm_exit first."""
    events, _, skipped = parse_trace(text)
    assert skipped <= 1  # the cpus= header
    parts: list[list[Event]] = []
    for event in events:
        if event.name == "kvm_exit":
            parts.append([])
        if parts:
            parts[-1].append(event)
    return parts


def texts(text: str, name: str) -> list[str]:
    """The printk texts of `name`'s lines (trace-cmd pads the name's column)."""
    lines = (line.partition(f" {name}: ") for line in text.splitlines())
    return [after.strip() for _, found, after in lines if found]


@pytest.fixture(scope="module", params=["tdp", "direct"])
def netperf(request: pytest.FixtureRequest) -> tuple[str, str]:
    done = simulate("--mmu", request.param, "--workload", "netperf", "--accesses", "400")
    assert done.returncode == 0, done.stderr
    return request.param, done.stdout


def test_kvm_exit_lines_are_the_hosts_format(netperf: tuple[str, str]) -> None:
    _, text = netperf
    exits = texts(text, "kvm_exit")
    assert exits and all(EXIT_RE.fullmatch(t) for t in exits), exits[:3]
    entries = texts(text, "kvm_entry")
    assert len(entries) == len(exits) and all(ENTRY_RE.fullmatch(t) for t in entries)
    reasons = Counter(EXIT_RE.fullmatch(t)[2] for t in exits)  # type: ignore[index]
    assert reasons["EPT_VIOLATION"] > 0 and reasons["EPT_MISCONFIG"] > 0


def test_each_exit_is_kvm_exit_then_its_handling_then_kvm_entry(netperf: tuple[str, str]) -> None:
    """vmx.c's order: kvm_exit; an EPT violation traces kvm_page_fault with info1 (the exit
    qualification) next, an EPT misconfiguration none; the vCPU's kvm_entry ends it."""
    _, text = netperf
    for part in exits_of(text):
        exit_, vcpu = part[0], part[0].fields["vcpu_id"]
        names = [e.name for e in part]
        assert names.count("kvm_entry") == 1, names
        entry = next(e for e in part if e.name == "kvm_entry")
        assert entry.fields["vcpu_id"] == vcpu
        # nothing of this exit after its entry but the next access's root load
        assert {e.name for e in part[names.index("kvm_entry") + 1 :]} <= {"kvm_mmu_get_page"}
        if exit_.fields["exit_reason"] == "EPT_VIOLATION":
            fault = part[1]
            assert fault.name == "kvm_page_fault" and fault.fields["vcpu_id"] == vcpu
            assert fault.fields["error_code"] == exit_.fields["info1"]
        else:
            assert "kvm_page_fault" not in names and exit_.fields["info1"] == 0
            assert names[1] in ("check_mmio_spte", "kvm_emulate_insn"), names


def test_the_emulator_traces_in_the_kernels_order(netperf: tuple[str, str]) -> None:
    """x86_emulate_instruction(): kvm_emulate_insn → vcpu_match_mmio (the doorbell's page,
    matched by gpa; the APIC's page is not looked up) → kvm_mmio → kvm_userspace_exit
    (the doorbell: KVM_EXIT_MMIO; the in-kernel LAPIC takes the EOI), then the entry
    past the store (rip 0x2)."""
    _, text = netperf
    seen = Counter()
    for part in exits_of(text):
        emulated = [e for e in part if e.name in EMULATOR]
        if not emulated:
            continue
        mmio = next(e for e in emulated if e.name == "kvm_mmio")
        gpa = mmio.fields["gpa"]
        expected = ["kvm_emulate_insn", "kvm_mmio"]
        if gpa == 0xFEBF1000:
            expected = ["kvm_emulate_insn", "vcpu_match_mmio", "kvm_mmio", "kvm_userspace_exit"]
            user = emulated[-1].fields
            assert (user["reason"], user["code"]) == ("KVM_EXIT_MMIO", 6)
            match = emulated[1].fields
            assert match["gpa"] == gpa and match["write"] and match["gpa_match"]
        else:
            assert gpa == 0xFEE000B0  # the EOI register, with its page offset
        assert [e.name for e in emulated] == expected
        entry = next(e for e in part if e.name == "kvm_entry")
        assert entry.fields["rip"] == 2 and part.index(entry) > part.index(emulated[-1])
        seen[gpa] += 1
    assert seen[0xFEBF1000] > 10 and seen[0xFEE000B0] > 2


def test_mapped_accesses_run_without_an_exit() -> None:
    """kernbench: most accesses after the first touches hit mapped pages, with no exit;
    every exit's kvm_page_fault is an EPT violation's."""
    done = simulate("--mmu", "tdp", "--workload", "kernbench", "--accesses", "3000")
    assert done.returncode == 0, done.stderr
    names = Counter(e.name for e in parse_trace(done.stdout)[0])
    assert names["kvm_exit"] == names["kvm_entry"] == names["kvm_page_fault"]
    assert 0 < names["kvm_exit"] < 3000


@pytest.mark.parametrize(
    ("qual", "code"),
    [
        (0x181, PFERR_USER_MASK | PFERR_GUEST_FINAL_MASK),  # a read of a missing page
        (0x182, PFERR_WRITE_MASK | PFERR_GUEST_FINAL_MASK),  # a write
        (0x184, PFERR_FETCH_MASK | PFERR_GUEST_FINAL_MASK),  # a fetch
        (0x182 | 0x5 << 3, PFERR_WRITE_MASK | PFERR_PRESENT_MASK | PFERR_GUEST_FINAL_MASK),
        (0x081, PFERR_USER_MASK | PFERR_GUEST_PAGE_MASK),  # the guest's own table walk
        (0x001, PFERR_USER_MASK),  # no valid guest linear address
    ],
)
def test_the_error_code_handle_ept_violation_derives(qual: int, code: int) -> None:
    assert ept_violation_error_code(qual) == code


def test_the_printed_run_parses_and_replays(netperf: tuple[str, str], tmp_path: Path) -> None:
    """Our own parser reads every new line into its fields (no text-only event), and
    `mmuscope replay --summary` counts the exits and entries."""
    mmu, text = netperf
    events = parse_trace(text)[0]
    for event in events:
        assert "text" not in event.fields, event
    trace = tmp_path / f"{mmu}.txt"
    trace.write_text(text)
    done = subprocess.run(
        [MMUSCOPE, "replay", "--summary", str(trace)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    exits = len(texts(text, "kvm_exit"))
    assert re.search(rf"\b{exits}\b", done.stdout), done.stdout


@pytest.mark.parametrize("mmu", ["tdp", "direct"])
def test_an_ioeventfd_doorbell_is_fast_mmio_without_emulation(mmu: str) -> None:
    """--ioeventfd: handle_ept_misconfig() offers the store to KVM_FAST_MMIO_BUS first:
    `kvm_fast_mmio`, then at once the entry past the store; the doorbell's only emulation
    is its first store (the EPT violation that made the MMIO spte), and the ioeventfd on
    KVM_MMIO_BUS takes that one too: no kvm_userspace_exit."""
    args = ("--mmu", mmu, "--workload", "netperf", "--accesses", "400")
    done = simulate(*args, "--ioeventfd")
    assert done.returncode == 0, done.stderr
    assert texts(done.stdout, "kvm_fast_mmio")
    assert set(texts(done.stdout, "kvm_fast_mmio")) == {"fast mmio at gpa 0xfebf1000"}
    assert not texts(done.stdout, "kvm_userspace_exit")
    fast = 0
    for part in exits_of(done.stdout):
        names = [e.name for e in part]
        if "kvm_fast_mmio" in names:
            fast += 1
            assert part[0].fields["exit_reason"] == "EPT_MISCONFIG"
            assert names[:3] == ["kvm_exit", "kvm_fast_mmio", "kvm_entry"]
            assert part[2].fields["rip"] == 2  # kvm_skip_emulated_instruction()
    mmio = [t for t in texts(done.stdout, "kvm_mmio") if "0xfebf1000" in t]
    assert fast > 10 and 1 <= len(mmio) <= 2  # one first store per vCPU at most
    plain = simulate(*args)
    assert "kvm_fast_mmio" not in plain.stdout and " kvm_userspace_exit: " in plain.stdout


def test_ioeventfd_is_refused_for_shadow_paging() -> None:
    done = simulate("--mmu", "shadow", "--workload", "netperf", "--ioeventfd")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--ioeventfd needs --mmu tdp or direct" in done.stderr


@pytest.mark.parametrize("mmu", ["tdp", "direct"])
def test_under_apicv_a_lapic_eoi_exits_only_to_map_the_apic_access_page(mmu: str) -> None:
    """--enable-apicv: the APIC-access page is a KVM-internal memslot the EPT maps, so the
    LAPIC's page has no MMIO spte and no emulation; after the EPT violation that maps it
    (one per vCPU at most), the EOI stores run with no exit (virtualized EOI)."""
    args = ("--mmu", mmu, "--workload", "netperf", "--accesses", "400")
    done = simulate(*args, "--enable-apicv")
    assert done.returncode == 0, done.stderr
    eoi = [t for t in texts(done.stdout, "kvm_page_fault") if "00000000fee000b0" in t]
    assert 1 <= len(eoi) <= 2
    assert not [t for t in texts(done.stdout, "kvm_mmio") if "0xfee000b0" in t]
    assert not [t for t in texts(done.stdout, "mark_mmio_spte") if "gfn fee00 " in t]
    plain = simulate(*args)  # the same draws: the EOIs were exits, each emulated
    stores = [t for t in texts(plain.stdout, "kvm_mmio") if "0xfee000b0" in t]
    assert len(stores) > 10
    exits = len(texts(done.stdout, "kvm_exit"))
    assert exits <= len(texts(plain.stdout, "kvm_exit")) - len(stores) + 2


@pytest.mark.parametrize("mmu", ["tdp", "direct", "shadow"])
def test_the_in_kernel_lapic_traces_the_eoi_it_takes(mmu: str) -> None:
    """`write_mmio()` traces `kvm_mmio`, then `vcpu_mmio_write()` gives the store to the
    in-kernel LAPIC (6.18 lapic.c): `apic_mmio_write()` -> `kvm_lapic_reg_write()`
    traces `kvm_apic: apic_write APIC_EOI = 0x0`, and `apic_set_eoi()` `kvm_eoi` with
    the vCPU's APIC ID and the vector in service (none in the model's guests: -1); the
    NIC's doorbell, which no in-kernel device takes, ends in `kvm_userspace_exit`
    KVM_EXIT_MMIO under every MMU."""
    done = simulate("--mmu", mmu, "--workload", "netperf", "--accesses", "300")
    assert done.returncode == 0, done.stderr
    events, _, _ = parse_trace(done.stdout)
    eois = doorbells = 0
    for i, event in enumerate(events):
        if event.name != "kvm_mmio":
            continue
        after = [e.name for e in events[i + 1 : i + 3]]
        if event.fields["gpa"] == 0xFEE000B0:
            eois += 1
            assert after == ["kvm_apic", "kvm_eoi"], after
            apic, eoi = events[i + 1].fields, events[i + 2].fields
            assert (apic["rw"], apic["reg"], apic["val"]) == (True, "APIC_EOI", 0)
            assert eoi["vector"] == -1 and eoi["apicid"] in (0, 1)
        else:
            doorbells += 1
            assert after[0] == "kvm_userspace_exit", after
    assert eois > 5 and doorbells > 5
    assert " kvm_apic:             apic_write APIC_EOI = 0x0" in done.stdout
