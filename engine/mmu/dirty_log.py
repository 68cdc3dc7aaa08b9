"""Dirty logging on the shadow MMU (arch/x86/kvm/x86.c, mmu/mmu.c, virt/kvm/kvm_main.c,
6.18), without KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2, by write protection or, on a host with
Page Modification Logging, by PML (below):

- `kvm_mmu_slot_apply_flags()`: a slot that starts logging (a flags-only change that sets
  KVM_MEM_LOG_DIRTY_PAGES) has every spte in its rmaps write-protected
  (`kvm_mmu_slot_remove_write_access()` -> `slot_rmap_write_protect`); stopping only
  zaps collapsible huge sptes (none here: 4K leaves only);
- `make_spte()`: a writable spte made in a logged slot marks its gfn in the slot's dirty
  bitmap (`mark_page_dirty_in_slot`);
- `KVM_GET_DIRTY_LOG` (`kvm_get_dirty_log_protect()`): returns and clears the bitmap and
  write-protects the pages it reported (`kvm_arch_mmu_enable_log_dirty_pt_masked`), so
  the next write to each faults again.
`DirtyLogging` follows the VM's memslot events and the MMU's `kvm_mmu_set_spte` events
(`observe`); the shadow MMU itself needs no change.

The same bitmaps serve the MMUs with a fast path (fast_pf.py), which call
`mark_page_dirty_in_slot()` themselves (`mark_page_dirty`, set on them here) from
`make_spte()` and from `fast_pf_fix_direct_spte()`:
- the direct MMU (`tdp_mmu=N`) is write-protected through its rmaps like the shadow MMU,
  every level when logging starts (`kvm_mmu_slot_remove_write_access(kvm, slot,
  PG_LEVEL_4K)` walks 4K to 1G: the shadow MMU splits huge pages eagerly only for nested
  MMUs), the reported 4K pages at KVM_GET_DIRTY_LOG (`kvm_mmu_write_protect_pt_masked`);
- the TDP MMU write-protects a slot that starts logging itself (`TdpMmu`), and at
  KVM_GET_DIRTY_LOG `kvm_tdp_mmu_clear_dirty_pt_masked()` protects the reported pages.
Write protection clears only W (`spte_write_protect(sptep, pt_protect=false)`): the
spte stays MMU-writable, so the next write is fixed by the fast path.

PML (`pml`, the named setting: kvm_intel `enable_pml`, default Y): `kvm->arch.
cpu_dirty_log_size` (params.py) is PML_LOG_NR_ENTRIES when the host has PML, which 6.18 vmx.c
`hardware_setup()` turns off without EPT or EPT A/D bits, so never under shadow paging,
and on AMD; else 0 (a nested guest's shadow EPT pages are write-protected even with PML,
`spte_ad_need_write_protect()`, 6.18 spte.h: "the GPAs in the CPU dirty log would come
from L2 rather than L1"; not modelled here).  With it, the EPT MMUs:
- `kvm_mmu_slot_apply_flags()` clears the D bits of the slot's 4K leaves
  (`kvm_mmu_slot_leaf_clear_dirty()`: `__rmap_clear_dirty` on the direct MMU's rmaps,
  `kvm_tdp_mmu_clear_dirty_slot()` on the TDP MMU's) and write-protects only 2M and up
  (`kvm_mmu_slot_remove_write_access(kvm, slot, PG_LEVEL_2M)`), where it would
  write-protect from 4K;
- `kvm_mmu_update_cpu_dirty_logging()` asks every vCPU to turn PML on while a slot logs
  (KVM_REQ_UPDATE_CPU_DIRTY_LOGGING -> `vmx_update_cpu_dirty_logging()`:
  SECONDARY_EXEC_ENABLE_PML while `nr_memslots_dirty_logging`);
- the CPU then writes with no exit, sets D and logs the gpa in the vCPU's PML buffer,
  which KVM moves into the bitmap at the next exit (`vmx_flush_pml_buffer()`), when it
  is full (a PML-full exit) and before KVM_GET_DIRTY_LOG (`kvm_arch_sync_dirty_log()`
  kicks every vCPU): `cpu_sets_dirty` (simplified: into the bitmap at once, which is
  what KVM_GET_DIRTY_LOG reads either way);
- KVM_GET_DIRTY_LOG clears D again (`kvm_arch_mmu_enable_log_dirty_pt_masked()` ->
  `kvm_mmu_clear_dirty_pt_masked()`) instead of write-protecting
  (`kvm_mmu_write_protect_pt_masked()`).
So under PML no write faults for dirty logging and `fast_page_fault()` has nothing to fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..events import Event
from ..memslots.constants import KVM_MEM_LOG_DIRTY_PAGES
from ..memslots.memslot import MemorySlot
from .params import cpu_dirty_log_size
from .spte import KVM_MAX_HUGEPAGE_LEVEL, PT_WRITABLE_MASK

if TYPE_CHECKING:
    from .direct.mmu import DirectMmu
    from .shadow.mmu import ShadowMmu
    from .tdp.mmu import TdpMmu


def dirty_logging_words(pml: bool) -> str:
    """The setting as the screens and captions name it."""
    return "PML on: D bits cleared" if pml else "PML off: write protection"


class DirtyLogging:
    """The dirty bitmaps of one VM's logged slots, kept as the kernel keeps them."""

    def __init__(self, mmu: ShadowMmu | DirectMmu | TdpMmu) -> None:
        self.mmu = mmu
        self.flags: dict[tuple[int, int], int] = {}  # (as_id, slot id) -> flags
        self.dirty: dict[tuple[int, int], set[int]] = {}  # -> gfn offsets in the slot
        self.wrprot_sptes = 0
        self._rmaps = not hasattr(mmu, "kvm_tdp_mmu_clear_dirty_pt_masked")
        self.pml = cpu_dirty_log_size(mmu.params, mmu.cfg) > 0
        self.pml_logged = 0  # writes the CPU logged in a PML buffer (model-only count)
        if hasattr(mmu, "mark_page_dirty"):
            mmu.mark_page_dirty = self.mark_page_dirty
        for as_id in range(mmu.vm.address_spaces):
            for slot in mmu.vm.memslots(as_id):  # slots made before, logging or not
                self.flags[(as_id, slot.id)] = slot.flags
                if slot.dirty_logging:
                    self.dirty[(as_id, slot.id)] = set()
        mmu.vm.subscribe(self._memslot_event)

    def mark_page_dirty(self, slot: MemorySlot, gfn: int) -> None:
        """`mark_page_dirty_in_slot()`: `set_bit_le(gfn - base_gfn, dirty_bitmap)`."""
        bits = self.dirty.get((slot.as_id, slot.id))
        if bits is not None:
            bits.add(gfn - slot.base_gfn)

    def _memslot_event(self, event: Event) -> None:
        if event.name != "kvm_set_user_memory_region" or event.fields.get("ret") != 0:
            return
        uapi = int(event.fields["slot"])
        key = (uapi >> 16, uapi & 0xFFFF)
        change, flags = str(event.fields["change"]), int(event.fields["flags"])
        old = self.flags.get(key, 0)
        if change == "KVM_MR_DELETE":
            self.flags.pop(key, None)
            self.dirty.pop(key, None)
            return
        self.flags[key] = flags
        logging = flags & KVM_MEM_LOG_DIRTY_PAGES
        starts = change == "KVM_MR_FLAGS_ONLY" and logging and not old & KVM_MEM_LOG_DIRTY_PAGES
        if starts and self._rmaps:  # (the TDP MMU does its own: TdpMmu)
            if self.pml:
                self._clear_dirty(key, None)  # kvm_mmu_slot_leaf_clear_dirty()
            self._write_protect(key, None)  # kvm_mmu_slot_remove_write_access()
        if logging:
            self.dirty.setdefault(key, set())
        else:
            self.dirty.pop(key, None)

    def observe(self, event: Event) -> None:
        """`kvm_mmu_set_spte` of a writable spte in a logged slot: mark_page_dirty."""
        if event.name != "kvm_mmu_set_spte" or not int(event.fields["spte"]) & PT_WRITABLE_MASK:
            return
        gfn = int(event.fields["gfn"])
        slot = self.mmu.vm.gfn_to_memslot(gfn)
        if slot is not None and (slot.as_id, slot.id) in self.dirty:
            self.dirty[(slot.as_id, slot.id)].add(gfn - slot.base_gfn)

    @property
    def cpu_logs_dirty(self) -> bool:
        """SECONDARY_EXEC_ENABLE_PML on the vCPUs (`vmx_update_cpu_dirty_logging()`):
        PML and at least one slot logging (`nr_memslots_dirty_logging`)."""
        return self.pml and bool(self.dirty)

    def cpu_sets_dirty(self, slot: MemorySlot | None, gfn: int) -> None:
        """The CPU's write set a leaf's D bit: with PML on, its gpa goes to the PML buffer
        and from there to the slot's bitmap (`vmx_flush_pml_buffer()` ->
        `kvm_vcpu_mark_page_dirty()`)."""
        if self.cpu_logs_dirty and slot is not None:
            bits = self.dirty.get((slot.as_id, slot.id))
            if bits is not None:
                bits.add(gfn - slot.base_gfn)
                self.pml_logged += 1

    def get_dirty_log(self, slot_id: int, as_id: int = 0) -> list[int]:
        """KVM_GET_DIRTY_LOG: the dirty offsets, cleared, and the pages protected again
        (`kvm_arch_mmu_enable_log_dirty_pt_masked()`: D cleared with PML, else W)."""
        key = (as_id, slot_id)
        pages = sorted(self.dirty.get(key, ()))
        if key in self.dirty:
            self.dirty[key] = set()
            if self.pml and self._rmaps:
                self._clear_dirty(key, set(pages))  # kvm_mmu_clear_dirty_pt_masked()
            else:
                self._write_protect(key, set(pages))
        return pages

    def _clear_dirty(self, key: tuple[int, int], offsets: set[int] | None) -> None:
        """`__rmap_clear_dirty()` on the slot's 4K rmaps (of the 4K `offsets` only, if
        given): D off in each leaf that has it."""
        dbit = self.mmu.cfg.shadow_dirty_mask
        heads = self.mmu.rmaps.get((key[0], key[1], 1), {})  # type: ignore[union-attr]
        for offset, head in heads.items():
            if offsets is not None and offset not in offsets:
                continue
            for sptep in list(head):
                holder = self.mmu.pages.page_of_sptep(sptep)
                index = (sptep & 0xFFF) // 8
                holder.spt[index] &= ~dbit

    def _write_protect(self, key: tuple[int, int], offsets: set[int] | None) -> None:
        """Clear W in every spte of the slot's rmaps, every level (of the 4K `offsets`
        only, if given); on the TDP MMU, `kvm_tdp_mmu_clear_dirty_pt_masked()`."""
        mmu = self.mmu
        if not self._rmaps:
            slot = mmu.vm.slot(*key)
            if slot is not None and offsets:
                gfns = {slot.base_gfn + offset for offset in offsets}
                self.wrprot_sptes += mmu.kvm_tdp_mmu_clear_dirty_pt_masked(  # type: ignore[union-attr]
                    slot, gfns
                )
            return
        first = 2 if self.pml else 1  # kvm_mmu_slot_remove_write_access(PG_LEVEL_2M/4K)
        levels = (1,) if offsets is not None else range(first, KVM_MAX_HUGEPAGE_LEVEL + 1)
        for level in levels:
            heads = mmu.rmaps.get((key[0], key[1], level), {})  # type: ignore[union-attr]
            for offset, head in heads.items():
                if offsets is not None and offset not in offsets:
                    continue
                for sptep in list(head):
                    holder = mmu.pages.page_of_sptep(sptep)
                    index = (sptep & 0xFFF) // 8
                    if holder.spt[index] & PT_WRITABLE_MASK:
                        holder.spt[index] &= ~PT_WRITABLE_MASK
                        self.wrprot_sptes += 1
