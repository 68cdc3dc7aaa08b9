"""The replay model's invariants (`ReplayModel.audit`): page copies add up to what was
created, adopted, zapped, freed and evicted; the per-level tallies are the pages'; the
gfn index, the TDP and MMIO tables and the per-(name, cpu, pid) counts agree with each
other and with the caps."""

from __future__ import annotations

from ..mmu.spte import MMIO_SPTE_GEN_MASK
from .model import ReplayModel
from .records import MAX_COUNT_KEYS, MAX_FLIPS, NONE, classify, gfns_per_spte


def audit_model(model: ReplayModel) -> None:
    """Raise AssertionError when `model` contradicts itself."""
    max_pages, max_tdp, max_mmio = model.limits
    assert len(model.pages) <= max_pages and len(model.tdp) <= max_tdp
    assert len(model.mmio) <= max_mmio and len(model.flips) <= MAX_FLIPS
    copies = 0
    for key, page in model.pages.items():
        assert page.key == key and page.copies >= 1 and 0 < page.seq <= model.seq, page
        assert 0 <= page.epoch <= model.flips_total, page
        copies += page.copies
    live = model.created + model.adopted - model.zapped - model.tdp_freed - model.evicted_pages
    live -= model.tdp_roots_replaced + model.tdp_unlinked
    assert copies == live, (copies, live)
    again = ReplayModel()
    for page in model.pages.values():
        again._tally(page, page.copies)
    tallies = (again.level_copies, again.level_epochs, again.level_gens)
    assert tallies == (model.level_copies, model.level_epochs, model.level_gens)
    for level in model.level_copies:
        obsolete = (
            p.copies for p in model.pages.values() if p.level == level and model.is_obsolete(p)
        )
        assert model.level_obsolete(level) == sum(obsolete), level
    indexed = [key for keys in model.by_gfn.values() for key in keys]
    assert len(indexed) == len(set(indexed)), "a page indexed twice"
    assert set(indexed) == {k for k, p in model.pages.items() if p.level is not None}
    for (gfn, level), keys in model.by_gfn.items():
        assert keys and all(
            model.pages[k].gfn == gfn and model.pages[k].level == level for k in keys
        )
    for (as_id, level, gfn), tdp in model.tdp.items():
        assert tdp.kind != NONE and tdp.kind == classify(tdp.spte, level), (gfn, tdp)
        assert gfn % gfns_per_spte(level) == 0 and as_id >= 0, (as_id, level, gfn)
    for gfn, spte in model.mmio.items():
        assert spte.gfn == gfn and 0 <= spte.gen <= MMIO_SPTE_GEN_MASK
        assert 0 <= spte.epoch <= model.flips_total
    assert sum(model.counts.values()) == model.events
    assert len(model.counts) <= MAX_COUNT_KEYS + len({k[0] for k in model.counts})
    totals = model.totals()
    for name, attr in (("kvm_exit", "exits"), ("kvm_entry", "entries")):
        per_vcpu = sum(getattr(v, attr) for v in model.vcpus.values())
        assert per_vcpu <= totals.get(name, 0), (name, per_vcpu)
    assert model.flips_total >= len(model.flips)
    if model.flips:
        assert model.mmu_valid_gen is not None
