"""``mmuscope live [--tracefs DIR]``: the replay screen on a tracefs's ``trace_pipe``
(read by `tui/trace_pipe.py`; ``mmuscope replay TRACE`` opens it on a file).

On a real tracefs (one with ``instances/``) and as root, live records into its own
instance (``instances/mmuscope-live-PID-N``: kvm and kvmmmu events on, every VM of the
host, its own ``tracing_on``), removed when the app quits: it works whatever the global
``tracing_on`` and event switches say, and changes none of them.  Elsewhere (an older
kernel, a directory laid out like tracefs) it tails the global ``trace_pipe``, and
before the app starts `check_tracefs` makes sure that can work, each failure one line
and exit 2: no tracefs at DIR (``trace_pipe`` missing), ``trace_pipe`` not readable (not
root), no ``events/kvmmmu`` (kvm not loaded), ``tracing_on`` 0 or kvmmmu events
disabled — which root is offered to enable (``echo 1 > DIR/events/kvmmmu/enable``, or
``--enable`` to skip the question), and anyone else is told the exact command.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from .cliparts import (
    CliError,
    add_command,
    add_display_options,
    check_replay_app_options,
    run_app,
)

DEFAULT_TRACEFS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))


# -- the command line -------------------------------------------------------------------


def add_live_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    live = add_command(
        sub,
        "live",
        "tail a tracefs's kvmmmu events live in the replay screen (root)",
        "This host's kvmmmu events as they come, in the replay screen. As root, in a "
        "private tracefs instance with the kvmmmu events on, removed when the app ends "
        "however it ends; the global trace is never touched. With --tracefs, another "
        "mount's trace_pipe, whose events --enable turns on (or the app asks first).",
        (
            "mmuscope live                                # then start a guest",
            "mmuscope live --theme projector --export-dir /tmp  # S writes there",
        ),
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
    add_display_options(live)


def run_live(args: argparse.Namespace) -> int:
    tracefs = find_tracefs(args.tracefs)
    if is_root() and (tracefs / "instances").is_dir():
        _check_events(tracefs)
        check_replay_app_options(args)
        with live_instance(tracefs) as instance:
            _run_app(instance, args)
        return 0
    tracefs = check_tracefs(args.tracefs, enable=args.enable)
    check_replay_app_options(args)
    _run_app(tracefs, args)
    return 0


def _run_app(tracefs: Path, args: argparse.Namespace) -> None:
    from .app import make_app

    run_app(make_app(tracefs=tracefs, theme=args.theme, export_dir=args.export_dir))


@contextlib.contextmanager
def live_instance(tracefs: Path) -> Iterator[Path]:
    """A private tracefs instance recording kvm and kvmmmu events, on, then removed."""
    from mmuscope.engine.kvm.tracing import TracefsError, TraceInstance

    instance = TraceInstance(tracefs, tag="live")
    try:
        try:
            instance.open()
        except TracefsError as err:
            raise CliError(str(err)) from None
        instance.start()
        yield instance.path
    finally:
        instance.close()


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
    events = _check_events(tracefs)
    _check_tracing_on(tracefs, enable)
    switch = events / "enable"
    try:
        state = switch.read_text().strip()
    except OSError as err:
        raise CliError(f"cannot read {switch}: {err.strerror or err}") from None
    if state != "1":
        _enable(switch, tracefs, enable)
    return tracefs


def _check_events(tracefs: Path) -> Path:
    events = tracefs / "events" / "kvmmmu"
    if not events.is_dir():
        raise CliError(f"no kvmmmu events in {tracefs / 'events'}: is kvm loaded? "
                       "(modprobe kvm_intel or kvm_amd)")  # fmt: skip
    return events


def _check_tracing_on(tracefs: Path, enable: bool) -> None:
    """The global buffer records nothing while `tracing_on` is 0: say so, or (root,
    asked, or --enable) turn it on."""
    switch = tracefs / "tracing_on"
    try:
        if switch.read_text().strip() != "0":
            return
    except OSError:
        return  # no such switch (not a real tracefs)
    if not is_root():
        raise CliError(f"tracing is off in {tracefs} (tracing_on is 0): "
                       f"echo 1 | sudo tee {switch}")  # fmt: skip
    if not (enable or ask(f"tracing is off in {tracefs} (tracing_on 0): turn it on? [y/N] ")):
        raise CliError(f"tracing is off in {tracefs}; not turning it on "
                       f"(--enable, or: echo 1 > {switch})")  # fmt: skip
    switch.write_text("1")


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
