"""What the shadow-MMU screen's side panels say: the fault bar (the last VM exit, how
much of its walk is revealed, its `RET_PF_*`), the counters of `kvm->arch` and
`kvm->stat` (mmu_valid_gen and its era, memslot lookups and generation, the MMIO info
cache, shadow paging's guest walks, unsync pages and `prev_roots`; the level of the last
fault and why and the NX huge page splits, and with direct pages the sptes
`direct_pte_prefetch` mapped with A clear), and the guest walk with the per-vCPU vtlb
(the memslot-search, PTE_LIST_EXT and fast-zap threads, docs/kvm.md §4-§6)."""

from __future__ import annotations

from mmuscope.engine.mmu.direct.session import MmuSession, MmuStep
from mmuscope.engine.mmu.dirty_log import dirty_logging_words
from mmuscope.engine.mmu.mapping_level import LEVEL_NAMES
from mmuscope.engine.mmu.role import ACC_EXEC_MASK, ACC_USER_MASK, ACC_WRITE_MASK
from mmuscope.engine.mmu.shadow.session import ShadowSession, ShadowStep
from mmuscope.engine.mmu.tdp.session import TdpSession, TdpStep

from ..widgets.fit import show_title
from ..widgets.mmu_panels import GuestPanel
from .shadow_mmu_modes import Session, Step, era_2011
from .tdp_view import tdp_counter_lines

#: guest page-table writes (kvm->stat): unsync pages, emulated pte writes, flooded pages
_PT_WRITES = ("mmu_unsync", "mmu_pte_write", "mmu_flooded")


def fault_words(step: Step | None, shown: int, path_len: int) -> str:
    """The fault bar: the last VM exit, the levels of its walk revealed, its result."""
    if step is None:
        return "no VM exit yet: space plays, n runs to the next exit, z zaps fast"
    access = step.access
    kind = "write" if access.write else "read"
    ret = f"RET_PF_{step.ret.name}" if step.ret is not None else "no exit"
    walked = f"{min(shown, path_len)}/{path_len} levels"
    words = f"vcpu {access.vcpu} {kind} {access.label}: {walked} → {ret}"
    if isinstance(step, ShadowStep) and step.guest:
        words += f", #PF injected: guest {step.guest}"
    if isinstance(step, (MmuStep, TdpStep)) and step.fast:
        words += f" · {step.fast}"
    return words + (f" · {step.update}" if step.update else "")


def valid_gen_text(session: Session, paging: int) -> str:
    """mmu_valid_gen and its era; none in 2011 (added in 2013 by the fast-zap
    thread, docs/kvm.md §4.4)."""
    if era_2011(paging):
        return "none (added in 2013)"
    return f"{session.mmu.pages.mmu_valid_gen} ({session.mmu.pages.gen_era} era)"


def counter_lines(session: Session, last: Step | None, paging: int) -> list[tuple[str, str]]:
    """The `kvm->arch` panel: the MMU's counters, the TDP MMU's own or the shadow MMU's."""
    pages = session.mmu.pages
    if isinstance(session, TdpSession):
        lines = tdp_counter_lines(session)
        lines += [(f"RET_PF_{n}", str(c)) for n, c in sorted(session.results.items())]
        lines += fast_path_lines(session)
        return lines + [(name, str(v)) for name, v in session.mmu.stat.items() if v]
    vcpu = last.access.vcpu if last is not None else 0
    lines = [
        ("mmu_valid_gen", valid_gen_text(session, paging)),
        ("accesses / exits", f"{session.steps} / {session.exits}"),
    ]
    if isinstance(session, ShadowSession):
        vtlbs, stat = session.mmu.vtlbs, session.mmu.pages.stat
        lines += [
            ("guest walks", str(session.guest_walks)),
            ("vtlb walks saved", str(vtlbs.walks_saved) if vtlbs else "vtlb off"),
            ("emulator translations", str(session.emulator_walks)),
            ("cr3 loads / processes", f"{session.cr3_loads} / {len(session.os.processes)}"),
            # guest page-table writes (kvm->stat): unsync pages, emulated pte writes
            ("unsync/pte_wr/flooded", " · ".join(str(stat[n]) for n in _PT_WRITES)),
            (f"prev_roots vcpu {vcpu}", _prev_roots(session, vcpu)),
        ]
    if isinstance(session, MmuSession):
        lines += fault_level_lines(session, last)
    elif isinstance(session, ShadowSession):
        lines += shadow_level_lines(session, last)
    lines += [
        ("memslot lookups", str(session.vm.memslot_lookups)),
        ("memslots generation", str(session.vm.generation())),
        ("pages used / max", f"{pages.n_used_mmu_pages} / {pages.n_max_mmu_pages}"),
    ]
    lines += [(f"RET_PF_{name}", str(count)) for name, count in sorted(session.results.items())]
    lines += fast_path_lines(session)
    lines += [(name, str(value)) for name, value in session.mmu.stat.items() if value]
    info = session.mmu.mmio_info
    lines += [
        (f"mmio info vcpu {vcpu}", info.describe(vcpu, session.vm.generation())),
        ("mmio info hits", f"gva {info.gva_hits} gpa {info.gpa_hits}"),
    ]
    return lines


def fault_level_lines(session: MmuSession, last: Step | None) -> list[tuple[str, str]]:
    """The direct MMU's fault levels (mapping_level.py): the host's backing, the level of
    the last fault and the kernel's reason, NX huge pages, and direct_pte_prefetch."""
    mmu = session.mmu
    params = mmu.params
    nx = f"{mmu.pages.stat['nx_lpage_splits']} · nx_huge_pages={'on' if mmu.nx else 'off'}"
    lines = [
        ("host pages", f"{LEVEL_NAMES[params.host_level]} (host_pfn_mapping_level)"),
        ("nx_lpage_splits", nx),
        ("prefetched (A clear)", str(mmu.prefetched) if mmu.pte_prefetch else "off"),
    ]
    if isinstance(last, MmuStep) and last.exited:
        access = last.access
        gfn = access.gpa >> 12
        as_id = session.vm.vcpu(access.vcpu).as_id  # the tree itself: no lookup counted
        slot = session.vm.memslot_set(as_id).gfn_tree.search(gfn)
        lines.append(("level (why)", mmu.why_level(slot, gfn, access.fetch)))
    return lines


def shadow_level_lines(session: ShadowSession, last: Step | None) -> list[tuple[str, str]]:
    """Shadow paging's fault levels (engine/mmu/shadow/mmu.py): NX huge page splits, and the level
    of the last fault with the kernel's reason (`walker.level` first)."""
    mmu = session.mmu
    nx = f"{mmu.pages.stat['nx_lpage_splits']} · nx_huge_pages={'on' if mmu.nx else 'off'}"
    if session.kernel is not None:  # H: guest 2M leaves (engine/mmu/shadow/kernel.py), B: the host
        nx += f" · host {LEVEL_NAMES[mmu.params.host_level]}"
    lines = [("nx_lpage_splits", nx)]
    if isinstance(last, ShadowStep) and last.exited:
        access = last.access
        why = mmu.why_level(access.vcpu, access.cr3, access.gva, access.fetch)
        lines.append(("level (why)", why))
    return lines


def show_guest(panel: GuestPanel, session: Session, last: Step | None) -> None:
    """The guest panel: shadow paging's last guest walk and the vCPU's vtlb."""
    if not isinstance(session, ShadowSession):
        show_title(panel, "guest walk · vtlb")
        panel.show_tdp()
        return
    vcpu = last.access.vcpu if last is not None else 0
    walk_title = "guest walk (kvm_mmu_paging_element)"
    if isinstance(last, ShadowStep):
        walk_title = f"walk of {last.access.label}"
    vtlbs = session.mmu.vtlbs
    if vtlbs is None:
        entries, vtlb_title = [], "vtlb off (V turns it on)"
    else:
        vtlb = vtlbs[vcpu]
        entries = [(e.page_number, e.frame_number, _access(e.access)) for e in vtlb.entries()]
        vtlb_title = (
            f"vtlb vcpu {vcpu}: {len(entries)}/{len(vtlb.slots)} · hits {vtlb.hits} "
            f"misses {vtlb.misses}"
        )
    show_title(panel, "guest walk · vtlb")
    panel.show(session.last_walk, walk_title, entries, vtlb_title)


def _access(access: int) -> str:
    """ACC_* bits as letters, r always (a present translation is readable)."""
    return "r" + "".join(
        letter if access & mask else "-"
        for letter, mask in (("w", ACC_WRITE_MASK), ("u", ACC_USER_MASK), ("x", ACC_EXEC_MASK))
    )


def _prev_roots(session: ShadowSession, vcpu: int) -> str:
    """The vCPU's cached roots (fast_pgd_switch), newest first, by the cr3 they shadow."""
    mmu = session.mmu
    if not mmu.prev_roots_enabled:
        return "none before 4.19"
    cached = [f"{sp.gfn:#x}" for sp in mmu.prev_roots.get(vcpu, []) if sp is not None]
    return (" ".join(cached) or "empty") + f" · hits {mmu.stat['prev_roots_hits']}"


def fast_path_lines(session: Session) -> list[tuple[str, str]]:
    """The counters panel's lines about the fast path and dirty logging."""
    if isinstance(session, ShadowSession):
        return [
            ("fast_page_fault", "never (FNAME(page_fault))"),
            ("dirty log by", "write protection (no EPT: no PML)"),
        ]
    by = ("dirty log by", dirty_logging_words(session.dirty_log.pml))
    fast = session.mmu.fast_pf
    if fast is None:
        return [("fast_page_fault", "none before 3.6 (2012)"), by]
    slot = session.logged_slot()
    logging = "off (L)"
    if slot.dirty_logging:
        bits = session.dirty_log.dirty.get((slot.as_id, slot.id), set())
        logging = f"slot {slot.id} · {len(bits)} dirty"
    return [
        ("dirty logging", logging),
        by,
        # pf_fast itself is with the other kvm->stat counters
        ("fast_pf lost/restored", f"{fast.lost_cmpxchg} / {fast.restored}"),
    ]
