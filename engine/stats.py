"""Counters over the event stream, shaped like `kvm_stat`'s table, and lookup cost tallies.

`kvm_stat` (tools/kvm/kvm_stat, docs/kvm.md §10) shows one row per event: Event,
Total, %Total and CurAvg/s (the change since the previous refresh divided by the
interval), and `-f REGEX` / the `f` key keeps only the events whose name matches.  The
engine has no clock: the caller passes the time of each refresh, so the same counters
serve a live run (wall-clock seconds) and a replay (trace timestamps).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CounterRow:
    """One row of the kvm_stat table: an event's total, its share and its rate."""

    event: str
    total: int
    percent: float  # of the total over the rows shown, as kvm_stat computes %Total
    rate: float  # CurAvg/s since the previous refresh


class EventCounters:
    """Totals per event name, with rates sampled at refresh times."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = {}
        self._previous: dict[str, int] = {}
        self._previous_time: float | None = None
        self._rates: dict[str, float] = {}

    def add(self, name: str, count: int = 1) -> None:
        self.totals[name] = self.totals.get(name, 0) + count

    def refresh(self, now: float) -> None:
        """Take a sample: CurAvg/s becomes the change since the previous refresh."""
        if self._previous_time is not None and now > self._previous_time:
            interval = now - self._previous_time
            self._rates = {
                name: (total - self._previous.get(name, 0)) / interval
                for name, total in self.totals.items()
            }
        self._previous = dict(self.totals)
        self._previous_time = now

    def rows(self, pattern: re.Pattern[str] | None = None) -> list[CounterRow]:
        """Rows sorted by total (then name), filtered by `pattern` as kvm_stat's -f."""
        names = [n for n in self.totals if pattern is None or pattern.search(n)]
        shown = sum(self.totals[n] for n in names) or 1
        names.sort(key=lambda n: (-self.totals[n], n))
        return [
            CounterRow(n, self.totals[n], 100.0 * self.totals[n] / shown, self._rates.get(n, 0.0))
            for n in names
        ]

    def reset(self) -> None:
        self.totals.clear()
        self._previous.clear()
        self._rates.clear()
        self._previous_time = None


def compile_filter(text: str) -> re.Pattern[str] | None:
    """kvm_stat's filter: empty means everything; a bad regex raises ValueError."""
    if not text:
        return None
    try:
        return re.compile(text)
    except re.error as err:
        raise ValueError(f"bad regular expression {text!r}: {err}") from None


@dataclass(slots=True)
class LookupCost:
    """What one strategy paid on a stream of lookups (the memslot-search thread's
    measure: slots looked at).

    `bare` counts the structure alone (every lookup searches); `cached` puts the caches
    in front, counting each cache slot checked as one slot looked at, and the structure
    only when every cache missed.
    """

    strategy: str
    lookups: int = 0
    bare: int = 0
    cached: int = 0
    worst: int = 0
    misses: int = 0  # lookups that found no slot (MMIO)
    miss_visits: int = 0

    def add(self, visits: int, cache_checks: int, cache_hit: bool, found: bool) -> None:
        self.lookups += 1
        self.bare += visits
        self.cached += cache_checks + (0 if cache_hit else visits)
        self.worst = max(self.worst, visits)
        if not found:
            self.misses += 1
            self.miss_visits += visits

    @property
    def bare_mean(self) -> float:
        return self.bare / self.lookups if self.lookups else 0.0

    @property
    def cached_mean(self) -> float:
        return self.cached / self.lookups if self.lookups else 0.0

    @property
    def miss_mean(self) -> float:
        return self.miss_visits / self.misses if self.misses else 0.0
