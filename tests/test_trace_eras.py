"""Tracepoint texts by kernel era (engine/trace/tracepoints.py, printk.py): today's 6.18
texts — the pferr flags with ``PK|SS|SGX``, ``kvm_exit`` with ``requests``, ``kvm_entry``
with ``intr_info``/``error_code`` — and the older ones they replaced; the kernel's
TP_STRUCT__entry field names with their earlier names as aliases (docs/architecture.md
§6.3, ``mmuscope replay``).  The 6.18 lines are written from the running kernel's
``events/*/format`` print fmts (tests/test_kernel_formats.py checks those on the machine)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from mmuscope.engine.replay.model import ReplayModel
from mmuscope.engine.trace import (
    CURRENT,
    NO_GEN_2019,
    PFERR_FLAGS_OLD,
    PRE_3_11,
    PRE_6_14,
    PRE_6_18,
    PRE_2019,
    TRACEPOINTS,
    format_line,
    format_pferr,
    json_fields,
    parse_line,
)

from tests.test_replay import MMUSCOPE

EXIT_618 = (
    "vcpu 0 reason EPT_VIOLATION rip 0x401000 info1 0x0000000000000181 info2"
    " 0x0000000000000000 intr_info 0x00000000 error_code 0x00000000 requests 0x0000000000000000"
)
ENTRY_618 = "vcpu 0, rip 0x401000 intr_info 0x00000000 error_code 0x00000000"
FAST_PF_PK = (
    "vcpu 0 gva 7f3c2000 error_code P|W|U|PK sptep 00000000fd98c937 old 0x6000001a2b3cb75"
    " new 6000001a2b3cb77 spurious 0 fixed 1"
)

# (tracepoint, text, the variant it is, some of its fields)
ERAS: list[tuple[str, str, str, dict[str, object]]] = [
    ("fast_page_fault", FAST_PF_PK, CURRENT, {"error_code": 0x27, "vcpu_id": 0}),
    ("kvm_mmu_pagetable_walk", "addr 401000 pferr 8011 P|SGX|F", CURRENT, {"pferr": 0x8011}),
    ("kvm_mmu_walker_error", "pferr 45 P|U|SS", CURRENT, {"pferr": 0x45}),
    ("kvm_mmu_pagetable_walk", "addr 7f3c2010 pferr 23 P|W|0x20", PRE_6_18, {"pferr": 0x23}),
    ("kvm_mmu_walker_error", "pferr 8009 P|RSVD|0x8000", PRE_6_18, {"pferr": 0x8009}),
    ("kvm_exit", EXIT_618, CURRENT, {"exit_reason": "EPT_VIOLATION", "info1": 0x181}),
    (
        "kvm_exit",
        EXIT_618.replace("EPT_VIOLATION", "INVALID_STATE FAILED_VMENTRY"),
        CURRENT,
        {"exit_reason": "INVALID_STATE", "failed_vmentry": True},
    ),
    (
        "kvm_exit",
        EXIT_618.replace("EPT_VIOLATION", "PF excp")
        .replace("requests 0x0000000000000000", "")
        .rstrip(),
        PRE_6_14,
        {"exit_reason": "PF excp"},
    ),
    (
        "kvm_exit",
        EXIT_618.replace("EPT_VIOLATION", "npf").replace("0000000000000000", "0000000000000400"),
        CURRENT,
        {"exit_reason": "npf", "requests": 0x400},
    ),
    ("kvm_entry", ENTRY_618, CURRENT, {"vcpu_id": 0, "rip": 0x401000, "immediate_exit": False}),
    (
        "kvm_entry",
        "vcpu 1, rip 0xffffffff81000000 intr_info 0x80000b0e error_code 0x00000002[immediate exit]",
        CURRENT,
        {"intr_info": 0x80000B0E, "error_code": 2, "immediate_exit": True},
    ),
    ("kvm_entry", "vcpu 1, rip 0x401000", PRE_6_14, {"rip": 0x401000}),
    (
        "kvm_mmu_get_page",
        "sp gfn 7f000 l2 8-byte q0 wux nxe ad root 0 sync existing",
        NO_GEN_2019,
        {"gfn": 0x7F000, "level": 2, "created": False},
    ),
    (
        "kvm_mmu_prepare_zap_page",
        "sp gfn 5 l1 8-byte q0 wux nxe !ad root 0 unsync",
        NO_GEN_2019,
        {"unsync": True, "ad": False},
    ),
    (
        "kvm_mmu_get_page",
        "sp gfn 7f000 2 pae q0 wux nxe root 0 sync new",
        PRE_3_11,
        {"level": 2, "pae": True, "created": True},
    ),
    (
        "kvm_mmu_sync_page",
        "sp gfn 1a2b3 1 q0 direct -u- !nxe root 1 unsync",
        PRE_3_11,
        {"pae": False},
    ),
    ("kvm_mmu_unsync_page", "sp gen 1a gfn 5 l1 8-byte q0 wu- nxe ad root 0 unsync", PRE_2019, {}),
]


@pytest.mark.parametrize(("name", "text", "variant", "some"), ERAS)
def test_each_era_parses_into_fields_and_prints_back(
    name: str, text: str, variant: str, some: dict[str, object]
) -> None:
    tp = TRACEPOINTS[name]
    found = tp.try_match(text)
    assert found is not None, text
    assert found[0] == variant
    assert found[1].items() >= some.items()
    assert tp.format(found[1], variant) == text


def test_no_gen_texts_have_no_gen() -> None:
    get_page = TRACEPOINTS["kvm_mmu_get_page"]
    for variant, text in (
        (NO_GEN_2019, "sp gfn 7f000 l2 8-byte q0 wux nxe ad root 0 sync existing"),
        (PRE_3_11, "sp gfn 7f000 2 pae q0 wux nxe root 0 sync new"),
    ):
        fields = get_page.parse(text)
        assert "gen" not in fields
        assert "gen" not in get_page.format({**fields, "gen": 1}, variant)
        if variant == NO_GEN_2019:  # the same role text as today's, but for the gen
            assert get_page.format({**fields, "gen": 1}) == "sp gen 1 " + text[3:]
    assert "ad" not in get_page.parse("sp gfn 7f000 2 pae q0 wux nxe root 0 sync new")
    # the replay model keys such pages without a generation
    model = ReplayModel()
    head = "   CPU 0/KVM-5120    [001] ...1.  3020.10451{}: "
    for ts, name, text in (
        (1, "kvm_mmu_get_page", "sp gfn 5 l1 8-byte q0 wux nxe ad root 0 sync new"),
        (2, "kvm_mmu_prepare_zap_page", "sp gfn 5 l1 8-byte q0 wux nxe ad root 0 sync"),
    ):
        event = parse_line(head.format(ts) + f"{name}: {text}")
        assert event is not None and model.apply(event)
        assert len(model.pages) == (1 if ts == 1 else 0)
    assert model.unknown_zaps == 0


def test_pferr_flags_by_era() -> None:
    assert format_pferr(0x8067) == "P|W|U|PK|SS|SGX"
    assert format_pferr(0x8067, PFERR_FLAGS_OLD) == "P|W|U|0x8060"
    assert format_pferr(0x1F) == format_pferr(0x1F, PFERR_FLAGS_OLD) == "P|W|U|RSVD|F"
    walk = TRACEPOINTS["kvm_mmu_pagetable_walk"]
    assert walk.format({"addr": 1, "pferr": 0x29}) == "addr 1 pferr 29 P|PK|RSVD"
    assert walk.format({"addr": 1, "pferr": 0x29}, PRE_6_18) == "addr 1 pferr 29 P|RSVD|0x20"
    # a text only the other table prints is not that era's
    assert walk.try_match("addr 1 pferr 29 P|RSVD|0x20", CURRENT) is None
    assert walk.try_match("addr 1 pferr 29 P|PK|RSVD", PRE_6_18) is None


def test_kernels_6_14_to_6_17_print_requests_but_the_old_pferr_flags() -> None:
    """`requests` (kvm_exit) and `intr_info`/`error_code` (kvm_entry) came with 6.14 (Maxim
    Levitsky, "KVM: x86: Add information about pending requests to kvm_exit tracepoint",
    "KVM: x86: Add interrupt injection information to the kvm_entry tracepoint"), the
    PK|SS|SGX flags with 6.18: a pre-6.18 kernel from 6.14 on prints both new texts."""
    exit_, entry = TRACEPOINTS["kvm_exit"], TRACEPOINTS["kvm_entry"]
    fields = exit_.parse(EXIT_618)
    assert exit_.format(fields, PRE_6_18) == EXIT_618
    assert "requests" not in exit_.format(fields, PRE_6_14)
    assert entry.format(entry.parse(ENTRY_618), PRE_6_18) == ENTRY_618
    assert entry.format(entry.parse(ENTRY_618), PRE_6_14) == "vcpu 0, rip 0x401000"
    walk = TRACEPOINTS["kvm_mmu_pagetable_walk"]
    for variant in (PRE_6_18, PRE_6_14):  # both before the PK|SS|SGX names
        assert walk.format({"addr": 1, "pferr": 0x29}, variant) == "addr 1 pferr 29 P|RSVD|0x20"


def test_real_shaped_lines_of_kvm_exit_and_entry_parse_into_fields() -> None:
    head = "   CPU 0/KVM-5120    [001] d..1.  3020.104512: "
    exit_ = parse_line(head + "kvm_exit: " + EXIT_618)
    entry = parse_line(head + "kvm_entry: " + ENTRY_618)
    assert exit_ is not None and entry is not None
    assert exit_.fields == {
        **{"vcpu_id": 0, "exit_reason": "EPT_VIOLATION", "failed_vmentry": False},
        **{"guest_rip": 0x401000, "info1": 0x181, "info2": 0, "intr_info": 0},
        **{"error_code": 0, "requests": 0},
    }
    assert entry.fields == {
        **{"vcpu_id": 0, "rip": 0x401000, "intr_info": 0, "error_code": 0},
        "immediate_exit": False,
    }
    model = ReplayModel()
    for event in (entry, exit_):
        model.apply(event)
    assert (model.vcpus[0].entries, model.vcpus[0].exits) == (1, 1)
    assert model.exit_reasons == {"EPT_VIOLATION": 1}


def test_renamed_fields_keep_their_earlier_names_as_aliases() -> None:
    fast = TRACEPOINTS["fast_page_fault"].parse(FAST_PF_PK)
    assert {"vcpu_id", "cr2_or_gpa", "old_spte", "new_spte"} <= set(fast)
    assert not {"vcpu", "gva", "old", "new"} & set(fast)
    out = json_fields("fast_page_fault", fast)
    assert (out["vcpu"], out["gva"], out["old"], out["new"]) == (
        fast["vcpu_id"],
        fast["cr2_or_gpa"],
        fast["old_spte"],
        fast["new_spte"],
    )
    assert list(out)[: len(fast) + 1] == [*list(fast)[:6], "ret", "spurious", "fixed"]
    assert list(out)[len(fast) + 1 :] == ["vcpu", "gva", "old", "new"]  # the kernel's first
    zap = json_fields("kvm_mmu_zap_all_fast", {"mmu_valid_gen": 1, "mmu_used_pages": 44})
    assert zap["used_pages"] == 44
    # the earlier names still format (an engine or script not yet renamed)
    old = {"vcpu": 0, "gva": 0x7F3C2000, "error_code": 0x27, "sptep": 0xFD98C937}
    old |= {"old": 0x6000001A2B3CB75, "new": 0x6000001A2B3CB77, "spurious": 0, "fixed": 1}
    assert TRACEPOINTS["fast_page_fault"].format(old) == FAST_PF_PK
    fault = {"vcpu_id": 1, "address": 0xFEE00000, "error_code": 4}
    assert TRACEPOINTS["kvm_page_fault"].parse(TRACEPOINTS["kvm_page_fault"].format(fault)) == {
        "vcpu_id": 1,
        "guest_rip": 0,
        "fault_address": 0xFEE00000,
        "error_code": 4,
    }


def test_replay_jsonl_prints_the_kernel_names_and_the_aliases(tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    head = "   CPU 0/KVM-5120    [001] ...1.  3020.10451{}: "
    trace.write_text(
        head.format(1) + "fast_page_fault: " + FAST_PF_PK + "\n"
        + head.format(2) + "kvm_mmu_zap_all_fast: kvm-mmu-valid-gen 0 used_pages 2c\n"
        + head.format(3) + "kvm_page_fault: vcpu 0 rip 0x401000 address 0x0000000000402000"
        " error_code 0x6\n"
        + head.format(4) + "kvm_exit: " + EXIT_618 + "\n"
    )  # fmt: skip
    out = subprocess.run(
        [str(MMUSCOPE), "replay", str(trace), "--jsonl"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    fast, zap, fault, exit_ = (json.loads(line)["fields"] for line in out.stdout.splitlines())
    assert fast["vcpu_id"] == fast["vcpu"] == 0 and fast["error_code"] == 0x27
    assert fast["cr2_or_gpa"] == fast["gva"] == 0x7F3C2000
    assert fast["old_spte"] == fast["old"] and fast["new_spte"] == fast["new"]
    assert zap == {"mmu_valid_gen": 0, "mmu_used_pages": 0x2C, "used_pages": 0x2C}
    assert fault["fault_address"] == fault["address"] == 0x402000
    assert fault["guest_rip"] == fault["rip"] == 0x401000
    assert exit_["requests"] == 0 and exit_["exit_reason_name"] == "EPT_VIOLATION"
    assert (exit_["exit_reason"], exit_["isa"]) == (48, 1)  # the u32, KVM_ISA_VMX


def test_engine_events_use_the_kernel_names() -> None:
    from mmuscope.engine.mmu.mmu_pages import MmuPages

    events: list[tuple[str, dict[str, object]]] = []
    pages = MmuPages(emit=lambda name, **fields: events.append((name, fields)))
    pages.zap_all_fast()
    (zap,) = [fields for name, fields in events if name == "kvm_mmu_zap_all_fast"]
    assert set(zap) == {"mmu_valid_gen", "mmu_used_pages"}
    assert TRACEPOINTS["kvm_mmu_zap_all_fast"].format(zap)  # type: ignore[arg-type]


RECORDED = Path(__file__).parent / "fixtures" / "trace-kvm-pvm-6.18.txt"


def test_a_trace_recorded_on_6_18_parses_and_prints_back_exactly() -> None:
    known = 0
    for line in RECORDED.read_text().splitlines():
        event = parse_line(line)
        if event is None:
            assert line.startswith("#"), line
            continue
        head, _, text = line.partition(f": {event.name}: ")
        tp = TRACEPOINTS.get(event.name)
        if tp is None:  # kvm_fpu, kvm_update_master_clock: as text
            assert event.fields == {"text": text}
            continue
        assert tp.try_match(text) == (CURRENT, event.fields), line
        flags = head.split("] ")[1].split(" ")[0]
        assert format_line(event, flags=flags) == line
        known += 1
    assert known == 101  # with the 4 kvm_userspace_exit lines (templates since 6.18's exits)
    events = [e for e in map(parse_line, RECORDED.read_text().splitlines()) if e is not None]
    model = ReplayModel()
    for event in events:
        model.apply(event)
        model.audit()
    assert model.flips_total == 1 and model.zapped >= 1
