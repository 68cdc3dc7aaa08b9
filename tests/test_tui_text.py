"""No explanation is cut: at 120×40 and 200×60 every screen shows
each text panel's lines whole (wrapped where the panel is narrow), the memslots' names,
the titles of the panels and the header's play state; at 80×24 text may be cut where
there is no room, but no widget is drawn over another.

What is checked is the screen as drawn (the compositor's lines, what the SVG snapshots
show); what each panel was asked to show is only the expectation.
"""

from __future__ import annotations

import pytest
from mmuscope.tui.app import MmuscopeApp
from mmuscope.tui.widgets.events import CountersTable
from mmuscope.tui.widgets.key_bar import KeyBar
from mmuscope.tui.widgets.mmu_panels import MmuCounters
from mmuscope.tui.widgets.slot_table import SlotTable
from rich.text import Text
from textual.content import Content
from textual.geometry import Region
from textual.pilot import Pilot
from textual.scroll_view import ScrollView
from textual.widget import Widget
from textual.widgets import Static

from tests.test_tui_sizes import SCREENS, keys_for, screen_app
from tests.test_tui_sizes import deterministic as deterministic  # the same autouse fixture
from tests.tui_pilot import laid_out, screen_text

WIDE_SIZES = [(120, 40), (200, 60)]
STATES = {
    **SCREENS,
    "shadow": ("f2", "p", "p", *["n"] * 9),  # shadow paging (EPT off)
    "power-era": ("f5", "k", "n", "n"),  # an era with host keys: more counters
}
# The explanations users found cut, by screen: each must be on screen whole.
QUOTED = {
    "memslots": ("gfn >= base_gfn", "ram-1m-to-hole", "⏸ paused 4/s"),
    "tlb": ("2 VMs × 8 vCPUs on 8 pCPUs, slice 12 ms",),
    "rmaps": ("(PTE_LIST_EXT 14)", "cache lines a walk"),
    "mmu": ("⏸ paused 4/s",),
}


def words(text: str) -> str:
    return " ".join(text.split())


def plain_of(shown: object) -> str:
    if isinstance(shown, (Text, Content)):
        return shown.plain
    return str(shown) if isinstance(shown, str) else ""


# Lists whose last rows may fall below the panel, as kvm_stat's (the shadow MMU's
# kvm->arch has more counters than 40 rows hold); their rows are still checked whole.
TOP_ROWS_ONLY = (CountersTable, MmuCounters)


def text_widgets(app: MmuscopeApp) -> list[Widget]:
    """The visible widgets that draw text from one renderable (Static, the panels);
    line-API views (tables, the tree, the log) and the footer's key list are left out."""
    found = []
    for widget in app.screen.walk_children(Widget):
        if isinstance(widget, (ScrollView, KeyBar)) or widget.children:
            continue
        if widget.region.area and widget.display and widget.visible:
            found.append(widget)
    return found


def region_rows(lines: list[str], region: Region) -> list[str]:
    return [row[region.x : region.right] for row in lines[region.y : region.bottom]]


def region_text(lines: list[str], region: Region) -> str:
    return "\n".join(region_rows(lines, region))


def missing_lines(app: MmuscopeApp, lines: list[str]) -> list[str]:
    """Each text widget's rows (and border titles) that are not drawn whole in it.  A
    panel's rows are compared one to one (it wraps its own text); a Static's lines,
    which Textual wraps, must be in the words it draws."""
    missing = []
    for widget in text_widgets(app):
        drawn = region_rows(lines, widget.content_region)
        if isinstance(widget, Static):
            every = words("\n".join(drawn))
            wanted = plain_of(widget.visual).splitlines()
            missing += [f"{widget!r}: {w.strip()!r}" for w in wanted if words(w) not in every]
        else:
            for number, row in enumerate(plain_of(widget.render()).splitlines()):
                if number >= len(drawn):
                    if not isinstance(widget, TOP_ROWS_ONLY) and words(row):
                        missing.append(f"{widget!r} below its bottom: {row.strip()!r}")
                elif words(row) != words(drawn[number]):
                    missing.append(f"{widget!r}: {row.strip()!r} drawn {drawn[number]!r}")
        outer = widget.region
        for title, y in (
            (widget.border_title, outer.y),
            (widget.border_subtitle, outer.bottom - 1),
        ):
            wanted_title = words(Content.from_markup(title).plain) if title else ""
            border = words(region_text(lines, Region(outer.x, y, outer.width, 1)))
            if wanted_title and wanted_title not in border:
                missing.append(f"{widget!r} border: {wanted_title!r}")
    return missing


def app_for(name: str) -> MmuscopeApp:
    return screen_app({"shadow": "mmu", "power-era": "power"}.get(name, name))


async def show(pilot: Pilot[object], name: str) -> None:
    """The screen in the state of the size snapshots (tests/test_tui_sizes.py)."""
    keys = dict(SCREENS)
    keys[name] = STATES[name]
    await keys_for(name, keys)(pilot)


def cut_explanations(app: MmuscopeApp, name: str) -> list[str]:
    """What the screen cuts: a "…", a panel's row not drawn whole, a quoted explanation
    or (memslots) a slot's name not on screen whole."""
    lines = screen_text(app).splitlines()
    problems = [f"cut: {line.strip()!r}" for line in lines if "…" in line]
    problems += missing_lines(app, lines)
    shown = words(" ".join(lines))
    problems += [f"not whole: {q!r}" for q in QUOTED.get(name, ()) if q not in shown]
    if name == "memslots":
        table = app.screen.query_one(SlotTable)
        drawn = region_text(lines, table.content_region)
        names = [n for n in app.screen.explorer.names.values() if n]  # type: ignore[attr-defined]
        assert names
        problems += [f"memslot name cut: {n!r}" for n in names if n not in drawn]
    return [f"{app.size.width}x{app.size.height} {problem}" for problem in problems]


def visible_leaves(app: MmuscopeApp) -> list[tuple[Widget, Region]]:
    """Every drawn widget without children, with the part of it on screen."""
    leaves = []
    for widget, region, clip in laid_out(app.screen):
        if widget.children or not region.area:
            continue
        shown = region.intersection(clip)
        if shown.area:
            leaves.append((widget, shown))
    return leaves


def overlapping(app: MmuscopeApp) -> list[str]:
    leaves = visible_leaves(app)
    assert len(leaves) > 4
    found = []
    for number, (widget, region) in enumerate(leaves):
        for other, other_region in leaves[number + 1 :]:
            if widget in other.ancestors or other in widget.ancestors:
                continue
            overlap = region.intersection(other_region)
            if overlap.area:
                found.append(f"{app.size} {widget!r} and {other!r} overlap at {overlap}")
    return found


@pytest.mark.parametrize("name", STATES)
async def test_no_explanation_is_cut_and_nothing_overlaps(name: str) -> None:
    """One app per screen, resized: 120×40 and 200×60 cut nothing; at 80×24 text may
    be cut where there is no room, and at every size no widget covers another."""
    app = app_for(name)
    async with app.run_test(size=WIDE_SIZES[0]) as pilot:
        await show(pilot, name)
        problems = cut_explanations(app, name) + overlapping(app)
        for width, height in [*WIDE_SIZES[1:], (80, 24)]:
            await pilot.resize_terminal(width, height)
            await pilot.pause()
            await pilot.pause()  # the panels' own re-layout after the resize
            if width >= 120:
                problems += cut_explanations(app, name)
            problems += overlapping(app)
        assert not problems, "\n".join(problems)


async def test_the_kernel_comparison_puts_a_long_name_on_its_own_row() -> None:
    """The `mmuscope kvm` side panel (it needs a guest on /dev/kvm, so here alone in a
    narrow app): a quantity's name too long for the column is shown whole."""
    from mmuscope.tui.screens.kvm_replay import ComparePanel
    from textual.app import App, ComposeResult

    long_name = "kvm_mmu_prepare_zap_page calls under mmu_lock"
    rows = [
        {"what": "pages_4k (stat)", "kernel": 8, "model": 8, "explained": None},
        {"what": long_name, "kernel": 12, "model": 11, "explained": "batching"},
    ]

    class Side(App[None]):
        CSS = "ComparePanel { width: 40; }"

        def compose(self) -> ComposeResult:
            yield ComparePanel()

    app = Side()
    async with app.run_test(size=(60, 12)) as pilot:
        app.query_one(ComparePanel).show(rows)
        await pilot.pause()
        lines = screen_text(app).splitlines()  # type: ignore[arg-type]
        assert not missing_lines(app, lines)  # type: ignore[arg-type]
        shown = words(region_text(lines, app.query_one(ComparePanel).content_region))
        assert f"{long_name} 12 11 ≠" in shown and "pages_4k 8 8 =" in shown  # wrapped whole
