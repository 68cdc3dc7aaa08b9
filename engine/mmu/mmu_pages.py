"""The shadow pages of one VM: `kvm_mmu_page`, the page hash, `active_mmu_pages`, the
page budget and zapping, slow and fast (docs/kvm.md §4, the fast-zap thread (kvm, 2013)).

- `KvmMmuPage`: gfn + role (the hash key), `spt` (512 sptes), `mmu_valid_gen`,
  `root_count`, `parent_ptes` (the sptes pointing at this page).
- `MmuPages.get_page()` is `kvm_mmu_get_shadow_page()`: find in bucket
  `hash_64(gfn, 12)` skipping obsolete pages (`for_each_valid_sp`), else allocate, link at
  the head of `active_mmu_pages` (newest first) and of the bucket.
- The budget (§4.5): `n_max_mmu_pages` defaults to nr_memslot_pages / 50, at least 64;
  `make_mmu_pages_available()` zaps the oldest pages (25 - avail) when fewer than 5 are
  free, and fails with ENOSPC when none can be freed.
- The fast-zap thread (Takuya Yoshikawa): "postponing some zapping/freeing of obsolete
  pages to make_mmu_pages_available() time ... only needs to free some obsolete pages
  instead of valid pages".  `defer_obsolete_zap` models that: the fast zap only starts
  the new generation, and the budget reclaims obsolete pages (the oldest, by FIFO) as it
  needs.
- Zapping: `zap_all()` is the old `kvm_mmu_zap_all()` (everything under one lock hold);
  `zap_all_fast()` is Xiao Guangrong's fast zap: bump `mmu_valid_gen` (the 2013 counter or
  today's 0/1 flip), then zap obsolete pages oldest first, BATCH_ZAP_PAGES = 10 per lock
  hold.  `lock_holds` records how many pages each hold zapped, which is what the thread
  argues about.

Pages are linked through their sptes: a non-leaf spte holds the child's `spt_pa`, and the
child's `parent_ptes` holds that spte's address ("sptep", an int).  Leaf sptes belong to
the fault path; when a page is zapped its present leaves are handed to `on_leaf_zapped`
(the rmap side drops them).

As a 6.18 mmu.c has it:
- non-leaf sptes are `make_nonleaf_spte()` (MMU-present bit, A bit or the A/D-disabled
  marker), not `child | 0x7` (`link_shadow_page()` → `__link_shadow_page()`);
- `__kvm_mmu_prepare_zap_page()` on a root a vCPU still uses takes it off
  `active_mmu_pages` but leaves it accounted (`kvm_mod_used_mmu_pages(-1)` only runs for
  `!sp->root_count`) and adds nothing to `nr_zapped`; when the last reference goes,
  `mmu_free_root_page()` calls `kvm_mmu_prepare_zap_page()` again: a second
  `kvm_mmu_prepare_zap_page` trace line, another `mmu_shadow_zapped`, and only then the
  page is un-accounted and freed;
- `kvm_zap_obsolete_pages()` yields only when `batch >= BATCH_ZAP_PAGES` *and*
  `cond_resched_rwlock_write()` finds a waiter: `mmu_lock_contended` says whether a vCPU
  waits for mmu_lock (True, the default: a running guest faults), else the whole walk is
  one hold;
- the budget follows `kvm_arch_commit_memory_region()`: every CREATE and DELETE sets it
  to nr_memslot_pages / 50 (at least 64) through `kvm_mmu_change_mmu_pages()`, unless
  userspace asked for a size (`n_requested_mmu_pages`, KVM_SET_NR_MMU_PAGES).
"""

from __future__ import annotations

import errno
from array import array
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..errors import AuditError, KvmError
from .nx_huge_pages import audit_nx_huge_pages, recover_nx_huge_pages, unaccount_nx_huge_page
from .role import PG_LEVEL_4K, KvmMmuPageRole
from .spte import (
    SPTE_CONFIGS,
    SPTE_MMU_PRESENT_MASK,
    SpteConfig,
    make_nonleaf_spte,
    memslot_update_zaps,
)

if TYPE_CHECKING:
    from ..events import Event
    from ..memslots.vm import Vm
    from .params import TdpMmuParams

GOLDEN_RATIO_64 = 0x61C8864680B583EB  # include/linux/hash.h
KVM_MMU_HASH_SHIFT = 12
KVM_NUM_MMU_PAGES = 1 << KVM_MMU_HASH_SHIFT
KVM_MIN_FREE_MMU_PAGES = 5
KVM_REFILL_PAGES = 25
KVM_MIN_ALLOC_MMU_PAGES = 64
KVM_MEMSLOT_PAGES_TO_MMU_PAGES_RATIO = 50
BATCH_ZAP_PAGES = 10
SPTES_PER_PAGE = 512
SPT_BASE = 0x1_0000_0000  # host-physical addresses handed out for spt pages
NONLEAF_PRESENT = 0x7  # R|W|X (EPT) or P|W|U (legacy): the permission bits of a pointer
PT_PAGE_SIZE_MASK = 1 << 7  # a leaf above 4K (2M, 1G)
SPTE_BASE_ADDR_MASK = ((1 << 52) - 1) & ~0xFFF  # bits 12..51: the address in an spte

GEN_ERAS = ("2019", "2013")  # today's 0/1 flip; the 2013 incrementing counter

Emit = Callable[..., None]
LeafZapped = Callable[["KvmMmuPage", int, int], None]  # page, index, old spte


def hash_64(value: int, bits: int) -> int:
    """`hash_64_generic()`: multiply by the golden ratio, keep the top `bits` bits."""
    return ((value * GOLDEN_RATIO_64) & 0xFFFF_FFFF_FFFF_FFFF) >> (64 - bits)


def kvm_page_table_hashfn(gfn: int) -> int:
    return hash_64(gfn, KVM_MMU_HASH_SHIFT)


def default_mmu_pages(nr_memslot_pages: int) -> int:
    """x86's default budget: one shadow page per 50 guest pages, at least 64."""
    return max(nr_memslot_pages // KVM_MEMSLOT_PAGES_TO_MMU_PAGES_RATIO, KVM_MIN_ALLOC_MMU_PAGES)


class KvmMmuPage:
    """`struct kvm_mmu_page` (the parts the model needs)."""

    __slots__ = (
        "gfn",
        "mmu_valid_gen",
        "nx_huge_page_disallowed",
        "parent_ptes",
        "role",
        "root_count",
        "seq",
        "spt",
        "spt_pa",
        "unsync",
        "write_flooding_count",
    )

    def __init__(
        self, gfn: int, role: KvmMmuPageRole, gen: int, seq: int, nonpresent: int = 0
    ) -> None:
        self.gfn = gfn
        self.role = role
        self.mmu_valid_gen = gen
        self.seq = seq  # creation order (the kernel's list position)
        self.spt = array("Q", [nonpresent]) * SPTES_PER_PAGE  # u64 *spt: init_value
        self.spt_pa = SPT_BASE + seq * 4096
        self.root_count = 0
        self.unsync = False
        self.nx_huge_page_disallowed = False  # made because an NX huge page was not allowed
        self.write_flooding_count = 0  # emulated writes since a fault walked through it
        self.parent_ptes: set[int] = set()

    def sptep(self, index: int) -> int:
        return self.spt_pa + 8 * index

    def __repr__(self) -> str:
        return f"<sp gfn {self.gfn:#x} l{self.role.level} gen {self.mmu_valid_gen} #{self.seq}>"


class MmuPages:
    """`kvm->arch`'s shadow-page bookkeeping."""

    def __init__(
        self,
        n_max_mmu_pages: int = KVM_MIN_ALLOC_MMU_PAGES,
        *,
        gen_era: str = "2019",
        defer_obsolete_zap: bool = False,
        emit: Emit | None = None,
        on_leaf_zapped: LeafZapped | None = None,
        cfg: SpteConfig | None = None,
        mmu_lock_contended: bool = True,
    ) -> None:
        if gen_era not in GEN_ERAS:
            raise ValueError(f"unknown mmu_valid_gen era {gen_era!r}: {', '.join(GEN_ERAS)}")
        self.gen_era = gen_era
        self.cfg = cfg or SPTE_CONFIGS["ept"]
        # what a non-present spte holds: SHADOW_NONPRESENT_VALUE (6.10+) or 0 (before)
        self.nonpresent = self.cfg.shadow_nonpresent_value
        self.defer_obsolete_zap = defer_obsolete_zap
        self.mmu_lock_contended = mmu_lock_contended
        self.n_requested_mmu_pages = 0  # KVM_SET_NR_MMU_PAGES; 0: the default budget
        self.mmu_valid_gen = 0
        self.n_max_mmu_pages = n_max_mmu_pages
        self.n_used_mmu_pages = 0
        self.mmu_page_hash: list[list[KvmMmuPage]] = [[] for _ in range(KVM_NUM_MMU_PAGES)]
        self.active_mmu_pages: dict[int, KvmMmuPage] = {}  # by seq: oldest first
        self.invalid_roots: dict[int, KvmMmuPage] = {}  # zapped while a vCPU used them
        self.possible_nx_huge_pages: dict[int, KvmMmuPage] = {}  # by seq: nx_huge_pages.py
        self.rezap_freed_roots = True  # put_root(): mmu_free_root_page zaps (traces) again
        self._by_pa: dict[int, KvmMmuPage] = {}
        self._seq = 0
        self.lock_holds: list[int] = []  # pages zapped per mmu_lock hold, last zap
        self.stat = dict.fromkeys(
            (
                *("mmu_cache_miss", "mmu_shadow_zapped", "mmu_recycled"),
                *("max_mmu_page_hash_collisions", "mmu_unsync", "mmu_pte_write"),
                *("mmu_flooded", "mmu_pde_zapped", "nx_lpage_splits"),
            ),
            0,
        )
        self._emit = emit or (lambda name, **fields: None)
        self._on_leaf_zapped = on_leaf_zapped or (lambda sp, index, spte: None)
        # `account_shadowed()` of a new page with gptes, before its `kvm_mmu_get_page`,
        # and `unaccount_shadowed()` of a zapped one (the shadow MMU sets both)
        self.on_account_shadowed: Callable[[KvmMmuPage], None] | None = None
        self.on_unaccount_shadowed: Callable[[KvmMmuPage], None] | None = None

    # -- lookup and creation ------------------------------------------------------

    def is_obsolete(self, sp: KvmMmuPage) -> bool:
        return bool(sp.role.invalid) or sp.mmu_valid_gen != self.mmu_valid_gen

    def find(self, gfn: int, role: KvmMmuPageRole) -> KvmMmuPage | None:
        """`kvm_mmu_find_shadow_page()`: the valid page with this gfn and role word."""
        collisions, word = 0, role.word
        found = None
        for sp in self.mmu_page_hash[kvm_page_table_hashfn(gfn)]:
            if self.is_obsolete(sp):
                continue
            if sp.gfn != gfn:
                collisions += 1
                continue
            if sp.role.word == word:
                found = sp
                break
        self.stat["max_mmu_page_hash_collisions"] = max(
            self.stat["max_mmu_page_hash_collisions"], collisions
        )
        if found is None:
            self.stat["mmu_cache_miss"] += 1
        return found

    def get_page(self, gfn: int, role: KvmMmuPageRole) -> tuple[KvmMmuPage, bool]:
        """`kvm_mmu_get_shadow_page()`: (page, created); emits `kvm_mmu_get_page` after
        the page is made (`__kvm_mmu_get_shadow_page()`, 6.18 mmu.c: a new page with
        gptes is `account_shadowed()` inside `kvm_mmu_alloc_shadow_page()`, before the
        trace)."""
        sp = self.find(gfn, role)
        created = sp is None
        if sp is None:
            sp = self._alloc(gfn, role)
        self._emit_sp("kvm_mmu_get_page", sp, created=created)
        return sp, created

    def _alloc(self, gfn: int, role: KvmMmuPageRole) -> KvmMmuPage:
        sp = KvmMmuPage(gfn, role, self.mmu_valid_gen, self._seq, self.nonpresent)
        self._seq += 1
        self.active_mmu_pages[sp.seq] = sp
        self.mmu_page_hash[kvm_page_table_hashfn(gfn)].insert(0, sp)  # hlist_add_head
        self._by_pa[sp.spt_pa] = sp
        self.n_used_mmu_pages += 1
        if not role.direct and self.on_account_shadowed is not None:
            self.on_account_shadowed(sp)  # sp_has_gptes(): account_shadowed()
        return sp

    def page_of_sptep(self, sptep: int) -> KvmMmuPage:
        """`sptep_to_sp()`."""
        return self._by_pa[sptep & ~0xFFF]

    def page_by_pa(self, pa: int) -> KvmMmuPage | None:
        """The page whose spt is at host-physical `pa` (`spte_to_child_sp()`), if any."""
        return self._by_pa.get(pa)

    def link(self, parent: KvmMmuPage, index: int, child: KvmMmuPage) -> None:
        """`link_shadow_page()`: parent's spte points at the child page, built by
        `make_nonleaf_spte(sp->spt, sp_ad_disabled(sp))` (6.18 spte.c)."""
        parent.spt[index] = self.nonleaf_spte(child)
        child.parent_ptes.add(parent.sptep(index))

    def nonleaf_spte(self, child: KvmMmuPage) -> int:
        return make_nonleaf_spte(self.cfg, child.spt_pa, bool(child.role.ad_disabled))

    def child_at(self, parent: KvmMmuPage, index: int) -> KvmMmuPage | None:
        """The page a non-leaf spte points at (None for leaves: 4K, or PT_PAGE_SIZE)."""
        spte = parent.spt[index]
        if not spte & SPTE_MMU_PRESENT_MASK or parent.role.level == 1 or spte & PT_PAGE_SIZE_MASK:
            return None
        return self._by_pa.get(spte & SPTE_BASE_ADDR_MASK)

    def pages(self) -> Iterator[KvmMmuPage]:
        """`active_mmu_pages`, oldest first (the kernel's reverse walk)."""
        return iter(list(self.active_mmu_pages.values()))

    # -- zapping --------------------------------------------------------------------

    def prepare_zap(self, sp: KvmMmuPage) -> int:
        """`__kvm_mmu_prepare_zap_page()`: zap the unsync pages below first
        (`mmu_zap_unsync_children()`), unlink from parents and children, drop leaves,
        leave the hash and the active list, mark the role invalid.  Returns `nr_zapped`:
        those pages plus 1, or plus 0 for a root still in use (it stays accounted until
        `put_root` frees it)."""
        self._emit_sp("kvm_mmu_prepare_zap_page", sp)
        self.stat["mmu_shadow_zapped"] += 1
        if sp.role.invalid:  # mmu_free_root_page(): the last user of a zapped root left
            self.invalid_roots.pop(sp.seq, None)
            self.n_used_mmu_pages -= 1
            del self._by_pa[sp.spt_pa]
            return 1
        nr_zapped = self.mmu_zap_unsync_children(sp)
        if sp.nx_huge_page_disallowed:
            unaccount_nx_huge_page(self.possible_nx_huge_pages, self.stat, sp)
        if not sp.role.direct and self.on_unaccount_shadowed is not None:
            self.on_unaccount_shadowed(sp)  # sp_has_gptes(): unaccount_shadowed()
        if sp.unsync:  # kvm_unlink_unsync_page()
            sp.unsync = False
            self.stat["mmu_unsync"] -= 1
        for sptep in list(sp.parent_ptes):
            parent = self.page_of_sptep(sptep)
            parent.spt[(sptep & 0xFFF) // 8] = self.nonpresent
        sp.parent_ptes.clear()
        nonpresent = self.nonpresent
        for index, spte in enumerate(sp.spt):
            if spte == nonpresent:
                continue
            child = self.child_at(sp, index)
            if child is not None:
                child.parent_ptes.discard(sp.sptep(index))
            else:
                self._on_leaf_zapped(sp, index, spte)
            sp.spt[index] = nonpresent
        self._unlink(sp)
        sp.role = sp.role.invalidated()
        if sp.root_count:
            self.invalid_roots[sp.seq] = sp  # freed when the last vCPU lets go
            return nr_zapped
        self.n_used_mmu_pages -= 1
        del self._by_pa[sp.spt_pa]
        return nr_zapped + 1

    def mmu_zap_unsync_children(self, parent: KvmMmuPage) -> int:
        """`mmu_zap_unsync_children()` (6.18 mmu.c), the first step of
        `__kvm_mmu_prepare_zap_page()`: every unsync page below `parent` is
        `kvm_mmu_prepare_zap_page()`d before `parent` lets go of its children, since an
        unsync page cut off from the roots could never be synced again.  The pages are
        `mmu_unsync_walk()`'s: depth first in index order (`unsync_child_bitmap`), only
        level-1 pages being unsync, each once.  Returns how many were zapped."""
        if parent.role.level == PG_LEVEL_4K or not self.stat["mmu_unsync"]:
            return 0  # nothing unsync anywhere: every unsync_child_bitmap is empty
        found: dict[int, KvmMmuPage] = {}

        def mmu_unsync_walk(sp: KvmMmuPage) -> None:
            for index in range(SPTES_PER_PAGE):
                child = self.child_at(sp, index)
                if child is None:
                    continue
                if child.unsync:
                    found.setdefault(child.seq, child)
                elif child.role.level > PG_LEVEL_4K:
                    mmu_unsync_walk(child)

        mmu_unsync_walk(parent)
        return sum(self.prepare_zap(child) for child in found.values())

    def _unlink(self, sp: KvmMmuPage) -> None:
        del self.active_mmu_pages[sp.seq]
        self.mmu_page_hash[kvm_page_table_hashfn(sp.gfn)].remove(sp)

    def put_obsolete_roots(self, roots: dict[int, KvmMmuPage]) -> int:
        """`kvm_mmu_free_obsolete_roots()` for a vCPU -> root map: each vCPU drops its
        obsolete root (`put_root`); returns how many."""
        obsolete = [vcpu for vcpu, root in roots.items() if self.is_obsolete(root)]
        for vcpu in obsolete:
            self.put_root(roots.pop(vcpu))
        return len(obsolete)

    def put_root(self, sp: KvmMmuPage) -> None:
        """A vCPU drops its reference (`mmu_free_root_page()`): a zapped root is zapped
        again, and freed, with the last one: traced and counted in mmu_shadow_zapped a
        second time, and only then un-accounted.  `rezap_freed_roots = False` frees it
        silently (un-accounted all the same)."""
        sp.root_count -= 1
        if sp.root_count == 0 and sp.seq in self.invalid_roots:
            if self.rezap_freed_roots:
                self.prepare_zap(sp)
            else:
                del self.invalid_roots[sp.seq]
                self.n_used_mmu_pages -= 1
                del self._by_pa[sp.spt_pa]

    def zap_all(self) -> int:
        """The old `kvm_mmu_zap_all()`: every page, one mmu_lock hold."""
        zapped = 0
        for sp in self.pages():
            if sp.seq in self.active_mmu_pages:
                zapped += self.prepare_zap(sp)
        self.lock_holds = [zapped]
        return zapped

    def zap_all_fast(self) -> int:
        """`kvm_mmu_zap_all_fast()`: a new generation, then the obsolete pages, oldest
        first, at most BATCH_ZAP_PAGES per lock hold."""
        if self.defer_obsolete_zap and self.gen_era == "2019":
            # With a 0/1 flip, pages left over from the generation before last would turn
            # valid again: the kernel zaps every obsolete page before it lets go of
            # slots_lock, and a deferred zap must at least clear them before flipping.
            self._zap_obsolete()
        used = self.n_used_mmu_pages
        # trace_kvm_mmu_zap_all_fast() comes before the toggle: it prints the old generation
        self._emit("kvm_mmu_zap_all_fast", mmu_valid_gen=self.mmu_valid_gen, mmu_used_pages=used)
        self.mmu_valid_gen = (
            self.mmu_valid_gen + 1 if self.gen_era == "2013" else (0 if self.mmu_valid_gen else 1)
        )
        self.lock_holds = []
        if self.defer_obsolete_zap:
            return 0  # the budget reclaims them later (the fast-zap thread)
        return self._zap_obsolete()

    def _zap_obsolete(self) -> int:
        """`kvm_zap_obsolete_pages()` (6.18): oldest first; once `batch >= BATCH_ZAP_PAGES`
        the lock is dropped only if `cond_resched_rwlock_write()` finds a waiter
        (`mmu_lock_contended`).  `batch` adds `nr_zapped`: roots in use add nothing."""
        batch = zapped = 0
        for sp in self.pages():
            if not self.is_obsolete(sp):
                break  # FIFO: nothing obsolete is newer than a valid page
            if sp.seq not in self.active_mmu_pages:
                continue  # unlinked by an earlier zap in this walk
            if batch >= BATCH_ZAP_PAGES and self.mmu_lock_contended:
                self.lock_holds.append(batch)  # cond_resched_rwlock_write() yielded
                batch = 0
            nr_zapped = self.prepare_zap(sp)
            batch += nr_zapped
            zapped += nr_zapped
        if batch:
            self.lock_holds.append(batch)
        return zapped

    def zap_oldest(self, nr_to_zap: int) -> int:
        """`kvm_mmu_zap_oldest_mmu_pages()`: oldest first (so obsolete pages first: they
        are older than every valid page), skipping pages in use as roots."""
        zapped = 0
        for sp in self.pages():
            if zapped >= nr_to_zap:
                break
            if sp.root_count or sp.seq not in self.active_mmu_pages:
                continue
            zapped += self.prepare_zap(sp)
        self.stat["mmu_recycled"] += zapped
        return zapped

    def available(self) -> int:
        return max(self.n_max_mmu_pages - self.n_used_mmu_pages, 0)

    def make_mmu_pages_available(self) -> None:
        """Keep at least KVM_MIN_FREE_MMU_PAGES free, refilling to KVM_REFILL_PAGES."""
        avail = self.available()
        if avail >= KVM_MIN_FREE_MMU_PAGES:
            return
        self.zap_oldest(KVM_REFILL_PAGES - avail)
        if not self.available():
            raise KvmError(errno.ENOSPC, "no shadow page can be reclaimed", "page fault")

    def commit_memory_region(self, change: str, nr_memslot_pages: int) -> None:
        """`kvm_arch_commit_memory_region()` (6.18 x86.c): a CREATE or DELETE resizes the
        default budget, unless userspace set one (`n_requested_mmu_pages`)."""
        if not self.n_requested_mmu_pages and change in ("KVM_MR_CREATE", "KVM_MR_DELETE"):
            self.change_mmu_pages(default_mmu_pages(nr_memslot_pages))

    def set_nr_mmu_pages(self, goal: int) -> None:
        """KVM_SET_NR_MMU_PAGES (`kvm_vm_ioctl_set_nr_mmu_pages()`)."""
        if goal < KVM_MIN_ALLOC_MMU_PAGES:
            raise KvmError(
                errno.EINVAL, f"{goal} < KVM_MIN_ALLOC_MMU_PAGES", "KVM_SET_NR_MMU_PAGES"
            )
        self.change_mmu_pages(goal)
        self.n_requested_mmu_pages = goal

    def change_mmu_pages(self, goal: int) -> None:
        """`kvm_mmu_change_mmu_pages()`: shrink by zapping the oldest, then set the max."""
        if self.n_used_mmu_pages > goal:
            self.zap_oldest(self.n_used_mmu_pages - goal)
            goal = self.n_used_mmu_pages
        self.n_max_mmu_pages = goal

    # -- events and audit ---------------------------------------------------------

    def emit_sp(self, name: str, sp: KvmMmuPage) -> None:
        """A shadow-page tracepoint (`KVM_MMU_PAGE_PRINTK`) for `sp` as it is now."""
        self._emit_sp(name, sp)

    def _emit_sp(self, name: str, sp: KvmMmuPage, **extra: bool) -> None:
        role = sp.role
        self._emit(
            name,
            gen=sp.mmu_valid_gen,
            gfn=sp.gfn,
            level=role.level,
            gpte_bytes=4 if role.has_4_byte_gpte else 8,
            quadrant=role.quadrant,
            direct=bool(role.direct),
            access=role.access,
            invalid=bool(role.invalid),
            nxe=bool(role.efer_nx),
            ad=not role.ad_disabled,
            root_count=sp.root_count,
            unsync=sp.unsync,
            **extra,
        )

    def audit(self) -> None:
        """Hash and list agree; creation order kept; links consistent both ways; no
        obsolete page reachable from a valid page; the used count is right."""
        hashed = [sp for bucket in self.mmu_page_hash for sp in bucket]
        if {sp.seq for sp in hashed} != set(self.active_mmu_pages) or len(hashed) != len(
            self.active_mmu_pages
        ):
            raise AuditError("mmu: the page hash and active_mmu_pages disagree")
        if self.n_used_mmu_pages != len(self.active_mmu_pages) + len(self.invalid_roots):
            raise AuditError("mmu: n_used_mmu_pages is off")
        if any(not sp.root_count or not sp.role.invalid for sp in self.invalid_roots.values()):
            raise AuditError("mmu: a zapped root nobody uses is still accounted")
        nx_wrong = audit_nx_huge_pages(self.possible_nx_huge_pages, self.stat)
        if nx_wrong is not None or any(
            seq not in self.active_mmu_pages for seq in self.possible_nx_huge_pages
        ):
            raise AuditError(f"mmu: {nx_wrong or 'a zapped page is on possible_nx_huge_pages'}")
        if list(self.active_mmu_pages) != sorted(self.active_mmu_pages):
            raise AuditError("mmu: active_mmu_pages out of creation order")
        seen_valid = False
        for sp in self.active_mmu_pages.values():
            if sp.role.invalid:
                raise AuditError(f"mmu: {sp} is invalid but still active")
            if seen_valid and self.is_obsolete(sp):
                raise AuditError(f"mmu: obsolete {sp} is newer than a valid page")
            seen_valid = seen_valid or not self.is_obsolete(sp)
            self._audit_links(sp)

    def _audit_links(self, sp: KvmMmuPage) -> None:
        for sptep in sp.parent_ptes:
            parent = self._by_pa.get(sptep & ~0xFFF)
            if parent is None or parent.spt[(sptep & 0xFFF) // 8] != self.nonleaf_spte(sp):
                raise AuditError(f"mmu: parent pte {sptep:#x} of {sp} does not point at it")
        for index in range(SPTES_PER_PAGE):
            child = self.child_at(sp, index)
            if child is not None and sp.sptep(index) not in child.parent_ptes:
                raise AuditError(f"mmu: {child} lacks parent pte {sp.sptep(index):#x}")
            if child is not None and not self.is_obsolete(sp) and self.is_obsolete(child):
                raise AuditError(f"mmu: obsolete {child} reachable from valid {sp}")


def kvm_recover_mmu_nx_huge_pages(
    vm: Vm,
    pages: MmuPages,
    params: TdpMmuParams,
    zapped: Callable[[], None] | None = None,
) -> int:
    """`kvm_recover_nx_huge_pages(kvm, KVM_SHADOW_MMU)` for `kvm_mmu_page`s: each page
    unaccounted (6.18; before, only one whose gfn lies in a slot that logs dirty pages),
    the ones outside such a slot `kvm_mmu_prepare_zap_page()`d under mmu_lock held for
    write; `zapped` runs after each zap."""

    def dirty_tracked(sp: KvmMmuPage) -> bool:
        slot = vm.memslot_set(sp.role.smm).gfn_tree.search(sp.gfn)
        return slot is not None and slot.dirty_logging

    def zap(sp: KvmMmuPage) -> bool:
        pages.prepare_zap(sp)
        if zapped is not None:
            zapped()
        return True

    ratio = params.nx_huge_pages_recovery_ratio
    return recover_nx_huge_pages(
        pages.possible_nx_huge_pages, pages.stat, ratio, dirty_tracked, zap,
        params.nx_recovery_era,
    )  # fmt: skip


def shadow_mmu_memslot_update(event: Event, vm: Vm, pages: MmuPages) -> None:
    """The shadow MMU's (direct or indirect pages) answer to a memslot event: a DELETE/MOVE
    flush (`kvm_arch_flush_shadow_memslot`) or an MMIO generation wrap
    (`kvm_mmu_invalidate_mmio_sptes`) zaps everything, fast (`memslot_update_zaps`); a
    CREATE or DELETE that went through resizes the page budget
    (`kvm_arch_commit_memory_region`)."""
    fields = event.fields
    if event.name == "kvm_set_user_memory_region":
        if fields.get("ret") == 0:
            pages.commit_memory_region(str(fields.get("change", "")), vm.nr_memslot_pages)
        return
    if memslot_update_zaps(event.name, int(fields.get("gen", 0)), vm.address_spaces):
        pages.zap_all_fast()
