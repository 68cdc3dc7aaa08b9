"""Import recorded KVM_SET_USER_MEMORY_REGION calls and replay them into a `Vm`.

Two recordings are understood, line by line (anything else is skipped):

* QEMU's ``kvm_set_user_memory`` trace event, emitted by ``kvm_set_user_memory_region()``
  (accel/kvm/kvm-all.c) for every ioctl ``kvm_set_phys_mem`` makes, as printed by the
  log backend (``-trace kvm_set_user_memory``, with or without the ``PID@TIME:`` prefix),
  the ftrace backend or ``simpletrace.py``, in all three formats QEMU used:
  ``Slot#N flags=...``; ``AddrSpace#A Slot#N ...`` (then slot = A << 16 | N); and, since
  QEMU 8.2, with ``guest_memfd=... guest_memfd_offset=...`` before ``ret=``;
* ``strace -e ioctl`` of QEMU: ``ioctl(FD, KVM_SET_USER_MEMORY_REGION, {slot=...}) = 0``,
  with ``-f`` pid prefixes, ``-t``/``-tt``/``-ttt`` timestamps and split
  ``<unfinished ...>`` / ``<... ioctl resumed>`` lines.
"""

from __future__ import annotations

import errno as _errno
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import KvmError
from ..memslots.constants import KVM_MEM_GUEST_MEMFD, KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY
from ..memslots.vm import Vm

QEMU_TRACE = "qemu-trace"
STRACE = "strace"


@dataclass(frozen=True, slots=True)
class MemoryRegionCall:
    """One recorded ``struct kvm_userspace_memory_region`` and the ioctl's result."""

    lineno: int
    slot: int  # the UAPI u32: as_id << 16 | id
    flags: int
    guest_phys_addr: int
    memory_size: int
    userspace_addr: int
    recorded_ret: int | None  # 0 or -errno as recorded (None if the line had no result)
    source: str  # QEMU_TRACE or STRACE

    @property
    def as_id(self) -> int:
        return self.slot >> 16


class TraceFormatError(ValueError):
    """No memslot ioctl was recognised in the text; the message is one user-facing line."""


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What our `Vm` answered to one recorded call."""

    call: MemoryRegionCall
    ret: int  # 0 or -errno from our Vm
    errno_name: str | None  # e.g. "EEXIST"
    reason: str | None  # KvmError.reason
    generation: int  # vm.generation(as_id) after the call (-1: no such address space)
    matches_recorded: bool | None  # None when the recording had no result


_NUM = r"-?(?:0[xX][0-9a-fA-F]+|\d+)"
_TRACE_EVENT_RE = re.compile(r"\bkvm_set_user_memory(?![A-Za-z0-9_])")
_TRACE_HASH_RE = re.compile(rf"\b(AddrSpace|Slot)#\s*({_NUM})")
_TRACE_KV_RE = re.compile(rf"\b([A-Za-z_][A-Za-z0-9_]*)\s*=\s*({_NUM})(?![\w.])")
_TRACE_KEYS = {
    "Slot": "slot",
    "slot": "slot",
    "AddrSpace": "as",
    "as": "as",
    "as_id": "as",
    "flags": "flags",
    "gpa": "gpa",
    "guest_phys_addr": "gpa",
    "size": "size",
    "memory_size": "size",
    "ua": "ua",
    "userspace_addr": "ua",
    "ret": "ret",
}
_STRACE_CALL_RE = re.compile(
    r"\bioctl\((?P<fd>[^,]*),\s*(?:0x[0-9a-fA-F]+\s*/\*\s*)?KVM_SET_USER_MEMORY_REGION2?\b"
    r"(?:\s*\*/)?,\s*\{(?P<body>[^{}]*)\}(?P<tail>.*)$"
)
_STRACE_RESUMED_RE = re.compile(r"<\.\.\. ioctl resumed>(?P<tail>.*)$")
_STRACE_RESULT_RE = re.compile(
    r"^\s*\)\s*=\s*(?P<ret>-?\d{1,20}(?!\d)|\?)(?:\s+(?P<err>E[A-Z0-9]+))?"
)
_STRACE_PID_RE = re.compile(r"^\s*(?:\[pid\s+(?P<pid1>\d{1,10})\]|(?P<pid2>\d{1,10})(?=\s))")
_STRACE_FIELDS = {
    "slot": "slot",
    "flags": "flags",
    "guest_phys_addr": "gpa",
    "memory_size": "size",
    "userspace_addr": "ua",
}
_FLAG_NAMES = {
    "KVM_MEM_LOG_DIRTY_PAGES": KVM_MEM_LOG_DIRTY_PAGES,
    "KVM_MEM_READONLY": KVM_MEM_READONLY,
    "KVM_MEM_GUEST_MEMFD": KVM_MEM_GUEST_MEMFD,
}
_UNFINISHED = "<unfinished ...>"
_REQUIRED = ("slot", "gpa", "size", "ua")


def _number(text: str) -> int | None:
    """A decimal or ``0x`` hexadecimal integer, possibly negative."""
    text = text.strip()
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("-")
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", digits):
        return sign * int(digits, 16)
    if digits.isascii() and digits.isdigit() and len(digits) <= 20:  # a u64 at most
        return sign * int(digits)
    return None


def _signed_ret(value: int) -> int:
    """``simpletrace.py`` prints the int ``ret`` as an unsigned 64-bit (or 32-bit) hex."""
    if value >= 1 << 63:
        return value - (1 << 64)
    if 1 << 31 <= value < 1 << 32:
        return value - (1 << 32)
    return value


def _make_call(
    lineno: int, fields: dict[str, int], ret: int | None, source: str
) -> MemoryRegionCall | None:
    """Build a call from the fields; None if one is missing or negative."""
    if any(k not in fields for k in _REQUIRED):
        return None
    values = [fields.get("as", 0), fields["slot"], fields.get("flags", 0)]
    values += [fields["gpa"], fields["size"], fields["ua"]]
    if any(v < 0 for v in values):
        return None
    as_id, slot, flags, gpa, size, ua = values
    if "as" in fields:
        slot = as_id << 16 | slot
    return MemoryRegionCall(lineno, slot, flags, gpa, size, ua, ret, source)


# --- QEMU trace event -------------------------------------------------------------------


def _parse_trace_line(lineno: int, line: str) -> MemoryRegionCall | None:
    """``trace_kvm_set_user_memory(as, slot, flags, gpa, size, ua, [fd, offset,] ret)``."""
    event = _TRACE_EVENT_RE.search(line)
    if event is None:
        return None
    args = line[event.end() :]
    fields: dict[str, int] = {}
    for key, value in _TRACE_HASH_RE.findall(args) + _TRACE_KV_RE.findall(args):
        name = _TRACE_KEYS.get(key)
        number = _number(value)
        if name is not None and number is not None and name not in fields:
            fields[name] = number
    ret = fields.pop("ret", None)
    return _make_call(lineno, fields, None if ret is None else _signed_ret(ret), QEMU_TRACE)


# --- strace -------------------------------------------------------------------------------


def _flags_value(text: str) -> int | None:
    """``0x2``, ``KVM_MEM_READONLY`` or ``KVM_MEM_LOG_DIRTY_PAGES|KVM_MEM_READONLY``."""
    total = 0
    for token in text.split("|"):
        token = token.strip()
        value = _FLAG_NAMES.get(token)
        if value is None:
            value = _number(token)
        if value is None or value < 0:
            return None
        total |= value
    return total


def _strace_fields(body: str) -> dict[str, int]:
    """The struct fields strace decoded, ``slot=0, flags=0, guest_phys_addr=...``.

    A field that does not parse (an unknown flag name) is -1, so `_make_call` drops it.
    """
    fields: dict[str, int] = {}
    for item in body.split(","):
        key, sep, raw = item.partition("=")
        name = _STRACE_FIELDS.get(key.strip())
        if not sep or name is None:
            continue
        value = _flags_value(raw) if name == "flags" else _number(raw)
        fields[name] = -1 if value is None else value
    return fields


def _strace_ret(tail: str) -> int | None:
    """``) = 0`` → 0, ``) = -1 EEXIST (File exists)`` → -17, ``) = ?`` → None."""
    m = _STRACE_RESULT_RE.match(tail)
    if m is None or m["ret"] == "?":
        return None
    ret = int(m["ret"])
    if ret == -1 and m["err"]:
        code = getattr(_errno, m["err"], None)
        return -code if isinstance(code, int) else None
    return ret


def _strace_pid(line: str) -> int | None:
    """The ``[pid N]`` (``-f``) or bare ``N`` (``-f -o``) prefix, if any."""
    m = _STRACE_PID_RE.match(line)
    if m is None:
        return None
    return int(m["pid1"] or m["pid2"])


class _StraceJoiner:
    """Pairs ``<unfinished ...>`` calls with their ``<... ioctl resumed>`` by pid.

    The call is emitted when it completes: KVM serialises memslot updates under
    ``kvm->slots_lock``, so completion order is the closer guess at the order applied.
    """

    def __init__(self) -> None:
        self.pending: dict[int | None, tuple[int, dict[str, int]]] = {}

    def feed(self, lineno: int, line: str) -> MemoryRegionCall | None:
        call = _STRACE_CALL_RE.search(line)
        if call is not None:
            fields = _strace_fields(call["body"])
            if _UNFINISHED in call["tail"]:
                self.pending[_strace_pid(line)] = (lineno, fields)
                return None
            return _make_call(lineno, fields, _strace_ret(call["tail"]), STRACE)
        resumed = _STRACE_RESUMED_RE.search(line)
        if resumed is None:
            return None
        started = self._take(_strace_pid(line))
        if started is None:
            return None
        return _make_call(started[0], started[1], _strace_ret(resumed["tail"]), STRACE)

    def _take(self, pid: int | None) -> tuple[int, dict[str, int]] | None:
        if pid is None and len(self.pending) == 1:
            pid = next(iter(self.pending))
        return self.pending.pop(pid, None)


# --- public API -------------------------------------------------------------------------


def parse_memory_region_calls(text: str) -> list[MemoryRegionCall]:
    """Every KVM_SET_USER_MEMORY_REGION call recorded in ``text``, in order.

    Raises `TraceFormatError` when no line is a recognised call.
    """
    calls: list[MemoryRegionCall] = []
    strace = _StraceJoiner()
    mentions = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        mentions += "KVM_SET_USER_MEMORY_REGION" in line or "kvm_set_user_memory" in line
        call = _parse_trace_line(lineno, line)
        if call is None:
            call = strace.feed(lineno, line)
        if call is not None:
            calls.append(call)
    if not calls and mentions:
        raise TraceFormatError(
            f"{mentions} line(s) name KVM_SET_USER_MEMORY_REGION or kvm_set_user_memory but"
            " none has the slot, gpa, size and ua fields (strace must decode the struct)"
        )
    if not calls:
        raise TraceFormatError(
            "no kvm_set_user_memory trace event or KVM_SET_USER_MEMORY_REGION strace line found"
        )
    return calls


def replay_one(vm: Vm, call: MemoryRegionCall) -> ReplayResult:
    """Issue one recorded ioctl to ``vm`` and compare the result with the recording."""
    ret, name, reason = 0, None, None
    try:
        vm.set_user_memory_region(
            call.slot, call.flags, call.guest_phys_addr, call.memory_size, call.userspace_addr
        )
    except KvmError as err:
        code = err.errno or 0
        ret, name, reason = -code, _errno.errorcode.get(code, str(code)), err.reason
    as_id = call.as_id
    generation = vm.generation(as_id) if as_id < vm.address_spaces else -1
    matches = None if call.recorded_ret is None else ret == call.recorded_ret
    return ReplayResult(call, ret, name, reason, generation, matches)


def replay_calls(vm: Vm, calls: Iterable[MemoryRegionCall]) -> list[ReplayResult]:
    """Replay the calls in order, as QEMU's ``kvm_set_phys_mem`` issued them."""
    return [replay_one(vm, call) for call in calls]
