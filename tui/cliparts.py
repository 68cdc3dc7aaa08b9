"""The parts every `mmuscope` command shares: the one-line error, the parser that exits
with code 2, number and option helpers, and the guest a command's options describe.

Command modules (commands.py, bench.py, live.py, serve.py, explorer_cli.py, ...) depend on
this module only; `tui/cli.py` assembles them into one parser and never is imported by
them (tests/test_cli_modules.py checks that the `tui` modules import no one in a circle).
Exit codes: 0 success, 2 bad input or a missing tool (one line on stderr), 1 a bug.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from pathlib import Path

    from mmuscope.engine.layouts import Layout


class CliError(Exception):
    """Bad input: printed as one line, exit code 2."""


def help_width() -> int:
    """The width argparse's HelpFormatter takes by default: `shutil.get_terminal_size()`'s
    columns (COLUMNS when set and positive, else the terminal's, else 80) less 2, found
    without importing shutil and the zlib, bz2 and lzma it imports, as every add_argument
    makes a formatter (a command's start-up; tests/test_cli_own_parser.py
    checks it against shutil)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns or 80
        except (AttributeError, ValueError, OSError):
            columns = 80
    return columns - 2


class CliHelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, its default width from `help_width()`."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
        **kwargs: Any,
    ) -> None:
        width = help_width() if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width, **kwargs)


class CliParser(argparse.ArgumentParser):
    """argparse with exit code 2 and one line for a usage error (no usage dump)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", CliHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def int_arg(text: str) -> int:
    """A 64-bit unsigned number, 0x... or decimal (gfns, seeds, counts)."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"out of range (0 to 2**64-1): {text!r}")
    return value


def add_guest_options(parser: argparse.ArgumentParser) -> None:
    """--lookup, --layout | --mtree and --as: which guest, which address space."""
    from pathlib import Path

    from mmuscope.engine.layouts import DEFAULT_LAYOUT, PRESETS
    from mmuscope.engine.lookup import LOOKUP_STRATEGIES

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
    parser.add_argument(
        "--as", dest="as_id", type=int_arg, default=0, help="address space (1 = SMM)"
    )


# engine.workload's WORKLOADS and DEFAULT_WORKLOAD, named here so that a command line
# (every one has the explorer's options) does not import the workloads: `mmuscope
# simulate` never uses them (tests/test_engine_exports.py checks they are the same).
EXPLORER_WORKLOADS = ("mixed", "kernbench", "netperf", "scatter")
DEFAULT_EXPLORER_WORKLOAD = "mixed"
# The option strings add_explorer_options adds (tests/test_cli_own_parser.py checks them).
EXPLORER_OPTION_STRINGS = (
    "--lookup", "--layout", "--mtree", "--as", "--workload", "--seed", "--speed", "--paused",
    "--theme", "--export-dir", "--qemu-trace", "--scenario",
)  # fmt: skip


def add_explorer_options(parser: argparse.ArgumentParser) -> None:
    """The explorer's options (the bare command, and `serve` for each browser tab)."""
    from pathlib import Path

    from mmuscope.engine.pacing import DEFAULT_SPEED

    group = parser.add_argument_group("explorer")
    add_guest_options(group)  # type: ignore[arg-type]
    group.add_argument(
        "--workload",
        default=DEFAULT_EXPLORER_WORKLOAD,
        choices=EXPLORER_WORKLOADS,
        help=f"access mix (default {DEFAULT_EXPLORER_WORKLOAD})",
    )
    group.add_argument("--seed", type=int_arg, default=1, help="workload seed (default 1)")
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


def check_display_options(args: argparse.Namespace) -> None:
    """`--theme` and `--export-dir`, which every command that opens the app takes, and
    the installed files the app reads (one line, exit 2, when the installation lacks one)."""
    from .resources import missing_data_files

    missing = missing_data_files()
    if missing:
        raise CliError(f"{missing[0]}: not installed; reinstall mmuscope (pip install .)")
    if args.theme is not None:
        from .themes import load_themes

        names = [theme.name for theme in load_themes()[0]]
        if args.theme not in names:
            raise CliError(f"unknown theme {args.theme!r}; choose from {', '.join(names)}")
    if not args.export_dir.is_dir():
        raise CliError(f"--export-dir {args.export_dir}: no such directory")


def check_replay_app_options(args: argparse.Namespace) -> None:
    """What `replay TRACE` and `live` check before opening the replay screen."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise CliError("the replay screen needs a terminal; `mmuscope replay TRACE --summary` "
                       "prints counts")  # fmt: skip
    check_display_options(args)


def read_text(path: Path) -> str:
    """A text file the user named; undecodable bytes become U+FFFD."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise CliError(f"cannot read {path}: {err.strerror}") from None


def load_layout(name: str | None, mtree: Path | None, as_id: int = 0) -> Layout:
    """A preset by name, or the slots QEMU would register with KVM for an `info mtree`
    dump: both address spaces (memory and KVM-SMRAM); asking for one the dump lacks is
    one line, exit 2."""
    from mmuscope.engine.layouts import DEFAULT_LAYOUT, preset

    if mtree is not None:
        from mmuscope.engine.layouts.mtree_guest import mtree_guest
        from mmuscope.engine.layouts.qemu_mtree import MtreeError

        try:
            guest = mtree_guest(read_text(mtree), mtree.name, source=str(mtree))
        except MtreeError as err:
            raise CliError(str(err)) from None
        if as_id in guest.missing:
            raise CliError(f"--as {as_id}: KVM-SMRAM is {guest.missing[as_id]}")
        return guest.layout
    try:
        return preset(name or DEFAULT_LAYOUT)
    except ValueError as err:
        raise CliError(str(err)) from None
