"""Every tracepoint the project prints or parses, against the running kernel's own
``events/SYSTEM/NAME/format``.

For each tracepoint in `engine.trace.TRACEPOINTS`, the kernel's ``print fmt`` is turned into
a regex (`engine.trace.kernel_format`) and the project's printer, on many field values,
must print lines that regex matches; the fields the kernel prints as they are
(``REC->name``) must come back from our parser under the kernel's name with the same value.
The pferr flag tables of the print fmt must be the project's. Only ``format`` files are
read: no tracing state changes. Skipped, with the reason, without tracefs or without the
kvm modules; a tracepoint this kernel lacks is skipped by name.
"""

from __future__ import annotations

import os
import platform
import random
import re
import subprocess
from pathlib import Path

import pytest
from mmuscope.engine.events import FieldValue
from mmuscope.engine.trace import PFERR_FLAGS, TRACEPOINTS, Tracepoint, parse_line
from mmuscope.engine.trace.kernel_format import KernelFormat, parse_format_file, read_format
from mmuscope.engine.trace.printk import ACCESS_STR, Slot

TRACEFS = Path("/sys/kernel/tracing")
RECORDED = Path(__file__).parent / "fixtures" / "trace-kvm-pvm-6.18.txt"
SAMPLES = 40  # printed lines per tracepoint
SP_EVENTS = ("kvm_mmu_get_page", "kvm_mmu_prepare_zap_page", "kvm_mmu_sync_page")
SP_EVENTS += ("kvm_mmu_unsync_page",)
# Our fields that are no struct field of the kernel's: computed in the printk.
ROLE_LABELS = {"gen", "level", "gpte_bytes", "quadrant", "direct", "access", "invalid"}
COMPUTED = {
    **{name: ROLE_LABELS | {"nxe", "ad"} for name in SP_EVENTS},
    "kvm_mmu_set_spte": {"access_str"},
    "fast_page_fault": {"spurious", "fixed"},
    "check_mmio_spte": {"valid"},
    "kvm_exit": {"failed_vmentry"},
    "kvm_dirty_ring_push": {"used"},  # dirty_index - reset_index
    "kvm_dirty_ring_reset": {"used"},
    "kvm_userspace_exit": {"code"},  # the reason's number, or -errno
}


SYMBOLS = {
    "type": ["unsatisfied-read", "read", "write"],  # kvm_mmio
    "flags": ["real", "vm16", "prot16", "prot32", "prot64"],  # kvm_emulate_insn's mode
    "reason": ["KVM_EXIT_MMIO", "KVM_EXIT_IO", "KVM_EXIT_HLT", "restart", "error"],
    "reg": ["APIC_EOI", "APIC_ID", "APIC_ICR", "APIC_TMICT", "APIC_ECTRL"],  # kvm_apic
}


def ours(name: str, field: str) -> str:
    """Our name of the kernel's ``field``: its own, but where docs/architecture.md §6.3
    fixes the printk's label (the sp events' ``gen`` is mmu_valid_gen)."""
    return "gen" if name in SP_EVENTS and field == "mmu_valid_gen" else field


def _tracefs() -> Path:
    """The tracefs with the kvm events, mounted if it is not and we are root."""
    events = TRACEFS / "events"
    if not events.is_dir() and os.geteuid() == 0 and TRACEFS.is_dir():
        subprocess.run(
            ["mount", "-t", "tracefs", "nodev", str(TRACEFS)], capture_output=True, timeout=10
        )
    if not events.is_dir():
        pytest.skip(f"no tracefs at {TRACEFS} (as root: mount -t tracefs nodev {TRACEFS})")
    if not os.access(events, os.R_OK | os.X_OK):
        pytest.skip(f"{events} is not readable (needs root)")
    if not (events / "kvm").is_dir():
        pytest.skip(f"kernel {platform.release()} has no kvm events (kvm module not loaded)")
    return TRACEFS


@pytest.fixture(scope="module")
def tracefs() -> Path:
    return _tracefs()


def kernel_format(tracefs: Path, tp: Tracepoint) -> KernelFormat:
    found = read_format(tracefs, tp.system, tp.name)
    if found is None:
        pytest.skip(f"kernel {platform.release()} has no {tp.system}:{tp.name} tracepoint")
    return found


def sample_value(slot: Slot, rng: random.Random) -> FieldValue:
    """A value of this slot's kind, with the edge values (0, max) among them."""
    if slot.kind == "bool" or slot.kind == "01":
        return rng.random() < 0.5
    if slot.kind == "access":
        return rng.randrange(len(ACCESS_STR))
    if slot.kind == "s":  # the symbols of each __print_symbolic
        return rng.choice(SYMBOLS[slot.name])
    if slot.kind == "exit":
        return rng.choice(["EPT_VIOLATION", "HLT", "PF excp", "npf", "0x7f"])
    if slot.kind == "rwxu":
        return "".join(rng.choice(pair) for pair in ("r-", "w-", "x-")) + rng.choice(["u", "-", ""])
    if slot.kind == "hexbytes":
        return " ".join(f"{byte:02x}" for byte in rng.randbytes(rng.randrange(16)))
    if slot.kind == "d":
        return rng.choice([0, -12, rng.randrange(-(2**31), 2**31)])
    if slot.name == "gpte_bytes":
        return rng.choice([4, 8])
    bits = 32 if slot.kind in ("u", "08x", "pferr", "pferr_old") else 64
    return rng.choice([0, 1, 2**bits - 1, rng.randrange(2**bits)])


def samples(tp: Tracepoint) -> list[dict[str, FieldValue]]:
    rng = random.Random(tp.name)
    out = []
    for _ in range(SAMPLES):
        fields: dict[str, FieldValue] = {}
        for slot in tp.slots():
            fields.setdefault(slot.name, sample_value(slot, rng))
        out.append(fields)
    return out


@pytest.mark.parametrize("name", list(TRACEPOINTS))
def test_our_printer_prints_what_the_kernels_print_fmt_prints(tracefs: Path, name: str) -> None:
    tp = TRACEPOINTS[name]
    kernel = kernel_format(tracefs, tp)
    for fields in samples(tp):
        if name == "kvm_mmu_set_spte":  # the kernel prints w from the spte's bit 1
            spte = fields["spte"]
            assert isinstance(spte, int) and isinstance(fields["access_str"], str)
            letters = fields["access_str"]
            fields["access_str"] = letters[0] + "-w"[spte >> 1 & 1] + letters[2:]
        text = tp.format(fields)
        printed = kernel.values(text)
        assert printed is not None, f"the kernel cannot print {text!r}; print fmt: {kernel.fmt!r}"
        parsed = tp.parse(text)
        for field, value in printed.items():
            mine = ours(name, field)
            assert mine in parsed, f"{name}: the kernel's {field} is not one of our fields"
            assert parsed[mine] == value, (name, field, text)


@pytest.mark.parametrize("name", list(TRACEPOINTS))
def test_our_field_names_are_the_kernels(tracefs: Path, name: str) -> None:
    tp = TRACEPOINTS[name]
    kernel = kernel_format(tracefs, tp)
    plain = {ours(name, f) for f in kernel.plain_args()}
    assert plain <= set(tp.fields), f"{name}: printed as is by the kernel: {plain}"
    struct = {ours(name, f) for f in kernel.field_names}
    extra = set(tp.fields) - struct - COMPUTED.get(name, set())
    assert not extra, f"{name}: {extra} are neither fields of {kernel.field_names} nor computed"


def test_the_pferr_flag_tables_are_the_kernels(tracefs: Path) -> None:
    for name, value in (
        ("fast_page_fault", "REC->error_code"),
        ("kvm_mmu_pagetable_walk", "REC->pferr"),
        ("kvm_mmu_walker_error", "REC->pferr"),
    ):
        kernel = kernel_format(tracefs, TRACEPOINTS[name])
        assert kernel.flag_tables()[value] == PFERR_FLAGS, name


def test_every_exit_reason_name_of_the_kernel_parses(tracefs: Path) -> None:
    tp = TRACEPOINTS["kvm_exit"]
    kernel = kernel_format(tracefs, tp)
    reason_arg = kernel.args[1]
    names = [n for n in _quoted(reason_arg) if n not in ("", " ")]
    assert len(names) > 50
    line = tp.format({"vcpu_id": 0, "exit_reason": "X"})
    for reason in names:
        text = line.replace("reason X", f"reason {reason}")
        assert kernel.values(text) is not None, text
        assert tp.parse(text)["exit_reason"] == reason


def _quoted(expr: str) -> list[str]:
    return re.findall(r'"([^"]*)"', expr)


def test_lines_recorded_on_this_project_match_the_kernels_print_fmt(tracefs: Path) -> None:
    """The recorded fixture's lines, printk text by printk text (a check of the regexes
    themselves: the kernel printed these)."""
    checked = 0
    for line in RECORDED.read_text().splitlines():
        event = parse_line(line)
        if event is None or event.name not in TRACEPOINTS:
            continue
        text = line.partition(f": {event.name}: ")[2]
        assert kernel_format(tracefs, TRACEPOINTS[event.name]).values(text) is not None, line
        checked += 1
    assert checked == 101  # 97 and the 4 kvm_userspace_exit lines (a template since 6.18's exits)


# -- the print fmt reader, without a kernel ----------------------------------------------

FAST_PF_FORMAT = r"""name: fast_page_fault
ID: 140
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:int vcpu_id;	offset:8;	size:4;	signed:1;
	field:gpa_t cr2_or_gpa;	offset:16;	size:8;	signed:0;
	field:u64 error_code;	offset:24;	size:8;	signed:0;
	field:u64 * sptep;	offset:32;	size:8;	signed:0;
	field:u64 old_spte;	offset:40;	size:8;	signed:0;
	field:u64 new_spte;	offset:48;	size:8;	signed:0;
	field:int ret;	offset:56;	size:4;	signed:1;

print fmt: "vcpu %d gva %llx error_code %s sptep %p old %#llx new %llx spurious %d fixed %d", REC->vcpu_id, REC->cr2_or_gpa, __print_flags(REC->error_code, "|", { ((((1UL))) << (0)), "P" }, { ((((1UL))) << (1)), "W" }, { ((((1UL))) << (5)), "PK" }, { ((((1UL))) << (3)), "RSVD" }), REC->sptep, REC->old_spte, REC->new_spte, REC->ret == 6, REC->ret == 5
"""  # noqa: E501 (a format file, shortened from 6.18's)


def test_a_format_file_reads_back_into_fields_flags_and_a_regex() -> None:
    kernel = parse_format_file(FAST_PF_FORMAT, "kvmmmu", "fast_page_fault")
    assert kernel.field_names == (
        *("vcpu_id", "cr2_or_gpa", "error_code", "sptep", "old_spte", "new_spte", "ret"),
    )
    assert kernel.plain_args() == ("vcpu_id", "cr2_or_gpa", "sptep", "old_spte", "new_spte")
    assert kernel.flag_tables() == {
        "REC->error_code": ((1, "P"), (2, "W"), (32, "PK"), (8, "RSVD"))
    }
    line = "vcpu 1 gva 7f3c2000 error_code P|W|PK sptep 00000000fd98c937 old 0x0 new 6"
    line += " spurious 0 fixed 1"
    assert kernel.values(line) == {
        "vcpu_id": 1,
        "cr2_or_gpa": 0x7F3C2000,
        "sptep": 0xFD98C937,
        "old_spte": 0,
        "new_spte": 6,
    }
    for wrong in (
        line.replace("old 0x0", "old 0"),  # %#llx of 0 is 0x0 in the kernel
        line.replace("gva 7f3c2000", "gva 07f3c2000"),  # %llx has no leading zero
        line.replace("00000000fd98c937", "fd98c937"),  # a hashed %p has 16 digits
        line.replace("P|W|PK", "P W"),  # the flags' delimiter is "|"
        line.replace("spurious 0", "spurious x"),
    ):
        assert kernel.values(wrong) is None, wrong
    assert kernel.values(line.replace("00000000fd98c937", "(null)")) is not None
