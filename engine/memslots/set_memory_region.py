"""The checks of `KVM_SET_USER_MEMORY_REGION`, in the kernel's order, with its errnos.

`kvm_vm_ioctl()` → `kvm_vm_ioctl_set_memory_region()` → `__kvm_set_memory_region()`
(virt/kvm/kvm_main.c; docs/kvm.md §2.1-§2.2), plus x86's
`kvm_arch_prepare_memory_region()` limit on the highest gfn (`kvm_mmu_max_gfn()`).
`validate_region()` decides what the call would do — a `MemslotChange` — or raises
`KvmError`; it changes nothing, so a refused call leaves the VM as it was.
"""

from __future__ import annotations

import errno
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import KvmError
from .constants import (
    KVM_MEM_GUEST_MEMFD,
    KVM_MEM_LOG_DIRTY_PAGES,
    KVM_MEM_MAX_NR_PAGES,
    KVM_MEM_READONLY,
    KVM_MEM_SLOTS_NUM,
    KVM_MR_CREATE,
    KVM_MR_DELETE,
    KVM_MR_FLAGS_ONLY,
    KVM_MR_MOVE,
    KVM_SET_USER_MEMORY_REGION_V1_FLAGS,
    KVM_USER_MEM_SLOTS,
    PAGE_SHIFT,
    PAGE_SIZE,
    TASK_SIZE_MAX,
    U16_MASK,
    U32_MASK,
    U64_MASK,
)
from .memslot import MemorySlot

ULONG_MAX = U64_MASK  # a 64-bit host


@dataclass(frozen=True, slots=True)
class RegionRequest:
    """`struct kvm_userspace_memory_region` as the kernel copies it in (fields truncated)."""

    slot: int
    flags: int
    guest_phys_addr: int
    memory_size: int
    userspace_addr: int

    @classmethod
    def from_uapi(
        cls, slot: int, flags: int, guest_phys_addr: int, memory_size: int, userspace_addr: int
    ) -> RegionRequest:
        """Truncate to the UAPI widths (u32 slot and flags, u64 addresses), as C would."""
        return cls(
            slot & U32_MASK,
            flags & U32_MASK,
            guest_phys_addr & U64_MASK,
            memory_size & U64_MASK,
            userspace_addr & U64_MASK,
        )

    @property
    def as_id(self) -> int:
        return self.slot >> 16

    @property
    def id(self) -> int:
        return self.slot & U16_MASK


class KvmSetUserMemoryRegion(ABC):
    """`KVM_SET_USER_MEMORY_REGION` as userspace issues it, one entry for the model
    (`engine.Vm`) and the real VM fd (`engine.kvm.vmm.KvmVm`), so that the two are called
    alike (the memslot fuzz holds one against the other): the five fields of
    `struct kvm_userspace_memory_region`, copied in at their UAPI widths as `kvm_vm_ioctl()`'s
    `copy_from_user()` does, then `kvm_vm_ioctl_set_memory_region()`."""

    def set_user_memory_region(
        self,
        slot: int,
        flags: int,
        guest_phys_addr: int,
        memory_size: int,
        userspace_addr: int,
    ) -> None:
        """KVM_SET_USER_MEMORY_REGION (v1): `KvmError` with the kernel's errno on refusal."""
        mem = RegionRequest.from_uapi(slot, flags, guest_phys_addr, memory_size, userspace_addr)
        self.kvm_vm_ioctl_set_memory_region(mem)

    @abstractmethod
    def kvm_vm_ioctl_set_memory_region(self, mem: RegionRequest) -> None:
        """The region as copied in: applied (the model) or handed to the kernel (the fd)."""


@dataclass(frozen=True, slots=True)
class MemslotChange:
    """`enum kvm_mr_change` with the old and new slot (`kvm_set_memslot()`'s arguments)."""

    change: str
    as_id: int
    old: MemorySlot | None
    new: MemorySlot | None

    @property
    def slot_id(self) -> int:
        slot = self.new if self.new is not None else self.old
        assert slot is not None
        return slot.id


@dataclass(frozen=True, slots=True)
class VmLimits:
    """What the checks need to know about the VM: `readonly_mem` is __KVM_HAVE_READONLY_MEM
    (x86: yes), `host_phys_bits` the MAXPHYADDR behind kvm_mmu_max_gfn()."""

    nr_address_spaces: int = 2
    readonly_mem: bool = True
    host_phys_bits: int = 52

    @property
    def max_gfn(self) -> int:
        """`kvm_mmu_max_gfn()`: the highest gfn a slot may reach."""
        return (1 << (self.host_phys_bits - PAGE_SHIFT)) - 1


SlotById = Callable[[int, int], "MemorySlot | None"]
OverlapCheck = Callable[[int, int, int, int], "MemorySlot | None"]


def _refuse(err: int, reason: str) -> KvmError:
    return KvmError(err, reason)


def check_ioctl(req: RegionRequest) -> None:
    """`kvm_vm_ioctl()` for the v1 ioctl, then `kvm_vm_ioctl_set_memory_region()`."""
    if req.flags & ~KVM_SET_USER_MEMORY_REGION_V1_FLAGS:
        raise _refuse(
            errno.EINVAL, f"flags {req.flags:#x} not accepted by KVM_SET_USER_MEMORY_REGION"
        )
    if req.id >= KVM_USER_MEM_SLOTS:
        raise _refuse(errno.EINVAL, f"slot id {req.id} >= KVM_USER_MEM_SLOTS")


def check_memory_region_flags(flags: int, limits: VmLimits) -> None:
    """`check_memory_region_flags()` (check 1)."""
    valid = KVM_MEM_LOG_DIRTY_PAGES
    if limits.readonly_mem and not flags & KVM_MEM_GUEST_MEMFD:
        valid |= KVM_MEM_READONLY
    if flags & ~valid:
        raise _refuse(errno.EINVAL, f"flags {flags:#x} contain unsupported bits")


def check_sanity(req: RegionRequest, limits: VmLimits) -> None:
    """Checks 2-8 of `__kvm_set_memory_region()`, all -EINVAL."""
    if req.memory_size & (PAGE_SIZE - 1):
        raise _refuse(errno.EINVAL, f"memory_size {req.memory_size:#x} is not page aligned")
    if req.guest_phys_addr & (PAGE_SIZE - 1):
        raise _refuse(errno.EINVAL, f"guest_phys_addr {req.guest_phys_addr:#x} is not page aligned")
    if req.userspace_addr & (PAGE_SIZE - 1):
        raise _refuse(errno.EINVAL, f"userspace_addr {req.userspace_addr:#x} is not page aligned")
    end_ua = req.userspace_addr + req.memory_size
    if end_ua > ULONG_MAX or end_ua > TASK_SIZE_MAX:
        raise _refuse(
            errno.EINVAL,
            f"userspace range {req.userspace_addr:#x}+{req.memory_size:#x} fails access_ok()",
        )
    if req.as_id >= limits.nr_address_spaces or req.id >= KVM_MEM_SLOTS_NUM:
        raise _refuse(
            errno.EINVAL,
            f"address space {req.as_id} >= {limits.nr_address_spaces} address spaces",
        )
    if req.guest_phys_addr + req.memory_size > U64_MASK:
        raise _refuse(errno.EINVAL, "guest_phys_addr + memory_size wraps around")
    if req.memory_size >> PAGE_SHIFT > KVM_MEM_MAX_NR_PAGES:
        raise _refuse(errno.EINVAL, f"{req.memory_size >> PAGE_SHIFT} pages > KVM_MEM_MAX_NR_PAGES")


def classify_change(
    req: RegionRequest, old: MemorySlot | None, nr_memslot_pages: int
) -> MemslotChange | None:
    """Checks 9-11: delete, create or modify; None when there is nothing to do."""
    if req.memory_size == 0:
        if old is None or not old.npages:
            raise _refuse(errno.EINVAL, f"slot {req.id} to delete does not exist")
        if nr_memslot_pages < old.npages:
            raise _refuse(errno.EIO, "nr_memslot_pages < old->npages (WARN_ON_ONCE)")
        return MemslotChange(KVM_MR_DELETE, req.as_id, old, None)
    new = MemorySlot(
        id=req.id,
        as_id=req.as_id,
        base_gfn=req.guest_phys_addr >> PAGE_SHIFT,
        npages=req.memory_size >> PAGE_SHIFT,
        flags=req.flags,
        userspace_addr=req.userspace_addr,
    )
    if old is None or not old.npages:
        if nr_memslot_pages + new.npages > ULONG_MAX:
            raise _refuse(errno.EINVAL, "nr_memslot_pages would overflow")
        return MemslotChange(KVM_MR_CREATE, req.as_id, None, new)
    return _classify_modify(old, new)


def _classify_modify(old: MemorySlot, new: MemorySlot) -> MemslotChange | None:
    """Check 11: an existing slot may only move or change flags (not READONLY)."""
    if old.flags & KVM_MEM_GUEST_MEMFD:
        raise _refuse(errno.EINVAL, f"guest_memfd slot {old.id} can only be deleted")
    if new.userspace_addr != old.userspace_addr:
        raise _refuse(errno.EINVAL, f"slot {old.id}: userspace_addr cannot change")
    if new.npages != old.npages:
        raise _refuse(errno.EINVAL, f"slot {old.id}: size cannot change (delete and recreate)")
    if (new.flags ^ old.flags) & KVM_MEM_READONLY:
        raise _refuse(errno.EINVAL, f"slot {old.id}: KVM_MEM_READONLY cannot change")
    if new.base_gfn != old.base_gfn:
        return MemslotChange(KVM_MR_MOVE, new.as_id, old, new)
    if new.flags != old.flags:
        return MemslotChange(KVM_MR_FLAGS_ONLY, new.as_id, old, new)
    return None


def validate_region(
    req: RegionRequest,
    limits: VmLimits,
    slot_by_id: SlotById,
    overlapping: OverlapCheck,
    nr_memslot_pages: int,
    internal: bool = False,
) -> MemslotChange | None:
    """Every check, in the kernel's order; returns the change to make (None: nothing).
    `internal`: KVM's own slot (`__x86_set_memory_region()`), without the ioctl's."""
    if not internal:
        check_ioctl(req)
    check_memory_region_flags(req.flags, limits)
    check_sanity(req, limits)
    change = classify_change(req, slot_by_id(req.as_id, req.id), nr_memslot_pages)
    if change is None or change.new is None:
        return change
    new = change.new
    if change.change in (KVM_MR_CREATE, KVM_MR_MOVE):
        other = overlapping(new.as_id, new.id, new.base_gfn, new.end_gfn)
        if other is not None:
            raise _refuse(
                errno.EEXIST,
                f"slot {new.id} [{new.base_gfn:#x}, {new.end_gfn:#x}) overlaps slot {other.id}"
                f" [{other.base_gfn:#x}, {other.end_gfn:#x})",
            )
        if change.change == KVM_MR_CREATE:
            check_max_gfn(new, limits)
    return change


def check_max_gfn(new: MemorySlot, limits: VmLimits) -> None:
    """`kvm_arch_prepare_memory_region()` (6.18 x86.c) for CREATE and MOVE: -EINVAL past
    `kvm_mmu_max_gfn()`.  For a MOVE it runs inside `kvm_set_memslot()`, after the old
    slot was invalidated (a generation and a zap), which is then reverted."""
    if new.end_gfn - 1 > limits.max_gfn:
        raise _refuse(
            errno.EINVAL, f"slot {new.id} ends above kvm_mmu_max_gfn() {limits.max_gfn:#x}"
        )
