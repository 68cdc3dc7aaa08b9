"""The TP_printk template language: a tracepoint's printk text with its values marked, so
that one string both formats fields the way the kernel's ``trace_seq_printf`` does and
parses that text back (docs/kvm.md §6.3; `tracepoints` holds the texts).

Template language: literal text, ``{name:kind}`` for a value (`KINDS`), ``{name?TRUE|FALSE}``
for a bool printed as one of two strings (either may be empty), ``{nul}`` for the sp
format's trailing ``%c`` of 0 (prints nothing; parsed if present).  A name may appear twice
(``pferr %x %s``): both prints must agree when parsing.

Numbers: ``%x``/``%llx`` are hex in the text, ints in the fields; ``%#llx`` of 0 prints
``0x0`` as the kernel's vsnprintf does (glibc's ``0`` is accepted); ``%p`` prints the 16
hex digits of a hashed pointer and ``(null)`` for NULL (``0x…``, ``(nil)`` accepted).
Values are printed as given (no truncation to the C field's width).

Error-code flags are ``__print_flags(pferr, "|", kvm_mmu_trace_pferr_flags)``
(arch/x86/kvm/mmu/mmutrace.h): names in the table's order, then the leftover bits as one
``0x…``.  Two tables, by era: `PFERR_FLAGS` — today's ``P|W|U|PK|SS|SGX|RSVD|F`` (Sean
Christopherson, "KVM: x86/mmu: Pretty print PK, SS, and SGX flags in MMU tracepoints",
Sept 2025; in 6.18's format files, VERIFIED on the running 6.18 kernel), kind ``pferr``;
`PFERR_FLAGS_OLD` — ``P|W|U|RSVD|F`` of every kernel before it, kind ``pferr_old``.  A
template only matches the text its own table prints (``0x20`` is ``PK`` today, so a line
with ``P|0x20`` is an older kernel's).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..events import FieldValue

ACCESS_STR = ("---", "--x", "w--", "w-x", "-u-", "-ux", "wu-", "wux")
Flags = tuple[tuple[int, str], ...]
# PFERR_*_MASK bits (arch/x86/include/asm/kvm_host.h), in kvm_mmu_trace_pferr_flags order
PFERR_FLAGS: Flags = (
    (1 << 0, "P"),
    (1 << 1, "W"),
    (1 << 2, "U"),
    (1 << 5, "PK"),
    (1 << 6, "SS"),
    (1 << 15, "SGX"),
    (1 << 3, "RSVD"),
    (1 << 4, "F"),
)
PFERR_FLAGS_OLD: Flags = (
    (1 << 0, "P"),
    (1 << 1, "W"),
    (1 << 2, "U"),
    (1 << 3, "RSVD"),
    (1 << 4, "F"),
)


def format_pferr(value: int, flags: Flags = PFERR_FLAGS) -> str:
    """``__print_flags(pferr, "|", flags)``: ``P|W|RSVD|0x10000``."""
    names = []
    for mask, name in flags:
        if value & mask == mask:
            names.append(name)
            value &= ~mask
    if value:
        names.append(f"{value:#x}")
    return "|".join(names)


def parse_pferr(text: str, flags: Flags = PFERR_FLAGS) -> int:
    """The inverse of `format_pferr` (``""`` is 0); lenient about order and leftovers."""
    names = {name: mask for mask, name in flags}
    value = 0
    for token in filter(None, text.split("|")):
        value |= names[token] if token in names else int(token, 16)
    return value


def _exact_pferr(flags: Flags) -> Callable[[str], FieldValue]:
    """`parse_pferr`, refusing (ValueError) a text this flag table would not print."""

    def parse(text: str) -> FieldValue:
        value = parse_pferr(text, flags)
        if format_pferr(value, flags) != text:
            raise ValueError(f"{text!r} is not what this flag table prints")
        return value

    return parse


def _pferr_regex(flags: Flags) -> str:
    token = "|".join(
        [*(re.escape(n) for _, n in sorted(flags, key=lambda f: -len(f[1]))), "0x[0-9a-fA-F]+"]
    )
    return rf"(?:(?:{token})(?:\|(?:{token}))*)?"


def _uint(value: FieldValue) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("needs an int >= 0")
    return value


def _sint(value: FieldValue) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("needs an int")
    return value


def _flag(value: FieldValue) -> bool:
    if value not in (0, 1):  # True/False and 0/1
        raise ValueError("needs a bool")
    return bool(value)


def _text(value: FieldValue) -> str:
    if not isinstance(value, str):
        raise ValueError("needs a str")
    return value


def _hexbytes(value: FieldValue) -> str:
    text = _text(value)
    if text and not re.fullmatch(r"[0-9a-f]{2}(?: [0-9a-f]{2})*", text):
        raise ValueError("needs hex bytes like '88 18'")
    return text


def _access(value: FieldValue) -> str:
    if _uint(value) >= len(ACCESS_STR):
        raise ValueError("needs role.access 0..7")
    return ACCESS_STR[_uint(value)]


def _hashed(value: int) -> str:
    """``%p`` in the kernel's vsnprintf: NULL is ``(null)``, else 16 hex digits (the
    hashed id, 32 bits of it on 64-bit, zero-padded)."""
    return "(null)" if value == 0 else f"{value:016x}"


def _pointer(text: str) -> int:
    return 0 if text.startswith("(") else int(text, 16)


_HEX = r"[0-9a-fA-F]+"
Kind = tuple[str, Callable[[FieldValue], str], Callable[[str], FieldValue]]
KINDS: dict[str, Kind] = {
    "u": (r"\d+", lambda v: str(_uint(v)), int),  # %u
    "d": (r"-?\d+", lambda v: str(_sint(v)), int),  # %d
    "x": (_HEX, lambda v: f"{_uint(v):x}", lambda s: int(s, 16)),  # %x %llx
    "016x": (_HEX, lambda v: f"{_uint(v):016x}", lambda s: int(s, 16)),  # %016llx
    "08x": (_HEX, lambda v: f"{_uint(v):08x}", lambda s: int(s, 16)),  # %08x
    "#x": (r"(?:0[xX])?" + _HEX, lambda v: f"{_uint(v):#x}", lambda s: int(s, 16)),  # %#llx
    # %#016lx: "0x" and the digits padded to 16 characters in all (the MMU notifier's)
    "#016x": (r"(?:0[xX])?" + _HEX, lambda v: f"{_uint(v):#016x}", lambda s: int(s, 16)),
    "p": (r"(?:0x)?[0-9a-fA-F]+|\(nil\)|\(null\)", lambda v: _hashed(_uint(v)), _pointer),
    "01": (r"[01]", lambda v: str(int(_flag(v))), lambda s: s == "1"),  # %d of a comparison
    "s": (r"\S+", _text, str),  # %s of a symbol (kvm_mmio's type)
    # kvm_exit's __print_symbolic(exit_reason): VMX names, SVM names (some "XX excp"), or
    # the number in hex when the table lacks it
    "exit": (r"\S+(?: excp)?", _text, str),
    "rwxu": (r"[r-][w-][x-][u-]?", _text, str),  # kvm_mmu_set_spte's (%s%s%s%s)
    # __print_hex(insn, len): each byte %02x, a space between (trace_print_hex_seq)
    "hexbytes": (r"(?:[0-9a-f]{2}(?: [0-9a-f]{2})*)?", _hexbytes, str),
    "pferr": (
        _pferr_regex(PFERR_FLAGS),
        lambda v: format_pferr(_uint(v)),
        _exact_pferr(PFERR_FLAGS),
    ),
    "pferr_old": (
        _pferr_regex(PFERR_FLAGS_OLD),
        lambda v: format_pferr(_uint(v), PFERR_FLAGS_OLD),
        _exact_pferr(PFERR_FLAGS_OLD),
    ),
    "access": ("|".join(re.escape(a) for a in ACCESS_STR), _access, ACCESS_STR.index),
}


@dataclass(frozen=True, slots=True)
class Slot:
    """One value in a template: ``kind`` is a value kind, ``"bool"`` or ``"nul"``."""

    name: str
    kind: str
    true: str = ""
    false: str = ""


_SLOT_RE = re.compile(
    r"\{(?P<name>\w+)(?::(?P<kind>[^}]+)|\?(?P<true>[^|}]*)\|(?P<false>[^}]*))?\}"
)


#: the `%` conversion that prints a valid value of a kind as `KINDS` formats it (an int >= 0
#: for u and the hex kinds, an int for d, 0/1 or a bool for 01, a str for the text kinds)
PRINTF_KINDS = {
    "u": "%d", "d": "%d", "x": "%x", "016x": "%016x", "08x": "%08x", "#x": "%#x",
    "#016x": "%#016x", "01": "%d",
    "s": "%s", "exit": "%s", "rwxu": "%s", "hexbytes": "%s",
}  # fmt: skip
#: the kinds `printf` prints through a `%s` of the value's text, made as `KINDS` makes it
#: (for a valid value; a bool's text is its slot's own, `Template.printf`)
PRINTF_TEXTS: dict[str, Callable[[Any], str]] = {
    "p": _hashed,
    "pferr": format_pferr,
    "pferr_old": lambda v: format_pferr(v, PFERR_FLAGS_OLD),
    "access": ACCESS_STR.__getitem__,
}
#: `Template.printf`: the `%` format, the fields it takes in order, and per field the
#: function making its text (None: the value itself)
Printf = tuple[str, tuple[str, ...], tuple[Callable[[Any], str] | None, ...]]


class Template:
    """A TP_printk text with its values marked; formats and parses it.  The text is read
    into its parts on first use and compiled into a regex on the first parse: of the
    tracepoints' many templates, a run formats with a few and a parse matches a few."""

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def _parts(self) -> tuple[str | Slot, ...]:
        """The literal texts and the slots between them, in order."""
        parts: list[str | Slot] = []
        pos = 0
        for m in _SLOT_RE.finditer(self.text):
            parts.append(self.text[pos : m.start()])
            parts.append(self._slot(m))
            pos = m.end()
        parts.append(self.text[pos:])
        return tuple(parts)

    @cached_property
    def slots(self) -> tuple[Slot, ...]:
        """The values the text prints, in order (the trailing ``{nul}`` left out)."""
        return tuple(p for p in self._parts if isinstance(p, Slot) and p.kind != "nul")

    @cached_property
    def printf(self) -> Printf:
        """The text as one `%` format, the fields it takes in order, and per field what
        makes its text (None: `%` prints the value itself; else a `%s` of the text): the
        whole template compiled once.  `format` of valid fields is `printf[0] %
        tuple(v if f is None else f(v) for each field's value v)`, without the checks."""
        return self._printf(self._parts)

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """The template as a regex, group g<i> for the slot at part i: `fullmatch` it
        against a printk text; its groups are the slots of `group_slots`, in order (what
        `match` converts)."""
        regex = re.compile(
            "".join(
                self._slot_regex(part, index) if isinstance(part, Slot) else re.escape(part)
                for index, part in enumerate(self._parts)
            )
        )
        assert regex.groups == len(regex.groupindex), "a slot's regex captures"
        return regex

    @cached_property
    def group_slots(self) -> tuple[Slot, ...]:
        """The slot each group of `regex` captures, in group order (a name may appear
        twice, as ``pferr %x %s`` prints it twice)."""
        slots = [self._parts[int(group[1:])] for group in self.regex.groupindex]
        return tuple(slot for slot in slots if isinstance(slot, Slot))

    @cached_property
    def _groups(self) -> tuple[tuple[str, str | None, Callable[[str], FieldValue]], ...]:
        """Per group of `regex`, in order: the field's name, the bool's true text (None
        for any other kind) and the parser of the captured text."""
        groups = []
        for slot in self.group_slots:
            true = slot.true if slot.kind == "bool" else None
            groups.append((slot.name, true, str if true is not None else KINDS[slot.kind][2]))
        return tuple(groups)

    @staticmethod
    def _printf(parts: tuple[str | Slot, ...]) -> Printf:
        text, names = [], []
        texts: list[Callable[[Any], str] | None] = []
        for part in parts:
            if isinstance(part, str):
                text.append(part.replace("%", "%%"))
            elif part.kind == "nul":
                continue  # the trailing %c of 0: nothing
            else:
                names.append(part.name)
                if part.kind == "bool":
                    text.append("%s")
                    texts.append((part.false, part.true).__getitem__)
                elif part.kind in PRINTF_KINDS:
                    text.append(PRINTF_KINDS[part.kind])
                    texts.append(None)
                else:
                    text.append("%s")
                    texts.append(PRINTF_TEXTS[part.kind])
        return "".join(text), tuple(names), tuple(texts)

    @staticmethod
    def _slot(m: re.Match[str]) -> Slot:
        name = m["name"]
        if m["true"] is not None:
            return Slot(name, "bool", m["true"], m["false"])
        kind = m["kind"] or ("nul" if name == "nul" else "")
        if kind not in KINDS and kind != "nul":
            raise ValueError(f"template slot {m[0]!r}: unknown kind")
        return Slot(name, kind)

    @staticmethod
    def _slot_regex(slot: Slot, index: int) -> str:
        if slot.kind == "nul":
            return "\x00?"
        if slot.kind == "bool":
            choices = sorted((slot.true, slot.false), key=len, reverse=True)
            body = "|".join(re.escape(c) for c in choices)
        else:
            body = KINDS[slot.kind][0]
        return f"(?P<g{index}>{body})"

    def format(self, fields: Mapping[str, FieldValue]) -> str:
        out = []
        for part in self._parts:
            if isinstance(part, str):
                out.append(part)
                continue
            value = fields.get(part.name) if part.kind != "nul" else None
            try:
                if part.kind == "bool":
                    out.append(part.true if _flag(fields[part.name]) else part.false)
                elif part.kind != "nul":
                    out.append(KINDS[part.kind][1](fields[part.name]))
            except ValueError as err:
                raise ValueError(f"field {part.name}={value!r} {err}") from None
        return "".join(out)

    def match(self, text: str) -> dict[str, FieldValue] | None:
        """The fields of ``text``, or None when it is not this template's text."""
        m = self.regex.fullmatch(text)
        if m is None:
            return None
        values: dict[str, FieldValue] = {}
        for (name, true, parse), raw in zip(self._groups, m.groups(), strict=True):
            if true is not None:
                value: FieldValue = raw == true
            else:
                try:
                    value = parse(raw)
                except ValueError:  # flags this era's table would not print
                    return None
            if values.setdefault(name, value) != value:  # pferr printed twice
                return None
        return values
