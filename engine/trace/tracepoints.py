"""KVM tracepoints as data: each formats its fields as the kernel's TP_printk text and
parses that text back into the same fields (kvm-reference §6.3).

`TRACEPOINTS` maps a name to a `Tracepoint`, which holds one `Template` per *variant* of
its text.  Template language: literal text, ``{name:kind}`` for a value (`_KINDS`),
``{name?TRUE|FALSE}`` for a bool printed as one of two strings (either may be empty),
``{nul}`` for the sp format's trailing ``%c`` of 0 (prints nothing; parsed if present).

Variants (`VARIANTS`): ``current`` — the kernel today (mmutrace.h / trace.h, ≈6.x);
``pre-2019`` — before the Sept 2019 "single invalid mmu generation" patch (``sp gen %lx``,
``kvm-mmu-valid-gen %lx``; for ``kvm_page_fault`` the old ``address %lx error_code %x``);
``vcpu-rip-u32`` — ``kvm_page_fault`` as ``address 0x%lx error_code %x`` (seen in a patch;
release UNVERIFIED); ``libtraceevent`` — what ``trace-cmd report`` prints for the four
shadow-page events: libtraceevent's plugin_kvm.c replaces the printk with its own
(``new sp gfn 14b600 1 q0 direct wux !pae nxe wp root 0 sync``; no gen, no ``ad``; only
get_page shows ``created`` and the gfn), its fields named as it prints them: ``pae`` (role
bit 4: cr4_pae in old kernels, has_4_byte_gpte now), ``wp``, ``smep``, ``smap``, ``smm``;
``libtraceevent-word`` — that plugin on an other-endian trace (``WORD: %08x``, ``role``).
`Tracepoint.format` falls back to ``current`` for a variant a tracepoint lacks.
`Tracepoint.parse` tries every variant, ``current`` first, unless told one: ``sp gen 10``
is decimal 10 unless ``variant="pre-2019"``; a gen with hex letters only matches pre-2019.

Field names are the printk's labels (CONTRACT.md ``mmuscope replay``), except: sp
``access`` is ``role.access`` (0..7, printed via `ACCESS_STR`), ``nxe`` is ``role.efer_nx``
(``nxe``/``!nxe``), ``ad`` is *not* ``role.ad_disabled`` (``ad``/``!ad``), ``created`` is
``new``/``existing``; ``spte-gen`` is ``spte_gen``, ``as id`` is ``as_id``;
kvm_mmu_set_spte's unlabelled ``(rwxu)`` letters are the str field ``access_str`` (derived
from the spte when formatting without it, non-EPT layout assumed: P=bit 0, W=1, U=2,
NX=63); ``kvm_page_fault`` uses the engine's names ``vcpu_id, rip, address, error_code``
(``rip`` defaults to 0); ``kvm_mmio``'s first value is ``type`` (struct field; label
``mmio``); ``spurious``, ``fixed``, ``valid`` are comparisons printed with %d: bools here.
kvm_mmu_zap_all_fast's ``mmu_valid_gen``/``used_pages`` are this module's choice (labels
of its printk): the CONTRACT does not fix them.

Numbers: ``%x``/``%llx`` are hex in the text, ints in the fields; ``%#llx`` of 0 prints
``0x0`` as the kernel's vsnprintf does (glibc's ``0`` is accepted); ``%p`` prints the 16
hex digits of a hashed pointer (``0x…``, ``(nil)`` accepted); pferr flags
(``__print_flags(…, "|", …)``) print ``P|W|U|RSVD|F`` plus leftover bits as ``0x…``.
Values are printed as given (no truncation to the C field's width).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..events import FieldValue

CURRENT = "current"
PRE_2019 = "pre-2019"
VCPU_RIP_U32 = "vcpu-rip-u32"
LIBTRACEEVENT = "libtraceevent"
LIBTRACEEVENT_WORD = "libtraceevent-word"
VARIANTS = (CURRENT, PRE_2019, VCPU_RIP_U32, LIBTRACEEVENT, LIBTRACEEVENT_WORD)

ACCESS_STR = ("---", "--x", "w--", "w-x", "-u-", "-ux", "wu-", "wux")
PFERR_FLAGS = ((0x1, "P"), (0x2, "W"), (0x4, "U"), (0x8, "RSVD"), (0x10, "F"))


class TracepointError(ValueError):
    """Fields that cannot be formatted, or text that is not the tracepoint's; one line."""


# --- value kinds ------------------------------------------------------------------------


def format_pferr(value: int) -> str:
    """``__print_flags(pferr, "|", kvm_mmu_trace_pferr_flags)``: ``P|W|RSVD|0x20``."""
    names = []
    for mask, name in PFERR_FLAGS:
        if value & mask == mask:
            names.append(name)
            value &= ~mask
    if value:
        names.append(f"{value:#x}")
    return "|".join(names)


def parse_pferr(text: str) -> int:
    """The inverse of `format_pferr` (``""`` is 0)."""
    names = dict((name, mask) for mask, name in PFERR_FLAGS)
    value = 0
    for token in filter(None, text.split("|")):
        value |= names[token] if token in names else int(token, 16)
    return value


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


def _access(value: FieldValue) -> str:
    if _uint(value) >= len(ACCESS_STR):
        raise ValueError("needs role.access 0..7")
    return ACCESS_STR[_uint(value)]


def _pointer(text: str) -> int:
    return 0 if text.startswith("(") else int(text, 16)


_HEX = r"[0-9a-fA-F]+"
_PFERR = r"(?:RSVD|[PWUF]|0x[0-9a-fA-F]+)"
Kind = tuple[str, Callable[[FieldValue], str], Callable[[str], FieldValue]]
_KINDS: dict[str, Kind] = {
    "u": (r"\d+", lambda v: str(_uint(v)), int),  # %u
    "d": (r"-?\d+", lambda v: str(_sint(v)), int),  # %d
    "x": (_HEX, lambda v: f"{_uint(v):x}", lambda s: int(s, 16)),  # %x %llx
    "016x": (_HEX, lambda v: f"{_uint(v):016x}", lambda s: int(s, 16)),  # %016llx
    "08x": (_HEX, lambda v: f"{_uint(v):08x}", lambda s: int(s, 16)),  # %08x
    "#x": (r"(?:0[xX])?" + _HEX, lambda v: f"{_uint(v):#x}", lambda s: int(s, 16)),  # %#llx
    "p": (r"(?:0x)?[0-9a-fA-F]+|\(nil\)|\(null\)", lambda v: f"{_uint(v):016x}", _pointer),
    "01": (r"[01]", lambda v: str(int(_flag(v))), lambda s: s == "1"),  # %d of a comparison
    "s": (r"\S+", _text, str),  # %s of a symbol (kvm_mmio's type)
    "rwxu": (r"[r-][w-][x-][u-]?", _text, str),  # kvm_mmu_set_spte's (%s%s%s%s)
    "pferr": (rf"(?:{_PFERR}(?:\|{_PFERR})*)?", lambda v: format_pferr(_uint(v)), parse_pferr),
    "access": ("|".join(re.escape(a) for a in ACCESS_STR), _access, ACCESS_STR.index),
}


# --- templates --------------------------------------------------------------------------


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


class Template:
    """A TP_printk text with its values marked; formats and parses it."""

    __slots__ = ("_parts", "_regex", "slots", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        parts: list[str | Slot] = []
        pos = 0
        for m in _SLOT_RE.finditer(text):
            parts.append(text[pos : m.start()])
            parts.append(self._slot(m))
            pos = m.end()
        parts.append(text[pos:])
        self._parts = tuple(parts)
        self._regex: re.Pattern[str] | None = None  # compiled on the first parse
        self.slots = tuple(p for p in parts if isinstance(p, Slot) and p.kind != "nul")

    def _compiled(self) -> re.Pattern[str]:
        """The template as a regex, group g<i> for the slot at part i (formatting needs
        none: the app formats at start-up, and only parsing pays for compiling)."""
        if self._regex is None:
            self._regex = re.compile(
                "".join(
                    self._slot_regex(part, index) if isinstance(part, Slot) else re.escape(part)
                    for index, part in enumerate(self._parts)
                )
            )
        return self._regex

    @staticmethod
    def _slot(m: re.Match[str]) -> Slot:
        name = m["name"]
        if m["true"] is not None:
            return Slot(name, "bool", m["true"], m["false"])
        kind = m["kind"] or ("nul" if name == "nul" else "")
        if kind not in _KINDS and kind != "nul":
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
            body = _KINDS[slot.kind][0]
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
                    out.append(_KINDS[part.kind][1](fields[part.name]))
            except ValueError as err:
                raise ValueError(f"field {part.name}={value!r} {err}") from None
        return "".join(out)

    def match(self, text: str) -> dict[str, FieldValue] | None:
        m = self._compiled().fullmatch(text)
        if m is None:
            return None
        values: dict[str, FieldValue] = {}
        for group, raw in m.groupdict().items():
            slot = self._parts[int(group[1:])]
            assert isinstance(slot, Slot)
            if slot.kind == "bool":
                value: FieldValue = raw == slot.true
            else:
                value = _KINDS[slot.kind][2](raw)
            if values.setdefault(slot.name, value) != value:  # pferr printed twice
                return None
        return values


# --- tracepoints ------------------------------------------------------------------------


Deriver = Callable[[dict[str, FieldValue]], None]


@dataclass(frozen=True, slots=True)
class Tracepoint:
    """One kernel tracepoint (``system:name``) and the variants of its printk text."""

    name: str
    system: str
    templates: Mapping[str, Template]  # variant -> template, CURRENT first
    defaults: Mapping[str, FieldValue] = field(default_factory=dict)
    derive: Deriver | None = None  # fills derivable fields missing when formatting

    @property
    def fields(self) -> tuple[str, ...]:
        """The field names of the current text, in print order."""
        return tuple(dict.fromkeys(s.name for s in self.templates[CURRENT].slots))

    def slots(self, variant: str = CURRENT) -> tuple[Slot, ...]:
        return self._template(variant).slots

    def _template(self, variant: str) -> Template:
        if variant not in VARIANTS:
            raise TracepointError(f"unknown trace variant {variant!r}")
        return self.templates.get(variant, self.templates[CURRENT])

    def format(self, fields: Mapping[str, FieldValue], variant: str = CURRENT) -> str:
        """The printk text of these fields, exactly as the kernel (or the tool) prints it."""
        template = self._template(variant)
        values = {**self.defaults, **fields}
        if self.derive is not None:
            self.derive(values)
        missing = [s.name for s in template.slots if s.name not in values]
        if missing:
            raise TracepointError(f"{self.name}: missing field {missing[0]!r}")
        try:
            return template.format(values)
        except ValueError as err:
            raise TracepointError(f"{self.name}: {err}") from None

    def try_match(
        self, text: str, variant: str | None = None
    ) -> tuple[str, dict[str, FieldValue]] | None:
        """(variant, fields) of the first variant ``text`` is written in, or None."""
        text = text.rstrip("\r\n")
        for name in [variant] if variant is not None else list(self.templates):
            template = self._template(name)
            fields = template.match(text)
            if fields is None and not text.endswith(" "):
                # the printk ends with a space when the pferr flags are empty; editors trim it
                fields = template.match(text + " ")
            if fields is not None:
                return name, fields
        return None

    def parse(self, text: str, variant: str | None = None) -> dict[str, FieldValue]:
        """The fields printed in ``text`` (the inverse of `format`); `TracepointError` if
        ``text`` is none of this tracepoint's variants (or not ``variant``)."""
        found = self.try_match(text, variant)
        if found is None:
            raise TracepointError(f"{self.name}: cannot parse {text[:80]!r}")
        return found[1]


def _set_spte_letters(values: dict[str, FieldValue]) -> None:
    """``(rwxu)`` from the spte when not given: the non-EPT layout (an assumption)."""
    spte = values.get("spte")
    if "access_str" in values or not isinstance(spte, int):
        return
    r, w, u = ("r" if spte & 1 else "-"), ("w" if spte & 2 else "-"), ("u" if spte & 4 else "-")
    values["access_str"] = r + w + ("-" if spte >> 63 & 1 else "x") + u


_SP = (
    "sp gen {gen:GEN} gfn {gfn:x} l{level:u} {gpte_bytes:u}-byte q{quadrant:u}"
    "{direct? direct|} {access:access}{invalid? invalid|} {nxe?|!}nxe {ad?|!}ad"
    " root {root_count:u} {unsync?unsync|sync}{nul}"
)
_ROLE_PLUGIN = (
    "{level:u} q{quadrant:u}{direct? direct|} {access:access}{invalid? invalid|}"
    " {pae?|!}pae {nxe?|!}nxe {wp?|!}wp{smep? smep|}{smap? smap|}{smm? smm|}"
    " root {root_count:u} {unsync?unsync|sync}{nul}"
)
_ROLE_WORD = "WORD: {role:08x} root {root_count:u} {unsync?unsync|sync}{nul}"
_NEW = "{created?new|existing}"

# name -> {variant: template}; the comment is the kernel's TP_printk (kvm-reference §6.3).
_KVMMMU: dict[str, dict[str, str]] = {
    # "%s %s": KVM_MMU_PAGE_PRINTK() + new/existing
    "kvm_mmu_get_page": {
        CURRENT: f"{_SP.replace('GEN', 'u')} {_NEW}",
        PRE_2019: f"{_SP.replace('GEN', 'x')} {_NEW}",
        LIBTRACEEVENT: f"{_NEW} sp gfn {{gfn:x}} {_ROLE_PLUGIN}",
        LIBTRACEEVENT_WORD: f"{_NEW} sp gfn {{gfn:x}} {_ROLE_WORD}",
    },
    # "%s": KVM_MMU_PAGE_PRINTK(),
    #   "sp gen %u gfn %llx l%u %u-byte q%u%s %s%s %snxe %sad root %u %s%c" (gen %lx before 2019)
    **{
        name: {
            CURRENT: _SP.replace("GEN", "u"),
            PRE_2019: _SP.replace("GEN", "x"),
            LIBTRACEEVENT: _ROLE_PLUGIN,
            LIBTRACEEVENT_WORD: _ROLE_WORD,
        }
        for name in ("kvm_mmu_prepare_zap_page", "kvm_mmu_sync_page", "kvm_mmu_unsync_page")
    },
    # "as id %d gfn %llx level %d old_spte %llx new_spte %llx"
    "kvm_tdp_mmu_spte_changed": {
        CURRENT: "as id {as_id:d} gfn {gfn:x} level {level:d}"
        " old_spte {old_spte:x} new_spte {new_spte:x}"
    },
    # "sptep:%p gfn %llx access %x gen %x"
    "mark_mmio_spte": {CURRENT: "sptep:{sptep:p} gfn {gfn:x} access {access:x} gen {gen:x}"},
    # "gfn %llx spte %llx (%s%s%s%s) level %d at %llx"
    "kvm_mmu_set_spte": {
        CURRENT: "gfn {gfn:x} spte {spte:x} ({access_str:rwxu}) level {level:d} at {sptep:x}"
    },
    # "gfn %llx pfn %llx level %d"
    "kvm_mmu_spte_requested": {CURRENT: "gfn {gfn:x} pfn {pfn:x} level {level:d}"},
    # "vcpu %d gva %llx error_code %s sptep %p old %#llx new %llx spurious %d fixed %d"
    "fast_page_fault": {
        CURRENT: "vcpu {vcpu:d} gva {gva:x} error_code {error_code:pferr} sptep {sptep:p}"
        " old {old:#x} new {new:x} spurious {spurious:01} fixed {fixed:01}"
    },
    # "addr:%llx gfn %llx access %x"
    "handle_mmio_page_fault": {CURRENT: "addr:{addr:x} gfn {gfn:x} access {access:x}"},
    # "spte %llx kvm_gen %x spte-gen %x valid %d"
    "check_mmio_spte": {
        CURRENT: "spte {spte:x} kvm_gen {kvm_gen:x} spte-gen {spte_gen:x} valid {valid:01}"
    },
    # "kvm-mmu-valid-gen %u used_pages %x" (%lx before 2019)
    "kvm_mmu_zap_all_fast": {
        CURRENT: "kvm-mmu-valid-gen {mmu_valid_gen:u} used_pages {used_pages:x}",
        PRE_2019: "kvm-mmu-valid-gen {mmu_valid_gen:x} used_pages {used_pages:x}",
    },
    # "addr %llx pferr %x %s"
    "kvm_mmu_pagetable_walk": {CURRENT: "addr {addr:x} pferr {pferr:x} {pferr:pferr}"},
    # "pte %llx level %u"
    "kvm_mmu_paging_element": {CURRENT: "pte {pte:x} level {level:u}"},
    # "pferr %x %s"
    "kvm_mmu_walker_error": {CURRENT: "pferr {pferr:x} {pferr:pferr}"},
    # "gpa %llx"
    "kvm_mmu_set_accessed_bit": {CURRENT: "gpa {gpa:x}"},
    "kvm_mmu_set_dirty_bit": {CURRENT: "gpa {gpa:x}"},
    # "gfn %llx spte %llx level %d errno %d"
    "kvm_mmu_split_huge_page": {
        CURRENT: "gfn {gfn:x} spte {spte:x} level {level:d} errno {errno:d}"
    },
}
_KVM: dict[str, dict[str, str]] = {
    # "vcpu %u rip 0x%lx address 0x%016llx error_code 0x%llx" (arch/x86/kvm/trace.h)
    "kvm_page_fault": {
        CURRENT: "vcpu {vcpu_id:u} rip 0x{rip:x} address 0x{address:016x}"
        " error_code 0x{error_code:x}",
        VCPU_RIP_U32: "vcpu {vcpu_id:u} rip 0x{rip:x} address 0x{address:x}"
        " error_code {error_code:x}",
        PRE_2019: "address {address:x} error_code {error_code:x}",
    },
    # "mmio %s len %u gpa 0x%llx val 0x%llx" (include/trace/events/kvm.h)
    "kvm_mmio": {CURRENT: "mmio {type:s} len {len:u} gpa 0x{gpa:x} val 0x{val:x}"},
    # arch/x86/kvm/trace.h, from memory of the 5.x/6.x source (UNVERIFIED against a tree):
    # "vcpu %u reason %s%s%s rip 0x%lx info1 0x%016llx info2 0x%016llx intr_info 0x%08x
    # error_code 0x%08x"; the two extra %s (" FAILED_VMENTRY" ...) are almost always empty,
    # and lines that carry them still count, as text.  Before ~5.8: "reason %s rip 0x%lx
    # info %llx %llx".
    "kvm_exit": {
        CURRENT: "vcpu {vcpu_id:u} reason {exit_reason:s} rip 0x{guest_rip:x}"
        " info1 0x{info1:016x} info2 0x{info2:016x} intr_info 0x{intr_info:08x}"
        " error_code 0x{error_code:08x}",
        PRE_2019: "reason {exit_reason:s} rip 0x{guest_rip:x} info {info1:x} {info2:x}",
    },
    # "vcpu %u, rip 0x%lx" (6.x may append "[immediate exit]"); older kernels "vcpu %u"
    "kvm_entry": {
        CURRENT: "vcpu {vcpu_id:u}, rip 0x{rip:x}",
        PRE_2019: "vcpu {vcpu_id:u}",
    },
    # "vcpu %u need_flush_tlb %s" with "true"/"false" (record_steal_time)
    "kvm_pv_tlb_flush": {CURRENT: "vcpu {vcpu_id:u} need_flush_tlb {need_flush_tlb?true|false}"},
}
_DEFAULTS: dict[str, dict[str, FieldValue]] = {
    "kvm_page_fault": {"rip": 0},
    "kvm_entry": {"rip": 0},
    "kvm_exit": {"guest_rip": 0, "info1": 0, "info2": 0, "intr_info": 0, "error_code": 0},
}
_DERIVE: dict[str, Deriver] = {"kvm_mmu_set_spte": _set_spte_letters}

TRACEPOINTS: dict[str, Tracepoint] = {
    name: Tracepoint(
        name,
        system,
        {variant: Template(text) for variant, text in variants.items()},
        _DEFAULTS.get(name, {}),
        _DERIVE.get(name),
    )
    for system, table in (("kvmmmu", _KVMMMU), ("kvm", _KVM))
    for name, variants in table.items()
}
