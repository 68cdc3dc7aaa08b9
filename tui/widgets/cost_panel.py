"""The running cost of every lookup strategy on the same gfn stream (seed 000's argument).

Slots (or tree nodes) looked at per lookup: `bare` is the structure alone, `cached` puts
the last_used_slot caches in front (a cache check counts as one slot looked at), `miss`
is the mean over lookups that found nothing (MMIO), `worst` the longest single search.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from engine.lookup import STRATEGY_CLASSES
from engine.stats import LookupCost

COLUMNS = (("strategy", 13), ("bare", 8), ("cached", 8), ("miss", 8), ("worst", 6))


class CostPanel(DataTable[object]):
    DEFAULT_CSS = """
    CostPanel { height: auto; max-height: 9; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="none", show_cursor=False)

    def on_mount(self) -> None:
        for column, width in COLUMNS:
            self.add_column(column, key=column, width=width)
        for name in STRATEGY_CLASSES:
            self.add_row(name, "-", "-", "-", "-", key=name)

    def update_costs(self, costs: dict[str, LookupCost], current: str) -> None:
        best = min((c.cached_mean for c in costs.values() if c.lookups), default=None)
        for name, cost in costs.items():
            marker = "▶ " if name == current else "  "
            style = "bold reverse" if name == current else ""
            self.update_cell(name, "strategy", Text(marker + name, style=style))
            if not cost.lookups:
                continue
            cached = Text(f"{cost.cached_mean:8.2f}", justify="right")
            if best is not None and cost.cached_mean == best:
                cached.stylize("bold")
            self.update_cell(name, "bare", f"{cost.bare_mean:8.2f}")
            self.update_cell(name, "cached", cached)
            self.update_cell(name, "miss", f"{cost.miss_mean:8.1f}" if cost.misses else "       -")
            self.update_cell(name, "worst", f"{cost.worst:6d}")
