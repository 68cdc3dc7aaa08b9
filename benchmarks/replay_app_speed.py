"""The replay screen on a 1M-line trace: does the app stay responsive while the file is
indexed (issue 6, Speed)?

    .venv/bin/python benchmarks/replay_app_speed.py [--lines N] [--json]

The trace is benchmarks/replay_speed.py's (the repo's kvmmmu sample repeated with rising
timestamps).  Measured:
- index_bare_s: `build_index` alone over the file, no app (one core);
- index_in_app_s: from the app's start to the index worker's end, the replay paused;
  and index_in_app_s_playing: the same with the trace playing at full speed (10000
  events/s, so the app's thread parses too);
- gap_max_ms / gap_p99_ms / gap_median_ms (and ..._playing): the event loop's longest
  (99th-percentile, median) delay while indexing, seen by a 10 ms asyncio sleeper (how
  long a key press could wait);
- checkpoints, every, snapshot_entries: what the index keeps at the end;
- rss_mb: the process's peak resident memory (ru_maxrss), after the app run;
- summary_s: `mmuscope replay TRACE --summary` on the same file, and the app's indexing
  as a ratio of it (in_app_over_summary, ..._playing_over_summary; goal <= 2);
- seek_ms: mean and worst time of 20 random seeks by time once indexed (restore a
  checkpoint, read on), and replay_from_start_s: what one seek would cost without the
  index (replaying from the first event to the middle).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay_speed import make_trace

from engine.pacing import SPEEDS
from engine.replay.cursor import TraceCursor
from engine.replay.index import TraceIndex, build_index, open_for_index
from tui.app import make_app
from tui.screens.replay import ReplayScreen

TICK = 0.01


def bare_index(trace: Path) -> tuple[float, TraceIndex]:
    index = TraceIndex(trace.stat().st_size)
    start = time.perf_counter()
    with open_for_index(trace) as handle:
        build_index(handle, index)
    return time.perf_counter() - start, index


def seeks(trace: Path, index: TraceIndex, count: int = 20) -> dict[str, float]:
    cursor = TraceCursor(trace, index)
    assert index.first_ts is not None and index.last_ts is not None
    rnd = random.Random(6)
    times = []
    for _ in range(count):
        target = rnd.uniform(index.first_ts, index.last_ts)
        start = time.perf_counter()
        cursor.seek_time(target)
        times.append(time.perf_counter() - start)
    middle = TraceCursor(trace, TraceIndex(index.size))  # no checkpoints: from the start
    start = time.perf_counter()
    middle.seek_event(index.events // 2)
    from_start = time.perf_counter() - start
    cursor.close()
    middle.close()
    return {
        "seek_mean_ms": 1000 * statistics.mean(times),
        "seek_max_ms": 1000 * max(times),
        "replay_from_start_s": from_start,
    }


async def in_app(trace: Path, playing: bool) -> dict[str, float]:
    """Open the app on the trace, paused or playing at full speed, until indexed."""
    app = make_app(trace=trace, playing=playing, export_dir=tempfile.gettempdir())
    gaps: list[float] = []
    started = time.perf_counter()
    async with app.run_test(size=(120, 40)):
        screen = app.screen
        assert isinstance(screen, ReplayScreen) and isinstance(screen.timeline, TraceCursor)
        index = screen.timeline.index
        screen.pacer.index = len(SPEEDS) - 1  # full speed: the cursor parses meanwhile
        last = time.perf_counter()
        while not index.done:
            await asyncio.sleep(TICK)
            now = time.perf_counter()
            gaps.append(now - last - TICK)
            last = now
        took = time.perf_counter() - started
        played = screen.timeline.position
    gaps.sort()
    return {
        "index_in_app_s": took,
        "gap_max_ms": 1000 * gaps[-1],
        "gap_p99_ms": 1000 * gaps[int(len(gaps) * 0.99)],
        "gap_median_ms": 1000 * gaps[len(gaps) // 2],
        "events_played_meanwhile": played,
        "checkpoints": len(index.checkpoints),
        "every": index.every,
        "snapshot_entries": index.entries,
        "events": index.events,
    }


def summary_seconds(trace: Path) -> float:
    """`mmuscope replay TRACE --summary` on the same file, a process of its own (issue
    13 §4: the app's indexing within 2x of it)."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tui", "replay", str(trace), "--summary"],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.txt"
        make_trace(trace, args.lines)
        rows: dict[str, float] = {"lines": args.lines, "file_mb": trace.stat().st_size / 2**20}
        for playing in (False, True):
            found = asyncio.run(in_app(trace, playing))
            if playing:
                found = {f"{name}_playing": value for name, value in found.items()}
            rows |= found
        rows["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        bare, index = bare_index(trace)
        rows["index_bare_s"] = bare
        rows["summary_s"] = summary_seconds(trace)
        rows["in_app_over_summary"] = rows["index_in_app_s"] / rows["summary_s"]
        rows["in_app_playing_over_summary"] = rows["index_in_app_s_playing"] / rows["summary_s"]
        rows |= seeks(trace, index)
    if args.json:
        print(json.dumps(rows))
        return
    print(f"replay screen on {args.lines:,} lines ({rows['file_mb']:.0f} MB)")
    for name, value in rows.items():
        shown = f"{value:12,.3f}" if isinstance(value, float) else f"{value:12,}"
        print(f"  {name:<28} {shown}")


if __name__ == "__main__":
    main()
