"""The MMU under EPT/NPT (6.18): the TDP MMU (arch/x86/kvm/mmu/tdp_mmu.c, tdp_iter.c;
`tdp_mmu=Y`, the default since 5.15), and a running guest on it."""
