"""The memslot table: one row per slot of the address space shown, with lookup hits."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from engine.constants import KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY
from engine.memslot import MemorySlot

COLUMNS = ("id", "as", "base_gfn", "npages", "flags", "hits", "name")
WIDTHS = {"name": 14, "hits": 7}


def flag_names(flags: int) -> str:
    names = []
    if flags & KVM_MEM_READONLY:
        names.append("RO")
    if flags & KVM_MEM_LOG_DIRTY_PAGES:
        names.append("DIRTY")
    return "|".join(names) or "-"


class SlotTable(DataTable[object]):
    """Slots sorted by base_gfn; `hits` counts the lookups each slot answered."""

    DEFAULT_CSS = """
    SlotTable { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._hits: dict[int, int] = {}
        self._row_of: dict[int, int] = {}  # slot id -> row
        self._slot_at: list[int] = []  # row -> slot id

    def on_mount(self) -> None:
        for column in COLUMNS:
            self.add_column(column, key=column, width=WIDTHS.get(column))

    def set_slots(self, slots: list[MemorySlot], names: dict[tuple[int, int], str]) -> None:
        selected = self.selected_slot_id()
        self.clear()
        self._hits = {}
        self.add_rows(
            (
                Text(str(s.id), style="bold" if s.readonly else ""),
                s.as_id,
                f"{s.base_gfn:#x}",
                f"{s.npages:#x}",
                flag_names(s.flags),
                0,
                names.get((s.as_id, s.id), "")[:14],
            )
            for s in slots
        )
        self._row_of = {s.id: i for i, s in enumerate(slots)}
        self._slot_at = [s.id for s in slots]
        if selected is not None and selected in self._row_of:
            self.move_cursor(row=self._row_of[selected], animate=False)

    def update_hits(self, hits: dict[int, int]) -> None:
        for slot_id, count in hits.items():
            if self._hits.get(slot_id) == count:
                continue
            row = self._row_of.get(slot_id)
            if row is None:
                continue
            self._hits[slot_id] = count
            self.update_cell_at((row, COLUMNS.index("hits")), count)

    def selected_slot_id(self) -> int | None:
        if not 0 <= self.cursor_row < len(self._slot_at):
            return None
        return self._slot_at[self.cursor_row]

    def select_slot(self, slot_id: int) -> None:
        row = self._row_of.get(slot_id)
        if row is not None:
            self.move_cursor(row=row, animate=False)
