"""The scenario caption: what to look at now and why, above a screen's own widgets.

Compact, as the panels below it need the rows: a titled rule on top (the scenario, the
step, and the keys when they fit) and the text under it, with no bottom border.  Up to
six lines of text; on a short terminal (80×24, where a caption wraps onto up to nine)
five, so that the panels it talks about keep rows to show it in.  A caption longer than
its lines ends the last one with "… C: more", and `C` shows it whole (and `C` again
gives the rows back to the panels)."""

from __future__ import annotations

from textual.content import Content
from textual.css.scalar import Unit
from textual.markup import escape
from textual.widgets import Static

from .fit import fit_title, show_title

MORE = " … C: more"


class Caption(Static):
    """Hidden unless a scenario runs on this screen (`-shown`); `-whole`: every line."""

    DEFAULT_CSS = """
    Caption { display: none; height: auto; max-height: 7; padding: 0 1;
        border: none; border-top: round $accent; border-title-color: $accent;
        border-title-style: bold; background: $surface; color: $text; }
    Caption.-shown { display: block; }
    Caption.-whole { max-height: 100%; }
    """

    _titles: tuple[str, ...] = ()
    _needs: tuple[int, int] = (0, 0)  # the terminal the scenario is drawn for
    _text = ""
    _fitted: tuple[int, int] = (0, 0)  # (width, lines) the text shown was cut for

    def show_step(
        self, title: str, text: str, *hints: str, needs: tuple[int, int] = (0, 0)
    ) -> None:
        """Plain text: captions name kernel code (`sp->gfn`, `rmap[i]`), never markup.
        The title carries the first of `hints` (fullest first) that fits beside it; on
        a terminal smaller than `needs` (columns, rows), first the size the scenario is
        drawn for ("needs 120×40"), before the scenario's name if need be."""
        self._titles = (*(f"{title} · {hint}" for hint in hints), title)
        self._needs = needs
        self._fit_title()
        self._text = text
        self._fitted = (0, 0)
        self._fit_text()
        self.add_class("-shown")

    @property
    def cut(self) -> bool:
        """Whether lines of the caption are left out (`C` shows them)."""
        return self._shown != self._text

    _shown = ""

    def toggle_whole(self) -> None:
        self.toggle_class("-whole")
        self._fitted = (0, 0)
        self._fit_text()

    def on_resize(self) -> None:
        self._fit_title()
        self._fit_text()

    def notify_style_update(self) -> None:
        super().notify_style_update()  # a taller or shorter terminal: another max-height
        if self._text:
            self.call_after_refresh(self._fit_title)
            self.call_after_refresh(self._fit_text)

    @property
    def too_small(self) -> bool:
        """Whether the terminal is smaller than the scenario is drawn for."""
        width, height = self._needs
        return self.app.size.width < width or self.app.size.height < height

    def _fit_title(self) -> None:
        titles = self._titles
        if titles and self.too_small:
            need = "needs {}×{}".format(*self._needs)
            step = titles[-1].rsplit(" · ", 1)[-1]  # "step 2/6"
            titles = (*(f"{t} · {need}" for t in titles), f"{step} · {need}")
        if titles:
            width = self.outer_size.width or self.app.size.width
            show_title(self, escape(fit_title(titles, width)))

    def _room(self) -> tuple[int, int]:
        """The text's width and the lines it may take (max-height less the rule)."""
        width = (self.outer_size.width or self.app.size.width) - 2  # the padding
        limit = self.styles.max_height
        if self.has_class("-whole") or limit is None or limit.unit is not Unit.CELLS:
            return width, 0
        return width, max(1, int(limit.value) - 1)

    def _fit_text(self) -> None:
        """The whole text, or its first lines with the last ending in MORE."""
        width, lines = self._room()
        if (width, lines) == self._fitted or width <= len(MORE):
            return
        self._fitted = (width, lines)
        wrapped = [str(line).rstrip() for line in Content(self._text).wrap(width)]
        shown = self._text
        if lines and len(wrapped) > lines:
            last = wrapped[lines - 1]
            while last and len(last) + len(MORE) > width:
                last = last[: last.rfind(" ")] if " " in last else last[: width - len(MORE)]
            shown = "\n".join([*wrapped[: lines - 1], last.rstrip(" ,;:") + MORE])
        self._shown = shown
        self.update(Content(shown))
