"""The replay screen's drawings: the timeline, the shadow pages by level, one table of
TDP sptes as a grid of gfns, and the MMU's state (generations, MMIO sptes, vCPUs).

They reuse the shadow-MMU screen's look (`MmuDrawing` and its component classes): a page
that just appeared is `path`, an obsolete one `obsolete` (struck through, dimmed), a
stale MMIO spte `mmio-stale`.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, ProgressBar

from engine.replay.filters import EventFilter
from engine.replay.model import ReplayModel
from engine.replay.views import LevelRow, SpteTable, mmio_rows, vcpu_rows

from .mmu_panels import MmuDrawing
from .row_cache import use_row_cache

GRID_LEGEND = "· none ▸ table ■ 4K █ huge ◆ MMIO"
SYMBOLS = {"none": "·", "nonleaf": "▸", "leaf": "■", "large": "█", "mmio": "◆"}
CHANGE_STYLE = {"appeared": "path", "vanished": "mmio-stale", "flip": "mmio-stale",
                "mmio": "mmio", "tdp": "leaf"}  # fmt: skip


def seconds(value: float) -> str:
    """A duration for the timeline: 6 decimals below 10 s (trace timestamps are in µs)."""
    return f"{value:.6f}" if abs(value) < 10 else f"{value:.3f}"


class ReplayPanel(MmuDrawing):
    """A drawing whose rows are framed once per render (tui/widgets/row_cache.py): while
    a trace plays, the replay screen repaints one of its panels nearly every frame, and
    Textual's per-row framing was about a third of what repainting the state panel or
    the spte grid cost."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        use_row_cache(self)


class TimelineBar(ReplayPanel):
    """One line: play state, time and event position, a bar, speed and filters."""

    WRAP = False  # the bar takes the room the words leave

    DEFAULT_CSS = """
    TimelineBar { height: 1; border: none; padding: 0 1; background: $boost; }
    """

    def show(
        self,
        *,
        state: str,
        elapsed: float,
        span: float,
        position: int,
        total: int,
        complete: bool,
        speed: str,
        filters: EventFilter,
        earliest: int = 0,
    ) -> None:
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


class ReplayPages(ReplayPanel):
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
        self.border_subtitle = words if kind in ("appeared", "vanished", "flip") else ""
        self.show_text(text)


class SpteGrid(ReplayPanel):
    """The 512 sptes of one table as a grid of gfns; the last change marked."""

    def show(self, table: SpteTable | None) -> None:
        self.border_subtitle = GRID_LEGEND
        if table is None:
            self.border_title = "sptes by gfn"
            self.show_text(
                Text(
                    "kvm_tdp_mmu_spte_changed and kvm_mmu_set_spte fill this grid",
                    style=self.style_of("label"),
                )
            )
            return
        span = len(table.cells) * (table.cells[1].gfn - table.cells[0].gfn)
        self.border_title = (
            f"sptes: as {table.as_id} l{table.level} gfn {table.base_gfn:#x}"
            f"-{table.base_gfn + span - 1:#x}"
        )
        columns, gap, rows = self._shape(len(table.cells))
        marked = table.changed
        first_row = 0
        if marked is not None and rows * columns < len(table.cells):
            last_row = len(table.cells) // columns - rows
            first_row = max(0, min(marked // columns - rows // 2, last_row))
        text = Text(no_wrap=True)
        run: list[str] = []  # cells of one component, appended at once (few segments)
        component = ""
        for cell in table.cells[first_row * columns : (first_row + rows) * columns]:
            now = "selected" if cell.index == marked else cell.kind
            if now != component and run:
                text.append("".join(run), style=self.style_of(component))
                run = []
            component = now
            run.append(SYMBOLS[cell.kind] + ("\n" if cell.index % columns == columns - 1 else gap))
        if run:
            text.append("".join(run), style=self.style_of(component))
        self.show_text(text)

    def _shape(self, cells: int) -> tuple[int, str, int]:
        """(cells a row, the gap between them, rows shown): 32 spaced when 16 rows fit,
        else 64 packed when the panel is wide enough, else 32 packed."""
        width, height = self.content_size
        height = max(1, height)
        if width >= 63 and height >= cells // 32:
            return 32, " ", cells // 32
        columns = 64 if width >= 64 else 32
        return columns, "", min(height, cells // columns)


class ReplayState(ReplayPanel):
    """Generations, pages made and zapped, the MMIO sptes with their generation, TDP
    changes, and the busiest vCPUs."""

    def show(self, model: ReplayModel, start_ts: float | None) -> None:
        height = self.content_size.height
        names = 13
        label, plain = self.style_of("label"), self.style_of("page")
        text = Text(no_wrap=True, overflow="ellipsis")

        def line(name: str, value: str, style: str = "page") -> None:
            text.append(f"{name:<{names}}", style=label)
            text.append(f"{value}\n", style=self.style_of(style))

        gen = "?" if model.mmu_valid_gen is None else str(model.mmu_valid_gen)
        line("valid_gen", f"{gen} · {model.flips_total} fast zaps")
        if model.flips:
            flip = model.flips[-1]
            at = flip.ts - start_ts if start_ts is not None else flip.ts
            used = f" {flip.used_pages:#x} pages" if flip.used_pages is not None else ""
            line("last flip", f"{flip.old}→{flip.new} +{seconds(at)}s{used}", "mmio-stale")
        copies = sum(p.copies for p in model.pages.values())
        line("pages", f"{copies} (+{model.created} -{model.zapped})")
        unknown = model.unknown_zaps + model.unkeyed_zaps
        if model.adopted or unknown:
            seen = f"{model.adopted} page{'s' * (model.adopted != 1)} adopted"
            line("mid-run", f"{seen} · {unknown} zap{'s' * (unknown != 1)} unmatched", "label")
        memslots = "?" if model.memslots_gen is None else f"{model.memslots_gen:#x}"
        line("MMIO sptes", f"{len(model.mmio)} · gen {memslots}")
        room = max(1, (max(height, 4) - 8) // 2)
        for spte, state in mmio_rows(model, min(3, room)):
            style = {"valid": "mmio", "stale": "mmio-stale", "obsolete": "obsolete"}[state]
            text.append(f" {spte.gfn:#x} gen {spte.gen:#x} {state}\n", style=self.style_of(style))
        if model.mmio_checks_ok or model.mmio_checks_stale:
            line("check_mmio", f"{model.mmio_checks_ok} ok · {model.mmio_checks_stale} stale")
        line("spte writes", f"{model.tdp_changes} tdp · {model.set_sptes} set_spte")
        rows = vcpu_rows(model, room)
        if rows:
            text.append("vcpu  exits  entry    pf fast\n", style=label)
            for vcpu, c in rows:
                text.append(
                    f"{vcpu:>4}{c.exits:>7}{c.entries:>7}{c.faults:>6} "
                    f"{c.fast_fixed}/{c.fast_spurious}\n",
                    style=plain,
                )
        self.show_text(text)
