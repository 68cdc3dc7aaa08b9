"""The running cost of every lookup strategy on the same gfn stream (seed 000's argument).

Slots (or tree nodes) looked at per lookup: `bare` is the structure alone, `cached` puts
the last_used_slot caches in front (a cache check counts as one slot looked at), `miss`
is the mean over lookups that found nothing (MMIO), `worst` the longest single search.
The current strategy is marked; the cheapest `cached` figure is bold.
"""

from __future__ import annotations

from rich import box
from rich.table import Table

from engine.stats import LookupCost

from .panel import TextPanel

COLUMNS = ("strategy", "bare", "cached", "miss", "worst")


def cost_table(costs: dict[str, LookupCost], current: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, expand=True, pad_edge=False, show_edge=False)
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "strategy" else "right")
    best = min((c.cached_mean for c in costs.values() if c.lookups), default=None)
    for name, cost in costs.items():
        mark = "▶ " if name == current else "  "
        row_style = "bold reverse" if name == current else ""
        if not cost.lookups:
            table.add_row(mark + name, "-", "-", "-", "-", style=row_style)
            continue
        cached = f"{cost.cached_mean:.2f}"
        if best is not None and cost.cached_mean == best:
            cached = f"[bold]{cached}[/]"
        table.add_row(
            mark + name,
            f"{cost.bare_mean:.2f}",
            cached,
            f"{cost.miss_mean:.1f}" if cost.misses else "-",
            str(cost.worst),
            style=row_style,
        )
    return table


class CostPanel(TextPanel):
    DEFAULT_CSS = """
    CostPanel { height: 9; padding: 0 1; }
    """

    def update_costs(self, costs: dict[str, LookupCost], current: str) -> None:
        self.show_content(cost_table(costs, current))
