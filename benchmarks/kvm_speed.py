"""The real KVM: what recording costs, and whether the replay model keeps up.

    sudo .venv/bin/python benchmarks/kvm_speed.py [--pages N] [--children N] [--json]

1. `mmuscope kvm touch --pages 10000 --summary` end to end (start-up, the guest, the
   tracefs instance, parsing) against the same command with tracing off (the hidden
   `--no-trace`: the same guest, no instance), best of REPEAT each: the ratio is what
   watching costs.
2. The replay model live: `mmuscope kvm fork --children 64 --follow DIR` (what the app
   starts) writes the kernel's text into a FIFO as it drains its instance; this process
   parses and feeds every event into a `LiveTimeline` as it arrives, as the app's reader
   does.  Reported: the recording's event rate, the model's rate on the same events
   alone (capacity), their ratio, and the lag between the child's last write and the
   model's last event (no growing backlog: a lag near one read's worth).
Needs /dev/kvm and root; exits 2 with the reason otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mmuscope.engine.kvm.vmm import kvm_unavailable_reason
from mmuscope.engine.replay.live import LiveTimeline
from mmuscope.engine.replay.stream import EventAssembler

MMUSCOPE = Path(sys.executable).parent / "mmuscope"
REPEAT = 3


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return time.perf_counter() - start


def recording_cost(pages: int) -> dict[str, float]:
    base = [str(MMUSCOPE), "kvm", "touch", "--pages", str(pages), "--summary"]
    off = min(timed([*base, "--no-trace"]) for _ in range(REPEAT))
    on = min(timed(base) for _ in range(REPEAT))
    return {"traced_s": on, "untraced_s": off, "ratio": on / off}


def live_model(children: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="mmuscope-bench-") as tmp:
        folder = Path(tmp)
        os.mkfifo(folder / "trace")
        argv = [sys.executable, "-m", "mmuscope.tui", "kvm", "fork", "--children", str(children),
                "--follow", str(folder)]  # fmt: skip
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        timeline, assembler = LiveTimeline(keep=1 << 30), EventAssembler()
        text: list[str] = []
        start = time.perf_counter()
        with open(folder / "trace", encoding="utf-8", errors="replace") as fifo:
            for line in fifo:
                text.append(line)
                found = assembler.feed(line, 0)
                if found is not None:
                    timeline.feed([found.event])
            last = assembler.flush()
            if last is not None:
                timeline.feed([last.event])
        consumed = time.perf_counter()
        child.wait(120)
        wrote = (folder / "stats.jsonl").stat().st_mtime
    events = timeline.total
    assembler = EventAssembler()
    again = LiveTimeline(keep=1 << 30)
    t0 = time.perf_counter()
    for line in text:
        found = assembler.feed(line, 0)
        if found is not None:
            again.feed([found.event])
    alone = time.perf_counter() - t0
    produced = consumed - start
    return {
        "events": events,
        "recording_events_per_s": events / produced,
        "model_events_per_s": events / alone,
        "headroom": (events / alone) / (events / produced),
        "lag_after_last_write_s": max(0.0, consumed - wrote),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--children", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    reason = kvm_unavailable_reason() or (None if os.geteuid() == 0 else "not root")
    if reason:
        print(f"kvm_speed: {reason}", file=sys.stderr)
        return 2
    result = {"touch": recording_cost(args.pages), "fork_live": live_model(args.children)}
    if args.json:
        print(json.dumps(result))
        return 0
    t = result["touch"]
    print(f"mmuscope kvm touch --pages {args.pages} --summary: {t['traced_s']:.2f} s traced, "
          f"{t['untraced_s']:.2f} s untraced: x{t['ratio']:.2f}")  # fmt: skip
    f = result["fork_live"]
    print(f"fork --children {args.children} live: {f['events']:.0f} events, recorded at "
          f"{f['recording_events_per_s']:.0f}/s, the model takes {f['model_events_per_s']:.0f}/s "
          f"(x{f['headroom']:.1f} headroom), lag after the last write "
          f"{f['lag_after_last_write_s'] * 1000:.0f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
