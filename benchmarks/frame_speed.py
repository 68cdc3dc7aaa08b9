"""One frame of the memslots screen, `.venv/bin/python benchmarks/frame_speed.py [--json]`.

A frame is a state change and what Textual draws for it: `n` (the next lookup shown
whole, paused: `screen.action_next_lookup()`, which redraws every panel at once, the
worst frame the screen has) and then Textual's own update of the screen as it runs on
its update timer (`Screen._on_timer_update`: a reflow or scroll when a widget asked for
one, the dirty regions of the widgets that asked for a repaint rendered through their
styles caches by the compositor) with the terminal bytes made of it (`render_segments`,
which `App._display` skips when headless).  Only the time in those calls counts, not
the event loop's waits between them; each frame is followed by `pilot.pause()`.

At 512 slots (assigned-devices) for each lookup strategy, 120x36, against two baselines
measured in the same run the same way: the same screen at 7 slots (pc-4g), and a bare
Textual app (Header, a DataTable of 512 rows of the slot table's columns, Footer) whose
state change moves the cursor one row.  Goal: median <= 8 ms, p95 <= 12 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mmuscope.engine.lookup import LOOKUP_STRATEGIES
from mmuscope.tui.app import make_app
from mmuscope.tui.screens.memslots import MemslotsScreen
from textual.app import App, ComposeResult
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Header

SIZE, FRAMES, WARMUP = (120, 36), 40, 3
GOAL_MEDIAN_MS, GOAL_P95_MS = 8.0, 12.0
VERDICT = {True: "PASS", False: "FAIL"}


class Clock:
    """Seconds spent in the timed calls since `start()`, and per widget class."""

    def __init__(self) -> None:
        self.on = False
        self.spent = self.cpu = 0.0  # wall and this thread's CPU seconds
        self.widgets: dict[str, float] = {}

    def start(self) -> None:
        self.on, self.spent, self.cpu = True, 0.0, 0.0

    @contextmanager
    def timing(self) -> Iterator[None]:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            if self.on:
                self.spent += time.perf_counter() - start
                self.cpu += time.thread_time() - cpu


CLOCK = Clock()


def _install_hooks() -> None:
    """Time Textual's screen update and make the terminal bytes a real terminal gets."""
    update: Callable[[Screen[Any]], None] = Screen._on_timer_update
    display = App._display

    def timed_update(screen: Screen[Any]) -> None:
        with CLOCK.timing():
            update(screen)

    def bytes_too(app: App[Any], screen: Screen[Any], renderable: Any) -> None:
        if renderable is not None and hasattr(renderable, "render_segments"):
            renderable.render_segments(app.console)
        display(app, screen, renderable)

    Screen._on_timer_update = timed_update  # type: ignore[method-assign]
    App._display = bytes_too  # type: ignore[method-assign]


def _time_widgets(screen: Screen[Any]) -> None:
    """Time each widget's render_lines (called by the compositor) per class."""
    for widget in screen.walk_children(Widget):
        original, name = widget.render_lines, type(widget).__name__

        def timed(crop: Any, original: Any = original, name: str = name) -> Any:
            start = time.perf_counter()
            try:
                return original(crop)
            finally:
                if CLOCK.on:
                    spent = time.perf_counter() - start
                    CLOCK.widgets[name] = CLOCK.widgets.get(name, 0.0) + spent

        widget.render_lines = timed  # type: ignore[method-assign]


async def _frames(app: App[Any], change: Callable[[], None], frames: int) -> dict[str, Any]:
    """`frames` frames of `change()` and Textual's update of the screen, timed."""
    samples: list[float] = []
    cpu: list[float] = []
    CLOCK.widgets.clear()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        _time_widgets(app.screen)
        for i in range(WARMUP + frames):
            await pilot.pause()
            if i == WARMUP:
                CLOCK.widgets.clear()
            CLOCK.start()
            with CLOCK.timing():
                change()
            await pilot.pause()  # the update timer's run, and pilot's own call of it
            CLOCK.on = False
            if i >= WARMUP:
                samples.append(CLOCK.spent * 1e3)
                cpu.append(CLOCK.cpu * 1e3)
    top = sorted(CLOCK.widgets.items(), key=lambda kv: -kv[1])[:3]
    return {
        "median_ms": statistics.median(samples),
        "p95_ms": statistics.quantiles(samples, n=20, method="inclusive")[18],
        "cpu_median_ms": statistics.median(cpu),
        "cpu_p95_ms": statistics.quantiles(cpu, n=20, method="inclusive")[18],
        "top_widgets_ms": {name: spent * 1e3 / frames for name, spent in top},
    }


async def memslots_frames(layout: str, strategy: str, frames: int = FRAMES) -> dict[str, Any]:
    gc.collect()  # the previous apps' cycles, so that they do not weigh on this one's GCs
    app = make_app(layout, lookup=strategy, playing=False)

    def next_lookup() -> None:
        screen = app.screen
        assert isinstance(screen, MemslotsScreen)
        screen.action_next_lookup()

    return {"layout": layout, "strategy": strategy} | await _frames(app, next_lookup, frames)


class BareTable(App[None]):
    """The baseline: Textual's own table of 512 rows, the slot table's columns."""

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="table")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("id", "as", "base_gfn", "npages", "flags", "hits", "name")
        for i in range(512):
            gfn = 0x100000 + 0x1000 * i
            table.add_row(str(i), "0", f"{gfn:#x}", "0x100", "-", str(i * 7), f"dev{i:03d}")


async def datatable_frames(frames: int = FRAMES) -> dict[str, Any]:
    gc.collect()
    app = BareTable()

    def cursor_down() -> None:
        table = app.query_one(DataTable)
        table.move_cursor(row=(table.cursor_row + 1) % 512, animate=False)

    return {"layout": "DataTable 512 rows", "strategy": "-"} | await _frames(
        app, cursor_down, frames
    )


def run(frames: int = FRAMES) -> dict[str, Any]:
    """Every strategy at 512 slots, then the baselines (as the last runs, the same way)."""
    _install_hooks()
    at_512 = [
        asyncio.run(memslots_frames("assigned-devices", strategy, frames))
        for strategy in LOOKUP_STRATEGIES
    ]
    small = asyncio.run(memslots_frames("pc-4g", "rbtree", frames))
    table = asyncio.run(datatable_frames(frames))
    rbtree = next(r for r in at_512 if r["strategy"] == "rbtree")
    for row in at_512:
        row["x_7_slots"] = row["median_ms"] / small["median_ms"]
        row["x_datatable"] = row["median_ms"] / table["median_ms"]
        row["cpu_x_7_slots"] = row["cpu_median_ms"] / small["cpu_median_ms"]
        row["cpu_x_datatable"] = row["cpu_median_ms"] / table["cpu_median_ms"]
    return {
        "load": os.getloadavg()[0],
        "frames_512": at_512,
        "baselines": [small, table],
        "rbtree_x_7_slots": rbtree["x_7_slots"],
        "rbtree_x_datatable": rbtree["x_datatable"],
    }


def print_table(results: dict[str, Any]) -> None:
    print(
        f"one frame of the memslots screen, `n` then Textual's update (ms of wall time, and "
        f"of this thread's CPU; load {results['load']:.2f}; goal median <= {GOAL_MEDIAN_MS:g}, "
        f"p95 <= {GOAL_P95_MS:g})"
    )
    print(
        "  guest              strategy        median    p95    cpu  cpu95  x7slots xDataTable"
        "        slowest (ms)"
    )
    for r in results["frames_512"] + results["baselines"]:
        ok = r["median_ms"] <= GOAL_MEDIAN_MS and r["p95_ms"] <= GOAL_P95_MS
        ratios = (
            f"  x{r['x_7_slots']:5.2f}   x{r['x_datatable']:5.2f}  {VERDICT[ok]}"
            if "x_7_slots" in r
            else " " * 26
        )
        top = ", ".join(f"{n} {ms:.1f}" for n, ms in r["top_widgets_ms"].items())
        print(
            f"  {r['layout']:<18} {r['strategy']:<14} {r['median_ms']:6.2f} {r['p95_ms']:6.2f}"
            f" {r['cpu_median_ms']:6.2f} {r['cpu_p95_ms']:6.2f}{ratios}  {top}"
        )
    cpu = ", ".join(
        f"{r['strategy']} x{r['cpu_x_7_slots']:.2f}/x{r['cpu_x_datatable']:.2f}"
        for r in results["frames_512"]
    )
    print(f"  CPU ratios at 512 slots (to 7 slots / to the DataTable): {cpu}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--frames", type=int, default=FRAMES, help="timed frames per run")
    args = parser.parse_args()
    results = run(args.frames)
    print(json.dumps(results, indent=2)) if args.json else print_table(results)


if __name__ == "__main__":
    main()
