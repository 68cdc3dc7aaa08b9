"""The scenario caption: what to look at now and why, above a screen's own widgets.

Compact, as the panels below it need the rows: a titled rule on top (the scenario, the
step, and the keys when they fit) and the text under it, with no bottom border.  Up to
six lines of text; at 80×24, where a caption wraps onto up to nine, it keeps them all
(the lecture matters more than the panels' last rows)."""

from __future__ import annotations

from textual.content import Content
from textual.markup import escape
from textual.widgets import Static

from .titles import fit_title


class Caption(Static):
    """Hidden unless a scenario runs on this screen (`-shown`)."""

    DEFAULT_CSS = """
    Caption { display: none; height: auto; max-height: 7; padding: 0 1;
        border: none; border-top: round $accent; border-title-color: $accent;
        border-title-style: bold; background: $surface; color: $text; }
    Caption.-shown { display: block; }
    """

    _titles: tuple[str, ...] = ()

    def show_step(self, title: str, text: str, *hints: str) -> None:
        """Plain text: captions name kernel code (`sp->gfn`, `rmap[i]`), never markup.
        The title carries the first of `hints` (fullest first) that fits beside it."""
        self._titles = (*(f"{title} · {hint}" for hint in hints), title)
        self._fit_title()
        self.update(Content(text))
        self.add_class("-shown")

    def on_resize(self) -> None:
        self._fit_title()

    def _fit_title(self) -> None:
        if self._titles:
            width = self.outer_size.width or self.app.size.width
            self.border_title = escape(fit_title(self._titles, width))
