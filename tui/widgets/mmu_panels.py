"""The shadow-MMU screen's drawings: shadow pages by level with the fault's path, one
page's 512 sptes as a grid, and the MMU's counters with the last zap's lock holds.

Colours come from component classes over the theme's variables (the node colours of the
memslot drawing, reused: a page on the path is `node-path`, an MMIO spte
`node-cache-hit`, a stale one `node-miss`, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mmuscope.engine.mmu.mmu_pages import KvmMmuPage
from mmuscope.engine.mmu.views import LevelSummary, RootReach
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from .fit import (
    fit_rows,
    more_rows,
    names_in,
    refit_in_render,
    show_subtitle,
    table_row,
)
from .wrap import WrapCache, wrapped_height

PAGES_PER_LEVEL = 6  # chips shown per level around the path
MAX_ROOT_LINES = 3
LABEL_COLUMN = 22  # the counters' names ("unsync/pte_wr/flooded" and a space)
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


class FittedRows(MmuDrawing):
    """A drawing of rows in an order of importance (`show_rows`): the rows that fit its
    height, in their own order, and the others counted on the bottom border ("+N more
    rows", tui/widgets/fit.py); chosen again when it is laid out at another size."""

    _rows: list[Text] = []
    _order: list[int] = []
    _fitted_for = Size(0, 0)

    def show_rows(self, rows: list[Text], order: list[int]) -> None:
        """Draw the `rows` that fit, taken most important first in `order`."""
        self._rows, self._order = rows, order
        self._fit()

    @property
    def all_rows(self) -> str:
        """Every row, those the panel's height leaves out too."""
        return "\n".join(row.plain for row in self._rows)

    def render(self) -> Text:
        if self._rows and self._fitted_for != self.content_size:
            refit_in_render(self, self._fit)  # laid out again (a resize, a caption)
        return super().render()

    def _fit(self) -> None:
        """The rows that fit, the others counted on the bottom border."""
        self._fitted_for = self.content_size
        width, room = self.content_size
        kept, dropped = fit_rows(self._rows, width, room, self._order)
        note = more_rows(dropped)
        show_subtitle(self, note)
        self.show_text(
            Text("\n", no_wrap=True, overflow="ellipsis").join(self._rows[i] for i in kept)
        )


class PageLevels(FittedRows):
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
        held_roots: Sequence[KvmMmuPage] = (),
    ) -> None:
        """`is_obsolete`: the MMU's own test (default: another generation or invalid);
        `notes`: extra lines (the TDP MMU's roots and RCU-pending tables); `held_roots`:
        zapped roots a vCPU still runs on, off active_mmu_pages but still accounted in
        n_used_mmu_pages until the last one lets go (`mmu_free_root_page()`, 6.18 mmu.c)."""
        on_path = {sp.seq for sp in path}
        self._obsolete = is_obsolete or (
            lambda sp: sp.mmu_valid_gen != valid_gen or bool(sp.role.invalid)
        )
        label = self.style_of("label")
        roots = [self._root_line(line, on_path) for line in (reach or [])[:MAX_ROOT_LINES]]
        if reach and len(reach) > MAX_ROOT_LINES:
            roots.append(Text(f"... {len(reach) - MAX_ROOT_LINES} more roots", style=label))
        rows = [self._level_row(s, on_path, selected, zapping_now) for s in levels]
        held = len(held_roots or ())
        if not levels and held:  # zapped, still counted in 'pages used' (mmu_free_root_page)
            roots_word = "root" if held == 1 else "roots"
            words = f"no active pages; {held} zapped {roots_word} still in use ('pages used')"
            rows.append(Text(words, style=label))
        elif not levels:
            rows.append(Text("no shadow pages: the next fault builds a root", style=label))
        notes_rows = [Text(note, style=label) for note in notes or ()]
        zap = [Text(zapping, style=self.style_of("mmio-stale"))] if zapping else []
        every = [*roots, *rows, *notes_rows, *zap]
        # kept first: the zap under way, the first root's reach, the levels from the
        # leaves up, the notes (the TDP MMU's roots, RCU), the other roots
        first = len(roots)
        after = first + len(rows)
        order = [
            *range(after + len(notes_rows), len(every)),
            *range(min(first, 1)),
            *reversed(range(first, after)),
            *range(after, after + len(notes_rows)),
            *range(1, first),
        ]
        self.show_rows(every, order)

    def _level_row(
        self,
        summary: LevelSummary,
        on_path: set[int],
        selected: KvmMmuPage | None,
        zapping_now: set[int] | None,
    ) -> Text:
        """`L1   12 (2 obsolete) [0x..] [0x..]`: as many page chips as fit the width."""
        text = Text()
        text.append(f"L{summary.level} ", style=self.style_of("label"))
        text.append(f"{len(summary.pages):>6} ", style=self.style_of("page"))
        if summary.obsolete:
            text.append(f"({summary.obsolete} obsolete) ", style=self.style_of("obsolete"))
        unsync = sum(sp.unsync for sp in summary.pages)
        if unsync:
            text.append(f"({unsync} unsync{UNSYNC_MARK}) ", style=self.style_of("unsync"))
        room = self.content_size.width - len(text)
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
        text.rstrip()
        return text

    def _root_line(self, reach: RootReach, on_path: set[int]) -> Text:
        """root gfn, its vCPUs, and the pages below it per level (networkx reach); where
        that does not fit the width, without the words `reaches L4·L3·L2·L1`."""
        root = reach.root
        component = "path" if root.seq in on_path else "page"
        if self._obsolete(root):
            component = "obsolete"
        label = self.style_of("label")
        vcpus = ",".join(map(str, reach.vcpus))
        per_level = "·".join(map(str, reach.per_level))
        shared = f" ({reach.shared} shared)" if reach.shared else ""
        head = f" count {root.root_count} vcpu {vcpus}"
        words = f"{head} reaches L4·L3·L2·L1 "
        width = self.content_size.width
        if width and len(f"root [{root.gfn:#x}]{words}{per_level}{shared}") > width:
            words = f"{head}: "
        return Text.assemble(
            (f"root [{root.gfn:#x}]", self.style_of(component)),
            (words, label),
            (per_level, self.style_of("page")),
            (shared, label),
        )


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
        rows = [table_row(name, value, width, LABEL_COLUMN, label) for name, value in lines]
        named = [i for i, (name, _) in enumerate(lines) if names_in(name, caption)]
        first = [i for i in range(min(self.KEPT_FIRST, len(lines))) if i not in named]
        hold_rows = self._hold_rows(holds, width, room - len(named) - len(first))
        rows += hold_rows
        zap = list(range(len(lines), len(rows)))
        rest = [i for i in range(len(lines)) if i not in named and i not in first]
        kept, dropped = fit_rows(rows, width, room, named + first + zap + rest)
        text = Text("\n", no_wrap=True, overflow="ellipsis").join(rows[i] for i in kept)
        note = more_rows(dropped)
        show_subtitle(self, note)
        self.show_text(text)

    def _hold_rows(self, holds: list[int], width: int, room: int) -> list[Text]:
        """ "last zap" and one bar per lock hold, as many as `room` leaves (at least two),
        the others summed up in a last row."""
        if not holds:
            return []
        label, bar = self.style_of("label"), self.style_of("mmio-stale")
        shown = min(len(holds), self.MAX_HOLDS, max(room - 2, 2) if room > 0 else self.MAX_HOLDS)
        longest = max(1, min(40, (width or 47) - 7))  # "  197 " and the bar on one row
        head = "last zap, pages per mmu_lock hold"
        rows = [
            Text(
                head if not width or len(head) <= width else "last zap, pages per hold", style=label
            )
        ]
        for hold in holds[:shown]:
            rows.append(Text.assemble((f"{hold:>5} ", label), ("█" * min(hold, longest), bar)))
        if len(holds) > shown:
            more = len(holds) - shown
            rows.append(Text(f"  ... {more} more hold{'s' if more != 1 else ''}", style=label))
        return rows


EPT_NOTE = (
    "EPT on: the CPU walks the guest's page tables itself, so KVM never reads them and "
    "keeps no vtlb. p: shadow paging (EPT off)"
)
EPT_NOTE_SHORT = "EPT on: CPU walks, no vtlb (p)"  # one row at 80 columns
SHORT_SCREEN = 34  # tui/screens/base.py's TALL: below it, the short note

LEVEL_NAMES = {4: "PML4E", 3: "PDPTE", 2: "PDE", 1: "PTE"}
WALK_WIDTH = 36  # " PML4E 0x00000000dc001027 → 0xdc001": narrower, the ptes lose their zeros


class GuestPanel(MmuDrawing):
    """Shadow paging's extra work: the guest walk KVM just made, and the vtlb of the
    vCPU that faulted (the memslot-search thread, patch 7/7), its entries in as many
    columns as the panel has room for.  Under EPT, a note that the CPU walks the guest's
    tables itself.

    Its height follows its rows (up to the CSS max-height); shorter than them, it drops
    the last vtlb entries first (their count is in the vtlb's own line) and says so on
    its bottom border."""

    DEFAULT_CSS = """
    GuestPanel.-tdp { text-wrap: wrap; }
    """

    _shown: tuple[list[tuple[int, int]], str, list[tuple[int, int, str]], str] | None = None
    _full_height = 0

    def show_tdp(self) -> None:
        """The note that EPT needs neither (shorter on a short terminal, where the
        counters beside it need the rows more)."""
        self._shown = None
        self.add_class("-tdp")
        show_subtitle(self, "")
        short = self.app.size.height < SHORT_SCREEN
        self.show_text(Text(EPT_NOTE_SHORT if short else EPT_NOTE, style=self.style_of("label")))

    def on_resize(self) -> None:
        if self.has_class("-tdp"):
            self.show_tdp()  # the terminal grew or shrank past SHORT_SCREEN

    def drawn_rows(self, width: int) -> int:
        """The rows it draws now at `width` (its content height is every row)."""
        return wrapped_height(self.render(), width)

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
        if any(i not in kept for i in range(first)):  # the walk's own rows too
            note = more_rows(dropped)
            show_subtitle(self, note)
        else:
            note = more_rows(left_out if dropped else 0, "entries")
            show_subtitle(self, note)
        self.show_text(text)
