"""One line saying what the lookup on screen is doing, in words."""

from __future__ import annotations

from rich.text import Text

from engine.constants import PAGE_SHIFT

from .highlight import Highlight
from .panel import TextPanel


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
