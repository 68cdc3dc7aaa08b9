"""What the shadow-MMU screen shows of the TDP MMU (EPT, tdp_mmu=Y) beyond the pages by
level: the roots on `tdp_mmu_roots` with their reference counts and validity, the page
tables waiting for an RCU grace period (their sptes frozen at FROZEN_SPTE, 6.10+, or
REMOVED_SPTE before: named by the config's era), the counters
of `kvm->arch` and `kvm->stat` the TDP MMU keeps, and the words for a zap of today (roots
invalidated, then zapped one by one with mmu_lock held for read)."""

from __future__ import annotations

from mmuscope.engine.mmu.spte import FROZEN_SPTE
from mmuscope.engine.mmu.tdp.pages import RCU_GRACE_PERIOD_NS, TdpMmuPage, TdpMmuPages
from mmuscope.engine.mmu.tdp.session import TdpSession


def tdp_notes(session: object) -> list[str]:
    """Lines under the pages: each root and its count, then the RCU-pending tables."""
    if not isinstance(session, TdpSession):
        return []
    pages = session.mmu.pages
    lines = []
    for root in pages.tdp_mmu_roots:
        users = sorted(v for v, r in session.mmu.roots.items() if r is root)
        state = "invalid" if root.role.invalid else "valid"
        if root.tdp_mmu_scheduled_root_to_zap:
            state += ", to zap"
        vcpus = ",".join(map(str, users)) or "none"
        lines.append(
            f"tdp root #{root.seq} as {root.as_id}: tdp_mmu_root_count {root.root_count} "
            f"({state}; vCPUs {vcpus})"
        )
    pending = list(pages.rcu_pending.values())
    if pending:
        frozen = pages.rcu_frozen
        name = "FROZEN_SPTE" if pages.frozen == FROZEN_SPTE else "REMOVED_SPTE"
        left = max(0, RCU_GRACE_PERIOD_NS - (session.mmu.now_ns - pending[0].rcu_queued_ns))
        lines.append(
            f"RCU pending: {len(pending)} page tables, {frozen} sptes frozen ({name}); "
            f"grace period ends in {left // 1000} us of guest time"
        )
    return lines


def rcu_page(session: object) -> TdpMmuPage | None:
    """The newest page table waiting for RCU (shown when no fault path is selected)."""
    if not isinstance(session, TdpSession) or not session.mmu.pages.rcu_pending:
        return None
    return list(session.mmu.pages.rcu_pending.values())[-1]


def tdp_counter_lines(session: TdpSession) -> list[tuple[str, str]]:
    mmu, pages = session.mmu, session.mmu.pages
    valid = sum(not r.role.invalid for r in pages.tdp_mmu_roots)
    return [
        ("mmu_valid_gen", f"{pages.mmu_valid_gen} (shadow pages only)"),
        ("accesses / exits", f"{session.steps} / {session.exits}"),
        ("memslot lookups", str(session.vm.memslot_lookups)),
        ("memslots generation", str(session.vm.generation())),
        ("tdp_mmu_roots", f"{len(pages.tdp_mmu_roots)} ({valid} valid)"),
        ("SecPageTables (pages)", str(pages.secondary_pagetables)),
        ("tdp_mmu_pages", tdp_mmu_pages_words(pages)),
        ("RCU pending", str(len(pages.rcu_pending))),
        ("sptes frozen (zaps)", str(mmu.frozen_seen)),
    ]


def tdp_mmu_pages_words(pages: TdpMmuPages) -> str:
    """`kvm->arch.tdp_mmu_pages`: counted only under CONFIG_KVM_PROVE_MMU since 6.15
    (docs/kvm.md §12); the linked page tables are the SecPageTables line above."""
    if pages.counts_tdp_mmu_pages:
        return str(pages.tdp_mmu_pages)
    return "not counted"


def tdp_zap_caption(kind: str, done: int, hold: int, left: int) -> str:
    if kind == "slow zap":
        return (
            f"slow zap (kvm_tdp_mmu_zap_all): mmu_lock held for write over all {hold} page "
            "tables; every vCPU waits"
        )
    return (
        f"{kind}: every root invalid; zapping the next invalid root ({hold} page tables, "
        f"{done} freed so far) with mmu_lock held for read, the vCPUs already on new roots; "
        f"{left} more roots"
    )
