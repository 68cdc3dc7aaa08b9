"""Today's MMU under EPT/NPT: the TDP MMU (arch/x86/kvm/mmu/tdp_mmu.c, tdp_iter.c;
`tdp_mmu=Y`, the default since 5.15), and a running guest on it."""
