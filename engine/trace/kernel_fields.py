"""``--jsonl``'s fields by the kernel's names: what each tracepoint's ``TP_STRUCT__entry``
holds (6.18's ``events/*/*/format``; tests/test_model_events.py checks every tracepoint
against this host's files), made from the fields its printk text gives back.

A template parses a text into the names the printk prints (docs/architecture.md §6.3):
the shadow-page events' ``gen`` and decoded role, ``kvm_mmu_set_spte``'s ``(rwxu)``
letters, ``kvm_mmio``'s type by its symbol.  `kernel_json` puts the kernel's fields
first, then the rest of the parsed fields as extras:

* ``kvm_mmu_get_page``, ``kvm_mmu_prepare_zap_page``, ``kvm_mmu_sync_page``,
  ``kvm_mmu_unsync_page`` (``KVM_MMU_PAGE_FIELDS``, mmutrace.h): ``mmu_valid_gen, gfn,
  role, root_count, unsync`` (and ``created``), then the decoded role ``level,
  gpte_bytes, quadrant, direct, access, invalid, nxe, ad``, then ``gen`` (the earlier
  name, for one release).  ``role`` is the u32 of `union kvm_mmu_page_role`
  (`engine.mmu.role`) made of the bits the text prints: ``cr0_wp``,
  ``smep_andnot_wp``, ``smap_andnot_wp``, ``guest_mode``, ``passthrough``, ``is_mirror``
  and ``smm`` are not in the text and read as 0 (a raw trace.dat has them all);
  libtraceevent's ``WORD: %08x`` text prints the whole word.  Texts of other eras, whose
  role layout differs, get no ``role``.
* ``kvm_mmu_set_spte``: ``r, x, u`` as ``TP_fast_assign`` sets them (``r``, ``x``:
  bool; ``u``: -1 when the printk prints no ``u`` letter, as with ``shadow_user_mask``
  0), then the letters as ``access_str``.
* ``fast_page_fault``: ``ret``, the ``RET_PF_*`` the printk compares
  (``spurious`` is ``ret == RET_PF_SPURIOUS``, ``fixed`` ``ret == RET_PF_FIXED``; else
  ``fast_page_fault()`` leaves ``RET_PF_INVALID``).
* ``kvm_mmio``: ``type`` the ``KVM_TRACE_MMIO_*`` number, its symbol as ``type_name``.
* ``kvm_emulate_insn``: ``len`` (the bytes ``__print_hex`` printed), ``flags`` the
  emulator mode's number, its symbol as ``flags_name``; ``insn`` stays the bytes as
  printed.
* ``kvm_exit``: ``exit_reason`` the u32 (`exit_reasons`: vmx.h's and svm.h's tables,
  ``FAILED_VMENTRY`` as bit 31), its symbol as ``exit_reason_name``; ``isa``,
  ``KVM_ISA_VMX`` (1) or ``KVM_ISA_SVM`` (2) by the table that names it (a reason
  printed as a number tells neither: no ``isa``).
* ``kvm_apic``: ``reg`` the register's offset (`KVM_TRACE_APIC`), its symbol as
  ``reg_name``; ``rw`` 1 for a write.
* ``kvm_userspace_exit``: ``reason`` the ``KVM_EXIT_*`` number and ``errno`` 0, or, for
  a KVM_RUN that failed (``restart``, ``error``), ``errno`` the negative errno and
  ``reason`` 0 (the text does not tell it); the printed name as ``reason_name``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..events import FieldValue

Fields = Mapping[str, FieldValue]
Record = Mapping[str, Any]  # a ring buffer record: ints, arrays as bytes

# `__print_symbolic(REC->type, ...)` of kvm_mmio (include/trace/events/kvm.h)
KVM_TRACE_MMIO = {"unsatisfied-read": 0, "read": 1, "write": 2}
# `__print_symbolic(REC->reg, kvm_trace_symbol_apic)` of kvm_apic (arch/x86/kvm/trace.h):
# the xAPIC registers' offsets (arch/x86/include/asm/apicdef.h)
KVM_TRACE_APIC = {
    "APIC_ID": 0x20, "APIC_LVR": 0x30, "APIC_TASKPRI": 0x80, "APIC_ARBPRI": 0x90,
    "APIC_PROCPRI": 0xA0, "APIC_EOI": 0xB0, "APIC_RRR": 0xC0, "APIC_LDR": 0xD0,
    "APIC_DFR": 0xE0, "APIC_SPIV": 0xF0, "APIC_ISR": 0x100, "APIC_TMR": 0x180,
    "APIC_IRR": 0x200, "APIC_ESR": 0x280, "APIC_ICR": 0x300, "APIC_ICR2": 0x310,
    "APIC_LVTT": 0x320, "APIC_LVTTHMR": 0x330, "APIC_LVTPC": 0x340, "APIC_LVT0": 0x350,
    "APIC_LVT1": 0x360, "APIC_LVTERR": 0x370, "APIC_TMICT": 0x380, "APIC_TMCCT": 0x390,
    "APIC_TDCR": 0x3E0, "APIC_SELF_IPI": 0x3F0, "APIC_EFEAT": 0x400, "APIC_ECTRL": 0x410,
}  # fmt: skip
# kvm_emulate_insn's `kvm_trace_symbol_emul_flags` (arch/x86/kvm/trace.h): X86EMUL_MODE_*
EMUL_FLAGS = {"real": 0, "vm16": 3, "prot16": 1, "prot32": 5, "prot64": 9}
SHADOW_PAGE_EVENTS: tuple[str, ...] = ("kvm_mmu_get_page", "kvm_mmu_prepare_zap_page")
SHADOW_PAGE_EVENTS += ("kvm_mmu_sync_page", "kvm_mmu_unsync_page")
_ROLE_PRINTED = ("level", "gpte_bytes", "quadrant", "direct", "access", "invalid", "nxe", "ad")


Kernel = tuple[dict[str, FieldValue], dict[str, FieldValue]]  # (kernel's, extras)


def _pick(fields: Fields, *names: str) -> dict[str, FieldValue]:
    return {name: fields[name] for name in names if name in fields}


def _shadow_page(fields: Fields) -> Kernel:
    out: dict[str, FieldValue] = {}
    if "gen" in fields:
        out["mmu_valid_gen"] = fields["gen"]
    out |= _pick(fields, "gfn")
    if "role" in fields:  # libtraceevent's WORD: the whole word
        out["role"] = fields["role"]
    elif all(name in fields for name in _ROLE_PRINTED):
        from ..mmu.role import KvmMmuPageRole

        try:
            role = KvmMmuPageRole(
                level=int(fields["level"]),
                has_4_byte_gpte=int(fields["gpte_bytes"] == 4),
                quadrant=int(fields["quadrant"]),
                direct=int(fields["direct"]),
                access=int(fields["access"]),
                invalid=int(fields["invalid"]),
                efer_nx=int(fields["nxe"]),
                cr0_wp=0,  # not printed
                ad_disabled=int(not fields["ad"]),
            )
        except ValueError:  # a value no role holds (a level past 15): no kernel printed it
            pass
        else:
            out["role"] = role.word
    return out | _pick(fields, "root_count", "unsync", "created"), {}


def _set_spte(fields: Fields) -> Kernel:
    letters = fields.get("access_str")
    if not isinstance(letters, str) or len(letters) < 3:
        return {}, {}
    u = -1 if len(letters) == 3 else int(letters[3] == "u")
    kernel = _pick(fields, "gfn", "spte", "sptep", "level")
    return kernel | {"r": letters[0] == "r", "x": letters[2] == "x", "u": u}, {}


def _fast_page_fault(fields: Fields) -> Kernel:
    from ..mmu.spte import RET_PF_FIXED, RET_PF_INVALID, RET_PF_SPURIOUS

    if "spurious" not in fields or "fixed" not in fields:
        return {}, {}
    ret = RET_PF_SPURIOUS if fields["spurious"] else RET_PF_FIXED if fields["fixed"] else None
    kernel = _pick(fields, "vcpu_id", "cr2_or_gpa", "error_code", "sptep", "old_spte")
    kernel |= _pick(fields, "new_spte")
    return kernel | {"ret": int(ret if ret is not None else RET_PF_INVALID)}, {}


def _mmio(fields: Fields) -> Kernel:
    kind = fields.get("type")
    if not isinstance(kind, str) or kind not in KVM_TRACE_MMIO:
        return {}, {}
    kernel = {"type": KVM_TRACE_MMIO[kind], **_pick(fields, "len", "gpa", "val")}
    return kernel, {"type_name": kind}


def _apic(fields: Fields) -> Kernel:
    reg = fields.get("reg")
    if not isinstance(reg, str) or reg not in KVM_TRACE_APIC:
        return {}, {}
    kernel: dict[str, FieldValue] = {"rw": int(bool(fields.get("rw"))), "reg": KVM_TRACE_APIC[reg]}
    return kernel | _pick(fields, "val"), {"reg_name": reg}


def _emulate_insn(fields: Fields) -> Kernel:
    mode, insn = fields.get("flags"), fields.get("insn")
    if not isinstance(mode, str) or mode not in EMUL_FLAGS or not isinstance(insn, str):
        return {}, {}
    kernel = _pick(fields, "rip", "csbase") | {"len": len(insn.split()), "insn": insn}
    return kernel | {"flags": EMUL_FLAGS[mode]} | _pick(fields, "failed"), {"flags_name": mode}


def _exit(fields: Fields) -> Kernel:
    from .exit_reasons import exit_reason_number

    reason = fields.get("exit_reason")
    if not isinstance(reason, str):
        return {}, {}
    try:
        number, isa = exit_reason_number(reason, bool(fields.get("failed_vmentry")))
    except ValueError:  # neither table's name nor a number: the text is not the kernel's
        return {}, {}
    kernel = {"exit_reason": number, **_pick(fields, "guest_rip")}
    if isa is not None:
        kernel["isa"] = isa
    return kernel, {"exit_reason_name": reason}


def _userspace_exit(fields: Fields) -> Kernel:
    reason, code = fields.get("reason"), fields.get("code")
    if not isinstance(reason, str) or not isinstance(code, int):
        return {}, {}
    if reason in ("restart", "error"):  # the run's exit reason is not printed
        return {"reason": 0, "errno": -code}, {"reason_name": reason}
    return {"reason": code, "errno": 0}, {"reason_name": reason}


#: tracepoint -> the kernel's fields its parsed fields give, and the extras
_KERNEL: dict[str, Callable[[Fields], Kernel]] = {
    **dict.fromkeys(SHADOW_PAGE_EVENTS, _shadow_page),
    "kvm_mmu_set_spte": _set_spte,
    "fast_page_fault": _fast_page_fault,
    "kvm_mmio": _mmio,
    "kvm_apic": _apic,
    "kvm_emulate_insn": _emulate_insn,
    "kvm_exit": _exit,
    "kvm_userspace_exit": _userspace_exit,
}
# -- the other way: the kernel's fields (a ring buffer's record) as the text parser names them


def _shadow_page_printed(kernel: Record) -> dict[str, FieldValue]:
    """KVM_MMU_PAGE_PRINTK()'s values (mmutrace.h, 6.18): the role word decoded."""
    from ..mmu.role import KvmMmuPageRole

    role = KvmMmuPageRole.from_word(int(kernel["role"]))
    out: dict[str, FieldValue] = {
        "gen": kernel["mmu_valid_gen"], "gfn": kernel["gfn"], "level": role.level,
        "gpte_bytes": 4 if role.has_4_byte_gpte else 8, "quadrant": role.quadrant,
        "direct": bool(role.direct), "access": role.access, "invalid": bool(role.invalid),
        "nxe": bool(role.efer_nx), "ad": not role.ad_disabled,
        "root_count": kernel["root_count"], "unsync": bool(kernel["unsync"]),
    }  # fmt: skip
    if "created" in kernel:
        out["created"] = bool(kernel["created"])
    return out


def _set_spte_printed(kernel: Record) -> dict[str, FieldValue]:
    """``(%s%s%s%s)``: r, the spte's writable bit (bit 1), x, and u (-1: no letter)."""
    spte, u = int(kernel["spte"]), int(kernel["u"])
    letters = ("r" if kernel["r"] else "-") + ("w" if spte & 2 else "-")
    letters += ("x" if kernel["x"] else "-") + ("" if u == -1 else "u" if u else "-")
    return {"gfn": kernel["gfn"], "spte": spte, "access_str": letters,
            "level": kernel["level"], "sptep": kernel["sptep"]}  # fmt: skip


_MMIO_NAMES = {number: name for name, number in KVM_TRACE_MMIO.items()}
_EMUL_NAMES = {number: name for name, number in EMUL_FLAGS.items()}


def _mmio_printed(kernel: Record) -> dict[str, FieldValue]:
    kind = int(kernel["type"])
    return {"type": _MMIO_NAMES.get(kind, f"0x{kind:x}"), "len": kernel["len"],
            "gpa": kernel["gpa"], "val": kernel["val"]}  # fmt: skip


def _emulate_insn_printed(kernel: Record) -> dict[str, FieldValue]:
    insn = kernel["insn"]
    assert isinstance(insn, bytes)
    mode = int(kernel["flags"])
    return {"csbase": kernel["csbase"], "rip": kernel["rip"],
            "insn": insn[: int(kernel["len"])].hex(" "),
            "flags": _EMUL_NAMES.get(mode, f"0x{mode:x}"),
            "failed": bool(kernel["failed"])}  # fmt: skip


def _match_mmio_printed(kernel: Record) -> dict[str, FieldValue]:
    return {"gva": kernel["gva"], "gpa": kernel["gpa"], "write": bool(kernel["write"]),
            "gpa_match": bool(kernel["gpa_match"])}  # fmt: skip


def _as_printed(kernel: Record) -> dict[str, FieldValue]:
    return dict(kernel)


#: tracepoint -> its parsed fields from the kernel's (events whose printk prints each
#: field as it is under its own name take `_as_printed`)
_PRINTED: dict[str, Callable[[Record], dict[str, FieldValue]]] = {
    **dict.fromkeys(SHADOW_PAGE_EVENTS, _shadow_page_printed),
    "kvm_mmu_set_spte": _set_spte_printed,
    "kvm_mmio": _mmio_printed,
    "kvm_emulate_insn": _emulate_insn_printed,
    "vcpu_match_mmio": _match_mmio_printed,
    **dict.fromkeys(
        (
            "kvm_mmu_pagetable_walk",
            "kvm_mmu_paging_element",
            "kvm_mmu_set_accessed_bit",
            "kvm_mmu_set_dirty_bit",
            "kvm_mmu_spte_requested",
            "kvm_mmu_zap_all_fast",
            "kvm_mmu_walker_error",
            "kvm_mmu_split_huge_page",
            "kvm_tdp_mmu_spte_changed",
        ),
        _as_printed,
    ),
}


def printed_fields(name: str, kernel: Record) -> dict[str, FieldValue] | None:
    """The fields the text parser gives for a record with these ``TP_STRUCT__entry``
    fields (the inverse of `kernel_json`), or None where this mapping is not written:
    the caller then prints the record's text and parses it."""
    convert = _PRINTED.get(name)
    return None if convert is None else convert(kernel)


def printed_converter(name: str) -> Callable[[Record], Fields] | None:
    """`printed_fields`' conversion for event `name`, None where it is not written."""
    return _PRINTED.get(name)


def printed_as_they_are(name: str) -> bool:
    """Whether event `name`'s printk prints each of its fields as it is, by its
    ``TP_STRUCT__entry`` name (a record's fields are the text parser's)."""
    return _PRINTED.get(name) is _as_printed


def json_as_they_are(name: str) -> bool:
    """Whether event `name`'s ``--jsonl`` fields are its record's own (`kernel_json` of
    the fields its printk prints as they are is those fields: nothing renamed, decoded
    or derived)."""
    return printed_as_they_are(name) and name not in _KERNEL


#: parsed names that a kernel's name replaces, kept last for one release
_EARLIER = {"gen": "mmu_valid_gen"}


def kernel_json(name: str, fields: Fields) -> dict[str, FieldValue]:
    """The event's fields as ``--jsonl`` prints them: the kernel's names first, then the
    decoded extras and the other parsed fields, then the earlier names."""
    convert = _KERNEL.get(name)
    if convert is None:
        return dict(fields)
    kernel, extras = convert(fields)
    if not kernel:
        return dict(fields)
    out = kernel | extras
    earlier = {}
    for key, value in fields.items():
        if _EARLIER.get(key) in kernel:
            earlier[key] = value
        elif key not in out:
            out[key] = value
    return out | earlier
