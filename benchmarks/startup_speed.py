"""Start-up as a user sees it, `.venv/bin/python benchmarks/startup_speed.py [--repeat N]`:
from the spawn of a real process in a terminal (a detached tmux session, 120x40) to the
first full frame on that terminal (`tmux capture-pane` shows the footer and every panel's
own text: kvm_stat's headings, the slot table's, the cost table's), for mmuscope
(`mmuscope`, the explorer playing on pc-4g) and for a bare Textual app (Header, Label,
Footer), measured the same way, interleaved, after a warm-up run of each (which writes the
.pyc files an installation has: the benchmark clears PYTHONDONTWRITEBYTECODE for the
child).  The sessions live on a private tmux server started once before the runs (as a
user's terminal is there before the app), so a server's start is in neither time.
Goal (issue 13 §4): median ratio <= 1.5.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZE = (120, 40)
GOAL = 1.5
POLL = 0.004  # seconds between looks at the pane
SOCKET = "mmuscope-startup"  # a private tmux server (tmux -L): no other session is touched
BARE = """
from textual.app import App
from textual.widgets import Footer, Header, Label
class Bare(App):
    def compose(self):
        yield Header()
        yield Label("bare-marker")
        yield Footer()
Bare().run()
"""
MMUSCOPE = Path(sys.executable).parent / "mmuscope"
# (command, strings that are all on the screen once the first full frame is drawn)
APPS = {
    "bare": ([sys.executable, "-c", BARE], ("bare-marker", "palette")),
    "mmuscope": (
        [str(MMUSCOPE)],
        ("kvm_stat", "Event", "slots looked at", "strategy", "base_gfn", "palette"),
    ),
}


def tmux(*args: str) -> str:
    command = ["tmux", "-L", SOCKET, *args]
    return subprocess.run(command, capture_output=True, text=True, check=False).stdout


def run_once(name: str) -> float:
    command, markers = APPS[name]
    session = f"mmuscope-startup-{name}"
    tmux("kill-session", "-t", session)
    width, height = SIZE
    start = time.perf_counter()
    tmux("new-session", "-d", "-s", session, "-x", str(width), "-y", str(height),
         "-e", "TERM=xterm-256color", "-e", "PYTHONDONTWRITEBYTECODE=", *command)  # fmt: skip
    try:
        while time.perf_counter() - start < 30:
            pane = tmux("capture-pane", "-p", "-t", session)
            if all(marker in pane for marker in markers):
                return time.perf_counter() - start
            time.sleep(POLL)
        raise RuntimeError(f"{name}: no full frame in 30 s:\n{pane}")
    finally:
        tmux("kill-session", "-t", session)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        sys.exit("startup_speed.py needs tmux (apt-get install tmux)")
    times: dict[str, list[float]] = {name: [] for name in APPS}
    tmux("kill-server")
    tmux("new-session", "-d", "-s", "mmuscope-startup-holder", "sleep", "3600")
    try:
        for run in range(args.repeat + 1):  # run 0 warms the disk cache and the .pyc files
            for name in APPS:
                seconds = run_once(name)
                if run:
                    times[name].append(seconds)
    finally:
        tmux("kill-server")
    bare, mine = (statistics.median(times[name]) for name in APPS)
    load = os.getloadavg()[0]
    result = {"bare_s": bare, "mmuscope_s": mine, "ratio": mine / bare, "load": load, "runs": times}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    verdict = "PASS" if mine / bare <= GOAL else "FAIL"
    print(f"start to first full frame in tmux {SIZE[0]}x{SIZE[1]} (median of {args.repeat}, "
          f"load {load:.2f})")  # fmt: skip
    print(f"  bare Textual {bare:.3f} s  mmuscope {mine:.3f} s  x{mine / bare:.2f}  "
          f"(goal <= x{GOAL})  {verdict}")  # fmt: skip


if __name__ == "__main__":
    main()
