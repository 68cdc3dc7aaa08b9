"""`TdpSession.run(n)` is `step()` n times, and the memo of where the CPU's walks ended
(`walk_cache`) changes nothing a user sees: the same events, exits and final state as a
session that walks its root from the top on every access."""

from __future__ import annotations

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


def session(
    workload: str, seed: int, walk_cache: bool, layout: Layout | None = None, **kw: object
) -> TdpSession:
    params = TdpMmuParams(nx_huge_pages="on", nx_huge_pages_recovery_period_ms=2)
    return TdpSession(
        layout or preset("pc-4g"), workload=workload, seed=seed, params=params,
        walk_cache=walk_cache, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def state(s: TdpSession) -> tuple[object, ...]:
    pages = sorted((sp.seq, sp.gfn, sp.role.level, tuple(sp.spt)) for sp in s.mmu.pages.pages())
    return s.steps, s.exits, dict(s.results), dict(s.mmu.stat), pages


@pytest.mark.parametrize(
    ("workload", "seed", "race_rate", "layout", "zap"),
    [
        ("kernbench", 1, 0.0, None, "roots"),
        ("dirty", 2, 0.2, TINY, "slow"),
        ("churn", 3, 0.3, TINY, "fast"),
        ("netperf", 4, 0.0, None, "roots"),
    ],
)  # fmt: skip
def test_run_and_the_walk_memo_change_nothing(
    workload: str, seed: int, race_rate: float, layout: Layout | None, zap: str
) -> None:
    runs: list[tuple[list[Event], tuple[object, ...]]] = []
    for walk_cache, chunks in ((False, [1] * 900), (True, [1] * 900), (True, [7, 400, 93, 400])):
        s = session(workload, seed, walk_cache, layout, race_rate=race_rate)
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
    bare, memo, chunked = runs
    assert bare[1] == memo[1] == chunked[1]
    assert bare[0] == memo[0] == chunked[0] and len(bare[0]) > 100


def test_the_last_step_is_returned() -> None:
    a, b = session("kernbench", 5, True), session("kernbench", 5, True)
    steps = [a.step() for _ in range(50)]
    assert b.run(50) == steps[-1] and b.run(0) is None
