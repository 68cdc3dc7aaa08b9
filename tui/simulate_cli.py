"""`mmuscope simulate`: a simulated guest run printed as `trace-cmd report` text (or as
`replay --jsonl` objects), so a teacher can hand out a trace that `mmuscope replay`, or
any tool that reads trace text, reads back.

    mmuscope simulate --mmu {tdp,direct,shadow} --workload NAME [--accesses N] [--seed N]
                      [--zap fast|slow|roots --at K] [--layout NAME] [--jsonl]

`tdp` is today's TDP MMU (tdp_mmu=Y), `direct` the older shadow MMU with direct pages
(tdp_mmu=N), `shadow` shadow paging (EPT off).  `--zap KIND --at K` zaps before access K:
`fast` is kvm_mmu_zap_all_fast, `slow` the old zap of everything under one lock hold,
`roots` (TDP MMU only) invalidates and zaps the roots without the generation flip.

Each line is `engine.trace.lines.format_line(event, "trace-cmd")`; the handful of events a
run prints most are formatted by `FAST_PRINTK` (f-strings of the same TP_printk texts,
checked against the tracepoint templates by the tests), the rest by their templates.  The
first line is trace-cmd's `cpus=N` header.  Bad options: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from engine.events import Event

if TYPE_CHECKING:
    from engine.mmu.guest_session import GuestSession

MMUS = ("tdp", "direct", "shadow")
ZAPS = ("fast", "slow", "roots")
WRITE_BATCH = 4096
_NAME_WIDTH = 20  # trace-cmd pads event names to this


@dataclass(frozen=True)
class SimulateOptions:
    mmu: str
    workload: str
    accesses: int = 10_000
    seed: int = 1
    zap: str | None = None
    at: int | None = None
    jsonl: bool = False
    layout: str = "pc-4g"


class SimulateError(ValueError):
    """Options that do not fit together; one line."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "simulate", help="a simulated run printed as trace-cmd report text (or --jsonl)"
    )
    parser.add_argument("--mmu", required=True, choices=MMUS, help="tdp (today), direct, shadow")
    parser.add_argument("--workload", required=True, metavar="NAME", help="the access mix")
    parser.add_argument("--accesses", type=_count, default=10_000, help="guest accesses")
    parser.add_argument("--seed", type=_count, default=1, help="workload seed (default 1)")
    parser.add_argument("--zap", choices=ZAPS, help="zap once, before access --at")
    parser.add_argument("--at", type=_count, metavar="K", help="the access the zap comes before")
    parser.add_argument("--layout", default="pc-4g", metavar="NAME", help="preset guest")
    parser.add_argument("--jsonl", action="store_true", help="JSON objects, as replay --jsonl")


def _count(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


def run_simulate(args: argparse.Namespace) -> int:
    options = SimulateOptions(
        args.mmu, args.workload, args.accesses, args.seed, args.zap, args.at, args.jsonl,
        args.layout,
    )  # fmt: skip
    try:
        session = make_session(options)
    except (SimulateError, ValueError) as err:
        print(f"mmuscope simulate: error: {err}", file=sys.stderr)
        return 2
    run(session, options, sys.stdout)
    sys.stdout.flush()
    return 0


def make_session(options: SimulateOptions) -> GuestSession[object]:
    """The guest of these options, checked first (SimulateError/ValueError on bad ones)."""
    from engine.layouts import preset
    from engine.mmu.session import MmuSession
    from engine.mmu.shadow_session import ShadowSession
    from engine.mmu.tdp_session import TdpSession

    if (options.zap is None) != (options.at is None):
        raise SimulateError("--zap and --at go together")
    if options.at is not None and options.at > options.accesses:
        raise SimulateError(f"--at {options.at} is past --accesses {options.accesses}")
    if options.zap == "roots" and options.mmu != "tdp":
        raise SimulateError("--zap roots needs --mmu tdp: only the TDP MMU has roots to zap")
    kinds = {"tdp": TdpSession, "direct": MmuSession, "shadow": ShadowSession}
    kind = kinds[options.mmu]
    if options.workload not in kind.workloads:
        raise SimulateError(
            f"--workload {options.workload!r} is not one of --mmu {options.mmu}'s: "
            f"{', '.join(kind.workloads)}"
        )
    session = kind(preset(options.layout), workload=options.workload, seed=options.seed)
    return session  # type: ignore[return-value]


def zap(session: GuestSession[object], kind: str) -> None:
    from engine.mmu.tdp_session import TdpSession

    if isinstance(session, TdpSession):
        session.zap(kind)
    elif kind == "fast":
        session.mmu.zap_all_fast()  # type: ignore[attr-defined]
    else:
        session.mmu.pages.zap_all()


def simulate(options: SimulateOptions, out: TextIO) -> int:
    """Run and print; the number of event lines printed."""
    return run(make_session(options), options, out)


def run(session: GuestSession[object], options: SimulateOptions, out: TextIO) -> int:
    batch: list[str] = []
    printed = 0
    if options.jsonl:
        session.subscribe(lambda event: batch.append(_json_line(event)))
    else:
        out.write(f"cpus={session.nr_vcpus}\n")
        append = batch.append
        session.raw_listener = lambda event, ts, cpu: append(raw_line(event, ts, cpu))
    step = session.step
    for index in range(options.accesses + 1):
        if index == options.at and options.zap is not None:
            zap(session, options.zap)
        if index < options.accesses:
            step()
        if len(batch) >= WRITE_BATCH or index == options.accesses:
            printed += len(batch)
            if batch:
                out.write("\n".join(batch) + "\n")
            batch.clear()
    return printed


def _json_line(event: Event) -> str:
    """The object `replay --jsonl` makes of the event's trace line (fields as printed,
    the timestamp in microseconds)."""
    from engine.trace.lines import parse_line

    from .replay_cli import event_json

    parsed = parse_line(trace_cmd_line(event))
    assert parsed is not None
    return json.dumps(event_json(parsed))


# -- trace-cmd report lines -----------------------------------------------------------------


def _spte_changed(f: dict[str, object]) -> str:
    return (
        f"as id {f['as_id']} gfn {f['gfn']:x} level {f['level']} "
        f"old_spte {f['old_spte']:x} new_spte {f['new_spte']:x}"
    )


def _spte_requested(f: dict[str, object]) -> str:
    return f"gfn {f['gfn']:x} pfn {f['pfn']:x} level {f['level']}"


def _set_spte(f: dict[str, object]) -> str:
    return (
        f"gfn {f['gfn']:x} spte {f['spte']:x} ({f['access_str']}) level {f['level']} "
        f"at {f['sptep']:x}"
    )


def _page_fault(f: dict[str, object]) -> str:
    return (
        f"vcpu {f['vcpu_id']} rip 0x{f.get('guest_rip', 0):x} "
        f"address 0x{f['fault_address']:016x} error_code 0x{f['error_code']:x}"
    )


_ACCESS_STR = ("---", "--x", "w--", "w-x", "-u-", "-ux", "wu-", "wux")


def _sp(f: dict[str, object]) -> str:
    """KVM_MMU_PAGE_PRINTK, for TDP MMU pages (8-byte gptes, q0, direct)."""
    return (
        f"sp gen {f['gen']} gfn {f['gfn']:x} l{f['level']} {f['gpte_bytes']}-byte "
        f"q{f['quadrant']}{' direct' if f['direct'] else ''} {_ACCESS_STR[f['access']]}"  # type: ignore[index]
        f"{' invalid' if f['invalid'] else ''} {'' if f['nxe'] else '!'}nxe "
        f"{'' if f['ad'] else '!'}ad root {f['root_count']} {'unsync' if f['unsync'] else 'sync'}"
    )


def _get_page(f: dict[str, object]) -> str:
    return f"{_sp(f)} {'new' if f['created'] else 'existing'}"


FAST_PRINTK: dict[str, Callable[[dict[str, object]], str]] = {
    "kvm_tdp_mmu_spte_changed": _spte_changed,
    "kvm_mmu_spte_requested": _spte_requested,
    "kvm_mmu_set_spte": _set_spte,
    "kvm_page_fault": _page_fault,
    "kvm_mmu_get_page": _get_page,
    "kvm_mmu_prepare_zap_page": _sp,
}
_TIMESTAMPS: dict[float, str] = {}
COMM = "qemu-kvm"  # GuestSession's stamp


def trace_cmd_line(event: Event) -> str:
    """`format_line(event, "trace-cmd")`, faster for the events in FAST_PRINTK."""
    return raw_line(event, event.ts, event.cpu, event.comm, event.pid)


def raw_line(event: Event, ts: float, cpu: int, comm: str = COMM, pid: int = 0) -> str:
    """The trace-cmd line of an event stamped with `ts`, `cpu`, `comm`, `pid` (the
    session's stamp, without building the stamped copy)."""
    fast = FAST_PRINTK.get(event.name)
    if fast is None or not _fits(event):
        from engine.trace.lines import TRACE_CMD, format_line

        return format_line(Event(event.name, event.fields, ts, cpu, pid, comm), TRACE_CMD)
    stamp = _TIMESTAMPS.get(ts)
    if stamp is None:
        if len(_TIMESTAMPS) > 4096:
            _TIMESTAMPS.clear()
        secs, usecs = divmod(round(ts * 1_000_000), 1_000_000)
        stamp = _TIMESTAMPS[ts] = f"{secs:5d}.{usecs:06d}"
    name = event.name
    pad = " " * (_NAME_WIDTH - len(name)) if len(name) < _NAME_WIDTH else ""
    text = fast(event.fields)  # type: ignore[arg-type]
    return f"{comm:>16}-{pid:<5} [{cpu:03d}] {stamp}: {name}: {pad}{text}"


def _fits(event: Event) -> bool:
    """The fast path's assumptions: plain ints (no bools standing in), fields present."""
    fields = event.fields
    if event.name == "kvm_mmu_set_spte":
        return "access_str" in fields
    if event.name == "kvm_page_fault":
        return "fault_address" in fields
    return event.name != "kvm_mmu_get_page" or "created" in fields
