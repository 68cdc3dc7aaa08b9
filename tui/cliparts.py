"""The parts every `mmuscope` command shares: the one-line error, the parser that exits
with code 2, number and option helpers, and the guest a command's options describe.

Command modules (commands.py, bench.py, live.py, serve.py, explorer_cli.py, ...) depend on
this module only; `tui/cli.py` assembles them into one parser and never is imported by
them (tests/test_cli_modules.py checks that the `tui` modules import no one in a circle).
Exit codes: 0 success, 2 bad input or a missing tool (one line on stderr), 1 a bug.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

if TYPE_CHECKING:
    from pathlib import Path

    from mmuscope.engine.layouts import Layout


class CliError(Exception):
    """Bad input: printed as one line, exit code 2."""


ParserT = TypeVar("ParserT", bound=argparse.ArgumentParser)  # a sub-parser's class


class Ended(KeyboardInterrupt):
    """SIGTERM or SIGHUP (`kill`, a closed terminal, a killed tmux pane): raised where the
    command is, like Ctrl+C's KeyboardInterrupt, so that every `finally` and `with` on
    the way out runs (a tracefs instance removed, a VM's fds closed); exit 128 + the
    signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def end_on_signals() -> None:
    """From now on SIGTERM and SIGHUP end the command as Ctrl+C does (`Ended`); while a
    Textual app runs (`run_app`), they make it exit first, terminal restored."""
    if threading.current_thread() is threading.main_thread():
        for signum in ENDING_SIGNALS:
            signal.signal(signum, _ended)


_app_exits: list[Callable[[int], bool]] = []  # the running app's, while it runs


def _ended(signum: int, frame: object) -> None:
    if _app_exits and _app_exits[-1](signum):
        return
    raise Ended(signum)


def run_app(app: Any) -> None:
    """`app.run()`.  A SIGTERM or SIGHUP meanwhile asks the app to exit from its own
    event loop (`call_soon_threadsafe`: a signal handler may not touch the loop
    otherwise), so that its driver restores the terminal and its screens'
    `on_unmount` runs; then the command ends with `Ended`.  A terminal that went away
    meanwhile is let go first (`let_go_of_a_gone_terminal`)."""
    import asyncio

    ended: list[int] = []

    def app_exit(signum: int) -> bool:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not running (yet, or any more): end as usual
            return False
        if not ended:
            ended.append(signum)
            if terminal_gone():
                let_go_of_a_gone_terminal()
            loop.call_soon_threadsafe(app.exit, None, 128 + signum)
        return True

    _app_exits.append(app_exit)
    try:
        app.run()
    finally:
        _app_exits.remove(app_exit)
    if ended:
        raise Ended(ended[0])


def terminal_gone() -> bool:
    """The app's terminal hung up (its window closed, its ssh session or tmux pane
    gone): the kernel answers every call on it with EIO from then on (tty_vhangup())."""
    import errno
    import termios

    try:
        termios.tcgetattr(sys.__stderr__.fileno() if sys.__stderr__ else 2)
    except (termios.error, OSError, ValueError) as err:
        return bool(err.args) and err.args[0] == errno.EIO
    return False


def let_go_of_a_gone_terminal() -> None:
    """From the SIGHUP of a hangup on (the main thread's handler).  The SIGCONT the
    kernel sends with it (tty_signal_session_leader()) is left to its default: a gone
    terminal has no job control to come back to, and Textual's SIGCONT handler would
    start the app's terminal mode again, a second input thread that nothing stops and
    a second output thread, and the app never ended (under load, about one hangup in
    four).  Writes to the gone terminal (stdout, stderr: the app's last frames,
    Python's flush at exit) go to /dev/null instead of failing with EIO."""
    import os

    signal.signal(signal.SIGCONT, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


class CliParser(argparse.ArgumentParser):
    """argparse with exit code 2 and one line for a usage error (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_command(
    sub: argparse._SubParsersAction[ParserT],
    name: str,
    help: str,
    description: str,
    examples: tuple[str, ...],
) -> ParserT:
    """A command's parser as `mmuscope NAME --help` shows it: a paragraph on what it
    does, then examples that run as printed, in order, in one directory (a test runs
    them)."""
    import textwrap

    return sub.add_parser(
        name,
        help=help,
        description=textwrap.fill(description, 80),
        epilog="examples:\n" + "\n".join(f"  {line}" for line in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def int_arg(text: str) -> int:
    """A 64-bit unsigned number, 0x... or decimal (gfns, seeds, counts)."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"out of range (0 to 2**64-1): {text!r}")
    return value


def count_arg(text: str) -> int:
    """A whole number, 0x... or decimal, negative included: for counts whose command
    checks their range itself and names it in one message (`--pages -5: give 1 to ...`)."""
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def path_arg(text: str) -> Path:
    """A path option's value, made only when one is given: every command's parser has the
    explorer's path options (to refuse them before a command), and importing pathlib for
    them would cost `mmuscope simulate` 16M instructions, 0.6 % of a 100,000-access run."""
    from pathlib import Path

    return Path(text)


def add_guest_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """--lookup, --layout | --mtree and --as: which guest, which address space."""
    from mmuscope.engine.layouts import DEFAULT_LAYOUT, PRESETS
    from mmuscope.engine.lookup import LOOKUP_STRATEGIES

    lookup = parser.add_argument(
        "--lookup",
        default="rbtree",
        choices=LOOKUP_STRATEGIES,
        help="lookup strategy (default rbtree)",
    )
    source = parser.add_mutually_exclusive_group()
    layout = source.add_argument(
        "--layout",
        default=None,
        metavar="NAME",
        help=f"preset guest: {', '.join(PRESETS)} (default {DEFAULT_LAYOUT})",
    )
    mtree = source.add_argument(
        "--mtree", type=path_arg, metavar="FILE", help="a guest from QEMU's 'info mtree [-f]' text"
    )
    as_id = parser.add_argument(
        "--as", dest="as_id", type=int_arg, default=0, metavar="N",
        help="address space (default 0; 1 = SMM)",
    )  # fmt: skip
    return [lookup, layout, mtree, as_id]


def add_explorer_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The explorer's options (the bare command, and `serve` for each browser tab)."""
    from mmuscope.engine.memslots.workload import DEFAULT_WORKLOAD, WORKLOADS
    from mmuscope.engine.pacing import DEFAULT_SPEED

    group = parser.add_argument_group("explorer")
    return [
        *add_guest_options(group),  # type: ignore[arg-type]
        group.add_argument(
            "--workload",
            default=DEFAULT_WORKLOAD,
            choices=WORKLOADS,
            help=f"access mix (default {DEFAULT_WORKLOAD})",
        ),
        group.add_argument("--seed", type=int_arg, default=1, help="workload seed (default 1)"),
        group.add_argument(
            "--speed",
            type=float,
            default=DEFAULT_SPEED,
            help=f"lookups per second to start with (default {DEFAULT_SPEED:g})",
        ),
        group.add_argument("--paused", action="store_true", help="start paused"),
        *add_display_options(group),  # type: ignore[arg-type]
        group.add_argument(
            "--qemu-trace",
            type=path_arg,
            metavar="FILE",
            help="replay QEMU's recorded memslot calls (kvm_set_user_memory trace or strace) "
            "as live churn: j steps, playing interleaves them with lookups",
        ),
        group.add_argument(
            "--scenario",
            metavar="NAME",
            help="open on a classroom scenario, paused on its first step (see `scenarios`)",
        ),
    ]


def add_display_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """--theme and --export-dir: what every command that opens the app takes (no
    --export-dir: None, the current directory once `check_display_options` ran)."""
    return [
        parser.add_argument("--theme", metavar="NAME", help="theme name (default mmuscope-dark)"),
        parser.add_argument(
            "--export-dir",
            type=path_arg,
            metavar="DIR",
            help="where e and S write files (default the current directory)",
        ),
    ]


def check_display_options(args: argparse.Namespace) -> None:
    """`--theme` and `--export-dir`, which every command that opens the app takes, and
    the installed files the app reads (one line, exit 2, when the installation lacks one).
    No --export-dir is the current directory."""
    from pathlib import Path

    from .resources import missing_data_files

    if args.export_dir is None:
        args.export_dir = Path(".")

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


def check_replay_app_options(args: argparse.Namespace, text_instead: str | None = None) -> None:
    """What `replay TRACE`, `kvm` and `live` check before opening the replay screen;
    `text_instead` is the command line that prints the same run as text."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        hint = f"; for counts without one, run: {text_instead}" if text_instead else ""
        raise CliError(f"the replay screen needs a terminal{hint}")
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
