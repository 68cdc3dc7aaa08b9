"""SVG screenshots draw each cell once, where the terminal does (a highlighted
cost row was once misaligned in SVG: "1.601.60").

Rich's SVG export writes one `<text>` run per styled segment at `x = column × char width`
with `textLength` = its characters × char width.  A segment whose characters do not take
one cell each (a wide glyph, a zero-width character), or a style that changes a cell's
width, would make two runs of one row overlap or drift from their cells.  The checks:
no two runs of a row overlap, each run covers exactly its cells, and the highlighted cost
row read back from the SVG is the row the terminal shows.  On the memslots screen with
the current strategy's row highlighted, at the three sizes, in mmuscope's four themes,
through `export_screenshot()` and through the `S` key's file; the row the terminal shows
is the cost panel's as it draws it (Widget.render_lines, what Textual puts on the screen
at the panel's place), not read back from an SVG.
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

from mmuscope.tui.app import MmuscopeApp
from mmuscope.tui.themes import BUILTIN_THEMES
from mmuscope.tui.widgets.cost_panel import CostPanel
from rich.cells import cell_len

from tests.test_tui_sizes import SIZES, keys_for, screen_app
from tests.test_tui_sizes import deterministic as deterministic  # the same autouse fixture
from tests.tui_pilot import drawn_lines

TEXT = re.compile(
    r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)" textLength="([\d.]+)"[^>]*>([^<]*)</text>'
)


class Run(NamedTuple):
    x: float
    y: float
    length: float
    text: str


def text_runs(svg: str) -> list[Run]:
    """The text runs, without the newline Rich writes after each row's last cell."""
    runs = [
        Run(float(x), float(y), float(length), html.unescape(body).replace("\xa0", " "))
        for x, y, length, body in TEXT.findall(svg)
        if body != "\n"
    ]
    assert runs, "no text in the SVG"
    return runs


def misdrawn(svg: str) -> tuple[float, list[str]]:
    """The char width, and every run that overlaps its row's next or does not cover
    exactly the cells of its characters."""
    runs = text_runs(svg)
    width = min(run.length / cell_len(run.text) for run in runs if cell_len(run.text.strip()))
    problems = []
    rows: dict[float, list[Run]] = defaultdict(list)
    for run in runs:
        rows[run.y].append(run)
        if abs(run.length - cell_len(run.text) * width) > 0.01:
            problems.append(f"{run.text!r} is {run.length} wide for {cell_len(run.text)} cells")
        if abs(run.x / width - round(run.x / width)) > 0.01:
            problems.append(f"{run.text!r} starts between two cells (x {run.x})")
    for row in rows.values():
        row.sort()
        for left, right in pairwise(row):
            if right.x < left.x + left.length - 0.01:
                problems.append(f"{left.text!r} and {right.text!r} overlap")
    return width, problems


def svg_row(svg: str, width: float, y: float) -> str:
    """One row of the SVG as text: each run put at its column."""
    cells: dict[int, str] = {}
    for run in text_runs(svg):
        if run.y == y:
            column = round(run.x / width)
            for offset, char in enumerate(run.text):
                cells[column + offset] = char
    return "".join(cells.get(c, " ") for c in range(max(cells, default=-1) + 1))


def check_highlighted_row(app: MmuscopeApp, svg: str) -> None:
    width, problems = misdrawn(svg)
    assert not problems, problems
    marked = [run for run in text_runs(svg) if run.text.startswith("▶ ")]
    assert marked, "no highlighted cost row in the SVG"
    drawn = svg_row(svg, width, marked[0].y)
    panel = app.screen.query_one(CostPanel)
    row = next(line for line in drawn_lines(panel) if "▶ rbtree" in line)
    costs, left = panel.content_region, panel.region.x  # the panel's lines start at its left
    shown = row[costs.x - left : costs.right - left]
    assert drawn[costs.x : costs.right].rstrip() == shown.rstrip()


async def test_the_highlighted_cost_row_is_drawn_once_per_cell(tmp_path: Path) -> None:
    app = screen_app("memslots")
    app.export_dir = tmp_path
    async with app.run_test(size=SIZES[0]) as pilot:
        await keys_for("memslots")(pilot)
        for size in SIZES:
            await pilot.resize_terminal(*size)
            await pilot.pause()
            for theme in BUILTIN_THEMES:
                app.theme = theme
                await pilot.pause()
                check_highlighted_row(app, app.export_screenshot(title="mmuscope: memslots"))
        await pilot.press("S")  # the screenshot key's file, in the last theme and size
        for _ in range(50):
            written = list(tmp_path.glob("*.svg"))
            if written:
                break
            await pilot.pause(0.02)
        (path,) = written
        check_highlighted_row(app, path.read_text())


def test_a_run_wider_than_its_cells_is_found() -> None:
    """The check itself: a zero-width joiner makes a run one character longer than its
    cells (Rich sizes textLength by characters), and it overlaps the next run."""
    svg = (
        '<text class="r1" x="0" y="20" textLength="24.4">ab</text>'
        '<text class="r1" x="24.4" y="20" textLength="36.6">c\u200dd</text>'
        '<text class="r1" x="48.8" y="20" textLength="12.2">e</text>'
    )
    _, problems = misdrawn(svg)
    assert any("overlap" in p for p in problems) and any("cells" in p for p in problems)
