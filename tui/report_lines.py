"""The `trace-cmd report` lines `mmuscope simulate` prints: `LinePrinter`, each line
`engine.trace.lines.format_line(event, "trace-cmd")`, the handful of events a run prints
most by `FAST_PRINTK` (f-strings of the same TP_printk texts) and `FAST_FORMATS` (`%`
formats of them), checked against the tracepoint templates by the tests, the rest by
their templates.  A session hands the printer names and fields (`raw_listener`), so no
`Event` is built; on the TDP MMU also the values of a VM exit's `kvm_page_fault` and of
the common fault's three events (`TdpSession.fault_listener`, `common_listener`).
Imports nothing heavy: `engine.trace` only for an event without a fast format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from mmuscope.engine.events import Event, FieldValue

if TYPE_CHECKING:
    from mmuscope.engine.mmu.guest.session import GuestSession

_NAME_WIDTH = 20  # trace-cmd pads event names to this


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
            from mmuscope.engine.trace.lines import TRACE_CMD, format_line

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
    from mmuscope.engine.mmu.guest.session import ACCESS_NS

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
