"""What makes `fast_page_fault()` fire in a running guest (fast_pf.py), as controls of
the sessions of the two MMUs that have it (`MmuSession`: direct pages, tdp_mmu=N;
`TdpSession`: the TDP MMU):

- dirty logging on the largest RAM slot (`KVM_SET_USER_MEMORY_REGION` with
  KVM_MEM_LOG_DIRTY_PAGES toggled, flags only): the slot's sptes are write-protected
  but stay MMU-writable, so the next write to each page is fixed without mmu_lock and
  marks the page in the dirty bitmap (`DirtyLogging`);
- `KVM_GET_DIRTY_LOG` on that slot: the bitmap is returned and cleared, and the pages
  it reported are write-protected again (the next round of a live migration);
- the MMU notifier's clear_young over every RAM slot (`kvm_age_hva`, `kvm_age_gfn()`:
  aging.py): with A/D bits off the sptes become access-tracked and the next access of
  each is restored by the fast path;
- the `migrate` workload: a live migration's view of a guest — dirty logging on from the
  first access, `HOT_SHARE` of the accesses (`HOT_WRITES` of them writes) in a working
  set of `HOT_PAGES` pages of the logged slot, and a sync of the dirty pages every
  `GET_DIRTY_EVERY` accesses (KVM_GET_DIRTY_LOG, with manual protect and KVM_CLEAR_DIRTY_LOG,
  or the dirty rings collected and reset: `harvest_dirty_pages`), so the same pages are
  protected and fixed again.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ...memslots.constants import KVM_MEM_LOG_DIRTY_PAGES, PAGE_SHIFT
from ...memslots.memslot import MemorySlot
from ...memslots.vm import Vm
from ..dirty_log import DirtyLogging
from .session import uniform_below

if TYPE_CHECKING:
    from ..direct.mmu import DirectMmu
    from ..mmu_notifier import KvmMmuNotifier
    from ..tdp.mmu import TdpMmu

HOT_PAGES = 256
HOT_SHARE = 0.9
HOT_WRITES = 0.4
GET_DIRTY_EVERY = 200


class FastPathControls:
    """Dirty logging, KVM_GET_DIRTY_LOG and aging for a session's guest."""

    vm: Vm
    workload: str
    steps: int
    mmu: DirectMmu | TdpMmu
    dirty_log: DirtyLogging
    notifier: KvmMmuNotifier
    _ram: list[MemorySlot]

    def logged_slot(self) -> MemorySlot:
        """The largest RAM slot, as it is now (the one dirty logging is toggled on)."""
        slot = max(self._ram, key=lambda s: s.npages)
        return self.vm.slot(slot.as_id, slot.id) or slot

    def toggle_dirty_logging(self) -> str:
        """KVM_MEM_LOG_DIRTY_PAGES on the largest RAM slot, on or off (flags only)."""
        slot = self.logged_slot()
        flags = slot.flags ^ KVM_MEM_LOG_DIRTY_PAGES
        self.vm.set_user_memory_region(
            slot.uapi_slot, flags, slot.base_gfn << PAGE_SHIFT, slot.npages << PAGE_SHIFT,
            slot.userspace_addr,
        )  # fmt: skip
        self._ram = [s for s in self.vm.memslots(0) if not s.readonly]
        return f"dirty logging {'on' if flags & KVM_MEM_LOG_DIRTY_PAGES else 'off'}"

    def get_dirty_log(self) -> list[int]:
        """KVM_GET_DIRTY_LOG of the logged slot: the dirty gfn offsets (write-protected
        again in the legacy mode); [] when the slot does not log."""
        slot = self.logged_slot()
        return self.dirty_log.get_dirty_log(slot.id, slot.as_id)

    def harvest_dirty_pages(self) -> str:
        """A migration round's sync of the dirty pages (QEMU's
        `kvm_physical_sync_dirty_bitmap()` or, with a ring, `kvm_dirty_ring_flush()`), in
        the VM's dirty logging mode (dirty_log.py): legacy KVM_GET_DIRTY_LOG; manual
        protect KVM_GET_DIRTY_LOG and KVM_CLEAR_DIRTY_LOG of the pages it reported (QEMU
        clears each chunk before it sends it); a ring collected and reset."""
        log = self.dirty_log
        if log.mode == "ring":
            got = log.harvest_rings()
            log.reset_dirty_rings()
            return f"KVM_RESET_DIRTY_RINGS: {len(got)} pages"
        pages = self.get_dirty_log()
        if log.mode == "legacy" or not self.logged_slot().dirty_logging:
            return f"KVM_GET_DIRTY_LOG: {len(pages)} pages"
        slot = self.logged_slot()
        cleared = log.clear_dirty_log(slot.id, pages, as_id=slot.as_id)
        return f"KVM_GET_DIRTY_LOG: {len(pages)} pages, KVM_CLEAR_DIRTY_LOG: {len(cleared)}"

    def dirty_ring_exit(self, vcpu: int) -> str:
        """The vCPU's entry after an exit: a soft-full dirty ring exits to userspace
        (KVM_EXIT_DIRTY_RING_FULL), which collects every ring and resets them (QEMU's
        `kvm_dirty_ring_reap()` + KVM_RESET_DIRTY_RINGS); the words, "" when not full."""
        log = self.dirty_log
        if not log.soft_full_requests or not log.kvm_dirty_ring_check_request(vcpu):
            return ""
        got = log.harvest_rings()
        log.reset_dirty_rings()
        return f"KVM_EXIT_DIRTY_RING_FULL: {len(got)} pages"

    def age_memory(self) -> int:
        """Page reclaim's `clear_young` over each RAM slot's host range
        (`kvm_mmu_notifier_clear_young()`, traced `kvm_age_hva`: `kvm_age_gfn()`,
        mmu_notifier.py): how many sptes were young."""
        return sum(
            self.notifier.clear_young(s.userspace_addr, s.userspace_addr + s.size)
            for s in self._ram
        )

    def migrate_update(self, steps: int) -> str:
        """The `migrate` workload's update before access `steps`, if any."""
        if steps == 0 and not self.logged_slot().dirty_logging:
            return self.toggle_dirty_logging()
        if steps and not steps % GET_DIRTY_EVERY:
            return self.harvest_dirty_pages()
        return ""

    def hot_access(self, rng: random.Random) -> tuple[int, bool] | None:
        """A `migrate` access in the working set, (gfn, write), or None for a kernbench
        one.  The working set starts 1 MiB into the logged slot."""
        if rng.random() >= HOT_SHARE:
            return None
        slot = self.logged_slot()
        gfn = slot.base_gfn + (256 + uniform_below(rng, HOT_PAGES)) % slot.npages
        return gfn, rng.random() < HOT_WRITES

    @property
    def dirty_pages(self) -> int:
        """Pages in the dirty bitmaps now."""
        return sum(len(bits) for bits in self.dirty_log.dirty.values())
