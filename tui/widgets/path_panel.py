"""The lookup on screen in words, probe by probe, as `mmuscope lookup` prints it."""

from __future__ import annotations

from collections.abc import Callable

from mmuscope.engine.lookup.base import CacheProbe
from mmuscope.engine.lookup.describe import describe_probe
from mmuscope.engine.memslots.memslot import MemorySlot
from rich.console import RenderableType
from rich.text import Text
from textual.geometry import Size

from .highlight import Highlight
from .panel import TextPanel
from .wrap import wrap_line, wrap_text, wrapped_height

MAX_LINES = 12


def cache_words(cache: CacheProbe) -> str:
    holder = "vcpu->last_used_slot" if cache.cache == "vcpu" else "slots->last_used_slot"
    held = f"slot {cache.slot.id}" if cache.slot is not None else "empty"
    note = f" ({cache.note})" if cache.note else ""
    return f"{holder}: {held}, {'hit' if cache.hit else 'miss'}{note}"


def first_rows(line: Text, width: int, rows: int) -> Text:
    """`line` wrapped to `width`, cut to its first `rows` rows, the last ending in "…"
    when rows were left out."""
    pieces = wrap_line(line, width)
    if len(pieces) <= rows:
        return wrap_text(line, width)
    kept = pieces[:rows]
    last = kept[-1]
    if width and last.cell_len >= width:
        last = last[: width - 1]
        last.rstrip()
    kept[-1] = last + Text("…")
    return Text("\n").join(kept)


class PathPanel(TextPanel):
    """Cache checks, then each revealed probe with its decision; long scans are elided.
    A probe's line wraps under its slot when the panel is narrow, and the earliest
    probes give way to keep the latest and the verdict in the panel; where even the
    latest does not fit (a short terminal), its wrapped rows end with "…"."""

    DEFAULT_CSS = """
    PathPanel { height: 10; padding: 0 1; border: round $panel;
        border-title-color: $text-muted; color: $foreground;
        text-wrap: nowrap; text-overflow: ellipsis; }
    """

    _shown: tuple[Highlight, tuple[CacheProbe, ...], Callable[[MemorySlot], str]] | None = None
    _laid_out_for = Size(0, 0)  # the content size `content` was laid out for

    def show(
        self,
        highlight: Highlight | None,
        caches: tuple[CacheProbe, ...],
        name_of: Callable[[MemorySlot], str],
    ) -> None:
        self._shown = None if highlight is None else (highlight, caches, name_of)
        self._laid_out_for = self.content_size
        self.show_content(self._lay_out())  # repaints the rows that change

    def render(self) -> RenderableType:
        if self._laid_out_for != self.content_size:  # resized: laid out again
            self._laid_out_for = self.content_size
            self.content = self._lay_out()
        return self.content

    def _lay_out(self) -> Text:
        """The lookup laid out for the panel's size now (it wraps and elides by width)."""
        if self._shown is None:
            return Text("")
        highlight, caches, name_of = self._shown
        width = self.content_size.width
        text = Text()
        for cache in caches:
            text.append_text(wrap_text(Text(f"   {cache_words(cache)}\n", style="italic"), width))
        verdict = wrap_text(Text(f"   {highlight.verdict()}", style="bold"), width)
        if not highlight.cache_hit:
            budget = self._line_budget() - text.plain.count("\n") - wrapped_height(verdict, width)
            for line in self._probe_lines(highlight, name_of, max(budget, 1), width):
                text.append_text(line)
                text.append("\n")
        text.append_text(verdict)
        return text

    def _line_budget(self) -> int:
        """Rows of text the panel shows (its height less the border)."""
        if self.content_size.height:
            return self.content_size.height
        height = self.styles.height
        return int(height.value) - 2 if height is not None and height.is_cells else MAX_LINES

    def _probe_lines(
        self, highlight: Highlight, name_of: Callable[[MemorySlot], str], budget: int, width: int
    ) -> list[Text]:
        """The latest probes that fit in `budget` rows once wrapped to `width`, after a
        row that counts the earlier ones."""
        shown = min(highlight.shown, highlight.visits)
        if highlight.probes is None:
            scanned = f"   scanned entries 0..{shown - 1} in order ({shown} of {highlight.visits})"
            return [wrap_text(Text(scanned), width)]
        lines: list[Text] = []
        rows = 0
        first = shown
        while first > 0:
            probe = highlight.probes[first - 1]
            plain = Text(f"{first:>3} {describe_probe(probe, name_of, 14)}")
            line = wrap_text(plain, width)
            height = wrapped_height(line, width)
            earlier = 1 if first > 1 else 0  # the row saying how many are left out
            if rows + height + earlier > budget:
                if lines:
                    break
                height = max(budget - earlier, 1)  # the latest probe, cut to what is left
                line = first_rows(plain, width, height)
            lines.insert(0, line)
            rows += height
            first -= 1
        if first:
            lines.insert(0, Text(f"   ... {first} earlier probes"))
        return lines
