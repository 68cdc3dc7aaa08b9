"""What the tests that read a simulated TDP MMU's trace back share: the trace replayed
into the replay model (audited), and the check that every spte the model shows is the live
one at its (as_id, level, first gfn) (`kvm_tdp_mmu_spte_changed`, `fast_page_fault`)."""

from __future__ import annotations

from collections.abc import Iterable

from mmuscope.engine.mmu.tdp.pages import TdpMmuPage
from mmuscope.engine.replay.model import ReplayModel
from mmuscope.engine.replay.records import NONE, classify
from mmuscope.engine.trace.lines import parse_trace


def replay_audited(text: str) -> ReplayModel:
    """`text` (trace-cmd report lines) replayed into a new ReplayModel, audited."""
    model = ReplayModel()
    for event in parse_trace(text)[0]:
        model.apply(event)
    model.audit()
    return model


def assert_shown_sptes_are_live(model: ReplayModel, pages: Iterable[TdpMmuPage]) -> None:
    """The sptes the trace shows are the live ones.  Only those: the children of a split
    huge page are written before the table is linked, so no tracepoint shows them."""
    live = {}
    for sp in pages:
        level = sp.role.level
        for index, spte in enumerate(sp.spt):
            if classify(spte, level) != NONE and not sp.role.invalid:
                live[(sp.role.smm, level, sp.gfn + (index << 9 * (level - 1)))] = spte
    shown = {key: tdp.spte for key, tdp in model.tdp.items()}
    assert {k: v for k, v in live.items() if k in shown} == shown
