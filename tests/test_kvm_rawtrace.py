"""The ring buffers read in binary (`engine.kvm.rawtrace`): pages laid out as
kernel/trace/ring_buffer.c writes them, the host's format files, and `kvm --summary`
(which reads them) against the same program's text trace replayed."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from mmuscope.engine.kvm.rawtrace import (
    PAGE_DATA,
    TYPE_PADDING,
    TYPE_TIME_EXTEND,
    TYPE_TIME_STAMP,
    Tally,
    parse_format,
    parse_page,
)

from tests.kvm_host import needs_tracing, our_instances, run_cli

GET_PAGE_FORMAT = """name: kvm_mmu_get_page
ID: 128
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:__u8 mmu_valid_gen;\toffset:8;\tsize:1;\tsigned:0;
\tfield:__u64 gfn;\toffset:16;\tsize:8;\tsigned:0;
\tfield:__u32 role;\toffset:24;\tsize:4;\tsigned:0;
\tfield:__u32 root_count;\toffset:28;\tsize:4;\tsigned:0;
\tfield:bool unsync;\toffset:32;\tsize:1;\tsigned:0;
\tfield:bool created;\toffset:33;\tsize:1;\tsigned:0;
\tfield:__u8 insn[15];\toffset:34;\tsize:15;\tsigned:0;

print fmt: "..."
"""


def record(kind: int, pid: int, body: bytes) -> bytes:
    """An event's data: the common fields, then `body`, padded to 4 bytes."""
    data = struct.pack("<HBBi", kind, 0, 0, pid) + body
    return data + bytes(-len(data) % 4)


def header(type_len: int, delta: int) -> bytes:
    return struct.pack("<I", type_len | delta << 5)


def page(ts: int, *chunks: bytes, flags: int = 0) -> bytes:
    body = b"".join(chunks)
    return struct.pack("<QQ", ts, len(body) | flags) + body + bytes(4096 - PAGE_DATA - len(body))


def test_a_format_file_gives_the_fields_by_their_struct_names() -> None:
    fmt = parse_format(GET_PAGE_FORMAT)
    assert fmt is not None and (fmt.id, fmt.name) == (128, "kvm_mmu_get_page")
    assert [f.name for f in fmt.fields][:3] == ["mmu_valid_gen", "gfn", "role"]
    data = bytearray(49)
    struct.pack_into("<HBBiBxxxxxxxQII??", data, 0, 128, 0, 0, 7, 1, 0x1234, 0x3704, 2, False,
                     True)  # fmt: skip
    data[34:37] = b"\x88\x18\x90"
    fields = fmt.decode(bytes(data))
    assert fields["gfn"] == 0x1234 and fields["role"] == 0x3704 and fields["root_count"] == 2
    assert (fields["mmu_valid_gen"], fields["created"], fields["unsync"]) == (1, 1, 0)
    assert fields["insn"] == b"\x88\x18\x90" + bytes(12)


def test_a_page_of_every_entry_kind() -> None:
    small = record(128, 42, b"\x01" * 8)  # 16 bytes: type_len 4
    large = record(85, 42, b"\x02" * 120)  # 128 bytes: type_len 0, the length follows
    chunks = [
        header(len(small) // 4, 10), small,
        header(TYPE_TIME_EXTEND, 5), struct.pack("<I", 1),  # + (1 << 27 | 5)
        header(0, 3), struct.pack("<I", len(large) + 4), large,
        header(TYPE_PADDING, 1), struct.pack("<I", 8), bytes(4),  # a discarded event
        header(TYPE_TIME_STAMP, 7), struct.pack("<I", 2),  # absolute: 2 << 27 | 7
        header(len(small) // 4, 1), small,
        header(TYPE_PADDING, 0),  # the rest of the page
    ]  # fmt: skip
    out: list = []
    assert parse_page(page(1000, *chunks, flags=1 << 31), 3, out) is True  # events missed
    assert [(e.ts, e.cpu, e.type, e.pid, len(e.data)) for e in out] == [
        (1010, 3, 128, 42, 16),
        (1010 + (1 << 27 | 5) + 3, 3, 85, 42, 128),
        ((2 << 27 | 7) + 1, 3, 128, 42, 16),
    ]
    tally = Tally(keep=frozenset({85}))
    kept: list = []
    assert parse_page(page(1000, *chunks), 0, kept, tally) is False
    assert [e.type for e in kept] == [85] and tally.counts == {128: 2, 85: 1}
    assert tally.first == {128: 1010, 85: 1010 + (1 << 27 | 5) + 3}


@needs_tracing
def test_summary_from_the_ring_buffers_is_the_text_replayed(tmp_path: Path) -> None:
    """`kvm churn --summary --trace-out F` counts the records its lines are made of: the
    file replayed (`replay --summary`, the text parser) gives the same counts, event by
    event, and `unmatched`, so the file holds every event; a second run read binary
    only (`--summary`) agrees on every kvmmmu event and the emulated instructions."""
    trace = tmp_path / "churn.trace"
    text = json.loads(run_cli("kvm", "churn", "--summary", "--trace-out", str(trace)).stdout)
    replayed = json.loads(run_cli("replay", str(trace), "--summary").stdout)
    assert {k: text[k] for k in replayed} == replayed
    assert replayed["events"] == replayed["lines"] == sum(replayed["by_event"].values())
    raw = json.loads(run_cli("kvm", "churn", "--summary").stdout)
    noise = {"kvm_fpu", "kvm_update_master_clock", "kvm_userspace_exit"}  # host timing
    assert {k: v for k, v in raw["by_event"].items() if k not in noise} == {
        k: v for k, v in text["by_event"].items() if k not in noise
    }
    assert raw["by_event"]["kvm_mmu_prepare_zap_page"] == 17
    assert raw["unmatched"] == text["unmatched"] == 0
    assert raw["emulated"] == text["emulated"] and raw["lost_events"] == 0
    assert list(raw)[:5] == ["lines", "events", "skipped", "unmatched", "by_event"]
    assert not our_instances()


def _kernel_text_and_ring_buffers(name: str, pages: int) -> tuple[list[str], list[str], list[Any]]:
    """One run of `name` in a private instance: the kernel's own text of it (the
    instance's `trace` file, which leaves the buffers as they are), then the same
    records read from the ring buffers and decoded (lines and events)."""
    import os

    from mmuscope.engine.kvm.program import build_program
    from mmuscope.engine.kvm.rawtrace import Decoder, RawPipes, read_formats
    from mmuscope.engine.kvm.record import buffer_kb
    from mmuscope.engine.kvm.runner import run_on_kernel
    from mmuscope.engine.kvm.tracing import TraceInstance, find_tracefs

    program = build_program(name, pages)
    with TraceInstance(find_tracefs(), pid=os.getpid(), buffer_kb=buffer_kb(program)) as inst:
        run_on_kernel(program, on_ready=lambda run: inst.start(), before_close=inst.stop)
        text = (inst.path / "trace").read_text().splitlines()
        pipes = RawPipes(inst.path)
        try:
            decoder = Decoder(read_formats(inst.path / "events", inst.subsystems))
            raws = pipes.read_available()
        finally:
            pipes.close()
    kernel = [line for line in text if not line.startswith("#")]
    return kernel, decoder.lines(raws).splitlines(), [decoder.event(raw) for raw in raws]


@needs_tracing
def test_the_ring_buffers_decoded_print_what_the_kernel_prints() -> None:
    """Every record of `churn` (shadow pages made and zapped, walks, sptes, emulated
    instructions, MMIO, the fast zap, kvm_fpu and kvm_userspace_exit), of `mmio`, of
    `ptwrite` (an unsync page) and of `fork`: the line `kvm --trace-out` writes
    (`Decoder.lines`) is the kernel's own, byte for byte after the comm column (the
    kernel's comes from its saved_cmdlines), and the event it makes is the one the text
    parser makes of the kernel's line: the same fields, types and order."""
    from mmuscope.engine.trace import parse_line

    for name, pages in (("churn", 4), ("mmio", 2), ("ptwrite", 4), ("fork", 2)):
        kernel, ours, events = _kernel_text_and_ring_buffers(name, pages)
        assert len(kernel) == len(ours) > 100
        for theirs, mine, event in zip(kernel, ours, events, strict=True):
            assert theirs.split("-", 1)[1] == mine.split("-", 1)[1]
            parsed = parse_line(theirs)
            assert parsed is not None and parsed.name == event.name
            assert list(parsed.fields.items()) == list(event.fields.items())
            assert [type(v) for v in parsed.fields.values()] == [
                type(v) for v in event.fields.values()
            ]
            assert (parsed.ts, parsed.cpu, parsed.pid) == (event.ts, event.cpu, event.pid)
    assert not our_instances()
