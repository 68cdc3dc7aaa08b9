"""The running cost of every lookup strategy on the same gfn stream (seed 000's argument).

Slots (or tree nodes) looked at per lookup: `bare` is the structure alone, `cached` puts
the last_used_slot caches in front (a cache check counts as one slot looked at), `miss`
is the mean over lookups that found nothing (MMIO), `worst` the longest single search.
The current strategy is marked; the cheapest `cached` figure is bold.
"""

from __future__ import annotations

from rich.text import Text

from engine.stats import LookupCost

from .panel import TextPanel

HEADER = f"  {'strategy':<12}{'bare':>9}{'cached':>9}{'miss':>9}{'worst':>7}"


def cost_table(costs: dict[str, LookupCost], current: str) -> Text:
    """Fixed-width columns as plain text: a Rich Table costs milliseconds a frame."""
    text = Text(HEADER + "\n", style="bold", no_wrap=True, overflow="crop")
    best = min((c.cached_mean for c in costs.values() if c.lookups), default=None)
    for name, cost in costs.items():
        mark = "▶ " if name == current else "  "
        row_style = "bold reverse" if name == current else ""
        if not cost.lookups:
            text.append(f"{mark}{name:<12}{'-':>9}{'-':>9}{'-':>9}{'-':>7}\n", style=row_style)
            continue
        miss = f"{cost.miss_mean:.1f}" if cost.misses else "-"
        text.append(f"{mark}{name:<12}{cost.bare_mean:>9.2f}", style=row_style)
        cheapest = best is not None and cost.cached_mean == best
        text.append(
            f"{cost.cached_mean:>9.2f}",
            style=f"{row_style} bold".strip() if cheapest else row_style,
        )
        text.append(f"{miss:>9}{cost.worst:>7}\n", style=row_style)
    text.rstrip()
    return text


class CostPanel(TextPanel):
    DEFAULT_CSS = """
    CostPanel { height: 8; padding: 0 1; }
    """

    def update_costs(self, costs: dict[str, LookupCost], current: str) -> None:
        self.show_content(cost_table(costs, current))
