"""The replay screen's drawings: the timeline, the shadow pages by level, one table of
TDP sptes as a grid of gfns, and the MMU's state (generations, MMIO sptes, vCPUs).

They reuse the shadow-MMU screen's look (`MmuDrawing` and its component classes): a page
that just appeared is `path`, an obsolete one `obsolete` (struck through, dimmed), a
stale MMIO spte `mmio-stale`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from mmuscope.engine.replay.filters import EventFilter
from mmuscope.engine.replay.model import ReplayModel
from mmuscope.engine.replay.views import GridCell, LevelRow, SpteTable, mmio_rows, vcpu_rows
from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.geometry import Size
from textual.widgets import Label, ProgressBar

from .fit import BORDER_EXTRA, fit_rows, more_rows, refit_in_render, show_subtitle, show_title
from .mmu_panels import FittedRows, MmuDrawing

LEGEND_ITEMS = (("none", "· none"), ("nonleaf", "▸ table"), ("leaf", "■ 4K"),
                ("large", "█ huge"), ("mmio", "◆ MMIO"))  # fmt: skip
GRID_LEGEND = " ".join(item for _, item in LEGEND_ITEMS)
SYMBOLS = {"none": "·", "nonleaf": "▸", "leaf": "■", "large": "█", "mmio": "◆"}
CHANGE_STYLE = {"appeared": "path", "vanished": "mmio-stale", "flip": "mmio-stale",
                "mmio": "mmio", "tdp": "leaf"}  # fmt: skip


def seconds(value: float) -> str:
    """A duration for the timeline: 6 decimals below 10 s (trace timestamps are in µs)."""
    return f"{value:.6f}" if abs(value) < 10 else f"{value:.3f}"


class TimelineShown(NamedTuple):
    """What the timeline bar shows."""

    state: str
    elapsed: float
    span: float
    position: int
    total: int
    complete: bool
    speed: str
    filters: EventFilter
    earliest: int = 0


class TimelineBar(MmuDrawing):
    """One line: play state, time and event position, a bar, speed and filters."""

    WRAP = False  # the bar takes the room the words leave

    DEFAULT_CSS = """
    TimelineBar { height: 1; border: none; padding: 0 1; background: $boost; }
    """

    _shown: TimelineShown | None = None
    _drawn_width = 0

    def show(self, shown: TimelineShown) -> None:
        self._shown = shown
        self._draw(shown)

    def render(self) -> Text:
        if self._shown is not None and self.content_size.width != self._drawn_width:
            self._draw(self._shown)  # laid out again (a resize): the bar takes the new width
        return super().render()

    def _draw(self, shown: TimelineShown) -> None:
        state, elapsed, span, position, total, complete, speed, filters, earliest = shown
        self._drawn_width = self.content_size.width
        more = "" if complete else "+"
        head = f"{state} {seconds(elapsed)}/{seconds(span)}{more} s  #{position:,}/{total:,}{more} "
        tail = f" {speed}"
        if filters.active:
            tail += f" · {filters.describe()}"
        width = self.content_size.width or 80
        room = max(0, width - len(head) - len(tail))
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(head, style=self.style_of("path"))
        if room >= 8:
            kept = max(1, total - earliest)
            done = round(room * (position - earliest) / kept) if total > earliest else 0
            done = max(0, min(room - 1, done))
            text.append("━" * done, style=self.style_of("path"))
            text.append("●", style=self.style_of("selected"))
            text.append("─" * (room - done - 1), style=self.style_of("label"))
        text.append(tail, style=self.style_of("label"))
        self.show_text(text)


class IndexingBar(Horizontal):
    """`indexing NAME` and a progress bar, shown while the timeline index is built."""

    DEFAULT_CSS = """
    IndexingBar { height: 1; padding: 0 1; }
    IndexingBar.-done { display: none; }
    IndexingBar Label { width: auto; color: $text-muted; margin-right: 1; }
    IndexingBar ProgressBar { width: 1fr; }
    IndexingBar Bar { width: 1fr; }
    """

    def __init__(self, label: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.label = label
        self._label_width = cell_len(label)

    def compose(self) -> ComposeResult:
        yield Label(self.label, id="indexing-label")
        yield ProgressBar(total=100, show_eta=False, id="indexing-progress")

    def show(self, percent: float, words: str) -> None:
        """The label's words lay the screen out again only when their width changes (the
        label is `width: auto`): a count of events that keeps its digits repaints it."""
        self.query_one(ProgressBar).update(total=100, progress=percent)
        width = cell_len(words)
        self.query_one(Label).update(words, layout=width != self._label_width)
        self._label_width = width


class ReplayPages(MmuDrawing):
    """Per level: how many pages, how many obsolete, and the latest to appear."""

    def show(self, rows: list[LevelRow], model: ReplayModel) -> None:
        width = max(20, self.content_size.width or 60)
        newest_seq = max((p.seq for row in rows for p in row.newest[:1]), default=-1)
        text = Text(no_wrap=True, overflow="ellipsis")
        for row in rows:
            level = f"L{row.level}" if row.level is not None else "L?"
            line = Text(f"{level} ", style=self.style_of("label"))
            line.append(f"{row.count:>5} ", style=self.style_of("page"))
            if row.obsolete:
                line.append(f"({row.obsolete} obsolete) ", style=self.style_of("obsolete"))
            for page in row.newest:
                chip = f"[{page.gfn:#x}]"
                if line.cell_len + len(chip) > width:
                    break
                component = "page"
                if model.is_obsolete(page):
                    component = "obsolete"
                elif page.seq == newest_seq:
                    component = "path"
                line.append(chip, style=self.style_of(component))
                line.append(" ")
            text.append_text(line)
            text.append("\n")
        if not rows:
            text.append("no shadow pages yet: kvm_mmu_get_page adds them\n", self.style_of("label"))
        kind, words = model.last_change
        show_subtitle(self, words if kind in ("appeared", "vanished", "flip") else "")
        self.show_text(text)


class SpteGrid(MmuDrawing):
    """The 512 sptes of one table as a grid of gfns; the last change marked.

    Where the panel is shorter than the grid (80×24) it keeps, as the shadow-MMU screen's
    grid does (tui/widgets/spt_grid.py), the row of the spte the last event changed, the
    legend (then a row of its own: the bottom border says how many rows were left out),
    the rows with present sptes, then the empty ones, each labelled with the index of
    its first spte."""

    _table: SpteTable | None = None
    _fitted_for = Size(0, 0)

    def show(self, table: SpteTable | None) -> None:
        self._table = table
        if table is None:
            show_subtitle(self, GRID_LEGEND)
            show_title(self, "sptes by gfn")
            self.show_text(
                Text(
                    "kvm_tdp_mmu_spte_changed and kvm_mmu_set_spte fill this grid",
                    style=self.style_of("label"),
                )
            )
            return
        span = len(table.cells) * (table.cells[1].gfn - table.cells[0].gfn)
        show_title(
            self,
            f"sptes: as {table.as_id} l{table.level} gfn {table.base_gfn:#x}"
            f"-{table.base_gfn + span - 1:#x}",
        )
        self._fit()

    def render(self) -> Text:
        if self._table is not None and self._fitted_for != self.content_size:
            refit_in_render(self, self._fit)  # laid out again (a resize)
        return super().render()

    def _fit(self) -> None:
        """The whole grid where it fits; else the rows that matter most."""
        table = self._table
        assert table is not None
        self._fitted_for = self.content_size
        columns, gap, rows = self._shape(len(table.cells))
        if rows * columns >= len(table.cells) or self.content_size.height <= 0:
            kinds = {cell.kind for cell in table.cells}
            show_subtitle(self, self._legend(kinds, self.outer_size.width - BORDER_EXTRA))
            text = Text(no_wrap=True)
            self._append_cells(text, table.cells[: rows * columns], table.changed, columns, gap)
            self.show_text(text)
            return
        width, room = self.content_size
        lines, order = self._rows(table, columns, gap, label=width >= columns + 4)
        kept, dropped = fit_rows(lines, width, room, order)
        note = more_rows(dropped)
        show_subtitle(self, note)
        self.show_text(Text("\n", no_wrap=True).join(lines[i] for i in kept))

    def _rows(
        self, table: SpteTable, columns: int, gap: str, *, label: bool
    ) -> tuple[list[Text], list[int]]:
        """The grid's rows and the legend (last), and their order of importance: the
        changed spte's row, the legend, the rows with present sptes, the empty ones."""
        cells, marked = table.cells, table.changed
        rows: list[Text] = []
        busy: list[bool] = []
        for start in range(0, len(cells), columns):
            row = Text(f"{start:03x} " if label else "", style=self.style_of("label"))
            part = cells[start : start + columns]
            self._append_cells(row, part, marked, columns, gap)
            row.rstrip()
            rows.append(row)
            busy.append(any(cell.kind != "none" for cell in part))
        kinds = {cell.kind for cell in cells}
        rows.append(
            Text(self._legend(kinds, self.content_size.width), style=self.style_of("label"))
        )
        first = [marked // columns] if marked is not None and marked < len(cells) else []
        grid = range(len(rows) - 1)
        present = [i for i in grid if busy[i] and i not in first]
        empty = [i for i in grid if not busy[i] and i not in first]
        return rows, [*first, len(rows) - 1, *present, *empty]

    def _legend(self, kinds: set[str], room: int) -> str:
        """The legend; in fewer than its columns, only the symbols the grid shows."""
        if len(GRID_LEGEND) <= room or room <= 0:
            return GRID_LEGEND
        return " ".join(item for kind, item in LEGEND_ITEMS if kind in kinds)

    def _append_cells(
        self, text: Text, cells: Sequence[GridCell], marked: int | None, columns: int, gap: str
    ) -> None:
        """`cells` appended to `text`, a row of `columns` a line, in runs of one component
        (few segments)."""
        run: list[str] = []
        component = ""
        for cell in cells:
            now = "selected" if cell.index == marked else cell.kind
            if now != component and run:
                text.append("".join(run), style=self.style_of(component))
                run = []
            component = now
            run.append(SYMBOLS[cell.kind] + ("\n" if cell.index % columns == columns - 1 else gap))
        if run:
            text.append("".join(run), style=self.style_of(component))

    def _shape(self, cells: int) -> tuple[int, str, int]:
        """(cells a row, the gap between them, rows shown): 32 spaced when 16 rows fit,
        else 64 packed when the panel is wide enough, else 32 packed."""
        width, height = self.content_size
        height = max(1, height)
        if width >= 63 and height >= cells // 32:
            return 32, " ", cells // 32
        columns = 64 if width >= 64 else 32
        return columns, "", min(height, cells // columns)


class ReplayState(FittedRows):
    """Generations, pages made and zapped, the MMIO sptes with their generation, TDP
    changes, and the busiest vCPUs.

    Where the panel is too short for its rows (80×24) it keeps the generations, the
    pages, the MMIO sptes' count and the spte writes first, then the last flip, the
    busiest vCPU, the MMIO sptes themselves, check_mmio, the other vCPUs and, last, the
    note on what the trace started in the middle of; the bottom border says how many
    rows it left out (tui/widgets/fit.py)."""

    def show(self, model: ReplayModel, start_ts: float | None, at_end: bool = False) -> None:
        """Draw the model's state; `at_end`: the whole trace has been played, so a trace
        with no page from before it and no unmatched zap is said to be complete (the
        same test as `replay --summary`'s `unmatched`, engine/replay/model.py)."""
        height = self.content_size.height
        names = 13
        label, plain = self.style_of("label"), self.style_of("page")
        rows: list[Text] = []
        at: dict[str, int] = {}  # the rows by what they say, for their importance

        def line(key: str, name: str, value: str, style: str = "page") -> None:
            at[key] = len(rows)
            rows.append(Text.assemble((f"{name:<{names}}", label), (value, self.style_of(style))))

        gen = "?" if model.mmu_valid_gen is None else str(model.mmu_valid_gen)
        line("gen", "valid_gen", f"{gen} · {model.flips_total} fast zaps")
        if model.flips:
            flip = model.flips[-1]
            at_ts = flip.ts - start_ts if start_ts is not None else flip.ts
            used = f" {flip.used_pages:#x} pages" if flip.used_pages is not None else ""
            line(
                "flip", "last flip", f"{flip.old}→{flip.new} +{seconds(at_ts)}s{used}", "mmio-stale"
            )
        copies = sum(p.copies for p in model.pages.values())
        line("pages", "pages", f"{copies} (+{model.created} -{model.zapped})")
        unknown = model.unknown_zaps + model.unkeyed_zaps
        if model.adopted or unknown:
            seen = f"{model.adopted} page{'s' * (model.adopted != 1)} adopted"
            words = f"{seen} · {unknown} zap{'s' * (unknown != 1)} unmatched"
            line("mid-run", "mid-run", words, "label")
        elif at_end and model.events:
            line("mid-run", "trace", "complete · every page's life seen", "label")
        memslots = "?" if model.memslots_gen is None else f"{model.memslots_gen:#x}"
        line("mmio", "MMIO sptes", f"{len(model.mmio)} · gen {memslots}")
        room = max(1, (max(height, 4) - 8) // 2)
        mmio = []
        for spte, state in mmio_rows(model, min(3, room)):
            style = {"valid": "mmio", "stale": "mmio-stale", "obsolete": "obsolete"}[state]
            mmio.append(len(rows))
            rows.append(
                Text(f" {spte.gfn:#x} gen {spte.gen:#x} {state}", style=self.style_of(style))
            )
        if model.mmio_checks_ok or model.mmio_checks_stale:
            line(
                "check",
                "check_mmio",
                f"{model.mmio_checks_ok} ok · {model.mmio_checks_stale} stale",
            )
        line("writes", "spte writes", f"{model.tdp_changes} tdp · {model.set_sptes} set_spte")
        vcpus = []
        for number, (vcpu, c) in enumerate(vcpu_rows(model, room)):
            row = Text(
                f"{vcpu:>4}{c.exits:>7}{c.entries:>7}{c.faults:>6} "
                f"{c.fast_fixed}/{c.fast_spurious}",
                style=plain,
            )
            if not number:  # the header goes with the first vCPU's row
                row = Text("vcpu  exits  entry    pf fast\n", style=label).append_text(row)
            vcpus.append(len(rows))
            rows.append(row)
        keys = ("gen", "pages", "mmio", "writes", "flip")
        first = [at[key] for key in keys if key in at]
        check = [at["check"]] if "check" in at else []
        last = [at["mid-run"]] if "mid-run" in at else []
        self.show_rows(rows, [*first, *vcpus[:1], *mmio, *check, *vcpus[1:], *last])
