"""KVM memslot constants, named and valued as in the kernel.

Sources: include/uapi/linux/kvm.h (flags), include/linux/kvm_host.h (limits, internal
flag, generation bit), arch/x86/include/asm/kvm_host.h (x86 slot counts).  See
docs/kvm.md §1.4, §1.5 and §2.1.
"""

from __future__ import annotations

PAGE_SHIFT = 12
PAGE_SIZE = 1 << PAGE_SHIFT

# uapi flags of struct kvm_userspace_memory_region(2)
KVM_MEM_LOG_DIRTY_PAGES = 1 << 0
KVM_MEM_READONLY = 1 << 1
KVM_MEM_GUEST_MEMFD = 1 << 2
KVM_SET_USER_MEMORY_REGION_V1_FLAGS = KVM_MEM_LOG_DIRTY_PAGES | KVM_MEM_READONLY

# Internal flag, bits 16-31 of memslot->flags are reserved for the kernel.
KVM_MEMSLOT_INVALID = 1 << 16

# Limits (x86 today).
KVM_MEM_SLOTS_NUM = 32767  # SHRT_MAX
KVM_INTERNAL_MEM_SLOTS = 3
KVM_USER_MEM_SLOTS = KVM_MEM_SLOTS_NUM - KVM_INTERNAL_MEM_SLOTS  # 32764
# the internal ones (arch/x86/include/asm/kvm_host.h): TSS, the APIC-access page, the
# identity-mapped page table
APIC_ACCESS_PAGE_PRIVATE_MEMSLOT = KVM_USER_MEM_SLOTS + 1
KVM_MEM_MAX_NR_PAGES = (1 << 31) - 1
KVM_MAX_NR_ADDRESS_SPACES = 2  # x86 with CONFIG_KVM_SMM: 0 normal, 1 SMM

# Older limits, for era comparisons (docs/kvm.md §1.4, the memslot-search thread (kvm,
# 2011)).
KVM_MEMORY_SLOTS_2011 = 32
KVM_PRIVATE_MEM_SLOTS_2011 = 4
KVM_USER_MEM_SLOTS_2020 = 509

# kvm_swap_active_memslots() marks the inactive set's generation with bit 63 while an
# update is in flight.
KVM_MEMSLOT_GEN_UPDATE_IN_PROGRESS = 1 << 63

# access_ok() on x86-64 with 4-level paging: user addresses end at TASK_SIZE_MAX.
TASK_SIZE_MAX = (1 << 47) - PAGE_SIZE

U16_MASK = (1 << 16) - 1
U32_MASK = (1 << 32) - 1
U64_MASK = (1 << 64) - 1

# enum kvm_mr_change
KVM_MR_CREATE = "KVM_MR_CREATE"
KVM_MR_DELETE = "KVM_MR_DELETE"
KVM_MR_MOVE = "KVM_MR_MOVE"
KVM_MR_FLAGS_ONLY = "KVM_MR_FLAGS_ONLY"

# KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2's flags (include/uapi/linux/kvm.h)
KVM_DIRTY_LOG_MANUAL_PROTECT_ENABLE = 1 << 0
KVM_DIRTY_LOG_INITIALLY_SET = 1 << 1
