"""Shadow paging (EPT off): KVM shadows the guest's own page tables (the memslot-search
and PTE_LIST_EXT threads).

`ShadowMmu.page_fault(vcpu, cr3, gva, write, user)` follows `kvm_mmu_page_fault()` ->
`FNAME(page_fault)` (arch/x86/kvm/mmu/paging_tmpl.h, mmu.c):
- a cached MMIO spte, found by a shadow walk of the gva, whose generation is current:
  `handle_mmio_page_fault()`, RET_PF_EMULATE whatever the access, with no guest walk, no
  memslot search and no `pf_taken` (`addr` is the gva for indirect MMUs);
- `FNAME(walk_addr)` (`GuestPageTables.walk`), or with `vtlb=True` a vtlb hit when the
  shadow path to the last-level page exists (a vtlb entry holds a gfn, not the table
  gfns that new shadow pages would need);
- a guest #PF is "injected" (`kvm_inject_emulated_page_fault`: `injected[vcpu]` = (gva,
  pferr), stat `pf_guest`) and the result is RET_PF_RETRY, which nothing else returns;
- a present write fault on a write-tracked gfn (an upper-level table) is
  RET_PF_WRITE_PROTECTED, emulated (`page_fault_handle_page_track()`).  A write to a
  read-only slot and an MMIO gfn that cannot be cached are RET_PF_EMULATE before any
  shadow page is touched (`kvm_mmu_faultin_pfn()`, `kvm_handle_noslot_fault()`);
- then, with mmu_lock, `make_mmu_pages_available()` and `FNAME(fetch)`: from the root
  down to the guest leaf's level (`walker.level`), the indirect page of each guest
  table (`kvm_mmu_get_child_sp(table_gfn, direct=0, walker->pt_access[])`), keyed by
  the table's gfn and role; then `kvm_mmu_hugepage_adjust()` and, below a guest 2M/1G
  page, direct pages keyed by the base gfn down to the goal level (huge.py: the
  host's backing, `disallow_lpage`, NX huge pages).  A new indirect page is
  `account_shadowed()`: its gfn disallows huge pages around it and the leaves mapping
  it are write-protected, at every level;
- the leaf, `mmu_set_spte` (leaf.py): an MMIO spte or a spte of the slot's
  host page at the goal level, on the gfn's rmap of that level.
A guest pte store into a shadowed table unsyncs a level-1 table or is
`kvm_mmu_track_write()` (write flooding included); a CR3 load syncs the root's unsync
pages, INVLPG one spte (`shadow_sync`).  `cr3_load` = `kvm_mmu_new_pgd()` +
`kvm_mmu_load()` (ref-counted roots; the `prev_roots` cache: roots.py);
`invlpg` = `kvm_mmu_invlpg()`.

`FNAME(pte_prefetch)` (prefetch.py) runs after every fault that set a spte but
RET_PF_SPURIOUS, as the kernel always does; `pte_prefetch=False` turns it off
(the kernel has no switch), kept for comparisons.  Dirty logging is
`dirty_log.DirtyLogging`.
`params` are the kvm module parameters the direct MMU takes too (`nx_huge_pages`, its
recovery ratio, `host_level`); `huge_pages=False` maps 4K leaves only (the
kernel has no switch), kept for comparisons.
Simplified: `drop_process` zaps the exited process's shadow pages at
once (KVM leaves them to write flooding, reuse or recycling); guest kernel table stores
are not counted as exits; CR0.WP=1, no SMEP/SMAP/PKU.
No `fast_page_fault()`, as in the kernel: 6.18 `FNAME(page_fault)` (paging_tmpl.h) goes
from the guest walk to `kvm_mmu_faultin_pfn()` and `FNAME(fetch)` under mmu_lock; only
`direct_page_fault()` (a guest without paging; EPT/NPT) and `kvm_tdp_mmu_page_fault()`
call the fast path ("the gfn is not stable for indirect shadow page", fast_pf.py).  So a
write to a page dirty logging protected takes the slow path here, and the kernel under
kvm-pvm reports `pf_fast` 0 (`mmuscope kvm dirty --compare`).
"""

from __future__ import annotations

from collections.abc import Callable

from ...events import Event, FieldValue
from ...memslots.memslot import MemorySlot
from ...memslots.vm import Vm
from ..guest import page_tables as gpt
from ..guest.page_tables import GuestPageTables, GuestWalk, pt_index
from ..mapping_level import KvmPageFault, kvm_pages_per_hpage
from ..mmio_info import VcpuMmioInfo
from ..mmu_pages import (
    KvmMmuPage,
    MmuPages,
    default_mmu_pages,
    kvm_page_table_hashfn,
    shadow_mmu_memslot_update,
)
from ..params import TdpMmuParams
from ..rmap import ERAS, KvmRmapHead
from ..role import ACC_ALL, ACC_WRITE_MASK, PG_LEVEL_4K, PT64_ROOT_4LEVEL, KvmMmuPageRole
from ..spte import (
    KVM_MAX_HUGEPAGE_LEVEL,
    PT_WRITABLE_MASK,
    SPTE_CONFIGS,
    RetPf,
    SpteConfig,
    check_mmio_spte_traced,
    get_mmio_spte_access,
    get_mmio_spte_gfn,
    is_mmio_spte,
    is_shadow_present_pte,
    kvm_mmio_fields,
    spte_requested_fields,
)
from . import huge as shadow_huge
from . import sync as shadow_sync
from .huge import ShadowHuge, ShadowLpageInfo
from .leaf import set_mmio_spte, set_spte, spte_index
from .rmap import ShadowRmaps, Translation
from .roots import fast_pgd_switch
from .vtlb import VcpuVtlbs

PAGE_SHIFT = 12
STATS = (
    *("pf_taken", "pf_fixed", "pf_emulate", "pf_spurious", "pf_mmio_spte_created", "pf_guest"),
    *("wrprot_sptes", "unprotect_zapped", "rmap_recycled", "synced_pages", "synced_sptes"),
    "prev_roots_hits",
)


class ShadowMmu(ShadowHuge, ShadowRmaps):
    """One VM's shadow MMU: guest tables, indirect shadow pages, leaves, rmaps, vtlb."""

    def __init__(
        self,
        vm: Vm,
        cfg: SpteConfig | None = None,
        *,
        pte_list_era: str = "6.4",
        gen_era: str = "2019",
        guest: GuestPageTables | None = None,
        vtlb: bool = False,
        vtlb_policy: str = "round-robin",
        emit: Callable[[Event], None] | None = None,
        pte_prefetch: bool = True,
        unsync: bool = True,
        mmio_info_cache: bool = True,
        prev_roots: bool = True,
        params: TdpMmuParams | None = None,
        huge_pages: bool = True,
    ) -> None:
        self.vm = vm
        self.params = params or TdpMmuParams(tdp_mmu=False)
        self.huge_pages = huge_pages
        self.nx = self.params.nx_huge_page_workaround_enabled  # is_nx_huge_page_enabled()
        self.levels = ShadowLpageInfo(self.params.host_level, self.nx)
        self.cfg = cfg or SPTE_CONFIGS["shadow"]
        if self.cfg.ept:
            raise ValueError("shadow paging uses the legacy PTE format: pick a non-EPT config")
        self.era = ERAS[pte_list_era]
        self.unsync_enabled = unsync  # False: before 2.6.27, every shadowed table tracked
        self.mmio_info = VcpuMmioInfo(mmio_info_cache)  # False: before 3.1
        self._listener = emit
        self.guest = guest or GuestPageTables.in_memslot(vm, emit=emit)
        self.pages = MmuPages(
            default_mmu_pages(vm.nr_memslot_pages),
            gen_era=gen_era,
            emit=self._emit,
            on_leaf_zapped=self._drop_leaf,
            cfg=self.cfg,
        )
        self.pages.on_unaccount_shadowed = self.levels.unaccount
        self.rmaps: dict[tuple[int, int, int], dict[int, KvmRmapHead]] = {}
        self.shadowed_translation: dict[int, Translation] = {}  # by sptep
        self.roots: dict[int, KvmMmuPage] = {}
        self.prev_roots_enabled = prev_roots  # False: before 4.19, one root per vCPU
        self.prev_roots: dict[int, list[KvmMmuPage | None]] = {}  # vcpu -> LRU, newest 0
        self.cr3s: dict[int, int] = {}
        self.vtlbs = VcpuVtlbs(vtlb_policy) if vtlb else None
        self.injected: dict[int, tuple[int, int]] = {}  # vcpu -> (gva, pferr), last #PF
        self.stat = dict.fromkeys(STATS, 0)
        self.pte_prefetch = pte_prefetch  # FNAME(pte_prefetch) after a fixed fault (prefetch.py)
        vm.subscribe(self._memslots_changed)
        self.guest.subscribe(self._track_write, self._guest_tlb_flush)

    def _emit(self, name: str, **fields: FieldValue) -> None:
        if self._listener is not None:
            self._listener(Event(name, fields))

    def _memslots_changed(self, event: Event) -> None:
        shadow_mmu_memslot_update(event, self.vm, self.pages)

    def free_obsolete_roots(self) -> int:
        """KVM_REQ_MMU_FREE_OBSOLETE_ROOTS as each vCPU handles it at its next entry
        (`kvm_mmu_free_obsolete_roots()`): drop an obsolete root; returns how many."""
        freed = self.pages.put_obsolete_roots(self.roots)
        for cached in self.prev_roots.values():
            for i, prev in enumerate(cached):
                if prev is not None and self.pages.is_obsolete(prev):
                    cached[i] = None
                    self.pages.put_root(prev)
                    freed += 1
        return freed

    def zap_all_fast(self) -> int:
        return self.pages.zap_all_fast()

    # -- roots, CR3 and the TLB ------------------------------------------------------

    def cr3_load(self, vcpu: int, cr3: int) -> KvmMmuPage:
        """MOV to CR3 (`kvm_mmu_new_pgd()`): the current root or one of the vCPU's three
        `prev_roots` if usable for `cr3` (`fast_pgd_switch()`), else a new one; flush the
        vtlb and sync the root's unsync pages (KVM_REQ_MMU_SYNC → `kvm_mmu_sync_roots()`)."""
        self.cr3s[vcpu] = cr3
        fast_pgd_switch(self, vcpu, cr3)
        if self.vtlbs is not None:
            self.vtlbs[vcpu].flush()
        self.pages.make_mmu_pages_available()
        root = self._root(vcpu)
        self.mmio_info.clear(vcpu)  # kvm_mmu_sync_roots(): vcpu_clear_mmio_info(ANY)
        shadow_sync.sync_roots(self, root)
        return root

    def invlpg(self, vcpu: int, gva: int) -> None:
        """`kvm_mmu_invlpg()` → `kvm_mmu_invalidate_addr()`: sync the gva's spte in each
        unsync page on its path, then the vtlb."""
        root = self.roots.get(vcpu)
        if root is not None and not self.pages.is_obsolete(root):
            shadow_sync.invalidate_addr(self, root, gva)
        self.mmio_info.clear(vcpu, gva)
        if self.vtlbs is not None:
            self.vtlbs[vcpu].invlpg(gva)

    def _guest_tlb_flush(self, cr3: int, gva: int | None) -> None:
        """The guest changed a present pte of `cr3`: INVLPG or CR3 reload where it runs."""
        vcpus = [v for v, c in self.cr3s.items() if c == cr3]
        for vcpu in vcpus:
            root = self.roots.get(vcpu)
            if root is None or self.pages.is_obsolete(root):
                continue
            self.mmio_info.clear(vcpu, gva)
            if gva is None:
                shadow_sync.sync_roots(self, root)
            else:
                shadow_sync.invalidate_addr(self, root, gva)
        if self.vtlbs is not None:
            self.vtlbs.guest_flush(vcpus, gva)

    def _root_role(self, as_id: int) -> KvmMmuPageRole:
        return KvmMmuPageRole(level=PT64_ROOT_4LEVEL, direct=0, access=ACC_ALL, smm=as_id)

    def _put_root(self, vcpu: int) -> None:
        root = self.roots.pop(vcpu, None)
        if root is not None:
            self.pages.put_root(root)

    def _root(self, vcpu: int) -> KvmMmuPage:
        """`kvm_mmu_load()`: the root for the vCPU's CR3, made again when obsolete."""
        as_id = self.vm.vcpu(vcpu).as_id
        root = self.roots.get(vcpu)
        if root is not None and not self.pages.is_obsolete(root) and root.role.smm == as_id:
            return root
        self._put_root(vcpu)
        root = self._get_page(self.cr3s[vcpu], self._root_role(as_id))
        root.root_count += 1
        self.roots[vcpu] = root
        return root

    def drop_process(self, cr3: int) -> list[int]:
        """The process exits: unload it, tear its tables down (each pte store is
        tracked), zap the pages that shadowed them; returns the freed table gfns."""
        for vcpu in [v for v, c in self.cr3s.items() if c == cr3]:
            self._put_root(vcpu)
            del self.cr3s[vcpu]
        tables = self.guest.exit(cr3)
        for gfn in tables:
            self.unprotect_page(gfn)
        return tables

    # -- shadow pages of a gfn ---------------------------------------------------------

    def _get_page(self, gfn: int, role: KvmMmuPageRole) -> KvmMmuPage:
        sp, created = self.pages.get_page(gfn, role)
        if created and not role.direct:
            self._account_shadowed(sp)
        return sp

    def shadow_pages_of(self, gfn: int, as_id: int | None = None) -> list[KvmMmuPage]:
        """`for_each_gfn_valid_sp_with_gptes()`: the valid pages shadowing table `gfn`."""
        bucket = self.pages.mmu_page_hash[kvm_page_table_hashfn(gfn)]
        return [
            sp
            for sp in bucket
            if sp.gfn == gfn and not sp.role.direct and not self.pages.is_obsolete(sp)
            if as_id is None or sp.role.smm == as_id
        ]

    def _account_shadowed(self, sp: KvmMmuPage) -> None:
        """`account_shadowed()`: `kvm_mmu_gfn_disallow_lpage()` (huge.py) and
        write-protect every leaf mapping the table's gfn (an upper-level page also
        write-tracks it: `shadow_sync.write_tracked`)."""
        self.levels.account(sp)
        wrprot = self.write_protect_gfn(sp.role.smm, sp.gfn)
        self._emit("account_shadowed", gfn=sp.gfn, level=sp.role.level, wrprot=wrprot)

    def write_protect_gfn(self, as_id: int, gfn: int) -> int:
        """`kvm_mmu_slot_gfn_write_protect(kvm, slot, gfn, PG_LEVEL_4K)`: clear W on
        every leaf mapping `gfn`, 4K up to 1G (a huge leaf over it too)."""
        wrprot = 0
        for sptep in self._rmap_of(as_id, gfn, range(PG_LEVEL_4K, KVM_MAX_HUGEPAGE_LEVEL + 1)):
            holder, index = self.pages.page_of_sptep(sptep), spte_index(sptep)
            if holder.spt[index] & PT_WRITABLE_MASK:
                holder.spt[index] &= ~(PT_WRITABLE_MASK | self.cfg.shadow_mmu_writable_mask)
                wrprot += 1
        self.stat["wrprot_sptes"] += wrprot
        return wrprot

    def unprotect_page(self, gfn: int) -> int:
        """Zap every page shadowing `gfn`: `__kvm_mmu_unprotect_gfn_and_retry()` today
        (formerly `kvm_mmu_unprotect_page()`)."""
        zapped = 0
        for sp in self.shadow_pages_of(gfn):
            if sp.seq in self.pages.active_mmu_pages:
                self.pages.prepare_zap(sp)
                zapped += 1
        self.stat["unprotect_zapped"] += zapped
        self._emit("kvm_mmu_unprotect_page", gfn=gfn, zapped=zapped)
        return zapped

    def _track_write(self, table_gfn: int, index: int, old: int, new: int) -> None:
        """A guest pte store: unsync, or `kvm_mmu_track_write()` (`shadow_sync`)."""
        shadow_sync.guest_store(self, table_gfn, index, new)

    # -- the fault ---------------------------------------------------------------------

    def page_fault(
        self,
        vcpu: int,
        cr3: int,
        gva: int,
        write: bool = False,
        user: bool = False,
        fetch: bool = False,
    ) -> RetPf:
        """A #PF taken by the vCPU running `cr3` (a CR3 load first if it runs another).

        Order of `kvm_mmu_page_fault()` → `FNAME(page_fault)` (6.18): a current MMIO
        spte is emulated at once (RSVD path, not counted in `pf_taken` or `pf_emulate`,
        whatever the access: the emulator checks permissions); then `pf_taken`, the guest
        walk, the memslot, `kvm_mmu_faultin_pfn()` (no slot with caching off, or a write to
        a read-only slot: RET_PF_EMULATE before any shadow page is touched), and only then,
        with mmu_lock held, `make_mmu_pages_available()` and `FNAME(fetch)`.  `fetch`:
        an instruction fetch (`fault->exec`: NX huge pages)."""
        if self.cr3s.get(vcpu) != cr3:
            self.cr3_load(vcpu, cr3)
        root = self._root(vcpu)
        sp = root  # the lockless shadow walk of get_mmio_spte()
        while (child := self.pages.child_at(sp, pt_index(gva, sp.role.level))) is not None:
            sp = child
        index = pt_index(gva, sp.role.level)
        spte = sp.spt[index]  # a 4K leaf, a huge leaf or nothing
        if is_mmio_spte(self.cfg, spte) and self._mmio_hit(vcpu, root, gva, spte, write):
            return RetPf.EMULATE
        self.stat["pf_taken"] += 1
        present = is_shadow_present_pte(spte) and not is_mmio_spte(self.cfg, spte)
        error_code = gpt.PFERR_PRESENT_MASK if present else 0
        error_code |= gpt.access_error_code(write, user, fetch)
        use_vtlb = sp.role.level == 1
        translated = self._translate(vcpu, gva, write, user, error_code, use_vtlb, fetch)
        if translated is None:
            return RetPf.RETRY
        gfn, access, walk = translated
        slot = self.vm.vcpu_gfn_to_memslot(vcpu, gfn)
        if write and present and shadow_sync.write_tracked(self, gfn, root.role.smm):
            return self._write_protected()  # page_fault_handle_page_track()
        if slot is None:  # kvm_handle_noslot_fault(): the vCPU's MMIO info first
            gen = self.vm.generation(root.role.smm)
            mmio_access = access & self.cfg.shadow_mmio_access_mask
            self.mmio_info.cache(vcpu, gva, gfn, mmio_access, gen)
        if (slot is None and not self._mmio_cacheable(gfn)) or (
            slot is not None and write and slot.readonly
        ):
            if slot is None:
                self._emit_mmio(gfn, gva, write)
            self.stat["pf_emulate"] += 1
            return RetPf.EMULATE
        self.pages.make_mmu_pages_available()
        if walk is None and sp.role.invalid:  # a vtlb hit whose page the budget zapped
            translated = self._translate(vcpu, gva, write, user, error_code, False, fetch)
            assert translated is not None  # the vtlb agreed with the guest tables
            gfn, access, walk = translated
        fault = KvmPageFault(gfn, write, fetch, slot, PG_LEVEL_4K)
        if walk is not None:
            fault.max_level = self.max_level(walk)
            sp, index = shadow_huge.fetch(self, root, gva, walk, fault, access)
        else:  # a vtlb hit: the last-level page exists, the guest leaf is 4K
            self.emit_spte_requested(fault)
        if slot is None:
            ret = set_mmio_spte(self, sp, index, gfn, access)
            self._emit_mmio(gfn, gva, write)
        else:
            level = fault.goal_level
            base_gfn = gfn & ~(kvm_pages_per_hpage(level) - 1)
            ret = set_spte(
                self, sp, index, base_gfn, access, slot, write, user, level=level, fetch=fetch
            )
        if ret is not RetPf.SPURIOUS and self.pte_prefetch:
            from .prefetch import pte_prefetch

            pte_prefetch(self, sp, index)  # FNAME(fetch): unless RET_PF_SPURIOUS
        return ret

    def set_prefetched_spte(
        self, sp: KvmMmuPage, index: int, gfn: int, access: int, slot: MemorySlot
    ) -> None:
        """`mmu_set_spte(..., prefetch=true)`: a leaf no fault asked for."""
        set_spte(self, sp, index, gfn, access, slot, False, False, prefetch=True)

    def _write_protected(self) -> RetPf:
        """RET_PF_WRITE_PROTECTED → `kvm_mmu_write_protect_fault()`: emulate the store
        (its `kvm_mmu_track_write()` is the guest's `write_pte` of the value)."""
        self.stat["pf_emulate"] += 1
        return RetPf.EMULATE

    def _mmio_hit(self, vcpu: int, root: KvmMmuPage, gva: int, spte: int, write: bool) -> bool:
        """`handle_mmio_page_fault(vcpu, gva, direct=false)` (6.18): the vCPU's MMIO info
        for this gva answers first (`mmio_info_in_cache`); else a current MMIO spte is
        RET_PF_EMULATE whatever the access (the emulator's `vcpu_mmio_gva_to_gpa()`
        checks the cached access and walks, injecting a #PF, when it forbids it)."""
        gen = self.vm.generation(root.role.smm)
        info = self.mmio_info.match_gva(vcpu, gva, gen)
        if info is not None:
            self._emit_mmio(info.gfn, gva, write)
            return True
        valid, fields = check_mmio_spte_traced(self.cfg, spte, gen)
        if fields is not None:
            self._emit("check_mmio_spte", **fields)
        if not valid:
            return False  # RET_PF_INVALID: the real fault path rebuilds it
        gfn, access = get_mmio_spte_gfn(self.cfg, spte), get_mmio_spte_access(self.cfg, spte)
        self._emit("handle_mmio_page_fault", addr=gva, gfn=gfn, access=access)
        self.mmio_info.cache(vcpu, gva, gfn, access, gen)
        self._emit_mmio(gfn, gva, write)
        return True

    def _emit_mmio(self, gfn: int, gva: int, write: bool) -> None:
        self._emit("kvm_mmio", **kvm_mmio_fields(gfn << PAGE_SHIFT | gva & 0xFFF, write))

    def _mmio_cacheable(self, gfn: int) -> bool:
        return self.cfg.mmio_caching_enabled and not gfn >> (self.cfg.host_phys_bits - PAGE_SHIFT)

    def _translate(
        self,
        vcpu: int,
        gva: int,
        write: bool,
        user: bool,
        error_code: int,
        use_vtlb: bool,
        fetch: bool = False,
    ) -> tuple[int, int, GuestWalk | None] | None:
        """(gfn, access, the walk or None on a vtlb hit of a 4K guest leaf), or None
        after injecting a #PF."""
        vtlb = self.vtlbs[vcpu] if self.vtlbs is not None else None
        if vtlb is not None and use_vtlb and not fetch:
            entry = vtlb.lookup(gva, write, user)
            if entry is not None and entry.level == PG_LEVEL_4K:
                return entry.frame_number, entry.access, None
        as_id = self.vm.vcpu(vcpu).as_id
        walk = self.guest.walk(
            self.cr3s[vcpu],
            gva,
            write,
            user,
            error_code=error_code,
            readable=lambda gfn: self.vm.gfn_to_memslot(gfn, as_id) is not None,
            emit=self._listener,
            fetch=fetch,
        )
        if walk.gfn is None:
            self.stat["pf_guest"] += 1
            self.injected[vcpu] = (gva, walk.pferr)
            return None
        access = walk.access
        if not write and not walk.leaf_pte & gpt.PT_DIRTY:
            access &= ~ACC_WRITE_MASK  # FNAME(protect_clean_gpte)
        if vtlb is not None:
            vtlb.insert(gva, walk.gfn, access, walk.level)  # vtlb_insert(), end of walk_addr
        return walk.gfn, access, walk

    def gva_to_gpa(
        self, vcpu: int, gva: int, write: bool = False, user: bool = False
    ) -> int | None:
        """The emulator's translation (`vcpu_mmio_gva_to_gpa()`): the vCPU's MMIO info
        (`vcpu_match_mmio_gva`, traced as `vcpu_match_mmio`), then `FNAME(gva_to_gpa)` as
        the memslot-search thread's patch 7/7 changed it: vtlb first, then the walk; None
        for a guest #PF."""
        as_id = self.vm.vcpu(vcpu).as_id
        info = self.mmio_info.match_gva(vcpu, gva, self.vm.generation(as_id))
        if info is not None:
            gpa = info.gfn << PAGE_SHIFT | gva & 0xFFF
            self._emit("vcpu_match_mmio", gva=gva, gpa=gpa, write=write, gpa_match=False)
            return gpa
        translated = self._translate(
            vcpu, gva, write, user, gpt.access_error_code(write, user), True
        )
        return None if translated is None else translated[0] << PAGE_SHIFT | gva & 0xFFF

    def emit_spte_requested(self, fault: KvmPageFault) -> None:
        """`trace_kvm_mmu_spte_requested(fault)`, after `kvm_mmu_hugepage_adjust()`."""
        if self._listener is not None:
            fields = spte_requested_fields(fault.gfn, fault.pfn, fault.goal_level)
            self._emit("kvm_mmu_spte_requested", **fields)

    # -- audit ------------------------------------------------------------------------

    def audit(self) -> None:
        """See `shadow_audit.audit_shadow_mmu`."""
        from .audit import audit_shadow_mmu

        audit_shadow_mmu(self)
