"""The event log and the kvm_stat-like counters every screen shows.

The log prints events as `trace-cmd report` does (comm-pid [cpu] ts: name: fields); the
counters table has kvm_stat's columns (Event, Total, %Total, CurAvg/s).  One regex filter
(`f`, as in kvm_stat) applies to both.  Events arrive in batches once per frame; the log
keeps the last `LOG_LINES_PER_FRAME` of a batch, the counters count all of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import DataTable, Log

from engine.events import Event
from engine.stats import EventCounters

LOG_LINES_PER_FRAME = 40
LOG_MAX_LINES = 2000


def trace_line(event: Event) -> str:
    """An event as a `trace-cmd report` line."""
    task = f"{event.comm}-{event.pid}"
    return f"{task:>16} [{event.cpu:03d}] {event.ts:12.6f}: {event.name}: {event.format_fields()}"


class EventLog(Log):
    DEFAULT_CSS = """
    EventLog { width: 1fr; border: round $panel; border-title-color: $text-muted; }
    EventLog:focus { border: round $primary; }
    """


class CountersTable(DataTable[object]):
    DEFAULT_CSS = """
    CountersTable { width: 50; border: round $panel;
        border-title-color: $text-muted; }
    CountersTable:focus { border: round $primary; }
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

    def compose(self) -> ComposeResult:
        log = EventLog(max_lines=LOG_MAX_LINES, auto_scroll=True, id="event-log")
        log.border_title = "events"
        yield log
        table = CountersTable(id="counters", cursor_type="none", show_cursor=False)
        table.border_title = "kvm_stat"
        yield table

    def on_mount(self) -> None:
        table = self.query_one(CountersTable)
        table.add_column("Event", key="event")
        table.add_column("Total", key="total")
        table.add_column("%Total", key="pct")
        table.add_column("CurAvg/s", key="rate")

    @property
    def filter_text(self) -> str:
        return self.pattern.pattern if self.pattern is not None else ""

    def set_filter(self, pattern: re.Pattern[str] | None) -> None:
        self.pattern = pattern
        log = self.query_one(EventLog)
        log.border_title = f"events /{pattern.pattern}/" if pattern else "events"
        self.query_one(CountersTable).border_title = (
            f"kvm_stat /{pattern.pattern}/" if pattern else "kvm_stat"
        )
        self.show_counters()

    def add_events(self, events: Iterable[Event]) -> None:
        batch = list(events)
        for event in batch:
            self.counters.add(event.name)
        shown = [e for e in batch if self.pattern is None or self.pattern.search(e.name)]
        if shown:
            lines = [trace_line(e) for e in shown[-LOG_LINES_PER_FRAME:]]
            self.query_one(EventLog).write_lines(lines)
            self.logged += len(lines)

    def refresh_counters(self, now: float) -> None:
        self.counters.refresh(now)
        self.show_counters()

    def show_counters(self) -> None:
        table = self.query_one(CountersTable)
        table.clear()
        for row in self.counters.rows(self.pattern):
            table.add_row(row.event, row.total, f"{row.percent:5.1f}", f"{row.rate:8.1f}")

    def clear_log(self) -> None:
        self.query_one(EventLog).clear()
