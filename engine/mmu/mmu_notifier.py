"""KVM's MMU notifier: the host unmaps or ages the VMM's pages, and KVM drops or ages the
sptes that map them (docs/kvm.md §6.7).

torvalds/linux 6.18 `virt/kvm/kvm_main.c`:
- `kvm_mmu_notifier_invalidate_range_start()`: traces `kvm_unmap_hva_range` (the host
  virtual range), counts the invalidation (`mn_active_invalidate_count`, which holds off
  memslot updates), then `kvm_handle_hva_range()`: for each memslot of each address space
  whose host range overlaps (`kvm_for_each_memslot_in_hva_range`), the overlap as gfns
  (`hva_to_gfn_memslot`, the end rounded up); at the first such slot mmu_lock is taken for
  write and `kvm_mmu_invalidate_begin()` runs (mmu_invalidate.py), then for each slot
  `kvm_mmu_unmap_gfn_range()`: `kvm_mmu_invalidate_range_add()` and the architecture's
  `kvm_unmap_gfn_range()`; a TLB flush if any spte went (`flush_on_ret`).  A range no
  memslot overlaps touches nothing, not even the sequence.
- `kvm_mmu_notifier_invalidate_range_end()`: the same slots, `kvm_mmu_invalidate_end()`
  (the sequence moves, the count drops), no tracepoint.
- `kvm_mmu_notifier_clear_young()` (`kvm_age_hva`) and `kvm_mmu_notifier_test_young()`
  (`kvm_test_age_hva`, one address): `kvm_age_gfn()` / `kvm_test_age_gfn()` on each
  overlapping slot without mmu_lock (lockless aging, aging.py), no flush.
arch/x86/kvm/mmu/mmu.c `kvm_unmap_gfn_range()`: the shadow MMU's rmaps
(`__kvm_rmap_zap_gfn_range` → `kvm_zap_rmap`: every spte on each rmap head of the range
cleared, no tracepoint) when the VM has rmaps (tdp_mmu=N, or shadow paging), the TDP
MMU's roots (`kvm_tdp_mmu_unmap_gfn_range`, tdp/mmu.py: valid and invalid ones) when
it is on.

The host's side is the model's own (mm/madvise.c, mm/memory.c, mm/huge_memory.c as of
6.18): `madvise_dontneed()` is what QEMU's virtio-balloon does to a page the guest gave
back (`ram_block_discard_range` → MADV_DONTNEED): `zap_page_range_single()` wraps the
4K range in an invalidation, and inside it a THP the range cuts is split first
(`__split_huge_pmd()`: an invalidation of the whole 2M range, nested in the first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..errors import AuditError
from ..memslots.memslot import MemorySlot
from ..memslots.vm import Vm
from .aging import kvm_age_gfn, kvm_test_age_gfn, tdp_mmu_enabled, walk_slot_rmaps
from .mapping_level import HostPages, gfn_to_hva_memslot, kvm_pages_per_hpage
from .mmu_invalidate import MmuInvalidate
from .spte import is_last_spte, is_shadow_present_pte

if TYPE_CHECKING:
    from .aging import AnyMmu, RmapMmu

PAGE_SHIFT = 12
PAGE_SIZE = 1 << PAGE_SHIFT
GfnHandler = Callable[[MemorySlot, int, int], bool]


def hva_to_gfn_memslot(hva: int, slot: MemorySlot) -> int:
    """`hva_to_gfn_memslot()` (kvm_host.h)."""
    return slot.base_gfn + ((hva - slot.userspace_addr) >> PAGE_SHIFT)


def __kvm_rmap_zap_gfn_range(mmu: RmapMmu, slot: MemorySlot, start: int, end: int) -> bool:
    """`__kvm_rmap_zap_gfn_range()` (6.18 mmu.c): `__walk_slot_rmaps(kvm_zap_rmap)` from
    4K to 1G; `kvm_zap_rmap()` → `kvm_zap_all_rmap_sptes()` clears each spte on the head
    (`mmu_spte_clear_track_bits`, no tracepoint) and empties it.  Shadow pages stay."""
    flush = False
    for sptes in walk_slot_rmaps(mmu, slot, start, end):
        for sptep in sptes:
            mmu._zap_leaf(mmu.pages.page_of_sptep(sptep), (sptep & 0xFFF) >> 3)
            flush = True
    return flush


def kvm_unmap_gfn_range(mmu: AnyMmu, slot: MemorySlot, start: int, end: int) -> bool:
    """`kvm_unmap_gfn_range()` (6.18 mmu.c): gfns [start, end) of `slot` unmapped; True
    when a TLB flush is needed."""
    flush = False
    if not tdp_mmu_enabled(mmu):  # kvm_memslots_have_rmaps(): no TDP MMU (nor nested)
        flush = __kvm_rmap_zap_gfn_range(mmu, slot, start, end)  # type: ignore[arg-type]
    else:
        flush = mmu.kvm_tdp_mmu_unmap_gfn_range(slot.as_id, start, end, flush)  # type: ignore[union-attr]
    return flush


class KvmMmuNotifier:
    """`kvm->mmu_notifier` of one VM and its MMU: the callbacks the host's mm makes."""

    def __init__(self, vm: Vm, mmu: AnyMmu) -> None:
        self.vm, self.mmu = vm, mmu
        self.mn_active_invalidate_count = 0
        #: the host ranges between their start and end (the audit's, model-only)
        self.pending: list[tuple[int, int]] = []
        self.stat = {"remote_tlb_flush": 0}  # kvm->stat.generic.remote_tlb_flush

    @property
    def mmu_invalidate(self) -> MmuInvalidate:
        return self.mmu.levels.mmu_invalidate

    @property
    def host(self) -> HostPages:
        return self.mmu.levels.host

    def slots_in_hva_range(self, start: int, end: int) -> Iterator[tuple[MemorySlot, int, int]]:
        """`kvm_for_each_memslot_in_hva_range()` over every address space: each slot whose
        host range overlaps [start, end), with the overlap's gfns [first, end)."""
        for as_id in range(self.vm.address_spaces):
            for slot in self.vm.memslots(as_id):
                base = slot.userspace_addr
                top = base + (slot.npages << PAGE_SHIFT)
                if base >= end or top <= start:
                    continue
                hva_start, hva_end = max(start, base), min(end, top)
                yield (
                    slot,
                    hva_to_gfn_memslot(hva_start, slot),
                    hva_to_gfn_memslot(hva_end + PAGE_SIZE - 1, slot),
                )

    def kvm_handle_hva_range(
        self,
        start: int,
        end: int,
        handler: GfnHandler | None,
        on_lock: Callable[[], None] | None = None,
    ) -> tuple[bool, bool]:
        """`kvm_handle_hva_range()`: (found_memslot, any handler returned true)."""
        found = ret = False
        for slot, gfn_start, gfn_end in self.slots_in_hva_range(start, end):
            if not found:
                found = True
                if on_lock is not None:  # KVM_MMU_LOCK(kvm); range->on_lock(kvm)
                    on_lock()
            if handler is not None:
                ret |= handler(slot, gfn_start, gfn_end)
        return found, ret

    def kvm_mmu_unmap_gfn_range(self, slot: MemorySlot, start: int, end: int) -> bool:
        """`kvm_mmu_unmap_gfn_range()`: the range joins the invalidation, then unmapped."""
        self.mmu_invalidate.kvm_mmu_invalidate_range_add(start, end)
        before = self.mmu_invalidate.seq
        flush = kvm_unmap_gfn_range(self.mmu, slot, start, end)
        assert self.mmu_invalidate.seq == before
        return flush

    def invalidate_range_start(self, start: int, end: int) -> bool:
        """`kvm_mmu_notifier_invalidate_range_start()`; whether a memslot was found."""
        self.mmu._emit("kvm_unmap_hva_range", start=start, end=end)
        self.mn_active_invalidate_count += 1
        self.pending.append((start, end))
        found, flush = self.kvm_handle_hva_range(
            start, end, self.kvm_mmu_unmap_gfn_range,
            self.mmu_invalidate.kvm_mmu_invalidate_begin,
        )  # fmt: skip
        if flush:
            self.stat["remote_tlb_flush"] += 1  # kvm_flush_remote_tlbs()
        return found

    def invalidate_range_end(self, start: int, end: int) -> None:
        """`kvm_mmu_notifier_invalidate_range_end()`: no tracepoint."""
        self.kvm_handle_hva_range(start, end, None, self.mmu_invalidate.kvm_mmu_invalidate_end)
        self.pending.remove((start, end))
        self.mn_active_invalidate_count -= 1
        if self.mn_active_invalidate_count < 0:
            raise AuditError("mn_active_invalidate_count < 0 (WARN_ON_ONCE)")

    def clear_young(self, start: int, end: int) -> int:
        """`kvm_mmu_notifier_clear_young()`: how many sptes of the range were young (the
        kernel returns whether any was)."""
        self.mmu._emit("kvm_age_hva", start=start, end=end)
        mmu, young = self.mmu, [0]

        def age(slot: MemorySlot, first: int, last: int) -> bool:
            young[0] += kvm_age_gfn(mmu, slot, first, last)
            return young[0] > 0

        self.kvm_handle_hva_range(start, end, age)
        return young[0]

    def test_young(self, hva: int) -> bool:
        """`kvm_mmu_notifier_test_young()`: whether the page at `hva` is young."""
        self.mmu._emit("kvm_test_age_hva", hva=hva)
        mmu = self.mmu
        return self.kvm_handle_hva_range(
            hva, hva + 1, lambda slot, s, e: kvm_test_age_gfn(mmu, slot, s, e)
        )[1]

    # -- the host's mm (the model's own) --------------------------------------------------

    def madvise_dontneed(self, hva: int) -> str:
        """MADV_DONTNEED of the 4K page at `hva` (`zap_page_range_single()`): its
        invalidation, inside it the split of a THP around it (`__split_huge_pmd()`, an
        invalidation of the 2M range), the page freed, the end.  What happened, in words."""
        hva &= -PAGE_SIZE
        end = hva + PAGE_SIZE
        self.invalidate_range_start(hva, end)
        huge = self.host.huge_page_of(hva)
        words = "4K page zapped"
        if huge is not None:
            self.invalidate_range_start(*huge)
            self.host.split_huge_page(hva)
            self.invalidate_range_end(*huge)
            words = "THP split, 4K page zapped"
        self.host.zap(hva)
        self.invalidate_range_end(hva, end)
        return words

    # -- audit ----------------------------------------------------------------------------

    def audit(self) -> None:
        """The invalidation state consistent; no present leaf maps a page the host has
        zapped, nor a gfn an invalidation in progress covers, nor a huge page where the
        host maps 4K pages (every such change went through the notifier)."""
        inv = self.mmu_invalidate
        inv.audit()
        if self.mn_active_invalidate_count != len(self.pending):
            raise AuditError("mn_active_invalidate_count disagrees with the ranges open")
        pending = [
            (slot.as_id, first, last)
            for start, end in self.pending
            for slot, first, last in self.slots_in_hva_range(start, end)
        ]
        if pending and not inv.in_progress:
            raise AuditError("an invalidation is open but mmu_invalidate_in_progress is 0")
        for as_id, gfn, level in leaves(self.mmu):
            slot = self.vm.memslot_set(as_id).gfn_tree.search(gfn)
            if slot is None:
                continue
            size = kvm_pages_per_hpage(level)
            for p_as, p_first, p_last in pending:
                if p_as == as_id and gfn < p_last and p_first < gfn + size:
                    raise AuditError(
                        f"a level-{level} spte maps gfn {gfn:#x}, which an invalidation"
                        " in progress covers"
                    )
            hva = gfn_to_hva_memslot(slot, gfn)
            if level > self.host.mapping_level(hva):
                raise AuditError(f"a level-{level} spte maps gfn {gfn:#x}: the host maps 4K")
            first = hva >> PAGE_SHIFT
            if self.host.zapped and not self.host.zapped.isdisjoint(range(first, first + size)):
                raise AuditError(f"an spte of gfn {gfn:#x} maps a page the host zapped")


def leaves(mmu: AnyMmu) -> Iterator[tuple[int, int, int]]:
    """Every present leaf that maps guest memory, in valid roots or not: (as_id, first
    gfn, level).  The TDP MMU's from its pages (direct: the gfn is the position); the
    others' from their rmaps (which their own audits match with the present leaves)."""
    if tdp_mmu_enabled(mmu):
        for sp in mmu.pages.pages():
            level = sp.role.level
            for index, spte in enumerate(sp.spt):
                if is_shadow_present_pte(spte) and is_last_spte(spte, level):
                    yield sp.role.smm, sp.gfn + index * kvm_pages_per_hpage(level), level
        return
    for (as_id, slot_id, level), heads in mmu.rmaps.items():  # type: ignore[union-attr]
        slot = mmu.vm.slot(as_id, slot_id)
        if slot is None:
            continue
        shift = 9 * (level - 1)
        for key in heads:
            yield as_id, (key + (slot.base_gfn >> shift)) << shift, level
