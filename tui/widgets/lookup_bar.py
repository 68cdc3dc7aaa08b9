"""One line saying what the lookup on screen is doing, in words."""

from __future__ import annotations

from rich.text import Text

from engine.constants import PAGE_SHIFT

from .highlight import Highlight
from .panel import TextPanel


class LookupBar(TextPanel):
    DEFAULT_CSS = """
    LookupBar { height: 1; padding: 0 1; background: $panel; color: $foreground; }
    """

    def show(self, highlight: Highlight | None, vcpu: int, strategy: str, name: str) -> None:
        if highlight is None:
            self.show_content("no lookup yet: space plays, s steps, g looks up a gfn")
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
