"""What the structure drawing highlights: the lookup in progress, revealed probe by probe."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mmuscope.engine.lookup.base import HIT, LookupTrace, Probe
from mmuscope.engine.memslots.memslot import MemorySlot

# Node states, in the order a lookup reaches them; each is a component class / theme colour.
IDLE, PATH, COMPARE, HIT_STATE, MISS, CACHE_HIT = (
    "idle",
    "path",
    "compare",
    "hit",
    "miss",
    "cache-hit",
)


@dataclass(frozen=True, slots=True)
class Highlight:
    """A lookup as the drawing shows it.

    `probes` are the structure's probes in order, or None for a linear scan shown from its
    length alone (`visits` entries from position 0: the 2011 array and the size-sorted
    one scan a prefix).  `shown` of the `steps` are revealed: cache checks first, then
    probes; the last step reveals the verdict.
    """

    gfn: int
    probes: tuple[Probe, ...] | None
    visits: int
    slot: MemorySlot | None
    cache: str  # the cache that held the slot ("vcpu" or "vm"), or "" when all missed
    shown: int

    @classmethod
    def from_trace(cls, trace: LookupTrace) -> Highlight:
        """Every probe of `trace`, all revealed."""
        highlight = cls(trace.gfn, trace.probes, len(trace.probes), trace.slot, "", 0)
        return replace(highlight, cache=cache_that_hit(trace), shown=highlight.steps)

    @classmethod
    def from_scan(cls, trace: LookupTrace, visits: int) -> Highlight:
        """A prefix scan of `visits` entries (or a cache hit), all revealed."""
        highlight = cls(trace.gfn, None, visits, trace.slot, cache_that_hit(trace), 0)
        return replace(highlight, shown=highlight.steps)

    @property
    def cache_hit(self) -> bool:
        return bool(self.cache)

    @property
    def steps(self) -> int:
        return 1 if self.cache_hit else max(self.visits, 1)

    @property
    def done(self) -> bool:
        return self.shown >= self.steps

    def with_shown(self, shown: int) -> Highlight:
        return replace(self, shown=max(0, min(shown, self.steps)))

    def state_at(self, k: int) -> str | None:
        """State of the k-th probe (0-based), or None when not revealed yet."""
        if self.cache_hit or k >= self.shown:
            return None
        last = k == self.shown - 1
        if not last:
            return PATH
        if not self.done:
            return COMPARE
        if self.probes is not None and self.probes and self.probes[k].outcome == HIT:
            return HIT_STATE
        if self.probes is None and self.slot is not None:
            return HIT_STATE
        return MISS

    def verdict(self) -> str:
        if not self.done:
            return f"comparing ({self.shown}/{self.steps})"
        if self.cache_hit:
            holder = "vcpu" if self.cache == "vcpu" else "slots"
            return f"{holder}->last_used_slot hit"
        return "hit" if self.slot is not None else "miss: no slot (MMIO)"


def cache_that_hit(trace: LookupTrace) -> str:
    return next((c.cache for c in trace.cache_probes if c.hit), "")
