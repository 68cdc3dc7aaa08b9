"""What each number of a bench table is, the model's band around a predicted number, and
the verdict against the thread's (docs/architecture.md §3.2, docs/bench.md).

Every row of a table with a thread's numbers has a `role`:
- `input`: the thread's number is taken as it is (a "before" time the model changes);
- `fitted`: one of the model's parameters was set so that this row matches the thread
  (at most one such parameter a table, named in the table with its row);
- `predicted`: everything else — the model's number, out of sample, with its error in %.

A predicted number's band combines three stated sources, and names them:
(a) the thread's own measured spread, where it gives one (kernbench's σ, rmap_fork's ±%);
(b) the model's spread over at least five random seeds (`SEEDS`), where it draws any;
(c) the model at the ends of its parameters' ranges, each range with its source in
    docs/bench.md (engine/costs.py): closed-form models at every corner, simulations at
    each level.
The noise range is the model's lowest to highest result over the seeds, widened by (a)
on each side (`noise` prints it as one half-width); the band runs from the lowest of (c)
and the noise range to the highest.

The verdict, computed and never typed, compares the model's central value with the
thread's number — on the effect (the change from the row's `base`: the input the thread
changed from, ratio 1, or 0 for an absolute number):
- `within noise`: the thread's number lies in the noise range, (a)+(b);
- `within 25 %`: the model's effect is within 25 % of the thread's;
- `direction only`: the same sign, within a factor of 10;
- `not reproduced`: otherwise.
Only the first two are green.  The parameter ranges (c) never make a verdict green: they
say how far the model could move, and the band's width (`band_x`: the largest effect in
the band over the smallest) is printed beside it.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..costs import COSTS, LEVELS
from ..threads import THREADS

INPUT, FITTED, PREDICTED = "input", "fitted", "predicted"
ROLES = (INPUT, FITTED, PREDICTED)
WITHIN_NOISE, WITHIN_25 = "within noise", "within 25 %"
DIRECTION_ONLY, NOT_REPRODUCED = "direction only", "not reproduced"
VERDICTS = (WITHIN_NOISE, WITHIN_25, DIRECTION_ONLY, NOT_REPRODUCED)
GREEN = (WITHIN_NOISE, WITHIN_25)
TOLERANCE = 0.25  # `within 25 %`
ORDER_FACTOR = 10.0  # `direction only`: within a factor of 10
SEEDS = (1, 2, 3, 4, 5)  # the random seeds every seeded model is run with
BAND_COLUMNS = ["low", "central", "high", "noise", "error_pct", "verdict", "band_x", "sources"]

Values = Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Band:
    """The model's central value, the ends of its parameter ranges (c), its lowest and
    highest result over the seeds (b), the thread's spread (a, a half-width), and the
    sources of each."""

    central: float
    low: float  # the smallest result over the parameter ranges (c)
    high: float  # the largest
    base: float = 0.0  # what the effect is measured from
    seed_low: float | None = None  # (b): None for a model without a random seed
    seed_high: float | None = None
    thread_noise: float = 0.0  # (a)
    sources: tuple[str, ...] = ()

    @property
    def noise_range(self) -> tuple[float, float]:
        """Where the thread's number is `within noise`: the seeds' range widened by the
        thread's own spread."""
        lo = self.central if self.seed_low is None else min(self.seed_low, self.central)
        hi = self.central if self.seed_high is None else max(self.seed_high, self.central)
        return lo - self.thread_noise, hi + self.thread_noise

    @property
    def noise(self) -> float:
        """(a) + (b) as one half-width, for the table."""
        lo, hi = self.noise_range
        return (hi - lo) / 2

    @property
    def lo(self) -> float:
        """The band's lower end: the lowest of (c) and the noise range."""
        return min(self.low, self.noise_range[0])

    @property
    def hi(self) -> float:
        return max(self.high, self.noise_range[1])

    @property
    def factor(self) -> float:
        """How many times the band's largest effect is its smallest (inf when the band
        holds effects of both signs or none)."""
        lo, hi = self.lo - self.base, self.hi - self.base
        if lo == hi:
            return 1.0
        if lo * hi <= 0:
            return float("inf")
        small, big = sorted((abs(lo), abs(hi)))
        return big / small

    def error(self, measured: float) -> float | None:
        """How far the model's effect is from the thread's, as a fraction of the
        thread's: -0.5 is a change half the thread's, +1.0 twice it, -2.0 the opposite
        way (None when the thread's number is its base: no effect to compare)."""
        theirs = measured - self.base
        if theirs == 0:
            return None
        return (self.central - self.base) / theirs - 1

    def verdict(self, measured: float) -> str:
        lo, hi = self.noise_range
        if lo <= measured <= hi:
            return WITHIN_NOISE
        error = self.error(measured)
        if error is not None and abs(error) <= TOLERANCE:
            return WITHIN_25
        model, theirs = self.central - self.base, measured - self.base
        if model * theirs > 0 and 1 / ORDER_FACTOR <= model / theirs <= ORDER_FACTOR:
            return DIRECTION_ONLY
        return NOT_REPRODUCED

    def cells(self, measured: float | None, decimals: int, role: str = PREDICTED) -> list[Cell]:
        """The table's BAND_COLUMNS cells, rounded to the thread's `decimals`: a fitted
        row shows its error but no verdict (it was matched on purpose)."""
        error = self.error(measured) if measured is not None else None
        factor = self.factor
        return [
            rounded(self.lo, decimals),
            rounded(self.central, decimals),
            rounded(self.hi, decimals),
            rounded(self.noise, decimals + 1),
            round(100 * error, 1) if error is not None else None,
            self.verdict(measured) if measured is not None and role == PREDICTED else None,
            round(factor, 2) if factor != float("inf") else None,
            "; ".join(self.sources),
        ]


Cell = int | float | str | bool | None
NO_BAND: list[Cell] = [None] * len(BAND_COLUMNS)


def rounded(value: float, decimals: int) -> int | float:
    """`value` at `decimals` places (an int when there are none: nanoseconds)."""
    return round(value) if decimals <= 0 else round(value, decimals)


# -- (c): parameter ranges ------------------------------------------------------------------


def values_at(names: Sequence[str], level: str) -> dict[str, float]:
    return {name: COSTS[name].at(level) for name in names}


def corners(names: Sequence[str]) -> list[dict[str, float]]:
    """Every combination of the named costs at their low or high (exact ones once)."""
    choices = [
        (COSTS[n].low, COSTS[n].high) if COSTS[n].uncertain else (COSTS[n].central,) for n in names
    ]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*choices)]


def param_range(model: Callable[[Values], float], names: Sequence[str]) -> tuple[float, float]:
    """(smallest, largest) of `model` at each level and every corner of `names`."""
    runs = [model(values_at(names, level)) for level in LEVELS]
    runs += [model(values) for values in corners(names)]
    return min(runs), max(runs)


def cost_sources(names: Iterable[str], how: str = "") -> str:
    """(c) named, as the model's own: the ranged parameters, each with its range and its
    source in docs/bench.md §5."""
    ranged = [n for n in names if COSTS[n].uncertain]
    if not ranged:
        return ""
    return f"(c) model: ranges of {', '.join(ranged)}{how} (docs/bench.md §5)"


# -- (a): the thread's own spread -------------------------------------------------------------


def thread_spread(thread_id: str, spread: str) -> str:
    """(a) named: the spread the thread itself measured, cited by its short name
    (docs/threads.md)."""
    return f"(a) {THREADS[thread_id].name}: {spread}"


def no_thread_spread(thread_id: str, why: str = "single runs") -> str:
    """(a) absent: the thread gives no spread for this number, and says why."""
    return f"(a) none: {THREADS[thread_id].name} gives {why}"


# -- (b): seeds -------------------------------------------------------------------------------


def seed_spread(results: Sequence[float]) -> tuple[float, float]:
    """(mean, half-range) of one number over the seeds."""
    return statistics.fmean(results), (max(results) - min(results)) / 2


def seeds_source(results: Sequence[float], unit: str = "", how: str = "") -> str:
    """(b) named, as the model's own: how many seeds, the half-range, how they were run."""
    half = seed_spread(results)[1]
    where = f", {how}" if how else ""
    return f"(b) model: {len(results)} seeds ±{fmt_plain(half)}{unit}{where}"


NO_SEED = "(b) model: deterministic, no seed to vary"


def fmt_plain(value: float) -> str:
    """A short number for a source note (never an exponent)."""
    if abs(value) < 1e-9:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 0.001:
        return f"{value:.3g}"
    return f"{value:.6f}".rstrip("0").rstrip(".")


def band_of(
    model: Callable[[Values], float],
    names: Sequence[str],
    base: float = 0.0,
    *,
    seeds: Sequence[float] = (),
    thread_noise: float = 0.0,
    sources: Sequence[str] = (),
) -> Band:
    """A closed-form model's band: central at the central values, (c) over every corner
    of `names`, (b) the model's results over the seeds (none: no random seed), (a) the
    thread's spread."""
    low, high = param_range(model, names)
    central = model(values_at(names, "central"))
    named = [s for s in (*sources, cost_sources(names)) if s]
    seed_low, seed_high = (min(seeds), max(seeds)) if seeds else (None, None)
    return Band(central, low, high, base, seed_low, seed_high, thread_noise, tuple(named))


def worst(verdicts: Sequence[str | None]) -> str | None:
    """The worst verdict of a table's rows (None when no row has one)."""
    present = [v for v in verdicts if v is not None]
    return max(present, key=VERDICTS.index) if present else None
