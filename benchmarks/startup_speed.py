"""Start-up as a user sees it, `.venv/bin/python benchmarks/startup_speed.py [--repeat N]`:
from the spawn of a real process in a terminal (a detached tmux session, 120x40) to the
first full frame on that terminal (`tmux capture-pane` shows the footer and every panel's
own text: kvm_stat's headings, the slot table's, the cost table's), for mmuscope
(`mmuscope`, the explorer playing on pc-4g) and for a bare Textual app (Header, Label,
Footer), measured the same way, interleaved, after a warm-up run of each (which writes the
.pyc files an installation has: the benchmark clears PYTHONDONTWRITEBYTECODE for the
child).  The sessions live on a private tmux server started once before the runs (as a
user's terminal is there before the app), so a server's start is in neither time.
Goal: median ratio <= 1.5.

Then the start-up of `mmuscope simulate --mmu tdp --workload kernbench --accesses 10`
(everything before the simulation: ten accesses take about a millisecond) against
`python -c pass`, the interpreter's own start-up, as the same process spawns (to
/dev/null, no terminal), interleaved, medians: the ratio `simulate`'s start-up is judged
by. `--simulate-only` skips the tmux part.
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
SIMULATE = [str(MMUSCOPE), "simulate", "--mmu", "tdp", "--workload", "kernbench"]
COMMANDS = {
    "python_pass": [sys.executable, "-c", "pass"],
    "simulate_10": [*SIMULATE, "--accesses", "10"],
}
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


def command_once(argv: list[str]) -> float:
    """Seconds from spawn to exit, output to /dev/null (.pyc files written as installed)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": ""}
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - start


def command_medians(repeat: int) -> dict[str, object]:
    """`simulate --accesses 10` and `python -c pass`, interleaved after a warm-up run."""
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for run in range(2 * repeat + 1):  # twice the runs: each is short
        for name, argv in COMMANDS.items():
            seconds = command_once(argv)
            if run:
                times[name].append(seconds)
    bare, mine = (statistics.median(times[name]) for name in COMMANDS)
    return {"python_pass_s": bare, "simulate_10_s": mine, "ratio": mine / bare, "runs": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--simulate-only", action="store_true", help="no tmux runs")
    args = parser.parse_args()
    result: dict[str, object] = {} if args.simulate_only else tmux_medians(args.repeat)
    result["simulate_startup"] = command_medians(args.repeat)
    result["load"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(result, indent=2))
        return
    if not args.simulate_only:
        mine, bare = result["mmuscope_s"], result["bare_s"]
        assert isinstance(mine, float) and isinstance(bare, float)
        verdict = "PASS" if mine / bare <= GOAL else "FAIL"
        print(f"start to first full frame in tmux {SIZE[0]}x{SIZE[1]} (median of {args.repeat}, "
              f"load {result['load']:.2f})")  # fmt: skip
        print(f"  bare Textual {bare:.3f} s  mmuscope {mine:.3f} s  x{mine / bare:.2f}  "
              f"(goal <= x{GOAL})  {verdict}")  # fmt: skip
    sim = result["simulate_startup"]
    assert isinstance(sim, dict)
    print(f"simulate start-up, {' '.join(COMMANDS['simulate_10'][1:])} (median of "
          f"{2 * args.repeat}, load {result['load']:.2f})")  # fmt: skip
    print(f"  python -c pass {sim['python_pass_s']:.3f} s  simulate {sim['simulate_10_s']:.3f} s  "
          f"x{sim['ratio']:.2f}")  # fmt: skip


def tmux_medians(repeat: int) -> dict[str, object]:
    """Start to first full frame in tmux, mmuscope and the bare app (see the docstring)."""
    if shutil.which("tmux") is None:
        sys.exit("startup_speed.py needs tmux (apt-get install tmux), or --simulate-only")
    times: dict[str, list[float]] = {name: [] for name in APPS}
    tmux("kill-server")
    tmux("new-session", "-d", "-s", "mmuscope-startup-holder", "sleep", "3600")
    try:
        for run in range(repeat + 1):  # run 0 warms the disk cache and the .pyc files
            for name in APPS:
                seconds = run_once(name)
                if run:
                    times[name].append(seconds)
    finally:
        tmux("kill-server")
    bare, mine = (statistics.median(times[name]) for name in APPS)
    return {"bare_s": bare, "mmuscope_s": mine, "ratio": mine / bare, "runs": times}


if __name__ == "__main__":
    main()
