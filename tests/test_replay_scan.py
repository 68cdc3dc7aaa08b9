"""engine.replay.scan: the first pass of the timeline index (replay --summary's loop)
finds exactly the events, offsets and times the replay reads, wrapped records
included; the checkpoint pass that reads only those lines makes the same events."""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from mmuscope.engine.replay.index import TraceIndex, _scanned_events, build_index
from mmuscope.engine.replay.model import MODEL_EVENTS, WALK_EVENTS
from mmuscope.engine.replay.scan import PACE_EVERY, TraceScan, scan_trace
from mmuscope.engine.replay.stream import iter_positioned
from mmuscope.engine.trace.reader import summarize
from mmuscope.tui.screens.replay_sources import (
    GATE_WAIT,
    INDEX_SWITCH_INTERVAL,
    SWITCH_INTERVAL,
    FrameGate,
    index_trace,
)

from tests.test_replay_model import fixture_files, wrapped_traces


def check_scan(data: bytes) -> TraceScan:
    scan = TraceScan(len(data))
    scan_trace(io.BytesIO(data), scan, progress_every=3)
    scan.audit()
    found = list(iter_positioned(io.BytesIO(data)))
    assert list(scan.offsets) == [p.offset for p in found]
    assert list(scan.stamps) == [p.event.ts for p in found]
    lines = io.StringIO(data.decode("utf-8", "replace"), newline="")
    assert scan.counts == summarize(lines)  # replay --summary's counts, to the letter
    assert scan.done and scan.bytes_read == len(data) and scan.progress == 1.0
    if found:
        assert scan.first_ts == min(p.event.ts for p in found)
        assert scan.last_ts == max(p.event.ts for p in found)
    lazy = list(iter_positioned(io.BytesIO(data), fields_for=MODEL_EVENTS, lazy_for=WALK_EVENTS))
    assert list(_scanned_events(io.BytesIO(data), scan)) == [(p.offset, p.event) for p in lazy]
    return scan


@settings(max_examples=60, deadline=None)
@given(wrapped_traces())
def test_the_scan_finds_what_the_replay_reads(lines: list[str]) -> None:
    check_scan("".join(lines).encode())


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: p.name)
def test_the_scan_of_recorded_and_wrapped_traces(path: Path) -> None:
    scan = check_scan(path.read_bytes())
    if path.name == "trace-wrapped-mail.txt":
        assert scan.joined  # records over two lines, glued by both passes


def test_a_time_falls_on_the_first_event_at_or_after_it() -> None:
    scan = TraceScan()
    scan.stamps.extend([1.0, 2.0, 2.0, 3.5])
    assert [scan.event_at(t) for t in (0.5, 1.0, 1.5, 2.0, 3.5, 9.0)] == [0, 0, 1, 1, 3, 4]


def test_a_cancelled_index_stops_in_either_pass(tmp_path: Path) -> None:
    data = b"".join(
        f"  CPU 0/KVM-42  [000] ...1. {1 + i / 1e3:.6f}: kvm_exit: vcpu 0 reason HLT "
        f"rip 0x0 info 0 0\n".encode()
        for i in range(100)
    )
    first = TraceIndex(len(data))
    scan_trace(io.BytesIO(data), first.scan, cancelled=lambda: True, progress_every=10)
    assert not first.scan.done and first.scan.events == 10
    second = TraceIndex(len(data))
    model = build_index(io.BytesIO(data), second, cancelled=lambda: second.scan.done,
                        progress_every=10)  # fmt: skip
    assert second.scan.done and not second.done and model.events == second.events == 10
    third = TraceIndex(len(data))
    build_index(io.BytesIO(data), third)
    third.audit()
    assert third.done and third.events == third.scan.events == 100


def test_the_index_paces_itself_in_both_passes_and_a_closed_gate_only_slows_it(
    tmp_path: Path,
) -> None:
    """build_index calls pace() every PACE_EVERY events of each pass (where the app's
    worker waits while a frame is drawn); index_trace with a gate left clear still
    finishes, with the same index (GATE_WAIT bounds each wait)."""
    events = 3 * PACE_EVERY
    data = b"".join(
        f"  CPU 0/KVM-42  [000] ...1. {1 + i / 1e3:.6f}: kvm_exit: vcpu 0 reason HLT "
        f"rip 0x0 info 0 0\n".encode()
        for i in range(events)
    )
    paced: list[tuple[bool, int]] = []
    index = TraceIndex(len(data))
    build_index(io.BytesIO(data), index, pace=lambda: paced.append((index.scan.done, 0)))
    assert paced == [(False, 0)] * 3 + [(True, 0)] * 3  # three in the scan, three after
    trace = tmp_path / "trace.txt"
    trace.write_bytes(data)
    gated = TraceIndex(len(data))
    gate = threading.Event()  # never set: the first pace() waits GATE_WAIT, then on
    index_trace(trace, gated, lambda progress, error: None, lambda: False, gate)
    gated.audit()
    assert gated.done and gated.events == index.events == events
    assert list(gated.scan.offsets) == list(index.scan.offsets)


class _Gate:
    """A threading.Event's is_set/wait, set by hand, recording each wait."""

    def __init__(self) -> None:
        self.flag = False
        self.waits: list[float] = []

    def is_set(self) -> bool:
        return self.flag

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return self.flag


def test_the_frame_gate_waits_once_for_a_missed_frame_and_again_after_the_next() -> None:
    """FrameGate: an open gate costs no wait; a closed one one wait of GATE_WAIT, and none
    more until the gate has opened again (a frame never drawn slows the index once)."""
    gate = _Gate()
    pace = FrameGate(gate)  # type: ignore[arg-type]
    gate.flag = True
    pace()
    assert gate.waits == []
    gate.flag = False  # a frame starts
    pace()
    pace()
    pace()
    assert gate.waits == [GATE_WAIT]  # it ran out once: the worker goes on
    gate.flag = True  # drawn at last
    pace()
    gate.flag = False  # the next frame
    pace()
    assert gate.waits == [GATE_WAIT, GATE_WAIT]


def test_overlapping_index_workers_leave_the_switch_interval_as_they_found_it() -> None:
    """The switch interval is the process's: two index workers that overlap (one ending
    while the next starts) keep the short one while either runs, and the last one out
    puts back what the first one found."""
    before = sys.getswitchinterval()
    assert before != INDEX_SWITCH_INTERVAL
    first, second = SWITCH_INTERVAL.short(), SWITCH_INTERVAL.short()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert sys.getswitchinterval() == INDEX_SWITCH_INTERVAL  # the second still runs
    second.__exit__(None, None, None)
    assert sys.getswitchinterval() == before
