"""Trace lines in, events out, each with the byte offset of its first line.

The same assembly as `engine.trace.reader.iter_events` (a test checks they agree): every
line is parsed on its own, and a line that is no record is glued to the line before when
`engine.trace.reader.rejoin` says the two make exactly one record (a mail client's wrap).
An event is handed out one line late, in case the next line continues it.

Why offsets: a replay restarts reading at any event's first line and gets exactly the
events that followed it the first time.  Processing a line depends on the past only
through the line before, and only when the line does not parse on its own — in which
case the event it belongs to started a line earlier, or the line is skipped; so from an
event's first line on, a fresh reader and the continuing one agree.

`fields_for` lets a pass that only needs some events' fields (the timeline index) skip
parsing the printk of the others: they come out with no fields, or (`lazy`, the replay
cursor; `lazy_for`, the index's guest walks) with fields parsed when first read.  Files
are read as bytes (for exact offsets) and split at ``\\n`` only; a lone ``\\r`` does not
end a line here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from ..events import Event
from ..trace.lines import _LINE_RE, event_of, parse_line
from ..trace.reader import rejoin


@dataclass(frozen=True, slots=True)
class Positioned:
    """An event and the byte offset of the first line it was read from."""

    offset: int
    event: Event


class EventAssembler:
    """`iter_events`' loop as an object: `feed` lines one by one (live tails need this),
    `flush` at the end (or when no line came for a while)."""

    def __init__(
        self,
        fields_for: frozenset[str] | None = None,
        *,
        lazy: bool = False,
        lazy_for: frozenset[str] = frozenset(),
    ) -> None:
        self.fields_for = fields_for
        self.lazy = lazy  # the others' fields parsed when read (LazyFields), not left empty
        self.lazy_for = lazy_for  # these others' fields parsed when read, whatever `lazy`
        self._held: Positioned | None = None  # parsed, not handed out yet
        self._before: str | None = None  # the line before, if a wrap may continue it
        self._before_offset = 0

    def parse(self, line: str) -> Event | None:
        """`parse_line`, or only the line head for events outside `fields_for`."""
        if self.fields_for is None:
            return parse_line(line)
        m = _LINE_RE.fullmatch(line.rstrip("\r\n"))
        if m is None:
            return None
        name = m["event"]
        if name in self.fields_for or self.lazy or name in self.lazy_for:
            return event_of(m, lazy=name not in self.fields_for)
        return Event(
            name,
            {},
            ts=float(m["ts"]),
            cpu=int(m["cpu"]),
            pid=int(m["pid"]),
            comm=m["comm"].strip(),
        )

    def feed(self, line: str, offset: int) -> Positioned | None:
        """One more line (starting at byte `offset`); the event it completes, if any."""
        event = self.parse(line)
        if event is None and self._before is not None:
            joined = rejoin(self._before, line)
            if joined is not None:
                glued = self.parse(joined)
                self._held = Positioned(self._before_offset, glued) if glued else None
                self._before = None
                return None
        out = self._held
        self._held = Positioned(offset, event) if event is not None else None
        self._before, self._before_offset = line, offset
        return out

    def flush(self) -> Positioned | None:
        """The event held back, if any (the input ended, or paused)."""
        out, self._held, self._before = self._held, None, None
        return out


def iter_positioned(
    handle: BinaryIO,
    start: int = 0,
    *,
    fields_for: frozenset[str] | None = None,
    lazy: bool = False,
    lazy_for: frozenset[str] = frozenset(),
) -> Iterator[Positioned]:
    """The events of a binary trace file from byte `start` (an event's first line, or 0);
    with `fields_for`, only those events' fields are parsed now, the others' never or,
    with `lazy` (or for those in `lazy_for`), when first read."""
    handle.seek(start)
    assembler = EventAssembler(fields_for, lazy=lazy, lazy_for=lazy_for)
    offset = start
    feed = assembler.feed
    for raw in handle:
        found = feed(raw.decode("utf-8", "replace"), offset)
        offset += len(raw)
        if found is not None:
            yield found
    last = assembler.flush()
    if last is not None:
        yield last
