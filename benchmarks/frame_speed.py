"""Frames of the memslots screen while it plays, `.venv/bin/python benchmarks/frame_speed.py`.

The memslots screen at 512 slots (assigned-devices), 120x36, playing at the default speed
(the app's own frame timer: a frame every 1/30 s, `PlayerScreen.FRAME`), for the rbtree
and the binary search.  A frame is everything the app's thread does from one frame's
start to the next: the frame's tick (the engine's lookups, the panels' new state), the
messages and timers it sets off (the event log's flush, kvm_stat's samples) and Textual's
updates of the screen (a layout when one was asked for, the dirty regions drawn by the
compositor, and the terminal bytes made of them, which a headless app skips).  Per frame:
- `cpu`: the app thread's CPU time from the frame's start to the next frame's;
- `work`: the wall time in the frame's tick and in Textual's screen updates;
- `interval`: the wall time from the frame's start to the next (1/30 s while the app
  keeps up; longer when it does not).
Budget: p95 of `cpu` and of `work` <= 33 ms, the frame interval.

`--against CHECKOUT` measures another checkout (its own .venv, e.g. the code before a
change) in the same run: the two alternate, run by run, so that a change in the machine's
load weighs on both.  Each run is a child process of that checkout's Python.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LAYOUT, SIZE = "assigned-devices", (120, 36)
STRATEGIES = ("rbtree", "binary")
SECONDS, WARMUP, ROUNDS = 6.0, 1.0, 2  # played per run, of which not counted; runs each
BUDGET_MS = 1e3 / 30
HERE = Path(__file__).resolve().parent.parent


async def _play(strategy: str, seconds: float, warmup: float) -> list[dict[str, float]]:
    """Play the memslots screen for `seconds` and time each frame (see the module's
    docstring); the frames of the first `warmup` seconds are left out."""
    try:
        from mmuscope.tui.app import make_app
        from mmuscope.tui.screens.base import PlayerScreen
    except ImportError:  # a checkout from before the packages were named mmuscope.*
        from tui.app import make_app
        from tui.screens.base import PlayerScreen
    from textual.app import App
    from textual.screen import Screen

    frames: list[dict[str, float]] = []
    current: dict[str, float] = {}
    counting = False

    def timed(method: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args)
            finally:
                if current:
                    current["work"] += time.perf_counter() - start

        return wrapper

    frame, update, display = PlayerScreen._frame, Screen._on_timer_update, App._display

    def frame_started(screen: Any) -> Any:
        now, cpu = time.perf_counter(), time.thread_time()
        if current and counting:
            frames.append(
                {
                    "cpu": (cpu - current["cpu"]) * 1e3,
                    "work": current["work"] * 1e3,
                    "interval": (now - current["at"]) * 1e3,
                }
            )
        current.update(at=now, cpu=cpu, work=0.0)
        return timed(frame)(screen)

    def bytes_too(app: Any, screen: Any, renderable: Any) -> None:
        if renderable is not None and hasattr(renderable, "render_segments"):
            renderable.render_segments(app.console)  # what a terminal would be sent
        display(app, screen, renderable)

    PlayerScreen._frame = frame_started
    Screen._on_timer_update = timed(update)
    App._display = timed(bytes_too)
    app = make_app(LAYOUT, lookup=strategy, playing=True)
    async with app.run_test(size=SIZE):
        await asyncio.sleep(warmup)
        counting = True
        await asyncio.sleep(seconds)
        counting = False
    return frames


def _child(strategy: str, seconds: float, warmup: float) -> None:
    print(json.dumps(asyncio.run(_play(strategy, seconds, warmup))))


def _run(checkout: Path, strategy: str, seconds: float, warmup: float) -> list[Any]:
    """One run in a child process of `checkout`'s Python, in `checkout`."""
    python = checkout / ".venv" / "bin" / "python"
    argv = [str(python), str(Path(__file__).resolve()), "--child", strategy,
            "--seconds", str(seconds), "--warmup", str(warmup)]  # fmt: skip
    done = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"frame_speed: the run in {checkout} failed: {done.stderr.strip()[-2000:]}")
    frames: list[Any] = json.loads(done.stdout.splitlines()[-1])
    return frames


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "p95": statistics.quantiles(values, n=20, method="inclusive")[18],
        "max": max(values),
    }


def run(
    against: Path | None = None,
    strategies: tuple[str, ...] = STRATEGIES,
    seconds: float = SECONDS,
    warmup: float = WARMUP,
    rounds: int = ROUNDS,
) -> dict[str, Any]:
    """Each strategy played `rounds` times for `seconds` here (and in `against`, run
    for run in turn with this checkout)."""
    checkouts = [HERE] if against is None else [against.resolve(), HERE]
    samples: dict[tuple[Path, str], list[Any]] = {
        (checkout, strategy): [] for checkout in checkouts for strategy in strategies
    }
    for _ in range(rounds):
        for strategy in strategies:
            for checkout in checkouts:
                samples[checkout, strategy] += _run(checkout, strategy, seconds, warmup)
    rows = []
    for (checkout, strategy), frames in samples.items():
        row: dict[str, Any] = {"checkout": str(checkout), "strategy": strategy,
                               "frames": len(frames)}  # fmt: skip
        for key in ("cpu", "work", "interval"):
            row[key] = _stats([f[key] for f in frames])
        row["within_budget"] = max(row["cpu"]["p95"], row["work"]["p95"]) <= BUDGET_MS
        rows.append(row)
    return {"load": os.getloadavg()[0], "seconds_per_run": seconds, "rounds": rounds,
            "rows": rows}  # fmt: skip


def print_table(results: dict[str, Any]) -> None:
    print(
        f"frames of the memslots screen playing at 512 slots ({LAYOUT}, {SIZE[0]}x{SIZE[1]}, "
        f"default speed), ms; budget p95 <= {BUDGET_MS:.1f}; {results['rounds']} runs of "
        f"{results['seconds_per_run']:g} s each, alternating; load {results['load']:.2f}"
    )
    print(
        f"  {'checkout':<28} {'strategy':<8} {'frames':>6}   cpu median    p95   "
        f"work median    p95   interval median    p95"
    )
    for r in results["rows"]:
        verdict = "PASS" if r["within_budget"] else "FAIL"
        print(
            f"  {r['checkout'][-28:]:<28} {r['strategy']:<8} {r['frames']:>6}"
            f"   {r['cpu']['median']:10.2f} {r['cpu']['p95']:6.2f}"
            f"   {r['work']['median']:11.2f} {r['work']['p95']:6.2f}"
            f"   {r['interval']['median']:15.2f} {r['interval']['p95']:6.2f}  {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="CHECKOUT", help="also measure this checkout")
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    parser.add_argument("--seconds", type=float, default=SECONDS, help="played per run")
    parser.add_argument("--warmup", type=float, default=WARMUP, help="not counted, per run")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="runs per checkout")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", metavar="STRATEGY", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.seconds, args.warmup)
        return
    against = None if args.against is None else Path(args.against)
    if against is not None and not (against / ".venv" / "bin" / "python").exists():
        parser.error(f"{against} has no .venv: run make lint there first")
    results = run(against, tuple(args.strategies), args.seconds, args.warmup, args.rounds)
    print(json.dumps(results, indent=2)) if args.json else print_table(results)


if __name__ == "__main__":
    main()
