"""The shadow-MMU screen's paging modes (`p`): which MMU the guest faults on — EPT with
the TDP MMU (today's default, `tdp_mmu=Y`), EPT with direct shadow pages (`tdp_mmu=N`),
shadow paging (EPT off: the guest's own page tables shadowed), and the 2011 eras without
MMIO sptes, and EPT without A/D bits (access tracking, no PML); the sessions and steps of
the three MMUs.  Each change of mode, and of the EPT huge-page (`H`), host backing (`B`:
4K pages, THP 2M, hugetlbfs 1G; `host_pfn_mapping_level`), NX huge pages (`X`), PML
(`M`: kvm_intel's `enable_pml`, engine/mmu/dirty_log.py) and vtlb (`V`) switches, starts
a new guest (shadow_mmu.py; the memslot-search and PTE_LIST_EXT threads, docs/kvm.md
§4-§6)."""

from __future__ import annotations

from mmuscope.engine.mmu.direct.session import MmuSession, MmuStep
from mmuscope.engine.mmu.shadow.session import ShadowSession, ShadowStep
from mmuscope.engine.mmu.tdp.session import TdpSession, TdpStep

#: `p` cycles these: (name, spte config, MMU: "tdp" | "direct" | "shadow")
PAGING_MODES = (
    ("EPT, TDP MMU (today's default)", "ept", "tdp"),
    ("EPT, direct pages (tdp_mmu=N)", "ept", "direct"),
    ("shadow paging (EPT off)", "shadow", "shadow"),
    ("shadow paging, 2011: no MMIO sptes", "2011-shadow-no-mmio-cache", "shadow"),
    ("EPT, 2011: no MMIO sptes (direct pages, tdp_mmu=N)", "2011-no-mmio-cache", "direct"),
    # no PML without EPT A/D bits: dirty logging and aging both go through fast_page_fault
    ("EPT without A/D bits (kvm_intel.eptad=0), TDP MMU", "ept-no-ad", "tdp"),
)
Session = MmuSession | ShadowSession | TdpSession
SESSION_KINDS: dict[str, type[Session]] = {
    "tdp": TdpSession,
    "direct": MmuSession,
    "shadow": ShadowSession,
}
Step = MmuStep | ShadowStep | TdpStep


def era_2011(paging: int) -> bool:
    """The 2011 modes: no MMIO sptes and no mmu_valid_gen yet (added in 2013 by the
    fast-zap thread)."""
    return PAGING_MODES[paging][1].startswith("2011")
