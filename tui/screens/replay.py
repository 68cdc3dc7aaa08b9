"""The replay screen: a recorded kvmmmu trace (``mmuscope replay TRACE``) or a live tail
of tracefs (``mmuscope live``) driving a model of the VM's MMU — shadow pages appearing
and vanishing by level, obsolete ones dimmed after a generation flip, MMIO sptes with
their generation, TDP sptes on a grid of gfns, per-vCPU exits — with a timeline to play,
step and seek (docs/kvm.md §4-§6; engine.replay).

A file is indexed by a thread worker (a progress bar shows how far) while it already
plays; seeks reach as far as the index does.  A live tail is read by a thread worker too
and handed over in batches; only the last events are kept to seek back in.

Drawing: paused, a change is drawn at once.  Playing, the timeline is redrawn at most
every TIMELINE_EVERY seconds and the model's panels, when the model changed, at most
every REDRAW_EVERY seconds, one panel a frame: a frame that draws all of them (and
Textual then renders all of them) takes long enough to delay a key press
(engine.replay.views says what to draw).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from mmuscope.engine.events import Event
from mmuscope.engine.pacing import Pacer
from mmuscope.engine.replay.cursor import TraceCursor
from mmuscope.engine.replay.filters import EventFilter, parse_ids
from mmuscope.engine.replay.index import TraceIndex
from mmuscope.engine.replay.live import LiveTimeline
from mmuscope.engine.replay.seek import SeekTarget, parse_seek
from mmuscope.engine.replay.views import page_levels, spte_table
from mmuscope.engine.words import count
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import Reactive
from textual.worker import get_current_worker

from ..widgets.fit import fit_title, show_title
from ..widgets.replay_panels import (
    IndexingBar,
    ReplayPages,
    ReplayState,
    SpteGrid,
    TimelineBar,
    TimelineShown,
    seconds,
)
from .base import PlayerScreen
from .replay_dialogs import CpuDialog, GotoDialog, PidDialog, ids_text
from .replay_sources import index_trace, tail_pipe

Timeline = TraceCursor | LiveTimeline
Panels = Sequence[Callable[[], None]]  # the panels' draw methods, in order
REDRAW_EVERY = 0.1  # seconds between redraws of the model's panels while playing
TIMELINE_EVERY = 0.05  # seconds between redraws of the timeline bar while playing
REPLAY_SPEED = 100.0  # events a second to start with
MAX_PER_FRAME = 1000  # events replayed in one frame at most (the Pacer caps at 10000/s)
FRAME_BUDGET = 0.006  # seconds of parsing a frame may spend (the rest waits a frame)
MAX_CATCH_UP = 3.0  # frames' budgets a late frame may parse for (its turns stay SLICE long)
SLICE = 0.002  # seconds of parsing between two turns of the event loop within a frame
STEP_CHUNK = 16  # events replayed between two looks at the clock (~0.5 ms)
NEXT_CHANGE_LIMIT = 200_000  # events `n` reads looking for a change
SEEK_STEP = 0.10  # [ and ]: a tenth of the trace's time


class ReplayScreen(PlayerScreen):
    """A trace played on a model of the MMU, and the model drawn: the timeline bar, the
    shadow pages by level, the spte grid, the MMU's state and the header."""

    # Textual's Screen repaints the whole screen when its title or sub-title changes;
    # only the header shows them, and it redraws itself through its own watchers.  The
    # sub-title counts the events while the trace is indexed: ten repaints a second.
    title: Reactive[str | None] = Reactive(None, compute=False, repaint=False)
    sub_title: Reactive[str | None] = Reactive(None, compute=False, repaint=False)

    FRAME = 1 / 60  # seconds between frames: ~170 events a frame at 10,000 events/s

    BINDINGS = [
        Binding("space", "play_pause", "Play/Pause", tooltip="Play the trace (live: follow it)"),
        Binding("s", "step", "Step", tooltip="Replay one event"),
        Binding("n", "next_change", "Next", tooltip="Replay up to the next change drawn"),
        Binding("plus,equals_sign", "faster", "Faster", key_display="+",
                tooltip="Replay more events per second"),
        Binding("minus", "slower", "Slower", key_display="-",
                tooltip="Replay fewer events per second"),
        Binding("left_square_bracket", "seek_share(-1)", "Seek back", key_display="[",
                tooltip="Seek back a tenth of the trace's time"),
        Binding("right_square_bracket", "seek_share(1)", "Seek on", key_display="]",
                tooltip="Seek on a tenth of the trace's time"),
        Binding("home", "seek_start", "Start", show=False, priority=True,
                tooltip="Seek to the first event"),
        Binding("end", "seek_end", "End", show=False, priority=True,
                tooltip="Seek to the last event indexed (live: follow again)"),
        Binding("g", "goto", "Go to", tooltip="Seek to a time, a share, or an event number"),
        Binding("c", "filter_cpus", "CPUs", tooltip="Show only some CPUs' events"),
        Binding("p", "filter_pids", "Pids", tooltip="Show only some pids' events"),
    ]  # fmt: skip

    # The spte grid keeps its 32 cells a row (and its border and padding): on the kvm
    # screen, at 120 columns, the statistics beside it leave the kvm->arch panel 36
    # columns, the grid the other 36 (tui/screens/kvm_replay.py).
    DEFAULT_CSS = """
    ReplayScreen #replay-body { width: 3fr; }
    ReplayScreen #replay-left { width: 3fr; min-width: 36; }
    ReplayScreen.-narrow #replay-left { min-width: 0; }
    ReplayScreen #replay-state { width: 2fr; min-width: 46; }
    ReplayScreen.-narrow #replay-state { width: 34; min-width: 0; }
    ReplayScreen #replay-panels { height: 1fr; }
    ReplayScreen #replay-pages { height: 1fr; min-height: 4; }
    ReplayScreen #replay-grid { height: 19; }
    ReplayScreen #replay-state { height: 1fr; }
    ReplayScreen.-short #replay-grid { height: 7; }
    """

    view_name = "replay"

    class Indexed(Message):
        """The index worker's progress (0..1, 1 at the end), or an error."""

        def __init__(self, progress: float, error: str = "") -> None:
            super().__init__()
            self.progress = progress
            self.error = error

    class LiveEvents(Message):
        def __init__(self, events: list[Event]) -> None:
            super().__init__()
            self.events = events

    class LiveEnded(Message):
        def __init__(self, reason: str) -> None:
            super().__init__()
            self.reason = reason

    def __init__(
        self,
        timeline: Timeline,
        pacer: Pacer,
        *,
        source: str,
        trace: Path | None = None,
        pipe: Path | None = None,
    ) -> None:
        super().__init__(pacer)
        self.timeline: Timeline = timeline
        self.source = source
        self.filters = EventFilter()
        #: a seek beyond the checkpoints, done once they reach it
        self.pending: SeekTarget | None = None
        self._drawn: tuple[int, int, int] | None = None  # (model id, version, width)
        self._drawn_at = 0.0
        self._timeline_at = 0.0
        self._drawing: list[Callable[[], None]] = []  # panels to draw in the next frames
        self.trace = trace
        self.pipe = pipe
        self._index_started = 0.0
        self._frame_drawn = threading.Event()  # clear while a frame plays (replay_sources GATE)
        self._frame_drawn.set()
        self._scanned = False  # the index's scan is done (and was announced)

    @classmethod
    def for_trace(cls, path: Path, pacer: Pacer) -> ReplayScreen:
        index = TraceIndex(path.stat().st_size)
        return cls(TraceCursor(path, index), pacer, source=path.name, trace=path)

    @classmethod
    def for_live(cls, tracefs: Path, pacer: Pacer, keep: int | None = None) -> ReplayScreen:
        timeline = LiveTimeline(keep) if keep else LiveTimeline()
        pacer.playing = True  # live: follow from the start
        return cls(timeline, pacer, source=f"live {tracefs}", pipe=tracefs / "trace_pipe")

    # -- layout -----------------------------------------------------------------------

    def compose_main(self) -> ComposeResult:
        with Vertical(id="replay-body"):
            yield TimelineBar(id="timeline")
            label = f"indexing {self.source}"
            bar = IndexingBar(label, id="indexing")
            if self.trace is None:
                bar.add_class("-done")
            yield bar
            with Horizontal(id="replay-panels"):
                with Vertical(id="replay-left"):
                    yield ReplayPages(id="replay-pages")
                    yield SpteGrid(id="replay-grid")
                yield ReplayState(id="replay-state")

    def on_mount(self) -> None:
        show_title(self.query_one("#replay-state"), "kvm->arch · vCPUs")
        if self.trace is not None:
            self._index_started = time.monotonic()
            self._index_trace()
        if self.pipe is not None:
            self._tail_pipe()
        self.redraw(force=True)

    def on_resize(self) -> None:
        # the panels again once laid out at the new size: the newest pages a level row
        # has room for, the title's parts that fit
        self.call_after_refresh(self.redraw, True)

    def on_unmount(self) -> None:
        self._frame_drawn.set()
        if isinstance(self.timeline, TraceCursor):
            self.timeline.close()

    # -- workers ----------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="replay-index")
    def _index_trace(self) -> None:
        """The scan, then the checkpoints for seeking (engine.replay.index)."""
        assert isinstance(self.timeline, TraceCursor) and self.trace is not None
        worker = get_current_worker()
        index_trace(
            self.trace,
            self.timeline.index,
            lambda progress, error: self.post_message(self.Indexed(progress, error)),
            lambda: worker.is_cancelled,
            self._frame_drawn,
        )

    @work(thread=True, exclusive=True, group="replay-live")
    def _tail_pipe(self) -> None:
        """Read trace_pipe without blocking the app; hand events over in batches."""
        assert self.pipe is not None
        worker = get_current_worker()
        tail_pipe(
            self.pipe,
            lambda events: self.post_message(self.LiveEvents(events)),
            lambda reason: self.post_message(self.LiveEnded(reason)),
            lambda: worker.is_cancelled,
        )

    @on(Indexed)
    def _on_indexed(self, message: Indexed) -> None:
        bar = self.query_one(IndexingBar)
        if message.error:
            self.notify(message.error, title="indexing", severity="error", timeout=10)
            bar.add_class("-done")
            return
        index = self.timeline.index if isinstance(self.timeline, TraceCursor) else None
        if index is None:
            return
        events = count(index.scan.events, "event")
        if not index.scan.done:
            words = f"indexing {self.source}: {events}"
        else:
            words = f"checkpoints for seeking: {index.events:,} of {events}"
        bar.show(100 * message.progress, words)
        if index.scan.done and not self._scanned:
            self._scanned = True
            took = time.monotonic() - self._index_started
            words = f"{self.source}: {events} indexed in {took:.1f} s"
            self.notify(words, title="replay", timeout=4)
        if index.done:
            bar.add_class("-done")
        self._seek_pending()
        self.show_timeline()

    @on(LiveEvents)
    def _on_live_events(self, message: LiveEvents) -> None:
        timeline = self.timeline
        assert isinstance(timeline, LiveTimeline)
        self.show_events(timeline.feed(message.events))

    @on(LiveEnded)
    def _on_live_ended(self, message: LiveEnded) -> None:
        self.notify(message.reason, title="live", severity="error", timeout=10)

    # -- playing ----------------------------------------------------------------------

    def tick(self, now: float, dt: float) -> Awaitable[None] | None:
        timeline = self.timeline
        if timeline.live:  # events come in batches from the reader; draw what they did
            self.flush_events()
            self.redraw()
            return None
        self._frame_drawn.clear()  # the index worker waits until this frame is drawn
        late = min(MAX_CATCH_UP, max(1.0, dt / self.FRAME))  # frames since the last one
        return self._play(min(self.pacer.advance(dt), MAX_PER_FRAME), FRAME_BUDGET * late)

    async def _play(self, count: int, budget: float = FRAME_BUDGET) -> None:
        """Replay up to `count` events, at most `budget` seconds of parsing (a frame
        late by a frame or two may parse for them, MAX_CATCH_UP at most: late frames do
        not snowball; what runs between the turns is not the frame's), in
        turns of SLICE seconds between which the event loop runs (a key press waits for
        one turn, not for the frame); then draw what they did, in a turn of its own.  A
        pause meanwhile (a key, a seek) ends the frame there."""
        timeline = self.timeline
        played, at_end, spent = 0, False, 0.0
        try:
            while True:
                start = time.perf_counter()
                end = start + min(SLICE, budget - spent)
                while played < count:  # a turn replays STEP_CHUNK events at least
                    stepped = timeline.step(min(count - played, STEP_CHUNK))
                    if not stepped:
                        at_end = True
                        break
                    self.pending_events.extend(stepped)  # a seek meanwhile clears them
                    played += len(stepped)
                    if time.perf_counter() >= end:
                        break
                spent += time.perf_counter() - start  # the other turns are not the frame's
                done = at_end or played >= count or spent >= budget
                await asyncio.sleep(0)  # the event loop's turn (before the drawing too)
                if done or not self.pacer.playing:
                    break
        except asyncio.CancelledError:  # the frame timer stopped (a pause): show_state
            self._frame_drawn.set()  # draws what was played
            raise
        if not played and timeline.at_end and self.pacer.playing:
            self.pause()
            self.notify("end of the trace: home replays it from the start", timeout=4)
        self.show_events([])
        self.call_after_refresh(self._frame_drawn.set)

    def show_state(self) -> None:
        self.flush_events()  # a frame paused half-way: the events it played, as a frame
        self.redraw(force=True)

    def show_events(self, events: list[Event]) -> None:
        """Events just replayed: to the log and counters (filtered), then redraw.  While
        playing, a frame that repaints the log and kvm_stat (a few times a second)
        leaves the other panels to the next frame: both at once took twice as long."""
        self.pending_events.extend(events)  # the panel applies the CPU/pid scope
        shown_at = self._counters_shown_at
        self.flush_events()
        if self.pacer.playing and self._counters_shown_at != shown_at:
            return
        self.redraw()

    def action_play_pause(self) -> None:
        self.pending = None
        timeline = self.timeline
        if isinstance(timeline, LiveTimeline):
            if self.pacer.playing:
                timeline.following = False
            else:
                self.after_seek(timeline.follow())
        elif not self.pacer.playing and timeline.peek() is None:
            self.notify("at the end of the trace: home goes back to the start", timeout=3)
            return
        super().action_play_pause()

    def action_step(self) -> None:
        self.pause()
        self.pending = None
        self.show_events(self.timeline.step(1))

    def action_next_change(self) -> None:
        """Replay up to and including the next event that changes a panel."""
        self.pause()
        self.pending = None
        events = self.timeline.step(NEXT_CHANGE_LIMIT, until_change=True)
        if len(events) > 40:
            self.after_seek(events[-40:])
        else:
            self.show_events(events)

    def pause(self) -> None:
        if isinstance(self.timeline, LiveTimeline):
            self.timeline.following = False
        super().pause()

    # -- seeking ----------------------------------------------------------------------

    def seek_time(self, ts: float) -> None:
        self.pause()
        first, span = self._times()
        ts = max(first, min(ts, first + span))
        self.pending = None
        if not self.timeline.reachable(ts=ts):  # as far as the checkpoints go, then on
            self.pending = SeekTarget(ts=ts)
            self.after_seek(self.timeline.seek_event(self.timeline.seekable))
            return
        self.after_seek(self.timeline.seek_time(ts))

    def seek_event(self, event: int) -> None:
        self.pause()
        timeline = self.timeline
        event = max(timeline.earliest, min(event, timeline.total))
        self.pending = None
        if not timeline.reachable(event):  # as far as the checkpoints go, then on
            self.pending = SeekTarget(event=event)
            event = timeline.seekable
        self.after_seek(timeline.seek_event(event))

    def _seek_pending(self) -> None:
        """Finish a seek beyond the checkpoints once they reach its target."""
        target = self.pending
        if target is None or not self.timeline.reachable(target.event, target.ts):
            return
        if target.event is not None:
            self.seek_event(target.event)
        elif target.ts is not None:
            self.seek_time(target.ts)

    def after_seek(self, tail: list[Event]) -> None:
        """A new position: kvm_stat's totals from the model (filtered), the log from the
        events just before it."""
        panel = self.events_panel
        panel.reset()
        self.pending_events.clear()
        panel.add_events(tail)
        panel.counters.totals = self.timeline.model.totals(self.filters.cpus, self.filters.pids)
        panel.flush_log()
        panel.show_counters()
        self.redraw(force=True)

    def action_seek_share(self, direction: int) -> None:
        _, span = self._times()
        now = self.timeline.model.last_ts
        if span <= 0 or now is None:
            share = max(1, self.timeline.total // 10)
            self.seek_event(self.timeline.position + direction * share)
            return
        self.seek_time(now + direction * SEEK_STEP * span)

    def action_seek_start(self) -> None:
        self.seek_event(self.timeline.earliest)

    def action_seek_end(self) -> None:
        timeline = self.timeline
        if isinstance(timeline, LiveTimeline):
            self.after_seek(timeline.follow())
            self.pacer.playing = True
            self.sync_player()
            self.show_state()
            return
        self.seek_event(timeline.total if timeline.scanned else timeline.seekable)

    def action_goto(self) -> None:
        self.app.push_screen(GotoDialog(self.goto))

    def goto(self, text: str) -> str | None:
        """Seek as the dialog asks; an error message for anything unreadable."""
        first, span = self._times()
        try:
            target = parse_seek(text, first, span, self.timeline.model.last_ts or first)
        except ValueError as err:
            return str(err)
        if target.event is not None:
            self.seek_event(target.event)
        elif target.ts is not None:
            self.seek_time(target.ts)
        return None

    # -- filters ----------------------------------------------------------------------

    def action_filter_cpus(self) -> None:
        self.app.push_screen(CpuDialog(self._set_cpus, ids_text(self.filters.cpus)))

    def action_filter_pids(self) -> None:
        self.app.push_screen(PidDialog(self._set_pids, ids_text(self.filters.pids)))

    def _set_cpus(self, text: str) -> str | None:
        try:
            cpus = parse_ids(text, "cpus")
        except ValueError as err:
            return str(err)
        self.set_filters(EventFilter(cpus, self.filters.pids))
        return None

    def _set_pids(self, text: str) -> str | None:
        try:
            pids = parse_ids(text, "pids")
        except ValueError as err:
            return str(err)
        self.set_filters(EventFilter(self.filters.cpus, pids))
        return None

    def set_filters(self, filters: EventFilter) -> None:
        """New CPU/pid filters: kvm_stat's totals recounted, the log redrawn from the
        latest events under them (not blanked until the next seek)."""
        self.filters = filters
        panel = self.events_panel
        panel.set_scope(filters.matches if filters.active else None)
        panel.counters.totals = self.timeline.model.totals(filters.cpus, filters.pids)
        panel.show_counters()
        self.redraw(force=True)

    # -- drawing ----------------------------------------------------------------------

    def _times(self) -> tuple[float, float]:
        """(first timestamp, the span known) of the trace."""
        first, last = self.timeline.first_ts, self.timeline.last_ts
        if first is None or last is None:
            return 0.0, 0.0
        return first, max(0.0, last - first)

    def show_timeline(self) -> None:
        timeline = self.timeline
        first, span = self._times()
        now = timeline.model.last_ts
        elapsed = now - first if now is not None and timeline.position else 0.0
        elapsed = max(0.0, min(elapsed, span))
        if timeline.live:
            state = "● live" if self.pacer.playing else "⏸ live"
            complete = True
        else:
            state = "▶" if self.pacer.playing else "⏸"
            complete = timeline.scanned or timeline.at_end
        following = timeline.live and self.pacer.playing
        speed = "following" if following else f"{self.pacer.speed:g}/s"
        target = self.pending
        if target is not None:  # a seek waiting for the checkpoints
            where = f"#{target.event:,}" if target.event is not None else ""
            where = where or f"{seconds((target.ts or first) - first)} s"
            speed = f"seeking {where}…"
        self.query_one(TimelineBar).show(
            TimelineShown(
                state=state,
                elapsed=elapsed,
                span=span,
                position=timeline.position,
                total=timeline.total,
                complete=complete,
                speed=speed,
                filters=self.filters,
                earliest=timeline.earliest,
            )
        )

    def redraw(self, force: bool = False) -> None:
        """The timeline and the model's panels.  Paused (or forced), all of them now.
        Playing, the timeline at most every TIMELINE_EVERY seconds, and, when the model
        changed, its panels at most every REDRAW_EVERY seconds, one a frame (a frame
        that draws every panel takes long enough to delay a key press)."""
        now = time.monotonic()
        playing = self.pacer.playing and not force
        if not playing or now - self._timeline_at >= TIMELINE_EVERY:
            self._timeline_at = now
            self.show_timeline()
        if not playing:
            self._drawing.clear()
            self._draw_panels(now, force, (self._draw_pages, self._draw_grid, self._draw_state))
        elif self._drawing:
            self._drawing.pop(0)()
        elif now - self._drawn_at >= REDRAW_EVERY:
            self._draw_panels(now, False, (self._draw_pages,), (self._draw_grid, self._draw_state))

    def _draw_panels(self, now: float, force: bool, draw: Panels, later: Panels = ()) -> None:
        """Draw `draw` now and `later` in the next frames, if the model changed."""
        model = self.timeline.model
        key = (id(model), model.version, self.size.width)
        if key == self._drawn and not force:
            return
        self._drawn, self._drawn_at = key, now
        for panel in draw:
            panel()
        self._drawing.extend(later)
        self._update_header()

    def _draw_pages(self) -> None:
        model = self.timeline.model
        pages = self.query_one(ReplayPages)
        gen = "?" if model.mmu_valid_gen is None else model.mmu_valid_gen
        whole = f"shadow pages by level · mmu_valid_gen {gen}"
        show_title(pages, fit_title([whole, "shadow pages by level"], pages.outer_size.width))
        pages.show(page_levels(model), model)

    def _draw_grid(self) -> None:
        self.query_one(SpteGrid).show(spte_table(self.timeline.model))

    def _draw_state(self) -> None:
        model = self.timeline.model
        timeline = self.timeline
        # a file, played to its last event
        at_end = not timeline.live and timeline.scanned and timeline.position >= timeline.total
        self.query_one(ReplayState).show(
            model, self._times()[0] if model.events else None, at_end=bool(at_end)
        )

    def _update_header(self) -> None:
        kind = "live" if self.timeline.live else "replay"
        self.title = f"mmuscope · {kind} · {self.source}"
        _, span = self._times()
        self.sub_title = f"{count(self.timeline.total, 'event')} over {seconds(span)} s"

    # -- export -----------------------------------------------------------------------

    def export_dot(self) -> tuple[str, int] | None:
        """The shadow pages at the current position, ranked by level."""
        from mmuscope.engine.replay.dot import replay_to_dot

        model = self.timeline.model
        if not model.pages:
            return None
        title = f"{self.source} · event {self.timeline.position:,}"
        return replay_to_dot(model, title=title)
