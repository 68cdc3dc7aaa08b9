"""The VM exits of a guest whose MMU maps guest-physical addresses, as a 6.18 VMX host
with EPT takes them (arch/x86/kvm/vmx/vmx.c, vmx/common.h, x86.c; docs/kvm.md §13), and
NPT's #NPF (svm.c) beside them.

Around each exit (`vcpu_enter_guest()`, x86.c):
- `vmx_vcpu_run()` traces `kvm_exit` after the VM exit, with `vmx_get_exit_info()`'s
  values: info1 the exit qualification, info2 the IDT-vectoring info, intr_info and
  error_code the VM-exit interruption information (all 0 for an EPT exit, which no event
  delivery caused); `requests` the vCPU's pending requests (none here).  Under NPT
  `svm_get_exit_info()`: reason ``npf``, info1 the #NPF error code, info2 the gpa.
- `vmx_handle_exit()` runs the reason's handler:
  - EXIT_REASON_EPT_VIOLATION, `handle_ept_violation()`: `trace_kvm_page_fault(vcpu,
    gpa, exit_qualification)`, then `__vmx_handle_ept_violation()` (vmx/common.h) turns
    the qualification into the PFERR_* error code of `kvm_mmu_page_fault()`
    (`ept_violation_error_code`);
  - EXIT_REASON_EPT_MISCONFIG, `handle_ept_misconfig()` (an MMIO spte, bits W without
    R): no `kvm_page_fault`.  First `kvm_io_bus_write(vcpu, KVM_FAST_MMIO_BUS, gpa, 0,
    NULL)`: an ioeventfd there takes the write (`trace_kvm_fast_mmio`) and the instruction
    is skipped (`kvm_skip_emulated_instruction()`), no emulation, no exit to userspace;
    else `kvm_mmu_page_fault(vcpu, gpa, PFERR_RSVD_MASK, NULL, 0)`.
- the next VM entry traces `kvm_entry` (`trace_kvm_entry(vcpu, force_immediate_exit)`),
  rip the instruction after the one KVM emulated or skipped.
"""

from __future__ import annotations

from functools import cache

from ..spte import VMX_EPT_RWX_MASK, SpteConfig, is_mmio_spte, is_shadow_present_pte

# PFERR_*_MASK (arch/x86/include/asm/kvm_host.h)
PFERR_PRESENT_MASK = 1 << 0
PFERR_WRITE_MASK = 1 << 1
PFERR_USER_MASK = 1 << 2
PFERR_RSVD_MASK = 1 << 3
PFERR_FETCH_MASK = 1 << 4
PFERR_GUEST_FINAL_MASK = 1 << 32  # EPT: the guest linear address was translated
PFERR_GUEST_PAGE_MASK = 1 << 33  # EPT: the access was the guest's own page-table walk

# The EPT violation exit qualification (arch/x86/include/asm/vmx.h): the access, the RWX
# the entries grant (EPT_VIOLATION_PROT_MASK), a guest linear address that was valid and
# whose translation was done (a data access of the guest, not its page-table walk).
EPT_VIOLATION_ACC_READ, EPT_VIOLATION_ACC_WRITE, EPT_VIOLATION_ACC_INSTR = 1, 1 << 1, 1 << 2
EPT_VIOLATION_RWX_SHIFT = 3
EPT_VIOLATION_PROT_MASK = VMX_EPT_RWX_MASK << EPT_VIOLATION_RWX_SHIFT
EPT_VIOLATION_GVA_IS_VALID, EPT_VIOLATION_GVA_TRANSLATED = 1 << 7, 1 << 8

# The basic exit reasons (arch/x86/include/uapi/asm/vmx.h) as kvm_exit prints them, and
# SVM's #NPF (SVM_EXIT_NPF)
EPT_VIOLATION, EPT_MISCONFIG, APIC_ACCESS = "EPT_VIOLATION", "EPT_MISCONFIG", "APIC_ACCESS"
NPF = "npf"


def ept_exit_qualification(spte: int, write: bool, fetch: bool = False) -> int:
    """The EPT violation's exit qualification for a guest data access (or fetch) that
    exited on `spte`: the access (ACC_READ, ACC_WRITE or ACC_INSTR), the R/W/X the
    present entry grants, GVA_IS_VALID | GVA_TRANSLATED (SDM 28.3.3.2)."""
    qual = EPT_VIOLATION_ACC_WRITE if write else EPT_VIOLATION_ACC_READ
    qual = EPT_VIOLATION_ACC_INSTR if fetch else qual
    if is_shadow_present_pte(spte):
        qual |= (spte & VMX_EPT_RWX_MASK) << EPT_VIOLATION_RWX_SHIFT
    return qual | EPT_VIOLATION_GVA_IS_VALID | EPT_VIOLATION_GVA_TRANSLATED


@cache  # a pure function of the qualification's few bits: computed once per value
def ept_violation_error_code(qual: int) -> int:
    """`__vmx_handle_ept_violation()` (6.18 vmx/common.h): ACC_READ gives PFERR_USER_MASK,
    ACC_WRITE PFERR_WRITE_MASK, ACC_INSTR PFERR_FETCH_MASK, any of the entry's R/W/X
    (EPT_VIOLATION_PROT_MASK) PFERR_PRESENT_MASK; with GVA_IS_VALID, GVA_TRANSLATED gives
    PFERR_GUEST_FINAL_MASK, else PFERR_GUEST_PAGE_MASK (the test reads the qualification
    since a fix of Nov 2025, in 6.18; before it, it read the error code's own bit 7, so
    neither bit was set)."""
    code = PFERR_USER_MASK if qual & EPT_VIOLATION_ACC_READ else 0
    code |= PFERR_WRITE_MASK if qual & EPT_VIOLATION_ACC_WRITE else 0
    code |= PFERR_FETCH_MASK if qual & EPT_VIOLATION_ACC_INSTR else 0
    code |= PFERR_PRESENT_MASK if qual & EPT_VIOLATION_PROT_MASK else 0
    if qual & EPT_VIOLATION_GVA_IS_VALID:
        translated = qual & EPT_VIOLATION_GVA_TRANSLATED
        code |= PFERR_GUEST_FINAL_MASK if translated else PFERR_GUEST_PAGE_MASK
    return code


def npf_error_code(cfg: SpteConfig, spte: int, write: bool, fetch: bool = False) -> int:
    """The #NPF error code (`npf_interception()`, 6.18 svm.c): P for a present entry,
    W, F; RSVD|P on an MMIO spte (its reserved bits)."""
    code = (PFERR_WRITE_MASK if write else 0) | (PFERR_FETCH_MASK if fetch else 0)
    if is_mmio_spte(cfg, spte):
        return PFERR_RSVD_MASK | PFERR_PRESENT_MASK | code
    return code | (PFERR_PRESENT_MASK if is_shadow_present_pte(spte) else 0)


def exit_reason(cfg: SpteConfig, spte: int) -> str:
    """What `kvm_exit` prints for an access the CPU's walk stopped at `spte`: an EPT
    misconfiguration on an MMIO spte, else an EPT violation; #NPF under NPT."""
    if not cfg.ept:
        return NPF
    return EPT_MISCONFIG if is_mmio_spte(cfg, spte) else EPT_VIOLATION
