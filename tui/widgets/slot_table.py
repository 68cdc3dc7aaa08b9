"""The memslot table: one row per slot of the address space shown, with lookup hits.

A line-API `ScrollView` (as Textual's own DataTable and Log draw) that renders only the
rows on screen, so the 32764 slots of the `max` guest cost no more than eight: a
DataTable measures every cell of every row when it is filled (seconds at 32764 rows).
The row of the slot that answered the latest lookup is marked.  Each column is as wide as
its widest cell; where a slot's name would not fit whole, the table drops `as`, then
`hits`, then `flags` (least important first), and cuts names only when
even that is not enough (80 columns).
"""

from __future__ import annotations

from collections.abc import Iterable

from mmuscope.engine.memslots.constants import KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY
from mmuscope.engine.memslots.memslot import MemorySlot
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

# (title, width) at the most; each column is as wide as its widest cell (and its title)
# plus a space, and the name takes what is left.
COLUMNS = (("id", 5), ("as", 3), ("base_gfn", 11), ("npages", 9), ("flags", 7), ("hits", 8))
DROPPED_FIRST = ("as", "hits", "flags")  # where the names do not fit whole


def flag_names(flags: int) -> str:
    names = []
    if flags & KVM_MEM_READONLY:
        names.append("RO")
    if flags & KVM_MEM_LOG_DIRTY_PAGES:
        names.append("DIRTY")
    return "|".join(names) or "-"


class SlotTable(ScrollView, can_focus=True):
    """Slots sorted by base_gfn; `hits` counts the lookups each slot answered."""

    BINDINGS = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "cursor(-1000000000)", "First", show=False),
        Binding("end", "cursor(1000000000)", "Last", show=False),
    ]

    COMPONENT_CLASSES = {
        "slot-table--header",
        "slot-table--cursor",
        "slot-table--ram",
        "slot-table--rom",
        "slot-table--dirty",
        "slot-table--found",
    }

    DEFAULT_CSS = """
    SlotTable { height: 1fr; background: $surface; }
    SlotTable > .slot-table--header { color: $text-muted; text-style: bold; }
    SlotTable > .slot-table--cursor { background: $panel; text-style: bold; }
    SlotTable:focus > .slot-table--cursor { background: $primary 40%; }
    SlotTable > .slot-table--ram { color: $slot-ram; }
    SlotTable > .slot-table--rom { color: $slot-rom; }
    SlotTable > .slot-table--dirty { color: $slot-dirty; }
    SlotTable > .slot-table--found { color: $background; background: $node-hit; }
    """

    cursor_row: reactive[int] = reactive(0)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._slots: list[MemorySlot] = []
        self._names: dict[tuple[int, int], str] = {}
        self._hits: dict[int, int] = {}
        self._row_of: dict[int, int] = {}
        self.found: int | None = None  # slot id of the latest lookup's answer
        self._styles: dict[str, Style] = {}  # component -> style; "" is the base style
        self._widths: dict[str, int] = dict(COLUMNS)  # each column's cells, widest
        self._name_width = 0
        self._layout: tuple[tuple[int, tuple[int, ...]], list[tuple[int, int]]] | None = None

    # -- state ----------------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self._slots)

    def set_slots(self, slots: list[MemorySlot], names: dict[tuple[int, int], str]) -> None:
        selected = self.selected_slot_id()
        self._slots = list(slots)
        self._names = names
        self._row_of = {s.id: i for i, s in enumerate(self._slots)}
        self._hits = {i: n for i, n in self._hits.items() if i in self._row_of}
        self._measure()
        self.virtual_size = Size(self._width(), len(self._slots) + 1)
        row = self._row_of.get(selected, 0) if selected is not None else 0
        self.cursor_row = min(row, max(len(self._slots) - 1, 0))
        self.refresh()

    def update_hits(self, hits: dict[int, int]) -> None:
        self._hits.update(hits)
        widest = len(str(max(hits.values(), default=0))) + 1
        if widest > self._widths["hits"]:
            self._widths["hits"] = widest
            self._layout = None
            self.refresh()  # the column grew: every row moves
        else:
            self._refresh_rows(hits)

    def clear_hits(self) -> None:
        self._hits.clear()
        self.refresh()

    def mark_found(self, slot_id: int | None) -> None:
        if slot_id != self.found:
            self._refresh_rows((self.found, slot_id))
            self.found = slot_id

    def _refresh_rows(self, slot_ids: Iterable[int | None]) -> None:
        """Repaint the rows of these slots only (a frame pays Textual's per-line work for
        each line repainted: the one or two rows a lookup changes, not the table)."""
        width, top = self.size.width, int(self.scroll_y)
        for slot_id in slot_ids:
            row = self._row_of.get(slot_id) if slot_id is not None else None
            if row is not None:
                self.refresh(Region(0, row + 1 - top, width, 1))  # line 0 is the header

    def selected_slot_id(self) -> int | None:
        if not 0 <= self.cursor_row < len(self._slots):
            return None
        return self._slots[self.cursor_row].id

    def select_slot(self, slot_id: int) -> None:
        row = self._row_of.get(slot_id)
        if row is not None:
            self.cursor_row = row

    def move_cursor(self, *, row: int, animate: bool = False) -> None:
        """DataTable's spelling of selecting a row."""
        self.cursor_row = row

    def validate_cursor_row(self, row: int) -> int:
        return max(0, min(row, len(self._slots) - 1)) if self._slots else 0

    def watch_cursor_row(self) -> None:
        # Row r is drawn on viewport line r + 1 - scroll_y (line 0 is the header, which
        # hides virtual line scroll_y): keep virtual lines r and r + 1 in view.
        region = Region(0, self.cursor_row, 1, 2)
        self.scroll_to_region(region, animate=False, x_axis=False)
        self.refresh()

    # -- input ----------------------------------------------------------------------

    def action_cursor(self, delta: int) -> None:
        self.cursor_row += delta

    def action_page(self, direction: int) -> None:
        self.cursor_row += direction * max(1, self.scrollable_content_region.height - 2)

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1:
            self.cursor_row = int(self.scroll_y) + event.y - 1

    # -- drawing --------------------------------------------------------------------

    def _measure(self) -> None:
        """Each column's width: its widest cell or title, and a space."""
        slots = self._slots
        widest = {
            "id": len(str(max((s.id for s in slots), default=0))),
            "as": len(str(max((s.as_id for s in slots), default=0))),
            "base_gfn": len(f"{max((s.base_gfn for s in slots), default=0):#x}"),
            "npages": len(f"{max((s.npages for s in slots), default=0):#x}"),
            "flags": max((len(flag_names(f)) for f in {s.flags for s in slots}), default=1),
            "hits": len(str(max(self._hits.values(), default=0))),
        }
        self._widths = {title: max(len(title), widest[title]) + 1 for title, _ in COLUMNS}
        self._name_width = max((len(n) for n in self._names.values()), default=4)
        self._layout = None

    def _width(self) -> int:
        """The rows' width with the columns the table shows now (wider than the table
        only where even the longest name alone does not fit: then it scrolls)."""
        shown = self._columns(self.scrollable_content_region.width or 1 << 20)
        return 1 + sum(width for _, width in shown) + max(self._name_width, 4)

    def on_resize(self) -> None:
        self.virtual_size = Size(self._width(), len(self._slots) + 1)

    def _columns(self, width: int) -> list[tuple[int, int]]:
        """(index, width) of the columns shown in a table `width` wide: all of them when
        the longest name fits beside them, else without DROPPED_FIRST's, in order."""
        key = (width, tuple(self._widths.values()))
        if self._layout is not None and self._layout[0] == key:
            return self._layout[1]
        shown = [title for title, _ in COLUMNS]
        for title in DROPPED_FIRST:
            if 1 + sum(self._widths[t] for t in shown) + self._name_width <= width:
                break
            shown.remove(title)
        titles = [title for title, _ in COLUMNS]
        columns = [(titles.index(t), self._widths[t]) for t in shown]
        self._layout = (key, columns)
        return columns

    def _cells(self, slot: MemorySlot) -> list[str]:
        return [
            str(slot.id),
            str(slot.as_id),
            f"{slot.base_gfn:#x}",
            f"{slot.npages:#x}",
            flag_names(slot.flags),
            str(self._hits.get(slot.id, 0)),
            self._names.get((slot.as_id, slot.id), ""),
        ]

    def _line(self, cells: list[str], width: int) -> str:
        fixed = "".join(cells[i].ljust(w)[: w - 1] + " " for i, w in self._columns(width))
        return " " + fixed + cells[-1]

    def _style(self, component: str) -> Style:
        style = self._styles.get(component)
        if style is None:
            style = (
                self.rich_style
                if not component
                else self.get_component_rich_style(f"slot-table--{component}")
            )
            self._styles[component] = style
        return style

    def notify_style_update(self) -> None:
        self._styles.clear()
        super().notify_style_update()

    def _row_style(self, row: int, slot: MemorySlot) -> Style:
        kind = "rom" if slot.readonly else "dirty" if slot.dirty_logging else "ram"
        style = self._style(kind)
        if slot.id == self.found:
            style += self._style("found")
        if row == self.cursor_row:
            style += self._style("cursor")
        return style

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        scroll_x, scroll_y = self.scroll_offset
        base = self._style("")
        if y == 0:
            titles = [title for title, _ in COLUMNS] + ["name"]
            style = base + self._style("header")
            text, line_style = self._line(titles, width), style
        else:
            row = scroll_y + y - 1
            if row >= len(self._slots):
                return Strip.blank(width, base)
            slot = self._slots[row]
            text = self._line(self._cells(slot), width)
            line_style = base + self._row_style(row, slot)
        strip = Strip([Segment(text, line_style)])
        return strip.crop_extend(scroll_x, scroll_x + width, line_style)
