"""A whole trace as a stream: events one by one, or just the counts, in bounded memory.

`mmuscope replay` reads `trace`/`trace_pipe` text and `trace-cmd report` output of any
size: lines are read one at a time and nothing is kept but the line before (for the
rejoin below) and the counters.

Records a mail client wrapped over two lines are rejoined when that is unambiguous:
the line does not parse on its own, is no header or stack-trace line, and glued to the
line before (with a space, or without one for a hard wrap) it makes exactly one
complete record — one whose tracepoint's printk format matches (for an event with no
known format, only a record whose line head, ``comm-pid [cpu] ... ts:``, was split).
Anything else that is not an event counts as skipped.  Only two-line wraps are
rejoined.

`iter_events` and `summarize` count alike (a test checks it); `summarize` is the fast
path of ``replay --summary``: it never parses a printk text unless a rejoin needs it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..events import Event
from .lines import _LINE_RE, TEXT, parse_line
from .tracepoints import TRACEPOINTS

_NOT_A_RECORD = re.compile(r"\s*(?:CPU\s*\d+ is empty|cpus=|version\s*=)")
# A record's head, "[cpu] flags ts:": a continuation line never has one, and a first half
# always does.
_HEAD_RE = re.compile(r"\[\d{1,6}\]\s+(?:[^\s:]{4,5}\s+)?\d{1,20}(?:\.\d{1,9})?:(?:\s|$)")
# The line regex with the line end allowed, so the fast path needs no rstrip().
_LINE_END_RE = re.compile(_LINE_RE.pattern + r"\r?\n?")


@dataclass(slots=True)
class TraceCounts:
    """What a replay read: `lines` = `events`' lines (two for a rejoined one) + `skipped`."""

    lines: int = 0
    events: int = 0
    skipped: int = 0
    rejoined: int = 0
    by_event: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        """``replay --summary``'s object (docs/architecture.md §6.3), by_event in
        first-seen order."""
        return {
            "lines": self.lines,
            "events": self.events,
            "skipped": self.skipped,
            "by_event": dict(self.by_event),
        }


def _complete(line: str, head_was_split: bool) -> bool:
    """Whether a glued line is one whole record."""
    m = _LINE_RE.fullmatch(line)
    if m is None:
        return False
    tracepoint = TRACEPOINTS.get(m["event"])
    if tracepoint is None:
        return head_was_split  # an unknown printk cannot tell a wrap from its own text
    return tracepoint.try_match(m["text"].lstrip(" ")) is not None


def _not_a_record(line: str) -> bool:
    """Blank, a header, a stack trace (its head line or a frame), trace-cmd's notes."""
    stripped = line.lstrip()
    return (
        not stripped
        or stripped[0] in "#=<"
        or "stack trace>" in line
        or _NOT_A_RECORD.match(line) is not None
    )


def rejoin(before: str, line: str) -> str | None:
    """`before` and `line` as one record, when exactly one way of gluing them makes one."""
    if _not_a_record(line) or _not_a_record(before):
        return None
    if _HEAD_RE.search(line) or not _HEAD_RE.search(before):
        return None  # a record of its own (another tracer's), or a first half without a head
    head = before.rstrip("\r\n")
    tail = line.strip()
    head_was_split = _LINE_RE.match(head) is None
    found = [g for g in (f"{head} {tail}", f"{head}{tail}") if _complete(g, head_was_split)]
    if len(found) == 2 and parse_line(found[0]) != parse_line(found[1]):
        return None  # both glue into records, and they differ: ambiguous
    return found[0] if found else None


def iter_events(
    lines: Iterable[str], counts: TraceCounts | None = None, *, variant: str | None = None
) -> Iterator[Event]:
    """Events in file order (each held back one line, in case the next continues it);
    `counts`, if given, is filled as the stream goes."""
    counts = counts if counts is not None else TraceCounts()
    held: Event | None = None  # parsed from `before`, not yet handed out
    before: str | None = None  # the line before, if it may start a wrapped record
    for line in lines:
        counts.lines += 1
        event = parse_line(line, variant=variant)
        if event is None and before is not None:
            joined = rejoin(before, line)
            if joined is not None:
                event = parse_line(joined, variant=variant)
                if held is None:  # the line before was skipped: take it back
                    counts.skipped -= 1
                    counts.events += 1
                    if event is not None:
                        counts.by_event[event.name] += 1
                counts.rejoined += 1
                held, before = event, None
                continue
        if held is not None:
            yield held
        held, before = event, line
        if event is None:
            counts.skipped += 1
        else:
            counts.events += 1
            counts.by_event[event.name] += 1
    if held is not None:
        yield held


#: what `summarize` tells its `found` callback about an event (see there)
AT_LINE, AT_LINE_BEFORE, CONTINUED = 0, 1, 2
Found = Callable[[int, "re.Match[str]"], None]


def summarize(
    lines: Iterable[str], found: Found | None = None, only: Collection[str] | None = None
) -> TraceCounts:
    """The counts `iter_events` would make, matching only line heads where it can.

    `found(where, m)`, if given, hears of each event as the scan meets it, with `m` the
    match of its record's head (`_LINE_RE`'s groups): `AT_LINE`, an event whose record
    is the line just read; `AT_LINE_BEFORE`, an event whose record began on the line
    before (no event on its own) and ends on this one; `CONTINUED`, the event reported
    on the line before continues on this one (one record over two lines: same head, so
    same name and time).  With `only`, `found` hears of those events alone.  The
    timeline index (engine.replay.scan) is this very loop."""
    counts = TraceCounts()
    by_event = counts.by_event
    match = _LINE_END_RE.fullmatch
    lines_seen = events = 0
    before: str | None = None
    before_was_event = False
    for line in lines:
        lines_seen += 1
        m = match(line)
        if m is not None:
            events += 1
            name = m["event"]
            by_event[name] = by_event.get(name, 0) + 1
            before, before_was_event = line, True
            if found is not None and (only is None or name in only):
                found(AT_LINE, m)
            continue
        if before is not None:
            joined = rejoin(before, line)
            if joined is not None:
                counts.rejoined += 1
                joined_m = _LINE_RE.fullmatch(joined)
                assert joined_m is not None
                if not before_was_event:
                    events += 1
                    by_event[joined_m["event"]] += 1
                if found is not None and (only is None or joined_m["event"] in only):
                    found(CONTINUED if before_was_event else AT_LINE_BEFORE, joined_m)
                before = None
                continue
        before, before_was_event = line, False
    counts.lines, counts.events = lines_seen, events
    counts.skipped = lines_seen - events - counts.rejoined
    return counts


def is_text_only(event: Event) -> bool:
    """An event whose printk no known format matched (kept as its raw ``text``)."""
    return len(event.fields) == 1 and TEXT in event.fields
