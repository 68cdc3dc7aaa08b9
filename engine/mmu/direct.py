"""The fault path of the shadow MMU with direct pages (EPT/NPT on, tdp_mmu=N), with MMIO
sptes and rmaps (kvm-reference §3-§6).

`DirectMmu.page_fault(vcpu, gpa, write)` follows `kvm_mmu_page_fault()` → `direct_map()`:
- a reserved-bit fault on a cached MMIO spte is `handle_mmio_page_fault()`: if the spte's
  19-bit generation matches the memslots generation the access is emulated at once
  (RET_PF_EMULATE, no memslot search); otherwise RET_PF_INVALID and the real fault path
  rebuilds it;
- the real path looks up the memslot (the vCPU's `last_used_slot`, then the gfn tree),
  picks the leaf level (2M when the slot covers the whole aligned 2M range and does not
  log dirty pages, else 4K), walks from the vCPU's root creating direct child pages
  (`kvm_mmu_get_child_sp`) and installs the leaf: an MMIO spte (`mark_mmio_spte`,
  RET_PF_EMULATE) when no slot holds the gfn, else a present spte added to the slot's
  rmap of that level (RET_PF_FIXED);
- a memslot DELETE or MOVE zaps everything fast (`kvm_arch_flush_shadow_memslot`), and a
  generation whose 19 MMIO bits wrap zaps fast too (`kvm_mmu_invalidate_mmio_sptes`).

Speed without a second model (the `mmuscope bench` numbers; every shortcut gives the same
result, stats and events as the long way, and tests compare them):
- bare mode: with no listener no Event and no field dict is built;
- leaf sptes: `make_spte()` runs once per (level, writable, dirty) with pfn 0 to learn the
  constant bits; a pfn that fits bits 12-51, is aligned for the level and sets no bit of
  the MMIO mask gives `constant | pfn << 12`, which is exactly `make_spte()` (any other pfn
  takes `make_spte()` itself, which raises where the kernel would WARN);
- a per-vCPU hint (root, 2M region, level-1 page) skips the walk from the root while no
  shadow page was zapped since (`MmuPages.stat["mmu_shadow_zapped"]`), the root is the
  same and no huge leaf was zapped; only a 4K leaf in an empty slot of that page uses it;
- the vCPU's `last_used_slot` is read here, and only a miss goes to
  `Vm.vcpu_gfn_to_memslot()` (which resets and refills it exactly as before);
- rmaps hold `kvm_rmap_head.val` as the kernel does (`rmap.RmapVal`): one sptep is a bare
  int in the per-slot, per-level dict; the second sptep of a gfn makes a `KvmRmapHead`
  (1 -> many), which keeps its desc down to one entry.  `rmaps` decodes them into heads.
"""

from __future__ import annotations

from collections.abc import Callable

from ..constants import KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY
from ..errors import AuditError
from ..events import Event, FieldValue
from ..memslot import MemorySlot
from ..vm import Vm
from .direct_tables import RmapsView, _spte_key, spte_constants
from .direct_tables import SlotRmaps as SlotRmaps  # re-exported (public before)
from .fast_pf import (
    FastPageFault,
    fast_pf_get_last_sptep,
    fault_error_code,
    mark_page_dirty_in_slot,
)
from .mmio_info import VcpuMmioInfo
from .mmu_pages import KvmMmuPage, MmuPages, default_mmu_pages
from .rmap import (
    ERAS,
    KvmRmapHead,
    RmapVal,
    check_sptep,
    rmap_val_add,
    rmap_val_remove,
    rmap_val_sptes,
)
from .role import ACC_ALL, PG_LEVEL_2M, PG_LEVEL_4K, KvmMmuPageRole, tdp_root_role
from .spte import (
    KVM_PFN_NOSLOT,
    SPTE_CONFIGS,
    RetPf,
    SpteConfig,
    check_mmio_spte,
    check_mmio_spte_traced,
    get_mmio_spte_access,
    get_mmio_spte_generation,
    is_mmio_spte,
    is_shadow_present_pte,
    kvm_mmio_fields,
    make_mmio_spte,
    make_spte,
    memslot_update_zaps,
    spte_requested_fields,
    spte_to_pfn,
)
from .vcpu_memslot import VcpuMemslotCache

PAGE_SHIFT = 12
LEVEL_BITS = 9
_PFN_BITS = 40  # bits 12-51 of an spte
_FIXED = RetPf.FIXED

RmapKey = tuple[int, int, int]  # (as_id, slot id, level)
_L1Hint = tuple[KvmMmuPage, int, KvmMmuPage, int]  # root, gfn >> 9, level-1 page, zapped


def level_shift(level: int) -> int:
    """gfn bits below one entry of a page table of `level` (0 for 4K leaves)."""
    return LEVEL_BITS * (level - 1)


def spte_index(gfn: int, level: int) -> int:
    return (gfn >> level_shift(level)) & 511


def gfn_to_index(gfn: int, base_gfn: int, level: int) -> int:
    """`gfn_to_index()`: the rmap slot of `gfn` at `level` within a memslot."""
    return (gfn >> level_shift(level)) - (base_gfn >> level_shift(level))


class DirectMmu:
    """One VM's direct-paging MMU: roots per vCPU, shadow pages, leaves, rmaps."""

    def __init__(
        self,
        vm: Vm,
        cfg: SpteConfig | None = None,
        *,
        pte_list_era: str = "6.4",
        huge_pages: bool = True,
        gen_era: str = "2019",
        emit: Callable[[Event], None] | None = None,
        mmio_info_cache: bool = True,
        fast_pf: bool = True,
    ) -> None:
        self.vm = vm
        self.mmio_info = VcpuMmioInfo(mmio_info_cache)  # False: before 3.1
        self.cfg = cfg or SPTE_CONFIGS["ept"]
        self.era = ERAS[pte_list_era]
        self.huge_pages = huge_pages
        self._listener = emit
        self.pages = MmuPages(
            default_mmu_pages(vm.nr_memslot_pages),
            gen_era=gen_era,
            emit=self._emit,
            on_leaf_zapped=self._drop_leaf,
            cfg=self.cfg,
        )
        # kvm_rmap_head.val per (as_id, slot id, level) and gfn_to_index: see RmapVal.
        self.rmap_vals: dict[RmapKey, dict[int, RmapVal]] = {}
        self.roots: dict[int, KvmMmuPage] = {}
        self.stat = dict.fromkeys(
            ("pf_taken", "pf_fixed", "pf_emulate", "pf_spurious", "pf_mmio_spte_created"), 0
        )
        self.mark_page_dirty: Callable[[MemorySlot, int], None] | None = None  # dirty_log
        # fast_page_fault() (since 3.6, 2012; False: the 2011 era), fast_pf.py
        self.fast_pf = FastPageFault(self, self._fast_pf_last_sptep) if fast_pf else None
        self._spte_bits = spte_constants(self.cfg)
        self._l1_hint: dict[int, _L1Hint] = {}
        self._child_roles: dict[KvmMmuPageRole, KvmMmuPageRole] = {}
        self._vcpu_gfn_to_memslot = VcpuMemslotCache(vm).lookup
        self._rmap4k_slot: MemorySlot | None = None  # the slot whose 4K vals come next
        self._rmap4k_vals: dict[int, RmapVal] = {}
        vm.subscribe(self._memslots_changed)

    @property
    def rmaps(self) -> RmapsView:
        """The rmaps as heads, (as_id, slot id, level) -> gfn_to_index -> KvmRmapHead."""
        return RmapsView(self.rmap_vals, self.era)

    # -- events ---------------------------------------------------------------------

    def _emit(self, name: str, **fields: FieldValue) -> None:
        if self._listener is not None:
            self._listener(Event(name, fields))

    def _memslots_changed(self, event: Event) -> None:
        """DELETE/MOVE flush (`kvm_arch_flush_shadow_memslot`) or an MMIO generation wrap
        (`kvm_mmu_invalidate_mmio_sptes`): zap everything, fast.  A CREATE or DELETE that
        went through resizes the page budget (`kvm_arch_commit_memory_region`)."""
        if event.name == "kvm_set_user_memory_region":
            if event.fields.get("ret") == 0:
                change = str(event.fields.get("change", ""))
                self.pages.commit_memory_region(change, self.vm.nr_memslot_pages)
            return
        gen = int(event.fields.get("gen", 0))
        if memslot_update_zaps(event.name, gen, self.vm.address_spaces):
            self.zap_all_fast()

    def free_obsolete_roots(self) -> int:
        """KVM_REQ_MMU_FREE_OBSOLETE_ROOTS as each vCPU handles it at its next entry
        (`kvm_mmu_free_obsolete_roots()`): drop an obsolete root; returns how many."""
        return self.pages.put_obsolete_roots(self.roots)

    # -- roots ----------------------------------------------------------------------

    def root(self, vcpu: int) -> KvmMmuPage:
        """`kvm_mmu_load()`: the vCPU's root, made again after a fast zap obsoletes it."""
        root = self.roots.get(vcpu)
        if root is not None and not self.pages.is_obsolete(root):
            return root
        if root is not None:
            self.pages.put_root(root)  # KVM_REQ_MMU_FREE_OBSOLETE_ROOTS
        as_id = self.vm.vcpu(vcpu).as_id
        self.pages.make_mmu_pages_available()
        role = tdp_root_role(smm=bool(as_id), ad_disabled=self.cfg.ad_disabled)
        root, _ = self.pages.get_page(0, role)
        root.root_count += 1
        self.roots[vcpu] = root
        return root

    def zap_all_fast(self) -> int:
        return self.pages.zap_all_fast()

    # -- the fault --------------------------------------------------------------------

    def page_fault(
        self, vcpu: int, gpa: int, write: bool = False, error_code: int | None = None
    ) -> RetPf:
        """`kvm_mmu_page_fault()` (6.18 mmu.c) for a guest-physical address.

        A hit on a current MMIO spte (the RSVD/EPT-misconfig path,
        `handle_mmio_page_fault()`) jumps to `emulate:`: neither `pf_taken` nor
        `pf_emulate` counts it.  Only the `RET_PF_INVALID` path counts `pf_taken`.
        `direct_page_fault()` then tries `fast_page_fault()` (fast_pf.py) before the
        slow path; `error_code` is `fault->error_code` (default: what the exit on the
        spte the walk reads gives, `fault_error_code`)."""
        gfn = gpa >> PAGE_SHIFT
        pages = self.pages
        root = self.roots.get(vcpu)
        if root is None or root.role.invalid or root.mmu_valid_gen != pages.mmu_valid_gen:
            root = self.root(vcpu)
        hint = self._l1_hint.get(vcpu)
        if (
            hint is not None
            and hint[1] == gfn >> LEVEL_BITS
            and hint[0] is root
            and hint[3] == pages.stat["mmu_shadow_zapped"]
            and not hint[2].spt[gfn & 511]  # nothing there: not an MMIO spte either
        ):
            # The walk from the root ends at this level-1 page, as when the hint was taken.
            self.stat["pf_taken"] += 1
            slot = self._vcpu_gfn_to_memslot(vcpu, gfn)
            fast = self.fast_pf
            if fast is not None and not fast.kvm_ad_enabled:  # a not-present entry
                code = fault_error_code(self.cfg, 0, write) if error_code is None else error_code
                fast.page_fault(vcpu, gpa, slot, code)  # RET_PF_INVALID: it is not present
            if (
                slot is not None
                and not (write and slot.flags & KVM_MEM_READONLY)
                and (not self.huge_pages or self.max_level(slot, gfn) == PG_LEVEL_4K)
            ):
                return self._set_leaf(hint[2], gfn & 511, gfn, slot, PG_LEVEL_4K, write)
            return self._slow_path(vcpu, root, gfn, slot, write)
        leaf_page, index = self._walk_existing(root, gfn)
        if (
            leaf_page is not None
            and is_mmio_spte(self.cfg, leaf_page.spt[index])
            and self._handle_mmio_page_fault(vcpu, root, gfn, leaf_page.spt[index], write)
        ):
            return RetPf.EMULATE  # else a stale generation: RET_PF_INVALID, the real path
        self.stat["pf_taken"] += 1
        slot = self._vcpu_gfn_to_memslot(vcpu, gfn)
        fast = self.fast_pf
        if fast is not None:
            spte = 0 if leaf_page is None else leaf_page.spt[index]
            if fast.wants(write, spte):
                code = fault_error_code(self.cfg, spte, write) if error_code is None else error_code
                ret = fast.page_fault(vcpu, gpa, slot, code)
                if ret is not RetPf.INVALID:
                    return ret
        return self._slow_path(vcpu, root, gfn, slot, write)

    def _fast_pf_last_sptep(self, vcpu: int, gfn: int) -> tuple[KvmMmuPage, int]:
        """`fast_pf_get_last_sptep()` from the vCPU's root (fast_pf.py)."""
        return fast_pf_get_last_sptep(self.pages.child_at, self.roots[vcpu], gfn)

    def _handle_mmio_page_fault(
        self, vcpu: int, root: KvmMmuPage, gfn: int, spte: int, write: bool
    ) -> bool:
        """`handle_mmio_page_fault(vcpu, addr, direct=true)`: True (RET_PF_EMULATE) when
        the vCPU's MMIO info holds this gpa (`vcpu_match_mmio_gpa`), or the MMIO spte's
        generation is current.  The trace prints `addr` 0 (direct) and
        `get_mmio_spte_access(spte)` = spte & shadow_mmio_access_mask (0 on EPT)."""
        gen = self.vm.generation(root.role.smm)
        if self.mmio_info.match_gpa(vcpu, gfn << PAGE_SHIFT, gen) is not None:
            if self._listener is not None:
                self._emit_mmio(gfn << PAGE_SHIFT, write)
            return True
        if self._listener is None:
            if not check_mmio_spte(self.cfg, spte, gen):
                return False
        else:
            valid, fields = check_mmio_spte_traced(self.cfg, spte, gen)
            if fields is not None:
                self._emit("check_mmio_spte", **fields)
            if not valid:
                return False
            access = get_mmio_spte_access(self.cfg, spte)
            self._emit("handle_mmio_page_fault", addr=0, gfn=gfn, access=access)
        self.mmio_info.cache(vcpu, 0, gfn, get_mmio_spte_access(self.cfg, spte), gen)
        if self._listener is not None:
            self._emit_mmio(gfn << PAGE_SHIFT, write)
        return True

    def max_gfn(self) -> int:
        """`kvm_mmu_max_gfn()` with TDP on: the host's MAXPHYADDR."""
        return (1 << (self.cfg.host_phys_bits - PAGE_SHIFT)) - 1

    def _slow_path(
        self, vcpu: int, root: KvmMmuPage, gfn: int, slot: MemorySlot | None, write: bool
    ) -> RetPf:
        """`direct_page_fault()` after the memslot lookup: `kvm_mmu_faultin_pfn()` may end
        the fault before any page table is touched, otherwise `direct_map()`.

        - no slot, MMIO caching off or a gfn above `kvm_mmu_max_gfn()`:
          `kvm_handle_noslot_fault()` returns RET_PF_EMULATE at once;
        - a write to a read-only slot: `__kvm_faultin_pfn()` gets KVM_PFN_ERR_RO_FAULT and
          `kvm_handle_error_pfn()` returns RET_PF_EMULATE (no spte is made or changed)."""
        if slot is None:  # kvm_handle_noslot_fault(): the vCPU's MMIO info first
            self.mmio_info.cache(vcpu, 0, gfn, 0, self.vm.generation(root.role.smm))
        if (slot is None and (not self.cfg.mmio_caching_enabled or gfn > self.max_gfn())) or (
            slot is not None and write and slot.flags & KVM_MEM_READONLY
        ):
            self.stat["pf_emulate"] += 1
            if self._listener is not None:
                self._emit_mmio(gfn << PAGE_SHIFT, write)
            return RetPf.EMULATE
        return self._direct_map(vcpu, root, gfn, slot, write)

    def _emit_mmio(self, gpa: int, write: bool) -> None:
        self._emit("kvm_mmio", **kvm_mmio_fields(gpa, write))

    def _walk_existing(self, root: KvmMmuPage, gfn: int) -> tuple[KvmMmuPage | None, int]:
        """The lockless walk of `get_mmio_spte()`: the last page reached and the index."""
        sp = root
        while True:
            index = spte_index(gfn, sp.role.level)
            child = self.pages.child_at(sp, index)
            if child is None:
                return (sp, index) if sp.spt[index] else (None, 0)
            sp = child

    def max_level(self, slot: MemorySlot | None, gfn: int) -> int:
        """2M when the slot maps the whole aligned 2M range, logs no dirty pages, and its
        gfns and host addresses are aligned alike (`kvm_alloc_memslot_metadata()` disallows
        large pages when `(base_gfn ^ (userspace_addr >> PAGE_SHIFT))` is misaligned)."""
        if slot is None or not self.huge_pages or slot.dirty_logging:
            return PG_LEVEL_4K
        pages = 1 << LEVEL_BITS
        if (slot.base_gfn ^ (slot.userspace_addr >> PAGE_SHIFT)) & (pages - 1):
            return PG_LEVEL_4K
        start = gfn & ~(pages - 1)
        if slot.base_gfn <= start and start + pages <= slot.end_gfn:
            return PG_LEVEL_2M
        return PG_LEVEL_4K

    def _direct_map(
        self, vcpu: int, root: KvmMmuPage, gfn: int, slot: MemorySlot | None, write: bool
    ) -> RetPf:
        # Once per fault, after faultin and with mmu_lock held, before the walk
        # (`direct_page_fault()`): freeing pages in the walk could zap the parent.
        self.pages.make_mmu_pages_available()
        level = self.max_level(slot, gfn)
        if self._listener is not None:
            pfn = KVM_PFN_NOSLOT if slot is None else self._pfn(slot, gfn, level)
            self._emit("kvm_mmu_spte_requested", **spte_requested_fields(gfn, pfn, level))
        zapped = self.pages.stat["mmu_shadow_zapped"]
        sp = root
        while sp.role.level > level:
            index = spte_index(gfn, sp.role.level)
            child = self.pages.child_at(sp, index)
            if child is None:
                if sp.spt[index]:
                    self._zap_leaf(sp, index)  # a huge leaf in the way
                child = self._child(sp, gfn, index)
            sp = child
        if sp.role.level == PG_LEVEL_4K and self.pages.stat["mmu_shadow_zapped"] == zapped:
            self._l1_hint[vcpu] = (root, gfn >> LEVEL_BITS, sp, zapped)
        index = spte_index(gfn, level)
        if level > PG_LEVEL_4K:
            child = self.pages.child_at(sp, index)
            if child is not None:
                # `mmu_set_spte()`: "If we overwrite a PTE page pointer with a 2MB PMD,
                # unlink the parent of the now unreachable PTE" (`drop_parent_pte`), e.g.
                # 4K leaves made while the slot logged dirty pages.
                child.parent_ptes.discard(sp.sptep(index))
                sp.spt[index] = 0
                self._l1_hint.clear()
        if slot is not None and self._same_leaf(sp, index, slot, gfn, level):
            self.stat["pf_spurious"] += 1
            return RetPf.SPURIOUS  # `mmu_set_spte()`: already mapped (another vCPU won)
        if sp.spt[index]:
            self._zap_leaf(sp, index)
        if slot is None:  # caching on (else _slow_path emulated): mark_mmio_spte()
            self.stat["pf_emulate"] += 1
            gen = self.vm.generation(root.role.smm)
            sp.spt[index] = spte = make_mmio_spte(self.cfg, gfn, ACC_ALL, gen)
            self.stat["pf_mmio_spte_created"] += 1
            if self._listener is not None:
                # trace_mark_mmio_spte(): access = spte & ACC_ALL, gen read back (19 bits)
                self._emit(
                    "mark_mmio_spte",
                    sptep=sp.sptep(index),
                    gfn=gfn,
                    access=spte & ACC_ALL,
                    gen=get_mmio_spte_generation(spte),
                )
                self._emit_mmio(gfn << PAGE_SHIFT, write)
            return RetPf.EMULATE
        return self._set_leaf(sp, index, gfn, slot, level, write)

    def spte_for(self, pfn: int, level: int, writable: bool, dirty: bool) -> int:
        """The leaf `make_spte(cfg, pfn, ACC_ALL, level, writable=, accessed=True, dirty=)`
        gives, from the precomputed constant bits when the pfn allows it."""
        const, forbidden = self._spte_bits[_spte_key(level, writable, dirty)]
        if pfn & forbidden:
            return make_spte(
                self.cfg, pfn, ACC_ALL, level, writable=writable, accessed=True, dirty=dirty
            )
        return const | pfn << PAGE_SHIFT

    def _set_leaf(
        self, sp: KvmMmuPage, index: int, gfn: int, slot: MemorySlot, level: int, write: bool
    ) -> RetPf:
        """`mmu_set_spte()` for RAM: the leaf, its rmap entry, the tracepoint.

        `make_spte()` (6.18 spte.c) sets the dirty mask with every writable spte, read
        fault or write (`spte |= spte_shadow_dirty_mask(spte)` under ACC_WRITE_MASK):
        `write` only decides the fault's path, not the spte."""
        writable = not slot.flags & KVM_MEM_READONLY
        if level == PG_LEVEL_4K:
            base = gfn
            const, forbidden = self._spte_bits[7 if writable else 5]
        else:
            base = gfn & ~((1 << level_shift(level)) - 1)
            const, forbidden = self._spte_bits[_spte_key(level, writable, True)]
        pfn = (slot.userspace_addr >> PAGE_SHIFT) + (base - slot.base_gfn)
        if pfn & forbidden:
            spte = make_spte(self.cfg, pfn, ACC_ALL, level, writable=writable, accessed=True)
        else:
            spte = const | pfn << PAGE_SHIFT
        sp.spt[index] = spte
        sptep = sp.spt_pa + 8 * index
        if level == PG_LEVEL_4K:
            if slot is self._rmap4k_slot:
                vals = self._rmap4k_vals
            else:
                vals = self.rmap_vals.setdefault((slot.as_id, slot.id, level), {})
                self._rmap4k_slot, self._rmap4k_vals = slot, vals
            key = gfn - slot.base_gfn
        else:
            vals = self.rmap_vals.setdefault((slot.as_id, slot.id, level), {})
            key = gfn_to_index(gfn, slot.base_gfn, level)
        old = vals.get(key)
        if old is None:
            vals[key] = sptep  # pte_list_add 0 -> 1: val is the sptep itself
        else:
            vals[key] = rmap_val_add(old, sptep, self.era)
        if self._listener is not None:
            self._emit("kvm_mmu_set_spte", gfn=base, spte=spte, level=level, sptep=sptep)
        if writable and slot.flags & KVM_MEM_LOG_DIRTY_PAGES:
            mark_page_dirty_in_slot(self, slot, gfn)  # make_spte()
        self.stat["pf_fixed"] += 1
        return _FIXED

    def _pfn(self, slot: MemorySlot, gfn: int, level: int) -> int:
        base = gfn & ~((1 << level_shift(level)) - 1)
        return (slot.userspace_addr >> PAGE_SHIFT) + (base - slot.base_gfn)

    def _same_leaf(
        self, sp: KvmMmuPage, index: int, slot: MemorySlot, gfn: int, level: int
    ) -> bool:
        """`mmu_set_spte()`'s RET_PF_SPURIOUS: the spte `make_spte()` would make is there
        already.  A leaf of the same pfn with other bits (write-protected for dirty
        logging, access-tracked) is updated in place: RET_PF_FIXED."""
        spte = sp.spt[index]
        if not is_shadow_present_pte(spte) or is_mmio_spte(self.cfg, spte):
            return False
        pfn = self._pfn(slot, gfn, level)
        if spte_to_pfn(spte) != pfn:
            return False
        return spte == self.spte_for(pfn, level, not slot.flags & KVM_MEM_READONLY, True)

    def _child(self, parent: KvmMmuPage, gfn: int, index: int) -> KvmMmuPage:
        """`kvm_mmu_get_child_sp()`: the direct page mapping this part of the parent."""
        level = parent.role.level - 1
        base = gfn & ~((1 << (LEVEL_BITS * level)) - 1)
        role = self._child_roles.get(parent.role)
        if role is None:
            role = self._child_roles[parent.role] = parent.role.child(ACC_ALL, direct=True)
        child, _ = self.pages.get_page(base, role)
        self.pages.link(parent, index, child)
        return child

    # -- rmaps --------------------------------------------------------------------

    def _zap_leaf(self, sp: KvmMmuPage, index: int) -> None:
        if sp.role.level > PG_LEVEL_4K:
            self._l1_hint.clear()  # the walk below this entry changes
        self._drop_leaf(sp, index, sp.spt[index])
        sp.spt[index] = 0

    def _drop_leaf(self, sp: KvmMmuPage, index: int, spte: int) -> None:
        """A present leaf goes away: take it off its gfn's rmap (`drop_spte`)."""
        if is_mmio_spte(self.cfg, spte):
            return
        gfn = sp.gfn + (index << level_shift(sp.role.level))
        as_id, level = sp.role.smm, sp.role.level
        slot = self.vm.memslot_set(as_id).gfn_tree.search(gfn)
        if slot is None:
            raise AuditError(f"present leaf {sp.sptep(index):#x} maps gfn {gfn:#x} of no slot")
        vals = self.rmap_vals.get((as_id, slot.id, level), {})
        key = gfn_to_index(gfn, slot.base_gfn, level)
        sptep = sp.spt_pa + 8 * index
        old = vals.get(key)
        if type(old) is int and old == sptep:
            del vals[key]  # pte_list_remove 1 -> 0
            return
        if rmap_val_remove(old, sptep) is None:
            del vals[key]

    def audit(self) -> None:
        """Pages consistent; every rmap entry is a present leaf of its gfn and level, and
        every present leaf is in exactly one rmap; rmap vals encoded as the kernel's."""
        self.pages.audit()
        leaves: dict[int, KvmMmuPage] = {}
        for sp in self.pages.pages():
            for index, spte in enumerate(sp.spt):
                leaf = spte and self.pages.child_at(sp, index) is None
                if leaf and not is_mmio_spte(self.cfg, spte):
                    leaves[sp.sptep(index)] = sp
        seen: set[int] = set()
        for (as_id, slot_id, level), vals in self.rmap_vals.items():
            for key, val in vals.items():
                if isinstance(val, KvmRmapHead):
                    val.audit()
                    if val.era is not self.era or not val.is_many:
                        raise AuditError(f"rmap val of {key} is a head without descs")
                else:
                    try:
                        check_sptep(val)
                    except ValueError as err:
                        raise AuditError(f"rmap val {val:#x} of {key}: {err}") from None
                for sptep in rmap_val_sptes(val):
                    holder = leaves.get(sptep)
                    if holder is None or holder.role.level != level or sptep in seen:
                        raise AuditError(f"rmap entry {sptep:#x} is not a present leaf once")
                    gfn = holder.gfn + (((sptep & 0xFFF) >> 3) << level_shift(level))
                    slot = self.vm.memslot_set(as_id).gfn_tree.search(gfn)
                    if (
                        holder.role.smm != as_id
                        or slot is None
                        or slot.id != slot_id
                        or gfn_to_index(gfn, slot.base_gfn, level) != key
                    ):
                        raise AuditError(f"rmap entry {sptep:#x} is in the rmap of another gfn")
                    seen.add(sptep)
        if seen != set(leaves):
            raise AuditError(f"{len(set(leaves) - seen)} present leaves are in no rmap")
