"""x86 KVM's MMU: sptes, shadow pages, rmaps, MMIO caching, zapping (docs/kvm.md
§3-§6)."""

# spte.py first, whichever module a caller names: spte.py re-exports mmio_spte.py, which
# needs spte.py's layout constants, and only that order resolves the cycle (importing
# engine.mmu.mmio_spte, or a module importing it before spte, failed in a fresh interpreter).
from . import spte as spte
