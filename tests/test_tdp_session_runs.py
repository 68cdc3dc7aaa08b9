"""`TdpSession.run(n)` is `step()` n times, and the CPU's remembered walks (`CpuWalks`)
always end where the walk from the root ends, through faults, zaps, races, dirty logging
and NX huge page recovery."""

from __future__ import annotations

import random

import pytest
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import preset
from mmuscope.engine.layouts.layout import Layout, layout_from_ram_regions
from mmuscope.engine.mmu.params import TdpMmuParams
from mmuscope.engine.mmu.tdp.session import TdpSession

MIB = 1 << 20
# 8 MiB of RAM in four 2M regions: every region is walked again and again
TINY = layout_from_ram_regions(
    "tiny", [("ram", 0, 6 * MIB, False), ("ram2", 6 * MIB, 2 * MIB, False)]
)
RUNS = [
    ("kernbench", 1, 0.0, None, "roots"),
    ("dirty", 2, 0.2, TINY, "slow"),
    ("churn", 3, 0.3, TINY, "fast"),
    ("netperf", 4, 0.0, None, "roots"),
]


def session(workload: str, seed: int, layout: Layout | None = None, **kw: object) -> TdpSession:
    params = TdpMmuParams(nx_huge_pages="on", nx_huge_pages_recovery_period_ms=2)
    return TdpSession(
        layout or preset("pc-4g"), workload=workload, seed=seed, params=params,
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def state(s: TdpSession) -> tuple[object, ...]:
    pages = sorted((sp.seq, sp.gfn, sp.role.level, tuple(sp.spt)) for sp in s.mmu.pages.pages())
    return s.steps, s.exits, dict(s.results), dict(s.mmu.stat), pages


@pytest.mark.parametrize(("workload", "seed", "race_rate", "layout", "zap"), RUNS)
def test_run_is_step_n_times(
    workload: str, seed: int, race_rate: float, layout: Layout | None, zap: str
) -> None:
    runs: list[tuple[list[Event], tuple[object, ...]]] = []
    for chunks in ([1] * 900, [7, 400, 93, 400]):
        s = session(workload, seed, layout, race_rate=race_rate)
        events: list[Event] = []
        s.subscribe(events.append)
        for chunk in chunks:
            if s.steps == 500:
                s.zap(zap)  # page tables unlinked between two runs
            if chunk == 1:
                s.step()
            else:
                s.run(chunk)
        s.audit()
        runs.append((events, state(s)))
    (stepped, stepped_state), (chunked, chunked_state) = runs
    assert stepped_state == chunked_state
    assert stepped == chunked and len(stepped) > 100


@pytest.mark.parametrize(("workload", "seed", "race_rate", "layout", "zap"), RUNS)
def test_the_cpus_walk_ends_where_the_walk_from_the_root_ends(
    workload: str, seed: int, race_rate: float, layout: Layout | None, zap: str
) -> None:
    s = session(workload, seed, layout, race_rate=race_rate)
    gfns = random.Random(seed).sample(range(8 * MIB >> 12), 64)
    for step in range(900):
        if step == 500:
            s.zap(zap)
        last = s.step()
        for vcpu, root in s.mmu.roots.items():
            if root.role.invalid:
                continue
            for gfn in [*gfns, last.access.gpa >> 12]:
                sp, index = s.mmu.last_spte(root, gfn)
                assert s.cpu.leaf_spte(root, gfn) == sp.spt[index], (step, vcpu, gfn)


def test_the_last_step_is_returned() -> None:
    a, b = session("kernbench", 5), session("kernbench", 5)
    steps = [a.step() for _ in range(50)]
    assert b.run(50) == steps[-1] and b.run(0) is None
