"""`mmuscope simulate`: a simulated guest run printed as `trace-cmd report` text (or as
`replay --jsonl` objects), so a teacher can hand out a trace that `mmuscope replay`, or
any tool that reads trace text, reads back.

    mmuscope simulate --mmu {tdp,direct,shadow} --workload NAME [--accesses N] [--seed N]
                      [--zap fast|slow|roots --at K] [--layout NAME] [--jsonl]
                      [--race-rate P] [--smi-every N]

`tdp` is today's TDP MMU (tdp_mmu=Y), `direct` the older shadow MMU with direct pages
(tdp_mmu=N), `shadow` shadow paging (EPT off).  `--zap KIND --at K` zaps before access K:
`fast` is kvm_mmu_zap_all_fast, `slow` the old zap of everything under one lock hold,
`roots` (TDP MMU only) invalidates and zaps the roots without the generation flip.
`--race-rate P` (TDP MMU only): another vCPU faults on the same gfn inside the spte's
cmpxchg window that often, so `tdp_mmu_set_spte_atomic` loses (RET_PF_RETRY; a page
table made for a lost link is freed without a tracepoint, as `tdp_mmu_free_sp` does).
`--smi-every N` (TDP MMU only, a guest with SMRAM such as `--layout q35-16g`): the last
vCPU enters SMM every N accesses and leaves half way, on a root of address space 1.

Each line is `engine.trace.lines.format_line(event, "trace-cmd")`; the handful of events a
run prints most are formatted by `FAST_PRINTK` (f-strings of the same TP_printk texts,
checked against the tracepoint templates by the tests), the rest by their templates; the
session hands the printer names and fields (`raw_listener`), so no `Event` is built.  The
first line is trace-cmd's `cpus=N` header.  Bad options: one line on stderr, exit 2.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter

from engine.events import Event, FieldValue
from engine.record import Record
from engine.typing_lite import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from typing import Any, TextIO

    from engine.mmu.guest_session import GuestSession

MMUS = ("tdp", "direct", "shadow")
ZAPS = ("fast", "slow", "roots")
WRITE_BATCH = 4096
RUN_CHUNK = 512  # accesses run between two looks at the batch
_NAME_WIDTH = 20  # trace-cmd pads event names to this


class SimulateOptions(Record):
    """The options of one `mmuscope simulate` run (a frozen record)."""

    __slots__ = (
        "accesses",
        "at",
        "jsonl",
        "layout",
        "mmu",
        "race_rate",
        "seed",
        "smi_every",
        "workload",
        "zap",
    )
    mmu: str
    workload: str
    accesses: int
    seed: int
    zap: str | None
    at: int | None
    jsonl: bool
    layout: str
    race_rate: float
    smi_every: int

    def __init__(
        self,
        mmu: str,
        workload: str,
        accesses: int = 10_000,
        seed: int = 1,
        zap: str | None = None,
        at: int | None = None,
        jsonl: bool = False,
        layout: str = "pc-4g",
        race_rate: float = 0.0,
        smi_every: int = 0,
    ) -> None:
        put = object.__setattr__
        put(self, "mmu", mmu)
        put(self, "workload", workload)
        put(self, "accesses", accesses)
        put(self, "seed", seed)
        put(self, "zap", zap)
        put(self, "at", at)
        put(self, "jsonl", jsonl)
        put(self, "layout", layout)
        put(self, "race_rate", race_rate)
        put(self, "smi_every", smi_every)


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
    parser.add_argument(
        "--race-rate", type=_rate, default=0.0, metavar="P",
        help="tdp: how often another vCPU wins the spte's cmpxchg (0..1)",
    )  # fmt: skip
    parser.add_argument(
        "--smi-every", type=_count, default=0, metavar="N",
        help="tdp: an SMI every N accesses (the last vCPU runs in SMM half of them)",
    )  # fmt: skip


def count_value(text: str) -> int:
    """--accesses, --seed, --at, --smi-every: 0x... or decimal, not negative (ValueError
    with the one line argparse prints after the option's name)."""
    try:
        value = int(text, 0)
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    if value < 0:
        raise ValueError(f"must be >= 0: {text!r}")
    return value


def rate_value(text: str) -> float:
    """--race-rate: a probability (ValueError with argparse's line, as count_value)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"must be from 0 to 1: {text!r}")
    return value


def _count(text: str) -> int:
    """count_value as argparse's type: its ValueError as the ArgumentTypeError it prints."""
    import argparse

    try:
        return count_value(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _rate(text: str) -> float:
    """rate_value as argparse's type."""
    import argparse

    try:
        return rate_value(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


# The options `options_of` reads: option -> (SimulateOptions' field, the value's check;
# None for the flag --jsonl).  They are add_parser's (tests/test_cli_own_parser.py
# checks them against its parser).
_OPTIONS: dict[str, tuple[str, Callable[[str], object] | None]] = {
    "--mmu": ("mmu", lambda text: _choice(text, MMUS)),
    "--workload": ("workload", str),
    "--accesses": ("accesses", count_value),
    "--seed": ("seed", count_value),
    "--zap": ("zap", lambda text: _choice(text, ZAPS)),
    "--at": ("at", count_value),
    "--layout": ("layout", str),
    "--jsonl": ("jsonl", None),
    "--race-rate": ("race_rate", rate_value),
    "--smi-every": ("smi_every", count_value),
}


def _choice(text: str, choices: tuple[str, ...]) -> str:
    if text not in choices:
        raise ValueError(text)
    return text


def options_of(words: Sequence[str]) -> SimulateOptions | None:
    """The options of the words after `mmuscope simulate` when each is one of
    add_parser's options spelled out (`--mmu tdp` or `--mmu=tdp`) with a good value,
    --mmu and --workload among them, as a command line mostly is; else None, and
    argparse parses the words (an abbreviation, --help, a bad or missing value: its
    one line and exit 2).  So simulate's start-up imports no argparse (issue 14
    "Speed"); tests/test_cli_own_parser.py checks that both give the same options."""
    values: dict[str, object] = {}
    at, end = 0, len(words)
    while at < end:
        word = words[at]
        name, equals, text = word.partition("=")
        option = _OPTIONS.get(name)
        if option is None:
            return None
        field, check = option
        if check is None:
            if equals:
                return None
            values[field] = True
            at += 1
            continue
        if not equals:
            at += 1
            if at == end:
                return None
            text = words[at]
        if text.startswith("-"):
            return None  # argparse's: an option, a negative number, an error
        try:
            values[field] = check(text)
        except ValueError:
            return None
        at += 1
    if "mmu" not in values or "workload" not in values:
        return None
    return SimulateOptions(**values)  # type: ignore[arg-type]


def run_simulate(args: argparse.Namespace) -> int:
    """The command, from argparse's arguments."""
    options = SimulateOptions(
        args.mmu, args.workload, args.accesses, args.seed, args.zap, args.at, args.jsonl,
        args.layout, args.race_rate, args.smi_every,
    )  # fmt: skip
    return run_options(options)


def run_options(options: SimulateOptions) -> int:
    """The command: the run printed on stdout, or its options' one-line error (exit 2)."""
    try:
        session = make_session(options)
    except (SimulateError, ValueError) as err:
        print(f"mmuscope simulate: error: {err}", file=sys.stderr)
        return 2
    # The modules, classes and the session live to the end: out of the collector's sight
    # (as the app's _freeze_startup_objects), so neither the run's full collections nor
    # the interpreter's at exit rescan them (about 20M of 280M instructions for 10
    # accesses; issue 14 "Speed", start-up); the collector, off while they were made
    # (tui/cli.py), runs again for the run's garbage.
    gc.freeze()
    gc.enable()
    run(session, options, sys.stdout)
    sys.stdout.flush()
    return 0


def make_session(options: SimulateOptions) -> GuestSession[object]:
    """The guest of these options, checked first (SimulateError/ValueError on bad ones);
    only the chosen MMU's modules are imported."""
    from engine.layouts import preset

    if (options.zap is None) != (options.at is None):
        raise SimulateError("--zap and --at go together")
    if options.at is not None and options.at > options.accesses:
        raise SimulateError(f"--at {options.at} is past --accesses {options.accesses}")
    if options.zap == "roots" and options.mmu != "tdp":
        raise SimulateError("--zap roots needs --mmu tdp: only the TDP MMU has roots to zap")
    kind = _session_class(options.mmu)
    if options.workload not in kind.workloads:
        raise SimulateError(
            f"--workload {options.workload!r} is not one of --mmu {options.mmu}'s: "
            f"{', '.join(kind.workloads)}"
        )
    if options.race_rate and options.mmu != "tdp":
        raise SimulateError("--race-rate needs --mmu tdp: the races are tdp_mmu_set_spte_atomic's")
    if options.smi_every and options.mmu != "tdp":
        raise SimulateError("--smi-every needs --mmu tdp")
    if options.mmu == "tdp":
        return kind(  # type: ignore[call-arg, no-any-return]
            preset(options.layout), workload=options.workload, seed=options.seed,
            race_rate=options.race_rate, smi_every=options.smi_every,
        )  # fmt: skip
    session = kind(preset(options.layout), workload=options.workload, seed=options.seed)
    return session  # type: ignore[no-any-return]


def _session_class(mmu: str) -> type[GuestSession[Any]]:
    if mmu == "tdp":
        from engine.mmu.tdp_session import TdpSession

        return TdpSession
    if mmu == "direct":
        from engine.mmu.session import MmuSession

        return MmuSession
    from engine.mmu.shadow_session import ShadowSession

    return ShadowSession


def zap(session: GuestSession[object], kind: str) -> None:
    if session.paging == "tdp":
        session.zap(kind)  # type: ignore[attr-defined]  # TdpSession.zap
    elif kind == "fast":
        session.mmu.zap_all_fast()  # type: ignore[attr-defined]
    else:
        session.mmu.pages.zap_all()


def simulate(options: SimulateOptions, out: TextIO) -> int:
    """Run and print; the number of event lines printed."""
    return run(make_session(options), options, out)


def run(session: GuestSession[object], options: SimulateOptions, out: TextIO) -> int:
    """The accesses run in chunks (`session.run`), the zap between two; the lines are
    written in batches of at least WRITE_BATCH."""
    batch: list[str] = []
    printed = 0
    printer: LinePrinter | None = None
    if options.jsonl:
        session.subscribe(lambda event: batch.append(_json_line(event)))
    else:
        out.write(f"cpus={session.nr_vcpus}\n")
        printer = LinePrinter()
        printer.listen(session, batch.append, joined=True)
    done, stop = 0, options.accesses
    while True:
        if done == options.at and options.zap is not None:
            zap(session, options.zap)
        if len(batch) >= WRITE_BATCH or (done == stop and batch):
            printed += len(batch)
            batch.append("")  # the last line's newline
            out.write("\n".join(batch))
            batch.clear()
        if done == stop:
            return printed + (printer.extra_lines if printer is not None else 0)
        until = options.at if options.at is not None and done < options.at else stop
        chunk = min(until - done, RUN_CHUNK)
        session.run(chunk)
        done += chunk


def _json_line(event: Event) -> str:
    """The object `replay --jsonl` makes of the event's trace line (fields as printed,
    the timestamp in microseconds)."""
    import json

    from engine.trace.lines import parse_line

    from .replay_cli import event_json

    parsed = parse_line(trace_cmd_line(event))
    assert parsed is not None
    return json.dumps(event_json(parsed))


# -- trace-cmd report lines -----------------------------------------------------------------


def _spte_changed(f: Mapping[str, FieldValue]) -> str:
    return (
        f"as id {f['as_id']} gfn {f['gfn']:x} level {f['level']} "
        f"old_spte {f['old_spte']:x} new_spte {f['new_spte']:x}"
    )


def _spte_requested(f: Mapping[str, FieldValue]) -> str:
    return f"gfn {f['gfn']:x} pfn {f['pfn']:x} level {f['level']}"


def _set_spte(f: Mapping[str, FieldValue]) -> str:
    return (
        f"gfn {f['gfn']:x} spte {f['spte']:x} ({f['access_str']}) level {f['level']} "
        f"at {f['sptep']:x}"
    )


def _page_fault(f: Mapping[str, FieldValue]) -> str:
    return (
        f"vcpu {f['vcpu_id']} rip 0x{f.get('guest_rip', 0):x} "
        f"address 0x{f['fault_address']:016x} error_code 0x{f['error_code']:x}"
    )


_ACCESS_STR = ("---", "--x", "w--", "w-x", "-u-", "-ux", "wu-", "wux")


def _sp(f: Mapping[str, FieldValue]) -> str:
    """KVM_MMU_PAGE_PRINTK, for TDP MMU pages (8-byte gptes, q0, direct)."""
    return (
        f"sp gen {f['gen']} gfn {f['gfn']:x} l{f['level']} {f['gpte_bytes']}-byte "
        f"q{f['quadrant']}{' direct' if f['direct'] else ''} {_ACCESS_STR[f['access']]}"  # type: ignore[index]
        f"{' invalid' if f['invalid'] else ''} {'' if f['nxe'] else '!'}nxe "
        f"{'' if f['ad'] else '!'}ad root {f['root_count']} {'unsync' if f['unsync'] else 'sync'}"
    )


def _get_page(f: Mapping[str, FieldValue]) -> str:
    return f"{_sp(f)} {'new' if f['created'] else 'existing'}"


def _page_fault_args(f: Mapping[str, FieldValue]) -> tuple[FieldValue, ...]:
    return f["vcpu_id"], f.get("guest_rip", 0), f["fault_address"], f["error_code"]


#: the same texts as `%` formats of a tuple of the fields (what `listen` prints with):
#: `%s` where the f-string has `{}`, `%x` where it has `:x`
FAST_FORMATS: dict[str, tuple[str, Callable[[Mapping[str, FieldValue]], tuple[Any, ...]]]] = {
    "kvm_tdp_mmu_spte_changed": (
        "as id %s gfn %x level %s old_spte %x new_spte %x",
        itemgetter("as_id", "gfn", "level", "old_spte", "new_spte"),
    ),
    "kvm_mmu_spte_requested": ("gfn %x pfn %x level %s", itemgetter("gfn", "pfn", "level")),
    "kvm_mmu_set_spte": (
        "gfn %x spte %x (%s) level %s at %x",
        itemgetter("gfn", "spte", "access_str", "level", "sptep"),
    ),
    "kvm_page_fault": ("vcpu %s rip 0x%x address 0x%016x error_code 0x%x", _page_fault_args),
}

FAST_PRINTK: dict[str, Callable[[Mapping[str, FieldValue]], str]] = {
    "kvm_tdp_mmu_spte_changed": _spte_changed,
    "kvm_mmu_spte_requested": _spte_requested,
    "kvm_mmu_set_spte": _set_spte,
    "kvm_page_fault": _page_fault,
    "kvm_mmu_get_page": _get_page,
    "kvm_mmu_prepare_zap_page": _sp,
}
COMM = "qemu-kvm"  # GuestSession's stamp


class LinePrinter:
    """trace-cmd report lines, each `format_line(event, "trace-cmd")`: the events in
    FAST_PRINTK by their f-string (a missing field: the template), the column before
    the text made once per timestamp and CPU, the name and its padding once per name."""

    def __init__(self) -> None:
        self._stamp: tuple[float, int, str, int] | None = None
        self._head = ""
        self._names: dict[str, str] = {}
        #: lines beyond one in the entries `listen(joined=True)` appended
        self.extra_lines = 0

    def line(
        self,
        name: str,
        fields: Mapping[str, FieldValue],
        ts: float,
        cpu: int,
        comm: str = COMM,
        pid: int = 0,
    ) -> str:
        fast = FAST_PRINTK.get(name)
        if fast is not None:
            try:
                text = fast(fields)
            except KeyError:
                fast = None
        if fast is None:
            from engine.trace.lines import TRACE_CMD, format_line

            return format_line(Event(name, fields, ts, cpu, pid, comm), TRACE_CMD)
        if self._stamp != (ts, cpu, comm, pid):
            self._stamp = (ts, cpu, comm, pid)
            self._head = self.head(ts, cpu, comm, pid)
        named = self._names.get(name)
        if named is None:
            pad = " " * (_NAME_WIDTH - len(name)) if len(name) < _NAME_WIDTH else ""
            named = self._names[name] = f"{name}: {pad}"
        return self._head + named + text

    def listen(
        self, session: GuestSession[object], append: Callable[[str], None], joined: bool = False
    ) -> None:
        """`session.raw_listener`: each event's `line()` appended, stamped as the session
        stamps it (`stamp()`), the column before the text made once per access and vCPU
        (`head`, its part before the timestamp once per vCPU), the events of FAST_FORMATS
        by one `%` of their name's column and text (else FAST_PRINTK's f-string).
        On the TDP MMU also its fast paths, from the values without fields: a VM exit's
        `kvm_page_fault` (`fault_listener`) and the common fault's three lines by one `%`
        (`common_listener`), appended as one entry of three lines when `joined`."""
        names: dict[str, tuple[str, Callable[[Mapping[str, FieldValue]], tuple[Any, ...]]]] = {}
        line = self.line
        last_steps = last_cpu = -1
        head = ""
        heads: dict[int, str] = {}  # per CPU: its columns, the timestamp's `%` left open
        usecs_per_step = _usecs_per_step()

        def stamped() -> str:
            nonlocal last_steps, last_cpu, head
            steps, cpu = session.steps, session._vcpu
            if steps != last_steps or cpu != last_cpu:
                last_steps, last_cpu = steps, cpu
                fmt = heads.get(cpu)
                if fmt is None:
                    fmt = heads[cpu] = f"{COMM:>16}-{0:<5} [{cpu:03d}] %5d.%06d: "
                if usecs_per_step:  # round(stamp()[0] * 1e6), in integers
                    head = fmt % divmod(steps * usecs_per_step, 1_000_000)
                else:
                    head = fmt % divmod(round(session.stamp()[0] * 1_000_000), 1_000_000)
            return head

        def raw(name: str, fields: Mapping[str, FieldValue]) -> None:
            entry = names.get(name)
            if entry is None:
                entry = names[name] = _line_format(name)
            head = stamped()
            fmt, args = entry
            try:
                append(head + fmt % args(fields))
                return
            except KeyError:  # a field the format needs is missing: the template
                pass
            append(line(name, fields, *session.stamp()))

        fault_fmts: dict[int, str] = {}  # per vCPU, its number and rip 0 in the text
        common_fmts: dict[tuple[int, int, int, str], str] = {}

        def fault(vcpu: int, gpa: int, code: int) -> None:
            fmt = fault_fmts.get(vcpu)
            if fmt is None:
                fmt = fault_fmts[vcpu] = "%s" + _line_format("kvm_page_fault")[0].replace(
                    "vcpu %s rip 0x%x", f"vcpu {vcpu} rip 0x0"
                )  # _page_fault_args, guest_rip 0
            append(fmt % (stamped(), gpa, code))

        def common(
            as_id: int, gfn: int, pfn: int, level: int, base: int, old: int, new: int,
            access: str, sptep: int,
        ) -> None:  # fmt: skip
            now = head  # the access's fault() stamped it just before
            if session.steps != last_steps or session._vcpu != last_cpu:
                now = stamped()
            key = (as_id, level, old, access)
            fmt = common_fmts.get(key)
            if fmt is None:
                fmt = common_fmts[key] = _common_format(as_id, level, old, access)
            text = fmt % (now, gfn, pfn, now, base, new, now, base, new, sptep)
            if joined:
                self.extra_lines += 2
                append(text)
            else:
                for one in text.split("\n"):
                    append(one)

        if session.paging == "tdp":  # TdpSession's fast paths, set before raw_listener
            session.fault_listener = fault  # type: ignore[attr-defined]
            session.common_listener = common  # type: ignore[attr-defined]
        session.raw_listener = raw

    @staticmethod
    def head(ts: float, cpu: int, comm: str = COMM, pid: int = 0) -> str:
        """trace-cmd's columns before the event name."""
        secs, usecs = divmod(round(ts * 1_000_000), 1_000_000)
        return f"{comm:>16}-{pid:<5} [{cpu:03d}] {secs:5d}.{usecs:06d}: "


def _line_format(name: str) -> tuple[str, Callable[[Mapping[str, FieldValue]], tuple[Any, ...]]]:
    """The `%` format of an event's line after the head (its name's column, then the
    text) and what makes the tuple it formats; KeyError when the event has neither."""
    named = _named(name)
    entry = FAST_FORMATS.get(name)
    if entry is not None:
        return named + entry[0], entry[1]
    fast = FAST_PRINTK.get(name)
    if fast is not None:
        return named + "%s", lambda fields: (fast(fields),)
    return named, _no_fast_format


def _common_format(as_id: int, level: int, old: int, access: str) -> str:
    """The `%` format of the common fault's three lines (`kvm_mmu_spte_requested`,
    `kvm_tdp_mmu_spte_changed`, `kvm_mmu_set_spte`: FAST_FORMATS' texts) with what stays
    the same from fault to fault written in (as id, level, old_spte, access_str): the
    head, gfn, pfn; head, the leaf's gfn, new_spte; head, the leaf's gfn, new_spte, sptep
    left to fill."""
    texts = {
        "kvm_mmu_spte_requested": f"gfn %x pfn %x level {level}",
        "kvm_tdp_mmu_spte_changed": f"as id {as_id} gfn %x level {level} "
        f"old_spte {old:x} new_spte %x",
        "kvm_mmu_set_spte": f"gfn %x spte %x ({access.replace('%', '%%')}) level {level} at %x",
    }
    return "\n".join("%s" + _named(name) + text for name, text in texts.items())


def _usecs_per_step() -> int:
    """Microseconds of virtual time per access when whole (`stamp()` is steps *
    ACCESS_NS / 1e9 seconds, so `round(ts * 1e6)` is steps * ACCESS_NS // 1000), else 0."""
    from engine.mmu.guest_session import ACCESS_NS

    return ACCESS_NS // 1000 if ACCESS_NS % 1000 == 0 else 0


def _named(name: str) -> str:
    """The event name's column (`name: `, padded to _NAME_WIDTH), as a `%` format."""
    pad = " " * (_NAME_WIDTH - len(name)) if len(name) < _NAME_WIDTH else ""
    return f"{name}: {pad}".replace("%", "%%")


def _no_fast_format(fields: Mapping[str, FieldValue]) -> tuple[Any, ...]:
    raise KeyError("no fast format")


_PRINTER = LinePrinter()


def trace_cmd_line(event: Event) -> str:
    """`format_line(event, "trace-cmd")`, faster for the events in FAST_PRINTK."""
    return _PRINTER.line(event.name, event.fields, event.ts, event.cpu, event.comm, event.pid)
