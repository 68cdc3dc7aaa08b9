"""Shadow paging (EPT off): KVM shadows the guest's own page tables (the memslot-search
thread (kvm, 2011) and the PTE_LIST_EXT thread (kvm, 2021)).

One class, `ShadowMmu`, in the order of arch/x86/kvm/mmu/mmu.c and paging_tmpl.h (6.18):
roots and CR3 (`kvm_mmu_load()`, `fast_pgd_switch()`), the shadow pages of a gfn
(`kvm_mmu_get_page`, `account_shadowed()`), rmaps, the fault (`FNAME(page_fault)`,
`FNAME(fetch)`, `mmu_set_spte()`, `FNAME(pte_prefetch)`), the guest's pte writes (unsync,
`kvm_mmu_track_write()`), their sync (`mmu_sync_children()`, `FNAME(sync_spte)`) and the
audit.  The disallow_lpage counts of shadowed tables are `ShadowLpageInfo` (huge.py), the
per-vCPU vtlb `VcpuVtlbs` (vtlb.py).

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
  page, direct pages keyed by the base gfn down to the goal level (the host's backing,
  `disallow_lpage`, NX huge pages).  A new indirect page is `account_shadowed()`: its
  gfn disallows huge pages around it and the leaves mapping it are write-protected, at
  every level;
- the leaf, `mmu_set_spte`: an MMIO spte or a spte of the slot's host page at the goal
  level, on the gfn's rmap of that level.
A guest pte store into a shadowed table is a write fault (the CPU's store: the guest
kernel's, kernel.py, or the kvm programs' vCPU) that unsyncs a level-1 table in
`mmu_set_spte()` or is emulated, `kvm_mmu_track_write()` (write flooding included); a
CR3 load syncs the root's unsync pages, INVLPG one spte.  `cr3_load` =
`kvm_mmu_new_pgd()` + `kvm_mmu_load()` (ref-counted roots; the `prev_roots` cache);
`invlpg` = `kvm_mmu_invlpg()`.

`FNAME(pte_prefetch)` runs after every fault that set a spte but RET_PF_SPURIOUS, as the
kernel always does; `pte_prefetch=False` turns it off (the kernel has no switch), kept
for comparisons.  Dirty logging is `dirty_log.DirtyLogging`.
`params` are the kvm module parameters the direct MMU takes too (`nx_huge_pages`, its
recovery ratio, `host_level`); `huge_pages=False` maps 4K leaves only (the kernel has no
switch), kept for comparisons.
Simplified: `drop_process` zaps the exited process's shadow pages at
once, before the teardown's stores (KVM leaves them to write flooding, reuse or
recycling); CR0.WP=1, no SMEP/SMAP/PKU.
No `fast_page_fault()`, as in the kernel: 6.18 `FNAME(page_fault)` (paging_tmpl.h) goes
from the guest walk to `kvm_mmu_faultin_pfn()` and `FNAME(fetch)` under mmu_lock; only
`direct_page_fault()` (a guest without paging; EPT/NPT) and `kvm_tdp_mmu_page_fault()`
call the fast path ("the gfn is not stable for indirect shadow page", fast_pf.py).  So a
write to a page dirty logging protected takes the slow path here, and the kernel under
kvm-pvm reports `pf_fast` 0 (`mmuscope kvm dirty --compare`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ...errors import AuditError
from ...events import Event, FieldValue
from ...memslots.constants import PAGE_SHIFT
from ...memslots.memslot import MemorySlot
from ...memslots.vm import Vm
from ..direct.prefetch import (
    PTE_PREFETCH_NUM,
    direct_pte_prefetch_around,
    gfn_to_memslot_dirty_bitmap,
    kvm_prefetch_pages,
)
from ..direct.rmap import gfn_to_index
from ..guest import page_tables as gpt
from ..guest.page_tables import (
    GuestPageTables,
    GuestWalk,
    pt_index,
)
from ..mapping_level import KvmPageFault, kvm_pages_per_hpage
from ..mmu_pages import (
    KvmMmuPage,
    MmuPages,
    default_mmu_pages,
    kvm_page_table_hashfn,
    kvm_recover_mmu_nx_huge_pages,
    shadow_mmu_memslot_update,
)
from ..nx_huge_pages import account_nx_huge_page
from ..params import TdpMmuParams
from ..rmap import ERAS, KvmRmapHead, rmap_add
from ..rmap.stat import KVM_LPAGE_STR, RmapHistogram
from ..role import (
    ACC_ALL,
    ACC_EXEC_MASK,
    ACC_USER_MASK,
    ACC_WRITE_MASK,
    PG_LEVEL_4K,
    PT64_ROOT_4LEVEL,
    KvmMmuPageRole,
)
from ..spte import (
    KVM_MAX_HUGEPAGE_LEVEL,
    PT_USER_MASK,
    PT_WRITABLE_MASK,
    RET_PF_EMULATE,
    RET_PF_FIXED,
    RET_PF_RETRY,
    RET_PF_SPURIOUS,
    SPTE_BASE_ADDR_MASK,
    SPTE_CONFIGS,
    RetPf,
    SpteConfig,
    check_mmio_spte,
    get_mmio_spte_access,
    get_mmio_spte_gfn,
    is_empty_spte,
    is_large_pte,
    is_mmio_spte,
    is_shadow_present_pte,
    make_mmio_spte,
    make_spte,
    mark_mmio_spte_fields,
    spte_requested_fields,
    spte_to_pfn,
)
from ..vcpu.emulate import (
    MMIO_STORE,
    MmioBus,
    trace_kvm_emulate_insn,
    trace_vcpu_match_mmio,
    x86_emulate_instruction,
)
from ..vcpu.mmio_info import VcpuMmioInfo, handle_mmio_page_fault
from .huge import ShadowLpageInfo
from .kernel import DirectMap, GuestKernel
from .vtlb import VcpuVtlbs

STATS = (
    *("pf_taken", "pf_fixed", "pf_emulate", "pf_spurious", "pf_mmio_spte_created", "pf_guest"),
    *("wrprot_sptes", "unprotect_zapped", "rmap_recycled", "synced_pages", "synced_sptes"),
    "prev_roots_hits",
)
KVM_MMU_NUM_PREV_ROOTS = 3
WRITE_FLOODING_THRESHOLD = 3  # detect_write_flooding(): atomic_read(...) >= 3
ALL_LEVELS = range(PG_LEVEL_4K, KVM_MAX_HUGEPAGE_LEVEL + 1)


# The `mov` a guest without code is emulated at (`emulate_instruction`), by store or load
# and width: the EPT guests' `mov %eax,(%rdx)` (89 02), its REX.W form for a pte
# (48 89 02), and the loads `mov (%rdx),%eax` (8b 02) and `mov (%rdx),%rax` (48 8b 02).
NO_CODE_MOVS = {
    (True, 4): MMIO_STORE[1],
    (True, 8): bytes.fromhex("48 89 02"),
    (False, 4): bytes.fromhex("8b 02"),
    (False, 8): bytes.fromhex("48 8b 02"),
}


class Translation(NamedTuple):
    """What a present leaf maps (`sp->shadowed_translation`) and where its rmap is: one
    value shared by every spte on that rmap (a fork's children map a gfn nine times)."""

    as_id: int
    slot_id: int
    gfn: int  # the first gfn of a huge leaf
    rmap_index: int
    level: int = 1


def spte_index(sptep: int) -> int:
    """The index of `sptep` in its page table (8-byte sptes)."""
    return (sptep & 0xFFF) // 8


def detect_write_flooding(sp: KvmMmuPage) -> bool:
    """Level-1 pages can go unsync instead; an upper-level page counts the emulated
    writes since a fault last walked through it (`clear_sp_write_flooding_count`)."""
    if sp.role.level == PG_LEVEL_4K:
        return False
    sp.write_flooding_count += 1
    return sp.write_flooding_count >= WRITE_FLOODING_THRESHOLD


class ShadowMmu:
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
        host_seed: int = 1,
    ) -> None:
        self.vm = vm
        self.params = params or TdpMmuParams(tdp_mmu=False)
        self.huge_pages = huge_pages
        self.nx = self.params.nx_huge_page_workaround_enabled  # is_nx_huge_page_enabled()
        self.levels = ShadowLpageInfo(self.params.host_level, self.nx, host_seed)
        self.cfg = cfg or SPTE_CONFIGS["shadow"]
        if self.cfg.ept:
            raise ValueError("shadow paging uses the legacy PTE format: pick a non-EPT config")
        self.era = ERAS[pte_list_era]
        self.unsync_enabled = unsync  # False: before 2.6.27, every shadowed table tracked
        self.mmio_info = VcpuMmioInfo(mmio_info_cache)  # False: before 3.1
        self._listener = emit
        own_guest = guest is None
        self.guest = guest or GuestPageTables.in_memslot(vm, emit=emit)
        self.pages = MmuPages(
            default_mmu_pages(vm.nr_memslot_pages),
            gen_era=gen_era,
            emit=self._emit,
            on_leaf_zapped=self._drop_leaf,
            cfg=self.cfg,
        )
        self.pages.on_account_shadowed = self._account_shadowed
        self.pages.on_unaccount_shadowed = self.levels.unaccount
        self.rmaps: dict[tuple[int, int, int], dict[int, KvmRmapHead]] = {}
        self.shadowed_translation: dict[int, Translation] = {}  # by sptep
        self.roots: dict[int, KvmMmuPage] = {}
        self.prev_roots_enabled = prev_roots  # False: before 4.19, one root per vCPU
        self.prev_roots: dict[int, list[KvmMmuPage | None]] = {}  # vcpu -> LRU, newest 0
        self.cr3s: dict[int, int] = {}
        self.vtlbs = VcpuVtlbs(vtlb_policy) if vtlb else None
        self.injected: dict[int, tuple[int, int]] = {}  # vcpu -> (gva, pferr), last #PF
        self.mmio_read: dict[int, tuple[int, int]] = {}  # vcpu -> (gpa, len) userspace reads
        self.stat = dict.fromkeys(STATS, 0)
        self.pte_prefetch = pte_prefetch  # FNAME(pte_prefetch) after a fixed fault
        vm.subscribe(self._memslots_changed)
        self.guest.subscribe(self._track_write, self._guest_tlb_flush)
        self.kernel: GuestKernel | None = None  # the default guest's kernel (kernel.py)
        if own_guest:
            self.kernel = GuestKernel(self, DirectMap.for_guest(self.guest))

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

    # -- roots, CR3 and the TLB ------------------------------------------------------------
    # The root cache on a CR3 load: `fast_pgd_switch()` keeps a usable current root or
    # swaps one in from the vCPU's `prev_roots` (an LRU of KVM_MMU_NUM_PREV_ROOTS roots
    # since 4.19; `prev_roots=False`: before, one root per vCPU);
    # `cached_root_find_and_keep_current()`, mmu.c (6.18).

    def cr3_load(self, vcpu: int, cr3: int) -> KvmMmuPage:
        """MOV to CR3 (`kvm_mmu_new_pgd()`): the current root or one of the vCPU's three
        `prev_roots` if usable for `cr3` (`fast_pgd_switch()`), else a new one; flush the
        vtlb and sync the root's unsync pages (KVM_REQ_MMU_SYNC → `kvm_mmu_sync_roots()`)."""
        self.cr3s[vcpu] = cr3
        self.fast_pgd_switch(vcpu, cr3)
        if self.vtlbs is not None:
            self.vtlbs[vcpu].flush()
        self.pages.make_mmu_pages_available()
        root = self._root(vcpu)
        self.mmio_info.clear(vcpu)  # kvm_mmu_sync_roots(): vcpu_clear_mmio_info(ANY)
        self.sync_roots(root)
        return root

    def reset_context(self, vcpu: int) -> None:
        """`kvm_mmu_reset_context()` (KVM_SET_SREGS with another CR3, CR0, CR4 or EFER):
        `kvm_mmu_unload()` frees the current root and every `prev_roots` entry
        (`kvm_mmu_free_roots(KVM_MMU_ROOTS_ALL)`); the next entry loads a root again."""
        self._put_root(vcpu)
        cached = self.prev_roots.get(vcpu, [])
        for i, prev in enumerate(cached):
            if prev is not None:
                cached[i] = None
                self.pages.put_root(prev)
        self.cr3s.pop(vcpu, None)

    def fast_pgd_switch(self, vcpu: int, cr3: int) -> None:
        """`cached_root_find_and_keep_current()` (6.18): keep a usable current root, else
        swap through `prev_roots` (an LRU of KVM_MMU_NUM_PREV_ROOTS, since 4.19) and free
        the one left over when none is usable."""
        current = self.roots.pop(vcpu, None)
        if not self.prev_roots_enabled:
            if current is not None:
                self.pages.put_root(current)
            return
        as_id = self.vm.vcpu(vcpu).as_id

        def usable(root: KvmMmuPage | None) -> bool:
            return (
                root is not None
                and root.gfn == cr3
                and root.role.word == self._root_role(as_id).word
                and not self.pages.is_obsolete(root)
            )

        if not usable(current):
            cached = self.prev_roots.setdefault(vcpu, [None] * KVM_MMU_NUM_PREV_ROOTS)
            for i in range(KVM_MMU_NUM_PREV_ROOTS):
                current, cached[i] = cached[i], current
                if usable(current):
                    self.stat["prev_roots_hits"] += 1
                    break
            else:
                if current is not None:
                    self.pages.put_root(current)  # kvm_mmu_free_roots(ROOT_CURRENT)
                current = None
        if current is not None:
            self.roots[vcpu] = current

    def invlpg(self, vcpu: int, gva: int) -> None:
        """`kvm_mmu_invlpg()` → `kvm_mmu_invalidate_addr()`: sync the gva's spte in each
        unsync page on its path, then the vtlb."""
        root = self.roots.get(vcpu)
        if root is not None and not self.pages.is_obsolete(root):
            self.invalidate_addr(root, gva)
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
                self.sync_roots(root)
            else:
                self.invalidate_addr(root, gva)
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
        """The process exits: unload it, zap the pages that shadowed its tables, tear
        the tables down (plain stores now); returns the freed table gfns."""
        for vcpu in [v for v, c in self.cr3s.items() if c == cr3]:
            self._put_root(vcpu)
            del self.cr3s[vcpu]
        for gfn in sorted(self.guest.processes[cr3]):
            self.unprotect_page(gfn)
        return self.guest.exit(cr3)

    # -- shadow pages of a gfn -------------------------------------------------------------

    def _get_page(self, gfn: int, role: KvmMmuPageRole) -> KvmMmuPage:
        """`kvm_mmu_get_shadow_page()`; a new page with gptes was `account_shadowed()`
        before its `kvm_mmu_get_page` (`MmuPages.on_account_shadowed`)."""
        return self.pages.get_page(gfn, role)[0]

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
        write-tracks it: `write_tracked`)."""
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

    # -- rmaps -----------------------------------------------------------------------------
    # Each present leaf is on the rmap of its (slot, level, gfn) (4K, or the 2M/1G frame
    # of a huge leaf: `gfn_to_rmap()`), and has its `shadowed_translation`
    # (`sp->shadowed_translation`); `rmap_count` is `pte_list_count()`, `rmaps_stat` the
    # debugfs `mmu_rmaps_stat` histogram.

    def _rmap(self, as_id: int, slot_id: int, level: int = 1) -> dict[int, KvmRmapHead]:
        return self.rmaps.setdefault((as_id, slot_id, level), {})

    def _rmap_of(self, as_id: int, gfn: int, levels: range = range(1, 2)) -> list[int]:
        """The sptes on `gfn`'s rmaps at `levels` (4K: those mapping the gfn alone;
        2M/1G: the huge leaves whose frame holds it), one memslot lookup."""
        slot = self.vm.gfn_to_memslot(gfn, as_id)
        if slot is None:
            return []
        out: list[int] = []
        for level in levels:
            heads = self.rmaps.get((as_id, slot.id, level), {})
            head = heads.get(gfn_to_index(gfn, slot.base_gfn, level))
            out += head if head is not None else []
        return out

    def rmap_count(self, gfn: int, as_id: int = 0) -> int:
        """`pte_list_count()` of the gfn's 4K rmap: how many sptes map it."""
        return len(self._rmap_of(as_id, gfn))

    def rmaps_stat(self, *, log2: bool = False) -> RmapHistogram:
        """debugfs `mmu_rmaps_stat`: every rmap head of every slot, empty ones included
        (`kvm_mmu_slot_lpages()` heads per level)."""
        histogram = RmapHistogram(log2=log2)
        for as_id in range(self.vm.address_spaces):
            for slot in self.vm.memslots(as_id):
                for level, name in enumerate(KVM_LPAGE_STR, start=1):
                    shift = 9 * (level - 1)
                    nheads = ((slot.end_gfn - 1) >> shift) - (slot.base_gfn >> shift) + 1
                    counts = [
                        h.count() for h in self.rmaps.get((as_id, slot.id, level), {}).values()
                    ]
                    histogram.add(name, 0, nheads - len(counts))
                    histogram.add_counts(name, counts)
        return histogram

    def _zap_leaf(self, sp: KvmMmuPage, index: int) -> None:
        self._drop_leaf(sp, index, sp.spt[index])
        sp.spt[index] = self.pages.nonpresent

    def _drop_leaf(self, sp: KvmMmuPage, index: int, spte: int) -> None:
        """`drop_spte()`: a present leaf leaves its gfn's rmap."""
        if is_mmio_spte(self.cfg, spte):
            return
        tr = self.shadowed_translation.pop(sp.sptep(index), None)
        if tr is None:
            raise AuditError(f"leaf {sp.sptep(index):#x} has no shadowed translation")
        heads = self.rmaps[(tr.as_id, tr.slot_id, tr.level)]
        heads[tr.rmap_index].remove(sp.sptep(index))
        if not heads[tr.rmap_index].count():
            del heads[tr.rmap_index]

    # -- the fault -------------------------------------------------------------------------

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
        # handle_mmio_page_fault(vcpu, gva, direct=false) (mmio_info.py, every MMU's): a
        # current MMIO spte is RET_PF_EMULATE whatever the access (the emulator's
        # vcpu_mmio_gva_to_gpa() checks the cached access and walks, injecting a #PF, when
        # it forbids it)
        if is_mmio_spte(self.cfg, spte) and handle_mmio_page_fault(
            self, vcpu, gva, spte, self.vm.generation(root.role.smm), direct=False
        ):
            return RET_PF_EMULATE
        self.stat["pf_taken"] += 1
        present = is_shadow_present_pte(spte) and not is_mmio_spte(self.cfg, spte)
        error_code = gpt.PFERR_PRESENT_MASK if present else 0
        error_code |= gpt.access_error_code(write, user, fetch)
        use_vtlb = sp.role.level == 1
        translated = self._translate(vcpu, gva, write, user, error_code, use_vtlb, fetch)
        if translated is None:
            return RET_PF_RETRY
        gfn, access, walk = translated
        slot = self.vm.vcpu_gfn_to_memslot(vcpu, gfn)
        if write and present and self.write_tracked(gfn, root.role.smm):
            return self._write_protected()  # page_fault_handle_page_track()
        if slot is None:  # kvm_handle_noslot_fault(): the vCPU's MMIO info first
            gen = self.vm.generation(root.role.smm)
            mmio_access = access & self.cfg.shadow_mmio_access_mask
            self.mmio_info.cache(vcpu, gva, gfn, mmio_access, gen)
        if (slot is None and not self._mmio_cacheable(gfn)) or (
            slot is not None and write and slot.readonly
        ):
            self.stat["pf_emulate"] += 1
            return RET_PF_EMULATE
        obsolete = self.pages.is_obsolete(root)  # read before make_mmu_pages_available(),
        self.pages.make_mmu_pages_available()  # which the kernel runs after the stale check
        if walk is None and sp.role.invalid:  # a vtlb hit whose page the budget zapped
            translated = self._translate(vcpu, gva, write, user, error_code, False, fetch)
            assert translated is not None  # the vtlb agreed with the guest tables
            gfn, access, walk = translated
        fault = KvmPageFault(gfn, write, fetch, slot, PG_LEVEL_4K)
        if self.levels.kvm_mmu_faultin_pfn(fault) is RET_PF_RETRY:
            return RET_PF_RETRY  # an MMU-notifier invalidation of the gfn (mapping_level.py)
        if self.levels.is_page_fault_stale(fault, obsolete):  # write_lock(mmu_lock)
            return RET_PF_RETRY
        if walk is not None:
            fault.max_level = self.max_level(walk)
            sp, index = self.fetch(root, gva, walk, fault, access)
        else:  # a vtlb hit: the last-level page exists, the guest leaf is 4K
            self.emit_spte_requested(fault)
        if slot is None:
            ret = self.set_mmio_spte(sp, index, gfn, access)
        else:
            level = fault.goal_level
            base_gfn = gfn & ~(kvm_pages_per_hpage(level) - 1)
            ret = self.set_spte(
                sp, index, base_gfn, access, slot, write, user, level=level, fetch=fetch
            )
        if ret is not RET_PF_SPURIOUS and self.pte_prefetch:
            self._pte_prefetch(sp, index)  # FNAME(fetch): unless RET_PF_SPURIOUS
        return ret

    def _write_protected(self) -> RetPf:
        """RET_PF_WRITE_PROTECTED → `kvm_mmu_write_protect_fault()`: emulate the store
        (its `kvm_mmu_track_write()` is the guest's `write_pte` of the value)."""
        self.stat["pf_emulate"] += 1
        return RET_PF_EMULATE

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
        patch 7/7 of the memslot-search thread (kvm, 2011) changed it: vtlb first, then the
        walk; None for a guest #PF."""
        as_id = self.vm.vcpu(vcpu).as_id
        info = self.mmio_info.match_gva(vcpu, gva, self.vm.generation(as_id))
        if info is not None:
            gpa = info.gfn << PAGE_SHIFT | gva & 0xFFF
            trace_vcpu_match_mmio(self._emit, gva, gpa, write, gpa_match=False)
            return gpa
        translated = self._translate(
            vcpu, gva, write, user, gpt.access_error_code(write, user), True
        )
        return None if translated is None else translated[0] << PAGE_SHIFT | gva & 0xFFF

    # -- the emulator ----------------------------------------------------------------------
    # `x86_emulate_instruction()` (x86.c, 6.18) after RET_PF_EMULATE (an MMIO gfn, or a
    # store to a write-tracked table):
    # - decode: `x86_decode_emulated_instruction()` -> `x86_decode_insn()` reads the
    #   instruction at rip through `kvm_fetch_guest_virt()`, a guest walk with the access
    #   `PFERR_FETCH_MASK` (| `PFERR_USER_MASK` at CPL 3) that never asks the vCPU's MMIO
    #   info; then `trace_kvm_emulate_insn_start()` (`kvm_emulate_insn`) and
    #   `++insn_emulation`;
    # - the memory operand, `emulator_read_write_onepage()`: `vcpu_mmio_gva_to_gpa()` (the
    #   vCPU's MMIO info, traced `vcpu_match_mmio`, else a walk); RAM is read or written
    #   there (`emulator_write_phys()` -> `kvm_page_track_write()`: the caller's store),
    #   MMIO goes to userspace: `write_mmio()` traces KVM_TRACE_MMIO_WRITE with the value,
    #   `read_exit_mmio()` KVM_TRACE_MMIO_READ_UNSATISFIED, and the next KVM_RUN completes
    #   the read (`complete_emulated_mmio()` -> `read_prepare()`: KVM_TRACE_MMIO_READ).

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
        bus: MmioBus | None = None,
    ) -> int | None:
        """Emulate the access at `gva` of the instruction `insn` (rip, bytes; None: a
        guest without code, the workloads'); returns the operand's gpa when it is RAM
        (the caller stores there), None for MMIO or a #PF injected.  MMIO goes to the
        in-kernel devices of `bus`, else to userspace (`kvm_userspace_exit`); without a
        `bus` the caller models what follows.

        `x86_decode_emulated_instruction()` traces `kvm_emulate_insn` before the operand
        on every emulation (6.18 x86.c): a guest without code decodes the `mov` of its
        width at rip 0 (`NO_CODE_MOVS`, the EPT guests' `MMIO_STORE`), and its fetch
        walk is not printed, as the EPT guests' is not (docs/kvm.md §13)."""
        as_id = self.vm.vcpu(vcpu).as_id

        def decode() -> bool:
            if insn is None:
                trace_kvm_emulate_insn(self._emit, 0, NO_CODE_MOVS[write, size])
                return True
            return self.decode_instruction(vcpu, insn, user)

        done = x86_emulate_instruction(
            self._emit, write,
            decode=decode,
            operand=lambda: self.gva_to_gpa(vcpu, gva, write, user),
            is_ram=lambda gpa: self.vm.gfn_to_memslot(gpa >> PAGE_SHIFT, as_id) is not None,
            size=size, val=val, bus=bus, vcpu=vcpu,
        )  # fmt: skip
        if done is None or not done[1]:
            return None if done is None else done[0]
        if not write:
            self.mmio_read[vcpu] = done[0], size
        return None

    def decode_instruction(self, vcpu: int, insn: tuple[int, bytes], user: bool) -> bool:
        """`x86_decode_emulated_instruction()`: the fetch walk at the instruction's rip
        (`kvm_fetch_guest_virt()`), then `kvm_emulate_insn`; False for a #PF injected."""
        rip, code = insn
        access = gpt.PFERR_FETCH_MASK | (gpt.PFERR_USER_MASK if user else 0)
        if self._translate(vcpu, rip, False, user, access, False, fetch=True) is None:
            return False
        trace_kvm_emulate_insn(self._emit, rip, code)
        return True

    def complete_emulated_mmio(self, vcpu: int, val: int = 0) -> None:
        """The next KVM_RUN after userspace answered a read: KVM_TRACE_MMIO_READ."""
        pending = self.mmio_read.pop(vcpu, None)
        if pending is not None:
            gpa, size = pending
            self._emit("kvm_mmio", type="read", len=size, gpa=gpa, val=val)

    def emit_spte_requested(self, fault: KvmPageFault) -> None:
        """`trace_kvm_mmu_spte_requested(fault)`, after `kvm_mmu_hugepage_adjust()`."""
        if self._listener is not None:
            fields = spte_requested_fields(fault.gfn, fault.pfn, fault.goal_level)
            self._emit("kvm_mmu_spte_requested", **fields)

    # -- FNAME(fetch) and huge pages -------------------------------------------------------
    # 6.18 paging_tmpl.h, mmu.c, page_track.c:
    # - `FNAME(page_fault)`: `fault->max_level = walker.level` (the level of the guest's
    #   leaf: 4K, 2M or 1G); `kvm_mmu_faultin_pfn()`; with mmu_lock, `FNAME(fetch)`.
    # - `FNAME(fetch)`: the indirect pages down to the guest leaf's level (`it.level ==
    #   gw->level`: `fetch`), then `kvm_mmu_hugepage_adjust()` *after* them ("KVM doesn't
    #   support mapping hugepages into the guest for gfns that are being shadowed by KVM,
    #   i.e. allocating a new shadow page may affect the allowed hugepage size":
    #   mapping_level.py, the host's backing and the slot's `lpage_info`),
    #   `trace_kvm_mmu_spte_requested`, then on down to `goal_level`:
    #   `disallowed_hugepage_adjust()` under the NX mitigation, `validate_direct_spte()` (a
    #   direct child made with another access is unlinked),
    #   `kvm_mmu_get_child_sp(base_gfn, direct=true, gw->pte_access)` (a huge leaf in the
    #   way dropped: `drop_large_spte`), and `account_nx_huge_page(sp, req_level >=
    #   it.level)` for a page made because an executable huge page was disallowed
    #   (nx_huge_pages.py); the leaf is `mmu_set_spte(gw->pte_access, base_gfn,
    #   fault->pfn)` at `goal_level`.
    # - `kvm_recover_nx_huge_pages()`: shadow pages are zapped with
    #   `kvm_mmu_prepare_zap_page()` (mmu_pages.py, shared with the direct MMU).

    def fetch(
        self,
        root: KvmMmuPage,
        gva: int,
        walk: GuestWalk,
        fault: KvmPageFault,
        access: int,
    ) -> tuple[KvmMmuPage, int]:
        """`FNAME(fetch)` (6.18 paging_tmpl.h): the indirect pages of the guest's tables
        down to `walker.level`, `kvm_mmu_hugepage_adjust()`, the
        `kvm_mmu_spte_requested` line, then direct pages to the goal level
        (`fetch_direct`); returns the leaf's page and index."""
        assert walk.gfn is not None
        sp = root
        for level in range(root.role.level, walk.level, -1):
            index = pt_index(gva, level)
            gfn = walk.table_gfn(level - 1)
            role = sp.role.child(walk.access_above(level - 1), direct=False)
            sp.write_flooding_count = 0  # clear_sp_write_flooding_count()
            child = self.pages.child_at(sp, index)
            if child is None or child.gfn != gfn or child.role.word != role.word:
                if child is not None:
                    child.parent_ptes.discard(sp.sptep(index))
                elif sp.spt[index] != self.pages.nonpresent:
                    self._zap_leaf(sp, index)  # a huge leaf where the guest has a table
                child = self._get_page(gfn, role)
                self.pages.link(sp, index, child)
            sp = child
        sp.write_flooding_count = 0
        self.levels.kvm_mmu_hugepage_adjust(fault)
        self.emit_spte_requested(fault)
        return self.fetch_direct(sp, gva, fault, access)

    def fetch_direct(
        self, sp: KvmMmuPage, gva: int, fault: KvmPageFault, access: int
    ) -> tuple[KvmMmuPage, int]:
        """`FNAME(fetch)` from the page of the guest leaf's level (`sp`) down to
        `fault.goal_level`; returns the page and index of the leaf."""
        pages = self.pages
        while True:
            level = sp.role.level
            index = pt_index(gva, level)
            if self.nx:
                self.levels.disallowed_hugepage_adjust(
                    fault, sp.spt[index], level, self._nx_disallowed
                )
            if level == fault.goal_level:
                break
            base_gfn = fault.gfn & ~(kvm_pages_per_hpage(level) - 1)
            role = sp.role.child(access, direct=True)
            child = pages.child_at(sp, index)
            if child is not None and (child.role.word != role.word or child.gfn != base_gfn):
                child.parent_ptes.discard(sp.sptep(index))  # validate_direct_spte()
                sp.spt[index] = pages.nonpresent
                child = None
            if child is None:
                if sp.spt[index] != pages.nonpresent:
                    self._zap_leaf(sp, index)  # drop_large_spte()
                child, _ = pages.get_page(base_gfn, role)
                pages.link(sp, index, child)
                if fault.huge_page_disallowed:
                    possible = fault.req_level >= level
                    account_nx_huge_page(pages.possible_nx_huge_pages, pages.stat, child, possible)
            sp = child
        return sp, index

    def max_level(self, walk: GuestWalk) -> int:
        """`fault->max_level = walker.level` (4K when huge pages are off, a
        comparison the kernel has no switch for)."""
        return walk.level if self.huge_pages else PG_LEVEL_4K

    def _nx_disallowed(self, spte: int) -> bool:
        sp = self.pages.page_by_pa(spte & SPTE_BASE_ADDR_MASK)
        return sp is not None and sp.nx_huge_page_disallowed

    def why_level(self, vcpu: int, cr3: int, gva: int, fetch: bool = False) -> str:
        """The level a fault on `gva` maps at and why, for the screens: the guest leaf's
        level first (`walker.level`), then the slot, the host and the NX mitigation."""
        walk = self.guest.translate(cr3, gva)
        if walk.gfn is None:
            return "—: the guest maps nothing there (#PF injected)"
        if not self.huge_pages:
            return "4K: huge pages off (the model's switch; the kernel has none)"
        if walk.level == PG_LEVEL_4K:
            return "4K: guest leaf is 4K"
        as_id = self.vm.vcpu(vcpu).as_id  # the tree itself: no lookup counted
        slot = self.vm.memslot_set(as_id).gfn_tree.search(walk.gfn)
        level = self.levels.why(slot, walk.gfn, fetch, walk.level)[0]
        nx_split = False
        sp = self.roots.get(vcpu)
        while sp is not None and sp.role.level > level:
            sp = self.pages.child_at(sp, pt_index(gva, sp.role.level))
        if sp is not None and sp.role.level == level > PG_LEVEL_4K:
            child = self.pages.child_at(sp, pt_index(gva, level))
            nx_split = child is not None and child.nx_huge_page_disallowed
        return self.levels.why(slot, walk.gfn, fetch, walk.level, nx_split)[1]

    def kvm_recover_nx_huge_pages(self) -> int:
        """One run of the NX recovery worker (nx_huge_pages.py)."""
        return kvm_recover_mmu_nx_huge_pages(self.vm, self.pages, self.params)

    # -- the leaf: mmu_set_spte() ----------------------------------------------------------
    # `mmu_set_spte()` (mmu.c, 6.18), at the end of `FNAME(fetch)` or by
    # `FNAME(pte_prefetch)`: an MMIO spte with the generation (`mark_mmio_spte`), or a
    # spte of the slot's host page at the fault's goal level (4K, or 2M/1G where
    # `kvm_mmu_hugepage_adjust` allowed it), read-only on a read while the gpte is clean
    # (`FNAME(protect_clean_gpte)`); a writable spte unsyncs the gfn's level-1 pages or,
    # for a write-tracked gfn, stays read-only (`mmu_try_to_unsync_pages()`); under the
    # NX mitigation a huge spte is not executable (`make_spte()`, 6.18 spte.c); it goes
    # on the rmap of (slot, level, gfn) by `rmap_add` (RMAP_RECYCLE_THRESHOLD included).

    def set_mmio_spte(self, sp: KvmMmuPage, index: int, gfn: int, access: int) -> RetPf:
        """`mark_mmio_spte()`: cache the miss with the memslots generation."""
        if not is_empty_spte(sp.spt[index]):
            self._zap_leaf(sp, index)
        gen = self.vm.generation(sp.role.smm)
        sp.spt[index] = spte = make_mmio_spte(self.cfg, gfn, access, gen)
        self._emit("mark_mmio_spte", **mark_mmio_spte_fields(sp.sptep(index), gfn, spte))
        self.stat["pf_mmio_spte_created"] += 1
        self.stat["pf_emulate"] += 1
        return RET_PF_EMULATE

    def set_spte(
        self,
        sp: KvmMmuPage,
        index: int,
        gfn: int,
        access: int,
        slot: MemorySlot,
        write: bool,
        user: bool,
        *,
        prefetch: bool = False,
        level: int = PG_LEVEL_4K,
        fetch: bool = False,
    ) -> RetPf:
        """`mmu_set_spte()` for a RAM gfn (`prefetch`: no fault, not in pf_fixed) at
        `level` (`gfn` is then the huge page's first): a writable spte unsyncs the gfn's
        level-1 pages, or stays read-only for a write-tracked gfn (or, prefetched, a gfn
        with a page still in sync), and a write fault then is RET_PF_WRITE_PROTECTED,
        emulated (`mmu_try_to_unsync_pages()`).  A table in the way of a huge leaf is
        unlinked ("If we overwrite a PTE page pointer with a 2MB PMD, unlink the parent of
        the now unreachable PTE": `drop_parent_pte`)."""
        as_id, spte, sptep = sp.role.smm, sp.spt[index], sp.sptep(index)
        child = self.pages.child_at(sp, index) if level > PG_LEVEL_4K else None
        if child is not None:
            child.parent_ptes.discard(sptep)
            sp.spt[index] = spte = self.pages.nonpresent
        if level > PG_LEVEL_4K and self.nx:
            access &= ~ACC_EXEC_MASK  # make_spte(): is_nx_huge_page_enabled()
        wrprot = False
        if (
            access & ACC_WRITE_MASK
            and not spte & PT_WRITABLE_MASK  # an old writable spte: already unsync
            and self.try_to_unsync(gfn, as_id, prefetch=prefetch)
        ):
            access &= ~ACC_WRITE_MASK
            wrprot = True
        pfn = self.levels.gfn_to_pfn(slot, gfn)
        needs = (PT_WRITABLE_MASK if write else 0) | (PT_USER_MASK if user else 0)
        present = is_shadow_present_pte(spte) and not is_mmio_spte(self.cfg, spte)
        executable = not fetch or not spte & self.cfg.shadow_nx_mask
        if present and spte_to_pfn(spte) == pfn and spte & needs == needs and executable:
            self.stat["pf_spurious"] += 1
            return RET_PF_SPURIOUS
        if not is_empty_spte(spte):
            self._zap_leaf(sp, index)
        sp.spt[index] = spte = make_spte(
            self.cfg, pfn, access, level, writable=not slot.readonly, accessed=not prefetch
        )
        key = gfn_to_index(gfn, slot.base_gfn, level)
        heads = self._rmap(as_id, slot.id, level)
        head = heads.get(key)
        if head is None:
            head = heads[key] = KvmRmapHead(self.era)
            translation = Translation(as_id, slot.id, gfn, key, level)
        else:  # the sptes of one rmap map the same (slot, level, gfn): one value for all
            translation = self.shadowed_translation[head.first()]
        self.shadowed_translation[sptep] = translation
        recycled = rmap_add(head, sptep)
        for old in recycled:  # over RMAP_RECYCLE_THRESHOLD: the whole rmap was zapped
            self.pages.page_of_sptep(old).spt[spte_index(old)] = self.pages.nonpresent
            del self.shadowed_translation[old]
        if recycled:
            del heads[key]
            self.stat["rmap_recycled"] += len(recycled)
        self._emit("kvm_mmu_set_spte", gfn=gfn, spte=spte, level=level, sptep=sptep)
        if wrprot and write:
            return self._write_protected()
        if not prefetch:
            self.stat["pf_fixed"] += 1
        return RET_PF_FIXED

    def set_prefetched_spte(
        self, sp: KvmMmuPage, index: int, gfn: int, access: int, slot: MemorySlot
    ) -> None:
        """`mmu_set_spte(..., prefetch=true)`: a leaf no fault asked for."""
        self.set_spte(sp, index, gfn, access, slot, False, False, prefetch=True)

    # -- FNAME(pte_prefetch) ---------------------------------------------------------------
    # `FNAME(pte_prefetch)` (paging_tmpl.h, 6.18): after a fault fixed a last-level spte
    # of an indirect page, KVM maps the other guest ptes of the same aligned group of
    # PTE_PREFETCH_NUM = 8 without waiting for their faults.  For each neighbour, in
    # order: a present spte is skipped; a gpte that is not present or not accessed
    # (`FNAME(prefetch_invalid_gpte)`: "Prefetch only accessed entries") ends the
    # prefetch; so does a gfn with no memslot, or a write to a dirty-logged slot
    # (`gfn_to_memslot_dirty_bitmap`).  Otherwise `mmu_set_spte(..., prefetch=true)` with
    # `sp->role.access & FNAME(gpte_access)(gpte)`, write removed from a clean gpte
    # (`FNAME(protect_clean_gpte)`).  Prefetched sptes are traced by `kvm_mmu_set_spte`
    # and join the rmaps like any other, but are no fault: `pf_fixed` does not count
    # them; their Accessed bit is clear (`make_spte(prefetch=true)` ->
    # `mark_spte_for_access_track()`), so the guest's first access shows.  A direct
    # last-level page (below a guest huge page) goes to `__direct_pte_prefetch()`
    # (direct/prefetch.py, shared with the direct MMU).

    def _pte_prefetch(self, sp: KvmMmuPage, index: int) -> int:
        """`FNAME(pte_prefetch)` around `sp.spt[index]`; returns how many sptes were set."""
        if sp.role.level != 1:
            return 0
        if sp.role.direct:

            def lookup(gfn: int) -> MemorySlot | None:
                return self.vm.gfn_to_memslot(gfn, sp.role.smm)

            return direct_pte_prefetch_around(sp, index, lookup, self.set_prefetched_spte)
        start = index & ~(PTE_PREFETCH_NUM - 1)
        done = 0
        for i in range(start, start + PTE_PREFETCH_NUM):
            if i == index or is_shadow_present_pte(sp.spt[i]):
                continue
            gpte = self.guest.pte(sp.gfn, i)
            if not gpte & gpt.PT_PRESENT or not gpte & gpt.PT_ACCESSED:
                break  # FNAME(prefetch_invalid_gpte): drop_spte of a non-present spte
            gfn = gpt.pte_gfn(gpte)
            access = sp.role.access & gpt.gpte_access(gpte)
            if not gpte & gpt.PT_DIRTY:
                access &= ~ACC_WRITE_MASK  # FNAME(protect_clean_gpte)
            slot = self.vm.gfn_to_memslot(gfn, sp.role.smm)
            slot = gfn_to_memslot_dirty_bitmap(slot, bool(access & ACC_WRITE_MASK))
            if slot is None or kvm_prefetch_pages(slot, gfn, 1) != 1:
                break
            self.set_prefetched_spte(sp, i, gfn, access, slot)
            done += 1
        return done

    # -- guest pte writes: write tracking and unsync ---------------------------------------
    # 6.18 mmu.c and paging_tmpl.h:
    # - `account_shadowed()`: an upper-level (level > 1) shadow page write-tracks its gfn
    #   (`__kvm_write_track_add_gfn`); a level-1 page only write-protects it.
    # - `mmu_try_to_unsync_pages()`: making a writable spte for a gfn that is
    #   write-tracked fails (-EPERM: the spte stays read-only and a write fault becomes
    #   RET_PF_WRITE_PROTECTED, emulated by `kvm_mmu_write_protect_fault()`); otherwise
    #   each level-1 page of the gfn goes unsync (`kvm_unsync_page()`:
    #   `kvm_mmu_unsync_page` tracepoint, `++kvm->stat.mmu_unsync`) and the spte is
    #   writable: the guest edits that table without exits, and the shadow page goes
    #   stale.  While synchronizing, any shadow page of the gfn forces write protection.
    # - `kvm_mmu_track_write()`: an emulated store into a write-tracked table:
    #   `++mmu_pte_write`; a page hit by write flooding (`detect_write_flooding()`: a third
    #   emulated write with no fault walking through the page in between; level-1 pages
    #   never count) or a misaligned write is zapped (`++mmu_flooded`), else the written
    #   spte alone (`mmu_page_zap_pte`, `++mmu_pde_zapped` for a non-zero upper-level
    #   entry).
    # Eras: the unsync mechanism is Marcelo Tosatti's (2.6.27, 2008), so the 2011 kernels
    # had it; `ShadowMmu(unsync=False)` is the earlier behaviour, every shadowed table
    # write-tracked.  Not modelled: misaligned or partial pte writes (the model's guest
    # stores whole ptes), the values an emulated store writes (the guest's own
    # `write_pte` that follows is it).

    def _track_write(self, table_gfn: int, index: int, old: int, new: int) -> None:
        """A guest pte store as KVM sees it once it landed (`guest_store`)."""
        self.guest_store(table_gfn, index, new)

    def guest_store(self, table_gfn: int, index: int, new: int) -> None:
        """A guest store of a whole pte into table `table_gfn`, after the CPU made it.  Not
        shadowed: plain memory.  Write-tracked: the store was emulated
        (`kvm_mmu_track_write()`).  Otherwise every shadow page of the table is unsync:
        the store's write fault unsynced them in `mmu_set_spte()` (`try_to_unsync`) or
        found them so, and the store went to memory with no exit.  A sync page here
        means a store that skipped its fault: nothing in KVM unsyncs a page without one
        (6.18 mmu.c: `mmu_try_to_unsync_pages()` is called from `make_spte()` only)."""
        sps = self.shadow_pages_of(table_gfn)
        if not sps:
            return
        if self.write_tracked(table_gfn):
            self.track_write(sps, index, new)
        elif not all(sp.unsync for sp in sps):
            raise AuditError(
                f"a store into table {table_gfn:#x}, write-protected, took no write fault"
            )

    def write_tracked(self, gfn: int, as_id: int | None = None) -> bool:
        """`kvm_gfn_is_write_tracked()`: an upper-level page shadows `gfn` (before unsync
        existed: any page)."""
        return any(
            sp.role.level > PG_LEVEL_4K or not self.unsync_enabled
            for sp in self.shadow_pages_of(gfn, as_id)
        )

    def try_to_unsync(
        self, gfn: int, as_id: int, synchronizing: bool = False, prefetch: bool = False
    ) -> bool:
        """`mmu_try_to_unsync_pages()`: True when the new spte must stay read-only (a
        prefetch never unsyncs: -EEXIST)."""
        sps = self.shadow_pages_of(gfn, as_id)
        if self.write_tracked(gfn, as_id):
            return True
        for sp in sps:
            if synchronizing:
                return True
            if sp.unsync:
                continue
            if prefetch:
                return True
            self.unsync_page(sp)
        return False

    def unsync_page(self, sp: KvmMmuPage) -> None:
        """`kvm_unsync_page()`: traced before `sp->unsync = 1`, so the line says "sync"."""
        self.pages.emit_sp("kvm_mmu_unsync_page", sp)
        self.pages.stat["mmu_unsync"] += 1
        sp.unsync = True

    def track_write(self, sps: list[KvmMmuPage], index: int, gentry: int) -> None:
        """`kvm_mmu_track_write()` for a whole-pte store at `index` of the pages `sps`."""
        stat = self.pages.stat
        stat["mmu_pte_write"] += 1
        for sp in sps:
            if sp.seq not in self.pages.active_mmu_pages:
                continue  # zapped with an earlier page of this store
            if detect_write_flooding(sp):
                self.pages.prepare_zap(sp)
                stat["mmu_flooded"] += 1
                continue
            if not is_empty_spte(sp.spt[index]):
                self.zap_spte(sp, index)
                if gentry and sp.role.level != PG_LEVEL_4K:
                    stat["mmu_pde_zapped"] += 1

    def zap_spte(self, sp: KvmMmuPage, index: int) -> None:
        """`mmu_page_zap_pte()`: unlink a child page or drop a leaf."""
        child = self.pages.child_at(sp, index)
        if child is not None:
            child.parent_ptes.discard(sp.sptep(index))
        elif not is_empty_spte(sp.spt[index]):
            self._drop_leaf(sp, index, sp.spt[index])
        sp.spt[index] = self.pages.nonpresent

    # -- sync ------------------------------------------------------------------------------
    # - `kvm_mmu_sync_roots()` (a CR3 load: KVM_REQ_MMU_SYNC, and `kvm_mmu_load()`):
    #   `mmu_sync_children()` write-protects each unsync page's gfn again, unlinks it from
    #   the unsync state (`kvm_unlink_unsync_page`, `--mmu_unsync`) and `kvm_sync_page()`s
    #   it: `kvm_mmu_sync_page`, then `FNAME(sync_spte)` for every spte (re-read the gpte:
    #   drop the spte when the gpte is not present or maps another gfn, else remake it
    #   with the gpte's access).
    # - `kvm_mmu_invalidate_addr()` (INVLPG): `kvm_sync_spte()` of the one spte of that
    #   gva in each unsync page on the path; the page stays unsync.

    def reachable_unsync(self, root: KvmMmuPage) -> list[KvmMmuPage]:
        """The unsync pages under `root` (the kernel follows `unsync_child_bitmap`)."""
        found: list[KvmMmuPage] = []
        for sp in self.pages.pages():
            if sp.unsync and self._under(sp, root):
                found.append(sp)
        return found

    def _under(self, sp: KvmMmuPage, root: KvmMmuPage) -> bool:
        todo, seen = [sp], set()
        while todo:
            page = todo.pop()
            if page is root:
                return True
            if page.seq in seen:
                continue
            seen.add(page.seq)
            todo.extend(self.pages.page_of_sptep(p) for p in page.parent_ptes)
        return False

    def sync_roots(self, root: KvmMmuPage) -> int:
        """`kvm_mmu_sync_roots()` → `mmu_sync_children()`: every unsync page under the root
        written-protected again, then synced; returns how many."""
        pages = self.reachable_unsync(root)
        for sp in pages:
            self.write_protect_gfn(sp.role.smm, sp.gfn)
        for sp in pages:
            sp.unsync = False  # kvm_unlink_unsync_page()
            self.pages.stat["mmu_unsync"] -= 1
            self.sync_page(sp)
        return len(pages)

    def sync_page(self, sp: KvmMmuPage) -> None:
        """`kvm_sync_page()`: the tracepoint, then `FNAME(sync_spte)` of every spte."""
        self.pages.emit_sp("kvm_mmu_sync_page", sp)
        for index, spte in enumerate(sp.spt):
            if not is_empty_spte(spte):
                self.sync_spte(sp, index)
        self.stat["synced_pages"] += 1

    def sync_spte(self, sp: KvmMmuPage, index: int) -> None:
        """`FNAME(sync_spte)`: make a level-1 spte agree with the gpte the guest wrote."""
        spte = sp.spt[index]
        if is_empty_spte(spte):
            return
        self.stat["synced_sptes"] += 1
        gpte = self.guest.pte(sp.gfn, index)
        if not gpte & gpt.PT_PRESENT:  # FNAME(prefetch_invalid_gpte)
            self.zap_spte(sp, index)
            return
        gfn = gpt.pte_gfn(gpte)
        access = sp.role.access & gpt.gpte_access(gpte)
        if not gpte & gpt.PT_DIRTY:
            access &= ~ACC_WRITE_MASK  # FNAME(protect_clean_gpte)
        if is_mmio_spte(self.cfg, spte):  # sync_mmio_spte()
            mmio_access = access & self.cfg.shadow_mmio_access_mask
            if get_mmio_spte_gfn(self.cfg, spte) != gfn or (
                get_mmio_spte_access(self.cfg, spte) != mmio_access
            ):
                sp.spt[index] = self.pages.nonpresent  # mmu_spte_clear_no_track()
            return
        tr = self.shadowed_translation.get(sp.sptep(index))
        if tr is None or tr.gfn != gfn:
            self.zap_spte(sp, index)  # drop_spte(): the gpte maps another gfn now
            return
        if access & ACC_WRITE_MASK and self.try_to_unsync(gfn, sp.role.smm, synchronizing=True):
            access &= ~ACC_WRITE_MASK
        writable = bool(spte & self.cfg.shadow_host_writable_mask)
        sp.spt[index] = make_spte(self.cfg, spte_to_pfn(spte), access, writable=writable)

    def invalidate_addr(self, root: KvmMmuPage, gva: int) -> None:
        """`__kvm_mmu_invalidate_addr()` (INVLPG): sync the gva's spte in unsync pages."""
        sp: KvmMmuPage | None = root
        while sp is not None:
            index = pt_index(gva, sp.role.level)
            if sp.unsync:
                self.sync_spte(sp, index)
            sp = self.pages.child_at(sp, index) if sp.role.level > PG_LEVEL_4K else None

    # -- audit -----------------------------------------------------------------------------
    # As KVM's old mmu audit code checked the same things: shadow pages against the guest
    # tables they shadow, rmaps against present leaves, roots against the vCPUs using
    # them, and the vtlbs against the guest walk.

    def audit(self) -> None:
        """`MmuPages.audit()` and the guest's tables, then: every spte of a page agrees
        with the gpte it shadows; every present leaf is in exactly one rmap (its gfn's,
        at 4K) and maps that gfn's host page; leaves under each loaded root map what the
        guest walk says; shadowed gfns have no writable leaf; root counts; vtlbs."""
        self.pages.audit()
        self.guest.audit()
        leaves: set[int] = set()
        for sp in self.pages.pages():
            self._audit_page(sp, leaves)
        seen: set[int] = set()
        for (as_id, slot_id, level), heads in self.rmaps.items():
            for key, head in heads.items():
                head.audit()
                for sptep in head:
                    tr = self.shadowed_translation.get(sptep)
                    where = (as_id, slot_id, key, level)
                    if sptep in seen or tr is None or (*tr[:2], *tr[3:]) != where:
                        raise AuditError(f"rmap entry {sptep:#x} is not a present leaf once")
                    seen.add(sptep)
        if seen != leaves or set(self.shadowed_translation) != leaves:
            raise AuditError(f"{len(leaves ^ seen)} present leaves and rmap entries differ")
        users: dict[int, int] = {}
        for vcpu, root in self.roots.items():
            users[root.seq] = users.get(root.seq, 0) + 1
            if not self.pages.is_obsolete(root):
                self._audit_walks(root, self.cr3s[vcpu], 0)
        for cached in self.prev_roots.values():  # each prev root holds a reference too
            if len(cached) > KVM_MMU_NUM_PREV_ROOTS:
                raise AuditError("more than KVM_MMU_NUM_PREV_ROOTS cached roots")
            for prev in cached:
                if prev is not None:
                    users[prev.seq] = users.get(prev.seq, 0) + 1
        for sp in [*self.pages.pages(), *self.pages.invalid_roots.values()]:
            if sp.root_count != users.get(sp.seq, 0):
                raise AuditError(f"{sp}: root_count {sp.root_count}, {users.get(sp.seq, 0)} users")
        expected = {
            sp.seq: (sp.role.smm, sp.gfn) for sp in self.pages.pages() if not sp.role.direct
        }
        wrong = self.levels.audit(expected)
        if wrong is not None:
            raise AuditError(wrong)
        if self.vtlbs is not None:
            self.vtlbs.audit(self.cr3s, self._guest_translation)

    def _audit_page(self, sp: KvmMmuPage, leaves: set[int]) -> None:
        as_id, level, direct = sp.role.smm, sp.role.level, bool(sp.role.direct)
        if sp.unsync and (direct or level != 1 or not self.unsync_enabled):
            raise AuditError(f"{sp} is unsync but not an indirect level-1 page")
        if (
            not direct
            and not self.writable_leaf_allowed(sp.gfn, as_id)
            and any(
                self.pages.page_of_sptep(p).spt[spte_index(p)] & PT_WRITABLE_MASK
                for p in self._rmap_of(as_id, sp.gfn, ALL_LEVELS)
            )
        ):
            raise AuditError(f"shadowed gfn {sp.gfn:#x} has a writable leaf")
        if sp.unsync:  # stale until the next sync: only the rmap side must hold
            for index, spte in enumerate(sp.spt):
                if not is_empty_spte(spte) and not is_mmio_spte(self.cfg, spte):
                    leaves.add(sp.sptep(index))
            return
        for index, spte in enumerate(sp.spt):
            if is_empty_spte(spte):
                continue
            where = f"{sp} index {index}"
            gpte = 0 if direct else self.guest.pte(sp.gfn, index)
            if direct:
                want, access = sp.gfn + (index << 9 * (level - 1)), sp.role.access
            elif gpte & gpt.PT_PRESENT:
                want, access = gpt.pte_gfn(gpte), sp.role.access & gpt.gpte_access(gpte)
            else:
                raise AuditError(f"{where}: an spte for a non-present gpte")
            if level > 1 and is_large_pte(spte):
                if not (direct or gpte & gpt.PT_PAGE_SIZE):
                    raise AuditError(f"{where}: a huge leaf where the guest has a table")
                self._audit_leaf(sp, index, want, access, direct or bool(gpte & gpt.PT_DIRTY))
                leaves.add(sp.sptep(index))
            elif level > 1:
                child, huge = self.pages.child_at(sp, index), direct or gpte & gpt.PT_PAGE_SIZE
                if child is None or (child.gfn, bool(child.role.direct)) != (want, bool(huge)):
                    raise AuditError(f"{where} links {child}, the guest says {want:#x}")
                if not huge and child.role.access != access:
                    raise AuditError(f"{child}: access {child.role.access}, guest {access}")
            elif is_mmio_spte(self.cfg, spte):
                fresh = check_mmio_spte(self.cfg, spte, self.vm.generation(as_id))
                gfn = get_mmio_spte_gfn(self.cfg, spte)
                if gfn != want or (fresh and self.vm.gfn_to_memslot(gfn, as_id) is not None):
                    raise AuditError(f"{where}: a wrong MMIO spte for gfn {want:#x}")
            else:
                self._audit_leaf(sp, index, want, access, direct or bool(gpte & gpt.PT_DIRTY))
                leaves.add(sp.sptep(index))

    def _audit_leaf(self, sp: KvmMmuPage, index: int, gfn: int, access: int, dirty: bool) -> None:
        spte, where = sp.spt[index], f"{sp} index {index}"
        tr = self.shadowed_translation.get(sp.sptep(index))
        slot = self.vm.slot(sp.role.smm, tr.slot_id) if tr is not None else None
        level = sp.role.level
        if tr is None or slot is None or tr.gfn != gfn or not slot.contains(gfn):
            raise AuditError(f"{where}: the leaf does not map gfn {gfn:#x}")
        if tr.level != level or gfn % kvm_pages_per_hpage(level):
            raise AuditError(f"{where}: a level-{level} leaf on the level-{tr.level} rmap")
        if (
            level > 1
            and spte & PT_WRITABLE_MASK
            and self.levels.shadowed_in(sp.role.smm, gfn, level)
        ):
            raise AuditError(f"{where}: a writable huge leaf over a shadowed table")
        if level > 1 and self.nx and not spte & self.cfg.shadow_nx_mask:
            raise AuditError(f"{where}: an executable huge leaf under nx_huge_pages")
        if spte_to_pfn(spte) != self.levels.gfn_to_pfn(slot, gfn):
            raise AuditError(f"{where}: the leaf maps the wrong host page")
        if spte & PT_WRITABLE_MASK and not (access & ACC_WRITE_MASK and dirty):
            raise AuditError(f"{where}: writable beyond the (clean or read-only) gpte")
        if spte & PT_USER_MASK and not access & ACC_USER_MASK:
            raise AuditError(f"{where}: user access beyond the gpte")

    def _audit_walks(self, sp: KvmMmuPage, cr3: int, gva: int) -> None:
        """Each leaf reachable from a loaded root maps what the guest walk says."""
        for index, spte in enumerate(sp.spt):
            address = gva | index << (PAGE_SHIFT + 9 * (sp.role.level - 1))
            child = self.pages.child_at(sp, index)
            if child is not None:
                self._audit_walks(child, cr3, address)
            elif not is_empty_spte(spte) and not sp.unsync:
                tr = self.shadowed_translation.get(sp.sptep(index))
                gfn = get_mmio_spte_gfn(self.cfg, spte) if tr is None else tr.gfn
                if self.guest.translate(cr3, address).gfn != gfn:
                    raise AuditError(f"cr3 {cr3:#x} gva {address:#x}: the leaf maps {gfn:#x}")

    def _guest_translation(self, cr3: int, gva: int) -> tuple[int, int]:
        walk = self.guest.translate(cr3, gva)
        return (-1, 0) if walk.gfn is None else (walk.gfn, walk.access)

    def writable_leaf_allowed(self, gfn: int, as_id: int) -> bool:
        """For the audit: a leaf may map a shadowed gfn writable only while its pages are
        unsync."""
        sps = self.shadow_pages_of(gfn, as_id)
        return all(sp.unsync for sp in sps)
