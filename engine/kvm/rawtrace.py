"""A tracefs instance's ring buffers read as the kernel keeps them: binary, per CPU.

`trace_pipe` makes the kernel print every event as text (its `print fmt`), and the
reader then parses that text back: for 590,000 events (`kvm touch --pages 65536`) that
is 57 MB, and most of a traced run's time.  `per_cpu/cpuN/trace_pipe_raw` hands out the
ring buffer's pages instead (kernel/trace/ring_buffer.c, 6.18): a page header
(`events/header_page`: a u64 timestamp, a `commit` whose low bits are the bytes used),
then events, each behind a 32-bit header (`events/header_event`): `type_len` (5 bits)
and `time_delta` (27 bits).  `type_len` 1..28 is a data event of `type_len * 4` bytes;
0 one whose length is the next u32 (which it counts); 29 padding (a discarded event,
or with no delta the rest of the page); 30 a time extend (the delta's upper bits in
the next u32); 31 an absolute time stamp.  A data event starts with the common fields
(`common_type`, the event's `ID` in its `format` file, and `common_pid`), then the
event's own fields at the offsets its `format` file gives.

`RawPipes` drains every CPU's pipe without blocking and merges the CPUs' events by
time; `Formats` decodes an event's fields by the host's format files (numbers as ints,
byte arrays as bytes), under the TP_STRUCT__entry names.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import json
import os
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

from ..events import Event, FieldValue
from ..trace.kernel_fields import (
    Fields,
    Record,
    json_as_they_are,
    printed_as_they_are,
    printed_converter,
    printed_fields,
)
from ..trace.kernel_format import KernelFormat, RenderError, parse_format_file, render_print_fmt
from ..trace.lines import FTRACE, format_line, ftrace_head, printk_fields
from ..trace.tracepoints import TRACEPOINTS, Values, event_json, json_fields

PAGE_DATA = 16  # events/header_page: "field: char data; offset:16"
COMMIT_MASK = (1 << 27) - 1  # commit's low bits: the bytes used (the rest are flags)
TYPE_PADDING, TYPE_TIME_EXTEND, TYPE_TIME_STAMP = 29, 30, 31
TS_BITS = 27
_U32 = struct.Struct("<I")
_HEAD = struct.Struct("<QQ")
_COMMON = struct.Struct("<HBBi")  # common_type, common_flags, common_preempt_count, common_pid
_FIELD_RE = re.compile(
    r"\s*field:(?P<decl>[^;]+);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);"
    r"\s*signed:(?P<signed>\d+);"
)
_INTS = {1: "B", 2: "H", 4: "I", 8: "Q"}
Text = Callable[[Any], str]  # a value's text (`Tracepoint.compiled`)


class RawEvent(NamedTuple):
    """One event as the ring buffer holds it: its time (ns), CPU, type (`common_type`)
    and bytes (a NamedTuple: half a million are made per second of guest)."""

    ts: int
    cpu: int
    type: int
    data: bytes

    @property
    def pid(self) -> int:
        return int(_COMMON.unpack_from(self.data)[3])


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    offset: int
    size: int
    signed: bool
    array: bool  # `__u8 insn[15]`: bytes


@dataclass(frozen=True)
class Format:
    """One event's `format` file: its id, name and fields (the common ones left out),
    and the file's text (its `print fmt`, read by `print_fmt` when first needed)."""

    id: int
    name: str
    fields: tuple[Field, ...]
    source: str = ""

    @cached_property
    def _layout(self) -> tuple[struct.Struct, tuple[str, ...]]:
        """One `struct.Struct` reading every field at its offset (arrays as bytes)."""
        code, at, names = "<", 0, []
        for f in sorted(self.fields, key=lambda f: f.offset):
            if f.offset < at:
                continue  # overlapping declarations: the first one
            code += "x" * (f.offset - at)
            if f.array or f.size not in _INTS:
                code += f"{f.size}s"
            else:
                code += _INTS[f.size].lower() if f.signed else _INTS[f.size]
            names.append(f.name)
            at = f.offset + f.size
        return struct.Struct(code), tuple(names)

    def decode(self, data: bytes) -> dict[str, int | bytes]:
        layout, names = self._layout
        if len(data) < layout.size:  # a record shorter than its format: zeros past its end
            data = data + bytes(layout.size - len(data))
        return dict(zip(names, layout.unpack_from(data), strict=True))

    @cached_property
    def print_fmt(self) -> KernelFormat | None:
        """The `print fmt` (`engine.trace.kernel_format`), None if it cannot be read."""
        system = re.search(r"^name: (\S+)", self.source, re.M)
        try:
            return parse_format_file(self.source, "", system[1] if system else self.name)
        except (ValueError, IndexError):
            return None


def parse_format(text: str) -> Format | None:
    """A `format` file's id, name and own fields (None: not one)."""
    name = re.search(r"^name: (\S+)", text, re.M)
    ident = re.search(r"^ID: (\d+)", text, re.M)
    if name is None or ident is None:
        return None
    fields = []
    for m in _FIELD_RE.finditer(text):
        decl = m["decl"].strip()
        array = decl.endswith("]")
        word = decl.rsplit(" ", 1)[-1].split("[")[0]
        if word.startswith("common_"):
            continue
        fields.append(Field(word, int(m["offset"]), int(m["size"]), m["signed"] == "1", array))
    return Format(int(ident[1]), name[1], tuple(fields), text)


def read_formats(events: Path, subsystems: Iterable[str]) -> dict[int, Format]:
    """The formats of every event of `subsystems` under `events/`, by id."""
    found: dict[int, Format] = {}
    for sub in subsystems:
        for path in sorted((events / sub).glob("*/format")):
            fmt = parse_format(path.read_text())
            if fmt is not None:
                found[fmt.id] = fmt
    return found


@dataclass
class Tally:
    """Events counted by type as pages are parsed (with the time each type was first
    seen), only the types in `keep` made into `RawEvent`s (None: all): a summary needs
    the bytes of a few event kinds, not of half a million events."""

    keep: frozenset[int] | None = None
    counts: dict[int, int] = field(default_factory=dict)
    first: dict[int, int] = field(default_factory=dict)


def parse_page(page: bytes, cpu: int, out: list[RawEvent], tally: Tally | None = None) -> bool:
    """The data events of one ring-buffer page, appended to `out` (and counted in
    `tally`, which picks the ones to append); whether the kernel flagged events missed
    before the page."""
    ts, commit = _HEAD.unpack_from(page, 0)
    end = PAGE_DATA + (commit & COMMIT_MASK)
    missed = bool(commit >> 30)
    at = PAGE_DATA
    unpack = _U32.unpack_from
    counts, first, keep = (tally.counts, tally.first, tally.keep) if tally else ({}, {}, None)
    while at + 4 <= end:
        (head,) = unpack(page, at)
        type_len, delta = head & 0x1F, head >> 5
        if type_len <= 28:  # data: 4 * type_len bytes, or (0) the length follows
            if type_len:
                start, size = at + 4, 4 * type_len
            else:
                start, size = at + 8, unpack(page, at + 4)[0] - 4
            ts += delta
            kind = page[start] | page[start + 1] << 8  # common_type
            if kind in counts:
                counts[kind] += 1
            else:
                counts[kind], first[kind] = 1, ts
            if keep is None or kind in keep:
                out.append(RawEvent(ts, cpu, kind, page[start : start + size]))
            at = start + size
        elif type_len == TYPE_PADDING:
            if delta == 0:  # the rest of the page
                break
            (length,) = unpack(page, at + 4)
            at += 4 + length
        elif type_len == TYPE_TIME_EXTEND:
            (upper,) = unpack(page, at + 4)
            ts += upper << TS_BITS | delta
            at += 8
        else:  # TYPE_TIME_STAMP: absolute (its top bits are the current time's)
            (upper,) = unpack(page, at + 4)
            stamp = upper << TS_BITS | delta
            ts = ts & ~((1 << 59) - 1) | stamp
            at += 8
    return missed


def _time(event: RawEvent) -> int:
    return event.ts


class RawPipes:
    """Every CPU's `trace_pipe_raw` of one instance, drained without blocking."""

    def __init__(self, instance: Path) -> None:
        self.fds: dict[int, int] = {}
        self.page_size = os.sysconf("SC_PAGE_SIZE")
        self.missed = 0  # pages flagged with events lost before them
        try:
            for path in sorted((instance / "per_cpu").glob("cpu*")):
                cpu = int(path.name[3:])
                self.fds[cpu] = os.open(path / "trace_pipe_raw", os.O_RDONLY | os.O_NONBLOCK)
        except BaseException:  # a signal or an error halfway: no pipe left open (it
            self.close()  # would keep the instance busy, and its rmdir failing)
            raise

    def _pages(self, cpu: int, fd: int, tally: Tally | None) -> Iterator[RawEvent]:
        """One CPU's events not read yet, a page at a time (never blocks)."""
        while True:
            try:
                page = os.read(fd, self.page_size)
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno == errno.EINTR:
                    continue
                raise
            if not page:
                return
            events: list[RawEvent] = []
            self.missed += parse_page(page, cpu, events, tally)
            yield from events

    def iter_available(self, tally: Tally | None = None) -> Iterator[RawEvent]:
        """Every event recorded and not read yet (those `tally` keeps), in time order
        across CPUs: the CPUs' pipes merged as they are read, one page of each held at a
        time, so memory does not grow with what the buffers hold."""
        streams = [self._pages(cpu, fd, tally) for cpu, fd in self.fds.items()]
        if len(streams) == 1:
            return streams[0]
        return heapq.merge(*streams, key=_time)

    def read_available(self, tally: Tally | None = None) -> list[RawEvent]:
        """`iter_available` as a list."""
        return list(self.iter_available(tally))

    def close(self) -> None:
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


# `enum trace_flag_type` (kernel/trace/trace.h, 6.18): `common_flags`' bits
TRACE_FLAG_IRQS_OFF, TRACE_FLAG_NEED_RESCHED_LAZY, TRACE_FLAG_NEED_RESCHED = 0x01, 0x02, 0x04
TRACE_FLAG_HARDIRQ, TRACE_FLAG_SOFTIRQ, TRACE_FLAG_PREEMPT_RESCHED = 0x08, 0x10, 0x20
TRACE_FLAG_NMI, TRACE_FLAG_BH_OFF = 0x40, 0x80
_RESCHED = {
    TRACE_FLAG_NEED_RESCHED | TRACE_FLAG_NEED_RESCHED_LAZY | TRACE_FLAG_PREEMPT_RESCHED: "B",
    TRACE_FLAG_NEED_RESCHED | TRACE_FLAG_PREEMPT_RESCHED: "N",
    TRACE_FLAG_NEED_RESCHED_LAZY | TRACE_FLAG_PREEMPT_RESCHED: "L",
    TRACE_FLAG_NEED_RESCHED | TRACE_FLAG_NEED_RESCHED_LAZY: "b",
    TRACE_FLAG_NEED_RESCHED: "n",
    TRACE_FLAG_PREEMPT_RESCHED: "p",
    TRACE_FLAG_NEED_RESCHED_LAZY: "l",
}
UNKNOWN_COMM = "<...>"  # trace_pipe's comm of a pid not in saved_cmdlines
_LINE = "%s%5d.%06d%s\n"  # the head, `trace_pipe`'s "%5lu.%06lu", the text after it


def latency_flags(flags: int, preempt_count: int) -> str:
    """The flags column `trace_pipe` prints (`trace_print_lat_fmt()`, trace_output.c,
    6.18): irqs off, need-resched, hard/soft irq, then the preempt count's two nibbles."""
    irqs_off, bh_off = flags & TRACE_FLAG_IRQS_OFF, flags & TRACE_FLAG_BH_OFF
    first = "D" if irqs_off and bh_off else "d" if irqs_off else "b" if bh_off else "."
    resched_bits = TRACE_FLAG_NEED_RESCHED | TRACE_FLAG_NEED_RESCHED_LAZY
    resched = _RESCHED.get(flags & (resched_bits | TRACE_FLAG_PREEMPT_RESCHED), ".")
    nmi, hard, soft = flags & TRACE_FLAG_NMI, flags & TRACE_FLAG_HARDIRQ, flags & TRACE_FLAG_SOFTIRQ
    irq = ("Z" if nmi and hard else "z" if nmi else "H" if hard and soft else "h" if hard
           else "s" if soft else ".")  # fmt: skip
    low, high = preempt_count & 0xF, preempt_count >> 4 & 0xF
    return f"{first}{resched}{irq}{f'{low:x}' if low else '.'}{f'{high:x}' if high else '.'}"


def trace_seconds(ns: int) -> float:
    """A ring-buffer time as `trace_pipe` prints it: microseconds, rounded
    (`ns2usecs()`), in seconds."""
    return ((ns + 500) // 1000) / 1e6


class Decoder:
    """Ring-buffer records as the text reader gives them: `event()` is the `Event`
    `engine.trace.lines.parse_line` makes of the line `trace_pipe` would print, `line()`
    that line (the ftrace shape, the host's printk text).  A tracepoint whose fields
    `engine.trace.kernel_fields.printed_fields` maps is built directly; any other one
    has its `print fmt` evaluated (`render_print_fmt`) and that text parsed, as the
    kernel would have printed it."""

    def __init__(self, formats: dict[int, Format], comms: dict[int, str] | None = None) -> None:
        self.formats = formats
        self.comms = comms or {}  # pid -> comm (others: `<...>`)
        #: `lines`' printers: by event id, a record's text after its timestamp (None:
        #: by `line`); by CPU and common fields, the line up to it
        self._printers: dict[int, Callable[[bytes], str] | None] = {}
        self._heads: dict[tuple[int, bytes], str] = {}
        #: `jsonl`'s printers by event id (None: by `event_json`), and comms as JSON
        self._objects: dict[int, Callable[[int, int, bytes], str] | None] = {}
        self._comm_json: dict[int, str] = {}

    def name(self, kind: int) -> str:
        """The event's name by its id (``type_N`` when the host has no format for it)."""
        fmt = self.formats.get(kind)
        return f"type_{kind}" if fmt is None else fmt.name

    def comm(self, pid: int) -> str:
        """The comm a line shows for `pid`."""
        return self.comms.get(pid, UNKNOWN_COMM)

    def fields(self, raw: RawEvent) -> tuple[str, dict[str, FieldValue]]:
        fmt = self.formats.get(raw.type)
        if fmt is None:
            return self.name(raw.type), {"text": raw.data.hex(" ")}
        kernel = fmt.decode(raw.data)
        printed = printed_fields(fmt.name, kernel)
        if printed is None:
            printed = printk_fields(fmt.name, self.text(fmt, kernel))
        return fmt.name, printed

    def text(self, fmt: Format, kernel: dict[str, int | bytes]) -> str:
        """The printk text of a record (its fields as `key=value` when the print fmt is
        beyond `render_print_fmt`)."""
        printk = fmt.print_fmt
        if printk is not None:
            try:
                return render_print_fmt(printk, dict(kernel))
            except RenderError:
                pass
        return " ".join(f"{k}={v.hex() if isinstance(v, bytes) else v}" for k, v in kernel.items())

    def event(self, raw: RawEvent) -> Event:
        name, fields = self.fields(raw)
        pid = raw.pid
        return Event(
            name, fields, trace_seconds(raw.ts), raw.cpu, pid, self.comms.get(pid, UNKNOWN_COMM)
        )

    def line(self, raw: RawEvent, event: Event | None = None) -> str:
        """The `trace_pipe` line of `raw` (its `event()` if already made), no newline."""
        if event is None:
            event = self.event(raw)
        flags = latency_flags(raw.data[2], raw.data[3])
        return format_line(event, FTRACE, flags=flags)

    def lines(self, records: Iterable[RawEvent]) -> str:
        """`line()` of each record, each ending in a newline, as one text; made without
        an `Event`: a record's fields go from its bytes (`Format.decode`) through the
        same conversion (`printed_converter`) to its tracepoint's template compiled
        once (`Tracepoint.printf`), and the columns before the timestamp are made once
        per CPU, pid and flags.  A record that does not fit (an event with no
        tracepoint, or whose fields are not written as printed) takes `line()`."""
        printers, heads = self._printers, self._heads
        out = []
        for raw in records:
            ts, cpu, kind, data = raw
            head = heads.get((cpu, data[2:8]))
            if head is None:
                head = self._head(cpu, data)
            printer = printers[kind] if kind in printers else self._printer(kind)
            try:
                text = None if printer is None else printer(data)
            except (KeyError, ValueError, TypeError, IndexError):  # not as the kernel's
                text = None
            if text is None:
                out.append(self.line(raw) + "\n")
                continue
            usecs = (ts + 500) // 1000  # ns2usecs()
            out.append(_LINE % (head, usecs // 1_000_000, usecs % 1_000_000, text))
        return "".join(out)

    def jsonl(self, records: Iterable[RawEvent]) -> str:
        """``--jsonl``'s line of each record (`event_json` of its `event()`, as
        `json.dumps` writes it), as one text.  An event whose JSON fields are its record's
        own (`kernel_fields.json_as_they_are`: every field an integer) is made without
        an `Event` nor a dict: its object is written by `json.dumps` once per event id
        with its values left as `%` slots (`_object`), and each record's values, read
        from its bytes by one `struct.Struct`, go into them (an int as `%d` and the
        time as `%r`, as `json.dumps` writes them: `int.__repr__`, `float.__repr__`)."""
        objects, dumps = self._objects, json.dumps
        out = []
        for ts, cpu, kind, data in records:
            printer = objects[kind] if kind in objects else self._object(kind)
            if printer is not None:
                out.append(printer(ts, cpu, data))
            else:
                out.append(dumps(event_json(self.event(RawEvent(ts, cpu, kind, data)))) + "\n")
        return "".join(out)

    def _comm(self, pid: int) -> str:
        """The JSON text of `pid`'s comm."""
        text = self._comm_json[pid] = json.dumps(self.comms.get(pid, UNKNOWN_COMM))
        return text

    def _object(self, kind: int) -> Callable[[int, int, bytes], str] | None:
        """`jsonl`'s printer of event id `kind` (None where its fields are not the
        record's own integers, or overlap): the object `event_json` makes, written by
        `json.dumps` with a marker for each value, the markers then made `%` slots."""
        fmt = self.formats.get(kind)
        printer = None
        if fmt is not None and json_as_they_are(fmt.name):
            printer = _object_printer(fmt, self._comm_json, self._comm)
        self._objects[kind] = printer
        return printer

    def _head(self, cpu: int, data: bytes) -> str:
        flags, preempt, pid = _COMMON.unpack_from(data)[1:]
        comm = self.comms.get(pid, UNKNOWN_COMM)
        head = ftrace_head(comm, pid, cpu, latency_flags(flags, preempt))
        self._heads[cpu, data[2:8]] = head
        return head

    def _printer(self, kind: int) -> Callable[[bytes], str] | None:
        """A record's text after the timestamp (``: name: printk``) from its bytes, made
        once per event id: its tracepoint's `%` format (`Tracepoint.printf`) of the
        fields `printed_converter` makes of the record, or, where the printk prints the
        fields as they are, of the fields it prints read straight from the bytes."""
        fmt = self.formats.get(kind)
        tracepoint = None if fmt is None else TRACEPOINTS.get(fmt.name)
        convert = None if fmt is None else printed_converter(fmt.name)
        printer: Callable[[bytes], str] | None = None
        if fmt is not None and tracepoint is not None and convert is not None:
            printf, names, texts = tracepoint.compiled
            pattern = f": {fmt.name}: {printf}"
            if printed_as_they_are(fmt.name) and not tracepoint.defaults:
                printer = _fields_printed(fmt, pattern, names, texts)
            if printer is None:
                printer = _fields_converted(fmt, pattern, tracepoint.printf()[1], convert)
        self._printers[kind] = printer
        return printer


def _object_printer(
    fmt: Format, comms: dict[int, str], comm_of: Callable[[int], str]
) -> Callable[[int, int, bytes], str] | None:
    """`Decoder.jsonl`'s printer of `fmt`'s records (None: a field not an integer, or
    overlapping another): `common_pid` and the fields read by one `struct.Struct`, put
    in the `%` slots of the object's JSON text."""
    fields = sorted(fmt.fields, key=lambda f: f.offset)
    code, at = "<4xi", 8  # common_pid at 4 (`_COMMON`), the event's fields from 8 on
    for f in fields:
        if f.array or f.size not in _INTS or f.offset < at:
            return None
        code += "x" * (f.offset - at) + (_INTS[f.size].lower() if f.signed else _INTS[f.size])
        at = f.offset + f.size
    layout = struct.Struct(code)
    unpack, size = layout.unpack_from, layout.size
    names = [f.name for f in fields]
    # the fields as `json_fields` puts them (earlier names added): each one's record field
    shown = list(json_fields(fmt.name, dict.fromkeys(names, 0)))
    aliases = TRACEPOINTS[fmt.name].aliases if fmt.name in TRACEPOINTS else {}
    source = [names.index(aliases.get(key, key)) for key in shown]
    marker = "\x01{}".format
    obj = Event(fmt.name, dict.fromkeys(names, 0)).to_json()  # `event_json`'s keys, in order
    obj |= {slot: marker(slot) for slot in ("ts", "cpu", "pid", "comm")}
    obj["fields"] = {key: marker(i) for i, key in enumerate(shown)}
    pattern = json.dumps(obj).replace("%", "%%")
    for slot, spec in (("ts", "%r"), ("cpu", "%d"), ("pid", "%d"), ("comm", "%s")):
        pattern = pattern.replace(json.dumps(marker(slot)), spec)
    for i in range(len(shown)):
        pattern = pattern.replace(json.dumps(marker(i)), "%d")
    pattern += "\n"
    pick = itemgetter(*(1 + i for i in source)) if len(source) > 1 else None

    def printer(ts: int, cpu: int, data: bytes) -> str:
        if len(data) < size:  # a record shorter than its format: zeros past its end
            data = data + bytes(size - len(data))
        got = unpack(data)
        pid = got[0]
        comm = comms[pid] if pid in comms else comm_of(pid)
        head = (((ts + 500) // 1000) / 1e6, cpu, pid, comm)  # trace_seconds()
        values: tuple[object, ...] = (
            pick(got) if pick is not None else tuple([got[1 + i] for i in source])
        )
        return pattern % (head + values)

    return printer


def _fields_converted(
    fmt: Format, pattern: str, values: Values, convert: Callable[[Record], Fields]
) -> Callable[[bytes], str]:
    """`pattern` of the fields `convert` makes of the whole record."""
    decode = fmt.decode

    def printer(data: bytes) -> str:
        return pattern % values(convert(decode(data)))

    return printer


def _fields_printed(
    fmt: Format, pattern: str, names: tuple[str, ...], texts: tuple[Text | None, ...]
) -> Callable[[bytes], str] | None:
    """`pattern` of the fields it prints (`names`, each made its text by `texts`) read
    from the record's bytes, the others skipped: one `struct.Struct` over them in
    offset order, its values put in print order.  None when a field is not in the
    record, or is an array."""
    by_name = {f.name: f for f in fmt.fields}
    if any(
        name not in by_name or by_name[name].array or by_name[name].size not in _INTS
        for name in names
    ):
        return None
    read = sorted({by_name[name] for name in names}, key=lambda f: f.offset)
    code, at = "<", 0
    for f in read:
        if f.offset < at:
            return None  # overlapping fields
        code += "x" * (f.offset - at) + (_INTS[f.size].lower() if f.signed else _INTS[f.size])
        at = f.offset + f.size
    layout = struct.Struct(code)
    unpack, size = layout.unpack_from, layout.size
    position = {f.name: i for i, f in enumerate(read)}
    order = tuple(position[name] for name in names)
    if order == tuple(range(len(read))) and not any(texts):  # as read: the values as they are

        def printer(data: bytes) -> str:
            if len(data) < size:  # a record shorter than its format: zeros past its end
                data = data + bytes(size - len(data))
            return pattern % unpack(data)

        return printer
    pick = itemgetter(*order) if len(order) > 1 else lambda got: (got[order[0]],)

    def printer_in_order(data: bytes) -> str:
        if len(data) < size:
            data = data + bytes(size - len(data))
        got = pick(unpack(data))
        return pattern % tuple([v if t is None else t(v) for v, t in zip(got, texts, strict=True)])

    return printer_in_order


SHADOW_PAGE_EVENTS = frozenset(
    {"kvm_mmu_get_page", "kvm_mmu_prepare_zap_page", "kvm_mmu_sync_page", "kvm_mmu_unsync_page"}
)
ROLE_INVALID = 1 << 11  # role.invalid in role.word


class RawSummary:
    """`replay --summary`'s object from the ring buffers, drained as the run goes (only
    counts kept, so memory does not grow with the run): events per name in first-seen
    order, `unmatched` from a `ReplayModel` fed the events that make and unmake pages,
    and the emulated instructions, decoded."""

    def __init__(self, formats: dict[int, Format]) -> None:
        from ..replay.model import PLACING_EVENTS, ReplayModel

        self.formats = formats
        self.placing = PLACING_EVENTS
        self.model = ReplayModel()
        self.emulated: dict[str, int] = {}
        wanted = {*PLACING_EVENTS, "kvm_emulate_insn"}
        self.tally = Tally(frozenset(i for i, f in formats.items() if f.name in wanted))

    def drain(self, pipes: RawPipes) -> None:
        """What the pipes hold: counted as the pages are parsed, the events kept
        (`tally.keep`) applied."""
        self._apply(pipes.read_available(self.tally))

    def take(self, records: Iterable[RawEvent]) -> None:
        """Records read by another (`kvm --summary --trace-out`: those its lines are
        made of): each counted, the ones `drain` would keep applied."""
        counts, first, keep = self.tally.counts, self.tally.first, self.tally.keep
        kept = []
        for raw in records:
            kind = raw.type
            if kind in counts:
                counts[kind] += 1
            else:
                counts[kind], first[kind] = 1, raw.ts
            if keep is None or kind in keep:
                kept.append(raw)
        self._apply(kept)

    def _apply(self, records: Iterable[RawEvent]) -> None:
        from ..events import Event
        from .asm import decode_emulated

        for raw in records:
            fmt = self.formats[raw.type]
            if fmt.name in self.placing:
                fields: dict[str, int | bool] = {
                    k: v for k, v in fmt.decode(raw.data).items() if isinstance(v, int)
                }
                if fmt.name in SHADOW_PAGE_EVENTS:  # the text parser's names for them
                    fields["gen"] = fields["mmu_valid_gen"]
                    fields["invalid"] = bool(fields["role"] & ROLE_INVALID)
                self.model.apply(Event(fmt.name, fields, raw.ts / 1e9, raw.cpu, raw.pid))
            else:  # kvm_emulate_insn
                f = fmt.decode(raw.data)
                insn, rip, size = f["insn"], f["rip"], f["len"]
                assert isinstance(insn, bytes) and isinstance(rip, int) and isinstance(size, int)
                text = decode_emulated(insn[:size].hex(" "), rip)
                self.emulated[text] = self.emulated.get(text, 0) + 1

    def summary(self) -> dict[str, object]:
        tally = self.tally
        by_event: dict[str, int] = {}
        for kind in sorted(tally.counts, key=tally.first.__getitem__):
            fmt = self.formats.get(kind)
            by_event[fmt.name if fmt is not None else f"type {kind}"] = tally.counts[kind]
        events = sum(by_event.values())
        unmatched = self.model.unknown_zaps + self.model.unkeyed_zaps
        return {"lines": events, "events": events, "skipped": 0, "unmatched": unmatched,
                "by_event": by_event}  # fmt: skip
