"""One bench table per claim of a thread (`mmuscope bench`, docs/architecture.md §3.2).

A `ClaimTable` is what `mmuscope bench --json` prints under its name:
`{"columns": [...], "rows": [[...], ...], "thread": THREAD_ID, "seed": THREAD_ID,
"claim": str, "checks": {SUB_CLAIM: bool}, "verdict": str, "reproduced": bool,
"fitted": null | {"parameter", "value", "unit", "row"}, "decimals": {...}, "note": str,
...}` (THREAD_ID as in engine/threads.py, e.g. "pv-flush"; "seed" is the key's older
name, kept with the same value).

Every row of a table with a thread's numbers has a `role` column (engine/claims/band.py:
`input`, `fitted`, `predicted`).  `checks` holds every sub-claim the table states, each
judged from the rows; a table with a thread's time also has the band columns
(`low, central, high, noise, error_pct, verdict, band_x, sources`) on the rows that carry
one.  The headline is computed, never typed: `not reproduced` when a sub-claim fails or a
predicted row's verdict says so, else the worst verdict of the predicted rows (`direction
only`, `within 25 %`, `within noise`), or `holds` for a table of directions only.
`reproduced` is the headline being green: every predicted row within noise or within
25 % and every sub-claim holding.  At most one parameter is fitted (`fitted` names it and
the row it was fitted on); `note` says where the model disagrees.

`decimals` gives, for a column, the places its numbers print with — one number for the
column or one per row (None: as the number comes): the thread's own precision, so that
11002.50 prints as the thread printed it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..threads import THREADS
from .band import GREEN, NOT_REPRODUCED, PREDICTED, ROLES, worst

Cell = int | float | str | bool | None
HOLDS = "holds"
ROLE = "role"


def fmt_number(value: float | int, places: int | None = None) -> str:
    """A number whole, for people: thousands separated, `places` decimals when given (the
    thread's precision: 11002.50), else as many as it has; never an exponent."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if places is not None:
        return f"{value:,.{places}f}"
    if value.is_integer():
        return f"{int(value):,}"
    text = repr(value)
    if "e" in text or "E" in text:
        text = f"{value:.12f}".rstrip("0").rstrip(".")
    sign = "-" if text.startswith("-") else ""
    whole, _, frac = text.lstrip("-").partition(".")
    return f"{sign}{int(whole):,}" + (f".{frac}" if frac else "")


def fmt_cell(cell: Cell, places: int | None = None) -> str:
    """A table cell for people: — for none or an empty text, yes/no, a number whole, a
    text as it is."""
    if cell is None or cell == "":
        return "—"
    if isinstance(cell, bool):
        return "yes" if cell else "no"
    if isinstance(cell, int | float):
        return fmt_number(cell, places)
    return cell


@dataclass(frozen=True, slots=True)
class Fitted:
    """The one parameter a table fitted, its value and the row it was fitted on."""

    parameter: str
    value: float
    unit: str
    row: str  # the row, as the table labels it

    def text(self) -> str:
        return f"{self.parameter} = {self.value:g} {self.unit}, fitted on {self.row}"


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
    fitted: Fitted | None = None
    decimals: dict[str, int | list[int | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.thread not in THREADS:
            raise ValueError(f"{self.name}: {self.thread!r} is not a thread's id")
        if not self.checks and "verdict" not in self.columns:
            raise ValueError(f"{self.name}: a claim table states at least one sub-claim")
        if ROLE in self.columns:
            bad = {r for r in self.column(ROLE) if r not in ROLES}
            if bad:
                raise ValueError(f"{self.name}: rows with role {sorted(map(str, bad))}")
            fitted_rows = sum(1 for r in self.column(ROLE) if r == "fitted")
            if fitted_rows and self.fitted is None:
                raise ValueError(f"{self.name}: a fitted row but no fitted parameter named")

    # -- the headline, computed ------------------------------------------------------

    def predicted_verdicts(self) -> list[str]:
        """The verdicts of the rows that predict a thread's number."""
        if "verdict" not in self.columns:
            return []
        roles = self.column(ROLE) if ROLE in self.columns else [PREDICTED] * len(self.rows)
        pairs = zip(roles, self.column("verdict"), strict=True)
        return [str(v) for role, v in pairs if role == PREDICTED and v is not None]

    @property
    def verdict(self) -> str:
        times = worst(self.predicted_verdicts())
        if not all(self.checks.values()) or times == NOT_REPRODUCED:
            return NOT_REPRODUCED
        if times is not None:
            return times
        return HOLDS

    @property
    def reproduced(self) -> bool:
        return self.verdict in (*GREEN, HOLDS)

    @property
    def failed_checks(self) -> list[str]:
        return [name for name, held in self.checks.items() if not held]

    def headline(self) -> str:
        """The verdict, with what pulls it down and what was fitted."""
        parts = [self.verdict]
        failed = self.failed_checks
        if failed:
            parts.append(f"{len(failed)} of {len(self.checks)} sub-claims fail")
        verdicts = self.predicted_verdicts()
        if verdicts:
            green = sum(1 for v in verdicts if v in GREEN)
            parts.append(f"{green} of {len(verdicts)} predictions green")
        if self.fitted is not None:
            parts.append(f"fitted: {self.fitted.parameter} on {self.fitted.row}")
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
            "fitted": None
            if self.fitted is None
            else {
                "parameter": self.fitted.parameter,
                "value": self.fitted.value,
                "unit": self.fitted.unit,
                "row": self.fitted.row,
            },
            "decimals": dict(self.decimals),
        }
        if self.note:
            out["note"] = self.note
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> ClaimTable:
        """The table back from its JSON (the headline is recomputed, not read)."""
        known = {"columns", "rows", "thread", "seed", "claim", "checks", "verdict"}
        known |= {"reproduced", "note", "fitted", "decimals"}
        fitted = data.get("fitted")
        return cls(
            name,
            data["columns"],
            data["rows"],
            data["thread"],
            data["claim"],
            data["checks"],
            data.get("note", ""),
            {k: v for k, v in data.items() if k not in known},
            Fitted(**fitted) if fitted else None,
            dict(data.get("decimals", {})),
        )

    def column(self, name: str) -> list[Cell]:
        index = self.columns.index(name)
        return [row[index] for row in self.rows]

    def places(self, column: str, row: int) -> int | None:
        """The places `column`'s number in `row` prints with (None: as it comes)."""
        spec = self.decimals.get(column)
        if isinstance(spec, list):
            return spec[row] if row < len(spec) else None
        return spec
