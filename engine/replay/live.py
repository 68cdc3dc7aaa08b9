"""A live trace (``trace_pipe``) as a timeline: the last `keep` events are kept, and the
position can move anywhere among them; nothing older can be returned to.

Two models: `base`, the state before the oldest event kept, and `model`, the state at the
position.  Events that fall out of the window are applied to `base`, so seeking back is
`base` copied plus the kept events up to the target: memory is `keep` events and two
models, whatever the run's length.  While `following`, every event fed is applied at
once (the screen shows the VM as it is now); a seek stops following, `follow` resumes.
If the position falls out of the window while not following (paused for long), it moves
to the oldest event kept (`lost` counts the events skipped that way).

Same methods as `engine.replay.cursor.TraceCursor`, so one screen drives both.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable

from ..events import Event
from .cursor import TAIL
from .model import ReplayModel

DEFAULT_KEEP = 20_000


class LiveTimeline:
    live = True

    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        if keep < 1:
            raise ValueError("a live timeline keeps at least one event")
        self.keep = keep
        self.window: list[Event] = []
        self.start = 0  # the number of the oldest event kept
        self.base = ReplayModel()  # the state before window[0]
        self.model = ReplayModel()  # the state at `position`
        self.position = 0
        self.following = True
        self.lost = 0

    # -- what is known ------------------------------------------------------------------

    @property
    def total(self) -> int:
        return self.start + len(self.window)

    @property
    def earliest(self) -> int:
        return self.start

    @property
    def seekable(self) -> int:
        return self.total

    scanned = True  # what is kept is all there is

    def reachable(self, event: int | None = None, ts: float | None = None) -> bool:
        return True  # every kept event is in memory

    @property
    def at_end(self) -> bool:
        return self.position >= self.total

    @property
    def first_ts(self) -> float | None:
        return self.window[0].ts if self.window else self.model.first_ts

    @property
    def last_ts(self) -> float | None:
        return self.window[-1].ts if self.window else self.model.last_ts

    # -- feeding ------------------------------------------------------------------------

    def feed(self, events: Iterable[Event]) -> list[Event]:
        """New events from the tail; the ones applied now (all of them while following)."""
        self.window.extend(events)
        applied = self.step(self.total - self.position) if self.following else []
        self._trim()
        return applied

    def follow(self) -> list[Event]:
        """Back to the newest event, following again; returns the tail applied."""
        self.following = True
        return self._forward(self.total)

    def _trim(self) -> None:
        """Drop what exceeds `keep` (in chunks of an eighth, so that trimming is rare)."""
        excess = len(self.window) - self.keep
        if excess < max(1, self.keep // 8):
            return
        for event in self.window[:excess]:
            self.base.apply(event)
        del self.window[:excess]
        self.start += excess
        if self.position < self.start:
            self.lost += self.start - self.position
            self.model, self.position = self.base.copy(), self.start

    # -- moving -------------------------------------------------------------------------

    def step(self, count: int, *, until_change: bool = False) -> list[Event]:
        out: list[Event] = []
        for _ in range(min(count, self.total - self.position)):
            event = self.window[self.position - self.start]
            self.position += 1
            out.append(event)
            if self.model.apply(event) and until_change:
                break
        return out

    def seek_event(self, event: int) -> list[Event]:
        """Go to just before event `event`, clamped to what is kept; stops following."""
        self.following = False
        return self._forward(max(self.start, min(event, self.total)))

    def seek_time(self, ts: float) -> list[Event]:
        at = bisect.bisect_left(self.window, ts, key=lambda e: e.ts)
        return self.seek_event(self.start + at)

    def _forward(self, target: int) -> list[Event]:
        if target < self.position:
            self.model, self.position = self.base.copy(), self.start
        tail: deque[Event] = deque(self.step(target - self.position), maxlen=TAIL)
        return list(tail)

    def audit(self) -> None:
        assert self.start <= self.position <= self.total
        assert self.base.events == self.start and self.model.events == self.position
        assert len(self.window) < self.keep + max(1, self.keep // 8)
        self.base.audit()
        self.model.audit()
