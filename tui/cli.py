"""The `mmuscope` command line (docs/architecture.md §6.3): this module only assembles
the commands.

Each command lives in its own module and depends on `tui/cliparts.py` for what commands
share (CliError, the parser class, option helpers); here are the parser, the table of
which module runs which command, and the exit codes: 0 success, 2 bad input or a missing
tool (one line on stderr), 1 a bug.  Modules are imported when their command runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Sequence
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse
    from types import ModuleType

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
    "query": ("query_cli", "run_query"),
}


# Commands whose parsers live in their own modules, with their help line, so that a
# command line naming another command lists them without importing them.
EXTERNAL: dict[str, tuple[str, str, str]] = {
    "serve": ("serve", "add_serve_parser",
              "serve the explorer to web browsers (a classroom), on 127.0.0.1"),
    "live": ("live", "add_live_parser",
             "tail a tracefs's kvmmmu events live in the replay screen (root)"),
    "kvm": ("kvm_cli", "add_kvm_parser",
            "run a guest program on this host's KVM and record what its MMU did (root)"),
    "simulate": ("simulate_cli", "add_parser",
                 "a simulated run printed as trace-cmd report text (or --jsonl)"),
    "query": ("query_cli", "add_parser",
              "SQL (DuckDB) over a Parquet dataset of events, or a named report"),
}  # fmt: skip


def command_of(argv: Sequence[str], takes_value: Collection[str]) -> str | None:
    """The command `argv` names: its first word that is a command and not the value of
    the option before it (`--scenario vtlb`: an option of `takes_value`), or None (the
    explorer)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in takes_value
        else:
            return word if word in RUNNERS else None
    return None


DESCRIPTION = (
    "A terminal microscope for KVM's MMU.  Without a command: the explorer, a "
    "Textual app that animates memslot lookups live (ctrl+q quits, ? lists keys)."
)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; given the command line `argv`, only the command it names gets
    its arguments (the others keep their name and help line for `--help`), so starting
    the explorer imports no command module."""
    from . import __version__
    from .cliparts import CliParser, add_explorer_options

    parser = CliParser(prog="mmuscope", description=DESCRIPTION)

    parser.add_argument("--version", action="version", version=f"mmuscope {__version__}")
    explorer = add_explorer_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CliParser)
    if argv is None:
        _add_commands(sub, only=None)
    else:
        takes_value = {s for action in explorer if action.nargs != 0 for s in action.option_strings}
        command = command_of(argv, takes_value)
        _add_commands(sub, only=command or "")
        if command is not None:
            _refuse_explorer_options(parser, argv, command, explorer)
    return parser


def _refuse_explorer_options(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    command: str,
    explorer: Sequence[argparse.Action],
) -> None:
    """An explorer option written before a command (`mmuscope --layout max overview`)
    would be parsed and then ignored: refuse it, naming where the command's own go."""
    names = {s for action in explorer for s in action.option_strings}
    for word in argv[: list(argv).index(command)]:
        name = word.split("=", 1)[0]
        if name in names:
            parser.error(
                f"{name} is an option of the explorer (mmuscope without a command) and means "
                f"nothing before {command!r}; a command's own options follow it "
                f"(mmuscope {command} --help)"
            )


def _command_module(module: str) -> ModuleType:
    """The module `tui.<module>` of a command."""
    return import_module(f"{__package__}.{module}")


def _replay(replay: argparse.ArgumentParser) -> None:
    from pathlib import Path

    from .dataset_cli import add_options

    replay.add_argument(
        "trace", type=Path, nargs="+", metavar="TRACE",
        help="the trace: text, gzip/xz/zstd text or trace.dat ('-': stdin); "
        "several with --parquet, each its own source",
    )  # fmt: skip
    mode = replay.add_mutually_exclusive_group()
    mode.add_argument("--jsonl", action="store_true", help="one JSON object per event")
    mode.add_argument("--summary", action="store_true", help="counts as one JSON object")
    add_options(replay, mode, several=True)
    replay.add_argument(
        "--hex64",
        action="store_true",
        help='with --jsonl: 64-bit fields (sptes, gfns, addresses) as "0x..." strings, '
        "for readers such as jq 1.6 that round integers above 2**53",
    )


def _overview(overview: argparse.ArgumentParser) -> None:
    from .cliparts import add_guest_options

    add_guest_options(overview)


def _lookup(lookup: argparse.ArgumentParser) -> None:
    from .cliparts import add_guest_options, int_arg

    lookup.add_argument("gfn", type=int_arg, help="guest frame number (0x... or decimal)")
    lookup.add_argument("--gpa", action="store_true", help="the number is an address")
    lookup.add_argument("--no-cache", action="store_true", help="bypass last_used_slot")
    lookup.add_argument("--compare", action="store_true", help="cost under every strategy")
    lookup.add_argument("--all", action="store_true", help="print every probe of long scans")
    add_guest_options(lookup)


def _export(export: argparse.ArgumentParser) -> None:
    from pathlib import Path

    from .cliparts import add_guest_options, int_arg

    export.add_argument("-o", "--output", type=Path, required=True, metavar="OUT")
    export.add_argument("--path", type=int_arg, metavar="GFN", help="highlight one lookup")
    add_guest_options(export)


def _layout(layout: argparse.ArgumentParser) -> None:
    from pathlib import Path

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


def _rmaps_stat(rmaps: argparse.ArgumentParser) -> None:
    from .cliparts import int_arg

    rmaps.add_argument("--workload", default="fork", choices=("fork", "kernbench"))
    rmaps.add_argument("--children", type=int_arg, default=500, help="forked children (fork)")
    rmaps.add_argument("--pages", type=int_arg, default=16, help="pages each process maps")
    rmaps.add_argument(
        "--era", default="6.4", choices=("3", "15", "14", "6.4"), help="PTE_LIST_EXT era"
    )
    rmaps.add_argument(
        "--log2", action="store_true", help="true log2 buckets (not the kernel's ffs())"
    )


def _bench(bench: argparse.ArgumentParser) -> None:
    from pathlib import Path

    from mmuscope.engine.claims.registry import TABLES

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


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


# command -> (help line, what adds its arguments), in the order `--help` lists them
LOCAL: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "overview": ("print a guest's memslots and lookup costs", _overview),
    "scenarios": ("list the classroom scenarios (open one with --scenario)", _no_arguments),
    "replay": ("replay a trace-cmd report or tracefs trace (the app, or text)", _replay),
    "lookup": ("explain one memslot lookup in text", _lookup),
    "export": ("write the memslot structure as dot/pdf/svg/png", _export),
    "layout": ("show a guest layout, or import a QEMU one", _layout),
    "rmaps-stat": (
        "debugfs mmu_rmaps_stat after a workload (shadow paging, as in the PTE_LIST_EXT thread)",
        _rmaps_stat,
    ),
    "bench": ("the threads' claims measured beside their numbers, and the engine's speed", _bench),
}


def _add_commands(sub: argparse._SubParsersAction, only: str | None) -> None:  # type: ignore[type-arg]
    """Every command's parser; with `only`, the others' without their arguments."""
    for name, (help, add_arguments) in LOCAL.items():
        parser = sub.add_parser(name, help=help)
        if only is None or only == name:
            add_arguments(parser)
    for name, (module, function, help) in EXTERNAL.items():
        if only is None or only == name:
            getattr(_command_module(module), function)(sub)
        else:
            sub.add_parser(name, help=help)


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
        render = sys.modules.get("mmuscope.engine.export.render")
        if render is not None:
            render.kill_running_dots()


def _main(argv: Sequence[str] | None) -> int:
    from .cliparts import CliError

    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(words).parse_args(words)
    module, function = RUNNERS[args.command]
    try:
        return _run(getattr(_command_module(module), function), args)
    except CliError as err:
        print(f"mmuscope: error: {err}", file=sys.stderr)
        return 2


def _run(runner: Callable[[Any], int], args: object) -> int:
    """The runner's exit code; 0 when the reader of stdout went away (`| head`)."""
    try:
        return int(runner(args))
    except BrokenPipeError:
        _quiet_stdout()  # no "Exception ignored" at exit
        return 0
