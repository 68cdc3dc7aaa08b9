"""`MemorySlot`: one `struct kvm_memory_slot` (include/linux/kvm_host.h, docs/kvm.md
§1.1).

The kernel never edits a live slot: an update builds a new one and swaps it in, so the
model's slots are immutable values too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .constants import KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY, KVM_MEMSLOT_INVALID, PAGE_SHIFT


@dataclass(frozen=True, slots=True)
class MemorySlot:
    """A guest-physical range `[base_gfn, base_gfn + npages)` backed by host memory."""

    id: int
    as_id: int
    base_gfn: int
    npages: int
    flags: int = 0
    userspace_addr: int = 0

    @property
    def end_gfn(self) -> int:
        """First gfn past the slot (`base_gfn + npages`)."""
        return self.base_gfn + self.npages

    @property
    def uapi_slot(self) -> int:
        """The `slot` field of the ioctl: `as_id << 16 | id`."""
        return self.as_id << 16 | self.id

    @property
    def gpa(self) -> int:
        return self.base_gfn << PAGE_SHIFT

    @property
    def size(self) -> int:
        return self.npages << PAGE_SHIFT

    @property
    def readonly(self) -> bool:
        return bool(self.flags & KVM_MEM_READONLY)

    @property
    def dirty_logging(self) -> bool:
        return bool(self.flags & KVM_MEM_LOG_DIRTY_PAGES)

    @property
    def invalid(self) -> bool:
        return bool(self.flags & KVM_MEMSLOT_INVALID)

    def contains(self, gfn: int) -> bool:
        """`try_get_memslot()`: does this slot hold `gfn`?"""
        return self.base_gfn <= gfn < self.base_gfn + self.npages

    def with_changes(self, **changes: int) -> MemorySlot:
        return replace(self, **changes)

    def describe(self) -> str:
        flags = []
        if self.dirty_logging:
            flags.append("LOG_DIRTY")
        if self.readonly:
            flags.append("READONLY")
        if self.invalid:
            flags.append("INVALID")
        fl = f" [{'|'.join(flags)}]" if flags else ""
        return (
            f"slot {self.id} (as {self.as_id}): gfn {self.base_gfn:#x}-{self.end_gfn - 1:#x}"
            f" ({self.npages} pages){fl}"
        )
