"""The timeline index of a trace file: checkpoints every `every` events, each the byte
offset of an event's first line, its timestamp, and the replay model's state before it.

Seeking to an event or a time restores the nearest checkpoint at or before it and reads
on from its offset: at most `every` events are parsed, whatever the file's size (see
`engine.replay.stream` for why a restart at an event's first line is exact).

Why not replay from the start on each seek: on a 1M-line trace (537k events) that takes
~4.5 s to reach the middle, against ~4 ms on average (40 ms at most) from a checkpoint
(benchmarks/replay_app_speed.py).

Memory stays bounded: when there would be more than `max_checkpoints`, or the snapshots
together would hold more than `budget` dict entries, every other checkpoint is dropped
and `every` doubles (the kept ones are at multiples of the new interval).  So a long file
gets fewer, sparser checkpoints, and a seek costs more parsing instead of more memory.

`build_index` makes two passes.  The first (`engine.replay.scan`, the loop of ``replay
--summary``) finds every event's offset and time: from then on the app knows the
trace's length and span, and which event a time falls on.  The second builds the
checkpoints: it reads only the lines the first found events on, and parses the printk
only of the events the model reads (`MODEL_EVENTS`).  Both report progress and may be
cancelled.  They run in a thread while the app replays: the index is read by the other
thread only through `checkpoints` (appended to, or replaced whole when thinned), the
scan's columns (appended to) and plain counters.

Open the file with `open_for_index` (a 1 MiB buffer).  With the default 8 KiB buffer the
indexing thread releases the GIL for a read() every ~100 lines (~0.6 ms); each time it
takes the GIL back the interpreter's switch counter moves, so the 5 ms "drop request"
that forces a hand-over to a waiting thread never fires, and the app's thread waited
100-300 ms for the GIL (measured).  Reading 1 MiB at a time, the indexer holds the GIL
long enough for the forced switch to work: a bare asyncio loop beside it then waited
10 ms at most.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..events import Event
from ..trace.reader import rejoin
from .model import MODEL_EVENTS, WALK_EVENTS, ReplayModel
from .records import ModelSnapshot
from .scan import PACE_EVERY, TraceScan, scan_trace
from .stream import EventAssembler

DEFAULT_EVERY = 2048  # events between checkpoints to start with
MAX_CHECKPOINTS = 256
SNAPSHOT_BUDGET = 1_000_000  # dict entries held by all the snapshots together
PROGRESS_EVERY = 8192  # events between progress reports of the checkpoint pass
READ_BUFFER = 1 << 20  # see the module's docstring: why not the default 8 KiB


@dataclass(frozen=True, slots=True)
class Checkpoint:
    event: int  # the number of events before it (the index of the event at `offset`)
    offset: int  # byte offset of that event's first line
    ts: float  # its timestamp
    state: ModelSnapshot  # the model after the `event` events before it


class TraceIndex:
    """Checkpoints over one trace file, filled by `build_index` (possibly in another
    thread) and read by `engine.replay.cursor.TraceCursor`."""

    def __init__(
        self,
        size: int = 0,
        *,
        every: int = DEFAULT_EVERY,
        max_checkpoints: int = MAX_CHECKPOINTS,
        budget: int = SNAPSHOT_BUDGET,
    ) -> None:
        if every < 1 or max_checkpoints < 2:
            raise ValueError("an index needs every >= 1 and max_checkpoints >= 2")
        self.size = size  # bytes in the file (for progress)
        self.every = every
        self.max_checkpoints = max_checkpoints
        self.budget = budget
        self.scan = TraceScan(size)  # the first pass: every event's offset and time
        self.checkpoints: list[Checkpoint] = []
        self.entries = 0  # dict entries held by the snapshots
        self.thinned = 0  # times every other checkpoint was dropped
        self.events = 0  # events the checkpoints cover so far (the second pass)
        self.bytes_read = 0  # by the second pass
        self.done = False  # both passes

    @property
    def first_ts(self) -> float | None:
        """The earliest timestamp seen (by the first pass, which runs ahead)."""
        return self.scan.first_ts

    @property
    def last_ts(self) -> float | None:
        return self.scan.last_ts

    @property
    def progress(self) -> float:
        """0..1 of the file the checkpoints cover."""
        if self.done:
            return 1.0
        return min(1.0, self.bytes_read / self.size) if self.size else 0.0

    def add(self, checkpoint: Checkpoint) -> None:
        self.checkpoints.append(checkpoint)
        self.entries += checkpoint.state.size()
        self.events = max(self.events, checkpoint.event)
        while len(self.checkpoints) > 1 and (
            len(self.checkpoints) > self.max_checkpoints or self.entries > self.budget
        ):
            self._thin()

    def _thin(self) -> None:
        kept = self.checkpoints[::2]  # events 0, 2e, 4e, ...: multiples of the new every
        self.every *= 2
        self.entries = sum(c.state.size() for c in kept)
        self.thinned += 1
        self.checkpoints = kept  # one assignment: a reader sees the old or the new list

    def before_event(self, event: int) -> Checkpoint | None:
        """The last checkpoint at or before event number `event`."""
        checkpoints = self.checkpoints
        at = bisect.bisect_right(checkpoints, event, key=lambda c: c.event)
        return checkpoints[at - 1] if at else None

    def before_time(self, ts: float) -> Checkpoint | None:
        """The last checkpoint whose event is at or before time `ts` (timestamps are taken
        as non-decreasing, as ftrace merges its per-CPU buffers by time)."""
        checkpoints = self.checkpoints
        at = bisect.bisect_right(checkpoints, ts, key=lambda c: c.ts)
        return checkpoints[at - 1] if at else None

    def audit(self) -> None:
        checkpoints = self.checkpoints
        assert len(checkpoints) <= self.max_checkpoints or len(checkpoints) == 1
        assert self.entries == sum(c.state.size() for c in checkpoints)
        assert all(c.event % self.every == 0 for c in checkpoints), self.every
        for before, after in itertools.pairwise(checkpoints):
            assert before.event < after.event and before.offset < after.offset
        assert all(c.event <= self.events for c in checkpoints)
        assert 0.0 <= self.progress <= 1.0


def open_for_index(path: Path) -> BinaryIO:
    """The trace as bytes, read 1 MiB at a time (a thread reading it starves no other)."""
    return path.open("rb", buffering=READ_BUFFER)


def build_index(
    handle: BinaryIO,
    index: TraceIndex,
    *,
    cancelled: Callable[[], bool] | None = None,
    progress: Callable[[TraceIndex], None] | None = None,
    progress_every: int = PROGRESS_EVERY,
    pace: Callable[[], object] | None = None,
) -> ReplayModel:
    """Index the whole file (from its start): the scan if not done yet, then the
    checkpoints; returns the model at the end.  Stops early, with `index.done` False,
    when `cancelled()` says so (checked with each progress).  `pace()` is called every
    PACE_EVERY events of either pass (see scan_trace)."""
    if not index.scan.done:
        scan_trace(
            handle,
            index.scan,
            cancelled=cancelled,
            progress=None if progress is None else lambda _: progress(index),
            pace=pace,
        )
        if not index.scan.done:
            return ReplayModel()
    model = ReplayModel()
    offset = 0
    for offset, event in _scanned_events(handle, index.scan):
        if model.events % index.every == 0:
            index.add(Checkpoint(model.events, offset, event.ts, model.snapshot()))
        model.apply(event)
        if pace is not None and model.events % PACE_EVERY == 0:
            pace()
        if model.events % progress_every == 0:
            index.bytes_read, index.events = offset, model.events
            if progress is not None:
                progress(index)
            if cancelled is not None and cancelled():
                return model
    index.bytes_read, index.events = max(offset, index.size), model.events
    index.done = True
    if progress is not None:
        progress(index)
    return model


def _scanned_events(handle: BinaryIO, scan: TraceScan) -> Iterator[tuple[int, Event]]:
    """The events the scan found, each with its offset: only the lines that start one
    are decoded; the model's events get their fields, the others only their head (as
    `iter_positioned(..., fields_for=MODEL_EVENTS, lazy_for=WALK_EVENTS)` makes them, a
    test checks it; the guest walks' fields are read only where the model needs them)."""
    offsets, joined = scan.offsets, scan.joined
    total = len(offsets)
    if not total:
        return
    parse = EventAssembler(MODEL_EVENTS, lazy_for=WALK_EVENTS).parse
    handle.seek(0)
    lines = iter(handle)
    number, wanted, offset = 0, offsets[0], 0
    for raw in lines:
        here, offset = offset, offset + len(raw)
        if here != wanted:
            continue  # no event starts here: a header, a stack trace, garbage
        line = raw.decode("utf-8", "replace")
        if number in joined:  # a wrapped record: glue its second line as the scan did
            more = next(lines, b"")
            offset += len(more)
            line = rejoin(line, more.decode("utf-8", "replace")) or line
        event = parse(line)
        if event is not None:
            yield here, event
        number += 1
        if number == total:
            return
        wanted = offsets[number]
