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
# All four, narrower (80 columns): figures of 3 or 4 characters.
COMPACT = (("cached", 7), ("bare", 5), ("miss", 5), ("worst", 6))
ORDER = ("bare", "cached", "miss", "worst")  # left to right


def fitting_columns(width: int) -> tuple[list[tuple[str, int]], bool]:
    """The columns a row of `width` characters holds without wrapping, and whether they
    are compact: every column at full width, or every one compact (the captions compare
    all four), or the full ones that fit."""
    kept, compact = list(COLUMNS), False
    if 2 + NAME + sum(w for _, w in COMPACT) <= width < 2 + NAME + sum(w for _, w in kept):
        kept, compact = list(COMPACT), True
    while kept and 2 + NAME + sum(w for _, w in kept) > width:
        kept.pop()
    return sorted(kept, key=lambda column: ORDER.index(column[0])), compact


def cost_table(costs: dict[str, LookupCost], current: str, width: int = 48) -> Text:
    """Fixed-width columns as plain text (a Rich Table costs milliseconds a frame); rows
    never wrap: a narrow panel makes its figures shorter, then drops `worst`, then
    `miss`, then `bare`."""
    columns, compact = fitting_columns(width)
    heading = "".join(f"{name:>{w}}" for name, w in columns)
    text = Text(f"  {'strategy':<{NAME}}{heading}\n", style="bold", no_wrap=True, overflow="crop")
    best = min((c.cached_mean for c in costs.values() if c.lookups), default=None)
    for name, cost in costs.items():
        mark = "▶ " if name == current else "  "
        row_style = "bold reverse" if name == current else ""
        text.append(f"{mark}{name:<{NAME}}", style=row_style)
        for column, w in columns:
            cell = _cell(cost, column, compact) if cost.lookups else "-"
            cheapest = column == "cached" and cost.lookups and cost.cached_mean == best
            text.append(
                f"{cell:>{w}}", style=f"{row_style} bold".strip() if cheapest else row_style
            )
        text.append("\n")
    text.rstrip()
    return text


def _cell(cost: LookupCost, column: str, compact: bool = False) -> str:
    if column == "worst":
        return str(cost.worst)
    if column == "miss" and not cost.misses:
        return "-"
    mean = {"bare": cost.bare_mean, "cached": cost.cached_mean, "miss": cost.miss_mean}[column]
    if compact:  # 3 or 4 characters: "512", "99.9", "4.0"
        return f"{mean:.0f}" if mean >= 99.95 else f"{mean:.1f}"
    return f"{mean:.1f}" if column == "miss" else f"{mean:.2f}"


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
