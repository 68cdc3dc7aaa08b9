"""Regenerate the SVG screenshots in screenshots/ (`make screenshots`), one per screen.

The app comes from the same factory as the CLI and the tests; each shot starts paused
with a fixed seed and terminal size, then presses the keys a user would.
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
from mmuscope.tui.app import make_app  # noqa: E402

SIZE = (132, 40)


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
    wait: float = 0.1  # seconds after the last key (a worker may still be drawing)


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
    Shot("experiments", keys=("f6", "down", "down", "down", "down", "enter"), wait=8.0),
    Shot("help", keys=("question_mark",)),
    Shot("add-slot", keys=("a",)),
    Shot("filter", keys=("n", "f")),
    Shot("too-small", size=(70, 20)),
)


def _trace(name: str | None, out: Path) -> Path | None:
    if name is None:
        return None
    if name == ENGINE_TRACE:
        return engine_trace(Path(tempfile.gettempdir()) / "mmuscope-screenshot-trace.txt")
    return ROOT / name


async def take(shot: Shot, out: Path) -> Path:
    app = make_app(
        shot.layout,
        lookup=shot.lookup,
        workload=shot.workload,
        theme=shot.theme,
        playing=False,
        seed=7,
        scenario=shot.scenario,
        trace=_trace(shot.trace, out),
    )
    app.animation_level = "none"
    async with app.run_test(size=shot.size, notifications=False) as pilot:
        await pilot.pause()
        for key in shot.keys:
            await pilot.press(key)
            await pilot.pause()
        await pilot.pause(shot.wait)
        svg = app.export_screenshot(title=f"mmuscope: {shot.name}")
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
