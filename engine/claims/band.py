"""A modelled time with its uncertainty band, and the verdict against a thread's number
(docs/architecture.md §3.2).

A model is computed at its estimates' low, central and high values (engine/costs.py);
closed-form models are also computed at every corner of their estimates (each estimate
at its low or its high), because two estimates can pull the result in opposite
directions and the three all-low / all-high runs would then understate the band.  The
band is the smallest and largest result.

The verdict, computed and never typed:
- `in band`: the thread's number lies inside [low, high];
- `direction only`: outside, but the model's effect (its change from the `base` the thread
  changed from: the "before" time, ratio 1, or 0) has the thread's sign and the same order
  of magnitude (within a factor of 10);
- `not reproduced`: otherwise.
The band's width is judged on the effect too (a time of 8.4 s that a patch shortens by
0.6 s is judged on the 0.6 s): a band whose effect spans more than a factor of 3 says
the model has not understood the mechanism, and the tables report it (`wide`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..costs import COSTS, LEVELS

IN_BAND, DIRECTION_ONLY, NOT_REPRODUCED = "in band", "direction only", "not reproduced"
VERDICTS = (IN_BAND, DIRECTION_ONLY, NOT_REPRODUCED)
WIDE_FACTOR = 3.0
ORDER_FACTOR = 10.0
BAND_COLUMNS = ["low", "central", "high", "verdict", "band_x", "wide"]

Values = Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Band:
    low: float
    central: float
    high: float
    base: float = 0.0  # what the effect is measured from

    @classmethod
    def of(cls, results: Sequence[float], central: float, base: float = 0.0) -> Band:
        return cls(min(*results, central), central, max(*results, central), base)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    @property
    def factor(self) -> float:
        """How many times the largest effect in the band is the smallest (inf when the
        band holds effects of both signs or none)."""
        lo, hi = self.low - self.base, self.high - self.base
        if lo == hi:
            return 1.0
        if lo * hi <= 0:
            return float("inf")
        small, big = sorted((abs(lo), abs(hi)))
        return big / small

    @property
    def wide(self) -> bool:
        return self.factor > WIDE_FACTOR

    def verdict(self, measured: float) -> str:
        """The verdict against the thread's number `measured`."""
        if self.contains(measured):
            return IN_BAND
        model, measured = self.central - self.base, measured - self.base
        if model * measured > 0 and 1 / ORDER_FACTOR <= model / measured <= ORDER_FACTOR:
            return DIRECTION_ONLY
        return NOT_REPRODUCED

    def cells(self, measured: float | None, digits: int = 4) -> list[float | str | bool | None]:
        """The table's BAND_COLUMNS cells: `low, central, high, verdict` (None without the
        thread's number `measured`), `band_x` (the effect's spread, None when it changes
        sign) and `wide`."""
        factor = self.factor
        return [
            _round(self.low, digits),
            _round(self.central, digits),
            _round(self.high, digits),
            self.verdict(measured) if measured is not None else None,
            round(factor, 2) if factor != float("inf") else None,
            self.wide,
        ]


def _round(value: float, digits: int) -> float:
    """`digits` significant digits (times in ns and ratios alike stay readable)."""
    if value == 0:
        return 0.0
    return float(f"{value:.{digits}g}")


NO_BAND: list[float | str | bool | None] = [None] * len(BAND_COLUMNS)


def values_at(names: Sequence[str], level: str) -> dict[str, float]:
    return {name: COSTS[name].at(level) for name in names}


def corners(names: Sequence[str]) -> list[dict[str, float]]:
    """Every combination of the named costs at their low or high (exact ones once)."""
    choices = [
        (COSTS[n].low, COSTS[n].high) if COSTS[n].uncertain else (COSTS[n].central,) for n in names
    ]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*choices)]


def band_of(model: Callable[[Values], float], names: Sequence[str], base: float = 0.0) -> Band:
    """`model` at the central values, at each level and at every corner of `names`."""
    runs = [model(values_at(names, level)) for level in LEVELS]
    runs += [model(values) for values in corners(names)]
    return Band.of(runs, model(values_at(names, "central")), base)


def band_of_levels(results: Mapping[str, float], base: float = 0.0) -> Band:
    """A band from one result per level (models too slow for corners: the simulations)."""
    return Band.of([results[level] for level in LEVELS], results["central"], base)


def worst(verdicts: Sequence[str | None]) -> str | None:
    """The worst verdict of a table's rows (None when no row has one)."""
    present = [v for v in verdicts if v is not None]
    return max(present, key=VERDICTS.index) if present else None
