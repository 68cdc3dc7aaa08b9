"""Shared helpers of the Pilot tests of the explorer's keys (`tests/test_tui_keys_*.py`).

Apps come from `tui.app.make_app` through `build`, paused (deterministic) unless the test
is about playing, with exports going to the test's tmp_path; `tests/conftest.py` keeps
the user config out.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mmuscope.tui.app import MmuscopeApp, make_app
from mmuscope.tui.screens.memslots import MemslotsScreen
from mmuscope.tui.screens.shadow_mmu import ShadowMmuScreen
from mmuscope.tui.widgets.cost_panel import CostPanel
from mmuscope.tui.widgets.slot_table import SlotTable
from mmuscope.tui.widgets.structure import StructureView
from textual import events
from textual.geometry import Region
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input, Static

SIZE = (120, 36)


def build(export_dir: Path, layout: str = "pc-4g", **options: object) -> MmuscopeApp:
    options.setdefault("playing", False)
    app = make_app(layout, export_dir=export_dir, **options)  # type: ignore[arg-type]
    app.animation_level = "none"
    return app


def memslots(app: MmuscopeApp) -> MemslotsScreen:
    screen = app.screen
    assert isinstance(screen, MemslotsScreen), f"expected the memslots screen, got {screen!r}"
    return screen


def shadow_mmu(app: MmuscopeApp) -> ShadowMmuScreen:
    screen = app.screen
    assert isinstance(screen, ShadowMmuScreen), f"expected the shadow-MMU screen: {screen!r}"
    return screen


def text_of(widget: Static) -> str:
    return str(widget.content)


def structure_text(view: StructureView) -> str:
    """What the structure drawing shows, as plain text."""
    height = view.scrollable_content_region.height
    return "\n".join(view.render_line(y).text for y in range(height))


def drawn_lines(widget: Widget) -> list[str]:
    """The widget as it is drawn on the screen (border included), line by line."""
    return [strip.text for strip in widget.render_lines(Region(0, 0, *widget.outer_size))]


def drawn_table(widget: Widget) -> list[list[str]]:
    """The rows of a table as drawn, split into words: borders, the header line, rules
    and scrollbars left out."""
    rows = []
    for line in drawn_lines(widget)[1:-1]:  # inside the top and bottom borders
        words = line.strip("│ ").split()
        if words and any(c.isalnum() for c in "".join(words)):
            rows.append(words)
    return rows[1:]  # after the header


def table_rows(table: SlotTable) -> list[list[str]]:
    """The slot table's rows as drawn: id, as, base_gfn, npages, flags, hits, name."""
    return drawn_table(table)


def cost_rows(screen: MemslotsScreen) -> dict[str, list[str]]:
    """The cost table as drawn: strategy -> [bare, cached, miss, worst]."""
    rows = ([w for w in words if w != "▶"] for words in drawn_table(screen.query_one(CostPanel)))
    return {row[0]: row[1:] for row in rows}


async def paste(pilot: Pilot, text: str) -> None:
    """Paste `text` into the focused widget, as a terminal's bracketed paste does (one
    event instead of a key press per character: each press waits for the app to idle)."""
    pilot.app.post_message(events.Paste(text))
    await pilot.pause()


async def fill(pilot: Pilot, dialog: Screen[None], values: dict[str, str]) -> None:
    """Put `values` in the dialog's inputs as a user would: focus, select all, and paste
    over it (an empty value: delete the selection)."""
    for selector, value in values.items():
        field = dialog.query_one(selector, Input)
        field.focus()
        await pilot.pause()
        field.select_all()
        if value:
            await paste(pilot, value)
        else:
            await pilot.press("backspace")
        assert field.value == value, (selector, field.value)


async def press_export(pilot: Pilot[object]) -> None:
    """Press `e` and wait for the export worker to finish writing its files."""
    await pilot.press("e")
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def until(pilot: Pilot[object], condition: Callable[[], bool], limit: float = 10.0) -> None:
    """Let the app run (playing) until `condition` holds, `limit` seconds at most: the
    test's own assert then fails if it never did.  A fixed pause waited its whole time
    on an idle machine and could be too short on a loaded one."""
    waited = 0.0
    while not condition() and waited < limit:
        await pilot.pause(0.05)
        waited += 0.05
