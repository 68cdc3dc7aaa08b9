"""The first pass over a trace file: where each event's record starts and when it ran,
in compact columns, at the speed of ``replay --summary`` — it is the same loop
(`engine.trace.reader.summarize`, which matches only line heads and parses no printk).

Per event: the byte offset of its record's first line (`offsets`, ``array('q')``) and
its timestamp (`stamps`, ``array('d')``): 16 bytes an event, no Python object per line;
`joined` holds the (rare) events whose record a mail client wrapped over two lines.
With these the app knows the whole trace — how many events, its time span, which event
runs at a given time — long before the model's checkpoints (engine.replay.index) are
built, and the checkpoint pass reads only the lines that start events.

The offsets are exactly `engine.replay.stream.iter_positioned`'s (a test checks it):
both split the bytes at ``\\n`` and glue the same wrapped records.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..trace.reader import AT_LINE_BEFORE, CONTINUED, TraceCounts, summarize

PROGRESS_EVERY = 16384  # events between progress reports (and cancellation checks)
PACE_EVERY = 16  # events between calls of an indexer's `pace()` (~0.1-0.2 ms of work)


class Cancelled(Exception):
    """The scan was asked to stop."""


class TraceScan:
    """The columns of one trace file, filled by `scan_trace` (possibly in another
    thread: readers see `events` grow, and `done` once the whole file is read)."""

    def __init__(self, size: int = 0) -> None:
        self.size = size  # bytes in the file
        self.offsets: array[int] = array("q")
        self.stamps: array[float] = array("d")
        self.joined: set[int] = set()  # events whose record spans two lines
        self.counts = TraceCounts()  # replay --summary's counts, once done
        self.bytes_read = 0
        self.first_ts: float | None = None  # the earliest timestamp (so far)
        self.last_ts: float | None = None  # the latest
        self._spanned = 0  # events whose stamps first_ts/last_ts cover
        self.done = False

    @property
    def events(self) -> int:
        return len(self.offsets)

    @property
    def progress(self) -> float:
        if self.done:
            return 1.0
        return min(1.0, self.bytes_read / self.size) if self.size else 0.0

    def span(self) -> None:
        """first_ts/last_ts over the stamps read so far (min/max of the new ones)."""
        fresh = self.stamps[self._spanned :]
        self._spanned = len(self.stamps)
        if not fresh:
            return
        low, high = min(fresh), max(fresh)
        self.first_ts = low if self.first_ts is None else min(self.first_ts, low)
        self.last_ts = high if self.last_ts is None else max(self.last_ts, high)

    def event_at(self, ts: float) -> int:
        """The number of the first event at or after time `ts` among those scanned
        (timestamps taken as non-decreasing, as ftrace merges its per-CPU buffers)."""
        stamps = self.stamps
        low, high = 0, len(stamps)
        while low < high:  # bisect over an array('d') without copying it
            mid = (low + high) // 2
            if stamps[mid] < ts:
                low = mid + 1
            else:
                high = mid
        return low

    def audit(self) -> None:
        assert len(self.offsets) == len(self.stamps)
        assert all(0 <= e < len(self.offsets) for e in self.joined)
        assert all(a < b for a, b in zip(self.offsets, self.offsets[1:], strict=False))
        if self.done:
            assert self.counts.events == len(self.offsets)


def scan_trace(
    handle: BinaryIO,
    scan: TraceScan,
    *,
    cancelled: Callable[[], bool] | None = None,
    progress: Callable[[TraceScan], None] | None = None,
    progress_every: int = PROGRESS_EVERY,
    pace: Callable[[], object] | None = None,
    pace_every: int = PACE_EVERY,
) -> None:
    """Fill `scan` from the start of `handle`; stops early (`scan.done` False) when
    `cancelled()` says so, checked with each progress report.  `pace()` is called every
    `pace_every` events (the app's worker waits there while a frame is drawn)."""
    handle.seek(0)
    where = [0, 0]  # the byte offsets of the line before and of the line just read
    offsets, stamps = scan.offsets, scan.stamps
    add_offset, add_stamp = offsets.append, stamps.append

    def lines() -> Iterator[str]:
        offset = 0
        for raw in handle:
            where[0], where[1] = where[1], offset
            offset += len(raw)
            yield raw.decode("utf-8", "replace")
        scan.bytes_read = offset

    def found(kind: int, m: re.Match[str]) -> None:
        if kind == CONTINUED:
            scan.joined.add(len(offsets) - 1)
            return
        if kind == AT_LINE_BEFORE:
            scan.joined.add(len(offsets))
            add_offset(where[0])
        else:
            add_offset(where[1])
        add_stamp(float(m["ts"]))
        if pace is not None and len(offsets) % pace_every == 0:
            pace()
        if len(offsets) % progress_every == 0:
            scan.bytes_read = where[1]
            scan.span()
            if progress is not None:
                progress(scan)
            if cancelled is not None and cancelled():
                raise Cancelled

    try:
        scan.counts = summarize(lines(), found)
    except Cancelled:
        return
    scan.span()
    scan.done = True
    if progress is not None:
        progress(scan)
