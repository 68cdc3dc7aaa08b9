"""x86 KVM's MMU: sptes, shadow pages, rmaps, MMIO caching, zapping (docs/kvm.md §3-§6).

What every MMU shares lies here; `rmap/`, `tdp/`, `direct/`, `shadow/` and `guest/` hold
one part each.
"""
