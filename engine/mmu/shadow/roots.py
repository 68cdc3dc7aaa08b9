"""The shadow MMU's root cache on a CR3 load: `fast_pgd_switch()` keeps a usable
current root or swaps one in from the vCPU's `prev_roots` (an LRU of
KVM_MMU_NUM_PREV_ROOTS roots since 4.19; `prev_roots=False`: before, one root per vCPU).
Kernel: `cached_root_find_and_keep_current()`, arch/x86/kvm/mmu/mmu.c (6.18)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..mmu_pages import KvmMmuPage

if TYPE_CHECKING:
    from .mmu import ShadowMmu

KVM_MMU_NUM_PREV_ROOTS = 3


def fast_pgd_switch(mmu: ShadowMmu, vcpu: int, cr3: int) -> None:
    """`cached_root_find_and_keep_current()` (6.18): keep a usable current root, else
    swap through `prev_roots` (an LRU of KVM_MMU_NUM_PREV_ROOTS, since 4.19) and free
    the one left over when none is usable."""
    current = mmu.roots.pop(vcpu, None)
    if not mmu.prev_roots_enabled:
        if current is not None:
            mmu.pages.put_root(current)
        return
    as_id = mmu.vm.vcpu(vcpu).as_id

    def usable(root: KvmMmuPage | None) -> bool:
        return (
            root is not None
            and root.gfn == cr3
            and root.role.word == mmu._root_role(as_id).word
            and not mmu.pages.is_obsolete(root)
        )

    if not usable(current):
        cached = mmu.prev_roots.setdefault(vcpu, [None] * KVM_MMU_NUM_PREV_ROOTS)
        for i in range(KVM_MMU_NUM_PREV_ROOTS):
            current, cached[i] = cached[i], current
            if usable(current):
                mmu.stat["prev_roots_hits"] += 1
                break
        else:
            if current is not None:
                mmu.pages.put_root(current)  # kvm_mmu_free_roots(ROOT_CURRENT)
            current = None
    if current is not None:
        mmu.roots[vcpu] = current
