"""One bench table per claim of a seed thread (issue 5, `mmuscope bench`).

A `ClaimTable` is what `mmuscope bench --json` prints under its name:
`{"columns": [...], "rows": [[...], ...], "seed": SEED_FILE_NAME, "claim": str,
"reproduced": bool}`.  `reproduced` says whether the model shows the *direction* the
seed's numbers show; constants are never tuned to fit a number, and `note` says so when
the model disagrees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Cell = int | float | str | bool | None


@dataclass(frozen=True, slots=True)
class ClaimTable:
    name: str
    columns: list[str]
    rows: list[list[Cell]]
    seed: str  # the seed thread's file name, e.g. "001_8696687ca16d9e5e.txt"
    claim: str  # the claim in one sentence, quoting the thread
    reproduced: bool
    note: str = ""  # how the direction was judged, or why it was not reproduced
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "columns": list(self.columns),
            "rows": [list(row) for row in self.rows],
            "seed": self.seed,
            "claim": self.claim,
            "reproduced": self.reproduced,
        }
        if self.note:
            out["note"] = self.note
        out.update(self.extra)
        return out

    def column(self, name: str) -> list[Cell]:
        index = self.columns.index(name)
        return [row[index] for row in self.rows]
