"""The header: the screen's title and its state (the guest, the mode, `⏸ paused 4/s`).

Textual's header cuts what does not fit in one row with an ellipsis, and the part cut
is the play state at the end.  Here, at 120 columns and wider, the header takes a second
row instead and breaks between two of the state's `·`-separated parts, never inside one;
below that (80×24) it keeps its one row and Textual's ellipsis.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.content import Content
from textual.visual import VisualType
from textual.widgets import Header
from textual.widgets._header import HeaderIcon, HeaderTitle

SEPARATOR = " · "
DASH = " — "
ICON = 3  # the command palette's icon, narrowed (Textual gives it 8 columns and the
# clock's empty space on the right 10: mmuscope has no clock, the state needs them)


def split_title(title: str, sub_title: str, width: int) -> tuple[str, str]:
    """(first row's sub-title, second row's) so that `title — first` fits in `width`;
    the second row is empty when everything fits in one."""
    parts = sub_title.split(SEPARATOR)
    first: list[str] = []
    for number, part in enumerate(parts):
        candidate = SEPARATOR.join([*first, part])
        if first and len(title) + len(DASH) + len(candidate) > width:
            return SEPARATOR.join(first), SEPARATOR.join(parts[number:])
        first.append(part)
    return sub_title, ""


class SteadyTitle(HeaderTitle):
    """Textual's header title, which lays the screen out again only when its number of
    rows changes: its width is the header's and its height its rows (`height: auto`,
    no wrapping), so a new title of as many rows keeps every widget where it is.  (Each
    `update` of Textual's lays the whole screen out: the replay screen's sub-title
    counts the events while the trace is indexed, ten times a second.)"""

    _rows: int | None = None

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        plain = content.plain if isinstance(content, Content) else content
        rows = plain.count("\n") + 1 if isinstance(plain, str) else None  # None: unknown
        super().update(content, layout=layout and (rows is None or rows != self._rows))
        self._rows = rows


class MmuHeader(Header):
    """Textual's `Header`, on two rows where one would cut the state."""

    DEFAULT_CSS = """
    MmuHeader { height: auto; max-height: 2; }
    MmuHeader HeaderTitle { height: auto; text-align: center; }
    MmuHeader HeaderIcon { width: 3; }
    """

    def __init__(self, *, one_row_below: int = 0) -> None:
        super().__init__()
        self.one_row_below = one_row_below  # terminal widths that keep one row

    def compose(self) -> ComposeResult:
        """Textual's icon and title; not its clock, nor the clock's empty space, which
        the state's text takes instead (a widget composed only to be hidden would be
        styled and laid out before the first frame all the same)."""
        yield HeaderIcon().data_bind(Header.icon)
        yield SteadyTitle()

    def format_title(self) -> Content:
        title, sub_title = self.screen_title, self.screen_sub_title
        width = self.size.width - ICON
        if not sub_title or self.app.size.width < self.one_row_below:
            return super().format_title()
        first, second = split_title(title, sub_title, width)
        if not second:
            return super().format_title()
        return Content.assemble(
            Content(title),
            (DASH, "dim"),
            Content(first).stylize("dim"),
            "\n",
            Content(second).stylize("dim"),
        )

    def on_resize(self) -> None:
        self.query_one(HeaderTitle).update(self.format_title())
