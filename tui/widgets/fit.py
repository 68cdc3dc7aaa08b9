"""Rows that fit a panel's height: a side panel taller than its share of the screen drops
its least important rows first, as the tables drop their least important columns, and
says how many it left out (on its bottom border, which costs no row) instead of
cutting its bottom rows.

What is important: the rows a scenario's caption names (the counters it talks about),
then the panel's own order of importance.  The rows kept are shown in their own order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from .wrap import wrapped_height

_WHY = re.compile(r"\s*\([^()]*\)$")  # a value's closing "(explanation)"
_PARTS = re.compile(r"\s*/\s*|\s+·\s+")  # "accesses / exits": two counters on one row
MIN_NAME = 4  # a shorter part ("max") names nothing on its own


def names_in(label: str, caption: str) -> bool:
    """Whether the caption names the row `label` (or one of its `a / b` parts) as a
    phrase: "'memslot lookups'" names `memslot lookups`, "RET_PF_EMULATE" names
    `RET_PF_EMULATE`, "pages used against the budget" names `pages used / max`."""
    if not caption:
        return False
    text = caption.lower()
    for part in _PARTS.split(label.strip().lower()):
        if len(part) >= MIN_NAME and re.search(rf"(?<![\w]){re.escape(part)}(?![\w])", text):
            return True
    return False


def fit_rows(
    rows: Sequence[Text],
    width: int,
    room: int,
    order: Sequence[int] | None = None,
    *,
    skip: bool = True,
) -> tuple[list[int], int]:
    """The indices (ascending) of `rows` that fit in `room` rows once wrapped to `width`,
    taken in `order` (most important first; default top to bottom) while they fit (with
    `skip`, a row too tall for what is left is passed over for the next; without, the
    rows stop there), and how many were left out.  With no height known yet (`room` <= 0)
    every row."""
    if room <= 0:
        return list(range(len(rows))), 0
    heights = [wrapped_height(row, width) if width > 0 else 1 for row in rows]
    if sum(heights) <= room:
        return list(range(len(rows))), 0
    kept: set[int] = set()
    for index in order if order is not None else range(len(rows)):
        if heights[index] <= room:
            kept.add(index)
            room -= heights[index]
        elif not skip:
            break
    return sorted(kept), len(rows) - len(kept)


def table_row(name: str, value: str, width: int, column: int, label: Style) -> Text:
    """A counters table's `name  value` row on one line of `width` (0: unknown): a
    table never wraps a row.  Where the row does not fit, the value takes the label
    column's padding first, then loses its closing "(explanation)", then is cut with an
    ellipsis; the label is kept whole."""
    row = f"{name:<{column}}{value}"
    if not width or len(row) <= width:
        return Text.assemble((f"{name:<{column}}", label), value)
    name = f"{name} "
    if len(name) + len(value) > width:
        value = _WHY.sub("", value) or value
        if column + len(value) <= width:
            return Text.assemble((f"{name.strip():<{column}}", label), value)
    room = width - len(name)
    if len(value) > room:
        value = value[: max(room - 1, 0)].rstrip() + "…"
    return Text.assemble((f"{name:<{width - len(value)}}", label), value)


def more_rows(dropped: int, what: str = "rows") -> str:
    """The bottom border's note of the rows left out ("" when none)."""
    if not dropped:
        return ""
    return f"+{dropped} more {what if dropped > 1 else what.removesuffix('s')}"


BORDER_EXTRA = 6  # "╭─ " and " ─╮" around a border title


def fit_title(versions: Sequence[str], width: int) -> str:
    """The first of `versions` that fits a border `width` columns wide whole (Textual
    would cut a longer one with an ellipsis); the last when none does (at 80 columns a
    title may be cut); the first before the widget has a size."""
    if width <= 0:
        return versions[0] if versions else ""
    for version in versions:
        if len(version) + BORDER_EXTRA <= width:
            return version
    return versions[-1] if versions else ""


def show_title(widget: Widget, title: str) -> None:
    """Set the widget's border title when it changes: Textual repaints a widget whole
    whenever its `border_title` is set, to the same title too, and a screen's redraw
    sets its titles at every frame."""
    if widget.border_title != title:
        widget.border_title = title


def show_subtitle(widget: Widget, note: str) -> None:
    """Set the widget's bottom-border note when it changes (see show_title)."""
    if widget.border_subtitle != note:
        widget.border_subtitle = note


def refit_in_render(widget: Widget, fit: Callable[[], None]) -> None:
    """`fit()` from the widget's render(), for a size laid out before the resize event
    came: the rows drawn now are the ones that fit, and a changed bottom-border note is
    drawn in the next frame (a repaint asked for while this one is drawn is dropped)."""
    before = widget.border_subtitle
    fit()
    if widget.border_subtitle != before:
        widget.call_after_refresh(widget.refresh)
