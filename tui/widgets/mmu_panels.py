"""The shadow-MMU screen's drawings: shadow pages by level with the fault's path, one
page's 512 sptes as a grid, and the MMU's counters with the last zap's lock holds.

Colours come from component classes over the theme's variables (the node colours of the
memslot drawing, reused: a page on the path is `node-path`, an MMIO spte
`node-cache-hit`, a stale one `node-miss`, ...).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from engine.mmu.dag import RootReach
from engine.mmu.mmu_pages import KvmMmuPage
from engine.mmu.views import LevelSummary, SpteCell

from .fit import fit_rows, more_rows, names_in, refit_in_render
from .titles import set_border_subtitle
from .wrap import WrapCache, wrapped_height

GRID_COLUMNS = 32  # 512 sptes = 16 rows of 32
PAGES_PER_LEVEL = 6  # chips shown per level around the path
MAX_ROOT_LINES = 3
LEGEND = "· none ▸ table ■ 4K □ A clear █ 2M ◆ MMIO ◇ stale MMIO ✱ frozen"
UNSYNC_MARK = "~"  # after a page chip: unsync (kvm_mmu_unsync_page), synced at CR3 load


class MmuDrawing(Widget):
    """Shared styling for the panels (component classes → Rich styles); lines too long
    for the panel wrap under their value column (`WRAP`; grids and one-line bars that
    size themselves to the panel turn it off)."""

    WRAP = True

    COMPONENT_CLASSES = {
        "mmu--page",
        "mmu--path",
        "mmu--selected",
        "mmu--obsolete",
        "mmu--none",
        "mmu--nonleaf",
        "mmu--leaf",
        "mmu--large",
        "mmu--unaccessed",
        "mmu--mmio",
        "mmu--mmio-stale",
        "mmu--frozen",
        "mmu--unsync",
        "mmu--label",
    }

    DEFAULT_CSS = """
    MmuDrawing { background: $surface; padding: 0 1; border: round $panel;
        border-title-color: $primary; text-wrap: nowrap; text-overflow: ellipsis; }
    MmuDrawing > .mmu--page { color: $node-idle; }
    MmuDrawing > .mmu--path { color: $node-path; text-style: bold; }
    MmuDrawing > .mmu--selected { color: $background; background: $node-compare;
        text-style: bold; }
    MmuDrawing > .mmu--obsolete { color: $node-empty; text-style: strike; }
    MmuDrawing > .mmu--none { color: $node-empty; }
    MmuDrawing > .mmu--nonleaf { color: $edge-path; }
    MmuDrawing > .mmu--leaf { color: $slot-ram; }
    MmuDrawing > .mmu--large { color: $node-hit; text-style: bold; }
    MmuDrawing > .mmu--unaccessed { color: $slot-ram; text-style: dim; }
    MmuDrawing > .mmu--mmio { color: $node-cache-hit; text-style: bold; }
    MmuDrawing > .mmu--mmio-stale { color: $node-miss; text-style: bold; }
    MmuDrawing > .mmu--frozen { color: $node-miss; text-style: reverse; }
    MmuDrawing > .mmu--unsync { color: $warning; text-style: bold italic; }
    MmuDrawing > .mmu--label { color: $text-muted; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.content = Text()
        self._wrapped = WrapCache()
        self._styles: dict[str, Style] = {}

    def style_of(self, component: str) -> Style:
        """The component's style, kept until the CSS changes (Textual forgets its own on
        every refresh, and finding it again walks the DOM: ~0.3 ms a call)."""
        style = self._styles.get(component)
        if style is None:
            style = self._styles[component] = self.get_component_rich_style(f"mmu--{component}")
        return style

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = {}

    def render(self) -> Text:
        if not self.WRAP:
            return self.content
        return self._wrapped.wrap(self.content, self.content_size.width)

    def show_text(self, text: Text) -> None:
        """Draw `text`; nothing to repaint when it is what is drawn already."""
        if text == self.content:
            return
        self.content = text
        self.refresh()


class PageLevels(MmuDrawing):
    """Per level: how many shadow pages, and the pages next to the one the fault used."""

    _obsolete: Callable[[KvmMmuPage], bool] = staticmethod(lambda sp: bool(sp.role.invalid))

    def show(
        self,
        levels: list[LevelSummary],
        path: list[KvmMmuPage],
        selected: KvmMmuPage | None,
        valid_gen: int,
        zapping: str = "",
        reach: list[RootReach] | None = None,
        zapping_now: set[int] | None = None,
        *,
        is_obsolete: Callable[[KvmMmuPage], bool] | None = None,
        notes: list[str] | None = None,
    ) -> None:
        """`is_obsolete`: the MMU's own test (default: another generation or invalid);
        `notes`: extra lines (the TDP MMU's roots and RCU-pending tables)."""
        text = Text(no_wrap=True, overflow="ellipsis")
        on_path = {sp.seq for sp in path}
        self._obsolete = is_obsolete or (
            lambda sp: sp.mmu_valid_gen != valid_gen or bool(sp.role.invalid)
        )
        for line in (reach or [])[:MAX_ROOT_LINES]:
            self._root_line(text, line, on_path, valid_gen)
        if reach and len(reach) > MAX_ROOT_LINES:
            more = len(reach) - MAX_ROOT_LINES
            text.append(f"... {more} more roots\n", style=self.style_of("label"))
        for summary in levels:
            row = len(text)
            text.append(f"L{summary.level} ", style=self.style_of("label"))
            text.append(f"{len(summary.pages):>6} ", style=self.style_of("page"))
            if summary.obsolete:
                text.append(f"({summary.obsolete} obsolete) ", style=self.style_of("obsolete"))
            unsync = sum(sp.unsync for sp in summary.pages)
            if unsync:
                text.append(f"({unsync} unsync{UNSYNC_MARK}) ", style=self.style_of("unsync"))
            room = self.content_size.width - (len(text) - row)
            for sp in _fitting(summary.pages, on_path, room):
                component = "path" if sp.seq in on_path else "page"
                if selected is not None and sp is selected:
                    component = "selected"
                elif zapping_now and sp.seq in zapping_now:
                    component = "mmio-stale"  # under the lock hold being replayed
                elif self._obsolete(sp):
                    component = "obsolete"
                elif sp.unsync:
                    component = "unsync"
                text.append(f"[{sp.gfn:#x}]", style=self.style_of(component))
                text.append(UNSYNC_MARK if sp.unsync else " ", style=self.style_of("unsync"))
            text.append("\n")
        if not levels:
            text.append(
                "no shadow pages: the next fault builds a root\n", style=self.style_of("label")
            )
        for note in notes or ():
            text.append(note + "\n", style=self.style_of("label"))
        if zapping:
            text.append(zapping, style=self.style_of("mmio-stale"))
        self.show_text(text)

    def _root_line(self, text: Text, reach: RootReach, on_path: set[int], valid_gen: int) -> None:
        """root gfn, its vCPUs, and the pages below it per level (networkx reach)."""
        root = reach.root
        component = "path" if root.seq in on_path else "page"
        if self._obsolete(root):
            component = "obsolete"
        vcpus = ",".join(map(str, reach.vcpus))
        text.append(f"root [{root.gfn:#x}]", style=self.style_of(component))
        text.append(
            f" count {root.root_count} vcpu {vcpus} reaches L4·L3·L2·L1 ",
            style=self.style_of("label"),
        )
        text.append("·".join(map(str, reach.per_level)), style=self.style_of("page"))
        shared = f" ({reach.shared} shared)" if reach.shared else ""
        text.append(f"{shared}\n", style=self.style_of("label"))


def _around(
    pages: tuple[KvmMmuPage, ...], on_path: set[int], count: int = PAGES_PER_LEVEL
) -> list[KvmMmuPage]:
    """Up to `count` pages, centred on the one on the path."""
    at = next((i for i, sp in enumerate(pages) if sp.seq in on_path), 0)
    start = max(0, min(at - count // 2, len(pages) - count))
    return list(pages[start : start + count])


def _fitting(pages: tuple[KvmMmuPage, ...], on_path: set[int], room: int) -> list[KvmMmuPage]:
    """The pages around the path whose chips fit in `room` columns (fewer chips rather
    than a level's row on two: the chips are a sample); all when the width is unknown."""
    for count in range(PAGES_PER_LEVEL, 0, -1):
        chosen = _around(pages, on_path, count)
        if room <= 0 or sum(len(f"[{sp.gfn:#x}]") + 1 for sp in chosen) <= room:
            return chosen
    return _around(pages, on_path, 1)


class SptGrid(MmuDrawing):
    """The 512 sptes of one page, 32 to a row; the fault's entry is marked."""

    SYMBOL = {"none": "·", "nonleaf": "▸", "leaf": "■", "large": "█", "mmio": "◆",
              "mmio-stale": "◇", "frozen": "✱", "unaccessed": "□"}  # fmt: skip

    _grid: tuple[list[SpteCell], int | None] | None = None

    def show(self, cells: list[SpteCell], marked: int | None) -> None:
        columns, gap = self._shape()
        text = Text(no_wrap=True)
        for cell in cells:
            component = "selected" if cell.index == marked else cell.state
            text.append(self.SYMBOL[cell.state], style=self.style_of(component))
            text.append("\n" if cell.index % columns == columns - 1 else gap)
        text.append(self.legend(), style=self.style_of("label"))
        self.show_text(text)
        self._grid = (cells, marked)

    def show_text(self, text: Text) -> None:
        self._grid = None
        super().show_text(text)

    def on_resize(self) -> None:
        """The grid's shape follows the panel (a scenario's caption changes its height)."""
        if self._grid is not None:
            self.show(*self._grid)

    def legend(self) -> str:
        """The legend on one row: its items one space apart when two do not fit."""
        width = self.content_size.width
        return LEGEND if not width or len(LEGEND) <= width else LEGEND.replace("  ", " ")

    def _shape(self) -> tuple[int, str]:
        """32 spaced cells a row when they fit (16 rows); when the panel is short, 64
        packed cells a row (8 rows); when it is narrow, 32 packed."""
        width, height = self.content_size
        rows_needed = len(range(0, 512, GRID_COLUMNS)) + 1  # and the legend
        if width >= 2 * GRID_COLUMNS - 1 and (height >= rows_needed or width < 64):
            return GRID_COLUMNS, " "
        return (64, "") if width >= 64 else (GRID_COLUMNS, "")

    def empty_text(self) -> Text:
        return Text(
            "the sptes of the page a fault walked through appear here\n\n" + self.legend(),
            style=self.style_of("label"),
        )


class MmuCounters(MmuDrawing):
    """mmu_valid_gen, the page budget, exits and RET_PF_* results, the last zap's holds.

    Taller than its share of the screen, it keeps the rows the scenario's caption names,
    then the first two (mmu_valid_gen, accesses / exits), then the last zap's lock holds
    (the bars beyond those that fit summed up in one row), then the rest from the top,
    and its bottom border says how many rows it left out."""

    KEPT_FIRST = 2  # mmu_valid_gen and accesses / exits, before the zap's holds
    MAX_HOLDS = 8

    _shown: tuple[list[tuple[str, str]], list[int], str] = ([], [], "")

    _fitted_for = Size(0, 0)

    def show(self, lines: list[tuple[str, str]], holds: list[int], caption: str = "") -> None:
        self._shown = (lines, holds, caption)
        self._fit()

    def render(self) -> Text:
        if self._fitted_for != self.content_size:
            refit_in_render(self, self._fit)  # laid out again since (a caption came, a panel grew)
        return super().render()

    def _fit(self) -> None:
        lines, holds, caption = self._shown
        self._fitted_for = self.content_size
        width, room = self.content_size
        label = self.style_of("label")
        rows = [Text.assemble((f"{name:<22}", label), value) for name, value in lines]
        named = [i for i, (name, _) in enumerate(lines) if names_in(name, caption)]
        first = [i for i in range(min(self.KEPT_FIRST, len(lines))) if i not in named]
        hold_rows = self._hold_rows(holds, width, room - len(named) - len(first))
        rows += hold_rows
        zap = list(range(len(lines), len(rows)))
        rest = [i for i in range(len(lines)) if i not in named and i not in first]
        kept, dropped = fit_rows(rows, width, room, named + first + zap + rest)
        text = Text("\n", no_wrap=True, overflow="ellipsis").join(rows[i] for i in kept)
        set_border_subtitle(self, more_rows(dropped))
        self.show_text(text)

    def _hold_rows(self, holds: list[int], width: int, room: int) -> list[Text]:
        """ "last zap" and one bar per lock hold, as many as `room` leaves (at least two),
        the others summed up in a last row."""
        if not holds:
            return []
        label, bar = self.style_of("label"), self.style_of("mmio-stale")
        shown = min(len(holds), self.MAX_HOLDS, max(room - 2, 2) if room > 0 else self.MAX_HOLDS)
        longest = max(1, min(40, (width or 47) - 7))  # "  197 " and the bar on one row
        rows = [Text("last zap, pages per mmu_lock hold", style=label)]
        for hold in holds[:shown]:
            rows.append(Text.assemble((f"{hold:>5} ", label), ("█" * min(hold, longest), bar)))
        if len(holds) > shown:
            rows.append(Text(f"  ... {len(holds) - shown} more holds", style=label))
        return rows


LEVEL_NAMES = {4: "PML4E", 3: "PDPTE", 2: "PDE", 1: "PTE"}
WALK_WIDTH = 36  # " PML4E 0x00000000dc001027 → 0xdc001": narrower, the ptes lose their zeros


class GuestPanel(MmuDrawing):
    """Shadow paging's extra work: the guest walk KVM just made, and the vtlb of the
    vCPU that faulted (seed 000, patch 7/7), its entries in as many columns as the panel
    has room for.  Under EPT, a note that the CPU walks the guest's tables itself.

    Its height follows its rows (up to the CSS max-height); shorter than them, it drops
    the last vtlb entries first (their count is in the vtlb's own line) and says so on
    its bottom border."""

    DEFAULT_CSS = """
    GuestPanel.-tdp { text-wrap: wrap; }
    """

    _shown: tuple[list[tuple[int, int]], str, list[tuple[int, int, str]], str] | None = None
    _full_height = 0

    def show_tdp(self) -> None:
        self._shown = None
        self.add_class("-tdp")
        set_border_subtitle(self, "")
        self.show_text(
            Text(
                "EPT on: the CPU walks the guest's page tables itself, so KVM "
                "never reads them and keeps no vtlb. p: shadow paging (EPT off)",
                style=self.style_of("label"),
            )
        )

    def show(
        self,
        walk: list[tuple[int, int]],
        walk_title: str,
        vtlb: list[tuple[int, int, str]],
        vtlb_title: str,
    ) -> None:
        """`walk`: (level, pte) read; `vtlb`: (page number, frame number, access)."""
        self.remove_class("-tdp")
        self._shown = (walk, walk_title, vtlb, vtlb_title)
        self._fit()

    _fitted_for = Size(0, 0)

    def render(self) -> Text:
        if self._shown is not None and self._fitted_for != self.content_size:
            refit_in_render(self, self._fit)  # laid out again since
        return super().render()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """Every row (`height: auto`), not only those that fit now."""
        if self._shown is None:
            return super().get_content_height(container, viewport, width)
        return sum(wrapped_height(row, width) for row in self._rows(width)[0])

    def _rows(self, width: int) -> tuple[list[Text], int]:
        """The rows at `width`, and the index of the first row of vtlb entries."""
        assert self._shown is not None
        walk, walk_title, vtlb, vtlb_title = self._shown
        label = self.style_of("label")
        rows = [Text(walk_title, style=label)]
        digits = "#018x" if not width or width >= WALK_WIDTH else "#x"  # narrow: unpadded
        for level, pte in walk:
            row = Text(f" {LEVEL_NAMES.get(level, f'L{level}'):<6}", style=label)
            if pte & 1:
                row.append(f"{pte:{digits}}", style=self.style_of("leaf"))
                row.append(f" → {pte >> 12 & (1 << 40) - 1:#x}")
            else:
                row.append(f"{pte:{digits}}", style=self.style_of("none"))
                row.append(" not present")
            rows.append(row)
        if not walk:
            rows.append(Text(" no guest walk yet", style=self.style_of("none")))
        rows.append(Text(vtlb_title, style=label))
        first = len(rows)
        entries = [(f"{page:#x}→{frame:#x}", access) for page, frame, access in vtlb]
        cell = max((len(e) + len(a) + 2 for e, a in entries), default=1)  # " e a"
        columns = max(1, (width or 44) // cell)
        for start in range(0, len(entries), columns):
            row = Text()
            for entry, access in entries[start : start + columns]:
                row.append(f" {entry} ", style=self.style_of("mmio"))
                row.append(f"{access}".ljust(cell - len(entry) - 2), style=label)
            row.rstrip()
            rows.append(row)
        return rows, first

    def _fit(self) -> None:
        self._fitted_for = self.content_size
        width, room = self.content_size
        rows, first = self._rows(width)
        full = sum(wrapped_height(row, width) for row in rows)
        if full != self._full_height:
            self._full_height = full
            self.refresh(layout=True)  # its height follows its rows
        kept, dropped = fit_rows(rows, width, room, skip=False)
        text = Text("\n", no_wrap=True, overflow="ellipsis").join(rows[i] for i in kept)
        left_out = sum(rows[i].plain.count("→") for i in range(first, len(rows)) if i not in kept)
        set_border_subtitle(self, more_rows(left_out if dropped else 0, "entries"))
        self.show_text(text)
