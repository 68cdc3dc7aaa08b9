"""tui/screens/span_compositor.py: every partial update of the memslots screen (lookups,
a strategy change, playing) writes the same cells, characters and styles, as Textual's
own `Compositor.render_partial_update` for the same dirty regions."""

from __future__ import annotations

from pathlib import Path

from rich.cells import cell_len
from rich.console import Console
from rich.segment import ControlType, Segment
from rich.style import Style
from textual._compositor import ChopsUpdate, Compositor

from tests.tui_pilot import build, memslots
from tui.screens.span_compositor import SpanCompositor

Cells = dict[tuple[int, int], tuple[str, Style | None]]


def _cells(update: ChopsUpdate | None, console: Console) -> Cells:
    """The cells a terminal shows after writing `update` (those it writes)."""
    cells: Cells = {}
    if update is None:
        return cells
    x = y = 0
    segments: list[Segment] = list(update.__rich_console__(console, console.options))
    for segment in segments:
        if segment.control:
            for control in segment.control:
                if control[0] == ControlType.CURSOR_MOVE_TO:
                    x, y = int(control[1]), int(control[2])
            continue
        for char in segment.text:
            if char == "\n":
                continue
            cells[x, y] = (char, segment.style)
            x += cell_len(char)
    return cells


async def test_partial_updates_write_what_textual_writes(tmp_path: Path) -> None:
    app = build(tmp_path, "assigned-devices")
    compared: list[int] = []
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        screen = memslots(app)
        compositor = screen._compositor
        assert isinstance(compositor, SpanCompositor)

        def both() -> ChopsUpdate | None:
            regions = compositor._dirty_regions.copy()
            ours = SpanCompositor.render_partial_update(compositor)
            compositor._dirty_regions.update(regions)
            theirs = Compositor.render_partial_update(compositor)
            assert _cells(ours, app.console) == _cells(theirs, app.console)
            compared.append(len(regions))
            return ours

        compositor.render_partial_update = both  # type: ignore[method-assign]
        for key in ("n", "n", "n", "l", "n", "space"):
            await pilot.press(key)
            await pilot.pause()
        await pilot.pause(0.2)  # a few frames playing
    assert len(compared) >= 6 and max(compared) >= 3  # updates of several regions compared
