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
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import AuditError
from ..events import Event, FieldValue
from ..memslot import MemorySlot
from ..vm import Vm
from .mmu_pages import KvmMmuPage, MmuPages, default_mmu_pages
from .rmap import ERAS, RmapHead
from .role import ACC_ALL, PG_LEVEL_2M, PG_LEVEL_4K, tdp_root_role
from .spte import (
    SPTE_CONFIGS,
    RetPf,
    SpteConfig,
    check_mmio_spte,
    is_mmio_spte,
    is_shadow_present_pte,
    make_mmio_spte,
    make_spte,
    mmio_gen_wraps,
    spte_to_pfn,
)

PAGE_SHIFT = 12
LEVEL_BITS = 9


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
    ) -> None:
        self.vm = vm
        self.cfg = cfg or SPTE_CONFIGS["ept"]
        self.era = ERAS[pte_list_era]
        self.huge_pages = huge_pages
        self._listener = emit
        self.pages = MmuPages(
            default_mmu_pages(vm.nr_memslot_pages),
            gen_era=gen_era,
            emit=self._emit,
            on_leaf_zapped=self._drop_leaf,
        )
        self.rmaps: dict[tuple[int, int, int], dict[int, RmapHead]] = {}
        self.roots: dict[int, KvmMmuPage] = {}
        self.stat = dict.fromkeys(
            ("pf_taken", "pf_fixed", "pf_emulate", "pf_spurious", "pf_mmio_spte_created"), 0
        )
        vm.subscribe(self._memslots_changed)

    # -- events ---------------------------------------------------------------------

    def _emit(self, name: str, **fields: FieldValue) -> None:
        if self._listener is not None:
            self._listener(Event(name, fields))

    def _memslots_changed(self, event: Event) -> None:
        if event.name == "kvm_arch_flush_shadow_memslot":
            self.zap_all_fast()
        elif event.name == "kvm_arch_memslots_updated" and mmio_gen_wraps(
            int(event.fields["gen"]), self.vm.address_spaces
        ):
            self.zap_all_fast()  # "zapping shadow pages for mmio generation wraparound"

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
        root, _ = self.pages.get_page(0, tdp_root_role(smm=bool(as_id)))
        root.root_count += 1
        self.roots[vcpu] = root
        return root

    def zap_all_fast(self) -> int:
        return self.pages.zap_all_fast()

    # -- the fault --------------------------------------------------------------------

    def page_fault(self, vcpu: int, gpa: int, write: bool = False) -> RetPf:
        """`kvm_mmu_page_fault()` for a guest-physical address."""
        self.stat["pf_taken"] += 1
        gfn = gpa >> PAGE_SHIFT
        root = self.root(vcpu)
        leaf_page, index = self._walk_existing(root, gfn)
        if leaf_page is not None and is_mmio_spte(self.cfg, leaf_page.spt[index]):
            spte = leaf_page.spt[index]
            if check_mmio_spte(self.cfg, spte, self.vm.generation(root.role.smm)):
                self._emit("handle_mmio_page_fault", addr=0, gfn=gfn, access=ACC_ALL)
                self.stat["pf_emulate"] += 1
                return RetPf.EMULATE
            # A stale generation: RET_PF_INVALID, then the real fault path below.
        slot = self.vm.vcpu_gfn_to_memslot(vcpu, gfn)
        return self._direct_map(root, gfn, slot, write)

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
        self, root: KvmMmuPage, gfn: int, slot: MemorySlot | None, write: bool
    ) -> RetPf:
        level = self.max_level(slot, gfn)
        sp = root
        while sp.role.level > level:
            index = spte_index(gfn, sp.role.level)
            child = self.pages.child_at(sp, index)
            if child is None:
                if sp.spt[index]:
                    self._zap_leaf(sp, index)  # a huge leaf in the way
                child = self._child(sp, gfn, index)
            sp = child
        index = spte_index(gfn, level)
        if slot is not None and self._same_leaf(sp, index, slot, gfn, level):
            self.stat["pf_spurious"] += 1
            return RetPf.SPURIOUS  # `mmu_set_spte()`: already mapped (another vCPU won)
        if sp.spt[index]:
            self._zap_leaf(sp, index)
        if slot is None:
            self.stat["pf_emulate"] += 1
            if not self.cfg.mmio_caching_enabled:
                return RetPf.EMULATE  # 2011: every MMIO access faults and searches again
            gen = self.vm.generation(root.role.smm)
            sp.spt[index] = make_mmio_spte(self.cfg, gfn, ACC_ALL, gen)
            self._emit("mark_mmio_spte", sptep=sp.sptep(index), gfn=gfn, access=ACC_ALL, gen=gen)
            self.stat["pf_mmio_spte_created"] += 1
            return RetPf.EMULATE
        base = gfn & ~((1 << level_shift(level)) - 1)
        pfn = self._pfn(slot, gfn, level)
        spte = make_spte(
            self.cfg, pfn, ACC_ALL, level, writable=not slot.readonly, accessed=True, dirty=write
        )
        sp.spt[index] = spte
        self._rmap(slot, level).setdefault(
            gfn_to_index(gfn, slot.base_gfn, level), RmapHead(self.era)
        ).add(sp.sptep(index))
        self._emit("kvm_mmu_set_spte", gfn=base, spte=spte, level=level, sptep=sp.sptep(index))
        self.stat["pf_fixed"] += 1
        return RetPf.FIXED

    def _pfn(self, slot: MemorySlot, gfn: int, level: int) -> int:
        base = gfn & ~((1 << level_shift(level)) - 1)
        return (slot.userspace_addr >> PAGE_SHIFT) + (base - slot.base_gfn)

    def _same_leaf(
        self, sp: KvmMmuPage, index: int, slot: MemorySlot, gfn: int, level: int
    ) -> bool:
        spte = sp.spt[index]
        return (
            is_shadow_present_pte(spte)
            and not is_mmio_spte(self.cfg, spte)
            and spte_to_pfn(spte) == self._pfn(slot, gfn, level)
        )

    def _child(self, parent: KvmMmuPage, gfn: int, index: int) -> KvmMmuPage:
        """`kvm_mmu_get_child_sp()`: the direct page mapping this part of the parent."""
        self.pages.make_mmu_pages_available()
        level = parent.role.level - 1
        base = gfn & ~((1 << (LEVEL_BITS * level)) - 1)
        child, _ = self.pages.get_page(base, parent.role.child(ACC_ALL, direct=True))
        self.pages.link(parent, index, child)
        return child

    # -- rmaps --------------------------------------------------------------------

    def _rmap(self, slot: MemorySlot, level: int) -> dict[int, RmapHead]:
        return self.rmaps.setdefault((slot.as_id, slot.id, level), {})

    def _zap_leaf(self, sp: KvmMmuPage, index: int) -> None:
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
        heads = self.rmaps[(as_id, slot.id, level)]
        key = gfn_to_index(gfn, slot.base_gfn, level)
        heads[key].remove(sp.sptep(index))
        if not heads[key].count():
            del heads[key]

    def audit(self) -> None:
        """Pages consistent; every rmap entry is a present leaf of its gfn and level, and
        every present leaf is in exactly one rmap."""
        self.pages.audit()
        leaves: dict[int, KvmMmuPage] = {}
        for sp in self.pages.pages():
            for index, spte in enumerate(sp.spt):
                leaf = spte and self.pages.child_at(sp, index) is None
                if leaf and not is_mmio_spte(self.cfg, spte):
                    leaves[sp.sptep(index)] = sp
        seen: set[int] = set()
        for (_, _, level), heads in self.rmaps.items():
            for head in heads.values():
                head.audit()
                for sptep in head:
                    holder = leaves.get(sptep)
                    if holder is None or holder.role.level != level or sptep in seen:
                        raise AuditError(f"rmap entry {sptep:#x} is not a present leaf once")
                    seen.add(sptep)
        if seen != set(leaves):
            raise AuditError(f"{len(set(leaves) - seen)} present leaves are in no rmap")
