"""The TDP MMU's common fault (`TdpMmu._map_common`: a leaf installed in an empty spte of a
table already on the path) is the general `kvm_tdp_mmu_map()` walk done in one call: with
it on and off (`common_fault`), the same seeded runs give the same events, the same
printed trace and the same final tables, stats and exits, and audit clean."""

from __future__ import annotations

import pytest
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import preset
from mmuscope.engine.layouts.layout import Layout, layout_from_ram_regions
from mmuscope.engine.mmu.params import TdpMmuParams
from mmuscope.engine.mmu.tdp.session import TdpSession
from mmuscope.tui.simulate_cli import LinePrinter

MIB = 1 << 20
TINY = layout_from_ram_regions(
    "tiny", [("ram", 0, 6 * MIB, False), ("ram2", 6 * MIB, 2 * MIB, False)]
)


def run(
    common: bool, workload: str, seed: int, layout: Layout, zap: str, **kw: object
) -> tuple[list[Event], list[str], tuple[object, ...]]:
    s = TdpSession(layout, workload=workload, seed=seed, **kw)  # type: ignore[arg-type]
    s.mmu.common_fault = common
    events: list[Event] = []
    lines: list[str] = []
    s.subscribe(events.append)
    LinePrinter().listen(s, lines.append)  # type: ignore[arg-type]
    s.run(700)
    s.zap(zap)  # page tables unlinked: walks from the root, RCU-pending tables
    s.run(900)
    s.audit()
    pages = sorted((sp.seq, sp.gfn, sp.role.level, tuple(sp.spt)) for sp in s.mmu.pages.pages())
    dirty = {key: sorted(gfns) for key, gfns in s.dirty_log.dirty.items()}
    state = (s.steps, s.exits, dict(s.results), dict(s.mmu.stat), pages, dirty)
    return events, lines, state


@pytest.mark.parametrize(
    ("workload", "seed", "layout", "zap", "kw"),
    [
        ("kernbench", 1, preset("pc-4g"), "roots", {}),
        ("dirty", 2, TINY, "slow", {}),
        ("churn", 3, TINY, "fast", {}),
        ("migrate", 4, preset("pc-4g"), "fast", {}),
        ("kernbench", 5, TINY, "roots", {"params": TdpMmuParams(host_level=1)}),
        ("kernbench", 6, TINY, "fast", {"params": TdpMmuParams(nx_huge_pages="on")}),
        ("dirty", 7, TINY, "roots", {"race_rate": 0.3}),
        ("kernbench", 8, preset("q35-16g"), "fast", {"smi_every": 200}),
    ],
)  # fmt: skip
def test_the_common_fault_is_the_general_walk(
    workload: str, seed: int, layout: Layout, zap: str, kw: dict[str, object]
) -> None:
    general = run(False, workload, seed, layout, zap, **kw)
    common = run(True, workload, seed, layout, zap, **kw)
    assert common[2] == general[2]
    assert common[0] == general[0] and len(general[0]) > 100
    assert common[1] == general[1]


def test_the_common_fault_is_taken() -> None:
    """Most faults of kernbench are the common one (else the test above tests nothing)."""
    s = TdpSession(preset("pc-4g"), workload="kernbench", seed=1)
    taken = 0
    common = s.mmu._map_common

    def counted(*args: object) -> bool:
        nonlocal taken
        done = common(*args)  # type: ignore[arg-type]
        taken += done
        return done

    s.mmu._map_common = counted  # type: ignore[method-assign]
    s.run(3000)
    assert taken > s.exits // 2


@pytest.mark.parametrize(
    ("workload", "seed", "zap"), [("kernbench", 9, "fast"), ("dirty", 10, "roots")]
)
def test_the_tight_hit_loop_is_the_general_one(
    workload: str, seed: int, zap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cpu_run`'s loop for RAM draws on one root (`TIGHT_HITS`) gives the same events,
    printed lines and final state as every access through the general loop."""
    from mmuscope.engine.mmu.tdp import cpu as tdp_cpu

    tight = run(True, workload, seed, TINY, zap)
    monkeypatch.setattr(tdp_cpu, "TIGHT_HITS", False)
    general = run(True, workload, seed, TINY, zap)
    assert tight[2] == general[2]
    assert tight[0] == general[0] and len(general[0]) > 100
    assert tight[1] == general[1]
