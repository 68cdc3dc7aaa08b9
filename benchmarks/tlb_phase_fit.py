"""Fit the TLB flush model's one free parameter on one cell of the PV-flush thread's table,
`.venv/bin/python benchmarks/tlb_phase_fit.py [--json] [--step-ms 0.25]`.

TLB_PHASE_SPREAD_NS (engine/costs.py) is how far apart the 8 pCPUs' CFS rotations start:
the thread does not give it.  This script runs the 2-VM `baseline` cell of the
`tlb_flush` bench table (engine/claims/tlb_flush.py: the same duration, seeds 1-5, every
other cost at central) for each spread on a grid, and prints the spread whose mean over
the seeds comes nearest to the thread's 3979.50 records/s: first on a 1 ms grid from 0
to one CFS period, then on a finer grid around the best.  The value goes into
engine/costs.py by hand; the bench table marks that cell `fitted` and predicts every
other one.  No other cell is looked at here.
"""

from __future__ import annotations

import argparse
import json

from mmuscope.engine.claims.tlb_flush import FITTED_CELL, FULL_NS, cell_over_seeds
from mmuscope.engine.tlbflush.config import NS_PER_MS, SCHED_LATENCY_NS


def fit(step_ns: int, duration_ns: int) -> tuple[int, dict[int, float]]:
    vms, protocol, target = FITTED_CELL
    tried: dict[int, float] = {}

    def mean_at(spread: int) -> float:
        if spread not in tried:
            tried[spread] = cell_over_seeds(vms, protocol, duration_ns, spread)[0]
        return tried[spread]

    coarse = range(0, SCHED_LATENCY_NS + NS_PER_MS, NS_PER_MS)
    best = min(coarse, key=lambda s: abs(mean_at(s) - target))
    fine = range(max(0, best - NS_PER_MS), best + NS_PER_MS + 1, step_ns)
    best = min(fine, key=lambda s: (abs(mean_at(s) - target), s))
    return best, tried


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--step-ms", type=float, default=0.25)
    args = parser.parse_args()
    best, tried = fit(int(args.step_ms * NS_PER_MS), FULL_NS)
    if args.json:
        print(json.dumps({"best_ns": best, "tried": {str(k): v for k, v in tried.items()}}))
        return 0
    for spread, mean in sorted(tried.items()):
        mark = "  <- best" if spread == best else ""
        print(f"{spread / NS_PER_MS:7.2f} ms  {mean:9.2f} records/s{mark}")
    print(f"TLB_PHASE_SPREAD_NS = {best:_}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
