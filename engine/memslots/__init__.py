"""Memslots: `struct kvm_memory_slot`, the `struct kvm_memslots` of an address space,
`KVM_SET_USER_MEMORY_REGION` with the kernel's checks and errnos (virt/kvm/kvm_main.c), the
VM that holds them, and the guest accesses that look them up."""
