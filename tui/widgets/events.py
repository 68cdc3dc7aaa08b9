"""The event log and the kvm_stat-like counters every screen shows.

The log prints events as `trace-cmd report` does (comm-pid [cpu] ts: name: fields) where
the line fits; where it does not, the event's name and fields come first, then the CPU
and the time since the log's first event, the task left out, and a long event wraps onto
indented rows, so every event can be read whole (`event_rows`).  The counters table has
kvm_stat's columns (Event, Total, %Total, CurAvg/s); a narrow panel drops %Total, then
the names' `kvm_`, before it cuts a name (`counters_table`).  One regex filter
(`f`, as in kvm_stat) applies to both.  Events arrive in batches once per frame; the log
keeps the last `LOG_LINES_PER_FLUSH` events until the screen flushes it (a few times a
second), the counters count all of them.
"""

from __future__ import annotations

import re
import textwrap
from collections import deque
from collections.abc import Callable, Collection, Iterable
from typing import NamedTuple

from mmuscope.engine.events import (
    KERNEL_SHAPES,
    MODEL_EVENTS,
    MODEL_MARK,
    MODEL_NOTE,
    Event,
    is_model_event,
    model_name,
)
from mmuscope.engine.stats import CounterRow, EventCounters
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.markup import escape

from .event_log import EventLog
from .fit import fit_title, more_rows, names_in, show_subtitle, show_title
from .panel import TextPanel

#: the model's own events (engine.events: every view asks it) are marked `*` wherever shown
OWN_NOTE = MODEL_NOTE
MAY_BE_OWN = MODEL_EVENTS.keys() | KERNEL_SHAPES.keys()
LOG_LINES_PER_FLUSH = 40  # at full speed the log scrolls faster than anyone reads anyway
LOG_MAX_LINES = 1000
KEPT_EVENTS = 300  # laid out again when the log's width changes
CONTINUATION = "  "  # the indent of an event's further rows
KVM_PREFIX = "kvm_"  # most kvm tracepoints' names: left off in a narrow kvm_stat
BARE_HEAD = f"Event (-{KVM_PREFIX})"
NBSP = "\u00a0"  # textwrap breaks only at ASCII whitespace


def trace_line(event: Event) -> str:
    """An event as `trace-cmd report` prints it: the tracepoint's own printk text where the
    kernel has one (engine.trace; an event replayed from an older kernel in that
    kernel's printk), `key=value` pairs for the model's own events (a `*` after their
    name, as `format_line` puts it).  The trace formats are imported at the first event
    shown, after the first frame (start-up: the first frame shows no event)."""
    from mmuscope.engine.trace import VARIANTS, TracepointError, format_line
    from mmuscope.engine.trace.lines import TRACE_CMD

    for variant in VARIANTS:
        try:
            return format_line(event, TRACE_CMD, variant=variant)
        except TracepointError:
            continue
    task = f"{event.comm}-{event.pid}"
    name = model_name(event)
    return f"{task:>16} [{event.cpu:03d}] {event.ts:12.6f}: {name}: {event.format_fields()}"


def shown_name(name: str, own: Collection[str] = MODEL_EVENTS) -> str:
    """A name as the kvm_stat table shows it: `*` after the model's own (OWN_NOTE), by
    name, or as `own` (the names the panel saw emitted in the model's own shape) says."""
    return name + MODEL_MARK if name in own else name


class LogEntry(NamedTuple):
    """One event as the log prints it: the whole trace line, and its parts."""

    line: str  # as trace-cmd report prints it
    cpu: int
    ts: float
    body: str  # "name: fields"


def log_entry(event: Event) -> LogEntry:
    line, name = trace_line(event), model_name(event)
    head = f": {name}: "
    at = line.find(head)
    fields = line[at + len(head) :] if at >= 0 else event.format_fields()
    return LogEntry(line, event.cpu, event.ts, f"{name}: {fields.strip()}")


def since(seconds: float) -> str:
    """A time since the log's first event, short: microseconds below a second."""
    seconds = max(0.0, seconds)
    return f"{seconds * 1e6:.0f}µs" if seconds < 1 else f"{seconds:.6f}s"


def event_rows(entry: LogEntry, width: int, t0: float = 0.0, *, whole: bool = True) -> list[str]:
    """The rows one event takes in a log `width` columns wide: the trace-cmd line if it
    fits (and `whole` lines are wanted); else the name and fields first with
    ``[cpu] +time`` (since `t0`) at the right, wrapped at spaces onto indented rows when
    they do not fit one."""
    if whole and len(entry.line) <= width:
        return [entry.line]
    tail = f"[{entry.cpu}] +{since(entry.ts - t0)}"
    if len(entry.body) + 2 + len(tail) <= width:
        return [entry.body + tail.rjust(width - len(entry.body))]
    glued = tail.replace(" ", NBSP)  # one word: it moves to a row of its own only whole
    rows = textwrap.wrap(
        f"{entry.body}  {glued}",
        max(width, 8),
        subsequent_indent=CONTINUATION,
        break_on_hyphens=False,
    )
    last = rows[-1].removesuffix(glued).rstrip()
    rows[-1] = last + tail.rjust(width - len(last))
    return rows


def counters_table(
    rows: list[CounterRow], width: int = 48, own: Collection[str] = MODEL_EVENTS
) -> Text:
    """kvm_stat's columns, biggest totals first, as fixed-width text that never wraps:
    where the names do not fit beside every column, %Total goes first (the others'
    share of it is Total's), then the `kvm_` most tracepoints' names begin with (the header
    says so: `Event (-kvm_)`), and only then are names cut.  The model's own (`own`)
    carry a `*`, kept on a name cut short.  A name may run into the blanks left of its
    own total, one blank kept: a short total leaves a long name whole."""
    names = [shown_name(row.event, own) for row in rows]
    totals = [str(row.total) for row in rows]
    tot = max(6, *(len(total) + 1 for total in totals)) if rows else 6
    pct, avg = 7, 9

    def fit(names: list[str], room: int) -> bool:
        pairs = zip(names, totals, strict=True)
        return room >= len("Event") and all(len(n) + 1 + len(t) <= room + tot for n, t in pairs)

    if not fit(names, width - tot - pct - avg):
        pct = 0
    room = max(8, width - tot - pct - avg)
    head = "Event"
    if not fit(names, room) and any(n.startswith(KVM_PREFIX) for n in names):
        names = [n.removeprefix(KVM_PREFIX) for n in names]
        head = BARE_HEAD if len(BARE_HEAD) < room else head
    pct_head = f"{'%Total':>{pct}}" if pct else ""
    text = Text(f"{head:<{room}}{'Total':>{tot}}{pct_head}{'CurAvg/s':>{avg}}\n", style="bold")
    for row, event, total in zip(rows, names, totals, strict=True):
        reach = room + tot - len(total) - 1  # the name's columns and the blanks before its total
        if len(event) > reach:
            mark = MODEL_MARK if event.endswith(MODEL_MARK) else ""
            event = event[: reach - 1 - len(mark)] + "…" + mark
        share = f"{row.percent:>{pct}.1f}" if pct else ""
        text.append(f"{event:<{reach}} {total}{share}{row.rate:>{avg}.0f}\n")
    text.rstrip()
    text.no_wrap = True
    return text


def fitting_rows(
    rows: list[CounterRow], room: int, caption: str = ""
) -> tuple[list[CounterRow], int]:
    """The rows that fit `room` lines, biggest totals first as kvm_stat shows them, except
    that a row the caption names stays (a lesser one goes instead); how many are left out."""
    if room <= 0 or len(rows) <= room:
        return rows, 0
    named = [i for i, row in enumerate(rows) if names_in(row.event, caption)]
    order = named + [i for i in range(len(rows)) if i not in named]
    kept = sorted(order[:room])
    return [rows[i] for i in kept], len(rows) - len(kept)


class CountersTable(TextPanel):
    DEFAULT_CSS = """
    CountersTable { width: 50; height: 1fr; padding: 0 1; border: round $panel;
        border-title-color: $text-muted; text-wrap: nowrap; text-overflow: clip; }
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
        #: which events the screen counts at all (the replay's CPU/pid filter); None: all
        self.scope: Callable[[Event], bool] | None = None
        #: the latest events, unfiltered: a new filter redraws the log from them
        self._history: deque[Event] = deque(maxlen=KEPT_EVENTS)
        self.logged = 0  # events written to the log since start
        self._unwritten: deque[Event] = deque(maxlen=LOG_LINES_PER_FLUSH)
        self._kept: deque[LogEntry] = deque(maxlen=KEPT_EVENTS)  # the log's last events
        self._laid_out_at = 0  # the width the log's rows were wrapped for
        #: the log's one form: every event's trace-cmd line whole, or every event as
        #: name and fields first (event_rows), never both in one log
        self.whole_lines = True
        self._t0: float | None = None  # the first logged event's time
        #: a scenario step's caption: the kvm_stat rows it names stay when rows must go
        self.focus_text = ""
        #: the names counted that were the model's own (engine.events.is_model_event)
        self.own_names: set[str] = set()

    def compose(self) -> ComposeResult:
        log = EventLog(max_lines=LOG_MAX_LINES, auto_scroll=True, id="event-log")
        show_title(log, "events")
        yield log
        table = CountersTable(id="counters")
        show_title(table, "kvm_stat")
        yield table

    @property
    def filter_text(self) -> str:
        return self.pattern.pattern if self.pattern is not None else ""

    def set_filter(self, pattern: re.Pattern[str] | None) -> None:
        self.pattern = pattern
        log = self.query_one(EventLog)
        shown = f" /{escape(pattern.pattern)}/" if pattern else ""  # "[ab]" is not markup
        show_title(log, f"events{shown}")
        show_title(self.query_one(CountersTable), f"kvm_stat{shown}")
        self.rewrite_log()
        self.show_counters()

    def set_scope(self, scope: Callable[[Event], bool] | None) -> None:
        """Count and log only the events `scope` accepts; the log is redrawn from the
        latest events (the caller recounts the totals it keeps elsewhere)."""
        self.scope = scope
        self.rewrite_log()

    def shows(self, event: Event) -> bool:
        """Whether the log shows `event`: in scope, and its name matches the regex."""
        if self.scope is not None and not self.scope(event):
            return False
        return self.pattern is None or self.pattern.search(event.name) is not None

    def add_events(self, events: Iterable[Event]) -> None:
        batch = list(events)
        self._history.extend(batch)
        scope, own = self.scope, self.own_names
        for event in batch:
            if scope is None or scope(event):
                self.counters.add(event.name)
                name = event.name
                if name in MAY_BE_OWN and name not in own and is_model_event(name, event.fields):
                    own.add(name)
        shown = [e for e in batch if self.shows(e)] if self.scope or self.pattern else batch
        self._unwritten.extend(shown[-LOG_LINES_PER_FLUSH:])

    def rewrite_log(self) -> None:
        """The log again from the latest events under the current filters: no line the
        filters hide stays on screen, and the lines they show reappear."""
        self._unwritten.clear()
        if not self.query(EventLog):
            return
        log = self.query_one(EventLog)
        t0 = self._t0
        self._kept.clear()
        self._kept.extend(log_entry(e) for e in self._history if self.shows(e))
        self._t0 = t0 if t0 is not None or not self._kept else self._kept[0].ts
        self._lay_out(log, self._log_width(log))

    def flush_log(self) -> None:
        """Write the events kept since the last flush.  Writing grows the log, and a log
        that grows lays the whole screen out again: the screens flush a few times a
        second, not every frame."""
        if self._unwritten and self.query(EventLog):
            log = self.query_one(EventLog)
            own = any(is_model_event(e.name, e.fields) for e in self._unwritten)
            if own:
                show_subtitle(log, OWN_NOTE)
            entries = [log_entry(e) for e in self._unwritten]
            self._unwritten.clear()
            if self._t0 is None:
                self._t0 = entries[0].ts
            self._kept.extend(entries)
            self.logged += len(entries)
            width = self._log_width(log)
            longer = self.whole_lines and any(len(e.line) > width for e in entries)
            if width != self._laid_out_at or longer:  # a new width, or the other form
                self._lay_out(log, width)
            else:
                log.write_lines(self._rows(entries, width))

    def show_latest(self) -> None:
        """The log's view at its end, once laid out: a scenario step's events are the
        newest, and the step's last event is the one its caption is about (the caption
        shown beside the step changes the log's height, so a view at the end before it
        would no longer be, and would stop following)."""
        self.call_after_refresh(self._scroll_to_end)

    def _scroll_to_end(self) -> None:
        if self.query(EventLog):
            self.query_one(EventLog).scroll_end(animate=False, immediate=True, x_axis=False)

    def _log_width(self, log: EventLog) -> int:
        return log.scrollable_content_region.width or 80

    def _rows(self, entries: Iterable[LogEntry], width: int) -> list[str]:
        t0, whole = self._t0 or 0.0, self.whole_lines
        return [row for entry in entries for row in event_rows(entry, width, t0, whole=whole)]

    def _lay_out(self, log: EventLog, width: int) -> None:
        """Write the kept events again, wrapped for the log's width now, in one form:
        the trace-cmd lines whole where every one fits, else name and fields first."""
        self._laid_out_at = width
        self.whole_lines = all(len(entry.line) <= width for entry in self._kept)
        log.clear()
        log.write_lines(self._rows(self._kept, width))

    def on_mount(self) -> None:
        self.show_counters()  # kvm_stat's headings in the first frame, before any event

    def on_resize(self) -> None:
        self.call_after_refresh(self._relayout)  # once the log has its new size

    def _relayout(self) -> None:
        self.show_counters()
        if self._kept and self.query(EventLog):
            log = self.query_one(EventLog)
            width = self._log_width(log)
            if width != self._laid_out_at:
                self._lay_out(log, width)

    def refresh_counters(self, now: float) -> None:
        self.counters.refresh(now)
        self.show_counters()

    def show_counters(self) -> None:
        found = self.query(CountersTable)
        if not found:
            return  # a timer fired before the panel's children mounted (or after teardown)
        table = found.first()
        rows = self.counters.rows(self.pattern)
        rows, dropped = fitting_rows(rows, table.content_region.height - 1, self.focus_text)
        width = table.content_region.width or 48
        own_names = self.own_names.union(MODEL_EVENTS)  # (a replay sets the totals itself)
        table.show_content(counters_table(rows, width, own_names))
        own = any(row.event in own_names for row in rows)
        more, note = more_rows(dropped), OWN_NOTE if own else ""
        versions = [f"{note} · {more}", more] if note and more else [note or more]
        subtitle = fit_title(versions, table.outer_size.width)
        show_subtitle(table, subtitle)

    def clear_log(self) -> None:
        self.query_one(EventLog).clear()
        self._kept.clear()
        self._t0 = None

    def reset(self) -> None:
        """A new model: an empty log and kvm_stat counters from zero (the filter stays)."""
        self.counters = EventCounters()
        self.own_names = set()
        self._unwritten.clear()
        self._history.clear()
        self.clear_log()
        self.show_counters()
