"""Shadow paging, EPT off: KVM shadows the guest's own page tables (arch/x86/kvm/mmu/mmu.c
and paging_tmpl.h's `FNAME()` functions): unsync pages, write tracking, the vtlb, and a
running guest on it."""
