"""The running cost of every lookup strategy on the same gfn stream (the memslot-search
thread's argument).

Slots (or tree nodes) looked at per lookup: `bare` is the structure alone, `cached` puts
the last_used_slot caches in front (a cache check counts as one slot looked at), `miss`
is the mean over lookups that found nothing (MMIO), `worst` the longest single search.
The current strategy is marked; the cheapest `cached` figure is bold.
"""

from __future__ import annotations

from mmuscope.engine.stats import LookupCost
from rich.text import Text

from .panel import TextPanel

NAME = 14  # strategy names ("wbtree-compact"); the row starts with a 2-column mark
# (heading, width) in the order they go when the panel is too narrow for all of them:
# the last first.  `cached` is the memslot-search thread's figure, `bare` what the caches
# save on it.
COLUMNS = (("cached", 8), ("bare", 8), ("miss", 8), ("worst", 6))
ORDER = ("bare", "cached", "miss", "worst")  # left to right


def fitting_columns(width: int) -> list[tuple[str, int]]:
    """The columns a row of `width` characters holds without wrapping."""
    kept = list(COLUMNS)
    while kept and 2 + NAME + sum(w for _, w in kept) > width:
        kept.pop()
    return sorted(kept, key=lambda column: ORDER.index(column[0]))


def cost_table(costs: dict[str, LookupCost], current: str, width: int = 48) -> Text:
    """Fixed-width columns as plain text (a Rich Table costs milliseconds a frame); rows
    never wrap: a narrow panel drops `worst`, then `miss`, then `bare`."""
    columns = fitting_columns(width)
    heading = "".join(f"{name:>{w}}" for name, w in columns)
    text = Text(f"  {'strategy':<{NAME}}{heading}\n", style="bold", no_wrap=True, overflow="crop")
    best = min((c.cached_mean for c in costs.values() if c.lookups), default=None)
    for name, cost in costs.items():
        mark = "▶ " if name == current else "  "
        row_style = "bold reverse" if name == current else ""
        text.append(f"{mark}{name:<{NAME}}", style=row_style)
        for column, w in columns:
            cell = _cell(cost, column) if cost.lookups else "-"
            cheapest = column == "cached" and cost.lookups and cost.cached_mean == best
            text.append(
                f"{cell:>{w}}", style=f"{row_style} bold".strip() if cheapest else row_style
            )
        text.append("\n")
    text.rstrip()
    return text


def _cell(cost: LookupCost, column: str) -> str:
    if column == "bare":
        return f"{cost.bare_mean:.2f}"
    if column == "cached":
        return f"{cost.cached_mean:.2f}"
    if column == "miss":
        return f"{cost.miss_mean:.1f}" if cost.misses else "-"
    return str(cost.worst)


class CostPanel(TextPanel):
    DEFAULT_CSS = """
    CostPanel { height: 9; padding: 0 1; text-wrap: nowrap; text-overflow: clip; }
    """

    shown: tuple[dict[str, LookupCost], str] | None = None

    def update_costs(self, costs: dict[str, LookupCost], current: str) -> None:
        self.shown = (costs, current)
        self.show_content(cost_table(costs, current, self.content_region.width or 48))

    def on_resize(self) -> None:
        if self.shown is not None:
            self.update_costs(*self.shown)  # the columns that fit the new width
