"""The POWER screen's drawings: a window of HPT groups around the fault's primary and
secondary groups (8 slots each, coloured by what they hold, the search's probes marked
one by one), and the counters of the classification with the era's key trade-off.

Colours come from component classes over the theme's variables: a guest HPTE is
`slot-ram`, an absent one `slot-rom`, MMIO (key 31) `node-cache-hit`, the thread's
host-swapped key 30 `slot-dirty`, an empty slot `node-empty`; the search's examined slots
`node-path`, the slot being examined `node-compare`, the slot found `node-hit`.
"""

from __future__ import annotations

from mmuscope.engine.ppc.faults import EMULATED, FORWARDED, FaultRecord, Phase
from mmuscope.engine.ppc.hpt import HashPageTable
from mmuscope.engine.ppc.hpte import ABSENT, EMPTY, HPTES_PER_GROUP, MMIO, SWAPPED, VALID
from mmuscope.engine.ppc.keys import PpcEra
from mmuscope.engine.ppc.machine import PpcCounters
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from .fit import fit_rows, more_rows, names_in, refit_in_render, show_subtitle
from .wrap import WrapCache, wrapped_height

GLYPH = {VALID: "■", ABSENT: "□", MMIO: "◆", SWAPPED: "▣", EMPTY: "·"}
LEGEND = "■ guest  □ absent  ◆ MMIO k31  ▣ swapped k30  · empty"
OUTCOME_STYLE = {FORWARDED: "forwarded", EMULATED: "emulated"}


class PowerDrawing(Widget):
    """Shared styling for the POWER panels (component classes → Rich styles)."""

    COMPONENT_CLASSES = {
        "power--valid",
        "power--absent",
        "power--mmio",
        "power--swapped",
        "power--empty",
        "power--visited",
        "power--probe",
        "power--found",
        "power--group",
        "power--current",
        "power--label",
        "power--forwarded",
        "power--emulated",
        "power--paged",
        "power--warning",
    }

    DEFAULT_CSS = """
    PowerDrawing { background: $surface; padding: 0 1; border: round $panel;
        border-title-color: $primary; text-wrap: nowrap; text-overflow: ellipsis; }
    PowerDrawing > .power--valid { color: $slot-ram; }
    PowerDrawing > .power--absent { color: $slot-rom; }
    PowerDrawing > .power--mmio { color: $node-cache-hit; text-style: bold; }
    PowerDrawing > .power--swapped { color: $slot-dirty; text-style: bold; }
    PowerDrawing > .power--empty { color: $node-empty; }
    PowerDrawing > .power--visited { color: $background; background: $node-path; }
    PowerDrawing > .power--probe { color: $background; background: $node-compare;
        text-style: bold; }
    PowerDrawing > .power--found { color: $background; background: $node-hit;
        text-style: bold; }
    PowerDrawing > .power--group { color: $node-idle; }
    PowerDrawing > .power--current { color: $node-path; text-style: bold; }
    PowerDrawing > .power--label { color: $text-muted; }
    PowerDrawing > .power--forwarded { color: $success; text-style: bold; }
    PowerDrawing > .power--emulated { color: $node-cache-hit; text-style: bold; }
    PowerDrawing > .power--paged { color: $warning; text-style: bold; }
    PowerDrawing > .power--warning { color: $warning; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.content = Text()
        self._styles: dict[tuple[str, str], Style] = {}
        self._wrapped = WrapCache()

    def style_of(self, component: str) -> Style:
        """The component's Rich style, cached until the theme or the CSS changes."""
        key = (self.app.theme, component)
        style = self._styles.get(key)
        if style is None:
            style = self._styles[key] = self.get_component_rich_style(f"power--{component}")
        return style

    def notify_style_update(self) -> None:
        self._styles.clear()
        super().notify_style_update()

    def render(self) -> Text:
        """Lines too long for the panel wrap under their value column."""
        return self._wrapped.wrap(self.content, self.content_size.width)

    def show_text(self, text: Text) -> None:
        if text == self.content:
            return  # no repaint for an unchanged panel (most frames between two faults)
        before = self._rows(self.content)
        self.content = text
        self.refresh(layout=self._rows(text) != before)  # an auto-height panel grows

    def _rows(self, text: Text) -> int:
        """The rows `text` takes wrapped, for a panel whose height follows its text."""
        height = self.styles.height
        if height is None or not height.is_auto:
            return 0
        return wrapped_height(text, self.content_size.width)


class HptGroups(PowerDrawing):
    """Two windows of groups: around the fault's primary group and its secondary."""

    _shown: tuple[HashPageTable, FaultRecord | None, list[Phase], int] | None = None
    _fitted_for = 0  # the height the windows were chosen for

    def on_resize(self) -> None:
        """The windows hold as many groups as the panel's height has rows for (a
        scenario's caption changes it)."""
        if self._shown is not None:
            self.show(*self._shown)

    def render(self) -> Text:
        if self._shown is not None and self._fitted_for != self.content_region.height:
            self.show(*self._shown)  # laid out again before the resize event came
        return super().render()

    def show(
        self, hpt: HashPageTable, record: FaultRecord | None, phases: list[Phase], shown: int
    ) -> None:
        self._shown = (hpt, record, phases, shown)
        self._fitted_for = self.content_region.height
        text = Text(no_wrap=True, overflow="ellipsis")
        width, height = self.content_region.size
        legend = wrapped_height(Text(LEGEND), width) if width else 1
        rows = max(1, (height - 2 - legend) // 2) if self.is_mounted else 3
        with_legend = not self.is_mounted or 2 + 2 * rows + legend <= height
        if record is None:
            text.append("no fault yet: space plays, s steps, n runs to the next fault\n",
                        style=self.style_of("label"))  # fmt: skip
            for group in hpt.window(0, rows):
                self._row(text, hpt, group, tuple(hpt.kinds_of(group)), {}, -1, False)
            text.append(LEGEND if with_legend else "", style=self.style_of("label"))
            text.rstrip()
            self.show_text(text)
            return
        revealed = phases[:shown]
        done = bool(revealed) and revealed[-1].what == "outcome"
        marks = {p.slot: n for n, p in enumerate(revealed) if p.what == "probe"}
        current = revealed[-1].slot if revealed and revealed[-1].what == "probe" else -1
        found = record.slot if done or record.slot in marks else -1
        primary, secondary = hpt.groups_of(record.vpn)
        for number, (name, group) in enumerate((("primary", primary), ("secondary", secondary))):
            how = "(vsid ^ page) & mask" if number == 0 else f"primary ^ {hpt.mask:#x}"
            head = f"{name} group {group:#x} = {how}"
            if width and len(head) > width:  # narrow: the hash on the border's legend
                head = f"{name} group {group:#x}"
            text.append(f"{head}\n", style=self.style_of("label"))
            for row in hpt.window(group, rows):
                kinds = self._kinds(hpt, record, row, (primary, secondary), done)
                self._row(text, hpt, row, kinds, marks, current, row == group, found)
        text.append(LEGEND if with_legend else "", style=self.style_of("label"))
        text.rstrip()
        note = "" if with_legend else more_rows(legend)
        show_subtitle(self, note)
        self.show_text(text)

    @staticmethod
    def _kinds(
        hpt: HashPageTable, record: FaultRecord, group: int, searched: tuple[int, int], done: bool
    ) -> tuple[str, ...]:
        """A searched group as the fault found it until the outcome shows, then as now."""
        if record.groups and not done and group in searched:
            return record.groups[searched.index(group)]
        return tuple(hpt.kinds_of(group))

    def _row(
        self,
        text: Text,
        hpt: HashPageTable,
        group: int,
        kinds: tuple[str, ...],
        marks: dict[int, int],
        current: int,
        searched: bool,
        found: int = -1,
    ) -> None:
        text.append("▶" if searched else " ", style=self.style_of("current"))
        text.append(f"{group:#06x} ", style=self.style_of("current" if searched else "group"))
        for slot, kind in zip(hpt.group_slots(group), kinds, strict=True):
            style = kind
            if slot == found:
                style = "found"
            elif slot == current:
                style = "probe"
            elif slot in marks:
                style = "visited"
            text.append(f" {GLYPH[kind]} ", style=self.style_of(style))
        used = sum(1 for kind in kinds if kind != EMPTY)
        text.append(f" {used}/{HPTES_PER_GROUP}\n", style=self.style_of("label"))


class PowerCounters(PowerDrawing):
    """The classification's counters, what the keys saved, and the era's key trade-off.

    Shorter than its rows (80×24, a scenario's caption), it keeps the rows the caption
    names, the era, the fault classes and the last fault's verdict, then the others from
    the top, and says on its bottom border how many it left out (tui/widgets/fit.py)."""

    _every: list[Text] = []
    _order: list[int] = []
    _fitted_for = Size(0, 0)

    def show(
        self,
        era: PpcEra,
        c: PpcCounters,
        record: FaultRecord | None,
        done: bool,
        caption: str = "",
    ) -> None:
        label = self.style_of("label")
        rows = [Text(era.name, style=self.style_of("current")), Text(era.summary, style=label)]
        lines = [
            ("faults (HDSI)", c.faults, ""),
            (" forwarded", c.forwarded, "forwarded"),
            (" MMIO emulated", c.emulated, "emulated"),
            (" paged in", c.paged_in, "paged"),
            ("NO_HPTE / KEYFAULT", f"{c.no_hpte}/{c.keyfaults}", ""),
            ("hash searches", c.searches, ""),
            ("HPTEs examined", c.hptes_examined, ""),
            (" per fault", f"{c.hptes_examined / c.faults:.2f}" if c.faults else "-", ""),
            ("saved searches", c.saved_searches, "forwarded" if c.saved_searches else ""),
            ("MMIO cache hits", c.mmio_cache_hits, ""),
        ]
        for name, value, style in lines:
            rows.append(Text.assemble(
                (f"{name:<19}", label), (f"{value!s:>10}", self.style_of(style) if style else "")
            ))  # fmt: skip
        named = [2 + i for i, (name, _, _) in enumerate(lines) if names_in(name, caption)]
        keys = era.guest_keys
        rows.append(
            Text.assemble((f"{'guest keys':<19}", label), f"{keys[0]}-{keys[-1]} ({len(keys)})")
        )
        for key in sorted(era.host_keys):
            rows.append(Text(f"key {key}: the host's, denied", style=self.style_of("warning")))
        if not era.host_keys:
            rows.append(Text("keys 30, 31: the guest's own", style=label))
        verdict = []
        if record is not None and done:
            verdict = [len(rows)]
            rows.append(Text(self._verdict(record), style=self.style_of(_outcome_style(record))))
        first = [*named, 0, *(i for i in range(2, 7) if i not in named), *verdict]
        self._every = rows
        self._order = [*first, *(i for i in range(len(rows)) if i not in first)]
        self._fit()

    def render(self) -> Text:
        if self._every and self._fitted_for != self.content_size:
            refit_in_render(self, self._fit)  # laid out again (a caption came or went)
        return super().render()

    def _fit(self) -> None:
        """Every row where the panel's height follows them; else those that fit."""
        self._fitted_for = self.content_size
        width, room = self.content_size
        height = self.styles.height
        if height is not None and height.is_auto:
            room = 0  # as tall as its rows (up to its max-height): all of them
        kept, dropped = fit_rows(self._every, width, room, self._order)
        note = more_rows(dropped)
        show_subtitle(self, note)
        self.show_text(
            Text("\n", no_wrap=True, overflow="ellipsis").join(self._every[i] for i in kept)
        )

    @staticmethod
    def _verdict(record: FaultRecord) -> str:
        searched = f"{record.examined} HPTEs" if record.search is not None else "no search"
        return f"#{record.seq}: {record.outcome.replace('_', ' ')}, {searched}"


class FaultSteps(PowerDrawing):
    """The handler's path for the fault on show, revealed with the animation: the exit,
    the key check or `kvmppc_hpte_hv_fault()`'s search group by group, the outcome, and
    what the guest did after a forwarded fault."""

    def show(self, record: FaultRecord | None, phases: list[Phase], shown: int, after: str) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        if record is None:
            text.append("the handler's path appears here", style=self.style_of("label"))
            self.show_text(text)
            return
        revealed = phases[:shown]
        probes = [p for p in revealed if p.what == "probe"]
        for phase in revealed:
            if phase.what == "fault":
                why = "DSISR_KEYFAULT" if record.keyfault else "DSISR_NOHPTE"
                text.append(f"kvmppc_hdsi: {why}\n", style=self.style_of("current"))
            elif phase.what in ("key", "cache"):
                text.append(f" {phase.text}\n", style=self.style_of("label"))
            elif phase.what == "probe" and phase is probes[0]:
                valid = "V" if record.keyfault else "V|ABSENT"
                text.append(f" kvmppc_hv_find_lock_hpte({valid})\n")
                self._groups(text, probes)
            elif phase.what == "outcome":
                text.append(f" → {phase.text}\n", style=self.style_of(_outcome_style(record)))
                if after:
                    text.append(f" {after}\n", style=self.style_of("label"))
        self.show_text(text)

    def _groups(self, text: Text, probes: list[Phase]) -> None:
        for number, name in enumerate(("primary", "secondary")):
            mine = probes[number * HPTES_PER_GROUP : (number + 1) * HPTES_PER_GROUP]
            if not mine:
                continue
            hit = any(p.match for p in mine)
            searched = len(mine) == HPTES_PER_GROUP
            verdict = "match" if hit else ("no match" if searched else "searching")
            text.append(f"  {name}: {len(mine)}/8 examined, {verdict}\n",
                        style=self.style_of("found" if hit else "label"))  # fmt: skip


def _outcome_style(record: FaultRecord) -> str:
    return OUTCOME_STYLE.get(record.outcome, "paged")
