"""The TDP MMU as a kvmmmu trace shows it, for the replay model (engine.replay.model):
its sptes per gfn, the pages a table spte's change frees, pending child pages and roots
and their address spaces, and the fast path's lockless spte changes (docs/kvm.md §6).

What each event does to the model:

* ``kvm_tdp_mmu_spte_changed`` (old → new spte per as/level/gfn) and ``kvm_mmu_set_spte``
  (a shadow-MMU leaf) — the gfn grid: not present, a table, a leaf, or MMIO (`classify`).
  The TDP MMU frees its pages when a table spte at level L goes away: the direct page at
  its gfn and level L-1 vanishes (``tdp_freed``); ≈6.x kernels then emit
  ``kvm_mmu_prepare_zap_page`` for it from ``handle_removed_pt``, which is not a second
  zap (``last_tdp_freed``).  Roots freed when their last user puts them leave no trace;
  a new TDP root with the key of a live one of its address space replaces it
  (``tdp_roots_replaced``: valid roots of one role are shared, so the old one was
  invalidated).
* TDP MMU pages and address spaces — ``tdp_mmu_init_sp`` traces ``kvm_mmu_get_page`` before
  the page is linked, and a lost ``tdp_mmu_set_spte_atomic`` race frees it again without a
  tracepoint (``tdp_mmu_free_sp``, then RET_PF_RETRY).  So a new TDP child page is
  *pending* until the next event of its CPU: the ``kvm_tdp_mmu_spte_changed`` that links it
  (its gfn, one level up, a table spte) keeps it, anything else means it was freed
  (``tdp_unlinked``; only in a trace with TDP spte changes: the shadow MMU links its pages
  without a tracepoint).  KVM_MMU_PAGE_PRINTK does not print ``role.smm``, so the page's
  address space is the ``as id`` of that link; a root's, that of the next change on its
  CPU (``tdp_pending_roots``: a vCPU's faults walk its own root).  Pages of address
  space 1 (SMM) are keyed apart, with ``("as_id", 1)`` after the printed role.
* ``fast_page_fault`` — counted per vCPU (fixed, spurious), and its ``new_spte`` (the
  spte after the lockless cmpxchg, ``*sptep``) replaces the leaf the model knows at
  ``cr2_or_gpa``'s gfn: the one holding ``old_spte`` (else the only leaf there); the fast
  path changes no other spte and emits nothing else (fast_pf.py).  ``%p`` hashes the
  sptep, so the gfn finds the leaf.  ``fast_sptes`` counts the changes applied.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..events import Event
from .records import (
    NONE,
    TABLE,
    PageKey,
    ReplayPage,
    TdpKey,
    TdpSpte,
    _int,
    classify,
    gfns_per_spte,
    page_words,
)

if TYPE_CHECKING:
    from .model import ReplayModel

SMM_KEY = ("as_id", 1)  # appended to the role of a page of address space 1


def settle_child(model: ReplayModel, event: Event, key: PageKey) -> bool:
    """The next event of the CPU that made TDP child page `key`: its link keeps it (in
    the address space the link shows), anything else in a TDP trace freed it."""
    page = model.pages.get(key)
    if page is None or page.level is None:
        return False
    fields = event.fields
    if event.name == "kvm_tdp_mmu_spte_changed" and _int(fields, "level") == page.level + 1:
        new, gfn = _int(fields, "new_spte"), _int(fields, "gfn")
        if new is not None and gfn == page.gfn and classify(new, page.level + 1) == TABLE:
            return move_to_as(model, page, _int(fields, "as_id") or 0, replaces=False)
    if not model.tdp_changes and event.name != "kvm_tdp_mmu_spte_changed":
        return False  # no TDP spte change seen: the shadow MMU's page, linked untraced
    model.tdp_unlinked += 1
    model._remove_copy(page, "freed unlinked (TDP, a lost race)")
    return True


def settle_root(model: ReplayModel, event: Event, key: PageKey) -> bool:
    """The first spte change of the CPU that made TDP root `key` (a vCPU's faults walk
    its own root): the root's address space.  A live root of the same key and address
    space was invalidated before this one was made (valid roots of one role are
    shared): it is gone."""
    page = model.pages.get(key)
    if page is None:
        return False
    return move_to_as(model, page, _int(event.fields, "as_id") or 0, replaces=True)


def move_to_as(model: ReplayModel, page: ReplayPage, as_id: int, replaces: bool) -> bool:
    """One copy of `page` (keyed as printed) to the key of its address space; with
    `replaces`, a live page already there is replaced instead of copied."""
    key = page.key
    target = (*key[:2], (*key[2], SMM_KEY)) if as_id == 1 else key
    there = model.pages.get(target)
    if target == key:
        if not replaces or page.copies < 2:
            return False
        model.tdp_roots_replaced += 1
        model.pages[key] = replace(page, copies=page.copies - 1)
        model._tally(page, -1)
        return True
    model._remove_copy(page, "")
    if there is not None:
        if replaces:
            model.tdp_roots_replaced += 1
        else:
            model.pages[there.key] = replace(there, copies=there.copies + 1)
            model._tally(there, 1)
        return True
    model.seq += 1
    moved = replace(page, key=target, copies=1, seq=model.seq)
    model.pages[moved.key] = moved
    model._tally(moved, 1)
    if moved.level is not None:
        where = (moved.gfn, moved.level)
        model.by_gfn[where] = (*model.by_gfn.get(where, ()), moved.key)
    model.last_change = ("appeared", f"address space {as_id}: {page_words(moved)}")
    return True


def tdp_changed(model: ReplayModel, event: Event) -> bool:
    fields = event.fields
    as_id, gfn, level = _int(fields, "as_id"), _int(fields, "gfn"), _int(fields, "level")
    new, old = _int(fields, "new_spte"), _int(fields, "old_spte")
    if as_id is None or gfn is None or level is None or new is None:
        return False
    model.tdp_changes += 1
    set_tdp(model, (as_id, level, gfn), new, old or 0, event.ts)
    if level > 1 and classify(old or 0, level) == TABLE and classify(new, level) != TABLE:
        free_child(model, gfn, level - 1, as_id)
    return True


def free_child(model: ReplayModel, gfn: int, level: int, as_id: int) -> None:
    """A TDP MMU table spte went away: the page it pointed to is freed (its child page
    has the spte's gfn, one level down, its address space, and is direct; ≈6.x
    kernels trace its kvm_mmu_prepare_zap_page next, keyed as printed)."""
    keys = model.by_gfn.get((gfn, level), ())
    for key in sorted(keys, key=lambda k: (SMM_KEY in k[2]) != (as_id == 1)):
        page = model.pages[key]
        if page.direct:
            model.tdp_freed += 1
            model._remove_copy(page, "freed (TDP)")
            model.last_tdp_freed = _printed(key)
            return


def set_spte(model: ReplayModel, event: Event) -> bool:
    fields = event.fields
    gfn, level, spte = _int(fields, "gfn"), _int(fields, "level"), _int(fields, "spte")
    if gfn is None or level is None or spte is None:
        return False
    model.set_sptes += 1
    if model.tdp_changes and model.last_tdp is not None:
        _, last_level, last_gfn = model.last_tdp
        if last_level == level and last_gfn == gfn - gfn % gfns_per_spte(level):
            # tdp_mmu_map_handle_target_level's trace of the change just seen, which
            # printed its address space (this tracepoint has none)
            return False
    key = (0, level, gfn)
    before = model.tdp.get(key)
    return set_tdp(model, key, spte, before.spte if before else 0, event.ts)


def set_tdp(model: ReplayModel, key: TdpKey, new: int, old: int, ts: float) -> bool:
    as_id, level, gfn = key
    key = (as_id, level, gfn - gfn % gfns_per_spte(level))  # the spte's first gfn
    kind = classify(new, level)
    if kind == NONE:
        model.tdp.pop(key, None)
    else:
        model._keep_spte(model.tdp, key, TdpSpte(new, kind, old, ts), model.limits[1])
    model.last_tdp = key
    model.last_change = ("tdp", f"as {as_id} l{level} gfn {gfn:#x}: {old:#x} → {new:#x}")
    return True


def fast_page_fault(model: ReplayModel, event: Event) -> bool:
    model._vcpu_event(event)
    fields = event.fields
    gpa, old, new = (_int(fields, k) for k in ("cr2_or_gpa", "old_spte", "new_spte"))
    if gpa is None or old is None or new is None:
        return False
    gfn = gpa >> 12
    known = [
        key
        for level in range(1, 6)
        for as_id in (0, 1)
        if (key := (as_id, level, gfn - gfn % gfns_per_spte(level))) in model.tdp
        and model.tdp[key].kind != TABLE
    ]
    same = [key for key in known if model.tdp[key].spte == old]
    where = same or (known if len(known) == 1 else [])
    if not where or model.tdp[where[0]].spte == new:
        return False
    model.fast_sptes += 1
    return set_tdp(model, where[0], new, model.tdp[where[0]].spte, event.ts)


def _printed(key: PageKey) -> PageKey:
    """The key as the page's tracepoints print it (without the address space)."""
    if SMM_KEY not in key[2]:
        return key
    return key[0], key[1], tuple(f for f in key[2] if f != SMM_KEY)
