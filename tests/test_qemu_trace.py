"""Recorded memslot ioctls: QEMU's kvm_set_user_memory trace event and strace, replayed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine.layouts.qemu_trace import (
    MemoryRegionCall,
    TraceFormatError,
    parse_memory_region_calls,
    replay_calls,
)
from mmuscope.engine.memslots.vm import Vm

from tests.datafiles import fixture_text, realdata_path

C = MemoryRegionCall
T, S = "qemu-trace", "strace"


def fixture(name: str) -> str:
    return fixture_text(name)


def realdata(name: str) -> str:
    return realdata_path(name).read_text()


def slots(vm: Vm, as_id: int) -> list[tuple[int, int, int, int, int]]:
    """(id, gpa, size, flags, userspace_addr) of every slot, by gpa."""
    return [(s.id, s.gpa, s.size, s.flags, s.userspace_addr) for s in vm.memslots(as_id)]


# --- parsing ----------------------------------------------------------------------------


def test_trace_event_formats() -> None:
    assert parse_memory_region_calls(fixture("qemu-trace-kvm_set_user_memory-formats.txt")) == [
        C(6, 0x0, 0x0, 0x0, 0x80000000, 0x7F0000000000, 0, T),
        C(7, 0x1, 0x2, 0xFFFC0000, 0x40000, 0x7F0080000000, 0, T),  # PID@TIME: prefix
        C(8, 0x10000, 0x0, 0x0, 0x80000000, 0x7F0000000000, 0, T),  # AddrSpace#1 Slot#0
        C(9, 0x2, 0x1, 0xFD000000, 0x1000000, 0x7F0090000000, 0, T),  # QEMU 8.2 guest_memfd
        C(10, 0x3, 0x0, 0x40000000, 0x1000, 0x7F00A0000000, -17, T),  # ret=-17
        C(11, 0x2, 0x0, 0xFD000000, 0x0, 0x7F0090000000, 0, T),  # simpletrace.py
        C(12, 0x4, 0x0, 0x100000000, 0x40000000, 0x7F00B0000000, 0, T),  # ftrace backend
        C(13, 0x6, 0x0, 0x1234, 0x1000, 0x7F00C0000000, -22, T),  # ret as u32 0xffffffea
        C(14, 0x5, 0x0, 0x0, 0x1000, 0x7F0000000000, None, T),  # no ret=
    ]


def test_strace_formats() -> None:
    calls = parse_memory_region_calls(fixture("qemu-strace-kvm_set_user_memory_region.txt"))
    assert calls == [
        C(6, 0, 0, 0, 0x80000000, 0x7F0000000000, 0, S),
        C(7, 1, 2, 0xFFFC0000, 0x40000, 0x7F0080000000, 0, S),  # flags=KVM_MEM_READONLY
        C(8, 2, 0, 0x40000000, 0x1000, 0x7F00A0000000, -17, S),  # -1 EEXIST (File exists)
        C(9, 2, 1, 0xFD000000, 0x1000000, 0x7F0090000000, 0, S),  # joined with line 11
        C(12, 0x10000, 0, 0, 0x80000000, 0x7F0000000000, 0, S),  # "4321  " pid prefix
        C(14, 2, 0, 0xFD000000, 0, 0x7F0090000000, 0, S),
        C(15, 3, 3, 0x100000000, 0x100000, 0x7F00D0000000, 0, S),  # -y fd path, -T time
    ]  # slots 4 and 5: two calls unfinished, one unattributed "resumed": skipped
    assert calls[3].as_id == 0 and calls[4].as_id == 1


@pytest.mark.parametrize(
    ("line", "ret"),
    [
        ("= 0", 0),
        ("= -1 EINVAL (Invalid argument)", -22),
        ("= -1 ENOSPC (No space left on device)", -28),
        ("= -1 EWHATEVER (Unknown)", None),
        ("= ?", None),
        ("", None),
    ],
)
def test_strace_results(line: str, ret: int | None) -> None:
    text = "ioctl(7, KVM_SET_USER_MEMORY_REGION, {slot=1, flags=0x0, guest_phys_addr=0x1000, "
    text += f"memory_size=0x1000, userspace_addr=0x7f0000001000}}) {line}"
    (call,) = parse_memory_region_calls(text)
    assert call.recorded_ret == ret
    assert (call.slot, call.guest_phys_addr, call.memory_size) == (1, 0x1000, 0x1000)


def test_strace_resumed_without_pid_joins_the_only_pending_call() -> None:
    text = (
        "ioctl(7, KVM_SET_USER_MEMORY_REGION, {slot=1, flags=0, guest_phys_addr=0, "
        "memory_size=4096, userspace_addr=0x7f0000000000} <unfinished ...>\n"
        "<... ioctl resumed> ) = -1 EEXIST (File exists)\n"
    )
    assert parse_memory_region_calls(text) == [C(1, 1, 0, 0, 4096, 0x7F0000000000, -17, S)]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# only a comment\n\n",
        "kvm_set_user_memory\n",  # the name alone, e.g. from `-trace help`
        "kvm_set_user_memory Slot#1 flags=0x0 gpa=0x0 size=0x1000\n",  # no ua=
        "ioctl(7, KVM_SET_USER_MEMORY_REGION, 0x7ffd00000000) = 0\n",  # struct not decoded
        "ioctl(7, KVM_SET_USER_MEMORY_REGION, {slot=1, flags=KVM_MEM_BOGUS, guest_phys_addr=0,"
        " memory_size=4096, userspace_addr=0}) = 0\n",
        "ioctl(7, KVM_RUN, 0) = 0\n",
    ],
)
def test_nothing_recognised(text: str) -> None:
    with pytest.raises(TraceFormatError) as info:
        parse_memory_region_calls(text)
    assert "\n" not in str(info.value)
    hint = "must decode the struct" in str(info.value)
    assert hint == ("kvm_set_user_memory" in text or "KVM_SET_USER_MEMORY_REGION" in text)


@settings(max_examples=300, deadline=None)
@given(st.text(), st.integers(0, 3000))
def test_fuzz(text: str, cut: int) -> None:
    samples = [text, fixture("qemu-strace-kvm_set_user_memory_region.txt")[:cut] + text]
    for sample in samples:
        try:
            calls = parse_memory_region_calls(sample)
        except TraceFormatError:
            continue
        assert calls and all(c.slot >= 0 and c.memory_size >= 0 for c in calls)


# --- replay -----------------------------------------------------------------------------


def test_replay_fixture_matches_recorded_results() -> None:
    vm = Vm()
    calls = parse_memory_region_calls(fixture("qemu-trace-kvm_set_user_memory-formats.txt"))
    results = replay_calls(vm, calls)
    assert [r.ret for r in results] == [0, 0, 0, 0, -17, 0, 0, -22, -17]
    assert [r.matches_recorded for r in results] == [True] * 8 + [None]
    refused = results[4]
    assert refused.errno_name == "EEXIST" and refused.reason and "overlaps slot 0" in refused.reason
    assert results[7].errno_name == "EINVAL" and results[0].reason is None
    assert results[-1].generation == vm.generation(0)
    assert slots(vm, 0) == [
        (0, 0x0, 0x80000000, 0, 0x7F0000000000),
        (1, 0xFFFC0000, 0x40000, 2, 0x7F0080000000),
        (4, 0x100000000, 0x40000000, 0, 0x7F00B0000000),
    ]
    assert slots(vm, 1) == [(0, 0x0, 0x80000000, 0, 0x7F0000000000)]


def test_replay_reports_mismatch_and_missing_address_space() -> None:
    vm = Vm(address_spaces=1)
    calls = [
        C(1, 0, 0, 0, 0x1000, 0x7F0000000000, -17, S),  # recorded refused, we accept
        C(2, 0x10000, 0, 0, 0x1000, 0x7F0000000000, 0, S),  # address space 1 absent
    ]
    first, second = replay_calls(vm, calls)
    assert (first.ret, first.matches_recorded, first.generation) == (0, False, 1)
    assert (second.ret, second.errno_name, second.matches_recorded) == (-22, "EINVAL", False)
    assert second.generation == -1


# --- the real traces in shared/realdata --------------------------------------------------

# What the smm-off trace leaves in address space 0 (id, gpa, size, flags, ua): the pc
# low megabyte split by PAM state, VGA VRAM with dirty logging, the BIOS read-only.
SMM_OFF_AS0 = [
    (0, 0x0, 0xA0000, 0, 0x7F3B17A00000),
    (3, 0xC0000, 0xB000, 0, 0x7F3B17AC0000),
    (5, 0xCB000, 0x3000, 0, 0x7F3B17ACB000),
    (6, 0xCE000, 0x1A000, 0, 0x7F3B17ACE000),
    (7, 0xE8000, 0x8000, 0, 0x7F3B17AE8000),
    (8, 0xF0000, 0x10000, 0, 0x7F3B17AF0000),
    (9, 0x100000, 0xBFF00000, 0, 0x7F3B17B00000),
    (4, 0xFD000000, 0x1000000, 1, 0x7F3A81600000),
    (2, 0xFFFC0000, 0x40000, 2, 0x7F3B14600000),
    (1, 0x100000000, 0x940000000, 0, 0x7F3BD7A00000),
]


def test_realdata_smm_off_replays_cleanly() -> None:
    calls = parse_memory_region_calls(realdata("qemu-trace-kvm_set_user_memory-pc-smm-off.txt"))
    assert len(calls) == 52 and all(c.recorded_ret == 0 and c.as_id == 0 for c in calls)
    vm = Vm()
    results = replay_calls(vm, calls)
    assert all(r.ret == 0 and r.matches_recorded for r in results)
    assert slots(vm, 0) == SMM_OFF_AS0
    assert slots(vm, 1) == []


def test_realdata_smm_on_fills_address_space_1() -> None:
    calls = parse_memory_region_calls(realdata("qemu-trace-kvm_set_user_memory-pc-smm-on.txt"))
    assert len(calls) == 112 and sum(c.as_id == 1 for c in calls) == 54
    vm = Vm()
    results = replay_calls(vm, calls)
    assert all(r.ret == 0 and r.matches_recorded for r in results)
    ua = 0x7FB2A3E00000  # same guest RAM layout as smm-off, another mmap base
    assert [s[:4] for s in slots(vm, 0)] == [s[:4] for s in SMM_OFF_AS0]
    assert slots(vm, 1) == [
        (0, 0x0, 0xC0000, 0, ua),  # SMRAM: RAM continues over 0xa0000-0xbffff
        (1, 0xC0000, 0xB000, 0, ua + 0xC0000),
        (3, 0xCB000, 0x3000, 0, ua + 0xCB000),
        (6, 0xCE000, 0x1A000, 0, ua + 0xCE000),
        (7, 0xE8000, 0x8000, 0, ua + 0xE8000),
        (8, 0xF0000, 0x10000, 0, ua + 0xF0000),
        (9, 0x100000, 0xBFF00000, 0, ua + 0x100000),
        (2, 0xFD000000, 0x1000000, 1, 0x7FB212000000),
        (4, 0xFFFC0000, 0x40000, 2, 0x7FB2A0400000),
        (5, 0x100000000, 0x940000000, 0, 0x7FB363E00000),
    ]
    assert results[-1].generation == vm.generation(1)
