"""The `mmuscope` command line (CONTRACT.md).  Heavy modules are imported where needed.

Exit codes: 0 success, 2 bad input or a missing tool (one line on stderr), 1 a bug.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from engine.lookup import LOOKUP_STRATEGIES

if TYPE_CHECKING:
    from engine.memslot_churn import RecordedChurn
    from engine.scenarios import Scenario

    from .app import MmuscopeApp


class CliError(Exception):
    """Bad input: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _int(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"out of range (0 to 2**64-1): {text!r}")
    return value


def _add_guest_options(parser: argparse.ArgumentParser) -> None:
    from engine.layouts import DEFAULT_LAYOUT, PRESETS

    parser.add_argument(
        "--lookup",
        default="rbtree",
        choices=LOOKUP_STRATEGIES,
        help="lookup strategy (default rbtree)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--layout",
        default=None,
        metavar="NAME",
        help=f"preset guest: {', '.join(PRESETS)} (default {DEFAULT_LAYOUT})",
    )
    source.add_argument("--mtree", type=Path, metavar="FILE", help="QEMU 'info mtree' text")
    parser.add_argument("--as", dest="as_id", type=_int, default=0, help="address space (1 = SMM)")


def _add_explorer_options(parser: argparse.ArgumentParser) -> None:
    from engine.pacing import DEFAULT_SPEED
    from engine.workload import DEFAULT_WORKLOAD, WORKLOADS

    group = parser.add_argument_group("explorer")
    _add_guest_options(group)  # type: ignore[arg-type]
    group.add_argument(
        "--workload",
        default=DEFAULT_WORKLOAD,
        choices=tuple(WORKLOADS),
        help=f"access mix (default {DEFAULT_WORKLOAD})",
    )
    group.add_argument("--seed", type=_int, default=1, help="workload seed (default 1)")
    group.add_argument(
        "--speed", type=float, default=DEFAULT_SPEED, help="lookups per second to start with"
    )
    group.add_argument("--paused", action="store_true", help="start paused")
    group.add_argument("--theme", help="theme name (default mmuscope-dark)")
    group.add_argument(
        "--export-dir", type=Path, default=Path("."), help="where e and S write files"
    )
    group.add_argument(
        "--qemu-trace",
        type=Path,
        metavar="FILE",
        help="replay QEMU's recorded memslot calls (kvm_set_user_memory trace or strace) "
        "as live churn: j steps, playing interleaves them with lookups",
    )
    group.add_argument(
        "--scenario",
        metavar="NAME",
        help="open on a classroom scenario, paused on its first step (see `scenarios`)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mmuscope",
        description=(
            "A terminal microscope for KVM's MMU.  Without a command: the explorer, a "
            "Textual app that animates memslot lookups live (ctrl+q quits, ? lists keys)."
        ),
    )
    _add_explorer_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    sub.add_parser("overview", help="print the default guest's memslots and lookup costs")
    sub.add_parser("scenarios", help="list the classroom scenarios (open one with --scenario)")

    replay = sub.add_parser(
        "replay", help="replay a trace-cmd report or tracefs trace (the app, or text)"
    )
    replay.add_argument("trace", type=Path, metavar="TRACE", help="the trace text ('-': stdin)")
    mode = replay.add_mutually_exclusive_group()
    mode.add_argument("--jsonl", action="store_true", help="one JSON object per event")
    mode.add_argument("--summary", action="store_true", help="counts as one JSON object")

    lookup = sub.add_parser("lookup", help="explain one memslot lookup in text")
    lookup.add_argument("gfn", type=_int, help="guest frame number (0x... or decimal)")
    lookup.add_argument("--gpa", action="store_true", help="the number is an address")
    lookup.add_argument("--no-cache", action="store_true", help="bypass last_used_slot")
    lookup.add_argument("--compare", action="store_true", help="cost under every strategy")
    lookup.add_argument("--all", action="store_true", help="print every probe of long scans")
    _add_guest_options(lookup)

    export = sub.add_parser("export", help="write the memslot structure as dot/pdf/svg/png")
    export.add_argument("-o", "--output", type=Path, required=True, metavar="OUT")
    export.add_argument("--path", type=_int, metavar="GFN", help="highlight one lookup")
    _add_guest_options(export)

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
    rmaps.add_argument("--children", type=_int, default=500, help="forked children (fork)")
    rmaps.add_argument("--pages", type=_int, default=16, help="pages each process maps")
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
    return parser


def run_explorer(args: argparse.Namespace) -> int:
    """Open the explorer (the app factory shared with the tests and screenshots)."""
    app = explorer_app(args)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise CliError("the explorer needs a terminal; `mmuscope overview` prints a summary")
    app.run()
    return 0


def explorer_app(args: argparse.Namespace) -> MmuscopeApp:
    """The explorer the options describe, every option checked (also for `serve`)."""
    scenario = _scenario(args.scenario) if args.scenario else None
    churn = _churn(args) if args.qemu_trace else None
    from .commands import load_layout

    layout = load_layout(args.layout, args.mtree)
    check_display_options(args)
    if args.as_id not in (0, 1):
        raise CliError(f"address space {args.as_id} does not exist (0..1)")
    if not 0 < args.speed <= 100000:
        raise CliError(f"--speed {args.speed:g}: give lookups per second, 0.5 to 10000")
    from .app import make_app

    return make_app(
        layout,
        lookup=args.lookup,
        workload=args.workload,
        seed=args.seed,
        speed=args.speed,
        playing=not args.paused,
        theme=args.theme,
        export_dir=args.export_dir,
        as_id=args.as_id,
        scenario=scenario,
        churn=churn,
    )


def check_display_options(args: argparse.Namespace) -> None:
    """`--theme` and `--export-dir`, which every command that opens the app takes."""
    if args.theme is not None:
        from .themes import load_themes

        names = [theme.name for theme in load_themes()[0]]
        if args.theme not in names:
            raise CliError(f"unknown theme {args.theme!r}; choose from {', '.join(names)}")
    if not args.export_dir.is_dir():
        raise CliError(f"--export-dir {args.export_dir}: no such directory")


def _churn(args: argparse.Namespace) -> RecordedChurn:
    from engine.layouts.qemu_trace import TraceFormatError
    from engine.memslot_churn import recorded_churn

    if args.layout or args.mtree:
        raise CliError("--qemu-trace builds the guest from the recording: drop --layout/--mtree")
    try:
        text = args.qemu_trace.read_text(errors="replace")
    except OSError as err:
        raise CliError(f"{args.qemu_trace}: {err.strerror or err}") from None
    try:
        return recorded_churn(text, args.qemu_trace.stem)
    except TraceFormatError as err:
        raise CliError(f"{args.qemu_trace}: {err}") from None


def _scenario(name: str) -> Scenario:
    from engine.scenarios import ScenarioError, load_scenario

    try:
        return load_scenario(name)
    except ScenarioError as err:
        raise CliError(str(err)) from None


def run_replay(args: argparse.Namespace) -> int:
    from .replay_cli import TraceFileError, run_replay_text

    if not (args.jsonl or args.summary):
        from .live import run_replay_app

        return run_replay_app(args)
    try:
        return run_replay_text(args)
    except TraceFileError as err:
        raise CliError(str(err)) from None


def _quiet_stdout() -> None:
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def list_scenarios() -> int:
    """`mmuscope scenarios`: one line per scenario, then how to open one."""
    from engine.scenarios import ScenarioError
    from engine.scenarios import list_scenarios as load_all

    try:
        scenarios = load_all()
    except ScenarioError as err:
        raise CliError(str(err)) from None
    width = max(len(s.name) for s in scenarios)
    for s in scenarios:
        steps = f"{len(s.steps)} steps"
        print(f"{s.name:<{width}}  {s.screen:<8}  seed {s.seed[:3]}  {steps:>8}  {s.title}")
    print("\nopen one with: mmuscope --scenario NAME   (> next step, < back)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            return run_explorer(args)
        if args.command == "overview":
            from .console import show_overview

            return show_overview()
        if args.command == "scenarios":
            return list_scenarios()
        if args.command == "replay":
            return run_replay(args)
        if args.command == "lookup":
            from .commands import run_lookup

            return run_lookup(args)
        if args.command == "export":
            from .commands import run_export

            return run_export(args)
        if args.command == "layout":
            from .commands import run_layout

            return run_layout(args)
        if args.command == "rmaps-stat":
            from .commands import run_rmaps_stat

            return run_rmaps_stat(args)
        if args.command == "bench":
            from .bench import run_bench

            return run_bench(args)
        if args.command == "serve":
            from .serve import run_serve

            return run_serve(args)
        if args.command == "live":
            from .live import run_live

            return run_live(args)
    except CliError as err:
        print(f"mmuscope: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _quiet_stdout()  # the reader went away (| head): no "Exception ignored" at exit
        return 0
    parser.error(f"unknown command {args.command!r}")
