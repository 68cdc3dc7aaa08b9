"""Where the replay screen's events come from, read in thread workers so that the app
never waits on a file: the timeline index of a trace file (engine.replay.index: the
scan, then the checkpoints) and a live ``trace_pipe`` tail handed over in batches.

Each reader reports through callbacks that post messages (thread-safe); neither
touches a widget."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mmuscope.engine.events import Event
from mmuscope.engine.replay.index import TraceIndex, build_index, open_for_index
from mmuscope.engine.replay.stream import EventAssembler

PROGRESS_EVERY = 0.1  # seconds between progress messages of the index worker
LIVE_BATCH = 0.05  # seconds the live reader gathers events before handing them over
# While the index is built, the app's thread waits this long at most for the GIL each
# time it wakes (Python's default is 5 ms; the event loop wakes many times a frame).
INDEX_SWITCH_INTERVAL = 0.001
GATE_WAIT = 0.05  # seconds the worker waits at most for a frame to be drawn


# GATE.  Playing at 10,000 events/s while the index is built, the app's thread and the
# worker each asked for the GIL every switch interval: a frame of ~12 ms of work took
# twice that (and the event loop's p99 delay 38 ms).  The screen clears the gate when
# a frame starts and sets it once the frame is on the screen (call_after_refresh): the
# worker stops at its next pace() (within PACE_EVERY events), so a frame runs alone,
# and the worker has the time between frames.  The wait is bounded: a gate left clear
# slows the indexing, it never stops it.  Until the worker stops, the two threads take
# turns with the GIL (INDEX_SWITCH_INTERVAL each): with a pace() every 256 events that
# was up to ~3 ms of the checkpoint pass's work inside each frame; every 16, ~0.2 ms.
# A pace() that finds the gate open costs one `is_set()`; one whose wait ran out (a
# frame not drawn within GATE_WAIT) lets the worker on until the gate opens again, so
# a frame that is never drawn costs the index one GATE_WAIT, not one every 16 events.


class SwitchInterval:
    """`sys.setswitchinterval(INDEX_SWITCH_INTERVAL)` while any index worker runs.  The
    interval is the process's: a worker that restored what it found when it started
    would, when two overlap (a screen's worker still ending while the next one starts),
    leave the short interval behind for good or take it from the one still running.
    The first worker in saves the interval; the last one out restores it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.workers = 0
        self.saved = 0.0

    @contextmanager
    def short(self) -> Iterator[None]:
        with self.lock:
            if self.workers == 0:
                self.saved = sys.getswitchinterval()
                sys.setswitchinterval(INDEX_SWITCH_INTERVAL)
            self.workers += 1
        try:
            yield
        finally:
            with self.lock:
                self.workers -= 1
                if self.workers == 0:
                    sys.setswitchinterval(self.saved)


SWITCH_INTERVAL = SwitchInterval()


class FrameGate:
    """The index worker's `pace()`: wait while a frame is drawn (see GATE)."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate
        self.missed = False  # the last wait ran out: the frame it waited for was missed

    def __call__(self) -> None:
        if self.gate.is_set():
            self.missed = False
        elif not self.missed:
            self.missed = not self.gate.wait(GATE_WAIT)


def index_trace(
    path: Path,
    index: TraceIndex,
    report: Callable[[float, str], object],
    cancelled: Callable[[], bool],
    gate: threading.Event | None = None,
) -> None:
    """One scan and one checkpoint pass over the file; `report(progress, error)` at most
    every PROGRESS_EVERY seconds, at the scan's end and at the end.  While `gate` is
    clear (the app is drawing a frame) the worker waits every few hundred events, at
    most GATE_WAIT seconds at a time (see GATE)."""
    posted = 0.0
    scanned = False

    def progress(_: TraceIndex) -> None:
        nonlocal posted, scanned
        now = time.monotonic()
        turn = index.scan.done and not scanned
        if index.done or turn or now - posted >= PROGRESS_EVERY:
            posted, scanned = now, index.scan.done
            report(index.progress if scanned and not turn else index.scan.progress, "")

    try:
        with SWITCH_INTERVAL.short(), open_for_index(path) as handle:
            pace = None if gate is None else FrameGate(gate)
            build_index(handle, index, cancelled=cancelled, progress=progress, pace=pace)
    except OSError as err:
        report(0.0, f"{path}: {err.strerror or err}")


def tail_pipe(
    pipe: Path,
    hand_over: Callable[[list[Event]], object],
    ended: Callable[[str], object],
    cancelled: Callable[[], bool],
) -> None:
    """Read trace_pipe without blocking the app; hand events over in batches."""
    from ..trace_pipe import tail_lines

    assembler = EventAssembler()
    batch: list[Event] = []
    handed = time.monotonic()
    try:
        for lines in tail_lines(pipe, cancelled):
            for line in lines:
                found = assembler.feed(line, 0)
                if found is not None:
                    batch.append(found.event)
            if not lines:  # quiet for a moment: nothing will continue the held event
                found = assembler.flush()
                if found is not None:
                    batch.append(found.event)
            now = time.monotonic()
            if batch and (now - handed >= LIVE_BATCH or not lines):
                handed = now
                hand_over(batch)
                batch = []
    except OSError as err:
        ended(f"{pipe}: {err.strerror or err}")
