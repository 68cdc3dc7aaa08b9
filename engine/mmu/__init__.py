"""x86 KVM's MMU: sptes, shadow pages, rmaps, MMIO caching, zapping (kvm-reference §3-§6)."""
