"""The lookup on screen in words, probe by probe, as `mmuscope lookup` prints it."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text

from engine.lookup.base import CacheProbe
from engine.lookup.describe import describe_probe
from engine.memslot import MemorySlot

from .highlight import Highlight
from .panel import TextPanel

MAX_LINES = 12


def cache_words(cache: CacheProbe) -> str:
    holder = "vcpu->last_used_slot" if cache.cache == "vcpu" else "slots->last_used_slot"
    held = f"slot {cache.slot.id}" if cache.slot is not None else "empty"
    note = f" ({cache.note})" if cache.note else ""
    return f"{holder}: {held}, {'hit' if cache.hit else 'miss'}{note}"


class PathPanel(TextPanel):
    """Cache checks, then each revealed probe with its decision; long scans are elided."""

    DEFAULT_CSS = """
    PathPanel { height: 10; padding: 0 1; border: round $panel;
        border-title-color: $text-muted; color: $foreground;
        text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show(
        self,
        highlight: Highlight | None,
        caches: tuple[CacheProbe, ...],
        name_of: Callable[[MemorySlot], str],
    ) -> None:
        if highlight is None:
            self.show_content("")
            return
        text = Text(no_wrap=True, overflow="ellipsis")
        for cache in caches:
            text.append(f"   {cache_words(cache)}\n", style="italic")
        if not highlight.cache_hit:
            budget = self._line_budget() - len(caches) - 1  # the verdict takes a line
            for line in self._probe_lines(highlight, name_of, max(budget, 1)):
                text.append(line + "\n")
        text.append(f"   {highlight.verdict()}", style="bold")
        self.show_content(text)

    def _line_budget(self) -> int:
        """Lines of text the panel shows (its height less the border)."""
        height = self.styles.height
        return int(height.value) - 2 if height is not None and height.is_cells else MAX_LINES

    def _probe_lines(
        self, highlight: Highlight, name_of: Callable[[MemorySlot], str], budget: int
    ) -> list[str]:
        shown = min(highlight.shown, highlight.visits)
        if highlight.probes is None:
            return [f"   scanned entries 0..{shown - 1} in order ({shown} of {highlight.visits})"]
        first = max(0, shown - budget + 1) if shown > budget else 0  # only what fits
        lines = [
            f"{k + 1:>3} {describe_probe(p, name_of, 14)}"
            for k, p in enumerate(highlight.probes[first:shown], start=first)
        ]
        if first:
            lines.insert(0, f"   ... {first} earlier probes")
        return lines
