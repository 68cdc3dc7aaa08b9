"""The `trace-cmd report` lines `mmuscope simulate` prints: `LinePrinter`, each line what
`engine.trace.lines.format_line(event, "trace-cmd")` makes of the event, made from the
session's names and fields (`raw_listener`: no `Event` is built): the columns before the
event's name (`trace_cmd_head`) once per access and vCPU, then the name's column
(`trace_cmd_name`) and the printk text in one `%` format, the tracepoint's template's
(`Tracepoint.printf`); `format_line` itself for an event it does not fit.  An event
whose fields come again as they were (a vCPU's kvm_exit of the same exit qualification,
its kvm_entry at the same rip) prints the text it printed then (`MEMO_TEXTS`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from mmuscope.engine.events import Event, FieldValue
from mmuscope.engine.trace.lines import TRACE_CMD, format_line, trace_cmd_head, trace_cmd_name
from mmuscope.engine.trace.tracepoints import TRACEPOINTS, Values

if TYPE_CHECKING:
    from mmuscope.engine.mmu.guest.session import GuestSession

Fields = tuple[tuple[str, FieldValue], ...]  # an event's fields as a memo's key
COMM = "qemu-kvm"  # GuestSession's stamp
#: the texts an event's line remembers, keyed by its fields (names, values and order):
#: up to this many, then none for that event (its fields seldom come again, e.g. a gfn).
#: Values compare as Python compares them (True == 1), and print alike: a template
#: prints a flag in its own words or as a number, `%s` only strings
MEMO_TEXTS = 64


class LinePrinter:
    """trace-cmd report lines of a session's events."""

    def __init__(self) -> None:
        #: by event name: the `%` format of its line after the head, its values, and the
        #: texts it printed by their fields (None: no longer remembered, `MEMO_TEXTS`)
        self._formats: dict[str, tuple[str, Values, dict[Fields, str] | None]] = {}

    def listen(self, session: GuestSession[object], append: Callable[[str], None]) -> None:
        """`session.raw_listener`: each event's line appended, stamped as the session
        stamps its events (`stamp()`), the head made again when that moved on (the
        session's `steps` or `vcpu`)."""
        formats = self._formats
        steps, vcpu, head = -1, -1, ""

        def raw(name: str, fields: Mapping[str, FieldValue]) -> None:
            nonlocal steps, vcpu, head
            if session.steps != steps or session.vcpu != vcpu:
                steps, vcpu = session.steps, session.vcpu
                ts, cpu = session.stamp()
                head = trace_cmd_head(COMM, 0, cpu, ts)
            entry = formats.get(name)
            if entry is None:
                fmt, values = _line_format(name)
                entry = formats[name] = (fmt, values, {})
            fmt, values, texts = entry
            if texts is not None:
                key = tuple(fields.items())
                text = texts.get(key)
                if text is not None:
                    append(head + text)
                    return
            try:
                text = fmt % values(fields)
            except KeyError:  # a field to derive or by an earlier name: the template's way
                ts, cpu = session.stamp()
                append(format_line(Event(name, fields, ts, cpu, 0, COMM), TRACE_CMD))
                return
            if texts is not None:
                if len(texts) < MEMO_TEXTS:
                    texts[key] = text
                else:
                    formats[name] = (fmt, values, None)
            append(head + text)

        session.raw_listener = raw


def _line_format(name: str) -> tuple[str, Values]:
    """The `%` format of an event's line after the head, and its values (KeyError: none)."""
    column = trace_cmd_name(name).replace("%", "%%")
    tracepoint = TRACEPOINTS.get(name)
    printf = None if tracepoint is None else tracepoint.printf()
    if printf is None:  # one of the engine's own events, or a text with no `%` format
        return column, _no_values
    fmt, values = printf
    return column + fmt, values


def _no_values(fields: Mapping[str, FieldValue]) -> tuple[()]:
    raise KeyError("no % format")
