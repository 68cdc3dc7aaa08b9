"""x86 KVM's reverse map from a gfn to its sptes (docs/kvm.md §3,
arch/x86/kvm/mmu/mmu.c), in three parts, whose public names are all importable from here:

* pte_list_desc.py: `struct pte_list_desc` era by era (`PTE_LIST_EXT` 3, 15, 14 and the
  6.4 layout with `tail_count`), its layout and the cache lines a walk touches;
* head.py: `struct kvm_rmap_head` (`KvmRmapHead`): `pte_list_add`,
  `pte_list_remove`, `pte_list_count`, the zap, `__rmap_add`'s recycling, the costs
  counted, and its audit;
* val.py: `kvm_rmap_head.val` stored as the kernel stores it (`RmapVal`, the
  `rmap_val_*` functions), for callers that hold many rmaps.
"""

from __future__ import annotations

from .head import (
    RMAP_RECYCLE_THRESHOLD,
    KvmRmapHead,
    RmapCounters,
    RmapHead,
    rmap_add,
    rmap_add_would_recycle,
)
from .pte_list_desc import (
    CACHE_LINE,
    DEFAULT_ERA,
    ERAS,
    PteListDesc,
    PteListEra,
    check_sptep,
    desc_cache_lines,
)
from .val import (
    RmapVal,
    rmap_val_add,
    rmap_val_count,
    rmap_val_head,
    rmap_val_remove,
    rmap_val_sptes,
)

__all__ = [
    "CACHE_LINE",
    "DEFAULT_ERA",
    "ERAS",
    "RMAP_RECYCLE_THRESHOLD",
    "KvmRmapHead",
    "PteListDesc",
    "PteListEra",
    "RmapCounters",
    "RmapHead",
    "RmapVal",
    "check_sptep",
    "desc_cache_lines",
    "rmap_add",
    "rmap_add_would_recycle",
    "rmap_val_add",
    "rmap_val_count",
    "rmap_val_head",
    "rmap_val_remove",
    "rmap_val_sptes",
]
