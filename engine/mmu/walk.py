"""A walk of a shadow or TDP page table for one page number: from a root, one spte index
per level, down to the last page reached, as the CPU's page walker (and mmu.c's
`for_each_shadow_entry`) goes.

Kept apart from the screens' views (views.py, which re-exports these), so that a run
without a screen (`mmuscope simulate`) does not load them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .mmu_pages import KvmMmuPage, MmuPages


def fault_path(pages: MmuPages, root: KvmMmuPage, number: int) -> list[tuple[KvmMmuPage, int]]:
    """(page, spte index) from the root down to the last page the walk reaches, for a
    page number (a gfn under EPT, a gva >> 12 under shadow paging)."""
    path = [(root, _index(root, number))]
    while (child := pages.child_at(*path[-1])) is not None:
        path.append((child, _index(child, number)))
    return path


def last_on_path(pages: MmuPages, root: KvmMmuPage, number: int) -> tuple[KvmMmuPage, int]:
    """The last (page, spte index) of `fault_path`, without building the path (the CPU's
    own walk, asked on every guest access)."""
    sp = root
    while (child := pages.child_at(sp, index := _index(sp, number))) is not None:
        sp = child
    return sp, index


def _index(sp: KvmMmuPage, number: int) -> int:
    return (number >> (9 * (sp.role.level - 1))) & 511
