"""NX huge pages (the iTLB multihit mitigation, module parameter `nx_huge_pages`): the
page tables made because an executable huge page was not allowed, and their recovery.
Shared by the TDP MMU and the shadow MMU's pages (direct or indirect).

torvalds/linux 6.18 `arch/x86/kvm/mmu/mmu.c`:
- `account_nx_huge_page(kvm, sp, nx_huge_page_possible)`: `sp->nx_huge_page_disallowed
  = true` and, when a huge page could have replaced the table (`fault->req_level >=
  it.level`), `track_possible_nx_huge_page()`: onto the tail of `possible_nx_huge_pages`
  and `++kvm->stat.nx_lpage_splits`;
- `unaccount_nx_huge_page()`: the flag off and `untrack_possible_nx_huge_page()`; a
  zapped page is unaccounted (`__kvm_mmu_prepare_zap_page()`, `handle_removed_pt()`);
- `kvm_recover_nx_huge_pages(kvm, mmu_type)`: every `nx_huge_pages_recovery_period_ms`
  the worker takes `DIV_ROUND_UP(nr_pages, nx_huge_pages_recovery_ratio)` pages off the
  head of the MMU type's list (oldest first).  6.18 keeps one list per MMU type
  (`possible_nx_huge_pages[KVM_TDP_MMU]` and `[KVM_SHADOW_MMU]`, each with its
  `nr_pages`; the model keeps a list per MMU object, and runs one MMU type per VM) and
  unaccounts each page first; a page in a slot that tracks dirty pages is then left alone
  (zapping it would bring back a huge page dirty logging must not have), the others are
  zapped (`kvm_tdp_mmu_zap_possible_nx_huge_page()` under mmu_lock held for read, or
  `kvm_mmu_prepare_zap_page()` for shadow pages), so the next fault can map the huge page
  again.  Before 6.18 (`nx_recovery_era` "before-6.18": one list for both MMUs, counted
  by `nx_lpage_splits`, mmu_lock held for write) a dirty-tracked page was only
  unaccounted and the others zapped (`kvm_tdp_mmu_zap_sp()`), the zap unaccounting them.
  `kvm_recover_mmu_nx_huge_pages()` in mmu_pages.py is that run for the pages of
  `MmuPages` (the direct MMU's and the shadow MMU's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar


class NxTracked(Protocol):
    seq: int
    nx_huge_page_disallowed: bool


P = TypeVar("P", bound=NxTracked)


def track_possible_nx_huge_page(possible: dict[int, P], stat: dict[str, int], sp: P) -> None:
    if sp.seq not in possible:
        possible[sp.seq] = sp
        stat["nx_lpage_splits"] += 1


def untrack_possible_nx_huge_page(possible: dict[int, P], stat: dict[str, int], sp: P) -> None:
    if possible.pop(sp.seq, None) is not None:
        stat["nx_lpage_splits"] -= 1


def account_nx_huge_page(
    possible: dict[int, P], stat: dict[str, int], sp: P, nx_huge_page_possible: bool
) -> None:
    sp.nx_huge_page_disallowed = True
    if nx_huge_page_possible:
        track_possible_nx_huge_page(possible, stat, sp)


def unaccount_nx_huge_page(possible: dict[int, P], stat: dict[str, int], sp: P) -> None:
    sp.nx_huge_page_disallowed = False
    untrack_possible_nx_huge_page(possible, stat, sp)


def recover_nx_huge_pages(
    possible: dict[int, P],
    stat: dict[str, int],
    ratio: int,
    dirty_tracked: Callable[[P], bool],
    zap: Callable[[P], bool],
    era: str = "6.18",
) -> int:
    """One run of the recovery worker over one list (`kvm_recover_nx_huge_pages()`);
    returns the page tables zapped.  `era`: "6.18" unaccounts each page before the zap,
    "before-6.18" only a dirty-tracked one (the zap unaccounts the others)."""
    to_zap = -(-len(possible) // ratio) if ratio else 0  # nx_huge_pages_to_zap()
    zapped = 0
    for _ in range(to_zap):
        if not possible:
            break
        sp = next(iter(possible.values()))
        if era == "6.18":
            unaccount_nx_huge_page(possible, stat, sp)
            if not dirty_tracked(sp) and zap(sp):  # kvm_mmu_sp_dirty_logging_enabled()
                zapped += 1
        elif dirty_tracked(sp):
            unaccount_nx_huge_page(possible, stat, sp)
        elif zap(sp):
            zapped += 1
    return zapped


def audit_nx_huge_pages(possible: dict[int, P], stat: dict[str, int]) -> str | None:
    """What is wrong with the tracking, or None."""
    if stat["nx_lpage_splits"] != len(possible):
        return "nx_lpage_splits disagrees with possible_nx_huge_pages"
    if any(not sp.nx_huge_page_disallowed for sp in possible.values()):
        return "a page on possible_nx_huge_pages is not nx_huge_page_disallowed"
    return None
