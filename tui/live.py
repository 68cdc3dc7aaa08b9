"""``mmuscope live [--tracefs DIR]``: the replay screen on a tracefs's ``trace_pipe``
(read by `tui/trace_pipe.py`; ``mmuscope replay TRACE`` opens it on a file).

Before the app starts, `check_tracefs` makes sure live can work, each failure one line
and exit 2: no tracefs at DIR (``trace_pipe`` missing), ``trace_pipe`` not readable (not
root), no ``events/kvmmmu`` (kvm not loaded), kvmmmu events disabled — which root is
offered to enable (``echo 1 > DIR/events/kvmmmu/enable``, or ``--enable`` to skip the
question), and anyone else is told the exact command.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .cliparts import CliError, check_replay_app_options

DEFAULT_TRACEFS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))


# -- the command line -------------------------------------------------------------------


def add_live_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    live = sub.add_parser(
        "live", help="tail a tracefs's kvmmmu events live in the replay screen (root)"
    )
    live.add_argument(
        "--tracefs",
        type=Path,
        metavar="DIR",
        help="tracefs mount (default /sys/kernel/tracing, then /sys/kernel/debug/tracing)",
    )
    live.add_argument(
        "--enable", action="store_true", help="enable the kvmmmu events without asking (root)"
    )


def run_live(args: argparse.Namespace) -> int:
    tracefs = check_tracefs(args.tracefs, enable=args.enable)
    check_replay_app_options(args)
    from .app import make_app

    make_app(tracefs=tracefs, theme=args.theme, export_dir=args.export_dir).run()
    return 0


# -- tracefs checks ---------------------------------------------------------------------


def is_root() -> bool:
    return os.geteuid() == 0


def can_read(path: Path) -> bool:
    return os.access(path, os.R_OK)


def ask(question: str) -> bool:
    """A yes/no question on the terminal (no answer, or no terminal: no)."""
    if not sys.stdin.isatty():
        return False
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False


def find_tracefs(given: Path | None) -> Path:
    """DIR if it has a trace_pipe (or cannot be looked into: not root); the first default
    that does when no DIR is given."""
    for candidate in [given] if given is not None else DEFAULT_TRACEFS:
        try:
            (candidate / "trace_pipe").stat()
        except PermissionError:
            return candidate  # it is there, but not for us: check_tracefs says so
        except OSError:
            continue
        return candidate
    where = given if given is not None else DEFAULT_TRACEFS[0]
    raise CliError(f"no tracefs at {where} (no trace_pipe); mount it: "
                   f"mount -t tracefs nodev {where}")  # fmt: skip


def check_tracefs(given: Path | None, *, enable: bool = False) -> Path:
    """The tracefs to tail, its kvmmmu events enabled; CliError (exit 2) otherwise."""
    tracefs = find_tracefs(given)
    pipe = tracefs / "trace_pipe"
    try:
        readable = pipe.exists() and can_read(pipe)
    except PermissionError:
        readable = False
    if not readable:
        raise CliError(f"cannot read {pipe}: tracing needs root (sudo mmuscope live)")
    events = tracefs / "events" / "kvmmmu"
    if not events.is_dir():
        raise CliError(f"no kvmmmu events in {tracefs / 'events'}: is kvm loaded? "
                       "(modprobe kvm_intel or kvm_amd)")  # fmt: skip
    switch = events / "enable"
    try:
        state = switch.read_text().strip()
    except OSError as err:
        raise CliError(f"cannot read {switch}: {err.strerror or err}") from None
    if state != "1":
        _enable(switch, tracefs, enable)
    return tracefs


def _enable(switch: Path, tracefs: Path, enable: bool) -> None:
    """Turn the kvmmmu events on (root, after asking unless --enable)."""
    if not is_root():
        raise CliError(f"kvmmmu events are disabled in {tracefs}; enable them with: "
                       f"echo 1 | sudo tee {switch}")  # fmt: skip
    if not (enable or ask(f"enable kvmmmu events in {tracefs}? [y/N] ")):
        raise CliError(f"kvmmmu events are disabled in {tracefs}; not enabling them "
                       f"(--enable, or: echo 1 > {switch})")  # fmt: skip
    try:
        switch.write_text("1")
    except OSError as err:
        raise CliError(f"cannot enable {switch}: {err.strerror or err}") from None
