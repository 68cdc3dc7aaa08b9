"""Regenerate the SVG screenshots in screenshots/ (`make screenshots`), one per screen.

The app comes from the same factory as the CLI and the tests; each shot starts paused
with a fixed seed and terminal size, then presses the keys a user would.  The drawing is
deterministic, so that `make test` can check the committed images against what this
script draws today (tests/test_screenshots.py): no wall clock reaches a shot.  kvm_stat's
CurAvg/s, a wall-clock rate in the app, is sampled as if one second passed between the
screen's opening and the shot (the keys pressed within it); background work (a trace's
index, a bench table's run) is waited for, not given a fixed time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mmuscope.engine.export.render import write_atomically  # noqa: E402
from mmuscope.tui.app import MmuscopeApp, make_app  # noqa: E402
from mmuscope.tui.screens import base  # noqa: E402
from mmuscope.tui.screens.base import PlayerScreen  # noqa: E402
from mmuscope.tui.screens.memslots import MemslotsScreen  # noqa: E402
from mmuscope.tui.widgets.cost_panel import CostPanel  # noqa: E402
from mmuscope.tui.widgets.events import EventPanel  # noqa: E402
from textual.pilot import Pilot  # noqa: E402
from textual.widgets import Input  # noqa: E402

SIZE = (132, 40)
SAMPLED_AFTER = 1.0  # seconds between a screen's opening and kvm_stat's CurAvg/s sample
BACKGROUND_TIMEOUT = 300.0  # seconds a shot waits for its background work at most


ENGINE_TRACE = "engine"  # a trace made of the engine's own events (see engine_trace)


def engine_trace(path: Path) -> Path:
    """A kvmmmu trace as the kernel would print it, of a kernbench guest (4K leaves),
    then netperf, a fast zap and kernbench again: the replay screen's demo input."""
    from mmuscope.engine.layouts import preset
    from mmuscope.engine.mmu.direct.session import MmuSession
    from mmuscope.engine.trace import format_line

    session = MmuSession(preset("pc-4g"), workload="kernbench", seed=3, huge_pages=False)
    lines: list[str] = []
    session.subscribe(lambda event: lines.append(format_line(event) + "\n"))
    session.run(300)
    session.set_workload("netperf")
    session.run(100)
    session.mmu.zap_all_fast()
    session.set_workload("kernbench")
    session.run(150)
    path.write_text("".join(lines))
    return path


@dataclass(frozen=True)
class Shot:
    name: str
    layout: str = "pc-4g"
    lookup: str = "rbtree"
    workload: str = "mixed"
    theme: str | None = None
    keys: tuple[str, ...] = ()
    size: tuple[int, int] = SIZE
    scenario: str | None = None
    trace: str | None = None  # a trace file (relative to the repository) for the replay screen


SHOTS = (
    Shot("memslots-rbtree", workload="scatter", keys=("c", "v", "n", "n", "n", "s", "s")),
    Shot("memslots-linear", lookup="linear", keys=("c", "v", "n", "n")),
    Shot("memslots-binary", layout="assigned-devices", lookup="binary", keys=("c", "v", "n", "s")),
    Shot("memslots-wbtree-512", layout="assigned-devices", lookup="wbtree", keys=("n", "n", "n")),
    Shot("memslots-max", layout="max", keys=("n", "n")),
    Shot("memslots-projector", theme="projector", keys=("n", "n", "n")),
    Shot("memslots-colorblind", theme="colorblind", keys=("n", "n", "n")),
    Shot("memslots-light", theme="mmuscope-light", keys=("n", "n", "n")),
    Shot("shadow-mmu", keys=("f2", "n", "n", "n", "n", "n", "n", "s")),
    Shot("shadow-mmu-netperf", keys=("f2", "w", "n", "n", "n", "n", "n", "n", "n")),
    Shot("shadow-paging", keys=("f2", "p", *["n"] * 9)),
    Shot("rmaps-fork", keys=("f3", *["n"] * 30)),
    Shot("tlb-pv-flush", scenario="pv-tlb-flush", keys=(">", ">", ">")),
    Shot("power-keys", scenario="power-keys", keys=(">", ">", ">", ">")),
    Shot("scenario-vtlb", scenario="vtlb", keys=(">", ">")),
    Shot("scenario-projector", scenario="fast-zap", theme="projector", keys=(">", ">", ">")),
    Shot("replay", trace=ENGINE_TRACE, keys=("end",)),
    Shot("experiments", keys=("f6", "down", "enter")),  # slot_cache: counted, not timed
    Shot("help", keys=("question_mark",)),
    Shot("add-slot", keys=("a",)),
    Shot("filter", keys=("n", "f")),
    Shot("too-small", size=(70, 20)),
)


def _trace(name: str | None, folder: Path) -> Path | None:
    if name is None:
        return None
    if name == ENGINE_TRACE:
        return engine_trace(folder / "mmuscope-screenshot-trace.txt")
    return ROOT / name


def _sample_counters(app: MmuscopeApp, at: float) -> None:
    """kvm_stat's CurAvg/s sample at time `at` on the screen shown (None without one)."""
    for panel in app.screen.query(EventPanel):
        panel.refresh_counters(at)


async def _animations_done(app: MmuscopeApp, pilot: Pilot[object]) -> None:
    """Wait for what moves on its own while paused (a zap replayed at its own pace, on
    the wall clock) to end: the shot shows where it ends."""
    waited = 0.0
    while any(isinstance(s, PlayerScreen) and s.animating_alone() for s in app.screen_stack):
        assert waited < BACKGROUND_TIMEOUT, "an animation that never ends"
        await pilot.pause(0.05)
        waited += 0.05
    await pilot.pause()


def _settle(app: MmuscopeApp) -> None:
    """Draw now what the wall-clock-throttled panels would draw a moment later (the
    event log, the cost table), and keep text cursors drawn (no blink)."""
    for screen in app.screen_stack:
        for panel in screen.query(EventPanel):
            panel.flush_log()
        if isinstance(screen, MemslotsScreen):
            costs = screen.explorer.costs
            screen.query_one(CostPanel).update_costs(costs, screen.explorer.lookup)
    for field in app.screen.query(Input):
        field.cursor_blink = False


async def draw(shot: Shot) -> str:
    """The shot's SVG: the app built, its keys pressed, its background work done."""
    base.COUNTER_REFRESH = 24 * 3600.0  # kvm_stat's wall-clock sample: never in a shot
    with tempfile.TemporaryDirectory(prefix="mmuscope-shot-") as folder:
        return await _draw(shot, Path(folder))


async def _draw(shot: Shot, folder: Path) -> str:
    app = make_app(
        shot.layout,
        lookup=shot.lookup,
        workload=shot.workload,
        theme=shot.theme,
        playing=False,
        seed=7,
        scenario=shot.scenario,
        trace=_trace(shot.trace, folder),
        export_dir=folder,
    )
    app.animation_level = "none"
    async with app.run_test(size=shot.size, notifications=False) as pilot:
        await pilot.pause()
        await asyncio.wait_for(app.workers.wait_for_complete(), BACKGROUND_TIMEOUT)
        await pilot.pause()
        _sample_counters(app, 0.0)
        for key in shot.keys:
            screen = app.screen
            await pilot.press(key)
            await pilot.pause()
            if app.screen is not screen:  # a screen opened: its one second starts
                _sample_counters(app, 0.0)
        await asyncio.wait_for(app.workers.wait_for_complete(), BACKGROUND_TIMEOUT)
        await _animations_done(app, pilot)
        _settle(app)
        _sample_counters(app, SAMPLED_AFTER)
        await pilot.pause()
        return app.export_screenshot(title=f"mmuscope: {shot.name}")


async def take(shot: Shot, out: Path) -> Path:
    svg = await draw(shot)
    path = out / f"{shot.name}.svg"
    write_atomically(path, svg.encode("utf-8"))  # never a half-written screenshot
    return path


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "screenshots")
    parser.add_argument("names", nargs="*", help="only these shots")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as config:
        os.environ["MMUSCOPE_CONFIG_DIR"] = config  # the user's own themes stay out
        for shot in SHOTS:
            if args.names and shot.name not in args.names:
                continue
            path = await take(shot, args.out)
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
