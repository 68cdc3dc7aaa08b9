"""Every `mmuscope kvm` output mode: what recording costs in time and memory, for two
builds side by side in one run (before/after a change to the recording).

    sudo .venv/bin/python benchmarks/kvm_modes.py [--before CMD] [--after CMD] [--json]

1. Time: `kvm touch --pages 65536` in each mode (`--summary`, `--jsonl`, `--compare
   --json`, `--summary --trace-out F`, `--parquet DIR`) against the same guest untraced
   (`--summary --no-trace`), best of REPEAT each, as a ratio (budget: 3x).
2. Memory: `kvm fork --pages 65536 --children 8` in each mode, the child's peak
   resident set (`wait4`'s `ru_maxrss`), once each (budget: 500 MB).
`--before` and `--after` are commands that start a build's `mmuscope` (e.g. a checkout of
main, and of the change; `--after` defaults to this checkout's).  Needs /dev/kvm and
root; exits 2 with the reason otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mmuscope.engine.kvm.vmm import kvm_unavailable_reason

MMUSCOPE = Path(sys.executable).parent / "mmuscope"
REPEAT = 2
TOUCH = ("touch", "--pages", "65536")
FORK = ("fork", "--pages", "65536", "--children", "8")
MODES = {
    "summary": ("--summary",),
    "jsonl": ("--jsonl",),
    "compare": ("--compare", "--json"),
    "trace-out": ("--summary", "--trace-out", "{tmp}/trace.txt"),
    "parquet": ("--parquet", "{tmp}/data"),
}


def run(argv: list[str]) -> tuple[float, int]:
    """Seconds and peak RSS (bytes) of one run, its output thrown away."""
    with tempfile.TemporaryDirectory(prefix="mmuscope-bench-") as tmp:
        argv = [a.replace("{tmp}", tmp) for a in argv]
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # --compare exits 1 on a difference
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}")
    return seconds, usage.ru_maxrss * 1024


def measure(binary: str) -> dict[str, dict[str, float]]:
    base = [binary, "kvm"]
    untraced = min(run([*base, *TOUCH, "--summary", "--no-trace"])[0] for _ in range(REPEAT))
    out: dict[str, dict[str, float]] = {"untraced": {"touch_s": untraced, "ratio": 1.0}}
    for mode, flags in MODES.items():
        seconds = min(run([*base, *TOUCH, *flags])[0] for _ in range(REPEAT))
        _, rss = run([*base, *FORK, *flags])
        out[mode] = {"touch_s": seconds, "ratio": seconds / untraced, "fork_mb": rss / 2**20}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="another build's mmuscope, measured first")
    parser.add_argument("--after", default=str(MMUSCOPE), help="the build measured second")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    reason = kvm_unavailable_reason() or (None if os.geteuid() == 0 else "not root")
    if reason:
        print(f"kvm_modes: {reason}", file=sys.stderr)
        return 2
    builds = {"before": args.before} if args.before else {}
    builds["after"] = args.after
    result = {name: measure(shutil.which(b) or b) for name, b in builds.items()}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'mode':<10} " + "  ".join(f"{b:>28}" for b in result))
    print(f"{'':<10} " + "  ".join(f"{'touch s  ratio  fork MB':>28}" for _ in result))
    for mode in ("untraced", *MODES):
        cells = []
        for build in result.values():
            m = build[mode]
            fork = f"{m['fork_mb']:7.0f}" if "fork_mb" in m else f"{'-':>7}"
            cells.append(f"{m['touch_s']:9.2f} {m['ratio']:6.2f}x {fork}")
        print(f"{mode:<10} " + "  ".join(f"{c:>28}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
