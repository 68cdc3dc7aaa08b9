"""KVM_SET_USER_MEMORY_REGION: every check with the kernel's errno, generations, phases."""

from __future__ import annotations

import errno

import pytest
from mmuscope.engine import (
    KVM_MEM_GUEST_MEMFD,
    KVM_MEM_LOG_DIRTY_PAGES,
    KVM_MEM_MAX_NR_PAGES,
    KVM_MEM_READONLY,
    KVM_USER_MEM_SLOTS,
    KvmError,
    Vm,
)
from mmuscope.engine.memslots.constants import TASK_SIZE_MAX

UA = 0x7F00_0000_0000
MiB = 1 << 20


def refused(vm: Vm, *args: int) -> int:
    before = (vm.memslots(0), vm.memslots(1), vm.generation(0), vm.generation(1))
    with pytest.raises(KvmError) as info:
        vm.set_user_memory_region(*args)
    after = (vm.memslots(0), vm.memslots(1), vm.generation(0), vm.generation(1))
    assert before == after, "a refused call changed the VM"
    vm.audit()
    assert isinstance(info.value, OSError)
    return info.value.errno or 0


def test_constants_match_the_kernel() -> None:
    assert KVM_USER_MEM_SLOTS == 32764
    assert KVM_MEM_MAX_NR_PAGES == (1 << 31) - 1
    assert (KVM_MEM_LOG_DIRTY_PAGES, KVM_MEM_READONLY, KVM_MEM_GUEST_MEMFD) == (1, 2, 4)


def test_unknown_strategy_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="rbtree"):
        Vm(lookup="splay")


@pytest.mark.parametrize(
    "args, why",
    [
        ((0, KVM_MEM_GUEST_MEMFD, 0, MiB, UA), "guest_memfd needs the v2 ioctl"),
        ((0, 1 << 3, 0, MiB, UA), "unknown flag bit"),
        ((0, 0, 0, MiB + 1, UA), "size not page aligned"),
        ((0, 0, 0x800, MiB, UA), "gpa not page aligned"),
        ((0, 0, 0, MiB, UA + 8), "userspace_addr not page aligned"),
        ((0, 0, 0, MiB, TASK_SIZE_MAX), "access_ok fails"),
        ((2 << 16, 0, 0, MiB, UA), "address space 2"),
        ((KVM_USER_MEM_SLOTS, 0, 0, MiB, UA), "internal slot id"),
        ((0, 0, (1 << 64) - 4096, 8192, UA), "gpa + size wraps"),
        ((0, 0, 0, (KVM_MEM_MAX_NR_PAGES + 1) << 12, 0x1000), "too many pages"),
        ((0, 0, 0, 0, UA), "delete a slot that does not exist"),
        ((0, 0, 1 << 52, MiB, UA), "above kvm_mmu_max_gfn"),
    ],
)
def test_einval_checks(args: tuple[int, ...], why: str) -> None:
    assert refused(Vm(), *args) == errno.EINVAL, why


def test_last_user_slot_is_accepted() -> None:
    vm = Vm()
    vm.set_user_memory_region(KVM_USER_MEM_SLOTS - 1, 0, 0, MiB, UA)
    assert vm.memslots()[0].id == KVM_USER_MEM_SLOTS - 1


def test_overlap_is_eexist_for_create_and_move() -> None:
    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, 4 * MiB, UA)
    vm.set_user_memory_region(1, 0, 8 * MiB, MiB, UA + 4 * MiB)
    assert refused(vm, 2, 0, 2 * MiB, 4 * MiB, UA + 16 * MiB) == errno.EEXIST
    assert refused(vm, 1, 0, 3 * MiB, MiB, UA + 4 * MiB) == errno.EEXIST  # move onto slot 0
    # the same range in the other address space is fine
    vm.set_user_memory_region(1 << 16 | 2, 0, 0, 4 * MiB, UA)


@pytest.mark.parametrize(
    "change, why",
    [
        ((0, 0, 0, MiB, UA + MiB), "userspace_addr cannot change"),
        ((0, 0, 0, 2 * MiB, UA), "size cannot change"),
        ((0, KVM_MEM_READONLY, 0, MiB, UA), "READONLY cannot change"),
    ],
)
def test_modify_rules(change: tuple[int, ...], why: str) -> None:
    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, MiB, UA)
    assert refused(vm, *change) == errno.EINVAL, why


def test_generations_count_swaps_per_address_space() -> None:
    vm = Vm()
    assert (vm.generation(0), vm.generation(1)) == (0, 1)
    vm.set_user_memory_region(0, 0, 0, MiB, UA)  # CREATE: one swap
    assert vm.generation(0) == 2
    vm.set_user_memory_region(0, KVM_MEM_LOG_DIRTY_PAGES, 0, MiB, UA)  # FLAGS_ONLY
    assert vm.generation(0) == 4
    vm.set_user_memory_region(0, KVM_MEM_LOG_DIRTY_PAGES, 0, MiB, UA)  # nothing to do
    assert vm.generation(0) == 4
    vm.set_user_memory_region(0, KVM_MEM_LOG_DIRTY_PAGES, 2 * MiB, MiB, UA)  # MOVE: two
    assert vm.generation(0) == 8
    vm.set_user_memory_region(0, 0, 0, 0, 0)  # DELETE: two swaps
    assert vm.generation(0) == 12
    assert vm.generation(1) == 1
    one_as = Vm(address_spaces=1)
    one_as.set_user_memory_region(0, 0, 0, MiB, UA)
    assert one_as.generation(0) == 1


def test_delete_and_move_invalidate_first() -> None:
    vm = Vm()
    vm.set_user_memory_region(3, 0, 0, MiB, UA)
    seen: list[tuple[str, object]] = []

    def listener(event: object) -> None:
        name = getattr(event, "name", "")
        if name == "kvm_arch_flush_shadow_memslot":
            slot = vm.slot(0, 3)
            seen.append((name, slot.invalid if slot else None))
        elif name == "kvm_arch_memslots_updated":
            seen.append((name, getattr(event, "fields", {})["step"]))

    vm.subscribe(listener)
    vm.set_user_memory_region(3, 0, 4 * MiB, MiB, UA)
    assert seen == [
        ("kvm_arch_memslots_updated", "invalidate"),
        ("kvm_arch_flush_shadow_memslot", True),
        ("kvm_arch_memslots_updated", "KVM_MR_MOVE"),
    ]
    assert not vm.memslots()[0].invalid
    vm.audit()


def test_slot_field_selects_address_space() -> None:
    vm = Vm()
    vm.set_user_memory_region(1 << 16 | 5, KVM_MEM_READONLY, 0xFFFC0000, 0x40000, UA)
    (slot,) = vm.memslots(1)
    assert (slot.as_id, slot.id, slot.readonly, slot.uapi_slot) == (1, 5, True, 65541)
    assert vm.memslots(0) == []
    assert vm.gfn_to_memslot(0xFFFC0, as_id=1) == slot
    assert vm.gfn_to_memslot(0xFFFC0, as_id=0) is None


def test_nr_memslot_pages_follows_create_and_delete() -> None:
    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, MiB, UA)
    vm.set_user_memory_region(1 << 16, 0, 0, MiB, UA)
    assert vm.nr_memslot_pages == 512
    vm.set_user_memory_region(0, 0, 0, 0, 0)
    assert vm.nr_memslot_pages == 256


def test_readonly_needs_arch_support() -> None:
    vm = Vm(readonly_mem=False)
    assert refused(vm, 0, KVM_MEM_READONLY, 0, MiB, UA) == errno.EINVAL


def test_error_text_names_the_errno() -> None:
    vm = Vm()
    vm.set_user_memory_region(0, 0, 0, MiB, UA)
    with pytest.raises(KvmError) as info:
        vm.set_user_memory_region(1, 0, 0, MiB, UA)
    assert info.value.errno_name == "EEXIST"
    assert "overlaps slot 0" in str(info.value)
