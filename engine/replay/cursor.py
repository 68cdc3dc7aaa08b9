"""Where a replay is: a position in a trace file and the model there.  `step` reads on;
`seek_event` and `seek_time` jump anywhere the timeline index reaches (restore the nearest
checkpoint, read on from its offset) — forward without the index when it is cheaper.

`LiveTimeline` (engine.replay.live) offers the same methods over a live tail; the app
drives either through them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from ..events import Event
from .index import Checkpoint, TraceIndex, open_for_index
from .model import MODEL_EVENTS, ReplayModel
from .stream import Positioned, iter_positioned

TAIL = 40  # events a seek returns (the ones just before the new position, for the log)


class TraceCursor:
    """A position in a trace file: `position` events have been applied to `model`."""

    live = False

    def __init__(self, path: Path, index: TraceIndex) -> None:
        self.path = path
        self.index = index
        self._handle = open_for_index(path)  # few reads: few GIL hand-overs (see index)
        self.model = ReplayModel()
        self.position = 0
        self.at_end = False
        self._stream: Iterator[Positioned] = self._read(0)
        self._next: Positioned | None = None

    def close(self) -> None:
        self._handle.close()

    def _read(self, offset: int) -> Iterator[Positioned]:
        """The events from `offset` on: the model's parsed at once, the others' fields
        when first read (the log formats a few of them; most are only counted)."""
        return iter_positioned(self._handle, offset, fields_for=MODEL_EVENTS, lazy=True)

    # -- what is known ------------------------------------------------------------------

    @property
    def total(self) -> int:
        """Events in the file (as far as scanned; more once the end is read)."""
        known = self.position + (1 if self._next is not None else 0)
        return max(self.index.scan.events, self.index.events, known)

    @property
    def scanned(self) -> bool:
        """Whether the whole file was scanned: `total` and the time span are final."""
        return self.index.scan.done

    @property
    def earliest(self) -> int:
        return 0

    @property
    def first_ts(self) -> float | None:
        """The earliest timestamp known (of the index, or of what was read)."""
        starts = [t for t in (self.index.first_ts, self.model.min_ts) if t is not None]
        return min(starts) if starts else None

    @property
    def last_ts(self) -> float | None:
        """The latest timestamp known."""
        ends = [t for t in (self.index.last_ts, self.model.max_ts) if t is not None]
        return max(ends) if ends else None

    @property
    def seekable(self) -> int:
        """The furthest event a seek reaches now: as far as the checkpoints go (beyond
        them a seek would read everything in between; `reachable` tells)."""
        return self.total if self.index.done else max(self.index.events, self.position)

    def reachable(self, event: int | None = None, ts: float | None = None) -> bool:
        """Whether a seek to event number `event` (or time `ts`) is quick now: the
        checkpoints cover it.  Always true once the index is done."""
        if self.index.done:
            return True
        if ts is not None:
            event = self.index.scan.event_at(ts)  # the stamps scanned so far only grow
        return event is None or event <= self.seekable

    def peek(self) -> Positioned | None:
        """The next event, not applied yet (None at the end of the file)."""
        if self._next is None and not self.at_end:
            self._next = next(self._stream, None)
            self.at_end = self._next is None
        return self._next

    # -- moving -------------------------------------------------------------------------

    def step(self, count: int, *, until_change: bool = False) -> list[Event]:
        """Apply up to `count` events; with `until_change`, stop after the first one that
        changes the drawing.  Returns the events applied."""
        out: list[Event] = []
        for _ in range(count):
            found = self.peek()
            if found is None:
                break
            self._next = None
            self.position += 1
            out.append(found.event)
            if self.model.apply(found.event) and until_change:
                break
        return out

    def seek_event(self, event: int) -> list[Event]:
        """Go to just before event number `event` (clamped to the file); returns up to
        TAIL events applied last, for the log."""
        event = max(0, event)
        checkpoint = self.index.before_event(max(0, event - TAIL))  # a tail for the log
        if event < self.position or (checkpoint is not None and checkpoint.event > self.position):
            self._restore(checkpoint)
        return self._forward(lambda: self.position < event)

    def seek_time(self, ts: float) -> list[Event]:
        """Go to just before the first event at or after time `ts`."""
        checkpoint = self.index.before_time(ts)
        passed = self.model.last_ts is not None and self.model.last_ts >= ts
        if passed or (checkpoint is not None and checkpoint.event > self.position):
            self._restore(checkpoint)

        def before() -> bool:
            found = self.peek()
            return found is not None and found.event.ts < ts

        return self._forward(before)

    def _restore(self, checkpoint: Checkpoint | None) -> None:
        if checkpoint is None:
            self.model, self.position, offset = ReplayModel(), 0, 0
        else:
            self.model = ReplayModel.from_snapshot(checkpoint.state)
            self.position, offset = checkpoint.event, checkpoint.offset
        old, self._stream = self._stream, self._read(offset)
        close = getattr(old, "close", None)
        if close is not None:
            close()  # the old generator reads the same handle: retire it first
        self._next, self.at_end = None, False

    def _forward(self, go_on: Callable[[], bool]) -> list[Event]:
        tail: deque[Event] = deque(maxlen=TAIL)
        while go_on():
            stepped = self.step(1)
            if not stepped:
                break
            tail.extend(stepped)
        return list(tail)
