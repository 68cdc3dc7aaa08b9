"""Guest sessions' speed: accesses per second of each workload under EPT (`MmuSession`)
and shadow paging (`ShadowSession`), as ratios against a dict insert per access measured
in the same run, plus the vtlb's count of guest walks saved (the memslot-search thread).

    .venv/bin/python benchmarks/session_speed.py [--accesses N] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from mmuscope.engine.layouts import preset
from mmuscope.engine.mmu.direct.session import MMU_WORKLOADS, MmuSession
from mmuscope.engine.mmu.shadow.session import SHADOW_WORKLOADS, ShadowSession

REPEAT = 3


def best_rate(run: Callable[[], object], count: int) -> float:
    best = float("inf")
    for _ in range(REPEAT):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return count / best


def dict_inserts(count: int) -> Callable[[], object]:
    def run() -> object:
        table: dict[int, int] = {}
        for i in range(count):
            table[i * 4096] = i
        return table

    return run


def session_run(make: Callable[[], MmuSession | ShadowSession], count: int) -> Callable[[], object]:
    return lambda: make().run(count)


def vtlb_walks(config: str, vtlb: bool, count: int) -> dict[str, int]:
    session = ShadowSession(preset("pc-4g"), workload="netperf", spte_config=config, vtlb=vtlb)
    session.run(count)
    saved = session.mmu.vtlbs.walks_saved if session.mmu.vtlbs else 0
    return {"exits": session.exits, "guest_walks": session.guest_walks, "saved": saved,
            "memslot_lookups": session.vm.memslot_lookups}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accesses", type=int, default=20_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n = args.accesses
    base = best_rate(dict_inserts(n), n)
    rows: dict[str, object] = {"dict_inserts_per_s": base}
    layout = preset("pc-4g")
    for workload in MMU_WORKLOADS:
        rate = best_rate(session_run(lambda w=workload: MmuSession(layout, workload=w), n), n)
        rows[f"ept_{workload}_vs_dict_insert"] = rate / base
    for workload in SHADOW_WORKLOADS:
        rate = best_rate(session_run(lambda w=workload: ShadowSession(layout, workload=w), n), n)
        rows[f"shadow_{workload}_vs_dict_insert"] = rate / base
    for config in ("shadow", "2011-shadow-no-mmio-cache"):
        for vtlb in (False, True):
            name = f"netperf_{config}_{'vtlb' if vtlb else 'no_vtlb'}"
            rows[name] = vtlb_walks(config, vtlb, 3000)
    if args.json:
        print(json.dumps(rows))
        return
    print(f"guest sessions, {n:,} accesses (best of {REPEAT}); baseline {base:,.0f} dict inserts/s")
    for name, value in rows.items():
        if isinstance(value, float) and name != "dict_inserts_per_s":
            print(f"  {name:<36} x{value:.4f}  ({value * base:,.0f} accesses/s)")
        elif isinstance(value, dict):
            print(f"  {name:<36} {value}")


if __name__ == "__main__":
    main()
