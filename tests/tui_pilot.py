"""Shared helpers of the Pilot tests (`tests/test_tui_*.py` and the others that run the app).

Apps come from `tui.app.make_app` through `build`, paused (deterministic) unless the test
is about playing, with exports going to the test's tmp_path; `tests/conftest.py` keeps
the user config out.

What a test reads of the running app it reads here, through Textual's and Rich's public
API: the screen as text (`screen_text`), what is laid out where (`laid_out`), a widget as
drawn (`drawn_strips`), the notifications shown (`toasts`).  The tests hold no `x._name`
of a Textual or Rich object: a minor release may change any of those, and then this
module alone would have to follow (tests/test_public_api.py checks the tests too).
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path

from mmuscope.tui.app import MmuscopeApp, make_app
from mmuscope.tui.screens.memslots import MemslotsScreen
from mmuscope.tui.screens.shadow_mmu import ShadowMmuScreen
from mmuscope.tui.widgets.cost_panel import CostPanel
from mmuscope.tui.widgets.slot_table import SlotTable
from mmuscope.tui.widgets.structure import StructureView
from rich.cells import cell_len
from textual import events
from textual.app import App
from textual.errors import NoWidget
from textual.geometry import Region
from textual.pilot import Pilot
from textual.screen import Screen
from textual.strip import Strip
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


def drawn_strips(widget: Widget) -> list[Strip]:
    """The widget as it is drawn on the screen (border included), line by line, styled:
    what the compositor asks of it (Widget.render_lines), without what other widgets
    (its scrollbars, a pop-up) draw over it."""
    return widget.render_lines(Region(0, 0, *widget.outer_size))


def drawn_lines(widget: Widget) -> list[str]:
    """The widget as it is drawn on the screen (border included), line by line."""
    return [strip.text for strip in drawn_strips(widget)]


SVG = "{http://www.w3.org/2000/svg}"


def screen_text(app: App[object]) -> str:
    """The whole screen as the user sees it, one line per terminal row, each as wide as
    the terminal: the characters of App.export_screenshot (the SVG a snapshot test
    stores, a modal screen over the screens below it).  Rich's SVG has one <text> per
    run of cells in one style (blank runs left out), at x = column × the cell width, its
    row named by its clip path (`…-line-N`), spaces written as no-break spaces; the cell
    width is its textLength over its characters (a wide character: one of two cells)."""
    width, height = app.size
    rows: list[list[tuple[int, str]]] = [[] for _ in range(height)]
    for node in ElementTree.fromstring(app.export_screenshot()).iter(f"{SVG}text"):
        clip, text = node.get("clip-path", ""), node.text or ""
        if "-line-" not in clip or not text.strip("\n"):  # the window's title, line ends
            continue
        cell = float(node.get("textLength", 0)) / len(text)
        row = int(clip.rsplit("-line-", 1)[1].rstrip(")"))
        rows[row].append((round(float(node.get("x", 0)) / cell), text.replace("\xa0", " ")))
    lines = []
    for runs in rows:
        line, at = "", 0
        for column, text in sorted(runs):
            assert column >= at, (column, at, line)  # runs do not overlap
            line += " " * (column - at) + text
            at = column + cell_len(text)
        lines.append(line + " " * (width - at))
    return "\n".join(lines)


def laid_out(screen: Screen[object]) -> list[tuple[Widget, Region, Region]]:
    """Every widget the screen has laid out (the screen included) with its region on the
    screen and its clip (the part of the screen its containers let it show), from
    Screen.find_widget; a scroll view's scrollbars and their corner are widgets too (not
    children in the DOM), looked up where Textual draws them: scrollbars enabled, visible,
    of a size.  A widget not displayed is not laid out: find_widget raises NoWidget."""
    found = []
    for widget in screen.walk_children(Widget, with_self=True):
        parts = [widget]
        vertical, horizontal = widget.scrollbars_enabled
        if widget.styles.scrollbar_visibility == "visible":
            vertical = vertical and widget.scrollbar_size_vertical > 0
            horizontal = horizontal and widget.scrollbar_size_horizontal > 0
            parts += [widget.vertical_scrollbar] if vertical else []
            parts += [widget.horizontal_scrollbar] if horizontal else []
            parts += [widget.scrollbar_corner] if vertical and horizontal else []
        for part in parts:
            try:
                geometry = screen.find_widget(part)
            except NoWidget:
                continue
            found.append((part, geometry.region, geometry.clip))
    return found


def toasts(app: App[object]) -> list[str]:
    """The notifications on the screen, each as its toast shows it: the title (if any),
    a newline, the message.  Textual draws them only in an app run with
    `run_test(notifications=True)`; each toast is gone when its timeout has passed."""
    assert app.screen.query("ToastRack"), "run_test(notifications=True): no toasts without"
    return [str(toast.render()) for toast in app.screen.query("Toast")]


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
