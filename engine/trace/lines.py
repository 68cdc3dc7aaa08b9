"""Trace lines: an `Event` printed as one line of a kernel trace, and parsed back.

Two line shapes (docs/kvm.md §6.4):

* ``ftrace`` — ``/sys/kernel/tracing/trace`` and ``trace_pipe`` (kernel
  ``trace_print_context``): ``"%16s-%-7d "`` comm (right-aligned in 16) and pid, an
  optional ``(%7d)`` tgid column, ``"[%03d] "`` cpu, the flags column (4 characters on
  older kernels, ``...1``; 5 on newer, ``d....``; absent without ``irq-info``), then
  ``" %5lu.%06lu: "`` seconds, ``"<event>: "`` and the printk text.  Kernels before
  ~5.12 padded the pid to 5, not 7; both parse.
* ``trace-cmd`` — ``trace-cmd report``: ``"%16s-%-5d [%03d]"``, ``" %5lu.%06lu: "``,
  ``"<event>: "`` and then spaces up to a 20-character event name, no flags column.
  Nanosecond (``-t``) and raw-counter timestamps parse too.

`parse_line` never raises: it returns None for anything that is not an event line
(``#`` headers, ``<stack trace>`` entries and their `` => func`` lines, function-tracer
lines, ``CPU 3 is empty``, blank lines, garbage).  An event it has no `Tracepoint` for —
or a known one whose text none of its variants matches — still becomes an `Event`, with
the single field ``text`` (the raw printk), so ``replay --summary`` can count it.
`format_line` inverts that: an event whose fields are just ``text`` prints the text; an
event with no tracepoint (the engine's own, e.g. ``kvm_memslot_lookup``) prints
`Event.format_fields` (``key=value`` pairs, which parse back only as ``text``).  The
model's own events (`engine.events.is_model_event`) carry a ``*`` after their name
(``account_shadowed*: gfn=0x...``), which the parser reads past.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from ..events import Event, FieldValue, model_name
from .tracepoints import CURRENT, TRACEPOINTS

FTRACE = "ftrace"
TRACE_CMD = "trace-cmd"
STYLES = (FTRACE, TRACE_CMD)
TEXT = "text"  # the field of an event parsed without a tracepoint

_LINE_RE = re.compile(
    r"\s*(?P<comm>.*?)-(?P<pid>\d{1,10})\s+"
    r"(?:\((?:\s*\d+|-+)\)\s+)?"  # record-tgid column
    r"\[(?P<cpu>\d{1,6})\]\s+"
    r"(?:(?P<flags>[^\s:]{4,5})\s+)?"
    r"(?P<ts>\d{1,20}(?:\.\d{1,9})?):\s+"
    r"(?P<event>[A-Za-z_][A-Za-z0-9_]*)\*?:(?P<text>(?: .*)?)"  # `*`: the model's own
)
_NAME_WIDTH = 20  # trace-cmd pads event names to this
# the columns before the event's name, in the printf formats of trace_print_context()
# (kernel/trace/trace_output.c) and trace-cmd's: comm, pid, cpu, then the flags or the
# timestamp (`_TIMESTAMP`, seconds and microseconds)
_FTRACE_HEAD = "%16s-%-7d [%03d] %s "
_TRACE_CMD_COLUMNS = "%16s-%-5d [%03d] "  # then the timestamp and ": "
_TIMESTAMP = "%5d.%06d"  # %5lu.%06lu


def _timestamp(ts: float) -> str:
    """``%5lu.%06lu`` of a time in seconds."""
    return _TIMESTAMP % divmod(round(ts * 1_000_000), 1_000_000)


def printk_text(event: Event, variant: str = CURRENT) -> str:
    """The event's printk text: its tracepoint's, its raw ``text``, or key=value pairs."""
    tracepoint = TRACEPOINTS.get(event.name)
    raw = event.fields.get(TEXT)
    if len(event.fields) == 1 and isinstance(raw, str):
        return raw
    if tracepoint is None:
        return event.format_fields()
    return tracepoint.format(event.fields, variant)


def format_line(
    event: Event, style: str = FTRACE, *, variant: str = CURRENT, flags: str = "....."
) -> str:
    """One trace line for ``event`` in ``style`` (`STYLES`).  ``flags`` is the ftrace flags
    column (``""`` for none); ``variant`` picks the printk text (see `tracepoints`).
    Raises `TracepointError` when the fields do not fit the event's tracepoint."""
    text = printk_text(event, variant)
    name = model_name(event)  # a `*` after the model's own
    if style == FTRACE:
        head = ftrace_head(event.comm, event.pid, event.cpu, flags)
        return f"{head}{_timestamp(event.ts)}: {name}: {text}"
    if style == TRACE_CMD:
        return trace_cmd_head(event.comm, event.pid, event.cpu, event.ts) + trace_cmd_name(
            name
        ) + text  # fmt: skip
    raise ValueError(f"unknown trace line style {style!r} (not one of {', '.join(STYLES)})")


def ftrace_head(comm: str, pid: int, cpu: int, flags: str) -> str:
    """An ftrace line up to its timestamp: comm, pid, cpu and the flags column, each
    followed by its space."""
    return _FTRACE_HEAD % (comm, pid, cpu, flags)


def trace_cmd_head(comm: str, pid: int, cpu: int, ts: float) -> str:
    """A ``trace-cmd report`` line up to the event's name: comm, pid, cpu and timestamp."""
    return f"{_trace_cmd_columns(comm, pid, cpu)}{_timestamp(ts)}: "


@lru_cache(maxsize=1024)
def _trace_cmd_columns(comm: str, pid: int, cpu: int) -> str:
    """The columns before the timestamp: the same for each line of a task on one CPU."""
    return _TRACE_CMD_COLUMNS % (comm, pid, cpu)


def trace_cmd_name(name: str) -> str:
    """The event's name as ``trace-cmd report`` prints it: ``name: `` and spaces up to a
    20-character name."""
    return f"{name}: " + " " * max(0, _NAME_WIDTH - len(name))


def parse_line(line: str, *, variant: str | None = None) -> Event | None:
    """The event on one trace line, or None if the line is not an event (never raises).

    ``variant`` forces one printk variant (e.g. ``"pre-2019"`` for hex ``sp gen``);
    by default every variant is tried, ``current`` first."""
    m = _LINE_RE.fullmatch(line.rstrip("\r\n"))
    if m is None:
        return None
    return event_of(m, variant=variant)


def event_of(m: re.Match[str], *, variant: str | None = None, lazy: bool = False) -> Event:
    """The event of a `_LINE_RE` match of a whole line (`parse_line` without the match);
    with `lazy`, its printk is parsed only when a field is first read (`LazyFields`)."""
    text = m["text"].lstrip(" ")  # one space, or trace-cmd's name padding
    name = m["event"]
    fields: Mapping[str, FieldValue] = (
        LazyFields(name, text, variant) if lazy else printk_fields(name, text, variant)
    )
    return Event(
        name,
        fields,
        ts=float(m["ts"]),
        cpu=int(m["cpu"]),
        pid=int(m["pid"]),
        comm=m["comm"].strip(),
    )


def printk_fields(name: str, text: str, variant: str | None = None) -> dict[str, FieldValue]:
    """The fields of event `name`'s printk `text`: its tracepoint's, or the raw text."""
    tracepoint = TRACEPOINTS.get(name)
    found = None if tracepoint is None else tracepoint.try_match(text, variant)
    return found[1] if found is not None else {TEXT: text.rstrip()}


class LazyFields(Mapping[str, FieldValue]):
    """An event's fields, parsed from its printk text when first read: a replay reads
    the fields of the events its model applies, and of the few its log shows."""

    __slots__ = ("_fields", "_name", "_text", "_variant")

    def __init__(self, name: str, text: str, variant: str | None = None) -> None:
        self._name, self._text, self._variant = name, text, variant
        self._fields: dict[str, FieldValue] | None = None

    def _parsed(self) -> dict[str, FieldValue]:
        if self._fields is None:
            self._fields = printk_fields(self._name, self._text, self._variant)
        return self._fields

    def __getitem__(self, key: str) -> FieldValue:
        return self._parsed()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parsed())

    def __len__(self) -> int:
        return len(self._parsed())

    def __repr__(self) -> str:
        return repr(self._parsed())


def parse_trace(text: str, *, variant: str | None = None) -> tuple[list[Event], int, int]:
    """(events in file order, lines, skipped lines) of a ``trace``/``trace-cmd report``
    text; ``lines == len(events) + skipped``."""
    events = []
    lines = 0
    for line in text.splitlines():
        lines += 1
        event = parse_line(line, variant=variant)
        if event is not None:
            events.append(event)
    return events, lines, lines - len(events)


def trace_summary(events: list[Event], lines: int, skipped: int) -> dict[str, Any]:
    """``replay --summary``'s object: lines, events, skipped, by_event (in first-seen order)."""
    return {
        "lines": lines,
        "events": len(events),
        "skipped": skipped,
        "by_event": dict(Counter(e.name for e in events)),
    }
