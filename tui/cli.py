"""The `mmuscope` command line (CONTRACT.md): this module only assembles the commands.

Each command lives in its own module and depends on `tui/cliparts.py` for what commands
share (CliError, the parser class, option helpers); here are the parser, the table of
which module runs which command, and the exit codes: 0 success, 2 bad input or a missing
tool (one line on stderr), 1 a bug.  Modules are imported when their command runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from .cliparts import CliError, CliParser, add_explorer_options, add_guest_options, int_arg

# command -> (module in tui, function taking the parsed arguments and returning the exit code)
RUNNERS: dict[str | None, tuple[str, str]] = {
    None: ("explorer_cli", "run_explorer"),
    "overview": ("console", "show_overview"),
    "scenarios": ("explorer_cli", "list_scenarios"),
    "replay": ("replay_cli", "run_replay"),
    "lookup": ("commands", "run_lookup"),
    "export": ("commands", "run_export"),
    "layout": ("commands", "run_layout"),
    "rmaps-stat": ("commands", "run_rmaps_stat"),
    "bench": ("bench", "run_bench"),
    "serve": ("serve", "run_serve"),
    "live": ("live", "run_live"),
    "kvm": ("kvm_cli", "run_kvm"),
    "simulate": ("simulate_cli", "run_simulate"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(
        prog="mmuscope",
        description=(
            "A terminal microscope for KVM's MMU.  Without a command: the explorer, a "
            "Textual app that animates memslot lookups live (ctrl+q quits, ? lists keys)."
        ),
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"mmuscope {__version__}")
    add_explorer_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CliParser)

    sub.add_parser("overview", help="print the default guest's memslots and lookup costs")
    sub.add_parser("scenarios", help="list the classroom scenarios (open one with --scenario)")

    replay = sub.add_parser(
        "replay", help="replay a trace-cmd report or tracefs trace (the app, or text)"
    )
    replay.add_argument("trace", type=Path, metavar="TRACE", help="the trace text ('-': stdin)")
    mode = replay.add_mutually_exclusive_group()
    mode.add_argument("--jsonl", action="store_true", help="one JSON object per event")
    mode.add_argument("--summary", action="store_true", help="counts as one JSON object")
    replay.add_argument(
        "--hex64",
        action="store_true",
        help='with --jsonl: 64-bit fields (sptes, gfns, addresses) as "0x..." strings, '
        "for readers such as jq 1.6 that round integers above 2**53",
    )

    lookup = sub.add_parser("lookup", help="explain one memslot lookup in text")
    lookup.add_argument("gfn", type=int_arg, help="guest frame number (0x... or decimal)")
    lookup.add_argument("--gpa", action="store_true", help="the number is an address")
    lookup.add_argument("--no-cache", action="store_true", help="bypass last_used_slot")
    lookup.add_argument("--compare", action="store_true", help="cost under every strategy")
    lookup.add_argument("--all", action="store_true", help="print every probe of long scans")
    add_guest_options(lookup)

    export = sub.add_parser("export", help="write the memslot structure as dot/pdf/svg/png")
    export.add_argument("-o", "--output", type=Path, required=True, metavar="OUT")
    export.add_argument("--path", type=int_arg, metavar="GFN", help="highlight one lookup")
    add_guest_options(export)

    layout = sub.add_parser("layout", help="show a guest layout, or import a QEMU one")
    src = layout.add_mutually_exclusive_group()
    src.add_argument("--mtree", type=Path, metavar="FILE", help="QEMU 'info mtree [-f]' text")
    src.add_argument(
        "--trace",
        type=Path,
        metavar="FILE",
        help="QEMU kvm_set_user_memory trace or strace KVM_SET_USER_MEMORY_REGION lines",
    )
    src.add_argument("--preset", metavar="NAME", help="a preset layout")
    layout.add_argument("--address-space", default="memory", help="mtree address space")
    layout.add_argument("--json", action="store_true", help="print JSON")

    rmaps = sub.add_parser(
        "rmaps-stat", help="debugfs mmu_rmaps_stat after a workload (shadow paging, seed 002)"
    )
    rmaps.add_argument("--workload", default="fork", choices=("fork", "kernbench"))
    rmaps.add_argument("--children", type=int_arg, default=500, help="forked children (fork)")
    rmaps.add_argument("--pages", type=int_arg, default=16, help="pages each process maps")
    rmaps.add_argument(
        "--era", default="6.4", choices=("3", "15", "14", "6.4"), help="PTE_LIST_EXT era"
    )
    rmaps.add_argument(
        "--log2", action="store_true", help="true log2 buckets (not the kernel's ffs())"
    )

    from engine.claims.registry import TABLES

    bench = sub.add_parser(
        "bench", help="the seeds' claims measured beside their numbers, and the engine's speed"
    )
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument("--quick", action="store_true", help="smaller runs (well under a minute)")
    bench.add_argument(
        "--table",
        action="append",
        choices=TABLES,
        metavar="NAME",
        help=f"only this table (repeatable): {', '.join(TABLES)}",
    )
    bench.add_argument("--svg", type=Path, metavar="DIR", help="write one SVG chart per table")

    from .serve import add_serve_parser

    add_serve_parser(sub)

    from .live import add_live_parser

    add_live_parser(sub)

    from .kvm_cli import add_kvm_parser

    add_kvm_parser(sub)

    from .simulate_cli import add_parser as add_simulate_parser

    add_simulate_parser(sub)
    return parser


def _quiet_stdout() -> None:
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; Ctrl+C ends any of them with one line and exit 130, and no
    Graphviz `dot` started on the way is left running."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("mmuscope: interrupted", file=sys.stderr)
        return 130
    finally:
        render = sys.modules.get("engine.export.render")
        if render is not None:
            render.kill_running_dots()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command not in RUNNERS:
        parser.error(f"unknown command {args.command!r}")
    module, function = RUNNERS[args.command]
    try:
        run = getattr(importlib.import_module(f"{__package__}.{module}"), function)
        return int(run(args))
    except CliError as err:
        print(f"mmuscope: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _quiet_stdout()  # the reader went away (| head): no "Exception ignored" at exit
        return 0
