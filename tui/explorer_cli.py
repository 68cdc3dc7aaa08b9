"""The explorer from the command line: the bare `mmuscope` (and each `serve` tab) opens
the app on the guest, workload, scenario or QEMU recording its options describe, and
`mmuscope scenarios` lists the classroom scenarios it can open on."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from .cliparts import CliError, check_display_options, load_layout, run_app

if TYPE_CHECKING:
    from mmuscope.engine.memslots.churn import RecordedChurn
    from mmuscope.engine.scenarios import Scenario

    from .app import MmuscopeApp


def run_explorer(args: argparse.Namespace) -> int:
    """Open the explorer (the app factory shared with the tests and screenshots)."""
    app = explorer_app(args)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise CliError("the explorer needs a terminal; for a summary without one, run: "
                       "mmuscope overview")  # fmt: skip
    run_app(app)
    return 0


def explorer_app(args: argparse.Namespace) -> MmuscopeApp:
    """The explorer the options describe, every option checked (also for `serve`)."""
    check_display_options(args)
    scenario = _scenario(args.scenario) if args.scenario else None
    churn = _churn(args) if args.qemu_trace else None
    layout = load_layout(args.layout, args.mtree, args.as_id)
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


def _churn(args: argparse.Namespace) -> RecordedChurn:
    from mmuscope.engine.layouts.qemu_trace import TraceFormatError
    from mmuscope.engine.memslots.churn import recorded_churn

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
    from mmuscope.engine.scenarios import ScenarioError, load_scenario

    try:
        return load_scenario(name)
    except ScenarioError as err:
        raise CliError(str(err)) from None


def list_scenarios(args: argparse.Namespace | None = None) -> int:
    """`mmuscope scenarios`: one line per scenario, then how to open one."""
    from mmuscope.engine.scenarios import ScenarioError
    from mmuscope.engine.scenarios import list_scenarios as load_all

    try:
        scenarios = load_all()
    except ScenarioError as err:
        raise CliError(str(err)) from None
    width = max(len(s.name) for s in scenarios)
    follows = {s.name: s.thread or "kernel" for s in scenarios}  # a thread's id, or kernel code
    thread_width = max(map(len, follows.values()))
    for s in scenarios:
        steps = f"{len(s.steps)} steps"
        thread = f"{follows[s.name]:<{thread_width}}"
        print(f"{s.name:<{width}}  {s.screen:<8}  {thread}  {steps:>8}  {s.title}")
    print("\nopen one with: mmuscope --scenario NAME   (> next step, < back)")
    return 0
