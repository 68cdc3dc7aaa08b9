"""Dirty logging (arch/x86/kvm/x86.c, mmu/mmu.c, mmu/tdp_mmu.c, virt/kvm/kvm_main.c,
virt/kvm/dirty_ring.c, 6.18) in the three ways userspace can ask for it (`DIRTY_LOG_MODES`,
docs/kvm.md §6.8), by write protection or, on a host with Page Modification Logging, by PML:

- `legacy` ("legacy GET-only"): the dirty bitmap, KVM_GET_DIRTY_LOG returns it and
  protects the pages it reported (below);
- `manual` ("manual protect, initially set", QEMU's default since 4.2):
  KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2 with KVM_DIRTY_LOG_MANUAL_PROTECT_ENABLE |
  KVM_DIRTY_LOG_INITIALLY_SET (`kvm->manual_dirty_log_protect`,
  `kvm_dirty_log_manual_protect_and_init_set()`): a slot that starts logging gets a
  bitmap of all ones (`kvm_prepare_memory_region()`: `bitmap_set(new->dirty_bitmap, 0,
  new->npages)`) and `kvm_mmu_slot_apply_flags()` returns before splitting or protecting
  anything ("Initially-all-set does not require write protecting any page, because
  they're all assumed to be dirty"); KVM_GET_DIRTY_LOG only copies the bitmap
  (`kvm_get_dirty_log_protect()` with `kvm->manual_dirty_log_protect`); KVM_CLEAR_DIRTY_LOG
  (`kvm_clear_dirty_log_protect()`) clears the bits userspace passes, 64 pages a word
  (`first_page` a multiple of 64), and protects the pages whose bit it really cleared
  (`kvm_arch_mmu_enable_log_dirty_pt_masked()`), which first write-protects the 2M pages
  around the word (`kvm_mmu_slot_gfn_write_protect(..., PG_LEVEL_2M)`), so a huge page
  is split at its first write after, eagerly on the TDP MMU (`kvm_mmu_try_split_huge_pages`);
- `ring` (KVM_CAP_DIRTY_LOG_RING, `DirtyRing`): no bitmap (`kvm_use_dirty_bitmap()`
  false, KVM_GET_DIRTY_LOG fails with ENXIO); `mark_page_dirty_in_slot()` pushes the
  (slot, offset) on the running vCPU's ring (`kvm_dirty_ring_push()`), a ring used up to
  its soft limit makes the vCPU exit to userspace (`kvm_dirty_ring_check_request()`,
  KVM_EXIT_DIRTY_RING_FULL), userspace marks the entries it collected and
  KVM_RESET_DIRTY_RINGS (`kvm_dirty_ring_reset()`) protects them again through the same
  `kvm_arch_mmu_enable_log_dirty_pt_masked()`. Enabling logging protects the slot as in
  the legacy mode (the ring is not "initially set").

The legacy mode, in detail:

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

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from ..errors import AuditError, KvmError
from ..events import Event, FieldValue
from ..memslots.constants import (
    KVM_DIRTY_LOG_INITIALLY_SET,
    KVM_DIRTY_LOG_MANUAL_PROTECT_ENABLE,
    KVM_MEM_LOG_DIRTY_PAGES,
)
from ..memslots.memslot import MemorySlot
from ..memslots.vm import kvm_dirty_log_manual_protect_and_init_set
from .mapping_level import gfn_to_index
from .params import cpu_dirty_log_size
from .spte import (
    KVM_MAX_HUGEPAGE_LEVEL,
    PG_LEVEL_2M,
    PG_LEVEL_4K,
    PT_WRITABLE_MASK,
    is_last_spte,
    is_shadow_present_pte,
)

if TYPE_CHECKING:
    from .direct.mmu import DirectMmu
    from .shadow.mmu import ShadowMmu
    from .tdp.mmu import TdpMmu

H = TypeVar("H")

# include/uapi/linux/kvm.h
KVM_DIRTY_GFN_F_DIRTY = 1 << 0
KVM_DIRTY_GFN_F_RESET = 1 << 1
KVM_EXIT_DIRTY_RING_FULL = 31
KVM_DIRTY_RING_RSVD_ENTRIES = 64  # include/linux/kvm_dirty_ring.h
KVM_DIRTY_RING_MAX_ENTRIES = 65536  # include/linux/kvm_dirty_ring.h
KVM_DIRTY_GFN_SIZE = 16  # sizeof(struct kvm_dirty_gfn): flags, slot, offset
BITS_PER_LONG = 64
PMD_SHIFT = 21
PAGE_SHIFT = 12
#: QEMU's example ring (docs: `-accel kvm,dirty-ring-size=4096`), in entries
DIRTY_RING_ENTRIES = 4096

DIRTY_LOG_MODES = ("legacy", "manual", "ring")
DIRTY_LOG_WORDS = {
    "legacy": "legacy GET-only: KVM_GET_DIRTY_LOG protects what it reports",
    "manual": "manual protect, initially set (QEMU's default since 4.2): KVM_CLEAR_DIRTY_LOG"
    " protects what it clears",
    "ring": "dirty ring: KVM_RESET_DIRTY_RINGS protects what userspace collected",
}


def dirty_logging_words(pml: bool) -> str:
    """The setting as the screens and captions name it."""
    return "PML on: D bits cleared" if pml else "PML off: write protection"


def _ffs(mask: int) -> int:
    return (mask & -mask).bit_length() - 1


@dataclass
class DirtyRing:
    """`struct kvm_dirty_ring` of one vCPU (include/linux/kvm_dirty_ring.h, dirty_ring.c
    6.18): `size` entries of (slot, offset, flags), `dirty_index` the next to push,
    `reset_index` the next to reset; `soft_limit` is the size less the reserved entries
    (`kvm_dirty_ring_get_rsvd_entries()`: KVM_DIRTY_RING_RSVD_ENTRIES and the PML
    buffer's 512 entries, `kvm_cpu_dirty_log_size()`, that a vCPU may still push while
    it exits)."""

    index: int  # the vCPU's index (`ring->index`)
    size: int
    soft_limit: int
    dirty_index: int = 0
    reset_index: int = 0
    dirty_gfns: list[list[int]] = field(default_factory=list)  # [flags, slot, offset]

    def __post_init__(self) -> None:
        self.dirty_gfns = [[0, 0, 0] for _ in range(self.size)]

    def used(self) -> int:
        """`kvm_dirty_ring_used()`."""
        return self.dirty_index - self.reset_index

    def soft_full(self) -> bool:
        """`kvm_dirty_ring_soft_full()`."""
        return self.used() >= self.soft_limit

    def full(self) -> bool:
        """`kvm_dirty_ring_full()`."""
        return self.used() >= self.size

    def harvest(self) -> list[tuple[int, int]]:
        """What userspace does with the mmap'ed ring (QEMU's `kvm_dirty_ring_reap_one()`):
        each entry with KVM_DIRTY_GFN_F_DIRTY from its own read index on is collected and
        marked KVM_DIRTY_GFN_F_RESET; (slot, offset) of each."""
        got = []
        for index in range(self.reset_index, self.dirty_index):
            entry = self.dirty_gfns[index & (self.size - 1)]
            if entry[0] & KVM_DIRTY_GFN_F_DIRTY:
                entry[0] = KVM_DIRTY_GFN_F_RESET
                got.append((entry[1], entry[2]))
        return got

    def audit(self) -> None:
        if not 0 <= self.used() <= self.size:
            raise AuditError(f"dirty ring {self.index}: used {self.used()} of {self.size}")
        if self.size & (self.size - 1) or self.soft_limit <= 0:
            raise AuditError(f"dirty ring {self.index}: size {self.size}, soft limit off")
        for index in range(self.reset_index, self.dirty_index):
            if not self.dirty_gfns[index & (self.size - 1)][0]:
                raise AuditError(f"dirty ring {self.index}: entry {index} pushed but invalid")


class DirtyLogging:
    """The dirty bitmaps (or rings) of one VM's logged slots, kept as the kernel keeps
    them; `mode` is one of `DIRTY_LOG_MODES` (the capabilities userspace enabled)."""

    def __init__(
        self,
        mmu: ShadowMmu | DirectMmu | TdpMmu,
        mode: str = "legacy",
        ring_entries: int = DIRTY_RING_ENTRIES,
        nr_vcpus: int = 1,
    ) -> None:
        if mode not in DIRTY_LOG_MODES:
            raise ValueError(f"dirty log mode {mode!r}: one of {', '.join(DIRTY_LOG_MODES)}")
        self.mmu = mmu
        self.mode = mode
        vm = mmu.vm
        self.flags: dict[tuple[int, int], int] = {}  # (as_id, slot id) -> flags
        self.dirty: dict[tuple[int, int], set[int]] = {}  # -> gfn offsets in the slot
        self.wrprot_sptes = 0
        self._rmaps = not hasattr(mmu, "kvm_tdp_mmu_clear_dirty_pt_masked")
        self.pml = cpu_dirty_log_size(mmu.params, mmu.cfg) > 0
        self.pml_logged = 0  # writes the CPU logged in a PML buffer (model-only count)
        #: `kvm_get_running_vcpu()`: the vCPU whose exit is being handled (the session's)
        self.running_vcpu: Callable[[], int | None] = lambda: 0
        #: where the ring's tracepoints go (the session's), name and fields
        self.emit: Callable[[str, dict[str, FieldValue]], None] | None = None
        self.rings: dict[int, DirtyRing] = {}
        self.soft_full_requests: set[int] = set()  # KVM_REQ_DIRTY_RING_SOFT_FULL
        if mode == "manual":  # KVM_ENABLE_CAP(KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2)
            vm.manual_dirty_log_protect = (
                KVM_DIRTY_LOG_MANUAL_PROTECT_ENABLE | KVM_DIRTY_LOG_INITIALLY_SET
            )
        elif mode == "ring":  # KVM_ENABLE_CAP(KVM_CAP_DIRTY_LOG_RING), before the vCPUs
            rsvd = KVM_DIRTY_RING_RSVD_ENTRIES + cpu_dirty_log_size(mmu.params, mmu.cfg)
            size = ring_entries * KVM_DIRTY_GFN_SIZE  # kvm_vm_ioctl_enable_dirty_log_ring()
            if size <= 0 or size & (size - 1) or size < max(rsvd * KVM_DIRTY_GFN_SIZE, 4096):
                raise ValueError(
                    f"a dirty ring of {ring_entries} entries: a power of two, at least 256 "
                    f"(a page) and the {rsvd} reserved (kvm_vm_ioctl_enable_dirty_log_ring: "
                    "EINVAL)"
                )
            if ring_entries > KVM_DIRTY_RING_MAX_ENTRIES:
                raise ValueError(
                    f"a dirty ring of {ring_entries} entries: at most "
                    f"{KVM_DIRTY_RING_MAX_ENTRIES} (E2BIG)"
                )
            vm.dirty_ring_size = ring_entries * KVM_DIRTY_GFN_SIZE
            for vcpu in range(nr_vcpus):
                self.ring(vcpu)
        if hasattr(mmu, "mark_page_dirty"):
            mmu.mark_page_dirty = self.mark_page_dirty
        for as_id in range(vm.address_spaces):
            for slot in vm.memslots(as_id):  # slots made before, logging or not
                self.flags[(as_id, slot.id)] = slot.flags
                if slot.dirty_logging:
                    self.dirty[(as_id, slot.id)] = set()
        vm.subscribe(self._memslot_event)

    @property
    def words(self) -> str:
        return DIRTY_LOG_WORDS[self.mode]

    @property
    def manual_init_set(self) -> bool:
        return kvm_dirty_log_manual_protect_and_init_set(self.mmu.vm)

    # -- marking ---------------------------------------------------------------------------

    def mark_page_dirty(self, slot: MemorySlot, gfn: int) -> None:
        """`mark_page_dirty_in_slot()` (kvm_main.c): with a dirty ring and a running vCPU
        `kvm_dirty_ring_push(vcpu, (as_id << 16) | id, gfn - base_gfn)`, else
        `set_bit_le(gfn - base_gfn, dirty_bitmap)`."""
        key = (slot.as_id, slot.id)
        bits = self.dirty.get(key)
        if bits is None:  # kvm_slot_dirty_track_enabled()
            return
        vcpu = self.running_vcpu()
        if self.mmu.vm.dirty_ring_size and vcpu is not None:
            self.kvm_dirty_ring_push(vcpu, (slot.as_id << 16) | slot.id, gfn - slot.base_gfn)
        elif not self.mmu.vm.dirty_ring_size:
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
        starts = logging and not old & KVM_MEM_LOG_DIRTY_PAGES
        if starts and change == "KVM_MR_FLAGS_ONLY" and self._rmaps and not self.manual_init_set:
            # kvm_mmu_slot_apply_flags() (the TDP MMU does its own: TdpMmu)
            if self.pml:
                self._clear_dirty(key, None)  # kvm_mmu_slot_leaf_clear_dirty()
            self._write_protect(key, None)  # kvm_mmu_slot_remove_write_access()
        if logging and (starts or key not in self.dirty):
            # kvm_prepare_memory_region(): a new bitmap, all ones with initially-set
            slot = self.mmu.vm.slot(*key)
            init = self.manual_init_set and slot is not None
            self.dirty[key] = set(range(slot.npages)) if init and slot else set()
        elif not logging:
            self.dirty.pop(key, None)

    def observe(self, event: Event) -> None:
        """`kvm_mmu_set_spte` of a writable spte in a logged slot: mark_page_dirty."""
        if event.name != "kvm_mmu_set_spte" or not int(event.fields["spte"]) & PT_WRITABLE_MASK:
            return
        gfn = int(event.fields["gfn"])
        slot = self.mmu.vm.gfn_to_memslot(gfn)
        if slot is not None:
            self.mark_page_dirty(slot, gfn)

    @property
    def cpu_logs_dirty(self) -> bool:
        """SECONDARY_EXEC_ENABLE_PML on the vCPUs (`vmx_update_cpu_dirty_logging()`):
        PML and at least one slot logging (`nr_memslots_dirty_logging`)."""
        return self.pml and bool(self.dirty)

    def cpu_sets_dirty(self, slot: MemorySlot | None, gfn: int) -> None:
        """The CPU's write set a leaf's D bit: with PML on, its gpa goes to the PML buffer
        and from there to the slot's bitmap or the vCPU's ring (`vmx_flush_pml_buffer()`
        -> `kvm_vcpu_mark_page_dirty()`)."""
        if self.cpu_logs_dirty and slot is not None and (slot.as_id, slot.id) in self.dirty:
            self.mark_page_dirty(slot, gfn)
            self.pml_logged += 1

    # -- the bitmap ioctls ---------------------------------------------------------------

    def _slot_of(self, slot_id: int, as_id: int, ioctl: str) -> MemorySlot:
        slot = self.mmu.vm.slot(as_id, slot_id)
        if slot is None or (as_id, slot_id) not in self.dirty:
            raise KvmError(2, f"slot {slot_id} does not log dirty pages", ioctl)  # ENOENT
        if self.mmu.vm.dirty_ring_size:  # kvm_use_dirty_bitmap()
            raise KvmError(6, "the VM logs dirty pages in rings", ioctl)  # ENXIO
        return slot

    def get_dirty_log(self, slot_id: int, as_id: int = 0) -> list[int]:
        """KVM_GET_DIRTY_LOG (`kvm_get_dirty_log_protect()`): the dirty offsets.  Legacy:
        each word of the bitmap taken (`xchg(&dirty_bitmap[i], 0)`) and its pages
        protected again (`kvm_arch_mmu_enable_log_dirty_pt_masked()`: D cleared with PML,
        else W); with manual protect only a copy, nothing cleared or protected.  []
        when the slot does not log; KvmError ENXIO with a dirty ring."""
        key = (as_id, slot_id)
        if key not in self.dirty:
            return []
        slot = self._slot_of(slot_id, as_id, "KVM_GET_DIRTY_LOG")
        pages = sorted(self.dirty[key])
        if self.mmu.vm.manual_dirty_log_protect:
            return pages
        self.dirty[key] = set()
        for offset, mask in _words(pages):
            self.kvm_arch_mmu_enable_log_dirty_pt_masked(slot, offset, mask)
        return pages

    def clear_dirty_log(
        self, slot_id: int, pages: list[int] | set[int], first_page: int = 0,
        num_pages: int | None = None, as_id: int = 0,
    ) -> list[int]:  # fmt: skip
        """KVM_CLEAR_DIRTY_LOG (`kvm_clear_dirty_log_protect()`, kvm_main.c 6.18): the
        offsets in `pages` from `first_page` (a multiple of 64) for `num_pages` (the rest
        of the slot by default) cleared in the bitmap, a 64-page word at a time
        (`atomic_long_fetch_andnot`), and the pages whose bit was set protected
        (`kvm_arch_mmu_enable_log_dirty_pt_masked()`); the offsets cleared.  KvmError
        EINVAL without manual protect or for a range the kernel refuses."""
        ioctl = "KVM_CLEAR_DIRTY_LOG"
        if not self.mmu.vm.manual_dirty_log_protect:
            raise KvmError(22, "KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2 is not enabled", ioctl)
        slot = self._slot_of(slot_id, as_id, ioctl)
        if num_pages is None:
            num_pages = slot.npages - first_page
        if first_page & 63 or first_page > slot.npages or num_pages > slot.npages - first_page:
            raise KvmError(22, f"pages {first_page}+{num_pages} of {slot.npages}", ioctl)
        if num_pages < slot.npages - first_page and num_pages & 63:
            raise KvmError(22, f"{num_pages} pages: not a multiple of 64", ioctl)
        bits = self.dirty[(as_id, slot_id)]
        end = first_page + num_pages
        wanted = sorted(p for p in bits.intersection(pages) if first_page <= p < end)
        bits.difference_update(wanted)  # mask &= atomic_long_fetch_andnot(mask, p): the
        for offset, mask in _words(wanted):  # bits really cleared, a word at a time
            self.kvm_arch_mmu_enable_log_dirty_pt_masked(slot, offset, mask)
        return wanted

    # -- protecting again ------------------------------------------------------------------

    def kvm_arch_mmu_enable_log_dirty_pt_masked(
        self, slot: MemorySlot, gfn_offset: int, mask: int
    ) -> None:
        """mmu.c 6.18: with initially-set, the 2M pages around the word write-protected
        first (split eagerly on the TDP MMU with `eager_page_split`), "to ensure they
        are split to 4KiB on the first write"; then the word's 4K sptes: D cleared with
        PML (`kvm_mmu_clear_dirty_pt_masked()`), else W (`kvm_mmu_write_protect_pt_masked()`)."""
        mmu = self.mmu
        if self.manual_init_set:
            start = slot.base_gfn + gfn_offset + _ffs(mask)
            end = slot.base_gfn + gfn_offset + mask.bit_length() - 1  # __fls(mask)
            if not self._rmaps and mmu.params.eager_page_split:
                mmu.kvm_tdp_mmu_try_split_huge_pages(  # type: ignore[union-attr]
                    slot, start, end + 1, PG_LEVEL_4K, False
                )  # kvm_mmu_try_split_huge_pages()
            self.kvm_mmu_slot_gfn_write_protect(slot, start, PG_LEVEL_2M)
            if _align_pmd(start) != _align_pmd(end):  # "Cross two large pages?"
                self.kvm_mmu_slot_gfn_write_protect(slot, end, PG_LEVEL_2M)
        wrprot = not self.pml
        if not self._rmaps:  # kvm_tdp_mmu_clear_dirty_pt_masked(..., wrprot)
            self.wrprot_sptes += mmu.kvm_tdp_mmu_clear_dirty_pt_masked(  # type: ignore[union-attr]
                slot, slot.base_gfn + gfn_offset, mask, wrprot
            )
            return
        offsets = {gfn_offset + i for i in range(BITS_PER_LONG) if mask >> i & 1}
        key = (slot.as_id, slot.id)
        if wrprot:
            self._write_protect(key, offsets)  # kvm_mmu_write_protect_pt_masked()
        else:
            self._clear_dirty(key, offsets)  # kvm_mmu_clear_dirty_pt_masked()

    def kvm_mmu_slot_gfn_write_protect(self, slot: MemorySlot, gfn: int, min_level: int) -> None:
        """mmu.c: every leaf over `gfn` from `min_level` up loses W and MMU-writable
        (`rmap_write_protect(rmap_head, true)`; `kvm_tdp_mmu_write_protect_gfn()`)."""
        mmu = self.mmu
        if not self._rmaps:
            self.wrprot_sptes += mmu.kvm_tdp_mmu_write_protect_gfn(  # type: ignore[union-attr]
                slot, gfn, min_level
            )
            return
        clear = PT_WRITABLE_MASK | mmu.cfg.shadow_mmu_writable_mask
        for level in range(min_level, KVM_MAX_HUGEPAGE_LEVEL + 1):
            heads = mmu.rmaps.get((slot.as_id, slot.id, level), {})  # type: ignore[union-attr]
            head = heads.get(gfn_to_index(gfn, slot.base_gfn, level))
            for sptep in list(head) if head is not None else ():
                holder = mmu.pages.page_of_sptep(sptep)
                index = (sptep & 0xFFF) // 8
                if holder.spt[index] & PT_WRITABLE_MASK:
                    holder.spt[index] &= ~clear
                    self.wrprot_sptes += 1

    def _clear_dirty(self, key: tuple[int, int], offsets: set[int] | None) -> None:
        """`__rmap_clear_dirty()` on the slot's 4K rmaps (of the 4K `offsets` only, if
        given): D off in each leaf that has it."""
        dbit = self.mmu.cfg.shadow_dirty_mask
        heads = self.mmu.rmaps.get((key[0], key[1], 1), {})  # type: ignore[union-attr]
        for _offset, head in _heads(heads, offsets):
            for sptep in list(head):
                holder = self.mmu.pages.page_of_sptep(sptep)
                index = (sptep & 0xFFF) // 8
                holder.spt[index] &= ~dbit

    def _write_protect(self, key: tuple[int, int], offsets: set[int] | None) -> None:
        """Clear W in every spte of the slot's rmaps, every level (of the 4K `offsets`
        only, if given: `kvm_mmu_write_protect_pt_masked()`, `rmap_write_protect(rmap_head,
        false)`)."""
        mmu = self.mmu
        first = 2 if self.pml else 1  # kvm_mmu_slot_remove_write_access(PG_LEVEL_2M/4K)
        levels = (1,) if offsets is not None else range(first, KVM_MAX_HUGEPAGE_LEVEL + 1)
        for level in levels:
            heads = mmu.rmaps.get((key[0], key[1], level), {})  # type: ignore[union-attr]
            for _offset, head in _heads(heads, offsets):
                for sptep in list(head):
                    holder = mmu.pages.page_of_sptep(sptep)
                    index = (sptep & 0xFFF) // 8
                    if holder.spt[index] & PT_WRITABLE_MASK:
                        holder.spt[index] &= ~PT_WRITABLE_MASK
                        self.wrprot_sptes += 1

    # -- the dirty ring ------------------------------------------------------------------

    def ring(self, vcpu: int) -> DirtyRing:
        """The vCPU's ring (`kvm_dirty_ring_alloc()` at vCPU creation)."""
        ring = self.rings.get(vcpu)
        if ring is None:
            size = self.mmu.vm.dirty_ring_size // KVM_DIRTY_GFN_SIZE
            rsvd = KVM_DIRTY_RING_RSVD_ENTRIES + cpu_dirty_log_size(self.mmu.params, self.mmu.cfg)
            ring = self.rings[vcpu] = DirtyRing(vcpu, size, size - rsvd)
        return ring

    def _trace(self, name: str, **fields: FieldValue) -> None:
        if self.emit is not None:
            self.emit(name, fields)

    def kvm_dirty_ring_push(self, vcpu: int, slot: int, offset: int) -> None:
        """dirty_ring.c: the entry filled and marked KVM_DIRTY_GFN_F_DIRTY, `dirty_index`
        moved, `trace_kvm_dirty_ring_push()`; at the soft limit
        KVM_REQ_DIRTY_RING_SOFT_FULL for the vCPU."""
        ring = self.ring(vcpu)
        if ring.full():
            raise AuditError(f"dirty ring {vcpu}: push on a full ring (WARN_ON_ONCE)")
        ring.dirty_gfns[ring.dirty_index & (ring.size - 1)] = [KVM_DIRTY_GFN_F_DIRTY, slot, offset]
        ring.dirty_index += 1
        self._trace(
            "kvm_dirty_ring_push", index=ring.index, dirty_index=ring.dirty_index,
            reset_index=ring.reset_index, slot=slot, offset=offset,
        )  # fmt: skip
        if ring.soft_full():
            self.soft_full_requests.add(vcpu)

    def kvm_dirty_ring_check_request(self, vcpu: int) -> bool:
        """At the vCPU's next entry (`vcpu_enter_guest()`): a soft-full ring makes it exit
        to userspace with KVM_EXIT_DIRTY_RING_FULL (`trace_kvm_dirty_ring_exit`); the
        request stays while the ring is soft full."""
        if vcpu not in self.soft_full_requests:
            return False
        ring = self.ring(vcpu)
        if not ring.soft_full():
            self.soft_full_requests.discard(vcpu)
            return False
        self._trace("kvm_dirty_ring_exit", vcpu_id=vcpu)
        return True

    def harvest_rings(self) -> list[tuple[int, int]]:
        """Userspace collects every vCPU's ring (QEMU's `kvm_dirty_ring_reap()`):
        (slot, offset) of each dirty entry, now marked for reset."""
        return [got for vcpu in sorted(self.rings) for got in self.rings[vcpu].harvest()]

    def reset_dirty_rings(self) -> int:
        """KVM_RESET_DIRTY_RINGS (`kvm_vm_ioctl_reset_dirty_pages()`): each vCPU's ring
        reset (`kvm_dirty_ring_reset()`); the entries reset."""
        if not self.mmu.vm.dirty_ring_size:
            raise KvmError(22, "the VM has no dirty ring", "KVM_RESET_DIRTY_RINGS")
        cleared = 0
        for vcpu in sorted(self.rings):
            cleared += self.kvm_dirty_ring_reset(self.rings[vcpu])
        return cleared

    def kvm_dirty_ring_reset(self, ring: DirtyRing) -> int:
        """dirty_ring.c 6.18: from `reset_index` each harvested entry made invalid, and
        batched with the entries before it while they are in the same slot within 64
        frames (`mask`, its `cur_offset` moved back for a lower one); each batch protected
        again (`kvm_reset_dirty_gfn()` -> `kvm_arch_mmu_enable_log_dirty_pt_masked()`);
        `trace_kvm_dirty_ring_reset()` at the end.  The entries reset."""
        reset = 0
        mask, cur_slot, cur_offset = 0, 0, 0
        while True:
            entry = ring.dirty_gfns[ring.reset_index & (ring.size - 1)]
            if not entry[0] & KVM_DIRTY_GFN_F_RESET:  # kvm_dirty_gfn_harvested()
                break
            next_slot, next_offset = entry[1], entry[2]
            entry[0] = 0  # kvm_dirty_gfn_set_invalid()
            ring.reset_index += 1
            reset += 1
            if mask:
                if next_slot == cur_slot:
                    delta = next_offset - cur_offset
                    if 0 <= delta < BITS_PER_LONG:
                        mask |= 1 << delta
                        continue
                    # Backwards visit, careful about overflows!
                    if -BITS_PER_LONG < delta < 0 and (mask << -delta) >> BITS_PER_LONG == 0:
                        cur_offset = next_offset
                        mask = (mask << -delta) | 1
                        continue
                self.kvm_reset_dirty_gfn(cur_slot, cur_offset, mask)
            cur_slot, cur_offset, mask = next_slot, next_offset, 1
        if mask:
            self.kvm_reset_dirty_gfn(cur_slot, cur_offset, mask)
        self._trace(
            "kvm_dirty_ring_reset", index=ring.index, dirty_index=ring.dirty_index,
            reset_index=ring.reset_index,
        )  # fmt: skip
        return reset

    def kvm_reset_dirty_gfn(self, uapi_slot: int, offset: int, mask: int) -> None:
        """dirty_ring.c: the slot looked up by its (as_id << 16 | id); ignored when gone
        or when the batch runs past its end."""
        slot = self.mmu.vm.slot(uapi_slot >> 16, uapi_slot & 0xFFFF)
        if slot is None or offset + mask.bit_length() - 1 >= slot.npages:
            return
        self.kvm_arch_mmu_enable_log_dirty_pt_masked(slot, offset, mask)

    # -- audit ---------------------------------------------------------------------------

    def pending(self, key: tuple[int, int]) -> set[int]:
        """The offsets of the slot still to be reported: its bitmap, or the ring entries
        pushed and not yet reset (harvested or not)."""
        pages = set(self.dirty.get(key, ()))
        uapi = (key[0] << 16) | key[1]
        for ring in self.rings.values():
            for index in range(ring.reset_index, ring.dirty_index):
                entry = ring.dirty_gfns[index & (ring.size - 1)]
                if entry[1] == uapi:
                    pages.add(entry[2])
        return pages

    def audit(self) -> None:
        """No write is lost: in a logged slot, a leaf that lets the guest write without a
        fault or a PML entry (W, and D already set under PML, or any huge W leaf) maps
        only pages still to be reported (`pending`); each ring consistent."""
        for ring in self.rings.values():
            ring.audit()
        if self.mmu.vm.dirty_ring_size and any(self.dirty.values()):
            raise AuditError("dirty log: a bitmap set on a VM with dirty rings")
        dbit = self.mmu.cfg.shadow_dirty_mask
        for key in self.dirty:
            slot = self.mmu.vm.slot(*key)
            if slot is None:
                raise AuditError(f"dirty log: slot {key} logs but is gone")
            pending = self.pending(key)
            for level, gfn, spte in self._leaves(slot):
                if not spte & PT_WRITABLE_MASK:
                    continue
                if level == PG_LEVEL_4K and self.pml and dbit and not spte & dbit:
                    continue  # the CPU logs the write in the PML buffer
                first = max(gfn, slot.base_gfn) - slot.base_gfn
                last = min(gfn + (1 << 9 * (level - 1)), slot.base_gfn + slot.npages)
                clean = [o for o in range(first, last - slot.base_gfn) if o not in pending]
                if clean:
                    raise AuditError(
                        f"dirty log ({self.mode}): gfn {slot.base_gfn + clean[0]:#x} is clean"
                        f" but a level-{level} spte {spte:#x} lets the guest write it"
                    )

    def _leaves(self, slot: MemorySlot) -> Iterator[tuple[int, int, int]]:
        """(level, first gfn, spte) of each present leaf over the slot: the rmaps, or the
        valid TDP roots of its address space."""
        mmu = self.mmu
        if self._rmaps:
            for level in range(PG_LEVEL_4K, KVM_MAX_HUGEPAGE_LEVEL + 1):
                heads = mmu.rmaps.get((slot.as_id, slot.id, level), {})  # type: ignore[union-attr]
                shift = 9 * (level - 1)
                for index, head in heads.items():
                    gfn = ((slot.base_gfn >> shift) + index) << shift
                    for sptep in list(head):
                        spte = mmu.pages.page_of_sptep(sptep).spt[(sptep & 0xFFF) // 8]
                        if is_shadow_present_pte(spte):
                            yield level, gfn, spte
            return
        from .tdp.iter import for_each_tdp_pte

        end = slot.base_gfn + slot.npages
        for root in mmu.pages.tdp_mmu_roots:  # type: ignore[union-attr]
            if root.role.invalid or root.as_id != slot.as_id:
                continue
            by_pa = mmu.pages.by_pa  # type: ignore[union-attr]
            for it in for_each_tdp_pte(by_pa, root, slot.base_gfn, end):
                spte = it.old_spte
                if is_shadow_present_pte(spte) and is_last_spte(spte, it.level):
                    yield it.level, it.gfn, spte


def _heads(heads: Mapping[int, H], offsets: set[int] | None) -> Iterator[tuple[int, H]]:
    """The rmap heads of the `offsets` (`gfn_to_rmap()` of each), or all of them."""
    if offsets is None:
        yield from list(heads.items())
        return
    for offset in sorted(offsets):
        if offset in heads:
            yield offset, heads[offset]


def _words(pages: list[int]) -> Iterator[tuple[int, int]]:
    """The sorted offsets as the bitmap's words: (first offset of the word, its mask)."""
    word, mask = -1, 0
    for page in pages:
        if page // BITS_PER_LONG != word:
            if mask:
                yield word * BITS_PER_LONG, mask
            word, mask = page // BITS_PER_LONG, 0
        mask |= 1 << (page % BITS_PER_LONG)
    if mask:
        yield word * BITS_PER_LONG, mask


def _align_pmd(gfn: int) -> int:
    """ALIGN(gfn << PAGE_SHIFT, PMD_SIZE)."""
    size = 1 << PMD_SHIFT
    return ((gfn << PAGE_SHIFT) + size - 1) & ~(size - 1)
