"""The shadow MMU with direct pages: EPT/NPT on, `tdp_mmu=N` (arch/x86/kvm/mmu/mmu.c:
`direct_map()`, its rmaps, MMIO sptes and prefetch), and a running guest on it."""
