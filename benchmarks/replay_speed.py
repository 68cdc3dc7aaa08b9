"""Replay speed: `mmuscope replay --summary` of a 1M-line trace against a bare `re.match`
loop over the same file, measured in the same run (at most 3x, goal 2x).

    .venv/bin/python benchmarks/replay_speed.py [--lines N] [--json]

The trace is the repo's synthetic kvmmmu sample (tests/fixtures) repeated with rising
timestamps: event lines of every kvmmmu shape, stack traces and headers.  Three timings,
best of REPEAT each:
- baseline: `for line in f: LINE.match(line)` with the parser's own line regex;
- summarize: the engine's `summarize()` over the open file (what --summary runs);
- cli: the installed `mmuscope replay --summary` end to end (start-up included);
plus `iter_events` (--jsonl's parser, without printing) for reference.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mmuscope.engine.trace.lines import _LINE_RE
from mmuscope.engine.trace.reader import TraceCounts, iter_events, summarize

SAMPLE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "trace-kvmmmu-sample.txt"
MMUSCOPE = Path(sys.executable).parent / "mmuscope"
REPEAT = 3
TS = re.compile(r"(\d+)\.(\d{6}):")


def make_trace(path: Path, lines: int) -> None:
    body = [line for line in SAMPLE.read_text().splitlines() if not line.startswith("# SYNTH")]
    with path.open("w") as out:
        written, rnd = 0, 0
        while written < lines:
            for line in body:
                if written == lines:
                    break
                stamp = lambda m, rnd=rnd: f"{int(m[1]) + rnd}.{m[2]}:"  # noqa: E731
                out.write(TS.sub(stamp, line, count=1) + "\n")
                written += 1
            rnd += 1


def best(run: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.txt"
        make_trace(trace, args.lines)

        def baseline() -> None:
            match = _LINE_RE.match
            with trace.open() as f:
                for line in f:
                    match(line)

        def summary() -> None:
            with trace.open() as f:
                summarize(f)

        def events() -> None:
            counts = TraceCounts()
            with trace.open() as f:
                for _ in iter_events(f, counts):
                    pass

        def cli() -> None:
            subprocess.run([MMUSCOPE, "replay", str(trace), "--summary"], check=True,
                           capture_output=True)  # fmt: skip

        base = best(baseline)
        rows = {
            "lines": args.lines,
            "baseline_s": base,
            "summarize_s": best(summary),
            "cli_summary_s": best(cli),
            "iter_events_s": best(events),
        }
    for name in ("summarize", "cli_summary", "iter_events"):
        rows[f"{name}_vs_baseline"] = rows[f"{name}_s"] / base
    if args.json:
        print(json.dumps(rows))
        return
    print(f"replay of {args.lines:,} lines (best of {REPEAT}); baseline: a bare re.match loop")
    for name in ("baseline", "summarize", "cli_summary", "iter_events"):
        ratio = rows.get(f"{name}_vs_baseline", 1.0)
        print(f"  {name:<12} {rows[f'{name}_s']:7.3f} s   x{ratio:.2f}")
    print("  bar: cli_summary <= x3 (goal x2)")


if __name__ == "__main__":
    main()
