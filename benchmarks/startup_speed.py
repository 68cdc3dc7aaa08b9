"""Start-up as a user sees it, `.venv/bin/python benchmarks/startup_speed.py [--repeat N]`:
from the spawn of a real process in a terminal (a detached tmux session, 120x40) to the
first full frame on that terminal (`tmux capture-pane` shows the footer and every panel's
own text: kvm_stat's headings, the slot table's, the cost table's), for mmuscope
(`mmuscope`, the explorer playing on pc-4g) and for a bare Textual app (Header, Label,
Footer), measured the same way, interleaved, after a warm-up run of each (which writes the
.pyc files an installation has: the benchmark clears PYTHONDONTWRITEBYTECODE for the
child).  The sessions live on a private tmux server started once before the runs (as a
user's terminal is there before the app), so a server's start is in neither time.
Goal: median ratio <= 1.5.  Beside the time, the CPU time the app's process (all its
threads and children) has used when the frame is found (/proc/PID/stat, in 10 ms ticks):
on a loaded machine the wall times of two identical runs differ by x1.2, their CPU
times far less.

mmuscope runs as `pip install .` leaves it: a wheel of this checkout in a fresh venv of
this Python (benchmarks/tdp_speed.py's `installed_command`), whose dependencies are this
environment's (a .pth line adds its site-packages, not its editable install's import
hook, which costs every start of this environment's `mmuscope` ~50M instructions; the
bare app runs on the same venv's Python).  `--editable` times this environment's
command instead.  `--baseline DIR` adds the wheel of another checkout (an earlier
commit), its runs interleaved with the others: before and after in one run.

Then the start-up of `mmuscope simulate --mmu tdp --workload kernbench --accesses 10`
(everything before the simulation: ten accesses take about a millisecond) against
`python -c pass`, the interpreter's own start-up, as the same process spawns (to
/dev/null, no terminal), interleaved, medians: the ratio `simulate`'s start-up is judged
by. `--simulate-only` skips the tmux part.

`--instructions` times nothing and counts instead: each app (the wheels as above) runs
headless at 120x40 under valgrind's callgrind to its first full frame, cut into parts
(benchmarks/startup_parts.py: CSS parsing and applying, layout, drawing, each import,
each dataclass made, each collection), and the millions of instructions of each part are
printed beside the bare app's (repeatable to ~0.1 % on a loaded machine; the cutting
itself adds ~70M to each app).

Measured (--baseline: main before the three start-up commits below, the theme as the
reactive's first value, no command parsers for the bare explorer, each other screen's
layout in its own DEFAULT_CSS): the wall ratio of identical code moves by +-0.07 with
the load and the CPU times are 10 ms ticks, so one run decides little.  --repeat 15 at
load 0.2-1.5: bare Textual 0.506 s (CPU 0.43 s), mmuscope 0.637 s x1.26 (CPU 0.61 s
x1.42), main 0.734 s x1.45 (CPU 0.66 s x1.53).  --repeat 9 at load 6.2: bare 1.045 s
(CPU 0.47 s), mmuscope x1.29 (CPU x1.49), main x1.48 (CPU x1.57); at load 4.2 falling
to 0.5 (a callgrind run beside it): mmuscope x1.40 (CPU x1.62), main x1.39 (CPU
x1.57).  The CPU ratio is
higher than the instructions' because the frame timer starts after the first frame and
its ticks run until the poll sees the frame; the bare app idles.

Where the instructions to the first frame go (--instructions, one run, millions; the
cutting adds ~70M to each): bare 1,013.6, main 1,480.9 (x1.461), mmuscope 1,412.6
(x1.394).  The interpreter and Textual's import are common.  Since main: app.tcss is
parsed once (52.1 -> 14.3: `self.theme` set after App.__init__ ran the theme's watcher,
whose refresh_css parsed every source held then a second time in a fresh stylesheet,
and the other screens' rules are parsed when those screens are first shown), App's
DEFAULT_CSS once (12.7 -> 6.5), the CLI builds no command's parser (load 882.2 -> 872.6),
applying 86.8 -> 82.0.  What is left against the bare app's three widgets: mmuscope's
imports, 81.6 of modules and 77 of its 21 frozen slotted dataclasses (each made by
`dataclass` compiling five or six methods: ~3.5M a class; all are used by the first
frame: the VM boots its slots through KVM_SET_USER_MEMORY_REGION's types); applying
82.0 against 21.6 (25 widgets, each styled at mount and when its screen resumes, and 21
component classes, each a node styled with its widget: the structure's 12 cost 14.2);
drawing 89.4 against 35.1 (the whole 120x40 drawn); the collector 71.0 against 35.6 (a
full collection, 20.5, that the app's allocations reach and the bare app's do not);
layout 27.5 against 18.0; the themes' TOML (tomllib's import 7.6).  The blank default
screen the first screen is pushed over costs 35.7 (measured with get_default_screen
returning the first screen); that would break switch_screen (a screen Textual made as
the default has no result callback to pop) and rebuilding a scenario's screen, and
Textual's MODES cost more than they save: _init_mode runs refresh_css for a MODES
screen (its _css_update_count starts at -1), which parses every source again (measured:
1,502.5 against 1,439.9 before the CSS split).

Later, the header composing no HeaderClockSpace only to hide it: 1,174.6 -> 1,171.2
(benchmarks/startup_parts.py on an editable install, one run).  The too-small message
and a scenario's caption, also composed hidden on every screen, cost 3.8 and 7.3 more:
mounting them on first use would save 0.9 %, not worth the screens' mount-on-demand
code.  --instructions (wheels, one run): bare 845.6, mmuscope 1,176.7 (x1.391) before
these three, 1,161.9 (x1.374) with all three.  What is left is spread thin: the 21
dataclasses (~2.8M each, all used by the first frame), styles applied at mount and again
when the screen resumes (Textual's own), the structure's restyle when it takes the focus
(5.4), Screen.DEFAULT_CSS parsed twice (3.7: the default screen and the first screen
differ in depth, part of Textual's parse cache key), app.tcss 12.5, the themes 7.3 and
tomllib 7.6, the key bar's bindings 3.3.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZE = (120, 40)
GOAL = 1.5
POLL = 0.004  # seconds between looks at the pane
TICKS = os.sysconf("SC_CLK_TCK")  # /proc/PID/stat's CPU times are in these
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
SIMULATE = ["simulate", "--mmu", "tdp", "--workload", "kernbench"]
BARE_MARKERS = ("bare-marker", "palette")
# strings that are all on the screen once mmuscope's first full frame is drawn
MARKERS = ("kvm_stat", "Event", "slots looked at", "strategy", "base_gfn", "palette")
COMMANDS: dict[str, list[str]] = {}
# name -> (command, strings that are all on the screen once the first full frame is drawn)
APPS: dict[str, tuple[list[str], tuple[str, ...]]] = {}


def set_commands(mmuscope: Path, baselines: dict[str, Path]) -> None:
    """The apps and commands timed: the bare app on the Python next to `mmuscope`."""
    python = str(mmuscope.parent / "python")
    APPS["bare"] = ([python, "-c", BARE], BARE_MARKERS)
    APPS["mmuscope"] = ([str(mmuscope)], MARKERS)
    COMMANDS["python_pass"] = [python, "-c", "pass"]
    COMMANDS["simulate_10"] = [str(mmuscope), *SIMULATE, "--accesses", "10"]
    for name, command in baselines.items():
        APPS[f"mmuscope_{name}"] = ([str(command)], MARKERS)


def installed_app(tmp: Path, checkout: Path) -> Path:
    """The `mmuscope` of a wheel of `checkout` (see the docstring), with this
    environment's dependencies."""
    from tdp_speed import installed_command  # (benchmarks/ is the script's folder)

    command = installed_command(tmp, checkout)
    (site,) = command.parent.parent.glob("lib/python*/site-packages")
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "dependencies.pth").write_text("\n".join(deps) + "\n")
    return command


def tmux(*args: str) -> str:
    command = ["tmux", "-L", SOCKET, *args]
    return subprocess.run(command, capture_output=True, text=True, check=False).stdout


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system, all threads) of process `pid` and its children so far."""
    total = 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / TICKS
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return total
    return total + sum(cpu_seconds(int(child)) for child in children)


def run_once(name: str) -> tuple[float, float]:
    """Seconds from spawn to the first full frame, and the CPU seconds the app used."""
    command, markers = APPS[name]
    session = f"mmuscope-startup-{name}"
    tmux("kill-session", "-t", session)
    width, height = SIZE
    start = time.perf_counter()
    tmux("new-session", "-d", "-s", session, "-x", str(width), "-y", str(height),
         "-e", "TERM=xterm-256color", "-e", "PYTHONDONTWRITEBYTECODE=", *command)  # fmt: skip
    pid = int(tmux("display-message", "-p", "-t", session, "#{pane_pid}") or 0)
    try:
        while time.perf_counter() - start < 30:
            pane = tmux("capture-pane", "-p", "-t", session)
            if all(marker in pane for marker in markers):
                return time.perf_counter() - start, cpu_seconds(pid)
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


PARTS = Path(__file__).with_name("startup_parts.py")


def part_counts(python: Path, source: str, markers: tuple[str, ...]) -> dict[str, int]:
    """Instructions to the first full frame by part (benchmarks/startup_parts.py), one
    headless run under callgrind, PYTHONHASHSEED=0 (a string hash's seed changes dicts'
    probing, and so the count), the .pyc files written by a run before."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "", "PYTHONHASHSEED": "0"}
    argv = [str(python), str(PARTS), "LABELS", source, *markers]
    with tempfile.TemporaryDirectory(prefix="startup-parts-") as tmp:
        argv[2] = labels_file = os.path.join(tmp, "labels")
        subprocess.run(argv, env=env, check=True, capture_output=True)  # the .pyc files
        profile = os.path.join(tmp, "callgrind.out")
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--dump-before=getppid",
             f"--callgrind-out-file={profile}", *argv],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        site = re.compile(r"'[^']*/site-packages/")  # the wheels' paths, made alike
        labels = [site.sub("'", label) for label in Path(labels_file).read_text().splitlines()]
        counts: dict[str, int] = {}
        for part, label in enumerate(labels, 1):
            text = Path(f"{profile}.{part}").read_text()
            found = re.search(r"^summary: (\d+)$", text, re.MULTILINE)
            assert found is not None, f"part {part} of {argv} has no summary"
            counts[label] = counts.get(label, 0) + int(found.group(1))
    return {label: n for label, n in counts.items() if not label.startswith("after:")}


def instruction_parts() -> dict[str, dict[str, int]]:
    """Each app's instructions to the first frame by part (see part_counts)."""
    result = {}
    for name, (command, markers) in APPS.items():
        if name == "bare":
            result[name] = part_counts(Path(command[0]), command[2], markers)
        else:
            result[name] = part_counts(Path(command[0]).with_name("python"), "-", markers)
    return result


def report_parts(parts: dict[str, dict[str, int]]) -> None:
    """Millions of instructions by step (the innermost step running) and by phase."""
    names = list(parts)
    step, phase = (
        (lambda label: label.split("|")[0].split(":", 1)[1]),
        (lambda label: label.split(":")[0]),
    )
    for by in (step, phase):
        rows: dict[str, dict[str, int]] = {}
        for name in names:
            for label, count in parts[name].items():
                row = rows.setdefault(by(label), {})
                row[name] = row.get(name, 0) + count
        print(f"  {'':34}" + "".join(f"{name[:18]:>19}" for name in names))
        for key, row in sorted(rows.items(), key=lambda item: -max(item[1].values())):
            print(f"  {key:34}" + "".join(f"{row.get(n, 0) / 1e6:19.1f}" for n in names))
    totals = {name: sum(counts.values()) for name, counts in parts.items()}
    print(f"  {'total':34}" + "".join(f"{totals[n] / 1e6:19.1f}" for n in names))
    print(f"  {'ratio to bare':34}" + "".join(f"{totals[n] / totals['bare']:19.3f}" for n in names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--simulate-only", action="store_true", help="no tmux runs")
    parser.add_argument("--editable", action="store_true", help="this environment's mmuscope")
    parser.add_argument("--instructions", action="store_true",
                        help="instructions by part under callgrind instead (no tmux)")  # fmt: skip
    parser.add_argument("--baseline", type=Path, action="append", default=[],
                        help="another checkout, its wheel timed too (repeatable)")  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="startup-speed-") as tmp:
        mine = MMUSCOPE if args.editable else installed_app(Path(tmp) / "this", ROOT)
        baselines = {
            checkout.resolve().name: installed_app(Path(tmp) / f"baseline{n}", checkout)
            for n, checkout in enumerate(args.baseline)
        }
        set_commands(mine, baselines)
        if args.instructions:
            parts = instruction_parts()
            if args.json:
                print(json.dumps(parts, indent=2))
            else:
                print("instructions to the first frame, headless 120x40, millions")
                report_parts(parts)
            return
        result = run(args)
    result["installed"] = "editable" if args.editable else "wheel"
    if args.json:
        print(json.dumps(result, indent=2))
        return
    report(args, result)


def run(args: argparse.Namespace) -> dict[str, object]:
    result: dict[str, object] = {} if args.simulate_only else tmux_medians(args.repeat)
    result["simulate_startup"] = command_medians(args.repeat)
    result["load"] = os.getloadavg()[0]
    return result


def report(args: argparse.Namespace, result: dict[str, object]) -> None:
    if not args.simulate_only:
        medians, cpu = result["medians_s"], result["cpu_medians_s"]
        assert isinstance(medians, dict) and isinstance(cpu, dict)
        bare = medians["bare"]
        print(f"start to first full frame in tmux {SIZE[0]}x{SIZE[1]} (median of {args.repeat}, "
              f"load {result['load']:.2f}, mmuscope {result['installed']})")  # fmt: skip
        print(f"  bare Textual {bare:.3f} s (CPU {cpu['bare']:.3f} s)")
        for name, seconds in medians.items():
            if name != "bare":
                verdict = "PASS" if seconds / bare <= GOAL else "FAIL"
                cpu_ratio = cpu[name] / cpu["bare"]
                print(f"  {name} {seconds:.3f} s  x{seconds / bare:.2f}  (goal <= x{GOAL})  "
                      f"{verdict}; CPU {cpu[name]:.3f} s  x{cpu_ratio:.2f}")  # fmt: skip
    sim = result["simulate_startup"]
    assert isinstance(sim, dict)
    print(f"simulate start-up, mmuscope {' '.join(COMMANDS['simulate_10'][1:])} (median of "
          f"{2 * args.repeat}, load {result['load']:.2f})")  # fmt: skip
    print(f"  python -c pass {sim['python_pass_s']:.3f} s  simulate {sim['simulate_10_s']:.3f} s  "
          f"x{sim['ratio']:.2f}")  # fmt: skip


def tmux_medians(repeat: int) -> dict[str, object]:
    """Start to first full frame in tmux, mmuscope and the bare app (see the docstring)."""
    if shutil.which("tmux") is None:
        sys.exit("startup_speed.py needs tmux (apt-get install tmux), or --simulate-only")
    times: dict[str, list[float]] = {name: [] for name in APPS}
    cpu: dict[str, list[float]] = {name: [] for name in APPS}
    tmux("kill-server")
    tmux("new-session", "-d", "-s", "mmuscope-startup-holder", "sleep", "3600")
    try:
        for run in range(repeat + 1):  # run 0 warms the disk cache and the .pyc files
            for name in APPS:
                seconds, cpu_s = run_once(name)
                if run:
                    times[name].append(seconds)
                    cpu[name].append(cpu_s)
    finally:
        tmux("kill-server")
    medians = {name: statistics.median(runs) for name, runs in times.items()}
    cpu_medians = {name: statistics.median(runs) for name, runs in cpu.items()}
    return {
        "medians_s": medians,
        "ratios": {name: seconds / medians["bare"] for name, seconds in medians.items()},
        "cpu_medians_s": cpu_medians,
        "cpu_ratios": {name: s / cpu_medians["bare"] for name, s in cpu_medians.items()},
        "runs": times,
        "cpu_runs": cpu,
    }


if __name__ == "__main__":
    main()
