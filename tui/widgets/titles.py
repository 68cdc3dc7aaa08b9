"""Border titles that fit: a panel's title is given as versions from the fullest to the
shortest, and the panel shows the first that fits its border whole (Textual would cut a
long one with an ellipsis)."""

from __future__ import annotations

from collections.abc import Sequence

from textual.geometry import Region
from textual.widget import Widget

BORDER_EXTRA = 6  # "╭─ " and " ─╮" around the title


def fit_title(versions: Sequence[str], width: int) -> str:
    """The first of `versions` that fits a border `width` columns wide (the last when
    none does: at 80 columns a title may be cut; the first before the panel has a size)."""
    if width <= 0:
        return versions[0] if versions else ""
    for version in versions:
        if len(version) + BORDER_EXTRA <= width:
            return version
    return versions[-1] if versions else ""


def set_border_title(widget: Widget, title: str) -> None:
    """`widget.border_title = title`, repainting the top border row alone, and nothing
    when the title is already that: Textual repaints the whole widget on every
    assignment, even of the same title (a drawing retitled at every lookup paid Textual's
    work for all its lines, not for the row the title is in)."""
    if widget.border_title == title:
        return
    if not hasattr(widget, "_border_title"):  # not Textual 8's storage: the plain way
        widget.border_title = title
        return
    # As textual.widget._BorderTitle.__set__ stores it, then the row it is drawn in.
    widget._border_title = widget.render_str(title).expand_tabs(4).split()[0]
    _refresh_border_row(widget, top=True)


def set_border_subtitle(widget: Widget, subtitle: str) -> None:
    """`widget.border_subtitle = subtitle`: the bottom border row alone (as above)."""
    if widget.border_subtitle == subtitle:
        return
    if not hasattr(widget, "_border_subtitle"):
        widget.border_subtitle = subtitle
        return
    widget._border_subtitle = widget.render_str(subtitle).expand_tabs(4).split()[0]
    _refresh_border_row(widget, top=False)


def _refresh_border_row(widget: Widget, top: bool) -> None:
    """Repaint the widget's top or bottom row (refresh regions are relative to the
    content: the border rows are outside it)."""
    offset, outer = widget.content_offset, widget.outer_size
    y = -offset.y if top else outer.height - 1 - offset.y
    widget.refresh(Region(-offset.x, y, outer.width, 1))
