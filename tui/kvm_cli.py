"""``mmuscope kvm PROGRAM``: a guest program on the host's own KVM, recorded through a
private tracefs instance (engine.kvm), shown as text or in the app.

- ``--summary``: ``replay --summary``'s object for the recording plus ``kernel``,
  ``mmu``, ``stats`` (KVM_GET_STATS_FD deltas), ``program``, ``lost_events`` and
  ``emulated`` (the instructions the kernel emulated, decoded, with counts);
- ``--jsonl``: the recorded events as ``replay --jsonl`` prints them;
- ``--compare [--json]``: the kernel against the engine's shadow MMU on the same program,
  event by event (engine.kvm.align), the first difference with its context, counts per
  event kind and the count rows; exit 0 when all is equal, 1 on any difference or any
  event the ring buffer lost;
- none of them: the replay screen following the run live (`tui/kvm_app.py`).
``--trace-out FILE`` keeps the kernel's text (written to a temporary name, renamed).
No /dev/kvm, no permission, no tracefs, a guest the kernel stops: exit 2, one line.
Events the ring buffer lost are reported on stderr, loudly, and in the summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cliparts import CliError, add_command, add_display_options, count_arg
from .dataset_cli import add_options as add_parquet_options
from .dataset_cli import check_options as check_parquet_options
from .dataset_cli import host_source, source_names, writing_source
from .kvm_record import record_or_fail, text_sink
from .progress import steps, watched

if TYPE_CHECKING:
    from mmuscope.engine.kvm.program import GuestProgram
    from mmuscope.engine.layouts.layout import Layout

PROGRAM_HELP = {
    "touch": "demand faults over N pages",
    "fork": "N pages shared by C+1 processes (the PTE_LIST_EXT thread's rmap storm)",
    "mmio": "N reads and N writes of gpas no memslot covers",
    "ptwrite": "the guest stores N of its own ptes (a shadowed table)",
    "churn": "memslot 1 flagged, deleted, re-created, moved while the guest runs",
    "dirty": "KVM_MEM_LOG_DIRTY_PAGES and KVM_GET_DIRTY_LOG rounds",
    "cr3": "two processes, switched by the guest's own mov to CR3 (CPL 0): roots kept in "
    "prev_roots",
    "flood": "emulated stores to the guest's own page directory until write flooding zaps it",
    "prefetch": "faults on every 8th of N accessed pages map their neighbours too",
    "huge": "N pages in 2M guest pages on 4K host pages: direct shadow pages, 4K sptes",
    "thp": "N pages in 2M guest pages on transparent huge pages: 2M sptes",
}


def add_kvm_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from mmuscope.engine.kvm.program import PROGRAMS

    kvm = add_command(
        sub,
        "kvm",
        "run a guest program on this host's KVM and record what its MMU did (root)",
        "A small guest program run on this host's /dev/kvm (as root; each run bounded in "
        "time), with the kernel's kvmmmu events recorded in a private tracefs instance, "
        "removed however the run ends. Shown in the replay screen, or printed: counts and "
        "the kernel's statistics (--summary), one JSON object per event (--jsonl), or the "
        "model beside the kernel, event by event (--compare).",
        (
            "mmuscope kvm touch --pages 64 --summary",
            "mmuscope kvm fork --children 2 --compare",
            "mmuscope kvm mmio --pages 4 --jsonl | head -3",
            "mmuscope kvm fork --trace-out fork.txt       # the app; the trace is kept",
        ),
    )
    kvm.add_argument("program", choices=PROGRAMS, metavar="PROGRAM",
                     help="; ".join(f"{k}: {v}" for k, v in PROGRAM_HELP.items()))  # fmt: skip
    kvm.add_argument("--pages", type=count_arg,
                     help="pages it touches (at most 65536; mmio 32768, ptwrite 512)")  # fmt: skip
    kvm.add_argument("--children", type=count_arg, help="fork only: child processes (default 8)")
    kvm.add_argument("--trace-out", type=Path, metavar="FILE", help="keep the kernel's trace")
    mode = kvm.add_mutually_exclusive_group()
    mode.add_argument("--summary", action="store_true", help="counts and statistics as JSON")
    mode.add_argument("--jsonl", action="store_true", help="one JSON object per event")
    mode.add_argument("--compare", action="store_true", help="the kernel against the model")
    add_parquet_options(kvm, mode)  # --parquet DIR, --source NAME, --append (dataset_cli)
    kvm.add_argument("--json", action="store_true", help="with --compare: one JSON object")
    kvm.add_argument("--no-trace", action="store_true",
                     help="run the same guest untraced (for timing; with --summary)")  # fmt: skip
    kvm.add_argument("--follow", type=Path, help=argparse.SUPPRESS)  # the app's child
    add_display_options(kvm)


def run_kvm(args: argparse.Namespace) -> int:
    from mmuscope.engine.kvm.program import WITH_CHILDREN, build_program

    if args.json and not args.compare:
        raise CliError("--json goes with --compare (--summary and --jsonl are JSON already)")
    check_parquet_options(args)
    if args.children is not None and args.program not in WITH_CHILDREN:
        raise CliError(f"--children goes with fork; {args.program} has no child processes")
    try:
        program = build_program(args.program, args.pages, args.children)
    except ValueError as err:
        raise CliError(str(err)) from None
    if args.parquet is not None:  # refused before the run, not after
        source = source_names(args, [], [args.source or host_source(program.name)])[0]
    if args.follow is not None:
        from .kvm_follow import run_follow

        return run_follow(args, program)
    if not (args.summary or args.jsonl or args.compare or args.parquet):
        from .kvm_app import run_kvm_app

        return run_kvm_app(args)
    if args.compare:
        return run_compare(args, program)
    if args.summary and args.trace_out is None and args.parquet is None and not args.no_trace:
        return run_raw_summary(program)
    return run_recorded(args, program, source if args.parquet is not None else "")


def run_recorded(args: argparse.Namespace, program: Any, source: str) -> int:
    """`--jsonl`, `--parquet`, `--summary` with `--trace-out` or `--no-trace`: the
    ring buffers decoded as each slice's drain brings them (engine.kvm.record), the
    events printed as they come (`--jsonl`: `Decoder.jsonl`), the records written as
    a dataset as they come (`--parquet`: `SourceWriter.write_records`, the rows
    `replay --parquet` makes of the run's text), the text written to its file as it
    comes (`--trace-out`), the summary counted from the records its lines are made of
    (`--summary`)."""
    if args.parquet is None:
        return _recorded(args, program, None)
    what = f"kvm {program.name}"
    with writing_source(args, source, what, program_layout(program)) as (writer, counts):

        def on_records(records: list[Any], decoder: Any) -> None:
            writer.write_records(records, decoder)
            counts.events += len(records)

        _recorded(args, program, on_records)
    return 0


def _recorded(args: argparse.Namespace, program: Any, on_records: Any) -> int:
    """`run_recorded`'s run; `on_records` (`--parquet`'s) takes the records."""
    from mmuscope.engine.kvm.rawtrace import RawSummary

    shown = watched(json_output=args.parquet is None)  # --summary and --jsonl print JSON
    held: list[RawSummary] = []

    def summed(records: list[Any], decoder: Any) -> None:
        if not held:
            held.append(RawSummary(decoder.formats))
        held[0].take(records)

    with text_sink(args.trace_out) as sink, \
            steps(f"kvm {program.name}", len(program.slices), shown=shown) as progress:  # fmt: skip

        def on_slice(result: Any) -> None:
            progress.finished(program.slices[result.index].label or f"slice {result.index}")

        recording = record_or_fail(
            program, None if sink is None else sink.write, trace=not args.no_trace,
            on_slice=on_slice, on_json=sys.stdout.write if args.jsonl else None,
            on_records=summed if args.summary else on_records,
        )  # fmt: skip
        _warn_lost(recording.lost)
        if args.summary:
            counts = held[0] if held else RawSummary({})
            print(json.dumps(with_run(counts.summary(), recording, counts.emulated)))
    sys.stdout.flush()
    return 0


def program_layout(program: GuestProgram) -> Layout:
    """Every range a memslot of `program` had during the run (its set-up's, and those its
    slices create or move: KVM_SET_USER_MEMORY_REGION calls of a non-zero size), for
    `query --report faults-per-memslot`."""
    from mmuscope.engine.kvm.program import MemslotOp
    from mmuscope.engine.layouts.layout import Layout, RegionSpec

    calls = [*program.setup, *(op for s in program.slices for op in s.before)]
    regions: dict[tuple[int, int, int], RegionSpec] = {}
    for op in calls:
        if isinstance(op, MemslotOp) and op.memory_size:
            key = (op.slot, op.guest_phys_addr, op.memory_size)
            name = "ram" if op.backing == 0 else "data"
            regions.setdefault(key, RegionSpec(name, *key, op.flags))
    return Layout(program.name, f"kvm {program.name}", tuple(regions.values()))


def run_raw_summary(program: Any) -> int:
    """`--summary` read from the ring buffers in binary (engine.kvm.rawtrace): no text
    made by the kernel nor parsed here, and only counts kept."""
    from mmuscope.engine.kvm.rawtrace import RawSummary

    held: list[RawSummary] = []

    def on_raw(pipes: Any, formats: Any) -> None:
        if not held:
            held.append(RawSummary(formats))
        held[0].drain(pipes)

    recording = record_or_fail(program, None, on_raw=on_raw)
    _warn_lost(recording.lost)
    counts = held[0] if held else RawSummary({})
    print(json.dumps(with_run(counts.summary(), recording, counts.emulated)))
    sys.stdout.flush()
    return 0


def _warn_lost(lost: int) -> None:
    if lost:
        print(f"mmuscope: WARNING: the trace buffer lost {lost} events: "
              "the kernel's events are incomplete", file=sys.stderr)  # fmt: skip


def with_run(out: dict[str, Any], recording: Any, emulated: dict[str, int]) -> dict[str, Any]:
    """The counts, then what `--summary` adds of the run."""
    out.update(
        kernel=recording.kernel,
        mmu=recording.host.kind,
        stats=recording.stats(),
        program=recording.run.program.name,
        lost_events=recording.lost,
        mmio_exits=recording.run.mmio_exits,
        host=recording.host.describe(),
        emulated=emulated,
        capabilities=recording.run.capabilities,
    )
    return out


def run_compare(args: argparse.Namespace, program: Any) -> int:
    """Record `program` and hold the model against it as it runs; 0 equal, 1 not."""
    from mmuscope.engine.kvm.compare import Comparison
    from mmuscope.engine.kvm.host import read_host_mmu

    host = read_host_mmu()
    if host.tdp:
        raise CliError("--compare models shadow paging; this host's guests use the TDP MMU")
    held: list[Any] = []

    def on_start(run: Any) -> None:
        held.append(Comparison(program, host, run.address_spaces))

    def on_events(events: list[Any]) -> None:
        held[0].kernel_events(events)

    shown = watched(json_output=args.json)
    with text_sink(args.trace_out) as sink, \
            steps(f"kvm {program.name}", len(program.slices), shown=shown) as progress:  # fmt: skip

        def on_slice(result: Any) -> None:
            held[0].run_slice(result.index)
            progress.finished(program.slices[result.index].label or f"slice {result.index}")

        recording = record_or_fail(
            program, None if sink is None else sink.write, on_events=on_events,
            on_slice=on_slice, on_start=on_start,
        )  # fmt: skip
    verdict = held[0].verdict(recording.stats(), recording.run.mmio_exits, recording.lost)
    if recording.lost:
        print(f"mmuscope: WARNING: the trace buffer lost {recording.lost} events: "
              "the kernel's sequence is incomplete", file=sys.stderr)  # fmt: skip
    if args.json:
        out = {"program": program.name, "kernel": recording.kernel, "mmu": host.kind}
        print(json.dumps({**out, **verdict.to_json()}))
    else:
        print("\n".join(compare_report(program.name, recording, verdict)))
    sys.stdout.flush()
    return 0 if verdict.equal else 1


def compare_report(name: str, recording: Any, verdict: Any) -> list[str]:
    """The human form: the verdict, the first difference with its context, the counts
    per event kind (event, kernel, model, equal), then the count rows."""
    from mmuscope.engine.kvm.align import kind_table

    events = verdict.alignment.events()
    state = "equal" if verdict.equal else "DIFFERENT"
    out = [
        f"{name} on {recording.kernel} ({recording.host.describe()}) against the model: {state}",
        f"events: kernel {events['kernel']}, model {events['model']}, compared "
        f"{events['compared']} equal; lost {verdict.lost}",
    ]
    if verdict.first is not None:
        out += ["", *verdict.first.lines()]
    out += ["", *kind_table(verdict.alignment.kinds()), ""]
    rows = verdict.rows
    width = max(len(r.what) for r in rows)
    for r in rows:
        mark = "=" if r.explained is None else f"≠ {r.explained}"
        out.append(f"{r.what:<{width}}  {_num(r.kernel):>8}  {_num(r.model):>8}  {mark}")
    return out


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)
