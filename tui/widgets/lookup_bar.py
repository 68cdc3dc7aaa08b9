"""One line saying what the lookup (or the fault) on screen is doing, in words."""

from __future__ import annotations

from mmuscope.engine.memslots.constants import PAGE_SHIFT
from rich.text import Text
from textual.css.scalar import Unit

from .highlight import Highlight
from .panel import TextPanel
from .wrap import wrapped_height


class LookupBar(TextPanel):
    """Wraps onto a second row (and a third) where the panel is too narrow for it;
    below 120 columns two rows at most (the drawing below needs them more)."""

    DEFAULT_CSS = """
    LookupBar { height: auto; max-height: 3; padding: 0 1; background: $panel;
        color: $foreground; text-wrap: nowrap; }
    .-narrow LookupBar { max-height: 2; }
    """

    WRAP = True

    def show(self, highlight: Highlight | None, vcpu: int, strategy: str, name: str) -> None:
        if highlight is None:
            self.show_content(Text("no lookup yet: space plays, s steps, g looks up a gfn"))
            return
        text = Text()
        text.append(f"vcpu {vcpu} ", style="bold")
        text.append(f"gfn {highlight.gfn:#x} (gpa {highlight.gfn << PAGE_SHIFT:#x})  ")
        if not highlight.cache_hit:
            text.append(f"{strategy}: {highlight.shown}/{highlight.steps} visited")
        verdict = highlight.verdict()
        if highlight.done and highlight.slot is not None:
            verdict += f" → slot {highlight.slot.id}" + (f" {name}" if name else "")
        text.append(f"  {verdict}", style="bold")
        self.show_content(text)


class FaultBar(LookupBar):
    """The shadow-MMU screen's fault bar: the last VM exit in words, its parts joined by
    " · " (the exit and its `RET_PF_*`, then the fast path, the injected #PF, the dirty
    log pass).  Where they wrap onto more rows than its max-height, the last parts give
    way to " · …" (the first one always stays: a row is never cut inside a field)."""

    _words = ""

    def show_words(self, words: str) -> None:
        self._words = words
        self._fit()

    def on_resize(self) -> None:
        if self._words:
            self._fit()

    def _fit(self) -> None:
        width = self.content_size.width
        limit = self.styles.max_height
        rows = int(limit.value) if limit is not None and limit.unit is Unit.CELLS else 0
        parts = self._words.split(" · ")
        shown = self._words
        for count in range(len(parts) - 1, 0, -1):
            if not width or not rows or wrapped_height(Text(shown), width) <= rows:
                break
            shown = " · ".join(parts[:count]) + " · …"
        self.show_content(shown)
