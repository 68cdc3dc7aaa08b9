"""The `balloon` workload's host side: QEMU's virtio-balloon device giving guest pages back
to the host, so that the MMU notifier unmaps them under KVM (mmu_notifier.py).

Every `BALLOON_EVERY` accesses the guest's balloon driver inflates by one page: under EPT
a 4K page of a RAM slot drawn from its own generator (`seed ^ BALLOON_SEED`, so the
guest accesses are kernbench's); under shadow paging a page the guest kernel allocates
(`alloc_page()`, beside its processes' pages), held by the driver.  QEMU discards it
(`virtio_balloon_handle_output` → `balloon_inflate_page` → `ram_block_discard_range`:
MADV_DONTNEED of the 4K host page, the balloon's page size; QEMU 9.x), which is
`KvmMmuNotifier.madvise_dontneed`: an invalidation of the page, inside it the split of
the THP around it (an invalidation of its 2M), the page freed.  QEMU does this on its
own thread while the vCPUs run: here it lands in the window of the next page fault that
asks the host for a pfn (`faultin_race`, inside `kvm_mmu_faultin_pfn()`), or at the
next inflation if no fault came.  That fault saw the sequence move and retries
(RET_PF_RETRY), whatever its gfn.  A page the guest touches again after it was given
back (the driver deflated it) faults in a new 4K host page; the 2M around it stays
split, so KVM maps it and its neighbours with 4K sptes (`host_pfn_mapping_level()`).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ..mapping_level import KvmPageFault, gfn_to_hva_memslot
from .session import uniform_below

if TYPE_CHECKING:
    from ...memslots.memslot import MemorySlot
    from ..mmu_notifier import KvmMmuNotifier

BALLOON_EVERY = 50  # the balloon inflates by one page this often (accesses)
BALLOON_SEED = 0xBA11  # its generator's seed is the session's seed ^ this


class HostBalloon:
    """The balloon device's pages and when QEMU discards them."""

    def __init__(self, notifier: KvmMmuNotifier, seed: int) -> None:
        self.notifier = notifier
        self._rng = random.Random(seed ^ BALLOON_SEED)
        self.armed: tuple[int, int] | None = None  # (gfn, hva) QEMU has yet to discard
        self.inflated = 0  # pages discarded
        self.raced = 0  # of them inside a page fault's window

    def inflate(self, ram: list[MemorySlot]) -> str:
        """The driver gives back a page of RAM drawn at random (a guest whose free pages
        the model does not know: the EPT sessions); the update's words."""
        getrandbits = self._rng.getrandbits
        slot = ram[uniform_below(getrandbits, len(ram))]
        return self.give_back(slot, slot.base_gfn + uniform_below(getrandbits, slot.npages))

    def give_back(self, slot: MemorySlot, gfn: int) -> str:
        """The driver gives back `gfn` (`virtballoon` → the inflate virtqueue); the
        previous page is discarded now if no fault came since.  The update's words."""
        words = ""
        if self.armed is not None:
            words = f"; {self._discard()}"
        self.armed = gfn, gfn_to_hva_memslot(slot, gfn)
        return f"balloon: gfn {gfn:#x} given back{words}"

    def faultin_race(self, fault: KvmPageFault) -> None:
        """`MappingLevels.faultin_race`: QEMU's discard lands in this fault's window."""
        if self.armed is not None:
            self.raced += 1
            self._discard()

    def _discard(self) -> str:
        assert self.armed is not None
        gfn, hva = self.armed
        self.armed = None
        self.inflated += 1
        return f"gfn {gfn:#x}: {self.notifier.madvise_dontneed(hva)}"
