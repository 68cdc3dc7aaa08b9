"""The replay screen's drawing: the timeline bar, the shadow pages by level, the spte
grid and the MMU's state, and the header — redrawn so that no frame does much while the
trace plays (engine.replay.views says what to draw).

Paused, a change is drawn at once.  Playing, the timeline is redrawn at most every
TIMELINE_EVERY seconds and the model's panels, when the model changed, at most every
REDRAW_EVERY seconds, one panel a frame: a frame that draws all of them (and Textual
then renders all of them) takes long enough to delay a key press.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from mmuscope.engine.pacing import Pacer
from mmuscope.engine.replay.cursor import TraceCursor
from mmuscope.engine.replay.filters import EventFilter
from mmuscope.engine.replay.live import LiveTimeline
from mmuscope.engine.replay.seek import SeekTarget
from mmuscope.engine.replay.views import page_levels, spte_table
from mmuscope.engine.words import count
from textual.reactive import Reactive

from ..widgets.fit import fit_title, show_title
from ..widgets.replay_panels import (
    ReplayPages,
    ReplayState,
    SpteGrid,
    TimelineBar,
    TimelineShown,
    seconds,
)
from .base import PlayerScreen

Timeline = TraceCursor | LiveTimeline
Panels = Sequence[Callable[[], None]]  # the panels' draw methods, in order
REDRAW_EVERY = 0.1  # seconds between redraws of the model's panels while playing
TIMELINE_EVERY = 0.05  # seconds between redraws of the timeline bar while playing


class ReplayDrawing(PlayerScreen):
    """The drawing half of `tui.screens.replay.ReplayScreen`."""

    # Textual's Screen repaints the whole screen when its title or sub-title changes;
    # only the header shows them, and it redraws itself through its own watchers.  The
    # sub-title counts the events while the trace is indexed: ten repaints a second.
    title: Reactive[str | None] = Reactive(None, compute=False, repaint=False)
    sub_title: Reactive[str | None] = Reactive(None, compute=False, repaint=False)

    def __init__(self, timeline: Timeline, pacer: Pacer, source: str) -> None:
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

    def _times(self) -> tuple[float, float]:
        """(first timestamp, the span known) of the trace."""
        first, last = self.timeline.first_ts, self.timeline.last_ts
        if first is None or last is None:
            return 0.0, 0.0
        return first, max(0.0, last - first)

    def show_state(self) -> None:
        self.redraw(force=True)

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
