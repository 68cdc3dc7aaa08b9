"""The `mmuscope` command line (docs/architecture.md §6.3): this module only assembles
the commands.

Each command lives in its own module and depends on `tui/cliparts.py` for what commands
share (CliError, the parser class, option helpers); here are the parser, the table of
which module runs which command, and the exit codes: 0 success, 2 bad input or a missing
tool (one line on stderr), 1 a bug.  Modules are imported when their command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Collection, Sequence
from importlib import import_module
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from types import ModuleType

    from .cliparts import CliParser

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


def first_word(argv: Sequence[str], takes_value: Collection[str]) -> str | None:
    """The first word of `argv` that is not an option nor the value of the option before
    it (`--scenario vtlb`: an option of `takes_value`): the command, if it is one; None
    when there is none (the explorer)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in takes_value
        else:
            return word
    return None


DESCRIPTION = """\
A terminal microscope for KVM's MMU. Without a command: the explorer, a Textual
app that animates memslot lookups live and walks through the classroom scenarios
(ctrl+q quits, ? lists keys). `mmuscope COMMAND --help` explains each command."""
EXAMPLES = (
    "mmuscope                                     # the explorer",
    "mmuscope --layout max --lookup binary        # KVM's limit, 32,764 memslots",
    "mmuscope --scenario fast-zap --theme projector",
    "mmuscope overview                            # the same guest as text",
)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; given the command line `argv`, only the command it names gets
    its arguments, and the others their name and help line only where argparse shows
    them (`--help`, and its error for a word that is no command), so starting the
    explorer builds no command's parser (each an ArgumentParser: ~10M instructions of
    its start-up for the thirteen) and imports no command module."""
    from . import __version__
    from .cliparts import CliParser, add_explorer_options

    parser = CliParser(
        prog="mmuscope",
        description=DESCRIPTION,
        epilog="examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    parser.add_argument("--version", action="version", version=f"mmuscope {__version__}")
    explorer = add_explorer_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CliParser)
    if argv is None:
        _add_commands(sub, only=None)
    else:
        takes_value = {s for action in explorer if action.nargs != 0 for s in action.option_strings}
        word = first_word(argv, takes_value)
        command = word if word in RUNNERS else None
        before = argv if command is None else argv[: list(argv).index(command)]
        # argparse shows the list of commands in --help and in the error for a word that
        # is no command; a command line with neither parses the same without it
        listed = (word is not None and command is None) or _asks_help(before)
        _add_commands(sub, only=command or "", listed=listed)
        if command is not None:
            _refuse_explorer_options(parser, argv, command, explorer)
    return parser


def _asks_help(words: Sequence[str]) -> bool:
    """Whether `words` hold -h or --help (or an abbreviation argparse takes: --h, --he,
    --hel): argparse prints the help listing every command when it meets one."""
    return any(word == "-h" or (len(word) > 2 and "--help".startswith(word)) for word in words)


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

    from .cliparts import add_display_options
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
    add_display_options(replay)


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

    export.add_argument(
        "-o", "--output", type=Path, required=True, metavar="OUT",
        help="the file to write: .dot, .pdf, .svg or .png",
    )  # fmt: skip
    export.add_argument(
        "--path", type=int_arg, metavar="GFN", help="number the nodes a lookup of GFN visits"
    )
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
    src.add_argument("--preset", metavar="NAME", help="a preset guest (default pc-4g)")
    layout.add_argument(
        "--address-space", default="memory", metavar="NAME",
        help="with --mtree: the dump's address space to read (default memory)",
    )  # fmt: skip
    layout.add_argument("--json", action="store_true", help="print JSON")


def _rmaps_stat(rmaps: argparse.ArgumentParser) -> None:
    from mmuscope.engine.mmu.shadow.rmap_workloads import MAX_PAGES, MAX_PROCESSES

    from .cliparts import count_arg

    rmaps.add_argument(
        "--workload", default="fork", choices=("fork", "kernbench"),
        help="fork: a parent and its children map the same pages; kernbench: many short "
        "processes (default fork)",
    )  # fmt: skip
    rmaps.add_argument(
        "--children", type=count_arg, default=500,
        help=f"forked children (fork), or processes (kernbench); 0 to {MAX_PROCESSES}, "
        "default 500",
    )  # fmt: skip
    rmaps.add_argument(
        "--pages", type=count_arg, default=16,
        help=f"4 KiB pages each process maps, 1 to {MAX_PAGES} (default 16)",
    )  # fmt: skip
    rmaps.add_argument(
        "--era", default="6.4", choices=("3", "15", "14", "6.4"),
        help="struct pte_list_desc's layout (default 6.4)",
    )  # fmt: skip
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


class Command(NamedTuple):
    """A command `tui/cli.py` builds the parser of: its line in `mmuscope --help`, what
    `mmuscope NAME --help` says of it, and what adds its arguments."""

    help: str
    description: str
    examples: tuple[str, ...]
    add_arguments: Callable[[argparse.ArgumentParser], None]


# in the order `--help` lists them
LOCAL: dict[str, Command] = {
    "overview": Command(
        "print a guest's memslots and lookup costs",
        "A guest's memslots, and how many slots or tree nodes each lookup strategy visits "
        "to find a few of its gfns (no cache), printed as text: the explorer's first screen "
        "for a pipe, a log or a terminal where the app cannot run. The guest is pc-4g "
        "unless --layout or --mtree names another; --as picks its address space.",
        (
            "mmuscope overview",
            "mmuscope overview --layout q35-16g --as 1    # the SMM address space",
            "mmuscope overview --layout max | tail -12    # KVM's limit, 32,764 memslots",
        ),
        _overview,
    ),
    "scenarios": Command(
        "list the classroom scenarios (open one with --scenario)",
        "The classroom scenarios, one a line: name, screen, the thread it comes from "
        "(docs/threads.md), steps and title. `mmuscope --scenario NAME` opens the explorer "
        "paused on a scenario's first step; > steps, < goes back.",
        (
            "mmuscope scenarios",
            "mmuscope --scenario fast-zap                 # opens the app",
        ),
        _no_arguments,
    ),
    "replay": Command(
        "replay a trace-cmd report or tracefs trace (the app, or text)",
        "A kvmmmu trace, as `trace-cmd report` prints it or as a tracefs `trace` file "
        "(from `mmuscope simulate`, `kvm --trace-out` or a real host), shown in the replay "
        "screen, or printed as one JSON object per event (--jsonl) or as counts (--summary). "
        "With --jsonl or --summary, TRACE '-' reads stdin.",
        (
            "mmuscope simulate --mmu tdp --workload kernbench --accesses 2000 > tdp.txt",
            "mmuscope replay tdp.txt --summary",
            "mmuscope replay tdp.txt --jsonl --hex64 | head -3",
            "mmuscope replay tdp.txt                      # the replay screen",
        ),
        _replay,
    ),
    "lookup": Command(
        "explain one memslot lookup in text",
        "One memslot lookup explained probe by probe: the per-VM last_used_slot cache, "
        "then each slot or tree node the strategy visits for the gfn, and why it goes left "
        "or right, down to the slot that holds it or the miss (an MMIO gfn). --compare adds "
        "the cost of the same gfn under every strategy.",
        (
            "mmuscope lookup 0xfee00 --lookup wbtree --compare",
            "mmuscope lookup 0xfee00000 --gpa             # an address, not a gfn",
            "mmuscope lookup 0x60 --layout q35-16g --as 1 # SMRAM",
        ),
        _lookup,
    ),
    "export": Command(
        "write the memslot structure as dot/pdf/svg/png",
        "A lookup strategy's structure (the sorted array, the weight-balanced or red-black "
        "tree) as a Graphviz drawing; the format follows OUT's suffix: .dot always works, "
        ".pdf, .svg and .png run Graphviz's dot. --path numbers the nodes one lookup "
        "visits. A failed export leaves no file behind.",
        (
            "mmuscope export -o rbtree.dot",
            "mmuscope export -o wbtree.svg --lookup wbtree --path 0xfee00",
        ),
        _export,
    ),
    "layout": Command(
        "show a guest layout, or import a QEMU one",
        "A guest's memory regions as QEMU registers them with KVM (one line each: gpa "
        "range, size, name, flags; or --json): a preset (--preset, pc-4g by default), "
        "QEMU's `info mtree` or `info mtree -f` text (--mtree), or QEMU's recorded memslot "
        "calls (--trace: a kvm_set_user_memory trace, or strace's "
        "KVM_SET_USER_MEMORY_REGION lines).",
        (
            "mmuscope layout",
            "mmuscope layout --preset q35-16g --json | head -12",
        ),
        _layout,
    ),
    "rmaps-stat": Command(
        "debugfs mmu_rmaps_stat after a workload (shadow paging, as in the PTE_LIST_EXT thread)",
        "The VM's debugfs `mmu_rmaps_stat` after a shadow-paging workload, as the kernel "
        "prints it: per level, how many rmaps hold 0, 1, 2-3, 4-7, ... sptes (ffs() "
        "buckets; --log2 for true log2). --era picks struct pte_list_desc's layout: "
        "PTE_LIST_EXT 3 (to 2021), 15 and 14 (the PTE_LIST_EXT thread (kvm, 2021); 14 "
        "shipped in 5.15-6.3), or 6.4's spte_count/tail_count.",
        (
            "mmuscope rmaps-stat",
            "mmuscope rmaps-stat --era 3 --children 50 --pages 64",
            "mmuscope rmaps-stat --workload kernbench --log2",
        ),
        _rmaps_stat,
    ),
    "bench": Command(
        "the threads' claims measured beside their numbers, and the engine's speed",
        "Each mailing-list thread's claims measured on the model beside the numbers the "
        "thread reported (docs/threads.md), one table per claim with its verdict, and the "
        "engine's own speed. The whole run takes minutes; --quick makes every run smaller, "
        "--table runs only the named tables.",
        (
            "mmuscope bench --quick --table slot_cache",
            "mmuscope bench --quick --table slot_cache --json | head -c 300",
        ),
        _bench,
    ),
}


def _add_commands(
    sub: argparse._SubParsersAction[CliParser], only: str | None, listed: bool = True
) -> None:
    """Every command's parser; with `only`, the others' without their arguments (their
    name and help line for the list of commands), or none of them unless `listed` (each
    is an ArgumentParser: 0.8M instructions of `mmuscope simulate`'s start-up)."""
    from .cliparts import add_command

    for name, command in LOCAL.items():
        if only is None or only == name:
            parser = add_command(sub, name, command.help, command.description, command.examples)
            command.add_arguments(parser)
        elif listed:
            sub.add_parser(name, help=command.help)
    for name, (module, function, help) in EXTERNAL.items():
        if only is None or only == name:
            getattr(_command_module(module), function)(sub)
        elif listed:
            sub.add_parser(name, help=help)


def _quiet_stdout() -> None:
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; Ctrl+C ends any of them with one line and exit 130, SIGTERM and
    SIGHUP the same way with 128 + the signal, and no Graphviz `dot` started on the way
    is left running."""
    from .cliparts import Ended, end_on_signals

    end_on_signals()
    try:
        return _main(argv)
    except Ended as ended:
        _last_word(f"mmuscope: ended by {ended}")
        return 128 + ended.signum
    except KeyboardInterrupt:
        _last_word("mmuscope: interrupted")
        return 130
    finally:
        render = sys.modules.get("mmuscope.engine.export.render")
        if render is not None:
            render.kill_running_dots()


def _last_word(line: str) -> None:
    """`line` on stderr, unless the terminal is gone (a hangup: EIO; then nothing more
    is written there, not even the buffers Python flushes at exit)."""
    try:
        print(line, file=sys.stderr)
        sys.stderr.flush()
    except OSError:
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (sys.stdout.fileno(), sys.stderr.fileno()):
            os.dup2(devnull, fd)


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
