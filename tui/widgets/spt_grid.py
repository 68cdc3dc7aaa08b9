"""One shadow page's 512 sptes (`sp->spt`) as a grid of symbols, the fault's entry
marked, and the legend of the symbols.

Where the panel is shorter than the grid (80×24 under a scenario's caption) it keeps the
row of the marked spte, the legend and the rows with present sptes before the empty ones,
labels each kept row with the index of its first spte, and says on its bottom border how
many rows it left out (tui/widgets/fit.py); where it is narrower than the legend, the
legend names only the symbols the grid shows."""

from __future__ import annotations

from mmuscope.engine.mmu.views import SpteCell
from rich.text import Text
from textual.geometry import Size

from .fit import fit_rows, more_rows, refit_in_render, show_subtitle
from .mmu_panels import MmuDrawing

GRID_COLUMNS = 32  # 512 sptes = 16 rows of 32
SPTES = 512
LEGEND_ITEMS = (("none", "· none"), ("nonleaf", "▸ table"), ("leaf", "■ 4K"),
                ("unaccessed", "□ A clear"), ("large", "█ 2M"), ("mmio", "◆ MMIO"),
                ("mmio-stale", "◇ stale MMIO"), ("frozen", "✱ frozen"))  # fmt: skip
LEGEND = " ".join(item for _, item in LEGEND_ITEMS)
EMPTY = "the sptes of the page a fault walked through appear here"


class SptGrid(MmuDrawing):
    """The 512 sptes of one page, 32 to a row; the fault's entry is marked."""

    SYMBOL = {"none": "·", "nonleaf": "▸", "leaf": "■", "large": "█", "mmio": "◆",
              "mmio-stale": "◇", "frozen": "✱", "unaccessed": "□"}  # fmt: skip

    _grid: tuple[list[SpteCell], int | None] | None = None
    _fitted_for = Size(0, 0)

    def show(self, cells: list[SpteCell], marked: int | None) -> None:
        self._grid = (cells, marked)
        self._fit()

    def show_text(self, text: Text) -> None:
        self._grid = None
        show_subtitle(self, "")
        super().show_text(text)

    def render(self) -> Text:
        if self._grid is not None and self._fitted_for != self.content_size:
            refit_in_render(self, self._fit)  # laid out again (a caption came or went)
        return super().render()

    def _fit(self) -> None:
        assert self._grid is not None
        cells, marked = self._grid
        self._fitted_for = self.content_size
        width, room = self.content_size
        if not cells:  # nothing selected: the words first, then the legend
            label = self.style_of("label")
            lines = [Text(EMPTY, style=label), Text(), Text(self.legend(), style=label)]
            kept, dropped = fit_rows(lines, width, room, [0, 2])  # the gap: when all fit
            super().show_text(Text("\n").join(lines[i] for i in kept))
            show_subtitle(self, "")
            self._grid = (cells, marked)
            return
        columns, gap = self._shape()
        states = {cell.state for cell in cells}
        rows, order = self._rows(cells, marked, columns, gap, label=False)
        legend = Text(self.legend(states), style=self.style_of("label"))
        kept, dropped = fit_rows([*rows, legend], width, room, order)
        if dropped and width >= columns + 4:  # labelled: where each kept row starts
            rows, order = self._rows(cells, marked, columns, gap, label=True)
            kept, dropped = fit_rows([*rows, legend], width, room, order)
        lines = [*rows, legend]
        note = more_rows(dropped)
        show_subtitle(self, note)
        super().show_text(Text("\n", no_wrap=True).join(lines[i] for i in kept))
        self._grid = (cells, marked)  # show_text above forgets it

    def _rows(
        self, cells: list[SpteCell], marked: int | None, columns: int, gap: str, *, label: bool
    ) -> tuple[list[Text], list[int]]:
        """The grid's rows (each labelled with its first index when `label`), and the
        order of importance of those and the legend (one past the last row): the marked
        spte's row, the legend, the rows with present sptes, then the empty ones."""
        rows: list[Text] = []
        busy: list[int] = []
        for start in range(0, len(cells), columns):
            row = Text(f"{start:03x} " if label else "", style=self.style_of("label"))
            for cell in cells[start : start + columns]:
                component = "selected" if cell.index == marked else cell.state
                row.append(self.SYMBOL[cell.state], style=self.style_of(component))
                row.append(gap)
            row.rstrip()
            rows.append(row)
            busy.append(any(cell.state != "none" for cell in cells[start : start + columns]))
        first = [marked // columns] if marked is not None and marked < len(cells) else []
        present = [i for i in range(len(rows)) if busy[i] and i not in first]
        empty = [i for i in range(len(rows)) if not busy[i] and i not in first]
        return rows, [*first, len(rows), *present, *empty]

    def legend(self, states: set[str] | None = None) -> str:
        """The legend on one row; narrower than it, only the symbols the grid shows."""
        width = self.content_size.width
        if not width or len(LEGEND) <= width or states is None:
            return LEGEND
        return " ".join(item for state, item in LEGEND_ITEMS if state in states)

    def _shape(self) -> tuple[int, str]:
        """32 spaced cells a row when they fit (16 rows); when the panel is short, 64
        packed cells a row (8 rows); when it is narrow, 32 packed."""
        width, height = self.content_size
        rows_needed = len(range(0, SPTES, GRID_COLUMNS)) + 1  # and the legend
        if width >= 2 * GRID_COLUMNS - 1 and (height >= rows_needed or width < 64):
            return GRID_COLUMNS, " "
        return (64, "") if width >= 64 else (GRID_COLUMNS, "")

    def show_empty(self) -> None:
        """No page selected yet: what will appear here, and the legend."""
        self._grid = ([], None)
        self._fit()
