"""The TLB screen's drawings (the PV-flush thread): one lane per vCPU of the VM under
study over a scrolling time axis, the pCPUs below it when there is room, and a side panel
with the protocol, the counters and the flush being followed.

A lane cell is the state the vCPU spent most of the column in: █ running, ▓ spinning in
its own flush, ▒ (red) spinning while the flush waits on a preempted vCPU, ░ preempted
(runnable, descheduled), ▁ halted: one glyph per meaning, legible without colour.
Marks replace the glyph: ⚑ a flush-on-enter flag, ✓ an IPI
acknowledged late, at the next VM entry.  The followed flush is drawn on top: ● the
sender where it started, ↓ each IPI'd target and ⚑ each flagged one in that column, ◆
where each target acknowledged.  Colours come from component classes over theme
variables.
"""

from __future__ import annotations

from mmuscope.engine.tlbflush.lanes import LaneCell, LaneHistory
from mmuscope.engine.tlbflush.vcpu import Flush
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from .fit import fit_rows, more_rows, names_in, refit_in_render, show_subtitle
from .wrap import WrapCache

GLYPHS = ("█", "▓", "░", "▁")
WAITING = "▒"  # a spinning vCPU whose flush waits on a preempted one
STATE_CLASSES = ("running", "spinning", "preempted", "halted")
LABEL_WIDTH = 7  # "vcpu0  "
LEGEND = (
    ("█", "running", "running"),
    ("▓", "spinning", "spinning"),
    (WAITING, "waiting on preempted", "waiting"),
    ("░", "preempted", "preempted"),
    ("▁", "halted", "halted"),
    ("⚑", "flag", "mark"),
    ("✓", "late ack", "mark"),
    ("●↓◆", "followed flush", "flush"),
)


class TlbDrawing(Widget):
    """Shared styling (component classes → Rich styles)."""

    COMPONENT_CLASSES = {
        "tlb--running",
        "tlb--spinning",
        "tlb--waiting",
        "tlb--preempted",
        "tlb--halted",
        "tlb--mark",
        "tlb--flush",
        "tlb--label",
        "tlb--studied",
        "tlb--other",
        "tlb--idle",
        "tlb--title",
    }

    DEFAULT_CSS = """
    TlbDrawing { background: $surface; padding: 0 1; border: round $panel;
        border-title-color: $primary; text-wrap: nowrap; text-overflow: ellipsis; }
    TlbDrawing > .tlb--running { color: $success; }
    TlbDrawing > .tlb--spinning { color: $warning; }
    TlbDrawing > .tlb--waiting { color: $error; text-style: bold; }
    TlbDrawing > .tlb--preempted { color: $text-muted; }
    TlbDrawing > .tlb--halted { color: $slot-ram; }
    TlbDrawing > .tlb--mark { color: $node-cache-hit; text-style: bold; }
    TlbDrawing > .tlb--flush { color: $edge-path; text-style: bold; }
    TlbDrawing > .tlb--label { color: $text-muted; }
    TlbDrawing > .tlb--studied { color: $node-path; text-style: bold; }
    TlbDrawing > .tlb--other { color: $node-idle; }
    TlbDrawing > .tlb--idle { color: $node-empty; }
    TlbDrawing > .tlb--title { color: $primary; text-style: bold; }
    """

    def style_of(self, component: str) -> Style:
        return self.get_component_rich_style(f"tlb--{component}")


class TlbLanes(TlbDrawing):
    """The lanes, redrawn from the history at whatever size the widget has."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.history: LaneHistory | None = None
        self.flush: Flush | None = None

    def show(self, history: LaneHistory, flush: Flush | None) -> None:
        self.history = history
        self.flush = flush
        self.refresh()

    def visible_columns(self) -> int:
        return max(1, self.content_region.width - LABEL_WIDTH)

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="crop")
        history = self.history
        if history is None:
            return text
        width = self.visible_columns()
        first = max(0, len(history.columns) - width)
        columns = list(history.columns)[first:]
        self._axis(text, history, first, width)
        overlay = self._overlay(history, first)
        for lane in range(history.lanes):
            text.append(f"vcpu{lane:<3}", style=self.style_of("label"))
            for x, column in enumerate(columns):
                glyph, style = self._cell(column[lane], overlay.get((lane, x)))
                text.append(glyph, style=self.style_of(style))
            text.append("\n")
        rows_left = self.content_region.height - history.lanes - 1
        if rows_left >= history.sim.cfg.pcpus + 3:
            self._pcpus(text, history, first)
            rows_left -= history.sim.cfg.pcpus + 1
        if rows_left > 0:
            self._legend(text, self.content_region.width, rows_left)
        text.rstrip()
        note = more_rows(1) if rows_left <= 0 else ""  # the legend, left out for the lanes

        def note_legend() -> None:
            show_subtitle(self, note)

        refit_in_render(self, note_legend)
        return text

    def _axis(self, text: Text, history: LaneHistory, first: int, width: int) -> None:
        """`ms` marks every 8 columns, at the time each column starts."""
        starts = list(history.starts)[first:]
        line = [" "] * width
        for x in range(0, len(starts), 8):
            label = f"|{starts[x] / 1e6:.0f}ms"
            if x + len(label) <= width:
                line[x : x + len(label)] = label
        text.append(" " * LABEL_WIDTH + "".join(line).rstrip() + "\n", style=self.style_of("label"))

    def _cell(self, cell: LaneCell, overlay: str | None) -> tuple[str, str]:
        if overlay is not None:
            return overlay, "flush"
        if cell.mark:
            return cell.mark, "mark"
        if cell.waiting:
            return WAITING, "waiting"
        return GLYPHS[cell.state], STATE_CLASSES[cell.state]

    def _overlay(self, history: LaneHistory, first: int) -> dict[tuple[int, int], str]:
        """The followed flush: where it started, and where each target answered."""
        marks: dict[tuple[int, int], str] = {}
        flush = self.flush
        if flush is None:
            return marks
        n = history.lanes
        start = history.column_at(flush.start)
        if start is not None and start >= first:
            for gid in flush.ipis:
                marks[(gid % n, start - first)] = "↓"
            for gid in flush.flagged:
                marks[(gid % n, start - first)] = "⚑"
            marks[(flush.sender % n, start - first)] = "●"
        for gid, (at, how) in flush.acks.items():
            column = history.column_at(at)
            if column is not None and column >= first and how != "flag":
                marks.setdefault((gid % n, column - first), "◆")
        return marks

    def _pcpus(self, text: Text, history: LaneHistory, first: int) -> None:
        text.append("pCPUs: the VM running there (· idle)\n", style=self.style_of("label"))
        for pcpu in range(history.sim.cfg.pcpus):
            text.append(f"pcpu{pcpu:<3}", style=self.style_of("label"))
            for column in list(history.pcpus)[first:]:
                vm = column[pcpu]
                if vm is None:
                    text.append("·", style=self.style_of("idle"))
                else:
                    style = "studied" if vm == history.vm else "other"
                    text.append(str(vm % 10), style=self.style_of(style))
            text.append("\n")

    def _legend(self, text: Text, width: int, rows: int) -> None:
        line_width = 0
        lines = 1
        for glyph, name, style in LEGEND:
            item = len(glyph) + len(name) + 3
            if line_width and line_width + item > width:
                if lines >= rows:
                    return
                text.append("\n")
                line_width, lines = 0, lines + 1
            text.append(glyph, style=self.style_of(style))
            text.append(f" {name}  ", style=self.style_of("label"))
            line_width += item


class TlbSide(TlbDrawing):
    """The protocol, the run's counters, and the followed flush's targets.

    Taller than its share of the screen (80×24, a long caption), it keeps the protocol's
    name and records/s, the counters the caption names and the followed flush with its
    targets, then the other rows from the top, and its bottom border says how many it
    left out."""

    _shown: tuple[list[Text], list[int]] = ([], [])
    _fitted_for = Size(0, 0)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.content = Text()
        self._wrapped = WrapCache()

    def render(self) -> Text:
        if self._fitted_for != self.content_size:
            refit_in_render(self, self._fit)  # laid out again since the rows were chosen
        return self._wrapped.wrap(self.content, self.content_size.width)

    def show(
        self,
        heading: list[tuple[str, str]],
        rows: list[tuple[str, str]],
        flush_lines: list[tuple[str, str]],
        caption: str = "",
    ) -> None:
        lines = [Text(value, style=self.style_of(style)) for value, style in heading]
        label = self.style_of("label")
        counters = [Text.assemble((f"{name:<19}", label), value) for name, value in rows]
        named = [len(lines) + i for i, (name, _) in enumerate(rows) if names_in(name, caption)]
        lines += counters
        flush = list(range(len(lines) + 1, len(lines) + 1 + len(flush_lines)))
        if flush_lines:
            lines.append(Text())  # a blank row before the flush, the first to go
            lines += [Text(value, style=self.style_of(style)) for value, style in flush_lines]
        first = [0] if lines else []  # the protocol's name
        if rows and len(heading) not in named:
            first.append(len(heading))  # and the score, records/s
        rest = [i for i in range(len(lines)) if i not in {*first, *named, *flush}]
        blank = [i for i in rest if not lines[i].plain]
        order = first + named + flush + [i for i in rest if i not in blank] + blank
        self._shown = (lines, order)
        self._fit()

    def _fit(self) -> None:
        self._fitted_for = self.content_size
        lines, order = self._shown
        width, room = self.content_size
        kept, dropped = fit_rows(lines, width, room, order)
        note = more_rows(dropped)
        show_subtitle(self, note)
        self.content = Text("\n", no_wrap=True, overflow="ellipsis").join(lines[i] for i in kept)
        self.refresh()
