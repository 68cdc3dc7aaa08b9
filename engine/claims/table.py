"""One bench table per claim of a thread (`mmuscope bench`, docs/architecture.md §3.2).

A `ClaimTable` is what `mmuscope bench --json` prints under its name:
`{"columns": [...], "rows": [[...], ...], "thread": THREAD_ID, "seed": THREAD_ID,
"claim": str, "checks": {SUB_CLAIM: bool}, "verdict": str, "reproduced": bool,
"wide_bands": int, ...}` (THREAD_ID as in engine/threads.py, e.g. "pv-flush"; "seed" is
the key's older name, kept with the same value).

`checks` holds every sub-claim the table states, each judged from the rows; a table with
a thread's time also has `low`, `central`, `high` and `verdict` columns
(engine/claims/band.py) on the rows that carry one.  The headline is computed from all of
them, never typed: `not reproduced` when a sub-claim fails or a time's verdict says so,
else `direction only` when a time lies outside its band, else `in band` (a table with
times) or `holds` (a table of directions only).  `reproduced` is that headline being `in
band` or `holds` with no band wider than a factor of 3 (`wide_bands` counts those).
Constants are never tuned to fit a number; `note` says where the model disagrees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..threads import THREADS
from .band import DIRECTION_ONLY, IN_BAND, NOT_REPRODUCED, worst

Cell = int | float | str | bool | None
HOLDS = "holds"
HEADLINES = (IN_BAND, HOLDS, DIRECTION_ONLY, NOT_REPRODUCED)


@dataclass(frozen=True, slots=True)
class ClaimTable:
    name: str
    columns: list[str]
    rows: list[list[Cell]]
    thread: str  # the id of the thread whose claim it measures (engine/threads.py)
    claim: str  # the claim in one sentence, quoting the thread
    checks: dict[str, bool]  # every sub-claim the table states, judged
    note: str = ""  # how each part was judged, and where the model disagrees
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.thread not in THREADS:
            raise ValueError(f"{self.name}: {self.thread!r} is not a thread's id")
        if not self.checks and "verdict" not in self.columns:
            raise ValueError(f"{self.name}: a claim table states at least one sub-claim")

    # -- the headline, computed ------------------------------------------------------

    def time_verdicts(self) -> list[str]:
        if "verdict" not in self.columns:
            return []
        return [str(v) for v in self.column("verdict") if v is not None]

    @property
    def wide_bands(self) -> int:
        """Bands wider than a factor of 3 on rows compared with a thread's number."""
        if "wide" not in self.columns or "verdict" not in self.columns:
            return 0
        pairs = zip(self.column("wide"), self.column("verdict"), strict=True)
        return sum(1 for wide, verdict in pairs if wide is True and verdict is not None)

    @property
    def verdict(self) -> str:
        times = worst(self.time_verdicts())
        if not all(self.checks.values()) or times == NOT_REPRODUCED:
            return NOT_REPRODUCED
        if times is not None:
            return times
        return HOLDS

    @property
    def reproduced(self) -> bool:
        return self.verdict in (IN_BAND, HOLDS) and not self.wide_bands

    @property
    def failed_checks(self) -> list[str]:
        return [name for name, held in self.checks.items() if not held]

    def headline(self) -> str:
        """`in band`, `holds`, `direction only` or `not reproduced`, with what pulls it down."""
        parts = [self.verdict]
        failed = self.failed_checks
        if failed:
            parts.append(f"{len(failed)} of {len(self.checks)} sub-claims fail")
        if self.wide_bands:
            parts.append(f"{self.wide_bands} band(s) wider than 3×")
        return " · ".join(parts)

    # -- output ----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "columns": list(self.columns),
            "rows": [list(row) for row in self.rows],
            "thread": self.thread,
            "seed": self.thread,
            "claim": self.claim,
            "checks": dict(self.checks),
            "verdict": self.verdict,
            "reproduced": self.reproduced,
            "wide_bands": self.wide_bands,
        }
        if self.note:
            out["note"] = self.note
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    def column(self, name: str) -> list[Cell]:
        index = self.columns.index(name)
        return [row[index] for row in self.rows]
