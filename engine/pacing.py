"""Play, pause, step and speed for an animation driven by one timer (no clock inside).

The app's timer calls `advance(dt)` with the seconds since the previous tick; the pacer
answers how many whole steps (lookups, faults, ...) to run now and how far into the
current one the animation is, so the probes of a lookup can be revealed one by one at
slow speeds.  Above `ANIMATE_BELOW` steps per second every step is shown complete.
"""

from __future__ import annotations

import math

SPEEDS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)
DEFAULT_SPEED = 4.0
ANIMATE_BELOW = 30.0  # steps per second; faster than this, reveal whole steps


class Pacer:
    """Steps per second, a play/pause flag and the phase of the step in progress."""

    def __init__(self, speed: float = DEFAULT_SPEED, playing: bool = True) -> None:
        self.index = min(range(len(SPEEDS)), key=lambda i: abs(SPEEDS[i] - speed))
        self.playing = playing
        self.phase = 0.0  # 0 <= phase < 1: progress through the current step

    @property
    def speed(self) -> float:
        return SPEEDS[self.index]

    @property
    def animating(self) -> bool:
        """Whether steps are slow enough to reveal their probes one at a time."""
        return self.speed < ANIMATE_BELOW

    def faster(self) -> float:
        self.index = min(self.index + 1, len(SPEEDS) - 1)
        return self.speed

    def slower(self) -> float:
        self.index = max(self.index - 1, 0)
        return self.speed

    def toggle(self) -> bool:
        self.playing = not self.playing
        return self.playing

    def advance(self, dt: float) -> int:
        """Time passed: the number of new steps to start (0 while paused)."""
        if not self.playing or dt <= 0:
            return 0
        self.phase += dt * self.speed
        started = math.floor(self.phase)
        self.phase -= started
        return started

    def revealed(self, total: int) -> int:
        """How many of a step's `total` parts to show at the current phase (at least 1)."""
        if total <= 0:
            return 0
        if not self.animating:
            return total
        return min(total, 1 + math.floor(self.phase * total))
