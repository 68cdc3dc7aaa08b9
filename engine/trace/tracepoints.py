"""KVM tracepoints as data: each formats its fields as the kernel's TP_printk text and
parses that text back into the same fields (docs/kvm.md §6.3; the template language is
`printk`'s).

`TRACEPOINTS` maps a name to a `Tracepoint`, which holds one template per *variant* of its
text, each variant an era of the kernel or a tool (`VARIANTS`):

* ``current`` — the kernel today: every ``current`` text below is VERIFIED against the
  ``print fmt`` of the running 6.18 kernel's ``events/*/format`` (tests/test_kernel_formats.py
  re-checks it on every machine with tracefs).
* ``pre-6.18`` — 6.14 to 6.17: the pferr flags without ``PK|SS|SGX``
  (``P|W|U|RSVD|F``; Sean Christopherson, "KVM: x86/mmu: Pretty print PK, SS, and SGX flags
  in MMU tracepoints", Sept 2025, see `printk`); every other text is today's.
* ``pre-6.14`` — the 5.x/6.x texts before 6.14: those old pferr flags, and ``kvm_exit`` without
  ``requests 0x%016llx`` and ``kvm_entry`` as ``vcpu %u, rip 0x%lx``: both fields came with
  6.14 (Maxim Levitsky, "KVM: x86: Add information about pending requests to kvm_exit
  tracepoint" and "KVM: x86: Add interrupt injection information to the kvm_entry
  tracepoint", in the "KVM changes for Linux 6.14" pull; arch/x86/kvm/trace.h).
  ``kvm_page_fault`` is today's text from 6.1 on (below).
* ``pre-2019`` — the generation as a counter, ``sp gen %lx`` and ``kvm-mmu-valid-gen %lx``
  (``unsigned long``): kernels 3.11 to 5.0 (Xiao Guangrong's 2013 series, the fast-zap
  thread (kvm, 2013), until its revert in 5.1), and Sean Christopherson's Sept 2019
  restore until the same series' "Explicitly track only a single invalid mmu generation"
  made it a ``u8`` printed with %u (5.4).  The role text after ``gfn`` is today's (the
  role texts of 3.11-5.0 differ in places and are UNVERIFIED).
  For ``kvm_page_fault`` the old ``address %lx error_code %x``, for ``kvm_exit``
  ``reason %s rip 0x%lx info %llx %llx``, for ``kvm_entry`` ``vcpu %u``.
* ``2019-no-gen`` — kernels 5.1 to 5.3 (Feb to Sept 2019): fast invalidate and with it
  the generation were reverted (b59c4830ca18, "Revert 'KVM: MMU: show mmu_valid_gen in
  shadow page related tracepoints'"): ``sp gfn %llx l%u %u-byte q%u%s %s%s %snxe %sad root
  %u %s%c``, no ``gen``.  VERIFIED from the Sept 2019 patch that restored it.
* ``pre-3.11`` — before 2013 (before the fast-zap thread's series added the generation):
  ``sp gfn %llx %u%s q%u%s %s%s %snxe root %u %s%c``, the level bare, `` pae`` for
  ``role.cr4_pae``, no ``gen``, no ``ad``.  VERIFIED from a 3.x mmutrace.h.
* ``vcpu-rip-u32`` — ``kvm_page_fault`` as ``vcpu %u rip 0x%lx address 0x%lx error_code
  %x``: Wonhyuk Yang's "KVM: Add extra information in kvm_page_fault trace point" as
  committed, which Sean Christopherson's "KVM: x86: Use u64 for address and error code in
  page fault tracepoint" turned into today's text; both came with 6.1 (the first 6.1 KVM
  pull), so no release printed this text: only a kernel built between the two commits.
  Before 6.1: ``address %lx error_code %x`` (the ``pre-2019`` text).
* ``libtraceevent`` — what ``trace-cmd report`` prints for the four shadow-page events:
  libtraceevent's plugin_kvm.c replaces the printk with its own (``new sp gfn 14b600 1 q0
  direct wux !pae nxe wp root 0 sync``; no gen, no ``ad``; only get_page shows ``created``
  and the gfn), its fields named as it prints them: ``pae`` (role bit 4: cr4_pae in old
  kernels, has_4_byte_gpte now), ``wp``, ``smep``, ``smap``, ``smm``;
  ``libtraceevent-word`` — that plugin on an other-endian trace (``WORD: %08x``, ``role``).

`Tracepoint.format` falls back to ``current`` for a variant a tracepoint lacks.
`Tracepoint.parse` tries every variant, ``current`` first, unless told one: ``sp gen 10``
is decimal 10 unless ``variant="pre-2019"``; a gen with hex letters only matches pre-2019.

Field names are the kernel's TP_STRUCT__entry names where the printk prints a field as it
is (docs/architecture.md §6.3, ``mmuscope replay``): ``vcpu_id, cr2_or_gpa, old_spte,
new_spte`` in ``fast_page_fault``, ``guest_rip, fault_address`` in ``kvm_page_fault``,
``mmu_used_pages`` in ``kvm_mmu_zap_all_fast``.  The names of earlier releases
(`Tracepoint.aliases`: ``vcpu, gva, old, new``; ``rip, address``; ``used_pages``) are
accepted when formatting and added to ``replay --jsonl`` (`json_fields`) for one release.
Where the printk prints something computed, the name is the printk's label: sp ``gen`` is
``mmu_valid_gen``, ``access`` is ``role.access`` (0..7, printed via `ACCESS_STR`), ``nxe``
is ``role.efer_nx`` (``nxe``/``!nxe``), ``ad`` is *not* ``role.ad_disabled``
(``ad``/``!ad``), ``created`` is ``new``/``existing``; ``spte-gen`` is ``spte_gen``,
``as id`` is ``as_id``; kvm_mmu_set_spte's ``(rwxu)`` letters are the str field
``access_str`` (derived from the spte when formatting without it, non-EPT layout assumed:
P=bit 0, W=1, U=2, NX=63); ``kvm_mmio``'s first value is ``type`` (label ``mmio``);
``spurious``, ``fixed``, ``valid`` are comparisons printed with %d: bools here;
``kvm_exit``'s ``failed_vmentry`` is bit 31 of its exit reason (`` FAILED_VMENTRY``);
``kvm_emulate_insn``'s ``insn`` is its bytes as printed (``88 18``) and ``flags`` the
mode's name (``prot64``), as ``kvm_mmio``'s ``type`` is its symbol.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from ..events import Event, FieldValue
from .kernel_fields import kernel_json
from .printk import ACCESS_STR, Printf, Slot, Template, format_pferr, parse_pferr

CURRENT = "current"
PRE_6_18 = "pre-6.18"
PRE_6_14 = "pre-6.14"
PRE_2019 = "pre-2019"
NO_GEN_2019 = "2019-no-gen"
PRE_3_11 = "pre-3.11"
VCPU_RIP_U32 = "vcpu-rip-u32"
LIBTRACEEVENT = "libtraceevent"
LIBTRACEEVENT_WORD = "libtraceevent-word"
VARIANTS = (
    CURRENT,
    PRE_6_18,
    PRE_6_14,
    PRE_2019,
    NO_GEN_2019,
    PRE_3_11,
    VCPU_RIP_U32,
    LIBTRACEEVENT,
    LIBTRACEEVENT_WORD,
)

__all__ = ["ACCESS_STR", "TRACEPOINTS", "VARIANTS", "Tracepoint", "TracepointError"]
__all__ += ["event_json", "format_pferr", "json_fields", "parse_pferr"]


class TracepointError(ValueError):
    """Fields that cannot be formatted, or text that is not the tracepoint's; one line."""


Deriver = Callable[[dict[str, FieldValue]], None]
Values = Callable[[Mapping[str, FieldValue]], object]  # the values a `%` format prints


@dataclass(frozen=True, slots=True)
class Tracepoint:
    """One kernel tracepoint (``system:name``) and the variants of its printk text."""

    name: str
    system: str
    templates: Mapping[str, Template]  # variant -> template, CURRENT first
    defaults: Mapping[str, FieldValue] = field(default_factory=dict)
    derive: Deriver | None = None  # fills derivable fields missing when formatting
    aliases: Mapping[str, str] = field(default_factory=dict)  # earlier name -> kernel's

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
        """The printk text of these fields, exactly as the kernel (or the tool) prints it.
        Fields may use the earlier names (`aliases`)."""
        template = self._template(variant)
        values = {**self.defaults, **{self.aliases.get(k, k): v for k, v in fields.items()}}
        if self.derive is not None:
            self.derive(values)
        missing = [s.name for s in template.slots if s.name not in values]
        if missing:
            raise TracepointError(f"{self.name}: missing field {missing[0]!r}")
        try:
            return template.format(values)
        except ValueError as err:
            raise TracepointError(f"{self.name}: {err}") from None

    def printf(self) -> tuple[str, Values]:
        """The current text as one `%` format (`Template.printf`, compiled once per
        template) and what takes the values it prints from fields given by their kernel
        names (the missing ones with a default from `defaults`).  For fields that
        `format` accepts, `fmt % values(fields)` is `format(fields)`, without its checks;
        `values` raises KeyError for any other missing field (one `format` would derive,
        or find by an earlier name).  Every printer of a tracepoint's text goes through
        it: `simulate`'s lines, and the ring buffers' (`engine.kvm.rawtrace`)."""
        fmt, names, texts = self.compiled
        getter: Values = itemgetter(*names) if len(names) > 1 else _one(names)
        if any(texts):
            getter = _texts(getter, texts)
        defaults = self.defaults
        if not defaults:
            return fmt, getter
        return fmt, _defaulted(getter, defaults)

    @property
    def compiled(self) -> Printf:
        """The current text as `Template.printf` compiles it: the `%` format, the
        fields it prints in order, and what makes each one's text (None: itself)."""
        return self.templates[CURRENT].printf

    def try_match(
        self, text: str, variant: str | None = None
    ) -> tuple[str, dict[str, FieldValue]] | None:
        """(variant, fields) of the first variant ``text`` is written in, or None."""
        text = text.rstrip("\r\n")
        if variant is not None:
            choices: Iterable[tuple[str, Template]] = [(variant, self._template(variant))]
        else:
            choices = self.templates.items()
        for name, template in choices:
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


def _one(names: tuple[str, ...]) -> Values:
    """`itemgetter` of no name or one, as a tuple (itemgetter of one gives the value)."""
    if not names:
        return lambda fields: ()
    (name,) = names
    return lambda fields: (fields[name],)


def _texts(getter: Values, texts: tuple[Callable[[Any], str] | None, ...]) -> Values:
    """`getter`'s values, each made its text where `texts` has a function for it (the
    others, most of them, as they are)."""
    made = [(i, text) for i, text in enumerate(texts) if text is not None]

    def values(fields: Mapping[str, FieldValue]) -> tuple[object, ...]:
        got: Any = getter(fields)
        got = list(got)
        for i, text in made:
            got[i] = text(got[i])
        return tuple(got)

    return values


def _defaulted(getter: Values, defaults: Mapping[str, FieldValue]) -> Values:
    """`getter`, the fields missing from those given taken from `defaults` (merged only
    when one is missing)."""

    def values(fields: Mapping[str, FieldValue]) -> object:
        try:
            return getter(fields)
        except KeyError:
            return getter({**defaults, **fields})

    return values


def json_fields(name: str, fields: Mapping[str, FieldValue]) -> dict[str, FieldValue]:
    """``replay --jsonl``'s fields: the kernel's names (`kernel_fields.kernel_json`: the
    ``TP_STRUCT__entry`` fields the printk's labels stand for, then what it decodes),
    then each earlier name of a field present (docs/architecture.md §6.3: the earlier
    names stay for one release)."""
    out = kernel_json(name, fields)
    tracepoint = TRACEPOINTS.get(name)
    if tracepoint is not None:
        for old, new in tracepoint.aliases.items():
            if new in fields and old not in fields:
                out[old] = fields[new]
    return out


def event_json(event: Event) -> dict[str, object]:
    """One ``--jsonl`` object (docs/architecture.md §6.3): the kernel's field names, then
    the earlier names of renamed fields (``fast_page_fault``'s ``vcpu, gva, old, new``,
    ...), kept for one release."""
    obj = event.to_json()
    obj["fields"] = json_fields(event.name, event.fields)
    return obj


def _set_spte_letters(values: dict[str, FieldValue]) -> None:
    """``(rwxu)`` from the spte when not given: the non-EPT layout (an assumption)."""
    spte = values.get("spte")
    if "access_str" in values or not isinstance(spte, int):
        return
    r, w, u = ("r" if spte & 1 else "-"), ("w" if spte & 2 else "-"), ("u" if spte & 4 else "-")
    values["access_str"] = r + w + ("-" if spte >> 63 & 1 else "x") + u


_ROLE = (
    "l{level:u} {gpte_bytes:u}-byte q{quadrant:u}{direct? direct|} {access:access}"
    "{invalid? invalid|} {nxe?|!}nxe {ad?|!}ad root {root_count:u} {unsync?unsync|sync}{nul}"
)
_SP = f"sp gen {{gen:GEN}} gfn {{gfn:x}} {_ROLE}"
_SP_NO_GEN = f"sp gfn {{gfn:x}} {_ROLE}"
_SP_3_10 = (
    "sp gfn {gfn:x} {level:u}{pae? pae|} q{quadrant:u}{direct? direct|} {access:access}"
    "{invalid? invalid|} {nxe?|!}nxe root {root_count:u} {unsync?unsync|sync}{nul}"
)
_ROLE_PLUGIN = (
    "{level:u} q{quadrant:u}{direct? direct|} {access:access}{invalid? invalid|}"
    " {pae?|!}pae {nxe?|!}nxe {wp?|!}wp{smep? smep|}{smap? smap|}{smm? smm|}"
    " root {root_count:u} {unsync?unsync|sync}{nul}"
)
_ROLE_WORD = "WORD: {role:08x} root {root_count:u} {unsync?unsync|sync}{nul}"
_NEW = "{created?new|existing}"
_FAST_PF = (
    "vcpu {vcpu_id:d} gva {cr2_or_gpa:x} error_code {error_code:PFERR} sptep {sptep:p}"
    " old {old_spte:#x} new {new_spte:x} spurious {spurious:01} fixed {fixed:01}"
)
_EXIT = (
    "vcpu {vcpu_id:u} reason {exit_reason:exit}{failed_vmentry? |}"
    "{failed_vmentry?FAILED_VMENTRY|} rip 0x{guest_rip:x} info1 0x{info1:016x}"
    " info2 0x{info2:016x} intr_info 0x{intr_info:08x} error_code 0x{error_code:08x}"
)


_ERA_KEYS = {
    "pre_6_18": PRE_6_18,
    "pre_6_14": PRE_6_14,
    "pre_2019": PRE_2019,
    "no_gen_2019": NO_GEN_2019,
    "pre_3_11": PRE_3_11,
    "vcpu_rip_u32": VCPU_RIP_U32,
    "libtraceevent": LIBTRACEEVENT,
    "libtraceevent_word": LIBTRACEEVENT_WORD,
}


def _eras(current: str, **older: str) -> dict[str, str]:
    """{variant: text}, current first, then the older texts in `VARIANTS` order."""
    texts = {_ERA_KEYS[key]: text for key, text in older.items()}
    return {CURRENT: current, **{v: texts[v] for v in VARIANTS if v in texts}}


# name -> {variant: template}; the comment is the kernel's TP_printk (6.18's print fmt).
_KVMMMU: dict[str, dict[str, str]] = {
    # "%s %s": KVM_MMU_PAGE_PRINTK() + new/existing
    "kvm_mmu_get_page": _eras(
        f"{_SP.replace('GEN', 'u')} {_NEW}",
        pre_2019=f"{_SP.replace('GEN', 'x')} {_NEW}",
        no_gen_2019=f"{_SP_NO_GEN} {_NEW}",
        pre_3_11=f"{_SP_3_10} {_NEW}",
        libtraceevent=f"{_NEW} sp gfn {{gfn:x}} {_ROLE_PLUGIN}",
        libtraceevent_word=f"{_NEW} sp gfn {{gfn:x}} {_ROLE_WORD}",
    ),
    # "%s": KVM_MMU_PAGE_PRINTK(),
    #   "sp gen %u gfn %llx l%u %u-byte q%u%s %s%s %snxe %sad root %u %s%c"
    **{
        name: _eras(
            _SP.replace("GEN", "u"),
            pre_2019=_SP.replace("GEN", "x"),
            no_gen_2019=_SP_NO_GEN,
            pre_3_11=_SP_3_10,
            libtraceevent=_ROLE_PLUGIN,
            libtraceevent_word=_ROLE_WORD,
        )
        for name in ("kvm_mmu_prepare_zap_page", "kvm_mmu_sync_page", "kvm_mmu_unsync_page")
    },
    # "as id %d gfn %llx level %d old_spte %llx new_spte %llx"
    "kvm_tdp_mmu_spte_changed": _eras(
        "as id {as_id:d} gfn {gfn:x} level {level:d} old_spte {old_spte:x} new_spte {new_spte:x}"
    ),
    # "sptep:%p gfn %llx access %x gen %x"
    "mark_mmio_spte": _eras("sptep:{sptep:p} gfn {gfn:x} access {access:x} gen {gen:x}"),
    # "gfn %llx spte %llx (%s%s%s%s) level %d at %llx"
    "kvm_mmu_set_spte": _eras(
        "gfn {gfn:x} spte {spte:x} ({access_str:rwxu}) level {level:d} at {sptep:x}"
    ),
    # "gfn %llx pfn %llx level %d"
    "kvm_mmu_spte_requested": _eras("gfn {gfn:x} pfn {pfn:x} level {level:d}"),
    # "vcpu %d gva %llx error_code %s sptep %p old %#llx new %llx spurious %d fixed %d"
    "fast_page_fault": _eras(
        _FAST_PF.replace("PFERR", "pferr"),
        pre_6_18=_FAST_PF.replace("PFERR", "pferr_old"),
        pre_6_14=_FAST_PF.replace("PFERR", "pferr_old"),
    ),
    # "addr:%llx gfn %llx access %x"
    "handle_mmio_page_fault": _eras("addr:{addr:x} gfn {gfn:x} access {access:x}"),
    # "spte %llx kvm_gen %x spte-gen %x valid %d"
    "check_mmio_spte": _eras(
        "spte {spte:x} kvm_gen {kvm_gen:x} spte-gen {spte_gen:x} valid {valid:01}"
    ),
    # "kvm-mmu-valid-gen %u used_pages %x" (%lx before Sept 2019)
    "kvm_mmu_zap_all_fast": _eras(
        "kvm-mmu-valid-gen {mmu_valid_gen:u} used_pages {mmu_used_pages:x}",
        pre_2019="kvm-mmu-valid-gen {mmu_valid_gen:x} used_pages {mmu_used_pages:x}",
    ),
    # "addr %llx pferr %x %s"
    "kvm_mmu_pagetable_walk": _eras(
        "addr {addr:x} pferr {pferr:x} {pferr:pferr}",
        pre_6_18="addr {addr:x} pferr {pferr:x} {pferr:pferr_old}",
        pre_6_14="addr {addr:x} pferr {pferr:x} {pferr:pferr_old}",
    ),
    # "pte %llx level %u"
    "kvm_mmu_paging_element": _eras("pte {pte:x} level {level:u}"),
    # "pferr %x %s"
    "kvm_mmu_walker_error": _eras(
        "pferr {pferr:x} {pferr:pferr}",
        pre_6_18="pferr {pferr:x} {pferr:pferr_old}",
        pre_6_14="pferr {pferr:x} {pferr:pferr_old}",
    ),
    # "gpa %llx"
    "kvm_mmu_set_accessed_bit": _eras("gpa {gpa:x}"),
    "kvm_mmu_set_dirty_bit": _eras("gpa {gpa:x}"),
    # "gfn %llx spte %llx level %d errno %d"
    "kvm_mmu_split_huge_page": _eras("gfn {gfn:x} spte {spte:x} level {level:d} errno {errno:d}"),
}
_KVM: dict[str, dict[str, str]] = {
    # "vcpu %u rip 0x%lx address 0x%016llx error_code 0x%llx" (arch/x86/kvm/trace.h)
    "kvm_page_fault": _eras(
        "vcpu {vcpu_id:u} rip 0x{guest_rip:x} address 0x{fault_address:016x}"
        " error_code 0x{error_code:x}",
        pre_2019="address {fault_address:x} error_code {error_code:x}",
        vcpu_rip_u32="vcpu {vcpu_id:u} rip 0x{guest_rip:x} address 0x{fault_address:x}"
        " error_code {error_code:x}",
    ),
    # "mmio %s len %u gpa 0x%llx val 0x%llx" (include/trace/events/kvm.h)
    "kvm_mmio": _eras("mmio {type:s} len {len:u} gpa 0x{gpa:x} val 0x{val:x}"),
    # "vcpu %u reason %s%s%s rip 0x%lx info1 0x%016llx info2 0x%016llx intr_info 0x%08x
    # error_code 0x%08x requests 0x%016llx"; the second and third %s are " " and
    # "FAILED_VMENTRY" when bit 31 of a VMX exit reason is set
    "kvm_exit": _eras(
        f"{_EXIT} requests 0x{{requests:016x}}",
        pre_6_14=_EXIT,
        pre_2019="reason {exit_reason:exit} rip 0x{guest_rip:x} info {info1:x} {info2:x}",
    ),
    # "vcpu %u, rip 0x%lx intr_info 0x%08x error_code 0x%08x%s", the %s "[immediate exit]"
    "kvm_entry": _eras(
        "vcpu {vcpu_id:u}, rip 0x{rip:x} intr_info 0x{intr_info:08x}"
        " error_code 0x{error_code:08x}{immediate_exit?[immediate exit]|}",
        pre_6_14="vcpu {vcpu_id:u}, rip 0x{rip:x}",
        pre_2019="vcpu {vcpu_id:u}",
    ),
    # "reason %s (%d)": the exit reason's KVM_EXIT_* name and number, or "restart"/"error"
    # and -errno when KVM_RUN failed (kvm_vcpu_ioctl(), include/trace/events/kvm.h)
    "kvm_userspace_exit": _eras("reason {reason:s} ({code:d})"),
    # "apic_%s %s = 0x%llx": "write"/"read", the register's APIC_* name
    # (`kvm_trace_symbol_apic`), the value (kvm_lapic_reg_write(), kvm_lapic_reg_read())
    "kvm_apic": _eras("apic_{rw?write|read} {reg:s} = 0x{val:x}"),
    # "apicid %x vector %d": the vector apic_set_eoi() found in service, -1 for none
    "kvm_eoi": _eras("apicid {apicid:x} vector {vector:d}"),
    # "fast mmio at gpa 0x%llx" (handle_ept_misconfig(), arch/x86/kvm/trace.h)
    "kvm_fast_mmio": _eras("fast mmio at gpa 0x{gpa:x}"),
    # "%x:%llx:%s (%s)%s": csbase, rip, __print_hex(insn, len), the mode's name, " failed"
    "kvm_emulate_insn": _eras("{csbase:x}:{rip:x}:{insn:hexbytes} ({flags:s}){failed? failed|}"),
    # "gva %#lx gpa %#llx %s %s": Write/Read, GPA/GVA (the MMIO info cache matched on which)
    "vcpu_match_mmio": _eras("gva {gva:#x} gpa {gpa:#x} {write?Write|Read} {gpa_match?GPA|GVA}"),
    # "vcpu %u need_flush_tlb %s" with "true"/"false" (record_steal_time)
    "kvm_pv_tlb_flush": _eras("vcpu {vcpu_id:u} need_flush_tlb {need_flush_tlb?true|false}"),
    # "mmu notifier unmap range: %#016lx -- %#016lx" (kvm_mmu_notifier_invalidate_range_start)
    "kvm_unmap_hva_range": _eras("mmu notifier unmap range: {start:#016x} -- {end:#016x}"),
    # "mmu notifier age hva: %#016lx -- %#016lx" (clear_young, clear_flush_young)
    "kvm_age_hva": _eras("mmu notifier age hva: {start:#016x} -- {end:#016x}"),
    # "mmu notifier test age hva: %#016lx" (test_young)
    "kvm_test_age_hva": _eras("mmu notifier test age hva: {hva:#016x}"),
    # "vcpu %u: %s SMM, smbase 0x%llx", "entering"/"leaving" (enter_smm, emulator RSM)
    "kvm_smm_transition": _eras(
        "vcpu {vcpu_id:u}: {entering?entering|leaving} SMM, smbase 0x{smbase:x}"
    ),
    # "ring %d: dirty 0x%x reset 0x%x slot %u offset 0x%llx (used %u)" (dirty_index -
    # reset_index: `used`, derived)
    "kvm_dirty_ring_push": _eras(
        "ring {index:d}: dirty 0x{dirty_index:x} reset 0x{reset_index:x} slot {slot:u}"
        " offset 0x{offset:x} (used {used:u})"
    ),
    # "ring %d: dirty 0x%x reset 0x%x (used %u)"
    "kvm_dirty_ring_reset": _eras(
        "ring {index:d}: dirty 0x{dirty_index:x} reset 0x{reset_index:x} (used {used:u})"
    ),
    # "vcpu %d"
    "kvm_dirty_ring_exit": _eras("vcpu {vcpu_id:d}"),
}
_DEFAULTS: dict[str, dict[str, FieldValue]] = {
    "kvm_page_fault": {"guest_rip": 0},
    "kvm_entry": {"rip": 0, "intr_info": 0, "error_code": 0, "immediate_exit": False},
    "kvm_exit": {
        "guest_rip": 0,
        "failed_vmentry": False,
        "info1": 0,
        "info2": 0,
        "intr_info": 0,
        "error_code": 0,
        "requests": 0,
    },
}


def _ring_used(fields: dict[str, FieldValue]) -> None:
    """The dirty ring events' `used`: the printk's dirty_index - reset_index."""
    fields.setdefault("used", int(fields["dirty_index"]) - int(fields["reset_index"]))


_DERIVE: dict[str, Deriver] = {
    "kvm_mmu_set_spte": _set_spte_letters,
    "kvm_dirty_ring_push": _ring_used,
    "kvm_dirty_ring_reset": _ring_used,
}
_ALIASES: dict[str, dict[str, str]] = {
    "fast_page_fault": {
        "vcpu": "vcpu_id",
        "gva": "cr2_or_gpa",
        "old": "old_spte",
        "new": "new_spte",
    },
    "kvm_page_fault": {"rip": "guest_rip", "address": "fault_address"},
    "kvm_mmu_zap_all_fast": {"used_pages": "mmu_used_pages"},
}

TRACEPOINTS: dict[str, Tracepoint] = {
    name: Tracepoint(
        name,
        system,
        {variant: Template(text) for variant, text in variants.items()},
        _DEFAULTS.get(name, {}),
        _DERIVE.get(name),
        _ALIASES.get(name, {}),
    )
    for system, table in (("kvmmmu", _KVMMMU), ("kvm", _KVM))
    for name, variants in table.items()
}
