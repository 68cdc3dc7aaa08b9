"""`kvm_rmap_head.val` stored as the kernel stores it, for callers that hold many rmaps
(the fault path, a memslot's `arch.rmap[]`): absent is an empty head (val 0), a bare int
is the single sptep (bit 0 clear), and a `KvmRmapHead` is made only when a second sptep
arrives (val = desc | 1); it keeps its desc down to one entry, as the kernel does
(docs/kvm.md §3, arch/x86/kvm/mmu/mmu.c `pte_list_add`/`pte_list_remove`).
"""

from __future__ import annotations

from typing import TypeAlias

from ...errors import AuditError
from .head import KvmRmapHead
from .pte_list_desc import DEFAULT_ERA, PteListEra, check_sptep

RmapVal: TypeAlias = int | KvmRmapHead
"""`kvm_rmap_head.val` decoded: the single sptep (bit 0 clear), or a head holding descs."""


def rmap_val_add(val: RmapVal | None, sptep: int, era: str | PteListEra = DEFAULT_ERA) -> RmapVal:
    """`pte_list_add` on a stored `val` (None is 0, empty): 0 -> the bare sptep; one sptep
    -> a `KvmRmapHead` whose desc holds both (1 -> many); a head -> its own `add`."""
    if val is None:
        check_sptep(sptep)
        return sptep
    if isinstance(val, KvmRmapHead):
        val.add(sptep)
        return val
    head = KvmRmapHead(era)
    head.add(val)
    head.add(sptep)
    return head


def rmap_val_remove(val: RmapVal | None, sptep: int) -> RmapVal | None:
    """`pte_list_remove` on a stored `val`; None when the rmap is empty afterwards (the
    caller drops the entry).  A head that still holds sptes keeps its desc."""
    if isinstance(val, KvmRmapHead):
        val.remove(sptep)
        return None if val.is_empty else val
    if val != sptep:
        held = "empty" if val is None else f"{val:#x}"
        raise AuditError(f"pte_list_remove: {sptep:#x} not in rmap ({held})")
    return None


def rmap_val_sptes(val: RmapVal | None) -> list[int]:
    """The sptes of a stored `val`, in `for_each_rmap_spte` order."""
    if val is None:
        return []
    return list(val) if isinstance(val, KvmRmapHead) else [val]


def rmap_val_count(val: RmapVal | None) -> int:
    """`pte_list_count` of a stored `val`."""
    if val is None:
        return 0
    return val.count() if isinstance(val, KvmRmapHead) else 1


def rmap_val_head(val: RmapVal | None, era: str | PteListEra = DEFAULT_ERA) -> KvmRmapHead:
    """A `KvmRmapHead` for a stored `val`: the head itself, or a new head holding the single
    sptep (a copy: changing it does not change the stored `val`)."""
    if isinstance(val, KvmRmapHead):
        return val
    head = KvmRmapHead(era)
    if val is not None:
        head.add(val)
    return head
