"""``mmuscope kvm PROGRAM`` without an output flag: the replay screen following a real
guest run live.

The guest runs in a child process (``mmuscope kvm PROGRAM --follow DIR``): KVM_RUN is
bounded in time by SIGALRM, which only the main thread of a process can take, and the
VM's fds and the tracefs instance live and die with that process whatever the app does.
The child writes the kernel's text to the FIFO ``DIR/trace`` as it drains its instance,
and one JSON line per slice to ``DIR/stats.jsonl`` (the KVM_GET_STATS_FD deltas so far);
the screen tails the FIFO into its live model and shows the statistics beside
kvm_stat's tracepoint counts.  Quitting the app interrupts the child (SIGINT: its
`finally` blocks close the VM and remove the instance).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from .cliparts import CliError, check_replay_app_options, run_app
from .kvm_launch import TRACE_FIFO, KvmLaunch


def child_argv(args: argparse.Namespace, folder: Path) -> tuple[str, ...]:
    argv = [sys.executable, "-m", "mmuscope.tui", "kvm", args.program, "--follow", str(folder)]
    if args.pages is not None:
        argv += ["--pages", str(args.pages)]
    if args.children is not None:
        argv += ["--children", str(args.children)]
    if args.trace_out is not None:
        argv += ["--trace-out", str(args.trace_out)]
    return tuple(argv)


def preflight() -> str:
    """/dev/kvm and tracefs usable (one-line errors otherwise); the header text."""
    from mmuscope.engine.kvm.host import kernel_release, read_host_mmu
    from mmuscope.engine.kvm.tracing import TracefsError, find_tracefs
    from mmuscope.engine.kvm.vmm import Kvm, KvmUnavailableError

    try:
        Kvm().close()
        find_tracefs()
    except (KvmUnavailableError, TracefsError) as err:
        raise CliError(str(err)) from None
    return f"{kernel_release()} · {read_host_mmu().describe()}"


def run_kvm_app(args: argparse.Namespace) -> int:
    check_replay_app_options(args, f"mmuscope kvm {args.program} --summary")
    header = preflight()
    from .app import make_app

    with tempfile.TemporaryDirectory(prefix="mmuscope-kvm-") as tmp:
        folder = Path(tmp)
        os.mkfifo(folder / TRACE_FIFO)
        launch = KvmLaunch(args.program, child_argv(args, folder), folder, header)
        run_app(make_app(kvm=launch, theme=args.theme, export_dir=args.export_dir))
    return 0
