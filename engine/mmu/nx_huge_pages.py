"""NX huge pages (the iTLB multihit mitigation, module parameter `nx_huge_pages`): the
page tables made because an executable huge page was not allowed, and their recovery.
Shared by the TDP MMU and the shadow MMU's pages (direct or indirect).

torvalds/linux 6.17/6.18 `arch/x86/kvm/mmu/mmu.c`:
- `account_nx_huge_page(kvm, sp, nx_huge_page_possible)`: `sp->nx_huge_page_disallowed
  = true` and, when a huge page could have replaced the table (`fault->req_level >=
  it.level`), `track_possible_nx_huge_page()`: onto the tail of `possible_nx_huge_pages`
  and `++kvm->stat.nx_lpage_splits`;
- `unaccount_nx_huge_page()`: the flag off and `untrack_possible_nx_huge_page()`; a
  zapped page is unaccounted (`__kvm_mmu_prepare_zap_page()`, `handle_removed_pt()`);
- `kvm_recover_nx_huge_pages()`: every `nx_huge_pages_recovery_period_ms` the worker
  takes `DIV_ROUND_UP(nx_lpage_splits, nx_huge_pages_recovery_ratio)` pages off the head
  (oldest first); one in a slot that tracks dirty pages is only unaccounted (zapping it
  would bring back a huge page dirty logging must not have), the others are zapped
  (`kvm_tdp_mmu_zap_sp()`, or `kvm_mmu_prepare_zap_page()` for shadow pages), so the
  next fault can map the huge page again.  `kvm_recover_mmu_nx_huge_pages()` in
  mmu_pages.py is that run for the pages of `MmuPages` (the direct MMU's and the shadow
  MMU's).
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
) -> int:
    """One run of the recovery worker; returns the page tables zapped."""
    to_zap = -(-stat["nx_lpage_splits"] // ratio) if ratio else 0
    zapped = 0
    for _ in range(to_zap):
        if not possible:
            break
        sp = next(iter(possible.values()))
        if dirty_tracked(sp):
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
