"""The replay screen on a 1M-line trace: does the app stay responsive while the file is
indexed and while it plays at 10,000 events/s?

    .venv/bin/python benchmarks/replay_app_speed.py [--lines N] [--play S] [--json]

The trace is benchmarks/replay_speed.py's (the repo's kvmmmu sample repeated with rising
timestamps).  Measured, in one run:
- summary_s: `mmuscope replay TRACE --summary` on the same file, a process of its own:
  the baseline the app's indexing is a ratio of (goal: within 2x);
- scan_bare_s / index_bare_s: the index's first pass (every event's offset and time)
  and both passes (plus the checkpoints), no app;
- index_in_app_s: from the app's start until the timeline is indexed (the scan: every
  event's offset and time known, the total and span final, a seek to any time or event
  resolved); checkpoints_in_app_s: until the checkpoints for quick seeks are all built
  (a seek beyond them waits for them); both paused, and ..._playing with the trace
  playing at 10,000 events/s meanwhile; in_app_over_summary (and the others) are the
  ratios to summary_s;
- gap_p99_ms / gap_max_ms / gap_median_ms (and ..._playing): the event loop's delay
  while indexing, seen by a 10 ms asyncio sleeper (how long a key press could wait);
  gap_..._after: the same over --play seconds of playing at 10,000 events/s once
  indexed, and played_per_s what it really played; bare_gap_p99_ms: the same sleeper
  in a bare asyncio loop (no app) for --play seconds, the machine's own jitter;
- checkpoints, every, snapshot_entries: what the index keeps at the end;
- rss_mb: the process's peak resident memory (ru_maxrss), after the app run;
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

from mmuscope.engine.pacing import SPEEDS
from mmuscope.engine.replay.cursor import TraceCursor
from mmuscope.engine.replay.index import TraceIndex, build_index, open_for_index
from mmuscope.tui.app import make_app
from mmuscope.tui.screens.replay import ReplayScreen
from replay_speed import make_trace

TICK = 0.01


def bare_index(trace: Path) -> tuple[float, float, TraceIndex]:
    """(the scan's seconds, both passes' seconds, the index) without the app."""
    index = TraceIndex(trace.stat().st_size)
    scanned = 0.0
    start = time.perf_counter()

    def progress(index: TraceIndex) -> None:
        nonlocal scanned
        scan = getattr(index, "scan", None)
        if not scanned and scan is not None and scan.done:
            scanned = time.perf_counter() - start

    with open_for_index(trace) as handle:
        build_index(handle, index, progress=progress)
    took = time.perf_counter() - start
    return scanned or took, took, index


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


async def sample_gaps(seconds: float) -> tuple[list[float], list[float]]:
    """The delays of a 10 ms asyncio sleeper over `seconds`, and the CPU time this
    thread spent in each of its intervals (what the loop ran then, whatever the
    machine's load: on an idle core the delay is about that minus the 10 ms), sorted."""
    gaps: list[float] = []
    cpu: list[float] = []
    last, last_cpu = time.perf_counter(), time.thread_time()
    end = last + seconds
    while last < end:
        await asyncio.sleep(TICK)
        now, now_cpu = time.perf_counter(), time.thread_time()
        gaps.append(now - last - TICK)
        cpu.append(now_cpu - last_cpu)
        last, last_cpu = now, now_cpu
    return sorted(gaps), sorted(cpu)


def gap_stats(
    gaps: list[float], suffix: str = "", cpu: list[float] | None = None
) -> dict[str, float]:
    found = {
        f"gap_max_ms{suffix}": 1000 * gaps[-1],
        f"gap_p99_ms{suffix}": 1000 * gaps[int(len(gaps) * 0.99)],
        f"gap_median_ms{suffix}": 1000 * gaps[len(gaps) // 2],
    }
    if cpu:
        found[f"loop_cpu_p99_ms{suffix}"] = 1000 * cpu[int(len(cpu) * 0.99)]
        found[f"loop_cpu_median_ms{suffix}"] = 1000 * cpu[len(cpu) // 2]
    return found


async def in_app(trace: Path, playing: bool, play: float) -> dict[str, float]:
    """Open the app on the trace, paused or playing at full speed, until indexed; then,
    playing, `play` seconds more."""
    app = make_app(trace=trace, playing=playing, export_dir=tempfile.gettempdir())
    gaps: list[float] = []
    started = time.perf_counter()
    async with app.run_test(size=(120, 40)):
        screen = app.screen
        assert isinstance(screen, ReplayScreen) and isinstance(screen.timeline, TraceCursor)
        index = screen.timeline.index
        scan = getattr(index, "scan", None)  # older indexes had one pass
        screen.pacer.index = len(SPEEDS) - 1  # 10000 events/s: the cursor parses meanwhile
        scanned = None
        last = time.perf_counter()
        while not index.done:
            await asyncio.sleep(TICK)
            now = time.perf_counter()
            gaps.append(now - last - TICK)
            last = now
            if scanned is None and scan is not None and scan.done:
                scanned = now - started
        took = time.perf_counter() - started
        played = screen.timeline.position
        after: dict[str, float] = {}
        if playing and play > 0:
            before, clock = screen.timeline.position, time.perf_counter()
            gaps_after, cpu_after = await sample_gaps(play)
            after = gap_stats(gaps_after, "_after", cpu_after)
            moved = screen.timeline.position - before
            after["played_per_s"] = moved / (time.perf_counter() - clock)
    gaps.sort()
    return {
        "index_in_app_s": scanned if scanned is not None else took,
        "checkpoints_in_app_s": took,
        **gap_stats(gaps),
        **after,
        "events_played_meanwhile": played,
        "checkpoints": len(index.checkpoints),
        "every": index.every,
        "snapshot_entries": index.entries,
        "events": index.events,
    }


def summary_seconds(trace: Path) -> float:
    """`mmuscope replay TRACE --summary` on the same file, a process of its own (the
    goal: the app's indexing within 2x of it)."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "mmuscope.tui", "replay", str(trace), "--summary"],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--play", type=float, default=8.0, help="seconds played once indexed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.txt"
        make_trace(trace, args.lines)
        rows: dict[str, float] = {"lines": args.lines, "file_mb": trace.stat().st_size / 2**20}
        rows["summary_s"] = summary_seconds(trace)
        bare, _ = asyncio.run(sample_gaps(args.play))
        rows["bare_gap_p99_ms"] = gap_stats(bare)["gap_p99_ms"]
        for playing in (False, True):
            found = asyncio.run(in_app(trace, playing, args.play))
            if playing:
                kept = ("played_per_s",)
                found = {
                    name if name.endswith("_after") or name in kept else f"{name}_playing": value
                    for name, value in found.items()
                }
            rows |= found
        rows["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        scan, bare, index = bare_index(trace)
        rows["scan_bare_s"], rows["index_bare_s"] = scan, bare
        for name in ("index_in_app_s", "checkpoints_in_app_s"):
            for suffix in ("", "_playing"):
                rows[f"{name[:-2]}{suffix}_over_summary"] = (
                    rows[f"{name}{suffix}"] / rows["summary_s"]
                )
        rows |= seeks(trace, index)
    if args.json:
        print(json.dumps(rows))
        return
    print(f"replay screen on {args.lines:,} lines ({rows['file_mb']:.0f} MB)")
    for name, value in rows.items():
        shown = f"{value:12,.3f}" if isinstance(value, float) else f"{value:12,}"
        print(f"  {name:<34} {shown}")


if __name__ == "__main__":
    main()
