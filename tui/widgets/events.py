"""The event log and the kvm_stat-like counters every screen shows.

The log prints events as `trace-cmd report` does (comm-pid [cpu] ts: name: fields); the
counters table has kvm_stat's columns (Event, Total, %Total, CurAvg/s).  One regex filter
(`f`, as in kvm_stat) applies to both.  Events arrive in batches once per frame; the log
keeps the last `LOG_LINES_PER_FLUSH` events until the screen flushes it (a few times a
second), the counters count all of them.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.markup import escape
from textual.widgets import Log

from engine.events import Event
from engine.stats import CounterRow, EventCounters
from engine.trace import VARIANTS, TracepointError, format_line
from engine.trace.lines import TRACE_CMD

from .panel import TextPanel

LOG_LINES_PER_FLUSH = 40  # at full speed the log scrolls faster than anyone reads anyway
LOG_MAX_LINES = 1000
NARROW_LOG = 60  # below this many columns the log drops the task column


def trace_line(event: Event) -> str:
    """An event as `trace-cmd report` prints it: the tracepoint's own printk text where the
    kernel has one (engine.trace; an event replayed from an older kernel in that
    kernel's printk), `key=value` pairs for the model's own events."""
    for variant in VARIANTS:
        try:
            return format_line(event, TRACE_CMD, variant=variant)
        except TracepointError:
            continue
    task = f"{event.comm}-{event.pid}"
    return f"{task:>16} [{event.cpu:03d}] {event.ts:12.6f}: {event.name}: {event.format_fields()}"


def compact_line(line: str) -> str:
    """A trace line without its task column (`comm-pid`), for a narrow log."""
    task, sep, rest = line.lstrip().partition(" [")
    if not sep or " " in task.strip():
        return line
    cpu, _, tail = rest.partition("]")
    return f"[{cpu}] {tail.lstrip()}"


class EventLog(Log):
    DEFAULT_CSS = """
    EventLog { width: 1fr; border: round $panel; border-title-color: $text-muted; }
    EventLog:focus { border: round $primary; }
    """


def counters_table(rows: list[CounterRow], width: int = 48) -> Text:
    """kvm_stat's columns, biggest totals first, as fixed-width text (the numbers'
    columns narrow in a narrow panel, so that no row wraps)."""
    tot, pct, avg = (9, 8, 10) if width >= 8 + 27 else (7, 7, 9)
    name = max(8, width - tot - pct - avg)
    text = Text(
        f"{'Event':<{name}}{'Total':>{tot}}{'%Total':>{pct}}{'CurAvg/s':>{avg}}\n", style="bold"
    )
    for row in rows:
        event = row.event if len(row.event) <= name else row.event[: name - 1] + "…"
        text.append(
            f"{event:<{name}}{row.total:>{tot}}{row.percent:>{pct}.1f}{row.rate:>{avg}.0f}\n"
        )
    text.rstrip()
    text.no_wrap = True
    return text


class CountersTable(TextPanel):
    DEFAULT_CSS = """
    CountersTable { width: 50; height: 1fr; padding: 0 1; border: round $panel;
        border-title-color: $text-muted; }
    """


class EventPanel(Horizontal):
    """Log and counters side by side, filtered by one regex."""

    DEFAULT_CSS = """
    EventPanel { height: 10; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.counters = EventCounters()
        self.pattern: re.Pattern[str] | None = None
        self.logged = 0  # lines written to the log since start
        self._unwritten: deque[Event] = deque(maxlen=LOG_LINES_PER_FLUSH)

    def compose(self) -> ComposeResult:
        log = EventLog(max_lines=LOG_MAX_LINES, auto_scroll=True, id="event-log")
        log.border_title = "events"
        yield log
        table = CountersTable(id="counters")
        table.border_title = "kvm_stat"
        yield table

    @property
    def filter_text(self) -> str:
        return self.pattern.pattern if self.pattern is not None else ""

    def set_filter(self, pattern: re.Pattern[str] | None) -> None:
        self.pattern = pattern
        log = self.query_one(EventLog)
        shown = f" /{escape(pattern.pattern)}/" if pattern else ""  # "[ab]" is not markup
        log.border_title = f"events{shown}"
        self.query_one(CountersTable).border_title = f"kvm_stat{shown}"
        self.show_counters()

    def add_events(self, events: Iterable[Event]) -> None:
        batch = list(events)
        for event in batch:
            self.counters.add(event.name)
        shown = [e for e in batch if self.pattern is None or self.pattern.search(e.name)]
        self._unwritten.extend(shown[-LOG_LINES_PER_FLUSH:])

    def flush_log(self) -> None:
        """Write the events kept since the last flush.  Writing grows the log, and a log
        that grows lays the whole screen out again: the screens flush a few times a
        second, not every frame."""
        if self._unwritten and self.query(EventLog):
            log = self.query_one(EventLog)
            lines = [trace_line(e) for e in self._unwritten]
            if log.content_region.width < NARROW_LOG:
                lines = [compact_line(line) for line in lines]
            self._unwritten.clear()
            log.write_lines(lines)
            self.logged += len(lines)

    def refresh_counters(self, now: float) -> None:
        self.counters.refresh(now)
        self.show_counters()

    def show_counters(self) -> None:
        found = self.query(CountersTable)
        if not found:
            return  # a timer fired before the panel's children mounted (or after teardown)
        table = found.first()
        rows = self.counters.rows(self.pattern)
        table.show_content(counters_table(rows, table.content_region.width or 48))

    def clear_log(self) -> None:
        self.query_one(EventLog).clear()

    def reset(self) -> None:
        """A new model: an empty log and kvm_stat counters from zero (the filter stays)."""
        self.counters = EventCounters()
        self._unwritten.clear()
        self.clear_log()
        self.show_counters()
