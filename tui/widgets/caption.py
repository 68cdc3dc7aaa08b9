"""The scenario caption: what to look at now and why, above a screen's own widgets."""

from __future__ import annotations

from textual.content import Content
from textual.markup import escape
from textual.widgets import Static


class Caption(Static):
    """Hidden unless a scenario runs on this screen (`-shown`)."""

    DEFAULT_CSS = """
    Caption { display: none; height: auto; max-height: 8; padding: 0 1;
        border: round $accent; border-title-color: $accent; border-title-style: bold;
        border-subtitle-color: $text-muted; background: $surface; color: $text; }
    Caption.-shown { display: block; }
    """

    def show_step(self, title: str, text: str, hint: str) -> None:
        """Plain text: captions name kernel code (`sp->gfn`, `rmap[i]`), never markup."""
        self.border_title = escape(title)
        self.border_subtitle = escape(hint)
        self.update(Content(text))
        self.add_class("-shown")
