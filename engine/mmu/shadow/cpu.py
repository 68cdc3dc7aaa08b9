"""The vCPU's side of shadow paging: the walk the CPU itself makes of the shadow tables on
every guest access (no exit when the leaf allows it) and the error code of the #PF it
exits with otherwise.

Shared by every driver of the shadow MMU: the simulated guest (`ShadowSession`, session.py),
the guest kernel's own pte stores (`GuestKernel`, kernel.py) and the `mmuscope kvm`
programs' vCPU (engine/kvm/model.py), so that a store into a shadowed table reaches
`mmu_set_spte()` -> `make_spte()` -> `mmu_try_to_unsync_pages()` (6.18 mmu.c/spte.c) the
same way in each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..guest.page_tables import PFERR_PRESENT_MASK, PFERR_RSVD_MASK, access_error_code
from ..spte import (
    PT_USER_MASK,
    PT_WRITABLE_MASK,
    RetPf,
    SpteConfig,
    is_last_spte,
    is_mmio_spte,
    is_shadow_present_pte,
)
from ..walk import last_on_path

if TYPE_CHECKING:
    from ..guest.page_tables import GuestPageTables
    from ..mmu_pages import KvmMmuPage, MmuPages


class ShadowMmuView(Protocol):
    """What the vCPU sees of `ShadowMmu` (mmu.py): the roots it walks, and the fault and
    the emulator it exits into."""

    roots: dict[int, KvmMmuPage]
    pages: MmuPages
    cfg: SpteConfig
    cr3s: dict[int, int]
    guest: GuestPageTables

    def shadow_pages_of(self, gfn: int, as_id: int | None = None) -> list[KvmMmuPage]: ...

    def page_fault(
        self,
        vcpu: int,
        cr3: int,
        gva: int,
        write: bool = False,
        user: bool = False,
        fetch: bool = False,
    ) -> RetPf: ...

    def emulate_instruction(
        self,
        vcpu: int,
        gva: int,
        write: bool,
        user: bool = False,
        *,
        insn: tuple[int, bytes] | None = None,
        size: int = 4,
        val: int = 0,
    ) -> int | None: ...


def leaf_spte(mmu: ShadowMmuView, vcpu: int, gva: int) -> int:
    """The leaf the CPU's walk of the vCPU's current root reaches for `gva` (4K, or
    2M/1G with PT_PAGE_SIZE_MASK), or the non-present value."""
    root = mmu.roots.get(vcpu)
    if root is None or mmu.pages.is_obsolete(root):
        return mmu.pages.nonpresent
    sp, index = last_on_path(mmu.pages, root, gva >> 12)
    spte = sp.spt[index]
    return spte if is_last_spte(spte, sp.role.level) else mmu.pages.nonpresent


def leaf_allows(
    mmu: ShadowMmuView, vcpu: int, gva: int, write: bool, user: bool, fetch: bool = False
) -> bool:
    """True when the CPU finds a present leaf that allows the access: no VM exit."""
    spte = leaf_spte(mmu, vcpu, gva)
    if not is_shadow_present_pte(spte):  # empty or an MMIO spte
        return False
    return not (
        (write and not spte & PT_WRITABLE_MASK)
        or (user and not spte & PT_USER_MASK)
        or (fetch and bool(spte & mmu.cfg.shadow_nx_mask))
    )


def exit_error_code(
    mmu: ShadowMmuView, vcpu: int, gva: int, write: bool, user: bool, fetch: bool = False
) -> int:
    """The #PF error code the CPU's walk of the shadow tables reports, which
    `kvm_page_fault` prints (`handle_exception_nmi()` -> `kvm_handle_page_fault()`,
    6.18 vmx.c/mmu.c): W/U/F of the access, P when the spte it ended at is present (a
    protection fault), RSVD|P on an MMIO spte (its reserved bits are set)."""
    spte = leaf_spte(mmu, vcpu, gva)
    error_code = access_error_code(write, user, fetch)
    if is_mmio_spte(mmu.cfg, spte):
        return error_code | PFERR_RSVD_MASK | PFERR_PRESENT_MASK
    return error_code | (PFERR_PRESENT_MASK if is_shadow_present_pte(spte) else 0)
