"""What a screen shows, as named values: the probe a scenario step's `expect` checks and its
caption's `{...}` fields format (engine/scenarios/checks.py).

Every screen reports its kvm_stat totals as `events.<name>`; each screen adds the numbers
and states of its own panels, read from the same objects the panels draw (so a check
says what a student sees, not what the model could know).  Names are dotted and use
`_` where the screen prints `-` (`cost.size_sorted.bare`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mmuscope.engine.scenarios.checks import Value

if TYPE_CHECKING:
    from textual.screen import Screen

Probe = dict[str, Value]


def probe(screen: Screen[Any]) -> Probe:
    """The values `screen` shows now (its pending events counted first)."""
    flush = getattr(screen, "flush_events", None)
    if flush is not None:
        flush(force=True)
    values: Probe = {}
    panel = getattr(screen, "events_panel", None)
    if panel is not None:
        values.update({f"events.{n}": t for n, t in panel.counters.totals.items()})
    for kind in type(screen).__mro__:
        reader = READERS.get(kind.__name__)
        if reader is not None:
            values.update(reader(screen))
            break
    return values


def _key(name: str) -> str:
    return name.replace("-", "_")


def _memslots(screen: Any) -> Probe:
    explorer = screen.explorer
    values: Probe = {
        "strategy": _key(explorer.lookup),
        "workload": explorer.workload.mix.name if hasattr(explorer.workload.mix, "name") else "",
        "slots": len(explorer.slots()),
        "generation": explorer.generation,
    }
    for name, cost in explorer.costs.items():
        key = f"cost.{_key(name)}"
        values.update({
            f"{key}.lookups": cost.lookups,
            f"{key}.bare": round(cost.bare_mean, 2),
            f"{key}.cached": round(cost.cached_mean, 2),
            f"{key}.miss": round(cost.miss_mean, 1),
            f"{key}.misses": cost.misses,
            f"{key}.worst": cost.worst,
        })  # fmt: skip
    names = {slot.id: explorer.slot_name(slot) for slot in explorer.slots()}
    hits = explorer.slot_hits
    values["hits.total"] = sum(hits.values())
    values["hits.devices"] = sum(n for i, n in hits.items() if names.get(i, "").startswith("dev"))
    values["hits.ram"] = sum(n for i, n in hits.items() if names.get(i, "").startswith("ram"))
    return values


def _mmu(screen: Any) -> Probe:
    from mmuscope.engine.mmu.shadow.session import ShadowSession
    from mmuscope.engine.mmu.spte import MMIO_SPTE_GEN_MASK, get_mmio_spte_generation, is_mmio_spte

    from .screens.shadow_mmu import PAGING_MODES

    session, pages = screen.session, screen.session.mmu.pages
    cfg = session.mmu.cfg
    values: Probe = {
        "paging": PAGING_MODES[screen.paging][1],
        "workload": session.workload,
        "steps": session.steps,
        "exits": session.exits,
        "memslot_lookups": session.vm.memslot_lookups,
        "generation": session.vm.generation(),
        "generation.as1": session.vm.generation(1) if session.vm.address_spaces > 1 else -1,
        "generation.mmio": session.vm.generation() & MMIO_SPTE_GEN_MASK,
        "mmu_valid_gen": pages.mmu_valid_gen,
        "pages_used": pages.n_used_mmu_pages,
        "pages_max": pages.n_max_mmu_pages,
        "zap.holds": len(pages.lock_holds),
        "zap.pages": sum(pages.lock_holds),
        "zap.longest": max(pages.lock_holds, default=0),
        "zap.kind": screen.zap_kind,
    }
    values["mmu"] = PAGING_MODES[screen.paging][2]  # tdp, direct or shadow
    values.update(_tdp(session))
    values.update(_fast(session))
    values.update({f"results.{n}": c for n, c in session.results.items()})
    for name in ("EMULATE", "FIXED", "INVALID", "RETRY", "SPURIOUS"):
        values.setdefault(f"results.{name}", 0)
    values.update({f"stat.{n}": v for n, v in session.mmu.stat.items()})
    values["prefetched"] = getattr(session.mmu, "prefetched", 0)  # direct_pte_prefetch
    values["prefetch.lookups"] = getattr(session.mmu, "prefetch_lookups", 0)
    gen = session.vm.generation() & MMIO_SPTE_GEN_MASK
    mmio = [s for sp in pages.pages() for s in sp.spt if s and is_mmio_spte(cfg, s)]
    values["mmio_sptes"] = len(mmio)
    values["mmio_sptes.stale"] = sum(get_mmio_spte_generation(s) != gen for s in mmio)
    last = screen.last
    values["last.gpa"] = getattr(last.access, "gpa", -1) if last is not None else -1
    values["last.ret"] = last.ret.name if last is not None and last.ret is not None else ""
    values["last.fast"] = bool(getattr(last, "fast", ""))
    if isinstance(session, ShadowSession):
        vtlbs = session.mmu.vtlbs
        each = list(vtlbs.by_vcpu.values()) if vtlbs is not None else []
        values.update({
            "vtlb.on": vtlbs is not None,
            "vtlb.hits": sum(v.hits for v in each),
            "vtlb.misses": sum(v.misses for v in each),
            "vtlb.inserts": sum(v.inserts for v in each),
            "vtlb.flushes": sum(v.flushes for v in each),
            "vtlb.entries": sum(len(v.entries()) for v in each),
            "vtlb.walks_saved": vtlbs.walks_saved if vtlbs is not None else 0,
            "guest_walks": session.guest_walks,
            "emulator_walks": session.emulator_walks,
            "cr3_loads": session.cr3_loads,
        })  # fmt: skip
    return values


def _tdp(session: Any) -> Probe:
    """The TDP MMU's roots (count, validity), RCU-pending tables and frozen sptes."""
    from mmuscope.engine.mmu.tdp.session import TdpSession

    if not isinstance(session, TdpSession):
        return {}
    pages = session.mmu.pages
    roots = pages.tdp_mmu_roots
    return {
        "tdp.roots": len(roots),
        "tdp.valid_roots": sum(not r.role.invalid for r in roots),
        "tdp.root_count": max((r.root_count for r in roots), default=0),
        "tdp.pages": pages.secondary_pagetables,  # linked page tables (SecPageTables)
        "tdp.rcu_pending": len(pages.rcu_pending),
        "tdp.frozen": pages.rcu_frozen,
    }


def _fast(session: Any) -> Probe:
    """fast_page_fault and dirty logging (fast_pf.py), as the counters panel shows them:
    the logged slot's dirty pages, lost cmpxchgs, access-tracked sptes restored."""
    fast = getattr(session.mmu, "fast_pf", None)
    if fast is None:
        return {"fast.on": False}
    slot = session.logged_slot()
    bits = session.dirty_log.dirty.get((slot.as_id, slot.id), set())
    return {
        "fast.on": True,
        "fast.lost_cmpxchg": fast.lost_cmpxchg,
        "fast.restored": fast.restored,
        "dirty.logging": slot.dirty_logging,
        "dirty.slot": slot.id,
        "dirty.pages": len(bits),
    }


def _rmaps(screen: Any) -> Probe:
    from mmuscope.engine.mmu.rmap.stat import bucket_kernel, bucket_labels, bucket_log2

    lab = screen.lab
    head = lab.head(0)
    count = head.count() if head is not None else 0
    row = dict(lab.histogram(log2=screen.log2).rows())["4K"]
    values: Probe = {
        "era": lab.era,
        "pages": lab.pages,
        "children": len(lab.children),
        "buckets": "log2" if screen.log2 else "ffs",
        "chain.sptes": count,
        "chain.ffs_label": bucket_labels()[bucket_kernel(count)],
        "chain.log2_label": bucket_labels()[bucket_log2(count)],
        "chain.descs": len(head.descs) if head is not None else 0,
        "chain.bytes": head.memory_bytes() if head is not None else 0,
        "chain.lines": head.cache_lines_touched_by_walk() if head is not None else 0,
    }
    values.update({f"bucket{i}": n for i, n in enumerate(row)})
    return values


def _tlb(screen: Any) -> Probe:
    sim = screen.sim
    m, c = sim.metrics(), sim.counters
    return {
        "protocol": screen.protocol_name,
        "vms": screen.vms,
        "warm": sim.now > sim.cfg.warmup_ns,
        "ms": sim.now / 1e6,
        "records_per_s": m.records_per_s,
        "running": m.running,
        "spinning": m.spinning,
        "preempted": m.preempted,
        "halted": m.halted,
        "flushes": c.flushes,
        "ipis": c.ipis,
        "waits_on_preempted": c.waits_on_preempted,
        "flags": c.flags,
        "kicks": c.kicks,
        "halts": c.halts,
        "early_returns": c.early_returns,
    }


def _power(screen: Any) -> Probe:
    run, record = screen.run, screen.record
    era = run.machine.era
    values: Probe = {f"c.{n}": v for n, v in run.counters.as_dict().items()}
    values.update({
        "era": era.name,
        "guest_keys": len(era.guest_keys),
        "host_keys": len(era.host_keys),
        "last.outcome": record.outcome if record is not None else "",
        "last.purpose": str(record.purpose) if record is not None else "",
    })  # fmt: skip
    return values


READERS: dict[str, Callable[[Any], Probe]] = {
    "MemslotsScreen": _memslots,
    "ShadowMmuScreen": _mmu,
    "RmapScreen": _rmaps,
    "TlbScreen": _tlb,
    "PowerScreen": _power,
}
