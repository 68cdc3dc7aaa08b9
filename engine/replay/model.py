"""The MMU a kvmmmu trace implies: shadow pages, MMIO sptes, `mmu_valid_gen` flips, TDP
sptes per gfn, and per-vCPU exits, rebuilt event by event (docs/kvm.md §4-§6).

What each event does to the model:

* ``kvm_mmu_get_page`` ``new`` — a shadow page appears (docs/kvm.md §4.3: allocated with
  ``sp->mmu_valid_gen = kvm->arch.mmu_valid_gen``, so until the first fast zap its
  ``gen`` tells the VM's generation); ``existing`` — a page the model has not seen was
  created before the trace started: it is *adopted*.
* ``kvm_mmu_prepare_zap_page`` — the page vanishes.  Pages are keyed as KVM keys them
  (the gfn and the role fields the printk shows; plus ``gen``, since an obsolete page and
  its same-role successor coexist until the zap).  A zap of a page never seen is counted
  (``unknown_zaps``), and so is one the trace gives no gfn for (``unkeyed_zaps``:
  ``trace-cmd report``'s kvm plugin prints none for zaps).  A root zapped while in use
  (``root N``, N > 0) is marked invalid and stays until its last user puts it, when
  ``mmu_free_root_page()`` zaps it again (``invalid``, ``root 0``): that second zap
  closes the first one (``invalid_roots``), it is not a zap of an unknown page.
* ``kvm_mmu_zap_all_fast`` — prints the generation *before* the flip (mmu.c emits the
  tracepoint, then toggles ``mmu_valid_gen = mmu_valid_gen ? 0 : 1``); before 2019 the
  generation was a counter, incremented instead (§4.4).  Which one: 0/1 toggles unless a
  generation above 1 was ever seen.  Every page present at a fast zap is obsolete from
  then on (dimmed): ``kvm_zap_obsolete_pages`` takes them all, and the pages found or
  made afterwards are of the new generation.  That rule holds for the TDP MMU too, whose
  pages print ``gen 0`` whatever the VM's (``tdp_mmu_init_sp`` never sets it).  Before
  the first fast zap, a page whose ``gen`` differs from the newest page's is obsolete
  (left over from a zap before the trace began).
* ``mark_mmio_spte`` — an MMIO spte with its 19-bit generation (§5.1); ``check_mmio_spte``
  tells the VM's current memslots generation, and a cached spte whose generation differs
  is stale.  MMIO sptes cached before the last fast zap lived in now-obsolete pages.
* ``kvm_tdp_mmu_spte_changed`` (old → new spte per as/level/gfn) and ``kvm_mmu_set_spte``
  (a shadow-MMU leaf) — the gfn grid: not present, a table, a leaf, or MMIO (`classify`).
  The TDP MMU frees its pages when a table spte at level L goes away: the direct page at
  its gfn and level L-1 vanishes (``tdp_freed``); the kernel (6.18) then emits
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
* ``kvm_mmu_pagetable_walk`` and ``kvm_mmu_paging_element`` — the guest's page-table walk
  (``walk_addr_generic``), one element per level from the top: the level-L entry points
  to the guest table of level L-1, which an indirect shadow page of level L-1 shadows
  (its gfn), so each walk says which entry of which table holds each table below the
  top (``guest_links``: the parent's gfn and the entry's index, the address's bits for
  that level, ``pt_index``; `walk_links`).  The top table is CR3's, which no event
  prints: it is taken to be the last root its vCPU thread loaded (``vcpu_roots``: an
  indirect ``kvm_mmu_get_page`` of level 4 or 5 is a root, ``mmu_alloc_shadow_roots``),
  an assumption (a root found again in KVM's cache of previous roots is not traced),
  kept only for a table no walk placed before.  A walk's events are kept unread
  (``walks``; most of a shadow-paging trace) and placed when a page is got on its
  thread, or read by an export (`placed_tables`).
* ``kvm_page_fault``, ``kvm_exit``, ``kvm_entry`` — counted per vCPU.
* every event — counted per (name, cpu, pid), so kvm_stat's table can be rebuilt for any
  CPU or pid filter at any position.

Bounded whatever the trace's length: each table has a cap and drops its oldest entries
(counted in ``evicted_pages`` and ``evicted_sptes``).  `snapshot` copies the dicts (their
values are immutable, so the copies share them); the timeline index keeps snapshots at
checkpoints.  Traces that start mid-run never make it raise: whatever it cannot place is
counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from re import Match
from typing import Any, TypeVar

from ..events import Event, FieldValue
from ..mmu.guest.page_tables import PT_PAGE_SIZE, PT_PRESENT, pt_index, pte_gfn
from ..mmu.spte import MMIO_SPTE_GEN_MASK
from ..trace.lines import event_of
from ..trace.reader import CONTINUED, summarize
from .records import (
    MAX_COUNT_KEYS,
    MAX_FLIPS,
    MAX_MMIO_SPTES,
    MAX_PAGES,
    MAX_TDP_SPTES,
    MAX_VCPUS,
    NONE,
    TABLE,
    GenFlip,
    MmioSpte,
    ModelSnapshot,
    PageKey,
    ReplayPage,
    TdpKey,
    TdpSpte,
    VcpuCounts,
    _int,
    classify,
    gfns_per_spte,
    page_key,
    page_words,
)

SMM_KEY = ("as_id", 1)  # appended to the role of a page of address space 1
K = TypeVar("K")
V = TypeVar("V")
_TABLES: tuple[str, ...] = ("pages", "by_gfn", "mmio", "tdp", "counts", "vcpus")
_TABLES += ("exit_reasons", "tdp_pending", "tdp_pending_roots")
_TABLES += ("level_copies", "level_epochs", "level_gens", "invalid_roots")
_TABLES += ("walks", "guest_links", "vcpu_roots")
_SCALARS = (
    *("events", "seq", "version", "mmu_valid_gen", "memslots_gen", "max_gen_seen"),
    *("flips", "flips_total", "created", "adopted", "zapped", "duplicate_creates"),
    *("unknown_zaps", "unkeyed_zaps", "evicted_pages", "evicted_sptes", "tdp_freed"),
    *("mmio_checks_ok", "mmio_checks_stale"),
    *("set_sptes", "tdp_changes", "fast_sptes", "first_ts", "last_ts", "min_ts", "max_ts"),
    *("last_change", "last_tdp", "last_tdp_freed", "tdp_roots_replaced", "tdp_unlinked"),
)


class ReplayModel:
    """The VM's MMU as far as the events replayed so far tell."""

    def __init__(
        self,
        *,
        max_pages: int = MAX_PAGES,
        max_tdp: int = MAX_TDP_SPTES,
        max_mmio: int = MAX_MMIO_SPTES,
    ) -> None:
        self.limits = (max_pages, max_tdp, max_mmio)
        self.pages: dict[PageKey, ReplayPage] = {}
        #: (gfn, level) -> the keys of the pages there, oldest first (for TDP frees)
        self.by_gfn: dict[tuple[int, int], tuple[PageKey, ...]] = {}
        self.mmio: dict[int, MmioSpte] = {}
        self.tdp: dict[TdpKey, TdpSpte] = {}
        self.counts: dict[tuple[str, int, int], int] = {}
        self.vcpus: dict[int, VcpuCounts] = {}
        self.exit_reasons: dict[str, int] = {}
        #: page copies per level, per (level, epoch) and per (level, gen): the pages panel
        #: counts and tells obsolete ones from these, not by walking every page per frame
        self.level_copies: dict[int | None, int] = {}
        self.level_epochs: dict[tuple[int | None, int], int] = {}
        self.level_gens: dict[tuple[int | None, int | None], int] = {}
        #: roots zapped while a vCPU used them (`root N` > 0): the kernel marks them
        #: invalid and zaps (traces) them again when the last user puts them
        self.invalid_roots: dict[PageKey, ReplayPage] = {}
        self.events = 0
        self.seq = 0
        self.version = 0  # bumped whenever something drawn changes
        self.mmu_valid_gen: int | None = None  # unknown until a page is created or a flip
        self.memslots_gen: int | None = None  # 19 bits, from the MMIO events
        self.max_gen_seen = 0
        self.flips: tuple[GenFlip, ...] = ()
        self.flips_total = 0
        self.created = self.adopted = self.zapped = self.duplicate_creates = 0
        self.unknown_zaps = self.unkeyed_zaps = 0
        self.evicted_pages = self.evicted_sptes = 0  # dropped by the caps (page copies)
        self.tdp_freed = 0  # pages whose TDP table spte was cleared
        self.mmio_checks_ok = self.mmio_checks_stale = 0
        self.set_sptes = self.tdp_changes = self.fast_sptes = 0
        self.first_ts: float | None = None  # of the first event replayed
        self.last_ts: float | None = None  # of the last one
        self.min_ts: float | None = None  # timestamps need not rise (CPUs' clocks, merges)
        self.max_ts: float | None = None
        #: what the last drawn change was: ("appeared"|"vanished"|"flip"|"mmio"|"tdp", words)
        self.last_change: tuple[str, str] = ("", "")
        self.last_tdp: TdpKey | None = None
        #: the page the last TDP table spte change freed (its kvm_mmu_prepare_zap_page,
        #: which 6.18 emits in handle_removed_pt right after, is not a second zap)
        self.last_tdp_freed: PageKey | None = None
        self.tdp_roots_replaced = 0  # TDP roots whose successor with the same role appeared
        #: cpu -> the TDP child page it created and has not linked yet
        self.tdp_pending: dict[int, PageKey] = {}
        #: cpu -> the TDP root it made last, whose address space no change has shown yet
        self.tdp_pending_roots: dict[int, PageKey] = {}
        self.tdp_unlinked = 0  # TDP child pages freed unlinked (a lost race)
        #: vCPU thread (pid) -> its last guest walk not placed yet: the walk's events
        self.walks: dict[int, tuple[Event, ...]] = {}
        #: (gfn, level) of a guest page table -> (its parent table's gfn, the parent's
        #: entry index, whether the parent is the assumed root), as the walks read them
        self.guest_links: dict[tuple[int, int], tuple[int, int, bool]] = {}
        #: vCPU thread (pid) -> (gfn, level) of the last indirect root it loaded
        self.vcpu_roots: dict[int, tuple[int, int]] = {}

    # -- state --------------------------------------------------------------------------

    def snapshot(self) -> ModelSnapshot:
        tables = {name: dict(getattr(self, name)) for name in _TABLES}
        return ModelSnapshot(tables, {name: getattr(self, name) for name in _SCALARS})

    @classmethod
    def from_snapshot(cls, snap: ModelSnapshot, **limits: int) -> ReplayModel:
        model = cls(**limits)
        for name, table in snap.tables.items():
            setattr(model, name, dict(table))
        for name, value in snap.scalars.items():
            setattr(model, name, value)
        return model

    def copy(self) -> ReplayModel:
        max_pages, max_tdp, max_mmio = self.limits
        return ReplayModel.from_snapshot(
            self.snapshot(), max_pages=max_pages, max_tdp=max_tdp, max_mmio=max_mmio
        )

    def is_obsolete(self, page: ReplayPage) -> bool:
        """Of an older generation than the VM's (is_obsolete_sp, §4.4): present at the
        last fast zap, or (before any) of another gen than the newest page."""
        if page.epoch < self.flips_total:
            return True
        return (
            self.flips_total == 0
            and page.gen is not None
            and self.mmu_valid_gen is not None
            and page.gen != self.mmu_valid_gen
        )

    def mmio_is_stale(self, spte: MmioSpte) -> bool:
        """check_mmio_spte would refuse it: the VM's generation moved on (§5.3)."""
        return self.memslots_gen is not None and spte.gen != self.memslots_gen

    def mmio_is_obsolete(self, spte: MmioSpte) -> bool:
        """Cached before the last fast zap: its page was obsolete and is zapped."""
        return spte.epoch != self.flips_total

    def totals(
        self, cpus: frozenset[int] | None = None, pids: frozenset[int] | None = None
    ) -> dict[str, int]:
        """Events per name so far, only those on `cpus` and of `pids` (None: all)."""
        out: dict[str, int] = {}
        for (name, cpu, pid), count in self.counts.items():
            if (cpus is None or cpu in cpus) and (pids is None or pid in pids):
                out[name] = out.get(name, 0) + count
        return out

    # -- events -------------------------------------------------------------------------

    def apply(self, event: Event) -> bool:
        """Replay one event; True when it changed something drawn (pages, sptes, gens)."""
        self.events += 1
        ts = event.ts
        if self.min_ts is None or self.max_ts is None:
            self.first_ts = self.min_ts = self.max_ts = ts
        elif ts < self.min_ts:
            self.min_ts = ts
        elif ts > self.max_ts:
            self.max_ts = ts
        self.last_ts = ts
        self._count(event)
        settled = False
        if event.cpu in self.tdp_pending:
            settled = self._settle_child(event, self.tdp_pending.pop(event.cpu))
        if event.name == "kvm_tdp_mmu_spte_changed" and event.cpu in self.tdp_pending_roots:
            root = self.tdp_pending_roots.pop(event.cpu)
            settled = self._settle_root(event, root) or settled
        if event.name != "kvm_mmu_prepare_zap_page":
            self.last_tdp_freed = None
        if event.name in WALK_EVENTS:
            self._walk_step(event)
            return False
        handler = _HANDLERS.get(event.name)
        if (handler is not None and event.fields and handler(self, event)) or settled:
            self.version += 1
            return True
        return False

    def _count(self, event: Event) -> None:
        key = (event.name, event.cpu, event.pid)
        counts = self.counts
        if key not in counts and len(counts) >= MAX_COUNT_KEYS:
            key = (event.name, -1, -1)
        counts[key] = counts.get(key, 0) + 1

    def _get_page(self, event: Event) -> bool:
        fields = event.fields
        key = page_key(fields)
        if key is None:
            return False
        self._place_walk(event.pid)  # before a new root: the walk was under the last one
        level = _int(fields, "level")
        if fields.get("direct") is False and level is not None and level >= 4:
            root = self.vcpu_roots.get(event.pid)
            if root is None or level >= root[1]:  # an l4 below an l5 root is no root
                self.vcpu_roots[event.pid] = (key[0], level)
        gen = key[1]
        if gen is not None:
            self.max_gen_seen = max(self.max_gen_seen, gen)
        page = self.pages.get(key)
        created = bool(fields.get("created"))
        if created:
            self.created += 1
            if gen is not None and not self.flips_total:
                self.mmu_valid_gen = gen  # a new page carries the VM's generation
        if created and fields.get("direct") is True and isinstance(fields.get("level"), int):
            if _is_tdp_root(key[0], _int(fields, "level")):
                self.tdp_pending_roots[event.cpu] = key
            else:
                self.tdp_pending[event.cpu] = key
        if page is not None:
            if created:
                self.duplicate_creates += 1
                self.pages[key] = replace(page, copies=page.copies + 1)
                self._tally(page, 1)
            return created
        if not created:
            self.adopted += 1
        self._add_page(key, fields, event.ts, adopted=not created)
        verb = "appeared" if created else "seen"
        self.last_change = ("appeared", f"{verb}: {page_words(self.pages[key])}")
        return True

    def _add_page(
        self, key: PageKey, fields: Mapping[str, FieldValue], ts: float, adopted: bool
    ) -> None:
        level, direct, access = _int(fields, "level"), fields.get("direct"), _int(fields, "access")
        word = _int(fields, "role")
        if word is not None:  # libtraceevent's "WORD: %08x" (docs/kvm.md §4.2 layout)
            level, direct, access = word & 0xF, bool(word >> 7 & 1), word >> 8 & 7
        self.seq += 1
        self.pages[key] = ReplayPage(
            key, level, bool(direct), access, self.seq, ts, 1, adopted, self.flips_total
        )
        self._tally(self.pages[key], 1)
        if level is not None:
            self.by_gfn[key[0], level] = (*self.by_gfn.get((key[0], level), ()), key)
        if len(self.pages) > self.limits[0]:
            oldest = self.pages[next(iter(self.pages))]
            self.evicted_pages += oldest.copies
            self._drop_page(oldest)

    def _tally(self, page: ReplayPage, copies: int) -> None:
        """`copies` more (or fewer) copies of `page` in the per-level counts."""
        _bump(self.level_copies, page.level, copies)
        _bump(self.level_epochs, (page.level, page.epoch), copies)
        _bump(self.level_gens, (page.level, page.gen), copies)

    def level_obsolete(self, level: int | None) -> int:
        """Copies at `level` that `is_obsolete` (counted, not walked)."""
        if self.flips_total:
            current = self.level_epochs.get((level, self.flips_total), 0)
            return self.level_copies.get(level, 0) - current
        if self.mmu_valid_gen is None:
            return 0
        return sum(
            n
            for (lv, gen), n in self.level_gens.items()
            if lv == level and gen is not None and gen != self.mmu_valid_gen
        )

    def _drop_page(self, page: ReplayPage) -> None:
        del self.pages[page.key]
        self._tally(page, -page.copies)
        if page.level is None:
            return
        where = (page.gfn, page.level)
        left = tuple(k for k in self.by_gfn.get(where, ()) if k != page.key)
        if left:
            self.by_gfn[where] = left
        else:
            self.by_gfn.pop(where, None)

    def _remove_copy(self, page: ReplayPage, how: str) -> None:
        if page.copies > 1:
            self.pages[page.key] = replace(page, copies=page.copies - 1)
            self._tally(page, -1)
        else:
            self._drop_page(page)
        self.last_change = ("vanished", f"{how}: {page_words(page)}")

    def _zap_page(self, event: Event) -> bool:
        key = page_key(event.fields)
        if key is None:
            self.unkeyed_zaps += 1
            return False
        if key == self.last_tdp_freed:
            self.last_tdp_freed = None  # already freed with its table spte
            return False
        if event.fields.get("invalid") is True and key in self.invalid_roots:
            del self.invalid_roots[key]  # mmu_free_root_page(): its last user put it
            return False
        page = self.pages.get(key)
        if page is None:
            self.unknown_zaps += 1
            return False
        self.zapped += 1
        self._remove_copy(page, "zapped")
        if _int(event.fields, "root_count"):  # in use: invalid until its last user puts it
            self.invalid_roots[key] = page
            if len(self.invalid_roots) > self.limits[0]:
                del self.invalid_roots[next(iter(self.invalid_roots))]
        return True

    def _zap_all_fast(self, event: Event) -> bool:
        old = _int(event.fields, "mmu_valid_gen")
        if old is None:
            return False
        self.max_gen_seen = max(self.max_gen_seen, old)
        new = old ^ 1 if old <= 1 and self.max_gen_seen <= 1 else old + 1
        flip = GenFlip(event.ts, old, new, _int(event.fields, "mmu_used_pages"))
        self.flips = (*self.flips[-(MAX_FLIPS - 1) :], flip)
        self.flips_total += 1
        self.mmu_valid_gen = new
        self.last_change = ("flip", f"mmu_valid_gen {old} → {new}: every page obsolete")
        return True

    def _mark_mmio(self, event: Event) -> bool:
        gfn, gen = _int(event.fields, "gfn"), _int(event.fields, "gen")
        if gfn is None or gen is None:
            return False
        gen &= MMIO_SPTE_GEN_MASK
        access = _int(event.fields, "access") or 0
        spte = MmioSpte(gfn, gen, access, event.ts, self.flips_total)
        self._keep_spte(self.mmio, gfn, spte, self.limits[2])
        self.memslots_gen = gen
        self.last_change = ("mmio", f"MMIO spte cached: gfn {gfn:#x} gen {gen:#x}")
        return True

    def _keep_spte(self, table: dict[K, V], key: K, spte: V, limit: int) -> None:
        """Put `spte` last (the dict stays oldest-first); past `limit` sptes the oldest is
        dropped (`evicted_sptes`).  The MMIO and the TDP spte tables."""
        table.pop(key, None)
        table[key] = spte
        if len(table) > limit:
            del table[next(iter(table))]
            self.evicted_sptes += 1

    def _check_mmio(self, event: Event) -> bool:
        kvm_gen = _int(event.fields, "kvm_gen")
        if kvm_gen is None:
            return False
        changed = self.memslots_gen != kvm_gen & MMIO_SPTE_GEN_MASK
        self.memslots_gen = kvm_gen & MMIO_SPTE_GEN_MASK
        if event.fields.get("valid"):
            self.mmio_checks_ok += 1
        else:
            self.mmio_checks_stale += 1
        return changed

    def _vcpu_event(self, event: Event) -> bool:
        vcpu = _int(event.fields, "vcpu_id")
        if vcpu is None:
            return False
        counts = self.vcpus.get(vcpu)
        if counts is None:
            if len(self.vcpus) >= MAX_VCPUS:
                return False
            counts = VcpuCounts()
        if event.name == "kvm_exit":
            counts = replace(counts, exits=counts.exits + 1)
            reason = event.fields.get("exit_reason")
            if isinstance(reason, str) and (
                reason in self.exit_reasons or len(self.exit_reasons) < 64
            ):
                self.exit_reasons[reason] = self.exit_reasons.get(reason, 0) + 1
        elif event.name == "kvm_entry":
            counts = replace(counts, entries=counts.entries + 1)
        elif event.name == "kvm_page_fault":
            counts = replace(counts, faults=counts.faults + 1)
        elif event.fields.get("fixed"):
            counts = replace(counts, fast_fixed=counts.fast_fixed + 1)
        elif event.fields.get("spurious"):
            counts = replace(counts, fast_spurious=counts.fast_spurious + 1)
        self.vcpus[vcpu] = counts
        return False

    # -- the TDP MMU's events -----------------------------------------------------------

    def _settle_child(self, event: Event, key: PageKey) -> bool:
        """The next event of the CPU that made TDP child page `key`: its link keeps it (in
        the address space the link shows), anything else in a TDP trace freed it."""
        page = self.pages.get(key)
        if page is None or page.level is None:
            return False
        fields = event.fields
        if event.name == "kvm_tdp_mmu_spte_changed" and _int(fields, "level") == page.level + 1:
            new, gfn = _int(fields, "new_spte"), _int(fields, "gfn")
            if new is not None and gfn == page.gfn and classify(new, page.level + 1) == TABLE:
                return self._move_to_as(page, _int(fields, "as_id") or 0, replaces=False)
        if not self.tdp_changes and event.name != "kvm_tdp_mmu_spte_changed":
            return False  # no TDP spte change seen: the shadow MMU's page, linked untraced
        self.tdp_unlinked += 1
        self._remove_copy(page, "freed unlinked (TDP, a lost race)")
        return True

    def _settle_root(self, event: Event, key: PageKey) -> bool:
        """The first spte change of the CPU that made TDP root `key` (a vCPU's faults walk
        its own root): the root's address space.  A live root of the same key and address
        space was invalidated before this one was made (valid roots of one role are
        shared): it is gone."""
        page = self.pages.get(key)
        if page is None:
            return False
        return self._move_to_as(page, _int(event.fields, "as_id") or 0, replaces=True)

    def _move_to_as(self, page: ReplayPage, as_id: int, replaces: bool) -> bool:
        """One copy of `page` (keyed as printed) to the key of its address space; with
        `replaces`, a live page already there is replaced instead of copied."""
        key = page.key
        target = (*key[:2], (*key[2], SMM_KEY)) if as_id == 1 else key
        there = self.pages.get(target)
        if target == key:
            if not replaces or page.copies < 2:
                return False
            self.tdp_roots_replaced += 1
            self.pages[key] = replace(page, copies=page.copies - 1)
            self._tally(page, -1)
            return True
        self._remove_copy(page, "")
        if there is not None:
            if replaces:
                self.tdp_roots_replaced += 1
            else:
                self.pages[there.key] = replace(there, copies=there.copies + 1)
                self._tally(there, 1)
            return True
        self.seq += 1
        moved = replace(page, key=target, copies=1, seq=self.seq)
        self.pages[moved.key] = moved
        self._tally(moved, 1)
        if moved.level is not None:
            where = (moved.gfn, moved.level)
            self.by_gfn[where] = (*self.by_gfn.get(where, ()), moved.key)
        self.last_change = ("appeared", f"address space {as_id}: {page_words(moved)}")
        return True

    def _tdp_changed(self, event: Event) -> bool:
        fields = event.fields
        as_id, gfn, level = _int(fields, "as_id"), _int(fields, "gfn"), _int(fields, "level")
        new, old = _int(fields, "new_spte"), _int(fields, "old_spte")
        if as_id is None or gfn is None or level is None or new is None:
            return False
        self.tdp_changes += 1
        self._set_tdp((as_id, level, gfn), new, old or 0, event.ts)
        if level > 1 and classify(old or 0, level) == TABLE and classify(new, level) != TABLE:
            self._free_child(gfn, level - 1, as_id)
        return True

    def _free_child(self, gfn: int, level: int, as_id: int) -> None:
        """A TDP MMU table spte went away: the page it pointed to is freed (its child page
        has the spte's gfn, one level down, its address space, and is direct; 6.18
        traces its kvm_mmu_prepare_zap_page next, keyed as printed)."""
        keys = self.by_gfn.get((gfn, level), ())
        for key in sorted(keys, key=lambda k: (SMM_KEY in k[2]) != (as_id == 1)):
            page = self.pages[key]
            if page.direct:
                self.tdp_freed += 1
                self._remove_copy(page, "freed (TDP)")
                self.last_tdp_freed = _printed(key)
                return

    def _walk_step(self, event: Event) -> None:
        """A walk event kept, its fields unread (most of a shadow-paging trace) until a
        page is got on its vCPU thread or an export asks (`walk_links`)."""
        if event.name == "kvm_mmu_pagetable_walk":
            self.walks[event.pid] = (event,)
        elif (walk := self.walks.get(event.pid)) is not None and len(walk) <= MAX_WALK_LEVELS:
            self.walks[event.pid] = (*walk, event)

    def _place_walk(self, pid: int) -> None:
        """The tables the last walk of vCPU thread `pid` shows, placed (`guest_links`)."""
        walk = self.walks.pop(pid, None)
        if walk is None:
            return
        for child, link in walk_links(walk, self.vcpu_roots.get(pid)):
            if link[2] and child in self.guest_links:
                continue  # a walk placed it: the assumed root does not move it
            self.guest_links.pop(child, None)  # the newest last: the cap drops the oldest
            self.guest_links[child] = link
            if len(self.guest_links) > self.limits[0]:
                del self.guest_links[next(iter(self.guest_links))]

    def placed_tables(self) -> dict[tuple[int, int], tuple[int, int, bool]]:
        """`guest_links` with what the walks not placed yet add (the model unchanged)."""
        out = dict(self.guest_links)
        for pid, walk in self.walks.items():
            for child, link in walk_links(walk, self.vcpu_roots.get(pid)):
                if not (link[2] and child in out):
                    out[child] = link
        return out

    def _set_spte(self, event: Event) -> bool:
        fields = event.fields
        gfn, level, spte = _int(fields, "gfn"), _int(fields, "level"), _int(fields, "spte")
        if gfn is None or level is None or spte is None:
            return False
        self.set_sptes += 1
        if self.tdp_changes and self.last_tdp is not None:
            _, last_level, last_gfn = self.last_tdp
            if last_level == level and last_gfn == gfn - gfn % gfns_per_spte(level):
                # tdp_mmu_map_handle_target_level's trace of the change just seen, which
                # printed its address space (this tracepoint has none)
                return False
        key = (0, level, gfn)
        before = self.tdp.get(key)
        return self._set_tdp(key, spte, before.spte if before else 0, event.ts)

    def _set_tdp(self, key: TdpKey, new: int, old: int, ts: float) -> bool:
        as_id, level, gfn = key
        key = (as_id, level, gfn - gfn % gfns_per_spte(level))  # the spte's first gfn
        kind = classify(new, level)
        if kind == NONE:
            self.tdp.pop(key, None)
        else:
            self._keep_spte(self.tdp, key, TdpSpte(new, kind, old, ts), self.limits[1])
        self.last_tdp = key
        self.last_change = ("tdp", f"as {as_id} l{level} gfn {gfn:#x}: {old:#x} → {new:#x}")
        return True

    def _fast_page_fault(self, event: Event) -> bool:
        self._vcpu_event(event)
        fields = event.fields
        gpa, old, new = (_int(fields, k) for k in ("cr2_or_gpa", "old_spte", "new_spte"))
        if gpa is None or old is None or new is None:
            return False
        gfn = gpa >> 12
        known = [
            key
            for level in range(1, 6)
            for as_id in (0, 1)
            if (key := (as_id, level, gfn - gfn % gfns_per_spte(level))) in self.tdp
            and self.tdp[key].kind != TABLE
        ]
        same = [key for key in known if self.tdp[key].spte == old]
        where = same or (known if len(known) == 1 else [])
        if not where or self.tdp[where[0]].spte == new:
            return False
        self.fast_sptes += 1
        return self._set_tdp(where[0], new, self.tdp[where[0]].spte, event.ts)

    # -- invariants ---------------------------------------------------------------------

    def audit(self) -> None:
        """Raise AssertionError when the model contradicts itself: page copies add up to
        what was created, adopted, zapped, freed and evicted; the per-level tallies are
        the pages'; the gfn index, the TDP and MMIO tables and the per-(name, cpu, pid)
        counts agree with each other and with the caps."""
        max_pages, max_tdp, max_mmio = self.limits
        assert len(self.pages) <= max_pages and len(self.tdp) <= max_tdp
        assert len(self.mmio) <= max_mmio and len(self.flips) <= MAX_FLIPS
        copies = 0
        for key, page in self.pages.items():
            assert page.key == key and page.copies >= 1 and 0 < page.seq <= self.seq, page
            assert 0 <= page.epoch <= self.flips_total, page
            copies += page.copies
        live = self.created + self.adopted - self.zapped - self.tdp_freed - self.evicted_pages
        live -= self.tdp_roots_replaced + self.tdp_unlinked
        assert copies == live, (copies, live)
        again = ReplayModel()
        for page in self.pages.values():
            again._tally(page, page.copies)
        tallies = (again.level_copies, again.level_epochs, again.level_gens)
        assert tallies == (self.level_copies, self.level_epochs, self.level_gens)
        for level in self.level_copies:
            obsolete = (
                p.copies for p in self.pages.values() if p.level == level and self.is_obsolete(p)
            )
            assert self.level_obsolete(level) == sum(obsolete), level
        indexed = [key for keys in self.by_gfn.values() for key in keys]
        assert len(indexed) == len(set(indexed)), "a page indexed twice"
        assert set(indexed) == {k for k, p in self.pages.items() if p.level is not None}
        for (gfn, level), keys in self.by_gfn.items():
            assert keys and all(
                self.pages[k].gfn == gfn and self.pages[k].level == level for k in keys
            )
        for (as_id, level, gfn), tdp in self.tdp.items():
            assert tdp.kind != NONE and tdp.kind == classify(tdp.spte, level), (gfn, tdp)
            assert gfn % gfns_per_spte(level) == 0 and as_id >= 0, (as_id, level, gfn)
        for gfn, spte in self.mmio.items():
            assert spte.gfn == gfn and 0 <= spte.gen <= MMIO_SPTE_GEN_MASK
            assert 0 <= spte.epoch <= self.flips_total
        assert sum(self.counts.values()) == self.events
        assert len(self.counts) <= MAX_COUNT_KEYS + len({k[0] for k in self.counts})
        totals = self.totals()
        for name, attr in (("kvm_exit", "exits"), ("kvm_entry", "entries")):
            per_vcpu = sum(getattr(v, attr) for v in self.vcpus.values())
            assert per_vcpu <= totals.get(name, 0), (name, per_vcpu)
        assert len(self.guest_links) <= max_pages
        for (gfn, level), (parent, index, _) in self.guest_links.items():
            assert level >= 1 and 0 <= index < 512 and gfn >= 0 and parent >= 0, (gfn, level)
        for pid, walk in self.walks.items():
            assert walk[0].name == "kvm_mmu_pagetable_walk" and walk[0].pid == pid, walk
            assert len(walk) <= MAX_WALK_LEVELS + 1
        assert self.flips_total >= len(self.flips)
        if self.flips:
            assert self.mmu_valid_gen is not None


def _bump(table: dict[K, int], key: K, by: int) -> None:
    """table[key] += by, the key gone at 0 (snapshots stay small)."""
    left = table.get(key, 0) + by
    if left:
        table[key] = left
    else:
        del table[key]


def _is_tdp_root(gfn: int, level: int | None) -> bool:
    """A direct page at gfn 0 of level 4 or 5: what a TDP MMU root prints (a level-4 child
    at gfn 0 under a 5-level root is taken for one: an assumption)."""
    return gfn == 0 and level is not None and level >= 4


def _printed(key: PageKey) -> PageKey:
    """The key as the page's tracepoints print it (without the address space)."""
    if SMM_KEY not in key[2]:
        return key
    return key[0], key[1], tuple(f for f in key[2] if f != SMM_KEY)


_HANDLERS: dict[str, Callable[[ReplayModel, Event], bool]] = {
    "kvm_mmu_get_page": ReplayModel._get_page,
    "kvm_mmu_prepare_zap_page": ReplayModel._zap_page,
    "kvm_mmu_zap_all_fast": ReplayModel._zap_all_fast,
    "mark_mmio_spte": ReplayModel._mark_mmio,
    "check_mmio_spte": ReplayModel._check_mmio,
    "kvm_tdp_mmu_spte_changed": ReplayModel._tdp_changed,
    "kvm_mmu_set_spte": ReplayModel._set_spte,
    "fast_page_fault": ReplayModel._fast_page_fault,
    "kvm_page_fault": ReplayModel._vcpu_event,
    "kvm_exit": ReplayModel._vcpu_event,
    "kvm_entry": ReplayModel._vcpu_event,
}
#: the events whose fields the model reads (an index pass may skip parsing the others)
MODEL_EVENTS = frozenset(_HANDLERS)
#: the guest walk's events: kept, their fields read only when a page is got (lazily)
WALK_EVENTS = frozenset({"kvm_mmu_pagetable_walk", "kvm_mmu_paging_element"})
MAX_WALK_LEVELS = 5  # PT64_ROOT_5LEVEL: elements a walk has at most


def walk_links(
    walk: tuple[Event, ...], root: tuple[int, int] | None
) -> list[tuple[tuple[int, int], tuple[int, int, bool]]]:
    """What one guest walk (``FNAME(walk_addr_generic)``: ``kvm_mmu_pagetable_walk``,
    then a ``kvm_mmu_paging_element`` per level from the top) shows: ((gfn, level) of a
    table, (its parent table's gfn, the parent entry's index, parent is the assumed
    root)).  A present non-leaf entry points to the table of the level below; a huge
    one (PS) ends the walk, and the direct page ``FNAME(fetch)`` makes for it (the gfn
    rounded to the entry's span, as ``base_gfn``) has the entry's table for parent too.
    The top table is CR3's, which no event prints: `root` (the vCPU's last root)."""
    addr = _int(walk[0].fields, "addr")
    links: list[tuple[tuple[int, int], tuple[int, int, bool]]] = []
    table = None if root is None else root[0]
    for n, element in enumerate(walk[1:]):
        pte, level = _int(element.fields, "pte"), _int(element.fields, "level")
        if addr is None or pte is None or level is None or level <= 1 or not pte & PT_PRESENT:
            break
        if n == 0 and (root is None or root[1] != level):
            table = None  # a root of another level than the walk's top: not its root
        huge = bool(pte & PT_PAGE_SIZE)
        gfn = pte_gfn(pte) & ~(gfns_per_spte(level) - 1) if huge else pte_gfn(pte)
        if table is not None:
            links.append(((gfn, level - 1), (table, pt_index(addr, level), n == 0)))
        if huge:
            break
        table = gfn
    return links


#: the events that make and unmake shadow pages: all that `unmatched` needs
PLACING_EVENTS = frozenset(
    {"kvm_mmu_get_page", "kvm_mmu_prepare_zap_page", "kvm_mmu_zap_all_fast",
     "kvm_tdp_mmu_spte_changed"}
)  # fmt: skip


def replay_summary(lines: Iterable[str]) -> dict[str, Any]:
    """`replay --summary`'s object: the counts `summarize` makes, and `unmatched`, the
    zaps a `ReplayModel` fed the events that make and unmake pages could not place (of
    a page the trace never showed, or with no gfn).  A complete trace has none."""
    model = ReplayModel()

    def found(where: int, m: Match[str]) -> None:
        if where != CONTINUED:
            model.apply(event_of(m, lazy=True))

    counts = summarize(lines, found, only=PLACING_EVENTS)
    out = counts.summary()
    by_event = out.pop("by_event")
    return {**out, "unmatched": model.unknown_zaps + model.unkeyed_zaps, "by_event": by_event}
