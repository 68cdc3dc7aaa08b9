"""The TDP MMU's speed, as ratios measured in one run:

- a page fault of the TDP MMU (`TdpMmu.page_fault`, tdp_mmu=Y) against one of the older
  direct MMU (`DirectMmu.page_fault`, tdp_mmu=N) on the same guest and the same gpas
  (first touches in a seeded order; 4K host pages, then 2M), interleaved rounds, best of
  each, in CPU time: `tdp_over_direct` below 1 means the TDP fault is the faster;
- `mmuscope simulate --mmu tdp --workload kernbench --accesses 100000`: lines printed per
  second, against the 60,000 lines/s budget, in process (to /dev/null, best of 3) and
  through the installed command (start-up included; best and median of 9): a wheel of
  this checkout installed into a fresh venv of this Python, as `pip install .` does, not
  this environment's editable install, whose import hook costs ~50M instructions at each
  start (`--editable` times that one instead), and as a ratio to a baseline run in
  between: a bare loop writing the same lines, already formatted, one by one to the same
  sink (`over_bare_loop`: how many times longer the simulation takes than printing alone).
  The machine's load average is printed with them (absolute numbers fall with the load;
  the ratios much less), and lines per second of the process's CPU time.
- `--baseline DIR` (repeatable): the same command from a wheel of another checkout (an
  earlier commit), its runs interleaved with this checkout's, so that all see the same
  load; each named by its folder (`simulate_command_baseline` for ../baseline).

With `--instructions` it times nothing and counts instead, under valgrind's callgrind:
the instructions of the whole installed command, of its start-up (`--accesses 10`) and of
`python -c pass` in the same run, with PYTHONHASHSEED=0 and the installation's .pyc files
(and of the baseline's command with `--baseline`).  The counts repeat exactly from run to
run, on a loaded machine too, where times on the project's shared cores moved by x1.2-1.4:
the number to compare two commits by; the times say whether the budget is met.

    .venv/bin/python benchmarks/tdp_speed.py [--faults N] [--accesses N] [--json]
    .venv/bin/python benchmarks/tdp_speed.py --instructions [--accesses N] [--json]
    .venv/bin/python benchmarks/tdp_speed.py --baseline ../baseline [--instructions]

Measured (callgrind, PYTHONHASHSEED=0, one run of each on the same machine): the
kvm_exit, kvm_entry and kvm_page_fault events carrying every field their TP_fast_assign
fills, printed without merging the tracepoint's defaults, took the kernbench run of
100,000 accesses in process (`simulate()` to /dev/null, imports included) from 3,185M
to 3,091M instructions (x0.970; the run past its imports 2,580M -> 2,486M, x0.964), and
one kvm_exit line in `LinePrinter` from 26.3k to 17.7k instructions (kvm_entry 18.2k ->
11.8k, kvm_page_fault 10.1k -> 8.7k).  Where the 2,486M go now (callgrind for the
draws and for the lines: a run without a listener, and the draws alone; the rest
apportioned by bytecodes executed): the workload's draws ~27%, the CPU's walks of the
accesses that do not exit ~16%, the 6,302 faults' model ~33%, their 37,843 lines ~21%.
The CPU's walk choosing what the leaf must allow by a branch on the access (`Needs`,
tdp/cpu.py) instead of a dict keyed by a (write, fetch) tuple, and
`ept_violation_error_code()` computed once per qualification: the installed command
(100,000 accesses) 2,836M -> 2,771M instructions (x0.977), start-up 304M -> 305M.

The lines and the start-up (the installed command, `--instructions --baseline` of the
commit before, one run): the printer comparing the session's `steps` and `vcpu` to make
a line's head again (not a `stamp()` per line), heads printed with trace-cmd's `%`
formats, the session's own events (kvm_exit, kvm_page_fault, kvm_entry) handed straight
to the printer (no dict built while nobody listens), and a command line naming a command
building no other command's parser, took the whole command from 2,835.7M to 2,746.9M
instructions (x0.969) and its start-up (`--accesses 10`) from 304.5M to 293.6M (x0.964;
`python -c pass` 35.6M).  In process, past the imports: the model without a listener
2,238M (it built the session's events' dicts for nobody: 2,290M), the events handed to a
listener +128M (3.4k instructions a line), the printer +357M (9.4k a line, was 11.2k).
What a line costs now is mostly `%` itself (~1k instructions a number printed: a kvm_exit
line prints eleven) and `itemgetter` of its fields; of the start-up, the imports of
argparse (35M), typing (15M) and dataclasses with inspect (31M), and the creation of the
15 dataclasses on the way (each generates and compiles six methods: 5-11M a class).

One `KvmPageFault` per fault, made before `fast_page_fault()` as
`kvm_mmu_do_page_fault()` makes it (no second struct for the fast path): 2,684M ->
2,669M (x0.994; measured before the lines' paragraph above landed: start-up 295M -> 294M).

The workload's draws with the generators' methods looked up once per draw, not once per
number (`uniform_below` takes `getrandbits`): the installed command 2,668.8M -> 2,578.1M
instructions (x0.966), start-up 294.3M -> 294.3M; the draws of 100,000 kernbench
accesses alone (in process) 666M -> 575M.

With that, the lines remembering the text of fields that come again (`LinePrinter`:
kvm_exit, kvm_entry), the fault paths naming results `RET_PF_*` (a RetPf member read
through its class costs ~1k instructions: EnumType's `__getattr__` hook), the CPU's walk
memo in a defaultdict and its stop's spte handed to `ept_exit()`, a trace-cmd head's
comm/pid/cpu columns formatted once per CPU: the installed command 2,668.8M -> 2,384.9M
instructions (x0.894; `--instructions --baseline` of the commit before the draws' change,
one run), start-up 294.3M -> 296.2M.  Wall (`--faults 2000 --baseline`, one run, load
average 3.7 on the project's 2 shared cores): best 53,400 -> 61,000 lines/s, median
39,900 -> 41,900 (the median moves with the load), CPU time 45,600 -> 49,800 lines/s;
in process 67,600 lines/s.  What is left: the draws ~575M (six C calls to the generators
an access, ~530 instructions each, and two calls of `uniform_below`), the CPU's walks of
the accesses that do not exit ~290M, the faults' model ~850M (~70 calls a fault, each a
kernel function), the lines ~430M (`%` at ~1.1k instructions a number), start-up ~296M
(argparse, typing, dataclasses with inspect, the 15 dataclasses made on the way).

Looked for work the command does not need, at 2,384.9M (callgrind, the wheel of this
commit; a module's cost counted as `python -c "import ..."` over the modules before it):
the start-up's 296.1M are the interpreter (35.6M), the standard library the idioms ask
for (argparse +35.7M, typing +15.0M, dataclasses with inspect +45.2M, random, re), the
15 dataclasses (a frozen slotted one of 4 fields costs 3.9M to make, a NamedTuple 0.9M;
12 of them are instantiated on the way, Event, DirtyRing and MmioInfo are types only),
and ~25M to build the parser and the session and run 10 accesses.  What it imports and
never uses (the explorer's `--workload` choices and default speed, made to refuse them
before a command: memslots.workload 2.6M, pacing 0.6M; the trace-line regex of
`parse_line`, 2.5M) is 0.25% together; no module does more at import than define its
names and tables (the printk templates are parsed and compiled at first use).  The run:
the interpreter loop's own instructions 37% of the whole, `%` formatting 104M (4.4%),
the generators' `getrandbits` 50M in C (368k calls, 1.84 per `uniform_below`: 4 RAM
slots draw 3 bits and keep half), the collector 38M (9 young collections in the run),
finalisation 27M.  A fault is ~2,400 bytecodes over ~70 calls, none above 150
(`kvm_tdp_mmu_map` 147 with its iterator, `make_spte` 134, `try_step_down` 93 and 2.7 a
fault); an access that does not exit ~110 bytecodes of draws and ~64 of the CPU's walk,
around 5.4 C calls.  No part left is large enough for a change within the rules to pay:
each would be an inlined kernel helper, a copy of `random`'s draws, or a lazy layer for
<1%.  Wall (`--faults 2000 --baseline <a checkout of the same code>`, load average
0.9-1.5): pyenv's 3.11.7 (built --enable-shared: the interpreter runs through
libpython.so) median 51,000 and 51,600 lines/s (best 57,600, 55,300), in process 61,700;
Debian's 3.11.2 (/usr/bin/python3, statically linked, the Makefile's choice) median
62,000 and 64,400 (best 71,400, 78,700), in process 80,500: the budget is met with
Debian's python3, by 3-7% at this load, and not with pyenv's.  The `command` row names
the interpreter that timed a run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from mmuscope.engine.layouts import preset
from mmuscope.engine.layouts.layout import build_vm
from mmuscope.engine.mmu.direct.mmu import DirectMmu
from mmuscope.engine.mmu.params import TdpMmuParams
from mmuscope.engine.mmu.tdp.mmu import TdpMmu
from mmuscope.tui.simulate_cli import SimulateOptions, simulate

ROUNDS = 7
clock = time.process_time  # CPU time: the shared cores' waits do not count
BUDGET_LINES_PER_S = 60_000
COMMAND_RUNS = 9


def first_touches(count: int, seed: int = 3) -> list[int]:
    """`count` distinct RAM gpas of the default guest, in a seeded order."""
    vm = build_vm(preset("pc-4g"))
    gfns = [s.base_gfn + i for s in vm.memslots(0) if not s.readonly for i in range(s.npages)]
    return [gfn << 12 for gfn in random.Random(seed).sample(gfns, count)]


def fault_run(kind: str, huge: bool, gpas: list[int]) -> Callable[[], float]:
    def run() -> float:
        vm = build_vm(preset("pc-4g"))
        if kind == "direct":
            direct = DirectMmu(vm, huge_pages=huge)
            start = clock()
            for i, gpa in enumerate(gpas):
                direct.page_fault(i & 1, gpa, False)
        else:
            tdp = TdpMmu(vm, params=TdpMmuParams(host_level=2 if huge else 1))
            start = clock()
            for i, gpa in enumerate(gpas):
                tdp.page_fault(i & 1, gpa, False)  # an EPT violation
        return clock() - start

    return run


def best_of(runs: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Interleaved rounds (the machine's load hits both alike), best time of each."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(ROUNDS):
        for name, run in runs.items():
            best[name] = min(best[name], run())
    return best


def simulate_rate(accesses: int) -> dict[str, float]:
    """In process: best of 3 runs to /dev/null, and the bare loop between them."""
    options = SimulateOptions("tdp", "kernbench", accesses, 1)
    text = io.StringIO()
    simulate(options, text)
    lines = text.getvalue().splitlines()
    best = bare = cpu = float("inf")
    printed = 0
    with open(os.devnull, "w") as sink:
        for _ in range(3):
            start, cpu_start = time.perf_counter(), time.process_time()
            printed = simulate(options, sink)
            best = min(best, time.perf_counter() - start)
            cpu = min(cpu, time.process_time() - cpu_start)
            start = time.perf_counter()
            for line in lines:
                sink.write(line + "\n")
            bare = min(bare, time.perf_counter() - start)
    return {
        "lines": printed,
        "seconds": best,
        "lines_per_s": printed / best,
        "lines_per_cpu_s": printed / cpu,  # CPU time: what the shared cores' load hides
        "bare_loop_s": bare,
        "over_bare_loop": best / bare,
    }


SOURCES = ("engine", "tui", "themes", "pyproject.toml", "setup.py", "README.md")
CHECKOUT = Path(__file__).resolve().parent.parent


def installed_command(tmp: Path, checkout: Path = CHECKOUT) -> Path:
    """`mmuscope` as `pip install .` leaves it: a wheel built from a copy of the checkout
    (this environment's setuptools, offline, nothing written into the checkout) and
    installed with its .pyc files into a fresh venv of this Python, without dependencies
    (`simulate` imports none).  tests/test_install.py builds its wheel the same way."""
    src, dist, env_dir = tmp / "src", tmp / "dist", tmp / "venv"
    for name in SOURCES:
        path = checkout / name
        if path.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    build = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    subprocess.run([sys.executable, "-c", build, dist], cwd=src, capture_output=True, check=True)
    (wheel,) = dist.glob("mmuscope-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", env_dir], check=True)
    pip = [sys.executable, "-m", "pip", "--python", env_dir / "bin" / "python", "install"]
    subprocess.run([*pip, "-q", "--no-deps", "--no-index", wheel], capture_output=True, check=True)
    return env_dir / "bin" / "mmuscope"


def command_rates(commands: dict[str, Path], accesses: int) -> dict[str, dict[str, float]]:
    """`mmuscope simulate ...` as a user runs it, start-up included, for each installed
    command, their runs interleaved (the same load for each): with the .pyc files an
    installation has (PYTHONDONTWRITEBYTECODE cleared, as startup_speed.py does, and a
    warm-up run that writes any missing), the output to a pipe; best and median of
    COMMAND_RUNS, and lines per second of the median's CPU time (user + sys of the child)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": ""}
    argvs, lines = {}, {}
    for name, mmuscope in commands.items():
        argvs[name] = [str(mmuscope), "simulate", "--mmu", "tdp", "--workload", "kernbench"]
        argvs[name] += ["--accesses", str(accesses)]
        done = subprocess.run(argvs[name], capture_output=True, text=True, check=True, env=env)
        lines[name] = done.stdout.count("\n") - 1  # the cpus= header is not an event
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(COMMAND_RUNS):
        for name, argv in argvs.items():
            before = os.times()
            start = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True, env=env)
            walls[name].append(time.perf_counter() - start)
            after = os.times()
            cpus[name].append(
                after.children_user - before.children_user + after.children_system
                - before.children_system
            )  # fmt: skip
    rows = {}
    for name in commands:
        median, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        rows[name] = {
            "lines": lines[name],
            "seconds": min(walls[name]),
            "lines_per_s": lines[name] / min(walls[name]),
            "median_s": median,
            "median_lines_per_s": lines[name] / median,
            "lines_per_cpu_s": lines[name] / cpu if cpu else float("inf"),
            "over_budget": lines[name] / median / BUDGET_LINES_PER_S,
        }
    return rows


COLLECTED = re.compile(r"^==\d+== Collected : (\d+)$", re.MULTILINE)


def instructions(argv: list[str]) -> int:
    """The instructions `argv` runs, counted by callgrind (its output thrown away, the
    profile in a temporary directory); the environment as command_rates() has it, and
    PYTHONHASHSEED=0 (a string hash's seed changes dicts' probing, and so the count)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "", "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        profile = os.path.join(tmp, "callgrind.out")
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}", *argv],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, check=True,
        )  # fmt: skip
    found = COLLECTED.search(done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count: {done.stderr[-300:]}")
    return int(found.group(1))


def instruction_counts(mmuscope: Path, accesses: int) -> dict[str, float]:
    """Millions of instructions: `python -c pass` of the command's Python (the baseline),
    the command's start-up (10 accesses) and the whole command, with their ratios and the
    command's per line."""
    command = [str(mmuscope), "simulate", "--mmu", "tdp"]
    command += ["--workload", "kernbench", "--accesses"]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": ""}  # writes the .pyc files
    argv = [*command, str(accesses)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    lines = done.stdout.count("\n") - 1  # the cpus= header is not an event
    base = instructions([str(mmuscope.with_name("python")), "-c", "pass"])
    startup = instructions([*command, "10"])
    whole = instructions([*command, str(accesses)])
    return {
        "pass_M": base / 1e6,
        "startup_M": startup / 1e6,
        "command_M": whole / 1e6,
        "startup_over_pass": startup / base,
        "command_over_pass": whole / base,
        "per_line": whole / lines,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=20_000)
    parser.add_argument("--accesses", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--instructions", action="store_true", help="count, not time")
    parser.add_argument(
        "--editable", action="store_true", help="this environment's mmuscope, not a wheel's"
    )
    parser.add_argument(
        "--baseline", type=Path, metavar="DIR", action="append", default=[],
        help="also a wheel of this checkout, interleaved (repeatable)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        parser.exit(2, "tdp_speed.py: --instructions needs valgrind (apt-get install valgrind)\n")
    with tempfile.TemporaryDirectory() as tmp:
        if args.editable:
            mmuscope = Path(sys.executable).with_name("mmuscope")
        else:
            if int(version("setuptools").split(".")[0]) < 77:  # as tests/test_install.py
                parser.exit(2, f"tdp_speed.py: setuptools {version('setuptools')} cannot build "
                            "the wheel (pyproject needs >=77: pip install -e '.[test]'); "
                            "--editable times this environment's command\n")  # fmt: skip
            try:
                mmuscope = installed_command(Path(tmp) / "this")
            except subprocess.CalledProcessError as err:
                why = (err.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
                parser.exit(2, f"tdp_speed.py: no wheel to time ({': '.join(why) or err}); "
                            "--editable times this environment's command\n")  # fmt: skip
        commands = {"this": mmuscope}
        for checkout in args.baseline:
            if not (checkout / "pyproject.toml").is_file():
                parser.exit(2, f"tdp_speed.py: --baseline {checkout}: not a checkout\n")
            name = checkout.resolve().name
            if name in commands:
                parser.exit(2, f"tdp_speed.py: --baseline {checkout}: a second {name!r}\n")
            commands[name] = installed_command(Path(tmp) / f"baseline-{name}", checkout)
        rows = measure(args, commands)
    rows["command"] = {"mmuscope": "editable" if args.editable else "wheel", **interpreter()}
    _print(rows, args.json)


def interpreter() -> dict[str, str]:
    """The Python that ran it all (the wheels' venvs are made from it): its path, version
    and whether it runs through libpython.so.  On this project's machines pyenv's 3.11
    (--enable-shared) does, and ran the installed command 1.2-1.4x slower than Debian's
    statically linked /usr/bin/python3 (the Makefile's choice): say which one timed it."""
    maps = Path("/proc/self/maps")
    shared = ("yes" if "libpython" in maps.read_text() else "no") if maps.exists() else "?"
    return {
        "python": os.path.realpath(sys.executable),
        "version": platform.python_version(),
        "libpython_so": shared,
    }


def measure(args: argparse.Namespace, commands: dict[str, Path]) -> dict[str, object]:
    rows: dict[str, object] = {}
    if args.instructions:
        for name, mmuscope in commands.items():
            rows[f"instructions_{name}"] = instruction_counts(mmuscope, args.accesses)
        return rows
    gpas = first_touches(args.faults)
    for huge in (False, True):
        size = "2M" if huge else "4K"
        best = best_of({k: fault_run(k, huge, gpas) for k in ("direct", "tdp")})
        rows[f"fault_{size}"] = {
            "direct_us": best["direct"] / len(gpas) * 1e6,
            "tdp_us": best["tdp"] / len(gpas) * 1e6,
            "tdp_over_direct": best["tdp"] / best["direct"],
        }
    sim = simulate_rate(args.accesses)
    rows["simulate_kernbench"] = {**sim, "over_budget": sim["lines_per_s"] / BUDGET_LINES_PER_S}
    for name, row in command_rates(commands, args.accesses).items():
        rows[f"simulate_command_{name}"] = row
    rows["load"] = dict(zip(("load1", "load5", "load15"), os.getloadavg(), strict=True))
    return rows


def _print(rows: dict[str, object], as_json: bool) -> None:
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for name, row in rows.items():
        assert isinstance(row, dict)
        print(
            name,
            " ".join(
                f"{k}={v:.3g}" if isinstance(v, float | int) else f"{k}={v}" for k, v in row.items()
            ),
        )


if __name__ == "__main__":
    main()
