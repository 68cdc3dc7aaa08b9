"""A guest running on the direct MMU: exits only where the CPU's walk fails, MMIO cached
once, churn zapping and staling, all deterministic for a seed."""

from __future__ import annotations

import pytest
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import preset
from mmuscope.engine.mmu.direct.session import MMU_WORKLOADS, MmuSession
from mmuscope.engine.mmu.spte import RetPf


@pytest.mark.parametrize("workload", MMU_WORKLOADS)
def test_sessions_are_deterministic_and_consistent(workload: str) -> None:
    runs = []
    for _ in range(2):
        session = MmuSession(preset("pc-4g"), workload=workload, seed=4)
        steps = [session.step() for _ in range(300)]
        session.audit()
        runs.append([(s.access, s.exited, s.ret, s.update) for s in steps])
    assert runs[0] == runs[1]


def test_a_touched_page_does_not_exit_again() -> None:
    session = MmuSession(preset("pc-4g"), seed=1)
    first = session.step()
    assert first.exited and first.ret == RetPf.FIXED
    assert not session.needs_exit(first.access)  # present now: the CPU walks it alone


def test_netperf_caches_mmio_and_then_only_emulates() -> None:
    session = MmuSession(preset("pc-4g"), workload="netperf", seed=2)
    events: list[Event] = []
    session.subscribe(events.append)
    session.run(400)
    names = [e.name for e in events]
    assert names.count("mark_mmio_spte") == 2  # the doorbell and the LAPIC, once each
    # a hit is handle_mmio_page_fault, or the vCPU's MMIO info (vcpu_match_mmio_gpa)
    hits = names.count("handle_mmio_page_fault") + session.mmu.mmio_info.gpa_hits
    assert hits > 100 and session.mmu.mmio_info.gpa_hits > 20
    assert session.results["EMULATE"] == hits + 2
    session.audit()


def test_churn_makes_generations_advance_and_zaps() -> None:
    session = MmuSession(preset("pc-4g"), workload="churn", seed=3)
    events: list[Event] = []
    session.subscribe(events.append)
    gen = session.vm.generation()
    steps = session.run(500)
    assert steps is not None
    assert session.vm.generation() > gen
    assert any(e.name == "kvm_mmu_zap_all_fast" for e in events)  # every DELETE
    session.audit()


def test_unknown_workload() -> None:
    with pytest.raises(ValueError, match="unknown workload"):
        MmuSession(preset("pc-4g"), workload="fork")
