"""Every `mmuscope kvm` output mode: what recording costs in time and memory, for two
builds side by side in one run (before/after a change to the recording).

    sudo .venv/bin/python benchmarks/kvm_modes.py [--before CMD] [--after CMD] [--json]
        [--modes summary,jsonl,...] [--no-fork]

1. Time: `kvm touch --pages 65536` in each mode (`--summary`, `--jsonl`, `--compare
   --json`, `--summary --trace-out F`, `--parquet DIR`) against the same guest untraced
   (`--summary --no-trace`), the two run in turn, best of REPEAT each, as a ratio
   (budget: 3x); the untraced row is the best of all its runs.  Wall time, and the
   CPU the run used (`wait4`'s user and system time, the guest's included): on a
   shared machine the wall time also counts the waits for a CPU, which vary from run
   to run; the CPU ratio is the repeatable one.
2. Memory: `kvm fork --pages 65536 --children 8` in each mode, the child's peak
   resident set (`wait4`'s `ru_maxrss`), once each (budget: 500 MB).
`--before` and `--after` are commands that start a build's `mmuscope` (e.g. a checkout of
main, and of the change; `--after` defaults to this checkout's).  `--modes` measures
only those modes (and the untraced run), `--no-fork` skips part 2.  Needs /dev/kvm and
root; exits 2 with the reason otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mmuscope.engine.kvm.vmm import kvm_unavailable_reason

MMUSCOPE = Path(sys.executable).parent / "mmuscope"
REPEAT = 2
LIMIT = 900  # seconds a run may take
TOUCH = ("touch", "--pages", "65536")
FORK = ("fork", "--pages", "65536", "--children", "8")
MODES = {
    "summary": ("--summary",),
    "jsonl": ("--jsonl",),
    "compare": ("--compare", "--json"),
    "trace-out": ("--summary", "--trace-out", "{tmp}/trace.txt"),
    "parquet": ("--parquet", "{tmp}/data"),
}


def run(argv: list[str]) -> dict[str, Any]:
    """One run, its output thrown away: seconds, peak RSS (MB), and what went wrong (a
    run past LIMIT seconds is stopped: its numbers are lower bounds)."""
    with tempfile.TemporaryDirectory(prefix="mmuscope-bench-") as tmp:
        argv = [a.replace("{tmp}", tmp) for a in argv]
        errors = Path(tmp) / "stderr"
        with open(errors, "wb") as err:
            start = time.perf_counter()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err)  # fmt: skip
            while True:  # wait4: the child's own rusage (its peak RSS)
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() - start > LIMIT:
                    proc.terminate()  # mmuscope ends as on Ctrl+C: its instance removed
                    _, status, usage = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.02)
            proc.returncode = status  # reaped here, not by Popen
            seconds = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        said = errors.read_text(errors="replace").strip().splitlines()
    cpu = usage.ru_utime + usage.ru_stime
    out: dict[str, Any] = {"s": seconds, "cpu": cpu, "mb": usage.ru_maxrss / 1024}
    if seconds >= LIMIT:
        out["failed"] = f"stopped after {LIMIT} s"
    elif code not in (0, 1):  # --compare exits 1 on a difference
        out["failed"] = f"exit {code}: {said[-1] if said else ''}"
    return out


def measure(command: str, modes: list[str], fork: bool = True) -> dict[str, dict[str, Any]]:
    """`modes` of one build: touch (best of REPEAT) as a ratio to the untraced run
    measured in turn with it (best of REPEAT), and fork's memory once each."""
    base = [*shlex.split(command), "kvm"]
    untraced_runs: list[dict[str, Any]] = []
    out: dict[str, dict[str, Any]] = {}
    for mode in modes:
        flags = MODES[mode]
        touch, untraced = [], []
        for _ in range(REPEAT):  # interleaved: a change of load hits both alike
            untraced.append(run([*base, *TOUCH, "--summary", "--no-trace"]))
            touch.append(run([*base, *TOUCH, *flags]))
        untraced_runs += untraced
        seconds, cpu = min(t["s"] for t in touch), min(t["cpu"] for t in touch)
        out[mode] = {
            "touch_s": seconds, "ratio": seconds / min(u["s"] for u in untraced),
            "touch_cpu": cpu, "cpu_ratio": cpu / min(u["cpu"] for u in untraced),
        }  # fmt: skip
        forked = [run([*base, *FORK, *flags])] if fork else []
        if forked:
            out[mode] |= {"fork_mb": forked[0]["mb"], "fork_s": forked[0]["s"]}
        failed = [t["failed"] for t in (*touch, *forked) if "failed" in t]
        if failed:
            out[mode]["failed"] = failed
    best = {"touch_s": min(u["s"] for u in untraced_runs), "ratio": 1.0,
            "touch_cpu": min(u["cpu"] for u in untraced_runs), "cpu_ratio": 1.0}  # fmt: skip
    return {"untraced": best, **out}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="another build's mmuscope, measured first")
    parser.add_argument("--after", default=str(MMUSCOPE), help="the build measured second")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    parser.add_argument("--no-fork", action="store_true", help="skip fork's memory runs")
    args = parser.parse_args()
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        print(
            f"kvm_modes: unknown mode {unknown[0]!r} (one of {', '.join(MODES)})", file=sys.stderr
        )
        return 2
    reason = kvm_unavailable_reason() or (None if os.geteuid() == 0 else "not root")
    if reason:
        print(f"kvm_modes: {reason}", file=sys.stderr)
        return 2
    builds = {"before": args.before} if args.before else {}
    builds["after"] = args.after
    result = {name: measure(command, modes, not args.no_fork) for name, command in builds.items()}
    if args.json:
        print(json.dumps(result))
        return 0
    print("\n".join(table(result)))
    return 0


def table(result: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The results as text: a row per mode, the builds side by side, then failures."""
    head = "touch s  ratio  cpu s  ratio  fork s  fork MB"
    width = len(head)
    lines = [f"{'':<10} " + "  ".join(f"{name:^{width}}" for name in result)]
    lines.append(f"{'mode':<10} " + "  ".join(f"{head:>{width}}" for _ in result))
    for mode in next(iter(result.values())):
        cells = []
        for build in result.values():
            m = build[mode]
            fork = f"{m['fork_s']:6.1f} {m['fork_mb']:8.0f}" if "fork_mb" in m else " " * 15
            cells.append(f"{m['touch_s']:7.2f} {m['ratio']:5.2f}x {m['touch_cpu']:6.2f} "
                         f"{m['cpu_ratio']:5.2f}x {fork}")  # fmt: skip
        lines.append(f"{mode:<10} " + "  ".join(f"{c:>{width}}" for c in cells))
    for name, build in result.items():
        for mode, m in build.items():
            for failed in m.get("failed", []):
                lines.append(f"{name} {mode}: {failed}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
